/*
 * verbs_qp.c - queue pairs of the verbs provider: creation, the state
 * machine (checked with ferry_qp_transition_ok before ibverbs sees it),
 * attribute translation, and wrapping QPs that librdmacm created.
 *
 * A QP moved to RTR with FERRY_QP_AV after ferry_qp_exchange gets its
 * address vector from the peer's exchanged LID / GID (verbs_exchange.c),
 * whatever the caller put in ah_attr.  Without an exchange before, the QP
 * is joined out of band, as ibverbs programs do it: dest_qp_num, rq_psn,
 * sq_psn and the caller's address vector go to the device as given (on
 * iWARP, whose QPs only the CM connects, that is EOPNOTSUPP).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "verbs-internal.h"

_Static_assert((int)FERRY_QP_DEST_QPN == (int)IBV_QP_DEST_QPN && (int)FERRY_QP_AV == (int)IBV_QP_AV &&
	       (int)FERRY_QP_CAP == (int)IBV_QP_CAP && (int)FERRY_QP_STATE == (int)IBV_QP_STATE,
	       "QP attribute mask bits differ from ibverbs");
_Static_assert((int)FERRY_QPS_ERR == (int)IBV_QPS_ERR && (int)FERRY_QPS_SQE == (int)IBV_QPS_SQE &&
	       (int)FERRY_MTU_4096 == (int)IBV_MTU_4096 && (int)FERRY_QPT_RC == (int)IBV_QPT_RC &&
	       (int)FERRY_QPT_UC == (int)IBV_QPT_UC,
	       "QP states, MTUs or types differ from ibverbs");

/* Every attribute bit ferry knows, for ibv_query_qp. */
#define VERBS_QP_ATTR_ALL ((FERRY_QP_DEST_QPN << 1) - 1)
/* Alternate paths and migration are not supported: dropped from masks. */
#define VERBS_QP_ATTR_IGNORED (FERRY_QP_ALT_PATH | FERRY_QP_PATH_MIG_STATE)

void verbs_qp_init_attr_to_ibv(const struct ferry_qp_init_attr *in,
			       struct ibv_qp_init_attr *out)
{
	memset(out, 0, sizeof(*out));
	out->qp_context = in->qp_context;
	out->send_cq = to_vcq(in->send_cq)->ibv;
	out->recv_cq = to_vcq(in->recv_cq)->ibv;
	out->cap.max_send_wr = in->cap.max_send_wr;
	out->cap.max_recv_wr = in->cap.max_recv_wr;
	out->cap.max_send_sge = in->cap.max_send_sge;
	out->cap.max_recv_sge = in->cap.max_recv_sge;
	out->cap.max_inline_data = in->cap.max_inline_data;
	out->srq = verbs_srq_ibv(in->srq);
	out->qp_type = (enum ibv_qp_type)in->qp_type;	/* RC, UC, UD: ibverbs' values */
	out->sq_sig_all = in->sq_sig_all;
}

static struct verbs_qp *verbs_qp_new(struct ferry_pd *pd, struct ibv_qp *ibv,
				     const struct ferry_qp_init_attr *attr)
{
	struct verbs_qp *qp = calloc(1, sizeof(*qp));

	if (!qp)
		return NULL;
	pthread_mutex_init(&qp->lock, NULL);
	ibv->qp_context = qp;	/* how its async events find it (verbs_srq.c) */
	qp->ibv = ibv;
	qp->peer.sgid_index = -1;
	qp->qp.context = pd->context;
	qp->qp.qp_context = attr->qp_context;
	qp->qp.pd = pd;
	qp->qp.send_cq = attr->send_cq;
	qp->qp.recv_cq = attr->recv_cq;
	qp->qp.handle = ibv->handle;
	qp->qp.qp_num = ibv->qp_num;
	qp->qp.state = FERRY_QPS_RESET;
	qp->qp.qp_type = attr->qp_type;
	return qp;
}

struct ferry_qp *verbs_create_qp(struct ferry_pd *pd, struct ferry_qp_init_attr *attr)
{
	struct verbs_device *vdev = to_vctx(pd->context)->vdev;
	struct ibv_qp_init_attr init;
	struct verbs_qp *qp;
	struct ibv_qp *ibv;

