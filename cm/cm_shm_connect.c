/*
 * cm_shm_connect.c - the active side of the shm transport: find the
 * listener's rendezvous socket (the one of the TCP port's owner, see
 * cm_shm_owner.c), send CONNECT_REQ and the QP's HELLO, and act on the
 * answer.
 *
 * Nothing here blocks the CM thread.  The answer is awaited on the id's
 * watch for SHM_CM_CONNECT_TIMEOUT_MS, or the id's own connect timeout
 * (ferry_cm_connect_timeout: the socket layer under the shim asks for a
 * short one, so that a stopped or overloaded server sends its clients to
 * TCP at once); then UNREACHABLE with ETIMEDOUT.  After ACCEPT the QP
 * exchange runs in steps on the same watch (shm_cm_client_advance), each
 * taking what the listener sent, until the listener's READY says it holds
 * all of ours: only then ESTABLISHED, so a listener that fails to take our
 * side (out of descriptors, say) leaves us unconnected (CONNECT_ERROR),
 * never connected and then reset.  The exchange has SHM_CM_HANDSHAKE_MS,
 * whatever the connect timeout.  A destination where nothing listens
 * is REJECTED with ECONNREFUSED at once; a listener whose backlog is full
 * is tried again every SHM_CM_RETRY_MS until the connect timeout.
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

/* The connect is over, whichever way: the request goes, the outcome is
 * reported (after which the id may be another thread's).  @cp may point
 * into the request (the listener's ACCEPT): the report copies it first. */
static void shm_cm_connect_end(struct shm_cm_id *st, enum ferry_cm_event_type type,
			       int status, const struct ferry_conn_param *cp)
{
	struct shm_cm_request *rq = st->request;

	st->request = NULL;
	cm_event_report(st->id, NULL, type, status, cp);
	free(rq);
}

static void shm_cm_fail(struct shm_cm_id *st, enum ferry_cm_event_type type, int status)
{
	shm_cm_close_sock(st);
	shm_cm_connect_end(st, type, status, NULL);
}

static unsigned int shm_cm_connect_timeout(const struct cm_id_priv *id);

/* --- the answer --- */

static void shm_cm_on_client_exchange(evutil_socket_t fd, short what, void *arg);

/* Take the exchange as far as the listener's messages allow; then, once it
 * is complete, connect the QP, watch for hang-up and report ESTABLISHED. */
static void shm_cm_client_advance(struct shm_cm_id *st)
{
	struct cm_id_priv *id = st->id;
	struct ferry_conn_param cp;
	uint32_t peer_qpn;
	int r;

	r = shm_cm_exchange_step(st, shm_cm_on_client_exchange, &peer_qpn);
	if (r == 0)
		return;
	if (r < 0 || cm_qp_to_rts(id, peer_qpn, &st->xqpp) < 0) {
		int e = errno;

		ferry_info("cm: connecting QP %u to the listener's: %s", id->id.qp->qp_num,
			   strerror(e));
		shm_cm_fail(st, FERRY_CM_EVENT_CONNECT_ERROR, e);
		return;
	}
	if (!id->quiet && shm_cm_watch_hangup(st) < 0) {
		shm_cm_fail(st, FERRY_CM_EVENT_CONNECT_ERROR, ENOMEM);
		return;
	}
	shm_cm_conn_param(&cp, &st->request->accept);
	shm_cm_connect_end(st, FERRY_CM_EVENT_ESTABLISHED, 0, &cp);
}

static void shm_cm_on_client_exchange(evutil_socket_t fd, short what, void *arg)
{
	struct shm_cm_id *st = arg;

	shm_cm_fired(st);
	shm_cm_client_advance(st);
}

/* ACCEPT arrived: the exchange our request began goes on, in steps. */
static void shm_cm_client_exchange(struct shm_cm_id *st, const struct cm_msg *msg)
{
	struct cm_id_priv *id = st->id;
	const struct cm_msg_param *ours = &st->request->param;

	shm_cm_disarm(st);
	if (!id->id.qp) {
		shm_cm_fail(st, FERRY_CM_EVENT_CONNECT_ERROR, EINVAL);
		return;
	}
	st->xqpp = (struct cm_qp_param){
		.max_rd_atomic = shm_cm_min(ours->initiator_depth,
					    msg->param.responder_resources),
		.max_dest_rd_atomic = ours->responder_resources,
		.retry_count = ours->retry_count,
		.rnr_retry_count = msg->param.rnr_retry_count,
	};
	st->request->accept = *msg;
	/*
	 * The exchange's own deadline, not the id's connect timeout, however
	 * short: the listener answered, so it is alive, and giving up now,
	 * with our READY perhaps out, could leave it a connection it takes
	 * for established while we go elsewhere (the shim, to TCP).
	 */
	st->xdeadline_ms = shm_cm_now_ms() + SHM_CM_HANDSHAKE_MS;
	shm_cm_client_advance(st);
}

