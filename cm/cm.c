/*
 * cm.c - the public calls of the connection manager: ids, bind, resolve,
 * listen, connect, accept, reject, disconnect, addresses, event names.
 *
 * Each call checks its arguments here, in the caller's thread, then runs
 * the part that reads or changes the id's state in the thread that owns
 * the id (cm_id_call: see cm-internal.h), and for a synchronous id waits
 * for the call's outcome event (cm_sync_wait).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm-internal.h"

/* Defaults for a NULL ferry_conn_param (rping's depth, retry forever). */
#define CM_DEFAULT_DEPTH	1
#define CM_DEFAULT_RETRY	7

/* Arguments of a call run in the CM thread. */
struct cm_op {
	struct cm_id_priv *id;
	const struct cm_transport *tp;	/* resolve_addr: the one reaching dst */
	int tp_err;			/* resolve_addr: why none does */
	const struct sockaddr *src, *dst;
	const struct ferry_conn_param *param;
	const void *pdata;
	uint8_t pdata_len;
	int number;		/* backlog or timeout */
};

/* --- ids --- */

static struct cm_id_priv *cm_id_alloc(struct cm_channel *chan, bool sync)
{
	struct cm_id_priv *id = calloc(1, sizeof(*id));

	if (!id)
		return NULL;
	if (sync)
		chan = cm_channel_new();
	if (!chan) {
		free(id);
		return NULL;
	}
	if (!sync)
		cm_channel_add_id(chan);
	id->chan = chan;
	id->sync = sync;
	id->state = CM_IDLE;
	id->id.ps = FERRY_PS_TCP;
	id->id.port_num = 1;
	pthread_cond_init(&id->acked, NULL);
	return id;
}

static void cm_id_free(struct cm_id_priv *id)
{
	if (id->rdv_given && id->rdv_given_fd >= 0)
		close(id->rdv_given_fd);	/* adopted, never bound */
	if (id->sync)
		cm_channel_free(id->chan);
	else
		cm_channel_remove_id(id->chan);
	pthread_cond_destroy(&id->acked);
	free(id);
}

void cm_id_free_unreported(struct cm_id_priv *id)
{
	cm_id_free(id);
}

/**
 * ferry_create_id - a new CM id on @channel (NULL: a synchronous id) with
 * the user's @context, in port space @ps (FERRY_PS_TCP).
 */
int ferry_create_id(struct ferry_event_channel *channel, struct ferry_cm_id **id_p,
		    void *context, enum ferry_port_space ps)
{
	struct cm_id_priv *id;

	if (!id_p || ps != FERRY_PS_TCP)
		return ERR(EINVAL);
	id = cm_id_alloc(channel ? container_of(channel, struct cm_channel, ch) : NULL,
			 !channel);
	if (!id)
		return -1;
	id->id.channel = channel;
	id->id.context = context;
	*id_p = &id->id;
	return 0;
}

struct cm_id_priv *cm_id_new_request(struct cm_id_priv *listener,
				     const struct cm_transport *tp)
{
	struct ferry_context *ctx = cm_transport_context(tp);
	struct cm_id_priv *id;

	if (!ctx)
		return NULL;
	id = cm_id_alloc(listener->chan, listener->sync);
	if (!id)
		return NULL;
	id->id.channel = listener->id.channel;
	id->id.context = listener->id.context;
	id->id.verbs = ctx;
	id->tp = tp;
	id->state = CM_CONNECT_REQ;
	id->in_loop = true;	/* born in the CM thread */
	id->quiet = listener->quiet;
	return id;
}

void cm_id_teardown(struct cm_id_priv *id)
{
	size_t i;

	id->state = CM_DESTROYING;	/* from now on reports are dropped */
	for (i = 0; i < ferry_transports_count; i++)
		if (id->tp_data[i])
			cm_transport_at(i)->destroy(id);
	cm_event_purge(id);
}

