/*
 * cm_shm_listen.c - the passive side of the shm transport: holding the
 * TCP port and binding the rendezvous name, taking connections, turning
 * a valid CONNECT_REQ into a new id and a CONNECT_REQUEST event, and
 * accepting or rejecting it.
 *
 * A connection whose first record is not a well-formed CONNECT_REQ, sent
 * within SHM_CM_REQUEST_TIMEOUT_MS, is dropped with a log line at info;
 * the listener carries on.  When accept() fails for want of descriptors
 * or memory, the listener stops looking at its socket for a while
 * (SHM_CM_BACKOFF_*, doubling while it lasts) and says so once per
 * episode: the connections wait in the kernel's backlog meanwhile, and a
 * client that tires of waiting goes elsewhere (the shim: over TCP).  What follows the request (the client's QP
 * HELLO) is not ours to read: ferry_accept's QP exchange checks it.
 *
 * Accept never waits for the client.  ferry_accept sends ACCEPT (the CM
 * thread, shm_cm_accept_begin), then in the caller's thread our side of
 * the QP exchange and takes what of the client's side is there; the rest
 * runs in the CM thread as the client's messages arrive (the id's watch,
 * EV_READ), each step non-blocking (prov/shm/shm_conn.c).  Complete, it
 * moves the QP to RTS and reports ESTABLISHED; a client that stalls,
 * sends garbage or hangs up gets CONNECT_ERROR on its id, by
 * SHM_CM_HANDSHAKE_MS at the latest, and delays nobody else: every other
 * request and connection of the listener goes on meanwhile.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "cm_shm.h"

/* --- bind and listen --- */

/*
 * The TCP socket holding the port of @id, and what names it: the caller's
 * (ferry_cm_hold_port), which must be bound to that port, or our own.
 */
static int shm_cm_port_take(struct cm_id_priv *id, struct shm_cm_id *st,
			    struct shm_cm_owner *o)
{
	struct sockaddr *src = (struct sockaddr *)&id->id.route.addr.src_addr;
	int fd = id->port_held ? id->port_held_fd : cm_port_reserve(src);

	if (fd < 0)
		return -1;
	if (!id->port_held)
		st->port_fd = fd;
	if (shm_cm_owner_of_fd(fd, o) < 0)
		return -1;
	if (!cm_addr_port(src))
		cm_addr_set_port(src, o->port);
	if (cm_addr_port(src) != o->port)
		return ERR(EINVAL);
	return 0;
}

/*
 * Bind the rendezvous name of @o.  Nobody can know it before the TCP
 * socket exists, and then it is ours at once: whoever holds it guessed
 * it, and clients would ignore them anyway.
 */
static int shm_cm_bind_name(struct shm_cm_id *st, const struct shm_cm_owner *o)
{
	struct sockaddr_un un;
	socklen_t len;
	int fd = shm_cm_socket();

	if (fd < 0)
		return -1;
	shm_cm_name(o, &un, &len);
	if (bind(fd, (struct sockaddr *)&un, len) < 0) {
		int e = errno;

		if (e == EADDRINUSE)
			ferry_warn("cm: someone guessed the rendezvous name of port %u and "
				   "holds it: no ferry listener there", o->port);
		close(fd);
		return ERR(e);
	}
	st->bind_fd = fd;
	return 0;
}

/*
 * The rendezvous the caller inherited (ferry_cm_adopt_rendezvous): it
 * must be the listening name of @o, the port's socket, and nothing else
 * (another name would send this port's clients to someone else's).
 */
static int shm_cm_adopt_name(struct cm_id_priv *id, struct shm_cm_id *st,
			     const struct shm_cm_owner *o)
{
	struct sockaddr_un want, got;
	socklen_t want_len, got_len = sizeof(got);
	int listening = 0;
	socklen_t ll = sizeof(listening);

	shm_cm_name(o, &want, &want_len);
	if (getsockname(id->rdv_given_fd, (struct sockaddr *)&got, &got_len) < 0 ||
	    getsockopt(id->rdv_given_fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ll) < 0)
		return -1;
	if (got_len != want_len || memcmp(&got, &want, want_len) != 0 || !listening) {
		ferry_info("cm: port %u: the inherited rendezvous is not its listener's",
			   o->port);
		return ERR(EINVAL);
	}
	st->bind_fd = id->rdv_given_fd;
	id->rdv_given_fd = -1;	/* the state's now: closed with it */
	st->shared = true;
	return 0;
}

