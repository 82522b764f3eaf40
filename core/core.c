/*
 * core.c - the public verbs-style API: argument checks, then dispatch.
 *
 * Everything here is independent of the transport.  Each call checks what it
 * can check without a provider (NULL objects, unknown flag bits, out-of-range
 * enums) and then calls the provider that owns the object, found through
 * obj->context->provider.  Providers therefore never see NULL objects or
 * enums out of range (core-export.h promises them that).
 *
 * The core also keeps what libibverbs keeps in its own core rather than in
 * its providers: cq->cq_context, and the count of CQs bound to a completion
 * channel (channel->refcnt), which makes destroying a busy channel fail with
 * EBUSY.
 *
 * Error convention (verbs.h): constructors return NULL and set errno, other
 * calls return -1 and set errno.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core-export.h"

/* Every bit of enum ferry_access_flags. */
#define CORE_ACCESS_ALL (FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE | \
			 FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_ATOMIC)

/* Every bit of enum ferry_qp_attr_mask. */
#define CORE_QP_ATTR_ALL ((FERRY_QP_DEST_QPN << 1) - 1)

/* Every bit of enum ferry_send_flags. */
#define CORE_SEND_FLAGS_ALL (FERRY_SEND_FENCE | FERRY_SEND_SIGNALED | \
			     FERRY_SEND_SOLICITED | FERRY_SEND_INLINE)

/* Devices listed when the table is first asked; grown on demand. */
#define CORE_DEVICES_INITIAL 8

/* --- devices and contexts --- */

/*
 * The transport FERRY_TRANSPORT restricts listing to, in *@only_p (NULL:
 * no restriction).  False when it names no built transport.
 */
static bool core_transport_filter(const struct ferry_transport **only_p)
{
	if (ferry_transport_forced(only_p) == 0)
		return true;
	ferry_warn("FERRY_TRANSPORT=%s names no provider built into ferry",
		   getenv("FERRY_TRANSPORT"));
	return false;
}

/*
 * Append the devices of @prov to *@list_p (capacity *@cap_p, *@count_p used,
 * one slot kept for the NULL terminator), growing the array until the
 * provider stops filling all the room it was given.  A failing provider is
 * logged and skipped so that it cannot hide the devices of the others.
 */
static int core_collect_devices(const struct ferry_provider *prov,
				struct ferry_device ***list_p, int *cap_p,
				int *count_p)
{
	for (;;) {
		int room = *cap_p - *count_p;
		struct ferry_device **bigger;
		int n;

		n = prov->get_devices(*list_p + *count_p, room);
		if (n < 0) {
			ferry_warn("%s: listing devices failed: %m", prov->name);
			return 0;
		}
		if (n < room) {
			*count_p += n;
			return 0;
		}
		/* Maybe cut short: ask again with twice the room. */
		bigger = realloc(*list_p, ((size_t)*cap_p * 2 + 1) * sizeof(**list_p));
		if (!bigger)
			return -1;
		*list_p = bigger;
		*cap_p *= 2;
	}
}

struct ferry_device **ferry_get_device_list(int *num_devices_p)
{
	struct ferry_device **list;
	int cap = CORE_DEVICES_INITIAL, count = 0;
	const struct ferry_transport *only;
	bool any;
	size_t i;

	list = malloc(((size_t)cap + 1) * sizeof(*list));
	if (!list)
		return NULL;

	any = core_transport_filter(&only);
	for (i = 0; any && i < ferry_transports_count; i++) {
		const struct ferry_transport *tp = &ferry_transports[i];

		if (only ? tp != only : tp->by_name_only)
			continue;
		if (core_collect_devices(tp->prov, &list, &cap, &count))
			goto err_free_list;
	}
	list[count] = NULL;
	if (num_devices_p)
		*num_devices_p = count;
	return list;

err_free_list:
	free(list);
	return NULL;
}

void ferry_free_device_list(struct ferry_device **list)
{
	/* The devices themselves belong to their providers. */
	free(list);
}

const char *ferry_get_device_name(struct ferry_device *device)
{
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	return device->name;
}

const char *ferry_get_device_transport(struct ferry_device *device)
{
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	return device->provider->name;
}