static int cm_destroy_op(void *arg)
{
	struct cm_id_priv *id = arg;

	cm_id_teardown(id);
	id->in_loop = false;	/* nothing in the loop leads to it any more */
	return 0;
}

void ferry_cm_quiet(struct ferry_cm_id *id)
{
	if (id)
		to_cm_id(id)->quiet = true;
}

int ferry_cm_hold_port(struct ferry_cm_id *id, int fd)
{
	if (!id || fd < 0)
		return ERR(EINVAL);
	if (to_cm_id(id)->state != CM_IDLE)
		return ERR(EINVAL);
	to_cm_id(id)->port_held = true;
	to_cm_id(id)->port_held_fd = fd;
	return 0;
}

int ferry_cm_adopt_rendezvous(struct ferry_cm_id *id, int fd)
{
	if (!id || fd < 0)
		return ERR(EINVAL);
	if (to_cm_id(id)->state != CM_IDLE || !to_cm_id(id)->port_held)
		return ERR(EINVAL);
	to_cm_id(id)->rdv_given = true;
	to_cm_id(id)->rdv_given_fd = fd;
	return 0;
}

void ferry_cm_connect_timeout(struct ferry_cm_id *id, unsigned int ms)
{
	if (id)
		to_cm_id(id)->connect_timeout_ms = ms;
}

void ferry_cm_detach(struct ferry_cm_id *id)
{
	if (id)
		__atomic_store_n(&to_cm_id(id)->detached, true, __ATOMIC_RELEASE);
}

/**
 * ferry_destroy_id - release @id.  Blocks until every event of @id that
 * was retrieved has been acked (rdma_destroy_id does the same); events
 * still queued are dropped.  A connected peer sees DISCONNECTED.  A QP
 * still on the id is destroyed too.
 */
int ferry_destroy_id(struct ferry_cm_id *id)
{
	struct cm_id_priv *priv;

	if (!id)
		return ERR(EINVAL);
	priv = to_cm_id(id);
	if (cm_id_call_taking(priv, priv->tp, cm_destroy_op, priv) < 0)
		return -1;
	cm_sync_release(priv);
	cm_event_wait_acked(priv);
	if (id->qp || priv->owns_pd)
		ferry_cm_destroy_qp(id);
	cm_id_free(priv);
	return 0;
}

void cm_id_disconnected(struct cm_id_priv *id)
{
	cm_qp_to_error(id);
	cm_event_report(id, NULL, FERRY_CM_EVENT_DISCONNECTED, 0, NULL);
	if (id->id.qp)
		cm_event_report(id, NULL, FERRY_CM_EVENT_TIMEWAIT_EXIT, 0, NULL);
}

/* --- bind --- */

static bool cm_family_ok(const struct sockaddr *sa)
{
	return sa && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6);
}

/* Undo the binds of every transport of @id. */
static void cm_unbind(struct cm_id_priv *id)
{
	size_t i;

	for (i = 0; i < ferry_transports_count; i++)
		if (id->tp_data[i])
			cm_transport_at(i)->destroy(id);
}

/* A transport that cannot serve the address at all is skipped. */
static bool cm_bind_skippable(int err)
{
	return err == EADDRNOTAVAIL || err == ENODEV || err == ENOTSUP;
}

/* Bind src_addr on every transport (the forced one only); port 0: pick. */
static int cm_bind_transports(struct cm_id_priv *id)
{
	const struct cm_transport *forced;
	unsigned int bound = 0;
	size_t i;

	if (cm_transport_forced(&forced) < 0)
		return -1;
	for (i = 0; i < ferry_transports_count; i++) {
		const struct cm_transport *tp = cm_transport_at(i);

		if (!tp || (forced && tp != forced))
			continue;	/* no CM part (transport.h), or not the forced one */
		if (tp->bind(id) == 0) {
			bound++;
			continue;
		}
		if (cm_bind_skippable(errno)) {
			ferry_debug("cm: %s cannot bind this address: %m",
				    ferry_transports[i].name);
			continue;
		}
		{
			int e = errno;

			cm_unbind(id);
			return ERR(e);
		}
	}
	return bound ? 0 : ERR(EADDRNOTAVAIL);
}