int shm_cm_bind(struct cm_id_priv *id)
{
	struct sockaddr *src = (struct sockaddr *)&id->id.route.addr.src_addr;
	uint16_t asked = cm_addr_port(src);
	struct shm_cm_owner owner;
	struct shm_cm_id *st;
	char buf[INET6_ADDRSTRLEN];

	if (!cm_addr_is_local(src))
		return ERR(EADDRNOTAVAIL);
	st = shm_cm_state_get(id);
	if (!st)
		return ERR(ENOMEM);
	if (shm_cm_port_take(id, st, &owner) < 0 ||
	    (id->rdv_given ? shm_cm_adopt_name(id, st, &owner) :
			     shm_cm_bind_name(st, &owner)) < 0) {
		int e = errno;

		ferry_info("cm: binding %s port %u: %s", cm_addr_ntop(src, buf, sizeof(buf)),
			   cm_addr_port(src), strerror(e));
		cm_addr_set_port(src, asked);
		return ERR(e);	/* the core's unbind drops the state */
	}
	return 0;
}

static void shm_cm_on_accept(evutil_socket_t fd, short what, void *arg);

/*
 * TCP clients at a port only ferry serves: the tcp transport's, when it
 * serves this listener too (cm_tcp_take); others reset at once, as a port
 * where nothing listens would refuse them (unaccepted, they would wait
 * for a full backlog to time out).  A reset leaves no TIME_WAIT.
 */
static void shm_cm_accept_failed(struct shm_cm_id *st);