static void shm_cm_on_reply(evutil_socket_t fd, short what, void *arg)
{
	struct shm_cm_id *st = arg;
	uint8_t buf[CM_MSG_MAX_SIZE + 1];
	struct ferry_conn_param cp;
	struct cm_msg msg;
	ssize_t n;

	shm_cm_fired(st);
	if (what & EV_TIMEOUT) {
		ferry_info("cm: no answer from the listener in %u ms",
			   shm_cm_connect_timeout(st->id));
		shm_cm_fail(st, FERRY_CM_EVENT_UNREACHABLE, ETIMEDOUT);
		return;
	}
	n = shm_cm_recv(st->sock, buf, sizeof(buf));
	if (n < 0 && errno == EAGAIN) {
		uint64_t now = shm_cm_now_ms(), end = st->request->deadline_ms;
		struct timeval tv = shm_cm_tv(end > now ? end - now : 0);

		if (shm_cm_arm(st, st->sock, EV_READ, shm_cm_on_reply, &tv) < 0)
			shm_cm_fail(st, FERRY_CM_EVENT_CONNECT_ERROR, ENOMEM);
		return;
	}
	if (n <= 0) {
		ferry_info("cm: the listener closed the connection before answering");
		shm_cm_fail(st, FERRY_CM_EVENT_REJECTED, ECONNRESET);
		return;
	}
	if (cm_msg_parse(buf, (size_t)n, &msg) < 0 || msg.type == CM_MSG_CONNECT_REQ) {
		ferry_info("cm: malformed answer from the listener (%zd bytes)", n);
		shm_cm_fail(st, FERRY_CM_EVENT_CONNECT_ERROR, EPROTO);
		return;
	}
	if (msg.type == CM_MSG_ACCEPT) {
		shm_cm_client_exchange(st, &msg);
		return;
	}
	shm_cm_conn_param(&cp, &msg);
	shm_cm_close_sock(st);
	shm_cm_connect_end(st, FERRY_CM_EVENT_REJECTED, FERRY_CM_REJ_CONSUMER_DEFINED, &cp);
}

/* --- finding the listener --- */

static int shm_cm_send_request(struct shm_cm_id *st, int sock)
{
	struct shm_cm_request *rq = st->request;
	uint64_t now = shm_cm_now_ms();
	struct timeval tv = shm_cm_tv(rq->deadline_ms > now ? rq->deadline_ms - now : 0);
	ssize_t n;

	st->sock = sock;
	do
		n = send(sock, rq->req, rq->req_len, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)rq->req_len) {
		ferry_info("cm: sending the request: %s", n < 0 ? strerror(errno) : "short");
		shm_cm_fail(st, FERRY_CM_EVENT_REJECTED, ECONNRESET);
		return 0;
	}
	/* The QP's HELLO right behind the request: the listener's answer can
	 * then carry its whole side of the exchange at once.  A listener that
	 * already rejected us and shut the socket down refuses it: its REJECT
	 * is still there to read. */
	if (ferry_qp_exchange_begin(st->id->id.qp, sock) < 0 && errno != EPIPE &&
	    errno != ECONNRESET) {
		int e = errno;

		ferry_info("cm: starting the QP exchange: %s", strerror(e));
		shm_cm_fail(st, FERRY_CM_EVENT_CONNECT_ERROR, e);
		return 0;
	}
	if (shm_cm_arm(st, sock, EV_READ, shm_cm_on_reply, &tv) < 0) {
		shm_cm_close_sock(st);
		return ERR(ENOMEM);
	}
	return 0;
}

static void shm_cm_on_retry(evutil_socket_t fd, short what, void *arg);

/* The listener's backlog is full: try again shortly, within the deadline. */
static int shm_cm_retry_later(struct shm_cm_id *st)
{
	struct timeval tv = shm_cm_tv(SHM_CM_RETRY_MS);

	if (shm_cm_now_ms() >= st->request->deadline_ms) {
		ferry_info("cm: the listener's backlog stayed full");
		shm_cm_connect_end(st, FERRY_CM_EVENT_UNREACHABLE, ETIMEDOUT, NULL);
		return 0;
	}
	return shm_cm_arm(st, -1, 0, shm_cm_on_retry, &tv);
}

/*
 * Is the listener on @sock, the rendezvous of @o, a process of the user
 * owning the TCP socket?  Anyone may bind an abstract name; only the
 * owner of the port may speak for it.  Nothing has been sent yet.
 */
static bool shm_cm_peer_owns(int sock, const struct shm_cm_owner *o)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		ferry_warn("cm: SO_PEERCRED of a rendezvous socket: %m");
		return false;
	}
	if (cred.uid == o->uid)
		return true;
	ferry_warn("cm: ignoring the rendezvous of TCP port %u: held by uid %u pid %d, "
		   "the port by uid %u", o->port, (unsigned int)cred.uid, (int)cred.pid,
		   (unsigned int)o->uid);
	return false;
}