static int cm_bind_op(void *arg)
{
	struct cm_op *op = arg;
	struct cm_id_priv *id = op->id;
	struct sockaddr *src = (struct sockaddr *)&id->id.route.addr.src_addr;
	char buf[INET6_ADDRSTRLEN];

	if (id->state != CM_IDLE)
		return ERR(EINVAL);
	if (!cm_addr_is_local(op->src)) {
		ferry_info("cm: cannot bind %s: not an address of this host",
			   cm_addr_ntop(op->src, buf, sizeof(buf)));
		return ERR(EADDRNOTAVAIL);
	}
	memset(src, 0, sizeof(id->id.route.addr.src_addr));
	memcpy(src, op->src, cm_addr_len(op->src));
	if (cm_bind_transports(id) < 0)
		return -1;
	id->bound = true;
	id->state = CM_ADDR_BOUND;
	if (!cm_addr_is_wildcard(src)) {
		id->tp = cm_transport_for(src);
		id->id.verbs = id->tp ? cm_transport_context(id->tp) : NULL;
	}
	return 0;
}

/**
 * ferry_bind_addr - give @id a source address (IPv4 or IPv6, specific or
 * wildcard; port 0 picks a free port).  EADDRINUSE when another id of this
 * network namespace holds it; EADDRNOTAVAIL when it is not of this host.
 */
int ferry_bind_addr(struct ferry_cm_id *id, struct sockaddr *addr)
{
	struct cm_op op = { .src = addr };

	if (!id || !addr)
		return ERR(EINVAL);
	if (!cm_family_ok(addr))
		return ERR(EAFNOSUPPORT);
	op.id = to_cm_id(id);
	return cm_id_call(op.id, NULL, cm_bind_op, &op);
}

/* --- resolution --- */

/* Source address of a resolution: the bound one, the caller's, or derived. */
static void cm_resolve_source(struct cm_id_priv *id, const struct sockaddr *src,
			      const struct sockaddr *dst)
{
	struct sockaddr_storage *ss = &id->id.route.addr.src_addr;
	uint16_t port = id->bound ? cm_addr_port((struct sockaddr *)ss) : 0;

	id->src_given = !id->bound && src && !cm_addr_is_wildcard(src);
	if (id->src_given)
		memcpy(ss, src, cm_addr_len(src));
	else if (!id->bound || cm_addr_is_wildcard((struct sockaddr *)ss))
		cm_addr_source_for(dst, ss);
	if (!port)
		port = src && !id->bound && cm_addr_port(src) ? cm_addr_port(src) :
		       cm_addr_ephemeral_port();
	cm_addr_set_port((struct sockaddr *)ss, port);
}

static int cm_resolve_addr_op(void *arg)
{
	struct cm_op *op = arg;
	struct cm_id_priv *id = op->id;
	struct sockaddr_storage *dst = &id->id.route.addr.dst_addr;
	enum cm_state before = id->state;

	if (before != CM_IDLE && before != CM_ADDR_BOUND)
		return ERR(EINVAL);
	if (id->bound && id->id.route.addr.src_addr.ss_family != op->dst->sa_family)
		return ERR(EINVAL);
	memset(dst, 0, sizeof(*dst));
	memcpy(dst, op->dst, cm_addr_len(op->dst));
	cm_resolve_source(id, op->src, op->dst);
	id->tp = op->tp;
	errno = op->tp_err;
	id->id.verbs = id->tp ? cm_transport_context(id->tp) : NULL;
	if (!id->id.verbs) {
		int status = errno ? errno : EHOSTUNREACH;

		id->tp = NULL;
		cm_event_report(id, NULL, FERRY_CM_EVENT_ADDR_ERROR, status, NULL);
		id->state = before;
		return 0;
	}
	id->state = CM_ADDR_QUERY;
	if (id->tp->resolve_addr(id, op->number) < 0) {
		id->state = before;
		return -1;
	}
	return 0;
}

