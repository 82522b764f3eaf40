/*
 * cm_shm.c - the shm transport of the CM: connections between processes of
 * one host (one network namespace).
 *
 * Rendezvous.  A bound id holds the kernel TCP socket of its address and
 * port (its own, bound and listening beside it, or under the preload shim
 * the program's: ferry_cm_hold_port) and an abstract AF_UNIX
 * SOCK_SEQPACKET socket named after that TCP socket,
 * "\0ferry/cm/v2/<port>/<inode>/<cookie>" (cm_shm_owner.c).  So the
 * kernel's TCP rules say who may listen on a port (privileged ports,
 * EADDRINUSE), and nobody can bind a listener's name before its TCP
 * socket exists.  Abstract names belong to the network namespace, the
 * scope of a TCP port, and vanish with the last descriptor: a listener
 * that dies frees its port.  A client asks the kernel (sock_diag) which
 * TCP socket a connection to the destination would reach, connects to
 * that socket's name, and goes on only if SO_PEERCRED says the listener
 * runs as the TCP socket's owner: anyone may bind an abstract name, and
 * an ignored squatter sees a connection closed before a byte was sent.
 * No TCP listener, no rendezvous, or the wrong uid: REJECTED with
 * ECONNREFUSED (under the preload shim: kernel TCP instead).  ferry(7),
 * "Port ownership", says what is left to a squatter.
 *
 * Handshake, over the accepted socket (CM messages in cm_msg.h, the QP
 * exchange's in prov/shm/shm_conn.c):
 *
 *   client (the caller, then CM thread)   listener (CM thread, then the user)
 *   CONNECT_REQ, HELLO  -------------->  new id, CONNECT_REQUEST event;
 *                                        ferry_cm_create_qp, ferry_accept:
 *                <------------------   ACCEPT, HELLO, BLOCK..., REGION
 *                                        (or REJECT, then close)
 *   BLOCK..., REGION, READY  --------->  (CM thread from here)
 *                <------------------   READY
 *   RTR, RTS, ESTABLISHED                RTR, RTS, ESTABLISHED
 *
 * The client begins the QP exchange (ferry_qp_exchange_begin: HELLO)
 * right behind its request and takes it on in steps when ACCEPT comes;
 * the listener's CM reads the request alone and leaves the HELLO queued
 * for the exchange that ferry_accept begins, so until then it watches a
 * request's socket for hang-up only.  Nobody waits for the peer: each
 * side runs a step (ferry_qp_exchange_step: take what is there, answer,
 * EAGAIN while more must come) in the owner's thread, and again from the
 * id's watch (EV_READ) whenever the peer sends more, until the exchange
 * completes or SHM_CM_HANDSHAKE_MS passes (shm_cm_exchange_step).  So
 * ferry_accept returns with our side sent, and the client's CM thread
 * serves its other ids meanwhile.  READY says "I hold all you sent": each
 * side is established only with the other's, so a side that cannot take
 * the other's memory (out of descriptors) leaves both unconnected.
 * Until then the socket is read by the exchange only; the CM watches it
 * for readability, never reads it.  After the exchange the socket belongs
 * to the shm provider as much as to us: it holds the same descriptor
 * (ferry_fd_hold: whichever of us lets go last closes it), watches it for
 * hang-up and may read BLOCK messages from it.  So from then on the CM
 * only watches it for EV_CLOSED (EPOLLRDHUP), and shutdown()s it to
 * disconnect, which both providers' monitors and both CMs see.  A quiet
 * id (ferry_cm_quiet: stream sockets) is not watched at all: it wants no
 * DISCONNECTED, and the provider's monitor sees the hang-up for its QP.
 * Once established it may let go of the socket altogether (ferry_cm_let_go,
 * shm_cm_let_go), leaving the provider the one holder.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "cm_shm.h"


/* --- per-id state --- */

struct shm_cm_id *shm_cm_state(struct cm_id_priv *id)
{
	return *cm_tp_data(id, &cm_shm_transport);
}