	/* Providers may round a too-large request down; ibverbs callers expect EINVAL. */
	if (attr->cap.max_inline_data > verbs_device_max_inline(vdev)) {
		errno = EINVAL;
		return NULL;
	}
	verbs_qp_init_attr_to_ibv(attr, &init);
	errno = 0;
	ibv = verbs_ptr(ibv_create_qp(to_vpd(pd)->ibv, &init), EINVAL);
	if (!ibv) {
		ferry_debug("verbs: ibv_create_qp: %m");
		return NULL;
	}
	qp = verbs_qp_new(pd, ibv, attr);
	if (!qp) {
		ibv_destroy_qp(ibv);
		errno = ENOMEM;
		return NULL;
	}
	return &qp->qp;
}

struct ferry_qp *verbs_qp_wrap(struct ferry_pd *pd, struct ibv_qp *ibv,
			       const struct ferry_qp_init_attr *attr)
{
	struct verbs_qp *qp = verbs_qp_new(pd, ibv, attr);

	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->cm_owned = true;
	verbs_qp_sync_state(&qp->qp);	/* librdmacm may have moved it to INIT */
	return &qp->qp;
}

void verbs_qp_unwrap(struct ferry_qp *fqp)
{
	struct verbs_qp *qp = to_vqp(fqp);

	pthread_mutex_destroy(&qp->lock);
	free(qp);
}

int verbs_destroy_qp(struct ferry_qp *fqp)
{
	struct verbs_qp *qp = to_vqp(fqp);

	if (qp->cm_owned) {
		ferry_info("QP %u belongs to a CM id: destroy it through the CM", fqp->qp_num);
		return ERR(EBUSY);
	}
	if (verbs_ret(ibv_destroy_qp(qp->ibv)))
		return -1;
	pthread_mutex_destroy(&qp->lock);
	free(qp);
	return 0;
}

static bool verbs_qp_on_iwarp(const struct verbs_qp *qp)
{
	return to_vctx(qp->qp.context)->vdev->iwarp;
}

bool verbs_qp_write_imm_ok(struct ferry_qp *qp)
{
	return !verbs_qp_on_iwarp(to_vqp(qp));
}

/*
 * The QP's state as the device sees it (it may have gone to ERR by
 * itself); on iWARP, where the device does not say, ferry's record.
 */
static enum ferry_qp_state verbs_qp_device_state(struct verbs_qp *qp)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr attr;

	if (verbs_qp_on_iwarp(qp) || ibv_query_qp(qp->ibv, &attr, IBV_QP_STATE, &init))
		return qp->qp.state;
	return (enum ferry_qp_state)attr.qp_state;
}

struct ibv_qp *verbs_ibv_qp(struct ferry_qp *qp)
{
	return to_vqp(qp)->ibv;
}

int verbs_qp_sync_state(struct ferry_qp *fqp)
{
	struct verbs_qp *qp = to_vqp(fqp);

	pthread_mutex_lock(&qp->lock);
	__atomic_store_n(&fqp->state, verbs_qp_device_state(qp), __ATOMIC_RELEASE);
	pthread_mutex_unlock(&qp->lock);
	return 0;
}

void verbs_qp_set_state(struct ferry_qp *fqp, enum ferry_qp_state state)
{
	struct verbs_qp *qp = to_vqp(fqp);

	pthread_mutex_lock(&qp->lock);
	__atomic_store_n(&fqp->state, state, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&qp->lock);
}

/* Values the state-machine table does not check; 0 or an errno value. */
static int verbs_qp_check_attr(struct verbs_qp *qp, const struct ferry_qp_attr *a,
			       int mask, enum ferry_qp_state cur, enum ferry_qp_state next)
{
	if (next != FERRY_QPS_RTR || cur != FERRY_QPS_INIT || !(mask & FERRY_QP_AV))
		return 0;
	if (!qp->peer.known && verbs_qp_on_iwarp(qp)) {
		ferry_info("QP %u: an iWARP QP is connected by the CM, not joined out of band",
			   qp->qp.qp_num);
		return EOPNOTSUPP;
	}
	if (!qp->peer.known)
		return 0;	/* out of band: the caller's address vector */
	if ((mask & FERRY_QP_DEST_QPN) && a->dest_qp_num != qp->peer.qpn) {
		ferry_info("QP %u: dest_qp_num %u, but the peer is QP %u",
			   qp->qp.qp_num, a->dest_qp_num, qp->peer.qpn);
		return EINVAL;
	}
	return 0;
}