/**
 * ferry_resolve_addr - pick the transport and device that reach @dst_addr
 * (from @src_addr if given) and report ADDR_RESOLVED, or ADDR_ERROR with
 * status EHOSTUNREACH when no transport reaches it, within @timeout_ms.
 */
int ferry_resolve_addr(struct ferry_cm_id *id, struct sockaddr *src_addr,
		       struct sockaddr *dst_addr, int timeout_ms)
{
	struct cm_op op = { .src = src_addr, .dst = dst_addr, .number = timeout_ms };

	if (!id || !dst_addr || timeout_ms < 0)
		return ERR(EINVAL);
	if (!cm_family_ok(dst_addr) || (src_addr && src_addr->sa_family != dst_addr->sa_family))
		return ERR(EAFNOSUPPORT);
	op.id = to_cm_id(id);
	errno = 0;
	op.tp = cm_transport_for(dst_addr);
	op.tp_err = errno;
	if (cm_id_call(op.id, op.tp, cm_resolve_addr_op, &op) < 0)
		return -1;
	return cm_sync_wait(op.id, FERRY_CM_EVENT_ADDR_RESOLVED);
}

static int cm_resolve_route_op(void *arg)
{
	struct cm_op *op = arg;
	struct cm_id_priv *id = op->id;

	if (id->state != CM_ADDR_RESOLVED)
		return ERR(EINVAL);
	id->state = CM_ROUTE_QUERY;
	if (id->tp->resolve_route(id, op->number) < 0) {
		id->state = CM_ADDR_RESOLVED;
		return -1;
	}
	return 0;
}

/** ferry_resolve_route - report ROUTE_RESOLVED or ROUTE_ERROR. */
int ferry_resolve_route(struct ferry_cm_id *id, int timeout_ms)
{
	struct cm_op op = { .number = timeout_ms };

	if (!id || timeout_ms < 0)
		return ERR(EINVAL);
	op.id = to_cm_id(id);
	if (cm_id_call(op.id, op.id->tp, cm_resolve_route_op, &op) < 0)
		return -1;
	return cm_sync_wait(op.id, FERRY_CM_EVENT_ROUTE_RESOLVED);
}

/* --- listen --- */

/* rdma_listen on an unbound id listens on the IPv4 wildcard, any port. */
static int cm_bind_any(struct cm_id_priv *id)
{
	struct sockaddr_storage any;
	struct cm_op op = { .id = id, .src = (struct sockaddr *)&any };

	cm_addr_wildcard(AF_INET, 0, &any);
	return cm_bind_op(&op);
}

static int cm_listen_op(void *arg)
{
	struct cm_op *op = arg;
	struct cm_id_priv *id = op->id;
	size_t i;

	if (id->state == CM_IDLE && cm_bind_any(id) < 0)
		return -1;
	if (id->state != CM_ADDR_BOUND)
		return ERR(EINVAL);
	/* Before the transports listen: from then on the loop may see it. */
	id->state = CM_LISTEN;
	for (i = 0; i < ferry_transports_count; i++) {
		if (id->tp_data[i] && cm_transport_at(i)->listen(id, op->number) < 0) {
			id->state = CM_ADDR_BOUND;
			return -1;
		}
	}
	return 0;
}

/**
 * ferry_listen - accept connection requests on the bound address; each
 * arrives as a CONNECT_REQUEST event with a new id.  @backlog bounds the
 * connections the kernel queues before the CM thread takes them.
 */
int ferry_listen(struct ferry_cm_id *id, int backlog)
{
	struct cm_op op = { .number = backlog };

	if (!id)
		return ERR(EINVAL);
	op.id = to_cm_id(id);
	return cm_id_call(op.id, op.id->tp, cm_listen_op, &op);
}