static void shm_cm_unaimed(evutil_socket_t fd, short what, void *arg)
{
}

struct shm_cm_id *shm_cm_state_get(struct cm_id_priv *id)
{
	void **slot = cm_tp_data(id, &cm_shm_transport);
	struct event_base *base;
	struct shm_cm_id *st = *slot;

	if (st)
		return st;
	base = cm_thread_base();
	st = calloc(1, sizeof(*st));
	if (!base || !st) {
		free(st);
		return NULL;
	}
	st->retry_ev = event_new(base, -1, 0, shm_cm_unaimed, st);
	if (!st->retry_ev) {
		free(st);
		return NULL;
	}
	st->id = id;
	st->bind_fd = st->port_fd = st->sock = -1;
	*slot = st;
	return st;
}

void shm_cm_pending_free(struct shm_cm_pending *p)
{
	*p->pprev = p->next;
	if (p->next)
		p->next->pprev = p->pprev;
	event_free(p->ev);
	if (p->sock >= 0)
		close(p->sock);
	free(p);
}

static void shm_cm_destroy(struct cm_id_priv *id)
{
	void **slot = cm_tp_data(id, &cm_shm_transport);
	struct shm_cm_id *st = *slot;

	if (!st)
		return;
	while (st->pending)
		shm_cm_pending_free(st->pending);
	if (st->accept_ev)
		event_free(st->accept_ev);
	if (st->backoff_ev)
		event_free(st->backoff_ev);
	if (st->reset_ev)
		event_free(st->reset_ev);
	if (st->bind_fd >= 0)
		close(st->bind_fd);
	if (st->port_fd >= 0)
		close(st->port_fd);
	shm_cm_close_sock(st);
	event_free(st->retry_ev);
	free(st->request);
	free(st);
	*slot = NULL;
}

/* --- sockets --- */

struct timeval shm_cm_tv(uint64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

	return tv;
}

int shm_cm_socket(void)
{
	int fd = ferry_fd_park(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));

	if (fd < 0)
		ferry_warn("cm: AF_UNIX socket: %m");
	return fd;
}

/*
 * Close the connection socket.  shutdown() first: after the QP exchange the
 * shm provider holds it as well, and the peer must see the hang-up now.
 * Then drop what we never read (a client's HELLO, when we reject it): a
 * socket closed with records unread makes the peer's next receive fail
 * with ECONNRESET even before the records still queued for it, our REJECT
 * among them.  Once shut down, nothing new comes in.
 */
void shm_cm_close_sock(struct shm_cm_id *st)
{
	char junk[64];

	shm_cm_disarm(st);
	if (st->sock < 0)
		return;
	/* A detached id's connection lives on in another process: only our
	 * descriptor goes. */
	if (!__atomic_load_n(&st->id->detached, __ATOMIC_ACQUIRE)) {
		shutdown(st->sock, SHUT_RDWR);
		while (recv(st->sock, junk, sizeof(junk), MSG_DONTWAIT) > 0)
			;	/* descriptors that came along are closed by the kernel */
	}
	ferry_fd_close(st->sock);	/* the provider may hold it too */
	st->sock = -1;
}

/* Close the descriptors of every SCM_RIGHTS in @mh; true if there were any. */
static bool shm_cm_close_passed_fds(struct msghdr *mh)
{
	struct cmsghdr *cm;
	bool any = false;

	for (cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		size_t i, n;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			close(fd);
		}
		any = true;
	}
	return any;
}

/*
 * One record, never blocking.  Returns its length, 0 when the peer closed,
 * or -1 with errno (EBADMSG: longer than any message, or with descriptors,
 * which are closed).  Credentials may come along: the QP exchange that
 * began on the socket turned SO_PASSCRED on; they are ignored.
 */
ssize_t shm_cm_recv(int sock, uint8_t *buf, size_t len)
{
	union {
		char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf),
	};
	ssize_t n;

	do
		n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n > 0 && (shm_cm_close_passed_fds(&mh) ||
		      (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))))
		return ERR(EBADMSG);
	return n;
}