/* Connect to the rendezvous of @o: its socket, or -1 with errno (EPERM:
 * held by someone else than the port's owner). */
static int shm_cm_dial(const struct shm_cm_owner *o)
{
	struct sockaddr_un un;
	socklen_t len;
	int sock = shm_cm_socket();

	if (sock < 0)
		return -1;
	shm_cm_name(o, &un, &len);
	if (connect(sock, (struct sockaddr *)&un, len) < 0) {
		int e = errno;

		close(sock);
		return ERR(e);
	}
	if (!shm_cm_peer_owns(sock, o)) {
		close(sock);
		return ERR(EPERM);
	}
	return sock;
}

/*
 * Find the listener: the kernel says which TCP socket a connection to the
 * destination would reach, and whose; the rendezvous named after it is
 * taken if its owner's.  None, or not its owner's: REJECTED (ECONNREFUSED),
 * and the preload shim connects over TCP, where the kernel decides.
 */
static int shm_cm_try_connect(struct shm_cm_id *st)
{
	const struct sockaddr *dst = (const struct sockaddr *)&st->id->id.route.addr.dst_addr;
	struct shm_cm_owner owner;
	char buf[INET6_ADDRSTRLEN];
	int sock;

	/* The shim's probe looked a moment ago: its answer, once. */
	if (!shm_cm_probe_owner_take(dst, &owner) && shm_cm_owner_of(dst, &owner) < 0) {
		/* Unable to tell who owns the port, ferry cannot be used. */
		if (errno != ENOENT)
			ferry_warn("cm: cannot ask the kernel who listens on %s port %u "
				   "(sock_diag): %m", cm_addr_ntop(dst, buf, sizeof(buf)),
				   cm_addr_port(dst));
		else
			ferry_info("cm: nothing listens on %s port %u",
				   cm_addr_ntop(dst, buf, sizeof(buf)), cm_addr_port(dst));
		goto refused;
	}
	sock = shm_cm_dial(&owner);
	if (sock >= 0)
		return shm_cm_send_request(st, sock);
	if (errno == EAGAIN)
		return shm_cm_retry_later(st);
	/* What is learnt here spares later connects the dial (cm_shm_probe.c). */
	if (errno == ECONNREFUSED || errno == ENOENT) {
		ferry_info("cm: no ferry listener on %s port %u (shm)",
			   cm_addr_ntop(dst, buf, sizeof(buf)), cm_addr_port(dst));
		shm_cm_probe_learn(dst, &owner, FERRY_CM_PROBE_NO_FERRY);
	} else if (errno == EPERM) {
		shm_cm_probe_learn(dst, &owner, FERRY_CM_PROBE_NOT_OWNER);
	} else {
		ferry_info("cm: connecting to a rendezvous socket: %m");
	}
refused:
	shm_cm_connect_end(st, FERRY_CM_EVENT_REJECTED, ECONNREFUSED, NULL);
	return 0;
}

static void shm_cm_on_retry(evutil_socket_t fd, short what, void *arg)
{
	struct shm_cm_id *st = arg;

	shm_cm_fired(st);
	if (shm_cm_try_connect(st) < 0)
		shm_cm_fail(st, FERRY_CM_EVENT_CONNECT_ERROR, errno);
}

static int shm_cm_encode_request(struct shm_cm_id *st, const struct ferry_conn_param *param)
{
	struct shm_cm_request *rq = st->request;
	struct cm_msg msg = { .type = CM_MSG_CONNECT_REQ };
	const struct ferry_cm_addr *a = &st->id->id.route.addr;
	ssize_t len;

	msg.src = a->src_addr;
	msg.dst = a->dst_addr;
	shm_cm_msg_param(&msg.param, param);
	msg.pdata_len = param->private_data_len;
	if (msg.pdata_len)
		memcpy(msg.pdata, param->private_data, msg.pdata_len);
	len = cm_msg_encode(&msg, rq->req, sizeof(rq->req));
	if (len < 0)
		return -1;
	rq->req_len = (size_t)len;
	rq->param = msg.param;
	return 0;
}

/* How long to wait for the listener's answer. */
static unsigned int shm_cm_connect_timeout(const struct cm_id_priv *id)
{
	return id->connect_timeout_ms ? id->connect_timeout_ms : SHM_CM_CONNECT_TIMEOUT_MS;
}

int shm_cm_connect(struct cm_id_priv *id, const struct ferry_conn_param *param)
{
	struct shm_cm_id *st = shm_cm_state_get(id);

	if (!st)
		return ERR(ENOMEM);
	if (st->sock >= 0)
		return ERR(EISCONN);
	if (!st->request && !(st->request = calloc(1, sizeof(*st->request))))
		return ERR(ENOMEM);
	if (shm_cm_encode_request(st, param) < 0)
		return -1;
	st->request->deadline_ms = shm_cm_now_ms() + shm_cm_connect_timeout(id);
	return shm_cm_try_connect(st);
}
