/*
 * srq.c - the public calls of shared receive queues and of asynchronous
 * events: argument checks, then dispatch, as core.c does for the rest.
 *
 * The core keeps what libibverbs keeps above its providers: srq_context,
 * and the count of QPs created on an SRQ (srq->qp_refs, raised by
 * ferry_create_qp and lowered by ferry_destroy_qp), which makes destroying
 * a busy SRQ fail with EBUSY.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdlib.h>

#include "core-export.h"

/* Every bit of enum ferry_srq_attr_mask. */
#define SRQ_ATTR_ALL (FERRY_SRQ_MAX_WR | FERRY_SRQ_LIMIT)

struct ferry_srq *ferry_create_srq(struct ferry_pd *pd, struct ferry_srq_init_attr *init_attr)
{
	struct ferry_srq *srq;

	if (!pd || !init_attr || init_attr->attr.max_wr == 0) {
		errno = EINVAL;
		return NULL;
	}
	srq = pd->context->provider->create_srq(pd, init_attr);
	if (!srq)
		return NULL;
	srq->context = pd->context;
	srq->pd = pd;
	srq->srq_context = init_attr->srq_context;	/* the provider never sees it */
	srq->qp_refs = 0;
	return srq;
}

int ferry_modify_srq(struct ferry_srq *srq, struct ferry_srq_attr *attr, int attr_mask)
{
	if (!srq || !attr || (attr_mask & ~SRQ_ATTR_ALL))
		return ERR(EINVAL);
	if ((attr_mask & FERRY_SRQ_MAX_WR) && attr->max_wr == 0)
		return ERR(EINVAL);
	if (attr_mask == 0)
		return 0;
	return srq->context->provider->modify_srq(srq, attr, attr_mask);
}

int ferry_query_srq(struct ferry_srq *srq, struct ferry_srq_attr *attr_p)
{
	if (!srq || !attr_p)
		return ERR(EINVAL);
	return srq->context->provider->query_srq(srq, attr_p);
}

int ferry_destroy_srq(struct ferry_srq *srq)
{
	struct ferry_context *ctx;

	if (!srq)
		return ERR(EINVAL);
	if (__atomic_load_n(&srq->qp_refs, __ATOMIC_ACQUIRE) > 0)
		return ERR(EBUSY);
	ctx = srq->context;
	if (ctx->provider->destroy_srq(srq))
		return -1;
	ferry_async_forget(ctx, srq);
	return 0;
}

/** ferry_post_srq_recv - as ferry_post_recv: a malformed chain is rejected whole. */
int ferry_post_srq_recv(struct ferry_srq *srq, struct ferry_recv_wr *wr,
			struct ferry_recv_wr **bad_wr_p)
{
	struct ferry_recv_wr *ignored, *it;

	if (!bad_wr_p)
		bad_wr_p = &ignored;
	if (!srq) {
		*bad_wr_p = wr;
		return ERR(EINVAL);
	}
	for (it = wr; it; it = it->next) {
		if (it->num_sge < 0 || (!it->sg_list && it->num_sge > 0)) {
			*bad_wr_p = wr;
			return ERR(EINVAL);
		}
	}
	if (!wr)
		return 0;
	return srq->context->provider->post_srq_recv(srq, wr, bad_wr_p);
}

/* --- asynchronous events --- */

int ferry_get_async_event(struct ferry_context *context, struct ferry_async_event *event)
{
	if (!context || !event)
		return ERR(EINVAL);
	if (context->provider->get_async_event)
		return context->provider->get_async_event(context, event);
	if (!context->async)
		return ERR(EOPNOTSUPP);
	return ferry_async_get(context, event);
}

/*
 * ferry_ack_async_event - an event is a copy in ferry: the provider
 * acknowledged the device's own when it was got (verbs), and destroying an
 * object never waits for acknowledgements.  Kept for ibverbs programs.
 */
void ferry_ack_async_event(struct ferry_async_event *event)
{
	(void)event;
}

static const char *const srq_event_names[] = {
	[FERRY_EVENT_CQ_ERR]		  = "CQ error",
	[FERRY_EVENT_QP_FATAL]		  = "local work queue catastrophic error",
	[FERRY_EVENT_QP_REQ_ERR]	  = "invalid request local work queue error",
	[FERRY_EVENT_QP_ACCESS_ERR]	  = "local access violation work queue error",
	[FERRY_EVENT_COMM_EST]		  = "communication established",
	[FERRY_EVENT_SQ_DRAINED]	  = "send queue drained",
	[FERRY_EVENT_PATH_MIG]		  = "path migrated",
	[FERRY_EVENT_PATH_MIG_ERR]	  = "path migration request error",
	[FERRY_EVENT_DEVICE_FATAL]	  = "local catastrophic error",
	[FERRY_EVENT_PORT_ACTIVE]	  = "port active",
	[FERRY_EVENT_PORT_ERR]		  = "port error",
	[FERRY_EVENT_LID_CHANGE]	  = "LID change",
	[FERRY_EVENT_PKEY_CHANGE]	  = "P_Key change",
	[FERRY_EVENT_SM_CHANGE]		  = "SM change",
	[FERRY_EVENT_SRQ_ERR]		  = "SRQ catastrophic error",
	[FERRY_EVENT_SRQ_LIMIT_REACHED]	  = "SRQ limit reached",
	[FERRY_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
	[FERRY_EVENT_CLIENT_REREGISTER]	  = "client reregistration",
	[FERRY_EVENT_GID_CHANGE]	  = "GID table change",
	[FERRY_EVENT_WQ_FATAL]		  = "WQ fatal",
};

const char *ferry_event_type_str(enum ferry_event_type event)
{
	if ((unsigned int)event >= FERRY_ARRAY_SIZE(srq_event_names))
		return "unknown";
	return srq_event_names[event];
}

/* --- the stubs of a provider without SRQs --- */

struct ferry_srq *ferry_srq_unsupported_create(struct ferry_pd *pd,
					       struct ferry_srq_init_attr *attr)
{
	(void)pd;
	(void)attr;
	errno = EOPNOTSUPP;
	return NULL;
}

int ferry_srq_unsupported_modify(struct ferry_srq *srq, struct ferry_srq_attr *attr, int mask)
{
	(void)srq;
	(void)attr;
	(void)mask;
	return ERR(EOPNOTSUPP);
}

int ferry_srq_unsupported_query(struct ferry_srq *srq, struct ferry_srq_attr *attr)
{
	(void)srq;
	(void)attr;
	return ERR(EOPNOTSUPP);
}

int ferry_srq_unsupported_destroy(struct ferry_srq *srq)
{
	(void)srq;
	return ERR(EOPNOTSUPP);
}

int ferry_srq_unsupported_post(struct ferry_srq *srq, struct ferry_recv_wr *wr,
			       struct ferry_recv_wr **bad)
{
	(void)srq;
	*bad = wr;
	return ERR(EOPNOTSUPP);
}