int shm_cm_send(int sock, const struct cm_msg *msg)
{
	uint8_t buf[CM_MSG_MAX_SIZE];
	ssize_t len = cm_msg_encode(msg, buf, sizeof(buf)), n;

	if (len < 0)
		return -1;
	do
		n = send(sock, buf, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != len)
		return n < 0 ? -1 : ERR(EPROTO);
	return 0;
}

void shm_cm_conn_param(struct ferry_conn_param *cp, const struct cm_msg *msg)
{
	memset(cp, 0, sizeof(*cp));
	cp->private_data = msg->pdata;
	cp->private_data_len = msg->pdata_len;
	cp->responder_resources = msg->param.responder_resources;
	cp->initiator_depth = msg->param.initiator_depth;
	cp->flow_control = msg->param.flow_control;
	cp->retry_count = msg->param.retry_count;
	cp->rnr_retry_count = msg->param.rnr_retry_count;
}

void shm_cm_msg_param(struct cm_msg_param *mp, const struct ferry_conn_param *cp)
{
	mp->responder_resources = cp->responder_resources;
	mp->initiator_depth = cp->initiator_depth;
	mp->flow_control = cp->flow_control ? 1 : 0;
	mp->retry_count = cp->retry_count;
	mp->rnr_retry_count = cp->rnr_retry_count;
}

uint8_t shm_cm_min(uint8_t a, uint8_t b)
{
	return a < b ? a : b;
}

/* --- established connections: hang-up only --- */

static void shm_cm_on_hangup(evutil_socket_t fd, short what, void *arg)
{
	struct shm_cm_id *st = arg;

	shm_cm_fired(st);
	ferry_debug("cm: peer of QP %u hung up",
		    st->id->id.qp ? st->id->id.qp->qp_num : 0);
	shm_cm_close_sock(st);
	if (st->id->state == CM_ESTABLISHED)
		cm_id_disconnected(st->id);
}

int shm_cm_arm(struct shm_cm_id *st, int fd, short what, event_callback_fn cb,
	       const struct timeval *tv)
{
	struct event_base *base = cm_thread_base();
	int ret;

	if (!base)
		return ERR(ENOMEM);
	st->armed = true;
	st->retry_armed = fd < 0;
	st->armed_deadline_ms = tv ? shm_cm_now_ms() + (uint64_t)tv->tv_sec * 1000 +
				     (uint64_t)tv->tv_usec / 1000 : 0;
	st->id->in_loop = true;	/* before the loop can see it */
	if (fd >= 0)
		ret = cm_watch_add(&st->watch, fd, what, cb, st, st->armed_deadline_ms);
	else if (event_assign(st->retry_ev, base, -1, 0, cb, st) < 0)
		ret = -1;
	else
		ret = event_add(st->retry_ev, tv);
	if (ret < 0) {
		st->armed = false;
		return ERR(ENOMEM);
	}
	return 0;
}

/* Stop what is armed; the retry timer only if it may be (event_del from
 * another thread than the CM thread's wakes it up). */
void shm_cm_disarm(struct shm_cm_id *st)
{
	st->armed = false;
	cm_watch_del(&st->watch);
	if (st->retry_armed)
		event_del(st->retry_ev);
	st->retry_armed = false;
}

void shm_cm_fired(struct shm_cm_id *st)
{
	st->armed = false;
	st->retry_armed = false;
}

int shm_cm_exchange_step(struct shm_cm_id *st, event_callback_fn cb, uint32_t *peer_qpn_p)
{
	struct ferry_qp *qp = st->id->id.qp;
	uint64_t now;
	struct timeval tv;

	if (ferry_qp_exchange_step(qp, peer_qpn_p) == 0)
		return 1;
	if (errno != EAGAIN)
		return -1;
	now = shm_cm_now_ms();
	if (now >= st->xdeadline_ms) {
		ferry_info("cm: QP %u: the peer did not finish the exchange in time", qp->qp_num);
		ferry_qp_exchange_abort(qp);
		return ERR(ETIMEDOUT);
	}
	tv = shm_cm_tv(st->xdeadline_ms - now);
	if (shm_cm_arm(st, st->sock, EV_READ, cb, &tv) < 0) {
		ferry_qp_exchange_abort(qp);
		return ERR(ENOMEM);
	}
	return 0;
}