int ferry_get_request(struct ferry_cm_id *listen, struct ferry_cm_id **id_p)
{
	struct cm_id_priv *priv, *req;

	if (!listen || !id_p)
		return ERR(EINVAL);
	priv = to_cm_id(listen);
	if (!priv->sync || priv->state != CM_LISTEN)
		return ERR(EINVAL);
	if (cm_sync_get_request(priv, &req) < 0)
		return -1;
	*id_p = &req->id;
	return 0;
}

/* --- connect, accept, reject, disconnect --- */

static bool cm_param_ok(const struct ferry_conn_param *param, size_t pdata_max)
{
	return !param ||
	       (param->private_data_len <= pdata_max &&
		(param->private_data || !param->private_data_len) &&
		param->retry_count <= 7 && param->rnr_retry_count <= 7 && !param->srq);
}

static const struct ferry_conn_param *cm_param_or_default(const struct ferry_conn_param *param,
							  struct ferry_conn_param *dflt)
{
	if (param)
		return param;
	memset(dflt, 0, sizeof(*dflt));
	dflt->responder_resources = CM_DEFAULT_DEPTH;
	dflt->initiator_depth = CM_DEFAULT_DEPTH;
	dflt->retry_count = CM_DEFAULT_RETRY;
	dflt->rnr_retry_count = CM_DEFAULT_RETRY;
	return dflt;
}

static int cm_connect_op(void *arg)
{
	struct cm_op *op = arg;
	struct cm_id_priv *id = op->id;

	if (id->state != CM_ROUTE_RESOLVED)
		return ERR(EINVAL);
	id->state = CM_CONNECT;
	if (id->tp->connect(id, op->param) < 0) {
		id->state = CM_ROUTE_RESOLVED;
		return -1;
	}
	return 0;
}

/**
 * ferry_connect - send a connection request with @conn_param (private
 * data up to FERRY_MAX_PRIVATE_DATA_CONNECT bytes, else EINVAL).  The id
 * needs a route and a QP.  Outcome: ESTABLISHED, or REJECTED (status
 * ECONNREFUSED when nothing listens there), UNREACHABLE, CONNECT_ERROR.
 */
int ferry_connect(struct ferry_cm_id *id, struct ferry_conn_param *conn_param)
{
	struct ferry_conn_param dflt;
	struct cm_op op;

	if (!id || !id->qp || !cm_param_ok(conn_param, FERRY_MAX_PRIVATE_DATA_CONNECT))
		return ERR(EINVAL);
	op = (struct cm_op){ .id = to_cm_id(id),
			     .param = cm_param_or_default(conn_param, &dflt) };
	if (cm_id_call(op.id, op.id->tp, cm_connect_op, &op) < 0)
		return -1;
	return cm_sync_wait(op.id, FERRY_CM_EVENT_ESTABLISHED);
}

static int cm_accept_begin_op(void *arg)
{
	struct cm_op *op = arg;
	struct cm_id_priv *id = op->id;

	if (id->state == CM_DISCONNECT)
		return ERR(ECONNRESET);	/* the client went away */
	if (id->state != CM_CONNECT_REQ)
		return ERR(EINVAL);
	id->state = CM_ACCEPTING;
	if (id->tp->accept_begin(id, op->param) < 0) {
		id->state = CM_DISCONNECT;
		return -1;
	}
	return 0;
}

static int cm_accept_failed_op(void *arg)
{
	struct cm_id_priv *id = arg;

	if (id->state == CM_ACCEPTING)
		id->state = CM_DISCONNECT;
	return 0;
}

/**
 * ferry_accept - accept the request of @id (from a CONNECT_REQUEST) with
 * private data up to FERRY_MAX_PRIVATE_DATA_ACCEPT bytes.  The id needs a
 * QP.  An id on a channel: returns once our answer is sent, without
 * waiting for the client; ESTABLISHED follows when the connection is up,
 * or CONNECT_ERROR when the client does not complete it (on shm within
 * two seconds), as rdma_accept.  A synchronous id: returns once
 * established (-1 with the CONNECT_ERROR's status otherwise).
 */