static void shm_cm_on_tcp(evutil_socket_t fd, short what, void *arg)
{
	struct linger now = { .l_onoff = 1, .l_linger = 0 };
	int i, sock;

	for (i = 0; i < SHM_CM_ACCEPT_BATCH; i++) {
		sock = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
		if (sock < 0) {
			shm_cm_accept_failed(arg);
			return;
		}
		if (cm_tcp_take(((struct shm_cm_id *)arg)->id, sock))
			continue;	/* a client of the tcp transport: the same port */
		setsockopt(sock, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
		close(sock);
	}
}

static struct event *shm_cm_event_on(int fd, event_callback_fn cb, void *arg)
{
	struct event *ev = event_new(cm_thread_base(), fd, EV_READ | EV_PERSIST, cb, arg);

	if (ev && event_add(ev, NULL) < 0) {
		event_free(ev);
		ev = NULL;
	}
	return ev;
}

/*
 * The rendezvous listens first: a client that finds the TCP socket
 * listening (the only way to learn the name) finds it too.  A port the
 * caller holds is the caller's to listen on.
 */
int shm_cm_listen(struct cm_id_priv *id, int backlog)
{
	struct shm_cm_id *st = shm_cm_state(id);

	if (!st || st->bind_fd < 0)
		return ERR(EINVAL);
	backlog = backlog > 0 ? backlog : SOMAXCONN;
	if (listen(st->bind_fd, backlog) < 0) {
		ferry_warn("cm: listen: %m");
		return -1;
	}
	if (st->port_fd >= 0 && listen(st->port_fd, backlog) < 0) {
		ferry_info("cm: listen on the TCP port: %m");
		return -1;
	}
	id->in_loop = true;
	if (st->shared)
		return 0;	/* taken on demand: ferry_cm_listen_take */
	st->accept_ev = shm_cm_event_on(st->bind_fd, shm_cm_on_accept, st);
	if (st->accept_ev && st->port_fd >= 0)
		st->reset_ev = shm_cm_event_on(st->port_fd, shm_cm_on_tcp, st);
	if (!st->accept_ev || (st->port_fd >= 0 && !st->reset_ev))
		goto err_free_events;
	return 0;

err_free_events:
	if (st->accept_ev)
		event_free(st->accept_ev);
	st->accept_ev = NULL;
	return ERR(ENOMEM);
}

/* --- incoming connections --- */

static void shm_cm_on_request(evutil_socket_t fd, short what, void *arg);
static bool shm_cm_take_request(struct shm_cm_id *st, int sock);

static void shm_cm_pending_new(struct shm_cm_id *st, int sock)
{
	struct shm_cm_pending *p = calloc(1, sizeof(*p));
	struct timeval tv = shm_cm_tv(SHM_CM_REQUEST_TIMEOUT_MS);

	if (p)
		p->ev = event_new(cm_thread_base(), sock, EV_READ, shm_cm_on_request, p);
	if (!p || !p->ev || event_add(p->ev, &tv) < 0) {
		ferry_warn("cm: out of memory, dropping a connection");
		if (p && p->ev)
			event_free(p->ev);
		free(p);
		close(sock);
		return;
	}
	p->listener = st;
	p->sock = sock;
	p->next = st->pending;
	if (p->next)
		p->next->pprev = &p->next;
	p->pprev = &st->pending;
	st->pending = p;
}

static void shm_cm_on_backoff_end(evutil_socket_t fd, short what, void *arg)
{
	struct shm_cm_id *st = arg;

	if (event_add(st->accept_ev, NULL) < 0 ||
	    (st->reset_ev && event_add(st->reset_ev, NULL) < 0))
		ferry_warn("cm: a listener cannot watch its sockets again");
}

/*
 * accept() failed with @err, a want that persists (descriptors, memory):
 * the socket stays readable, so looking again at once would spin.  Both
 * of the listener's sockets pause (the rendezvous and, when it holds
 * one, its TCP port's): the want is the process's, not one socket's.
 */
static void shm_cm_accept_backoff(struct shm_cm_id *st, int err)
{
	struct timeval tv;

	if (!st->backoff_ev)
		st->backoff_ev = evtimer_new(cm_thread_base(), shm_cm_on_backoff_end, st);
	if (st->backoff_ms == 0) {
		st->backoff_ms = SHM_CM_BACKOFF_MIN_MS;
		ferry_warn("cm: a listener cannot accept: %s; trying again in %u ms, and "
			   "less often while that lasts", strerror(err), st->backoff_ms);
	} else if (st->backoff_ms < SHM_CM_BACKOFF_MAX_MS) {
		st->backoff_ms *= 2;
		if (st->backoff_ms > SHM_CM_BACKOFF_MAX_MS)
			st->backoff_ms = SHM_CM_BACKOFF_MAX_MS;
	}
	tv = shm_cm_tv(st->backoff_ms);
	if (!st->backoff_ev || event_del(st->accept_ev) < 0 ||
	    (st->reset_ev && event_del(st->reset_ev) < 0) ||
	    evtimer_add(st->backoff_ev, &tv) < 0)
		ferry_warn("cm: a listener cannot pause: %s", strerror(err));
}

/* accept() on one of @st's sockets failed (errno): pause, or say why. */
static void shm_cm_accept_failed(struct shm_cm_id *st)
{
	int err = errno;

	if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
		shm_cm_accept_backoff(st, err);
	else if (err != EAGAIN && err != EINTR && err != ECONNABORTED)
		ferry_warn("cm: accepting a connection: %s", strerror(err));
}

static void shm_cm_on_accept(evutil_socket_t fd, short what, void *arg)
{
	struct shm_cm_id *st = arg;
	int i, sock;

	for (i = 0; i < SHM_CM_ACCEPT_BATCH; i++) {
		sock = ferry_fd_park(accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
		if (sock < 0) {
			shm_cm_accept_failed(st);
			return;
		}
		if (st->backoff_ms) {
			ferry_info("cm: a listener accepts again");
			st->backoff_ms = 0;
		}
		/* A client sends its request right after connecting: it is
		 * usually there already, and waiting for it costs a trip
		 * through the loop. */
		if (!shm_cm_take_request(st, sock))
			shm_cm_pending_new(st, sock);
	}
}

/* Addresses of a request id: the listener's (the one asked for if the
 * listener is a wildcard) and the client's. */
static void shm_cm_request_route(struct cm_id_priv *req, const struct cm_id_priv *lid,
				 const struct cm_msg *msg)
{
	struct ferry_cm_addr *a = &req->id.route.addr;

	a->src_addr = lid->id.route.addr.src_addr;
	if (cm_addr_is_wildcard((const struct sockaddr *)&a->src_addr))
		a->src_addr = msg->dst;
	a->dst_addr = msg->src;
}

static void shm_cm_on_request_gone(evutil_socket_t fd, short what, void *arg);

/* A valid CONNECT_REQ on @sock: a new id, its CONNECT_REQUEST event. */
static int shm_cm_request(struct shm_cm_id *st, int sock, const struct cm_msg *msg)
{
	struct cm_id_priv *req = cm_id_new_request(st->id, &cm_shm_transport);
	struct ferry_conn_param cp;
	struct shm_cm_id *rst;

	if (!req)
		return -1;
	rst = shm_cm_state_get(req);
	if (!rst)
		goto err_free_id;
	rst->sock = sock;
	/* A quiet listener's (stream sockets') requests are accepted or
	 * rejected as soon as their events are taken, and an accept to a
	 * client gone fails at its first send: watching for the hang-up in
	 * between cost an epoll add and delete per connection.  Meanwhile the
	 * socket waits, as a departed client's connection waits in the
	 * kernel's backlog until accept. */
	if (!req->quiet && shm_cm_arm(rst, sock, EV_CLOSED, shm_cm_on_request_gone, NULL) < 0) {
		rst->sock = -1;
		goto err_free_state;
	}
	shm_cm_request_route(req, st->id, msg);
	req->peer.max_rd_atomic = msg->param.responder_resources;
	req->peer.max_dest_rd_atomic = msg->param.initiator_depth;
	req->peer.retry_count = msg->param.retry_count;
	req->peer.rnr_retry_count = msg->param.rnr_retry_count;
	shm_cm_conn_param(&cp, msg);
	cm_event_report(req, st->id, FERRY_CM_EVENT_CONNECT_REQUEST, 0, &cp);
	return 0;

err_free_state:
	event_free(rst->retry_ev);
	free(rst);
err_free_id:
	cm_id_free_unreported(req);
	return ERR(ENOMEM);
}

/* Is @msg a request this listener may take? */
static bool shm_cm_request_ok(const struct shm_cm_id *st, const struct cm_msg *msg)
{
	const struct sockaddr *src = (const struct sockaddr *)&st->id->id.route.addr.src_addr;

	return msg->type == CM_MSG_CONNECT_REQ &&
	       cm_addr_port((const struct sockaddr *)&msg->dst) == cm_addr_port(src);
}

/*
 * Read the request on @sock, a connection the listener @st took: false if
 * none is there yet.  Else the connection is dealt with (a new request id
 * has it, or it is dropped with a line at info) and true.
 */
static bool shm_cm_take_request(struct shm_cm_id *st, int sock)
{
	uint8_t buf[CM_MSG_MAX_SIZE + 1];
	struct cm_msg msg;
	ssize_t n;

	n = shm_cm_recv(sock, buf, sizeof(buf));
	if (n < 0 && errno == EAGAIN)
		return false;
	if (n <= 0 || cm_msg_parse(buf, (size_t)n, &msg) < 0 ||
	    !shm_cm_request_ok(st, &msg)) {
		ferry_info("cm: dropping a connection: %s",
			   n == 0 ? "closed before its request" :
			   n < 0 ? strerror(errno) : "malformed request");
		close(sock);
		return true;
	}
	if (shm_cm_request(st, sock, &msg) < 0)
		close(sock);
	return true;
}

static void shm_cm_on_request(evutil_socket_t fd, short what, void *arg)
{
	struct shm_cm_pending *p = arg;
	struct timeval tv = shm_cm_tv(SHM_CM_REQUEST_TIMEOUT_MS);

	if (what & EV_TIMEOUT) {
		ferry_info("cm: dropping a connection that sent no request");
		shm_cm_pending_free(p);
		return;
	}
	if (!shm_cm_take_request(p->listener, p->sock)) {
		event_add(p->ev, &tv);
		return;
	}
	p->sock = -1;	/* dealt with */
	shm_cm_pending_free(p);
}

/*
 * The client of a request not yet accepted hung up.  (What it sent after
 * its request, its QP's HELLO, waits unread for ferry_accept's exchange,
 * which checks it.)  Once ferry_accept runs, the socket is its own (the
 * state says so).
 */
static void shm_cm_on_request_gone(evutil_socket_t fd, short what, void *arg)
{
	struct shm_cm_id *st = arg;

	shm_cm_fired(st);
	if (st->id->state != CM_CONNECT_REQ)
		return;
	ferry_info("cm: the client of a pending request went away");
	shm_cm_close_sock(st);
	cm_event_report(st->id, NULL, FERRY_CM_EVENT_CONNECT_ERROR, ECONNRESET, NULL);
}

/* --- listeners shared by fork --- */

/* The shm state of listening @id, or NULL (ENOTSUP: no shm listener). */
static struct shm_cm_id *shm_cm_listener(struct ferry_cm_id *id)
{
	struct shm_cm_id *st = id ? shm_cm_state(to_cm_id(id)) : NULL;

	if (!st || st->bind_fd < 0 || to_cm_id(id)->state != CM_LISTEN) {
		errno = id ? ENOTSUP : EINVAL;
		return NULL;
	}
	return st;
}

int ferry_cm_rendezvous_fd(struct ferry_cm_id *id)
{
	struct shm_cm_id *st = shm_cm_listener(id);

	return st ? st->bind_fd : -1;
}

/* CM thread: stop taking connections unasked (a backoff pause ends too). */
static int shm_cm_share_op(void *arg)
{
	struct shm_cm_id *st = arg;

	if (st->accept_ev)
		event_free(st->accept_ev);
	st->accept_ev = NULL;
	if (st->backoff_ev)
		event_del(st->backoff_ev);
	st->backoff_ms = 0;
	st->shared = true;
	return 0;
}

int ferry_cm_listen_share(struct ferry_cm_id *id)
{
	struct shm_cm_id *st = shm_cm_listener(id);

	if (!st)
		return -1;
	return st->shared ? 0 : cm_thread_call(shm_cm_share_op, st);
}

struct shm_cm_take {
	struct shm_cm_id *st;
	int sock;
};

/* CM thread: the connection taken becomes a request, as shm_cm_on_accept's. */
static int shm_cm_take_op(void *arg)
{
	struct shm_cm_take *t = arg;

	if (!shm_cm_take_request(t->st, t->sock))
		shm_cm_pending_new(t->st, t->sock);
	return 0;
}

/*
 * accept4 in the caller's thread: the processes that lose the race for a
 * connection (EAGAIN) do not pay the trip to the CM thread.
 */
int ferry_cm_listen_take(struct ferry_cm_id *id)
{
	struct shm_cm_take t = { shm_cm_listener(id), -1 };

	if (!t.st)
		return -1;
	if (!t.st->shared)
		return ERR(EINVAL);
	t.sock = ferry_fd_park(accept4(t.st->bind_fd, NULL, NULL,
				       SOCK_NONBLOCK | SOCK_CLOEXEC));
	if (t.sock < 0)
		return -1;
	return cm_thread_call(shm_cm_take_op, &t);
}

/*
 * ferry_cm_progress of a listener: what the CM thread does when its
 * rendezvous is readable (shm_cm_on_accept), in a caller that polls the
 * listener anyway.  A request already there becomes its id and event here
 * (nothing of the listener's state but its id is touched, and only read);
 * a connection still without one, or an accept that failed for want of
 * descriptors, goes to the CM thread, which owns the pending list and
 * the backoff.  A listener shared by fork takes nothing unasked.
 */
int shm_cm_listen_progress(struct shm_cm_id *st)
{
	struct shm_cm_take t = { st, -1 };
	int i, took = 0;

	if (st->shared || st->id->state != CM_LISTEN || !st->accept_ev || st->backoff_ms)
		return 0;
	for (i = 0; i < SHM_CM_ACCEPT_BATCH; i++) {
		t.sock = ferry_fd_park(accept4(st->bind_fd, NULL, NULL,
					       SOCK_NONBLOCK | SOCK_CLOEXEC));
		if (t.sock < 0)
			break;	/* EAGAIN; anything else the CM thread sees too */
		took = 1;
		if (!shm_cm_take_request(st, t.sock))
			cm_thread_call(shm_cm_take_op, &t);
	}
	return took;
}

/* --- accept and reject --- */

/*
 * CM thread: stop watching the socket, send ACCEPT, and give the id to the
 * caller's thread for the rest of ferry_accept: nothing in the loop leads
 * to it until shm_cm_accept arms its watch again.
 */
int shm_cm_accept_begin(struct cm_id_priv *id, const struct ferry_conn_param *param)
{
	struct shm_cm_id *st = shm_cm_state(id);
	struct cm_msg msg = { .type = CM_MSG_ACCEPT };

	if (!st || st->sock < 0)
		return ERR(ECONNRESET);
	shm_cm_disarm(st);
	shm_cm_msg_param(&msg.param, param);
	msg.pdata_len = param->private_data_len;
	if (msg.pdata_len)
		memcpy(msg.pdata, param->private_data, msg.pdata_len);
	if (shm_cm_send(st->sock, &msg) < 0) {
		int e = errno;

		ferry_info("cm: sending ACCEPT: %s", strerror(e));
		shm_cm_close_sock(st);
		return ERR(e);
	}
	id->in_loop = false;
	return 0;
}

/* The exchange is complete: connect the QP, report, watch for hang-up. */
static int shm_cm_accepted(struct shm_cm_id *st, uint32_t peer_qpn)
{
	struct cm_id_priv *id = st->id;

	if (cm_qp_to_rts(id, peer_qpn, &st->xqpp) < 0)
		return -1;
	/* Reported before the watch starts: a hang-up the CM thread sees
	 * then finds the id established. */
	cm_event_report(id, NULL, FERRY_CM_EVENT_ESTABLISHED, 0, NULL);
	if (!id->quiet && shm_cm_watch_hangup(st) < 0) {
		/* Unwatched, the connection could die unseen: end it now. */
		shm_cm_close_sock(st);
		cm_id_disconnected(id);
	}
	return 0;
}

static void shm_cm_on_accept_exchange(evutil_socket_t fd, short what, void *arg);

/*
 * Take the exchange as far as the client's messages allow: 0 when it is
 * complete or waits in the loop, -1 + errno when it failed (the socket is
 * closed, nothing reported).
 */
static int shm_cm_accept_advance(struct shm_cm_id *st)
{
	uint32_t peer_qpn;
	int r, e;

	r = shm_cm_exchange_step(st, shm_cm_on_accept_exchange, &peer_qpn);
	if (r == 0 || (r == 1 && shm_cm_accepted(st, peer_qpn) == 0))
		return 0;
	e = errno;
	ferry_info("cm: QP exchange with the client: %s", strerror(e));
	shm_cm_close_sock(st);
	return ERR(e);
}

/* CM thread: the client sent more, or its time is up. */
static void shm_cm_on_accept_exchange(evutil_socket_t fd, short what, void *arg)
{
	struct shm_cm_id *st = arg;

	shm_cm_fired(st);
	if (shm_cm_accept_advance(st) < 0)
		cm_event_report(st->id, NULL, FERRY_CM_EVENT_CONNECT_ERROR, errno, NULL);
}

/*
 * The caller's thread, which owns the id since shm_cm_accept_begin: our
 * side of the exchange (HELLO; with the client's HELLO, which it sent
 * behind its request, BLOCK... and REGION too), then whatever of the
 * client's answer is already there.  The rest waits for the client in the
 * CM thread, never here: ESTABLISHED or CONNECT_ERROR tells the outcome,
 * by SHM_CM_HANDSHAKE_MS at the latest.
 */
int shm_cm_accept(struct cm_id_priv *id, const struct ferry_conn_param *param)
{
	struct shm_cm_id *st = shm_cm_state(id);
	int e;

	st->xqpp = (struct cm_qp_param){
		.max_rd_atomic = shm_cm_min(param->initiator_depth, id->peer.max_rd_atomic),
		.max_dest_rd_atomic = param->responder_resources,
		.retry_count = id->peer.retry_count,
		.rnr_retry_count = id->peer.rnr_retry_count,
	};
	st->xdeadline_ms = shm_cm_now_ms() + SHM_CM_HANDSHAKE_MS;
	/* Begun on the CM's socket itself, which the provider then holds
	 * rather than a copy (one descriptor per connection less). */
	if (ferry_qp_exchange_begin(id->id.qp, st->sock) < 0) {
		e = errno;
		ferry_info("cm: QP exchange with the client: %s", strerror(e));
		shm_cm_close_sock(st);
		return ERR(e);
	}
	return shm_cm_accept_advance(st);
}

int shm_cm_reject(struct cm_id_priv *id, const void *pdata, uint8_t len)
{
	struct shm_cm_id *st = shm_cm_state(id);
	struct cm_msg msg = { .type = CM_MSG_REJECT, .pdata_len = len };

	if (!st || st->sock < 0)
		return 0;	/* the client is gone already */
	if (len)
		memcpy(msg.pdata, pdata, len);
	if (shm_cm_send(st->sock, &msg) < 0)
		ferry_info("cm: sending REJECT: %m");
	shm_cm_close_sock(st);
	return 0;
}