/* Watch an exchanged socket for hang-up, never reading it. */
int shm_cm_watch_hangup(struct shm_cm_id *st)
{
	if (shm_cm_arm(st, st->sock, EV_CLOSED, shm_cm_on_hangup, NULL) < 0) {
		ferry_warn("cm: cannot watch a connection for hang-up");
		return -1;
	}
	return 0;
}

/* Is @fd readable (or hung up) right now?  One poll(2), never waiting. */
static bool shm_cm_readable(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return fd >= 0 && poll(&pfd, 1, 0) == 1 && !(pfd.revents & POLLNVAL);
}

/*
 * Claim the read watch of @st: true if it is ours now.  What the id's flags
 * say is only a hint until cm_watch_del has claimed the watch (the CM
 * thread may be running its callback right now); a watch that is no
 * longer a read watch then goes back.
 */
static bool shm_cm_claim_read(struct shm_cm_id *st)
{
	if (!st->armed || st->retry_armed || st->watch.what != EV_READ ||
	    !cm_watch_del(&st->watch))
		return false;
	if (st->watch.what == EV_READ)
		return true;
	if (cm_watch_readd(&st->watch) < 0)
		ferry_warn("cm: cannot watch a connection again");
	return false;
}

/*
 * cm_transport.progress.  A listener takes what waits at its rendezvous
 * (cm_shm_listen.c); any other id whose read watch (the listener's answer,
 * the peer's side of the exchange) has something to read is taken back
 * from the loop, as unloop does, and its callback runs here: a step that
 * reads what is there and, when more must come, arms the watch again.
 */
static int shm_cm_progress(struct cm_id_priv *id)
{
	struct shm_cm_id *st = shm_cm_state(id);

	if (!st)
		return 0;
	if (st->bind_fd >= 0)
		return shm_cm_listen_progress(st);
	if (st->held || !st->armed || st->watch.what != EV_READ ||
	    !shm_cm_readable(st->sock) || !shm_cm_claim_read(st))
		return 0;
	id->in_loop = false;
	st->watch.cb(st->sock, EV_READ, st);
	return 1;
}

/*
 * cm_transport.hold: the read watch, claimed, and the caller sleeps on its
 * socket until its deadline.  Until ferry_cm_release nothing of the id is
 * in the loop; a call that takes the id meanwhile (unloop) ends the hold.
 */
static int shm_cm_hold(struct cm_id_priv *id, int *ms_p)
{
	struct shm_cm_id *st = shm_cm_state(id);
	uint64_t now, left;

	if (!st || st->bind_fd >= 0 || st->held || !shm_cm_claim_read(st))
		return -1;
	st->held = true;
	id->in_loop = false;
	if (st->armed_deadline_ms) {
		now = shm_cm_now_ms();
		left = st->armed_deadline_ms > now ? st->armed_deadline_ms - now : 0;
		if (left > INT_MAX)
			left = INT_MAX;
		if (*ms_p < 0 || (uint64_t)*ms_p > left)
			*ms_p = (int)left;
	}
	return st->sock;
}

/*
 * cm_transport.release: the step, if it can run (EV_TIMEOUT once the
 * deadline has passed), else the watch goes back.  Should that fail, the
 * callback runs anyway: finding nothing to read, it arms the watch itself
 * or, failing that too, ends the connect with its error.
 */
static int shm_cm_release(struct cm_id_priv *id)
{
	struct shm_cm_id *st = shm_cm_state(id);
	short what = EV_READ;

	if (!st || !st->held)
		return 0;
	st->held = false;
	if (st->armed_deadline_ms && shm_cm_now_ms() >= st->armed_deadline_ms)
		what = EV_TIMEOUT;
	else if (!shm_cm_readable(st->sock)) {
		id->in_loop = true;
		if (cm_watch_readd(&st->watch) == 0)
			return 0;
		id->in_loop = false;
	}
	st->watch.cb(st->sock, what, st);
	return 1;
}

