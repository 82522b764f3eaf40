/*
 * verbs_srq.c - shared receive queues and asynchronous events of the
 * verbs provider: the device's own, translated.
 *
 * struct ferry_srq_attr is struct ibv_srq_attr member for member, and the
 * event types and SRQ mask bits have ibverbs' values (asserted below), so
 * attributes pass through whole.  The ibv objects' user pointers
 * (ibv_srq.srq_context, ibv_qp.qp_context) point at ferry's objects (the
 * caller's own contexts live in the ferry objects), which is how an event
 * finds its way back.  Events are acknowledged to libibverbs as soon as
 * they are copied out, so destroying an object never waits for
 * ferry_ack_async_event.  The contexts of one device share its async_fd:
 * an event goes to whichever of them asks first.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stddef.h>
#include <stdlib.h>

#include "verbs-internal.h"

_Static_assert(sizeof(struct ferry_srq_attr) == sizeof(struct ibv_srq_attr) &&
	       offsetof(struct ferry_srq_attr, srq_limit) == offsetof(struct ibv_srq_attr, srq_limit),
	       "ferry_srq_attr differs from ibv_srq_attr");
_Static_assert((int)FERRY_SRQ_MAX_WR == (int)IBV_SRQ_MAX_WR &&
	       (int)FERRY_SRQ_LIMIT == (int)IBV_SRQ_LIMIT,
	       "SRQ attribute mask bits differ from ibverbs");
_Static_assert((int)FERRY_EVENT_QP_FATAL == (int)IBV_EVENT_QP_FATAL &&
	       (int)FERRY_EVENT_COMM_EST == (int)IBV_EVENT_COMM_EST &&
	       (int)FERRY_EVENT_SRQ_LIMIT_REACHED == (int)IBV_EVENT_SRQ_LIMIT_REACHED &&
	       (int)FERRY_EVENT_QP_LAST_WQE_REACHED == (int)IBV_EVENT_QP_LAST_WQE_REACHED &&
	       (int)FERRY_EVENT_GID_CHANGE == (int)IBV_EVENT_GID_CHANGE,
	       "event types differ from ibverbs");

struct verbs_srq {
	struct ferry_srq srq;
	struct ibv_srq *ibv;		/* its srq_context points back here */
};

static inline struct verbs_srq *to_vsrq(struct ferry_srq *srq)
{
	return container_of(srq, struct verbs_srq, srq);
}

struct ibv_srq *verbs_srq_ibv(struct ferry_srq *srq)
{
	return srq ? to_vsrq(srq)->ibv : NULL;
}

struct ferry_srq *verbs_create_srq(struct ferry_pd *pd, struct ferry_srq_init_attr *init)
{
	struct ibv_srq_init_attr ia = { .attr = { init->attr.max_wr, init->attr.max_sge, 0 } };
	struct verbs_srq *srq = calloc(1, sizeof(*srq));

	if (!srq)
		return NULL;
	ia.srq_context = srq;
	errno = 0;
	srq->ibv = verbs_ptr(ibv_create_srq(to_vpd(pd)->ibv, &ia), EINVAL);
	if (!srq->ibv) {
		ferry_debug("verbs: ibv_create_srq: %m");
		free(srq);
		return NULL;
	}
	srq->srq.handle = srq->ibv->handle;
	init->attr.max_wr = ia.attr.max_wr;	/* what the device granted */
	init->attr.max_sge = ia.attr.max_sge;
	return &srq->srq;
}

int verbs_modify_srq(struct ferry_srq *srq, struct ferry_srq_attr *attr, int mask)
{
	return verbs_ret(ibv_modify_srq(to_vsrq(srq)->ibv, (struct ibv_srq_attr *)attr, mask));
}

int verbs_query_srq(struct ferry_srq *srq, struct ferry_srq_attr *attr)
{
	return verbs_ret(ibv_query_srq(to_vsrq(srq)->ibv, (struct ibv_srq_attr *)attr));
}

int verbs_destroy_srq(struct ferry_srq *fsrq)
{
	struct verbs_srq *srq = to_vsrq(fsrq);

	if (verbs_ret(ibv_destroy_srq(srq->ibv)))
		return -1;
	free(srq);
	return 0;
}

/* As verbs_post_recv: the chain in batches translated on the stack. */
int verbs_post_srq_recv(struct ferry_srq *fsrq, struct ferry_recv_wr *wr,
			struct ferry_recv_wr **bad)
{
	struct ibv_srq *ibv = to_vsrq(fsrq)->ibv;
	struct ferry_recv_wr *src[VERBS_WR_BATCH];
	struct ibv_recv_wr batch[VERBS_WR_BATCH];

	while (wr) {
		struct ibv_recv_wr *ibv_bad = NULL;
		int n = 0, ret, i;

		for (; wr && n < VERBS_WR_BATCH; wr = wr->next, n++) {
			src[n] = wr;
			batch[n] = (struct ibv_recv_wr){ .wr_id = wr->wr_id,
							 .sg_list = (struct ibv_sge *)wr->sg_list,
							 .num_sge = wr->num_sge };
			if (n > 0)
				batch[n - 1].next = &batch[n];
		}
		ret = ibv_post_srq_recv(ibv, batch, &ibv_bad);
		if (unlikely(ret)) {
			*bad = src[0];
			for (i = 0; i < n; i++)
				if (ibv_bad == &batch[i])
					*bad = src[i];
			ferry_debug("verbs: ibv_post_srq_recv: %d", ret);
			return verbs_ret(ret);
		}
	}
	return 0;
}

/* The ferry object an event names; false for one that is not ferry's. */
static bool verbs_event_element(const struct ibv_async_event *e, struct ferry_async_event *ev)
{
	switch (e->event_type) {
	case IBV_EVENT_CQ_ERR:
		ev->element.cq = &((struct verbs_cq *)e->element.cq->cq_context)->cq;
		return true;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		ev->element.srq = &((struct verbs_srq *)e->element.srq->srq_context)->srq;
		return true;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		if (!e->element.qp->qp_context)
			return false;	/* librdmacm's, not wrapped */
		ev->element.qp = &((struct verbs_qp *)e->element.qp->qp_context)->qp;
		return true;
	case IBV_EVENT_WQ_FATAL:
		return false;		/* ferry has no WQs */
	default:
		ev->element.port_num = e->element.port_num;
		return true;
	}
}

int verbs_get_async_event(struct ferry_context *ctx, struct ferry_async_event *ev)
{
	struct ibv_async_event e;
	bool ours;

	do {
		/* Blocks or fails with EAGAIN as the caller set async_fd. */
		if (ibv_get_async_event(verbs_ibv_context(ctx), &e))
			return -1;
		ours = verbs_event_element(&e, ev);
		ev->event_type = (enum ferry_event_type)e.event_type;
		ibv_ack_async_event(&e);
		if (!ours)
			ferry_debug("verbs: async event %s of no ferry object dropped",
				    ibv_event_type_str(e.event_type));
	} while (!ours);
	return 0;
}