int ferry_accept(struct ferry_cm_id *id, struct ferry_conn_param *conn_param)
{
	struct ferry_conn_param dflt;
	struct cm_id_priv *priv;
	struct cm_op op;

	if (!id || !id->qp || !cm_param_ok(conn_param, FERRY_MAX_PRIVATE_DATA_ACCEPT))
		return ERR(EINVAL);
	priv = to_cm_id(id);
	op = (struct cm_op){ .id = priv, .param = cm_param_or_default(conn_param, &dflt) };
	if (cm_id_call_taking(priv, priv->tp, cm_accept_begin_op, &op) < 0)
		return -1;
	if (priv->tp->accept(priv, op.param) < 0) {
		int e = errno;

		cm_id_call(priv, priv->tp, cm_accept_failed_op, priv);
		return ERR(e);
	}
	return cm_sync_wait(priv, FERRY_CM_EVENT_ESTABLISHED);
}

static int cm_reject_op(void *arg)
{
	struct cm_op *op = arg;
	struct cm_id_priv *id = op->id;

	if (id->state == CM_DISCONNECT)
		return 0;	/* the client is gone: nobody to tell */
	if (id->state != CM_CONNECT_REQ)
		return ERR(EINVAL);
	if (id->tp->reject(id, op->pdata, op->pdata_len) < 0)
		return -1;
	id->state = CM_DISCONNECT;
	return 0;
}

/**
 * ferry_reject - refuse the request of @id; the client gets REJECTED with
 * status FERRY_CM_REJ_CONSUMER_DEFINED and these private data (at most
 * FERRY_MAX_PRIVATE_DATA_REJECT bytes).
 */
int ferry_reject(struct ferry_cm_id *id, const void *private_data,
		 uint8_t private_data_len)
{
	struct cm_op op = { .pdata = private_data, .pdata_len = private_data_len };

	if (!id || private_data_len > FERRY_MAX_PRIVATE_DATA_REJECT ||
	    (private_data_len && !private_data))
		return ERR(EINVAL);
	op.id = to_cm_id(id);
	return cm_id_call_taking(op.id, op.id->tp, cm_reject_op, &op);
}

static int cm_disconnect_op(void *arg)
{
	struct cm_id_priv *id = arg;

	if (id->state == CM_DISCONNECT)
		return 0;	/* the peer was first, or a second call */
	if (id->state != CM_ESTABLISHED && id->state != CM_CONNECT)
		return ERR(EINVAL);
	if (id->tp->disconnect(id) < 0)
		return -1;
	cm_id_disconnected(id);
	return 0;
}

/**
 * ferry_disconnect - end the connection: the QP goes to ERR, both sides
 * get DISCONNECTED (then TIMEWAIT_EXIT for an id with a QP).  Calling it
 * after DISCONNECTED arrived is harmless.  Does not wait for the event.
 */
int ferry_disconnect(struct ferry_cm_id *id)
{
	if (!id)
		return ERR(EINVAL);
	return cm_id_call_taking(to_cm_id(id), to_cm_id(id)->tp, cm_disconnect_op,
				 to_cm_id(id));
}

static int cm_let_go_op(void *arg)
{
	struct cm_id_priv *id = arg;

	if (id->state != CM_ESTABLISHED || !id->quiet || !id->tp->let_go)
		return ERR(EINVAL);
	id->tp->let_go(id);
	return 0;
}

int ferry_cm_let_go(struct ferry_cm_id *id)
{
	if (!id)
		return ERR(EINVAL);
	return cm_id_call_taking(to_cm_id(id), to_cm_id(id)->tp, cm_let_go_op, to_cm_id(id));
}

int ferry_cm_progress(struct ferry_cm_id *id)
{
	struct cm_id_priv *priv;
	int done = 0;
	size_t i;

	if (!id)
		return ERR(EINVAL);
	priv = to_cm_id(id);
	for (i = 0; i < ferry_transports_count; i++)
		if (priv->tp_data[i] && cm_transport_at(i)->progress)
			done |= cm_transport_at(i)->progress(priv);
	return done;
}