/*
 * The caller's thread: take the id back from the loop for a call that
 * ends or restarts its life there.  cm_watch_del (event_del for the retry
 * timer) waits for a callback of the id that runs right now, and once it
 * returns none will run; neither wakes the CM thread.  A listener
 * (its connections and requests have events of their own) stays the
 * loop's.
 */
static int shm_cm_unloop(struct cm_id_priv *id)
{
	struct shm_cm_id *st = shm_cm_state(id);

	if (st && st->accept_ev)	/* set at listen, before the loop saw it */
		return ERR(EBUSY);
	if (st) {	/* armed says whether to give it back */
		st->held = false;	/* a sleeping caller's hold ends here */
		cm_watch_del(&st->watch);
		if (st->retry_armed)
			event_del(st->retry_ev);
	}
	id->in_loop = false;
	return 0;
}

/*
 * The call that took the id failed without changing it: give the loop its
 * event back as it was (the rest of its timeout).
 */
static void shm_cm_reloop(struct cm_id_priv *id)
{
	struct shm_cm_id *st = shm_cm_state(id);
	uint64_t now = shm_cm_now_ms();
	struct timeval tv;

	if (!st || !st->armed) {
		id->in_loop = true;	/* nothing of it there: harmless */
		return;
	}
	tv = shm_cm_tv(st->armed_deadline_ms > now ? st->armed_deadline_ms - now : 0);
	id->in_loop = true;
	if ((st->retry_armed ? event_add(st->retry_ev, &tv) : cm_watch_readd(&st->watch)) < 0)
		ferry_warn("cm: cannot watch a connection again");
}


/* --- the table --- */

/* The shm transport's address rule (core's table): this host. */
bool shm_cm_reaches(const struct sockaddr *dst)
{
	return cm_addr_is_local(dst);
}

static int shm_cm_resolve_addr(struct cm_id_priv *id, int timeout_ms)
{
	cm_event_report(id, NULL, FERRY_CM_EVENT_ADDR_RESOLVED, 0, NULL);
	return 0;
}

static int shm_cm_resolve_route(struct cm_id_priv *id, int timeout_ms)
{
	cm_event_report(id, NULL, FERRY_CM_EVENT_ROUTE_RESOLVED, 0, NULL);
	return 0;
}

static int shm_cm_disconnect(struct cm_id_priv *id)
{
	struct shm_cm_id *st = shm_cm_state(id);

	if (st)
		shm_cm_close_sock(st);
	return 0;
}

/*
 * A quiet id, established, never looks at its socket again: the provider,
 * which holds it too, may keep it alone (and make it a stream socket's
 * own, ferry_comp_channel_on_conn).  Its disconnect then reaches the peer
 * through the QP's error (the provider shuts such a socket down).
 */
static void shm_cm_let_go(struct cm_id_priv *id)
{
	struct shm_cm_id *st = shm_cm_state(id);

	if (!st || st->sock < 0)
		return;
	shm_cm_disarm(st);
	ferry_fd_close(st->sock);
	st->sock = -1;
}

const struct cm_transport cm_shm_transport = {
	.calls_inline = true,
	.probe = shm_cm_probe,
	.bind = shm_cm_bind,
	.listen = shm_cm_listen,
	.resolve_addr = shm_cm_resolve_addr,
	.resolve_route = shm_cm_resolve_route,
	.qp_init = cm_qp_to_init_default,
	.connect = shm_cm_connect,
	.unloop = shm_cm_unloop,
	.reloop = shm_cm_reloop,
	.accept_begin = shm_cm_accept_begin,
	.accept = shm_cm_accept,
	.reject = shm_cm_reject,
	.disconnect = shm_cm_disconnect,
	.destroy = shm_cm_destroy,
	.let_go = shm_cm_let_go,
	.progress = shm_cm_progress,
	.hold = shm_cm_hold,
	.release = shm_cm_release,
};