/* The address vector of the exchanged peer, with the user's SL and rate. */
static void verbs_qp_peer_av(struct verbs_qp *qp, const struct ferry_ah_attr *user,
			     struct ibv_ah_attr *av)
{
	static const union ibv_gid zero_gid;

	memset(av, 0, sizeof(*av));
	av->dlid = qp->peer.lid;
	av->sl = user->sl;
	av->src_path_bits = user->src_path_bits;
	av->static_rate = user->static_rate;
	av->port_num = user->port_num ? user->port_num : to_vctx(qp->qp.context)->vdev->port;
	if (memcmp(&qp->peer.gid, &zero_gid, sizeof(zero_gid)) != 0 &&
	    qp->peer.sgid_index >= 0) {
		av->is_global = 1;
		av->grh.dgid = qp->peer.gid;
		av->grh.sgid_index = (uint8_t)qp->peer.sgid_index;
		av->grh.hop_limit = VERBS_HOP_LIMIT;
	}
}

/* The path MTU both ports can carry: never above either's active MTU. */
static enum ibv_mtu verbs_qp_path_mtu(struct verbs_qp *qp, enum ferry_mtu want)
{
	struct verbs_device *vdev = to_vctx(qp->qp.context)->vdev;
	struct ibv_port_attr port;
	enum ibv_mtu mtu = (enum ibv_mtu)want;

	if (ibv_query_port(vdev->ibv, vdev->port, &port) == 0 && port.active_mtu < mtu)
		mtu = port.active_mtu;
	if (qp->peer.known && qp->peer.mtu && qp->peer.mtu < mtu)
		mtu = (enum ibv_mtu)qp->peer.mtu;
	return mtu;
}

static void verbs_qp_attr_to_ibv(struct verbs_qp *qp, const struct ferry_qp_attr *a,
				 int mask, struct ibv_qp_attr *out)
{
	memset(out, 0, sizeof(*out));
	out->qp_state = (enum ibv_qp_state)a->qp_state;
	out->cur_qp_state = (enum ibv_qp_state)a->cur_qp_state;
	out->path_mtu = (mask & FERRY_QP_PATH_MTU) ? verbs_qp_path_mtu(qp, a->path_mtu) : 0;
	out->qkey = a->qkey;
	out->rq_psn = a->rq_psn;
	out->sq_psn = a->sq_psn;
	out->dest_qp_num = a->dest_qp_num;
	out->qp_access_flags = a->qp_access_flags;
	out->cap.max_send_wr = a->cap.max_send_wr;
	out->cap.max_recv_wr = a->cap.max_recv_wr;
	out->cap.max_send_sge = a->cap.max_send_sge;
	out->cap.max_recv_sge = a->cap.max_recv_sge;
	out->cap.max_inline_data = a->cap.max_inline_data;
	out->pkey_index = a->pkey_index;
	out->en_sqd_async_notify = a->en_sqd_async_notify;
	out->sq_draining = a->sq_draining;
	out->max_rd_atomic = a->max_rd_atomic;
	out->max_dest_rd_atomic = a->max_dest_rd_atomic;
	out->min_rnr_timer = a->min_rnr_timer;
	out->port_num = a->port_num;
	out->timeout = a->timeout;
	out->retry_cnt = a->retry_cnt;
	out->rnr_retry = a->rnr_retry;
	if ((mask & FERRY_QP_AV) && qp->peer.known)
		verbs_qp_peer_av(qp, &a->ah_attr, &out->ah_attr);
	else if (mask & FERRY_QP_AV)
		verbs_ah_to_ibv(&out->ah_attr, &a->ah_attr, to_vctx(qp->qp.context)->vdev->port);
}