int ferry_cm_hold(struct ferry_cm_id *id, int *ms_p)
{
	struct cm_id_priv *priv;

	if (!id || !ms_p)
		return ERR(EINVAL);
	priv = to_cm_id(id);
	if (!priv->tp || !priv->tp->hold)
		return -1;
	return priv->tp->hold(priv, ms_p);
}

int ferry_cm_release(struct ferry_cm_id *id)
{
	struct cm_id_priv *priv;

	if (!id)
		return ERR(EINVAL);
	priv = to_cm_id(id);
	return priv->tp && priv->tp->release ? priv->tp->release(priv) : 0;
}

/* --- addresses and names --- */

struct sockaddr *ferry_get_local_addr(struct ferry_cm_id *id)
{
	return (struct sockaddr *)&id->route.addr.src_addr;
}

struct sockaddr *ferry_get_peer_addr(struct ferry_cm_id *id)
{
	return (struct sockaddr *)&id->route.addr.dst_addr;
}

uint16_t ferry_get_src_port(struct ferry_cm_id *id)
{
	return cm_addr_port(ferry_get_local_addr(id));
}

uint16_t ferry_get_dst_port(struct ferry_cm_id *id)
{
	return cm_addr_port(ferry_get_peer_addr(id));
}

static const char *const cm_event_names[] = {
	[FERRY_CM_EVENT_ADDR_RESOLVED]		= "FERRY_CM_EVENT_ADDR_RESOLVED",
	[FERRY_CM_EVENT_ADDR_ERROR]		= "FERRY_CM_EVENT_ADDR_ERROR",
	[FERRY_CM_EVENT_ROUTE_RESOLVED]		= "FERRY_CM_EVENT_ROUTE_RESOLVED",
	[FERRY_CM_EVENT_ROUTE_ERROR]		= "FERRY_CM_EVENT_ROUTE_ERROR",
	[FERRY_CM_EVENT_CONNECT_REQUEST]	= "FERRY_CM_EVENT_CONNECT_REQUEST",
	[FERRY_CM_EVENT_CONNECT_RESPONSE]	= "FERRY_CM_EVENT_CONNECT_RESPONSE",
	[FERRY_CM_EVENT_CONNECT_ERROR]		= "FERRY_CM_EVENT_CONNECT_ERROR",
	[FERRY_CM_EVENT_UNREACHABLE]		= "FERRY_CM_EVENT_UNREACHABLE",
	[FERRY_CM_EVENT_REJECTED]		= "FERRY_CM_EVENT_REJECTED",
	[FERRY_CM_EVENT_ESTABLISHED]		= "FERRY_CM_EVENT_ESTABLISHED",
	[FERRY_CM_EVENT_DISCONNECTED]		= "FERRY_CM_EVENT_DISCONNECTED",
	[FERRY_CM_EVENT_DEVICE_REMOVAL]		= "FERRY_CM_EVENT_DEVICE_REMOVAL",
	[FERRY_CM_EVENT_MULTICAST_JOIN]		= "FERRY_CM_EVENT_MULTICAST_JOIN",
	[FERRY_CM_EVENT_MULTICAST_ERROR]	= "FERRY_CM_EVENT_MULTICAST_ERROR",
	[FERRY_CM_EVENT_ADDR_CHANGE]		= "FERRY_CM_EVENT_ADDR_CHANGE",
	[FERRY_CM_EVENT_TIMEWAIT_EXIT]		= "FERRY_CM_EVENT_TIMEWAIT_EXIT",
};

/** ferry_event_str - the name of @event, as rdma_event_str gives it. */
const char *ferry_event_str(enum ferry_cm_event_type event)
{
	if ((unsigned int)event >= FERRY_ARRAY_SIZE(cm_event_names))
		return "UNKNOWN EVENT";
	return cm_event_names[event];
}
