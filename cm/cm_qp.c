/*
 * cm_qp.c - the QP of a CM id: ferry_cm_create_qp / ferry_cm_destroy_qp,
 * and the INIT / RTR / RTS / ERR transitions the CM makes on the user's
 * behalf.  These run in the caller's thread (creation) or wherever the
 * transport connects the QP.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "cm-internal.h"

/* Remote rights a CM QP gets: the peer may write, read and run atomics. */
#define CM_QP_ACCESS (FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ | \
		      FERRY_ACCESS_REMOTE_ATOMIC)
/* Depth of a CQ the id makes itself when the attributes give none. */
#define CM_CQ_MIN_DEPTH 16

int cm_qp_to_init_default(struct cm_id_priv *id)
{
	struct ferry_qp_attr attr = {
		.qp_state = FERRY_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = CM_QP_ACCESS,
	};

	return ferry_modify_qp(id->id.qp, &attr, FERRY_QP_STATE | FERRY_QP_PKEY_INDEX |
			       FERRY_QP_PORT | FERRY_QP_ACCESS_FLAGS);
}

int cm_qp_to_rts(struct cm_id_priv *id, uint32_t dest_qpn,
		 const struct cm_qp_param *param)
{
	struct ferry_qp_attr attr = {
		.qp_state = FERRY_QPS_RTR,
		.path_mtu = FERRY_MTU_4096,
		.dest_qp_num = dest_qpn,
		.rq_psn = 0,
		.max_dest_rd_atomic = param->max_dest_rd_atomic,
		.min_rnr_timer = 12,	/* 0.64 ms, librdmacm's choice for RC */
		.ah_attr = { .port_num = 1 },
	};
	struct ferry_qp *qp = id->id.qp;

	if (ferry_modify_qp(qp, &attr, FERRY_QP_STATE | FERRY_QP_AV | FERRY_QP_PATH_MTU |
			    FERRY_QP_DEST_QPN | FERRY_QP_RQ_PSN |
			    FERRY_QP_MAX_DEST_RD_ATOMIC | FERRY_QP_MIN_RNR_TIMER) < 0) {
		ferry_info("cm: QP %u to RTR: %m", qp->qp_num);
		return -1;
	}
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_RTS;
	attr.sq_psn = 0;
	attr.timeout = 14;
	attr.retry_cnt = param->retry_count;
	attr.rnr_retry = param->rnr_retry_count;
	attr.max_rd_atomic = param->max_rd_atomic;
	if (ferry_modify_qp(qp, &attr, FERRY_QP_STATE | FERRY_QP_SQ_PSN | FERRY_QP_TIMEOUT |
			    FERRY_QP_RETRY_CNT | FERRY_QP_RNR_RETRY |
			    FERRY_QP_MAX_QP_RD_ATOMIC) < 0) {
		ferry_info("cm: QP %u to RTS: %m", qp->qp_num);
		return -1;
	}
	return 0;
}

void cm_qp_to_error(struct cm_id_priv *id)
{
	struct ferry_qp_attr attr = { .qp_state = FERRY_QPS_ERR };

	if (id->id.qp && ferry_modify_qp(id->id.qp, &attr, FERRY_QP_STATE) < 0)
		ferry_debug("cm: QP %u to ERR: %m", id->id.qp->qp_num);
}

/* The PD and CQs the QP needs that the caller did not give. */
static int cm_qp_make_resources(struct cm_id_priv *id, struct ferry_pd *pd,
				struct ferry_qp_init_attr *attr)
{
	struct ferry_context *ctx = id->id.verbs;