struct ferry_context *ferry_open_device(struct ferry_device *device)
{
	struct ferry_context *context;

	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	context = device->provider->open_device(device);
	if (!context)
		return NULL;
	/* Everything below dispatches through these two. */
	context->device = device;
	context->provider = device->provider;
	context->async = NULL;
	if (!device->provider->get_async_event && ferry_async_open(context) < 0) {
		int err = errno;

		device->provider->close_device(context);
		errno = err;
		return NULL;
	}
	return context;
}

/**
 * ferry_open_transport - open the first device of provider @name, or, when
 * @name is NULL, of the provider FERRY_TRANSPORT names, or else the first
 * device of all in order of preference.
 *
 * Fails with ENODEV when @name names no built provider or the provider has
 * no device.
 */
struct ferry_context *ferry_open_transport(const char *name)
{
	const struct ferry_transport *only = NULL;
	size_t i;

	if (name)
		only = ferry_transport_named(name);
	if (name ? !only : ferry_transport_forced(&only) < 0)
		goto err_no_device;
	for (i = 0; i < ferry_transports_count; i++) {
		const struct ferry_provider *prov = ferry_transports[i].prov;
		struct ferry_device *device;

		if (only ? &ferry_transports[i] != only : ferry_transports[i].by_name_only)
			continue;
		if (prov->get_devices(&device, 1) == 1)
			return ferry_open_device(device);
	}
err_no_device:
	errno = ENODEV;
	return NULL;
}

int ferry_close_device(struct ferry_context *context)
{
	struct ferry_async_queue *q;

	if (!context)
		return ERR(EINVAL);
	q = context->async;
	if (context->provider->close_device(context))
		return -1;
	ferry_async_close(q);
	return 0;
}

int ferry_query_device(struct ferry_context *context,
		       struct ferry_device_attr *attr_p)
{
	if (!context || !attr_p)
		return ERR(EINVAL);
	return context->provider->query_device(context, attr_p);
}

int ferry_query_device_ex(struct ferry_context *context,
			  const struct ferry_query_device_ex_input *input,
			  struct ferry_device_attr_ex *attr_p)
{
	/* ibverbs refuses input bits it does not know; ferry knows none. */
	if (!context || !attr_p || (input && input->comp_mask))
		return ERR(EINVAL);
	memset(attr_p, 0, sizeof(*attr_p));
	if (context->provider->query_device(context, &attr_p->orig_attr) < 0)
		return -1;
	return context->provider->query_device_ex(context, attr_p);
}

int ferry_query_port(struct ferry_context *context, uint8_t port_num,
		     struct ferry_port_attr *port_attr_p)
{
	if (!context || !port_attr_p || port_num == 0)
		return ERR(EINVAL);
	return context->provider->query_port(context, port_num, port_attr_p);
}

int ferry_query_gid(struct ferry_context *context, uint8_t port_num, int index,
		    union ferry_gid *gid_p)
{
	if (!context || !gid_p || port_num == 0 || index < 0)
		return ERR(EINVAL);
	return context->provider->query_gid(context, port_num, index, gid_p);
}

int ferry_query_pkey(struct ferry_context *context, uint8_t port_num, int index,
		     uint16_t *pkey_p)
{
	if (!context || !pkey_p || port_num == 0 || index < 0)
		return ERR(EINVAL);
	return context->provider->query_pkey(context, port_num, index, pkey_p);
}

/* --- protection domains and memory regions --- */

struct ferry_pd *ferry_alloc_pd(struct ferry_context *context)
{
	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	return context->provider->alloc_pd(context);
}

struct ferry_pd *ferry_alloc_pd_small(struct ferry_context *context, uint32_t max_remote)
{
	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	if (!context->provider->alloc_pd_small)
		return context->provider->alloc_pd(context);
	return context->provider->alloc_pd_small(context, max_remote);
}

void ferry_pd_detach(struct ferry_pd *pd)
{
	if (pd && pd->context->provider->detach_pd)
		pd->context->provider->detach_pd(pd);
}

/*
 * This process's id, without the system call getpid(2) is: the provider,
 * the CM and the sockets ask for it dozens of times per connection (who
 * made this, are we its child).  Renewed in a child of fork() by a handler
 * registered when the library is loaded, before any other of ours, so that
 * those run with the child's id already.
 */
static pid_t ferry_pid_cached;