int verbs_modify_qp(struct ferry_qp *fqp, struct ferry_qp_attr *attr, int mask)
{
	struct verbs_qp *qp = to_vqp(fqp);
	enum ferry_qp_state cur, next;
	struct ibv_qp_attr ia;
	int err;

	pthread_mutex_lock(&qp->lock);
	cur = verbs_qp_device_state(qp);
	if (!ferry_qp_next_state(cur, attr, mask, &next) ||
	    !ferry_qp_type_transition_ok(fqp->qp_type, cur, next, mask)) {
		err = EINVAL;
		goto out_unlock;
	}
	err = verbs_qp_check_attr(qp, attr, mask, cur, next);
	if (err)
		goto out_unlock;
	verbs_qp_attr_to_ibv(qp, attr, mask, &ia);
	if (verbs_ret(ibv_modify_qp(qp->ibv, &ia, mask & ~VERBS_QP_ATTR_IGNORED))) {
		err = errno;
		ferry_debug("verbs: QP %u: ibv_modify_qp %s -> %s: %m", fqp->qp_num,
			    ferry_qp_state_str(cur), ferry_qp_state_str(next));
		goto out_unlock;
	}
	if (next == FERRY_QPS_RESET)
		qp->peer.known = false;	/* as on shm: RESET forgets the connection */
	__atomic_store_n(&fqp->state, next, __ATOMIC_RELEASE);
out_unlock:
	pthread_mutex_unlock(&qp->lock);
	return err ? ERR(err) : 0;
}

static void verbs_cap_from_ibv(struct ferry_qp_cap *out, const struct ibv_qp_cap *in)
{
	out->max_send_wr = in->max_send_wr;
	out->max_recv_wr = in->max_recv_wr;
	out->max_send_sge = in->max_send_sge;
	out->max_recv_sge = in->max_recv_sge;
	out->max_inline_data = in->max_inline_data;
}

int verbs_query_qp(struct ferry_qp *fqp, struct ferry_qp_attr *a,
		   struct ferry_qp_init_attr *init)
{
	struct verbs_qp *qp = to_vqp(fqp);
	struct ibv_qp_init_attr ii;
	struct ibv_qp_attr ia;

	memset(&ia, 0, sizeof(ia));
	memset(&ii, 0, sizeof(ii));
	pthread_mutex_lock(&qp->lock);
	if (verbs_ret(ibv_query_qp(qp->ibv, &ia, VERBS_QP_ATTR_ALL, &ii))) {
		pthread_mutex_unlock(&qp->lock);
		return -1;
	}
	if (verbs_qp_on_iwarp(qp))
		ia.qp_state = (enum ibv_qp_state)fqp->state;	/* siw leaves it unset */
	__atomic_store_n(&fqp->state, (enum ferry_qp_state)ia.qp_state, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&qp->lock);

	memset(a, 0, sizeof(*a));
	a->qp_state = (enum ferry_qp_state)ia.qp_state;
	a->cur_qp_state = (enum ferry_qp_state)ia.qp_state;
	a->path_mtu = (enum ferry_mtu)ia.path_mtu;
	a->qkey = ia.qkey;
	a->rq_psn = ia.rq_psn;
	a->sq_psn = ia.sq_psn;
	a->dest_qp_num = ia.dest_qp_num;
	a->qp_access_flags = (unsigned int)ia.qp_access_flags;
	verbs_cap_from_ibv(&a->cap, &ii.cap);
	verbs_ah_from_ibv(&a->ah_attr, &ia.ah_attr);
	a->pkey_index = ia.pkey_index;
	a->en_sqd_async_notify = ia.en_sqd_async_notify;
	a->sq_draining = ia.sq_draining;
	a->max_rd_atomic = ia.max_rd_atomic;
	a->max_dest_rd_atomic = ia.max_dest_rd_atomic;
	a->min_rnr_timer = ia.min_rnr_timer;
	a->port_num = ia.port_num;
	a->timeout = ia.timeout;
	a->retry_cnt = ia.retry_cnt;
	a->rnr_retry = ia.rnr_retry;

	memset(init, 0, sizeof(*init));
	init->qp_context = fqp->qp_context;
	init->send_cq = fqp->send_cq;
	init->recv_cq = fqp->recv_cq;
	verbs_cap_from_ibv(&init->cap, &ii.cap);
	init->qp_type = fqp->qp_type;
	init->sq_sig_all = ii.sq_sig_all;
	return 0;
}