	id->id.pd = pd ? pd : ferry_alloc_pd(ctx);
	if (!id->id.pd)
		return -1;
	id->owns_pd = !pd;
	id->id.send_cq = attr->send_cq;
	id->id.recv_cq = attr->recv_cq;
	if (!id->id.send_cq) {
		int depth = (int)attr->cap.max_send_wr + CM_CQ_MIN_DEPTH;

		id->id.send_cq = ferry_create_cq(ctx, depth, NULL, NULL, 0);
		if (!id->id.send_cq)
			return -1;
		id->owns_send_cq = true;
	}
	if (!id->id.recv_cq) {
		int depth = (int)attr->cap.max_recv_wr + CM_CQ_MIN_DEPTH;

		id->id.recv_cq = ferry_create_cq(ctx, depth, NULL, NULL, 0);
		if (!id->id.recv_cq)
			return -1;
		id->owns_recv_cq = true;
	}
	return 0;
}

/* Destroy what ferry_cm_create_qp made besides the QP. */
static void cm_qp_release_resources(struct cm_id_priv *id)
{
	if (id->owns_recv_cq)
		ferry_destroy_cq(id->id.recv_cq);
	if (id->owns_send_cq)
		ferry_destroy_cq(id->id.send_cq);
	if (id->owns_pd)
		ferry_dealloc_pd(id->id.pd);
	id->owns_recv_cq = id->owns_send_cq = id->owns_pd = false;
	id->id.recv_cq = id->id.send_cq = NULL;
	id->id.pd = NULL;
}

/**
 * ferry_cm_create_qp - create the RC QP of @id on @pd (NULL: a PD of the
 * id's own) with the CQs of @qp_init_attr (NULL ones: CQs of the id's own,
 * stored in id->send_cq / id->recv_cq), and move it to INIT.  The CM moves
 * it to RTR and RTS while connecting.  The id must have a device: after
 * address resolution, or a connection request.
 */
int ferry_cm_create_qp(struct ferry_cm_id *id, struct ferry_pd *pd,
		       struct ferry_qp_init_attr *qp_init_attr)
{
	struct ferry_qp_init_attr attr;
	struct cm_id_priv *priv;

	if (!id || !qp_init_attr || qp_init_attr->qp_type != FERRY_QPT_RC ||
	    qp_init_attr->srq)
		return ERR(EINVAL);
	priv = to_cm_id(id);
	if (!id->verbs || !priv->tp || (pd && pd->context != id->verbs))
		return ERR(EINVAL);
	if (id->qp)
		return ERR(EEXIST);
	if (cm_qp_make_resources(priv, pd, qp_init_attr) < 0)
		goto err_release;
	attr = *qp_init_attr;
	attr.send_cq = id->send_cq;
	attr.recv_cq = id->recv_cq;
	id->qp = ferry_create_qp(id->pd, &attr);
	if (!id->qp)
		goto err_release;
	if (priv->tp->qp_init(priv) < 0)
		goto err_destroy_qp;
	qp_init_attr->cap = attr.cap;
	return 0;

err_destroy_qp:
	{
		int e = errno;

		ferry_destroy_qp(id->qp);
		id->qp = NULL;
		errno = e;
	}
err_release:
	{
		int e = errno;

		cm_qp_release_resources(priv);
		errno = e;
	}
	return -1;
}

static int cm_qp_detach(void *arg)
{
	struct cm_id_priv *id = arg;

	id->id.qp = NULL;
	return 0;
}

/**
 * ferry_cm_destroy_qp - destroy the id's QP, and the PD and CQs that
 * ferry_cm_create_qp made for it.
 */
void ferry_cm_destroy_qp(struct ferry_cm_id *id)
{
	struct cm_id_priv *priv;
	struct ferry_qp *qp;

	if (!id)
		return;
	priv = to_cm_id(id);
	qp = id->qp;
	/* The CM thread may be moving it to ERR right now: take it away there
	 * (if the CM thread owns the id). */
	if (qp && cm_id_call(priv, priv->tp, cm_qp_detach, priv) < 0)
		id->qp = NULL;
	if (qp && ferry_destroy_qp(qp) < 0)
		ferry_warn("cm: destroying the QP of an id: %m");
	cm_qp_release_resources(priv);
}