static void ferry_pid_renew(void)
{
	__atomic_store_n(&ferry_pid_cached, getpid(), __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void ferry_pid_init(void)
{
	ferry_pid_renew();
	pthread_atfork(NULL, NULL, ferry_pid_renew);
}

__thread bool ferry_own_thread;

pid_t ferry_pid(void)
{
	pid_t pid = __atomic_load_n(&ferry_pid_cached, __ATOMIC_RELAXED);

	return pid ? pid : getpid();
}

void ferry_fork_child(void)
{
	size_t i;

	for (i = 0; i < ferry_transports_count; i++)
		if (ferry_transports[i].prov->fork_child)
			ferry_transports[i].prov->fork_child();
}

int ferry_cq_sleep_prepare(struct ferry_cq *cq, struct ferry_cq_sleep *t)
{
	if (!cq->context->provider->cq_sleep_prepare)
		return ERR(EOPNOTSUPP);
	return cq->context->provider->cq_sleep_prepare(cq, t);
}

int ferry_cq_sleep(struct ferry_cq *cq, struct ferry_cq_sleep *t, int timeout_ms)
{
	return cq->context->provider->cq_sleep(cq, t, timeout_ms);
}

void ferry_cq_sleep_cancel(struct ferry_cq *cq)
{
	cq->context->provider->cq_sleep_cancel(cq);
}

void ferry_cq_disarm(struct ferry_cq *cq)
{
	if (cq && cq->context->provider->disarm_cq)
		cq->context->provider->disarm_cq(cq);
}

void ferry_cq_detach(struct ferry_cq *cq)
{
	if (cq && cq->context->provider->detach_cq)
		cq->context->provider->detach_cq(cq);
}

int ferry_dealloc_pd(struct ferry_pd *pd)
{
	if (!pd)
		return ERR(EINVAL);
	return pd->context->provider->dealloc_pd(pd);
}

/*
 * Access rights ibverbs accepts: known bits only, and remote write or atomic
 * access only together with local write (the NIC writes into the region on
 * the peer's behalf).
 */
static bool core_access_ok(int access)
{
	if (access & ~CORE_ACCESS_ALL)
		return false;
	if ((access & (FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & FERRY_ACCESS_LOCAL_WRITE))
		return false;
	return true;
}

struct ferry_mr *ferry_reg_mr(struct ferry_pd *pd, void *addr, size_t length,
			      int access)
{
	if (!pd || !addr || length == 0 || !core_access_ok(access)) {
		errno = EINVAL;
		return NULL;
	}
	return pd->context->provider->reg_mr(pd, addr, length, access);
}

int ferry_dereg_mr(struct ferry_mr *mr)
{
	if (!mr)
		return ERR(EINVAL);
	return mr->context->provider->dereg_mr(mr);
}

/* --- completion channels and queues --- */

struct ferry_comp_channel *ferry_create_comp_channel(struct ferry_context *context)
{
	struct ferry_comp_channel *channel;

	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	channel = context->provider->create_comp_channel(context);
	if (channel)
		channel->refcnt = 0;
	return channel;
}

struct ferry_comp_channel *ferry_create_comp_channel_single(struct ferry_context *context)
{
	struct ferry_comp_channel *channel;

	if (!context) {
		errno = EINVAL;
		return NULL;
	}
	if (!context->provider->create_comp_channel_single)
		return ferry_create_comp_channel(context);
	channel = context->provider->create_comp_channel_single(context);
	if (channel)
		channel->refcnt = 0;
	return channel;
}

int ferry_comp_channel_renumber(struct ferry_comp_channel *channel, int fd)
{
	if (!channel || fd < 0)
		return ERR(EINVAL);
	if (!channel->context->provider->renumber_comp_channel)
		return ERR(EOPNOTSUPP);
	return channel->context->provider->renumber_comp_channel(channel, fd);
}

int ferry_comp_channel_on_conn(struct ferry_comp_channel *channel, struct ferry_qp *qp, int fd,
			       bool cloexec)
{
	if (!channel || !qp || qp->context != channel->context)
		return ERR(EINVAL);
	if (!channel->context->provider->comp_channel_on_conn)
		return ERR(EOPNOTSUPP);
	return channel->context->provider->comp_channel_on_conn(channel, qp, fd, cloexec);
}

/**
 * ferry_destroy_comp_channel - destroy @channel; EBUSY while CQs still use
 * it, as in libibverbs.
 */
int ferry_destroy_comp_channel(struct ferry_comp_channel *channel)
{
	if (!channel)
		return ERR(EINVAL);
	if (__atomic_load_n(&channel->refcnt, __ATOMIC_ACQUIRE) > 0)
		return ERR(EBUSY);
	return channel->context->provider->destroy_comp_channel(channel);
}

/**
 * ferry_create_cq - create a CQ of at least @cqe entries on @context.
 * @channel, if not NULL, must belong to @context.  @comp_vector only has to
 * be non-negative: ferry has a single completion vector.
 */
struct ferry_cq *ferry_create_cq(struct ferry_context *context, int cqe,
				 void *cq_context,
				 struct ferry_comp_channel *channel,
				 int comp_vector)
{
	struct ferry_cq *cq;

	if (!context || cqe < 1 || comp_vector < 0 ||
	    (channel && channel->context != context)) {
		errno = EINVAL;
		return NULL;
	}
	cq = context->provider->create_cq(context, cqe, channel);
	if (!cq)
		return NULL;

	cq->cq_context = cq_context;	/* the provider never sees it */
	cq->channel = channel;
	if (channel)
		__atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_ACQ_REL);
	return cq;
}

int ferry_destroy_cq(struct ferry_cq *cq)
{
	struct ferry_comp_channel *channel;

	if (!cq)
		return ERR(EINVAL);
	channel = cq->channel;	/* cq is gone after a successful destroy */
	if (cq->context->provider->destroy_cq(cq))
		return -1;
	if (channel)
		__atomic_sub_fetch(&channel->refcnt, 1, __ATOMIC_ACQ_REL);
	return 0;
}

int ferry_req_notify_cq(struct ferry_cq *cq, int solicited_only)
{
	if (!cq)
		return ERR(EINVAL);
	return cq->context->provider->req_notify_cq(cq, !!solicited_only);
}

int ferry_get_cq_event(struct ferry_comp_channel *channel,
		       struct ferry_cq **cq_p, void **cq_context_p)
{
	struct ferry_cq *cq;

	if (!channel || !cq_p || !cq_context_p)
		return ERR(EINVAL);
	if (channel->context->provider->get_cq_event(channel, &cq))
		return -1;
	*cq_p = cq;
	*cq_context_p = cq->cq_context;
	return 0;
}

int ferry_cq_event_poll(struct ferry_comp_channel *channel, struct ferry_cq **cq_p,
			void **cq_context_p)
{
	const struct ferry_provider *prov;
	struct ferry_cq *cq;

	if (!channel || !cq_p || !cq_context_p)
		return ERR(EINVAL);
	prov = channel->context->provider;
	if ((prov->poll_cq_event ? prov->poll_cq_event : prov->get_cq_event)(channel, &cq))
		return -1;
	*cq_p = cq;
	*cq_context_p = cq->cq_context;
	return 0;
}

void ferry_ack_cq_events(struct ferry_cq *cq, unsigned int nevents)
{
	if (!cq || nevents == 0)
		return;
	cq->context->provider->ack_cq_events(cq, nevents);
}

int ferry_poll_cq(struct ferry_cq *cq, int num_entries, struct ferry_wc *wc)
{
	if (!cq || num_entries < 0 || (!wc && num_entries > 0))
		return ERR(EINVAL);
	if (num_entries == 0)
		return 0;
	return cq->context->provider->poll_cq(cq, num_entries, wc);
}

/* --- queue pairs --- */

/*
 * Does @provider make QPs of @type?  RC everywhere; others where the
 * provider lists them (qp_types).
 */
static bool core_qp_type_ok(const struct ferry_provider *provider, enum ferry_qp_type type)
{
	if (type == FERRY_QPT_RC)
		return true;
	return (unsigned int)type < 32 && (provider->qp_types & (1u << type));
}

/**
 * ferry_create_qp - create an RC, UC or UD QP on @pd.
 *
 * EINVAL for a missing @pd, @init_attr or CQ, a CQ or SRQ of another
 * context, or a QP type ferry does not know.  EOPNOTSUPP for a UC or UD QP
 * on a transport without them (tcp: iWARP has RC only): the request is
 * well-formed.  A QP on an SRQ counts in its qp_refs until destroyed.
 */
struct ferry_qp *ferry_create_qp(struct ferry_pd *pd,
				 struct ferry_qp_init_attr *init_attr)
{
	struct ferry_qp *qp;

	if (!pd || !init_attr ||
	    (init_attr->qp_type != FERRY_QPT_RC && init_attr->qp_type != FERRY_QPT_UC &&
	     init_attr->qp_type != FERRY_QPT_UD) ||
	    !init_attr->send_cq || !init_attr->recv_cq ||
	    init_attr->send_cq->context != pd->context ||
	    init_attr->recv_cq->context != pd->context ||
	    (init_attr->srq && init_attr->srq->context != pd->context)) {
		errno = EINVAL;
		return NULL;
	}
	if (!core_qp_type_ok(pd->context->provider, init_attr->qp_type)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (init_attr->qp_type == FERRY_QPT_UD && !pd->context->provider->create_ah) {
		ferry_info("%s: no UD QPs on this transport", pd->context->provider->name);
		errno = EOPNOTSUPP;
		return NULL;
	}
	qp = pd->context->provider->create_qp(pd, init_attr);
	if (!qp)
		return NULL;
	qp->srq = init_attr->srq;
	if (qp->srq)
		__atomic_add_fetch(&qp->srq->qp_refs, 1, __ATOMIC_ACQ_REL);
	return qp;
}

/*
 * Are the attributes @mask selects in range?  Only what needs no provider:
 * known mask bits, valid states, MTU and access flags.  Whether the
 * transition is legal is the provider's to decide under its QP lock.
 */
static bool core_qp_attr_ok(const struct ferry_qp_attr *attr, int mask)
{
	if (mask & ~CORE_QP_ATTR_ALL)
		return false;
	if ((mask & FERRY_QP_STATE) &&
	    (unsigned int)attr->qp_state > FERRY_QPS_ERR)
		return false;
	if ((mask & FERRY_QP_CUR_STATE) &&
	    (unsigned int)attr->cur_qp_state > FERRY_QPS_ERR)
		return false;
	if ((mask & FERRY_QP_PATH_MTU) &&
	    (attr->path_mtu < FERRY_MTU_256 || attr->path_mtu > FERRY_MTU_4096))
		return false;
	if ((mask & FERRY_QP_ACCESS_FLAGS) &&
	    (attr->qp_access_flags & ~(unsigned int)CORE_ACCESS_ALL))
		return false;
	/* The widths of their IB encodings: 3 bits, 3 bits, 5 bits, 5 bits. */
	if ((mask & FERRY_QP_RETRY_CNT) && attr->retry_cnt > 7)
		return false;
	if ((mask & FERRY_QP_RNR_RETRY) && attr->rnr_retry > 7)
		return false;
	if ((mask & FERRY_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31)
		return false;
	if ((mask & FERRY_QP_TIMEOUT) && attr->timeout > 31)
		return false;
	return true;
}

int ferry_modify_qp(struct ferry_qp *qp, struct ferry_qp_attr *attr,
		    int attr_mask)
{
	if (!qp || !attr || !core_qp_attr_ok(attr, attr_mask))
		return ERR(EINVAL);
	return qp->context->provider->modify_qp(qp, attr, attr_mask);
}

/**
 * ferry_query_qp - fill @attr and @init_attr with the QP's attributes.
 * @attr_mask is a hint, as in ibverbs: ferry fills in everything.
 */
int ferry_query_qp(struct ferry_qp *qp, struct ferry_qp_attr *attr,
		   int attr_mask, struct ferry_qp_init_attr *init_attr)
{
	if (!qp || !attr || !init_attr)
		return ERR(EINVAL);
	if (qp->context->provider->query_qp(qp, attr, init_attr))
		return -1;
	init_attr->srq = qp->srq;	/* the core's to keep, as in ibverbs */
	return 0;
}

int ferry_destroy_qp(struct ferry_qp *qp)
{
	struct ferry_context *ctx;
	struct ferry_srq *srq;

	if (!qp)
		return ERR(EINVAL);
	ctx = qp->context;
	srq = qp->srq;	/* qp is gone after a successful destroy */
	if (ctx->provider->destroy_qp(qp))
		return -1;
	ferry_async_forget(ctx, qp);
	if (srq)
		__atomic_sub_fetch(&srq->qp_refs, 1, __ATOMIC_ACQ_REL);
	return 0;
}

/* A scatter/gather list the provider may walk: counted and present. */
static bool core_sge_list_ok(const struct ferry_sge *sg_list, int num_sge)
{
	return num_sge >= 0 && (sg_list || num_sge == 0);
}

/*
 * May a QP of @type carry @opcode?  UC has no responder resources: READ
 * and atomics are rejected at post time, as a device rejects the opcode.
 */
static bool core_opcode_ok(enum ferry_qp_type type, enum ferry_wr_opcode opcode)
{
	if (type == FERRY_QPT_UC)
		return opcode <= FERRY_WR_SEND_WITH_IMM;
	return (unsigned int)opcode <= FERRY_WR_ATOMIC_FETCH_AND_ADD;
}

/* The first malformed WR of @wr, or NULL when all are well-formed. */
static struct ferry_send_wr *core_bad_send_wr(const struct ferry_qp *qp,
					      struct ferry_send_wr *wr)
{
	for (; wr; wr = wr->next) {
		if (!core_opcode_ok(qp->qp_type, wr->opcode) ||
		    (wr->send_flags & ~(unsigned int)CORE_SEND_FLAGS_ALL) ||
		    !core_sge_list_ok(wr->sg_list, wr->num_sge))
			return wr;
	}
	return NULL;
}

/**
 * ferry_post_send - post the chain @wr on @qp's send queue.
 *
 * A malformed WR anywhere in the chain (unknown opcode or flag, bad SGE
 * list, an opcode the QP's type lacks: READ or an atomic on UC) rejects the whole chain before anything is posted: *@bad_wr_p is
 * then @wr, the first WR not posted, and errno is EINVAL.
 */
int ferry_post_send(struct ferry_qp *qp, struct ferry_send_wr *wr,
		    struct ferry_send_wr **bad_wr_p)
{
	struct ferry_send_wr *ignored, *bad;

	if (!bad_wr_p)
		bad_wr_p = &ignored;	/* providers may always store into it */
	if (!qp) {
		*bad_wr_p = wr;
		return ERR(EINVAL);
	}
	if (!wr)
		return 0;
	bad = core_bad_send_wr(qp, wr);
	if (bad) {
		ferry_debug("post_send: malformed WR %#llx (opcode %d, flags %#x, num_sge %d)",
			    (unsigned long long)bad->wr_id, (int)bad->opcode,
			    bad->send_flags, bad->num_sge);
		*bad_wr_p = wr;
		return ERR(EINVAL);
	}
	return qp->context->provider->post_send(qp, wr, bad_wr_p);
}

int ferry_post_send_direct(struct ferry_qp *qp, struct ferry_send_wr *wr, unsigned int how)
{
	if (!qp || !wr || wr->next || (unsigned int)wr->opcode > FERRY_WR_SEND_WITH_IMM ||
	    (how & ~(unsigned int)FERRY_DIRECT_NOCACHE) ||
	    (wr->send_flags & ~(unsigned int)(FERRY_SEND_SIGNALED | FERRY_SEND_SOLICITED)) ||
	    !core_sge_list_ok(wr->sg_list, wr->num_sge))
		return ERR(EINVAL);
	if (!qp->context->provider->post_send_direct)
		return ERR(EOPNOTSUPP);
	return qp->context->provider->post_send_direct(qp, wr, how);
}

bool ferry_qp_write_imm_ok(struct ferry_qp *qp)
{
	if (!qp->context->provider->qp_write_imm_ok)
		return true;
	return qp->context->provider->qp_write_imm_ok(qp);
}

/**
 * ferry_post_recv - post the chain @wr on @qp's receive queue; malformed
 * chains are rejected whole, as in ferry_post_send.
 */
int ferry_post_recv(struct ferry_qp *qp, struct ferry_recv_wr *wr,
		    struct ferry_recv_wr **bad_wr_p)
{
	struct ferry_recv_wr *ignored, *it;

	if (!bad_wr_p)
		bad_wr_p = &ignored;
	if (!qp || qp->srq) {	/* a QP on an SRQ has no receive queue of its own */
		*bad_wr_p = wr;
		return ERR(EINVAL);
	}
	for (it = wr; it; it = it->next) {
		if (!core_sge_list_ok(it->sg_list, it->num_sge)) {
			ferry_debug("post_recv: malformed WR %#llx (num_sge %d)",
				    (unsigned long long)it->wr_id, it->num_sge);
			*bad_wr_p = wr;
			return ERR(EINVAL);
		}
	}
	if (!wr)
		return 0;
	return qp->context->provider->post_recv(qp, wr, bad_wr_p);
}

int ferry_qp_exchange(struct ferry_qp *qp, int sock, uint32_t *peer_qp_num_p)
{
	if (!qp || !peer_qp_num_p)
		return ERR(EINVAL);
	if (sock < 0)
		return ERR(EBADF);
	return qp->context->provider->qp_exchange(qp, sock, peer_qp_num_p);
}

int ferry_qp_exchange_begin(struct ferry_qp *qp, int sock)
{
	if (!qp)
		return ERR(EINVAL);
	if (sock < 0)
		return ERR(EBADF);
	return qp->context->provider->qp_exchange_begin(qp, sock);
}

int ferry_qp_exchange_step(struct ferry_qp *qp, uint32_t *peer_qp_num_p)
{
	if (!qp || !peer_qp_num_p)
		return ERR(EINVAL);
	return qp->context->provider->qp_exchange_step(qp, peer_qp_num_p);
}

void ferry_qp_exchange_abort(struct ferry_qp *qp)
{
	if (qp)
		qp->context->provider->qp_exchange_abort(qp);
}

/* --- connecting a QP over a socket with ferry's defaults --- */

static int core_qp_to_init(struct ferry_qp *qp, int access)
{
	struct ferry_qp_attr attr = {
		.qp_state = FERRY_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = (unsigned int)access,
	};

	return ferry_modify_qp(qp, &attr, FERRY_QP_STATE | FERRY_QP_PKEY_INDEX |
			       FERRY_QP_PORT | FERRY_QP_ACCESS_FLAGS);
}

static int core_qp_to_rtr(struct ferry_qp *qp, uint32_t peer_qp_num)
{
	struct ferry_qp_attr attr = {
		.qp_state = FERRY_QPS_RTR,
		.path_mtu = FERRY_MTU_4096,
		.dest_qp_num = peer_qp_num,
		.rq_psn = 0,
		.max_dest_rd_atomic = 16,
		.min_rnr_timer = 1,
		.ah_attr = { .port_num = 1 },
	};

	int mask = FERRY_QP_STATE | FERRY_QP_AV | FERRY_QP_PATH_MTU | FERRY_QP_DEST_QPN |
		   FERRY_QP_RQ_PSN;

	/* UC has no responder resources or RNR timer to set. */
	if (qp->qp_type == FERRY_QPT_RC)
		mask |= FERRY_QP_MAX_DEST_RD_ATOMIC | FERRY_QP_MIN_RNR_TIMER;
	return ferry_modify_qp(qp, &attr, mask);
}

static int core_qp_to_rts(struct ferry_qp *qp)
{
	struct ferry_qp_attr attr = {
		.qp_state = FERRY_QPS_RTS,
		.sq_psn = 0,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.max_rd_atomic = 16,
	};

	int mask = FERRY_QP_STATE | FERRY_QP_SQ_PSN;

	/* Nor retries nor reads on UC. */
	if (qp->qp_type == FERRY_QPT_RC)
		mask |= FERRY_QP_TIMEOUT | FERRY_QP_RETRY_CNT | FERRY_QP_RNR_RETRY |
			FERRY_QP_MAX_QP_RD_ATOMIC;
	return ferry_modify_qp(qp, &attr, mask);
}

/**
 * ferry_qp_connect_sock - bring @qp from RESET or INIT to RTS, connected to
 * the QP at the other end of @sock.
 *
 * A QP in RESET is first moved to INIT with access rights @access (a QP
 * already in INIT keeps the rights it has).  Then ferry_qp_exchange, RTR and
 * RTS with ferry's defaults.  On failure returns -1 with the errno of the
 * step that failed; the QP stays in the state that step left it in.
 */
int ferry_qp_connect_sock(struct ferry_qp *qp, int sock, int access)
{
	uint32_t peer_qp_num;

	if (!qp)
		return ERR(EINVAL);
	if (qp->state == FERRY_QPS_RESET && core_qp_to_init(qp, access))
		return -1;
	if (qp->state != FERRY_QPS_INIT)
		return ERR(EINVAL);
	if (ferry_qp_exchange(qp, sock, &peer_qp_num))
		return -1;
	if (core_qp_to_rtr(qp, peer_qp_num))
		return -1;
	return core_qp_to_rts(qp);
}

/* --- strings --- */

static const char *const core_wc_status_names[] = {
	[FERRY_WC_SUCCESS]		= "success",
	[FERRY_WC_LOC_LEN_ERR]		= "local length error",
	[FERRY_WC_LOC_QP_OP_ERR]	= "local QP operation error",
	[FERRY_WC_LOC_EEC_OP_ERR]	= "local EE context operation error",
	[FERRY_WC_LOC_PROT_ERR]		= "local protection error",
	[FERRY_WC_WR_FLUSH_ERR]		= "Work Request Flushed Error",
	[FERRY_WC_MW_BIND_ERR]		= "memory management operation error",
	[FERRY_WC_BAD_RESP_ERR]		= "bad response error",
	[FERRY_WC_LOC_ACCESS_ERR]	= "local access error",
	[FERRY_WC_REM_INV_REQ_ERR]	= "remote invalid request error",
	[FERRY_WC_REM_ACCESS_ERR]	= "remote access error",
	[FERRY_WC_REM_OP_ERR]		= "remote operation error",
	[FERRY_WC_RETRY_EXC_ERR]	= "transport retry counter exceeded",
	[FERRY_WC_RNR_RETRY_EXC_ERR]	= "RNR retry counter exceeded",
	[FERRY_WC_LOC_RDD_VIOL_ERR]	= "local RDD violation error",
	[FERRY_WC_REM_INV_RD_REQ_ERR]	= "remote invalid RD request",
	[FERRY_WC_REM_ABORT_ERR]	= "aborted error",
	[FERRY_WC_INV_EECN_ERR]		= "invalid EE context number",
	[FERRY_WC_INV_EEC_STATE_ERR]	= "invalid EE context state",
	[FERRY_WC_FATAL_ERR]		= "fatal error",
	[FERRY_WC_RESP_TIMEOUT_ERR]	= "response timeout error",
	[FERRY_WC_GENERAL_ERR]		= "general error",
};

/** ferry_wc_status_str - the text libibverbs gives the same status. */
const char *ferry_wc_status_str(enum ferry_wc_status status)
{
	if ((unsigned int)status >= FERRY_ARRAY_SIZE(core_wc_status_names))
		return "unknown";
	return core_wc_status_names[status];
}

static const char *const core_qp_state_names[] = {
	[FERRY_QPS_RESET] = "RESET",
	[FERRY_QPS_INIT]  = "INIT",
	[FERRY_QPS_RTR]   = "RTR",
	[FERRY_QPS_RTS]   = "RTS",
	[FERRY_QPS_SQD]   = "SQD",
	[FERRY_QPS_SQE]   = "SQE",
	[FERRY_QPS_ERR]   = "ERR",
};

const char *ferry_qp_state_str(enum ferry_qp_state state)
{
	if ((unsigned int)state >= FERRY_ARRAY_SIZE(core_qp_state_names))
		return "UNKNOWN";
	return core_qp_state_names[state];
}

static const char *const core_port_state_names[] = {
	[FERRY_PORT_NOP]	  = "no state change (NOP)",
	[FERRY_PORT_DOWN]	  = "down",
	[FERRY_PORT_INIT]	  = "init",
	[FERRY_PORT_ARMED]	  = "armed",
	[FERRY_PORT_ACTIVE]	  = "active",
	[FERRY_PORT_ACTIVE_DEFER] = "active defer",
};

/** ferry_port_state_str - the text libibverbs gives the same state. */
const char *ferry_port_state_str(enum ferry_port_state state)
{
	if ((unsigned int)state >= FERRY_ARRAY_SIZE(core_port_state_names))
		return "unknown";
	return core_port_state_names[state];
}
