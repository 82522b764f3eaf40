/*
 * cm_tcp_listen.c - the passive side of the CM's tcp transport: the
 * listening socket, accepted connections until their MPA Request is in
 * (TCM_REQUEST_TIMEOUT_MS at most, read as it comes: the CM thread never
 * waits on one), the CONNECT_REQUEST, ferry_accept and ferry_reject.
 *
 * The port.  When the shm transport serves the same listener (it binds
 * first, by core's table) its kernel TCP socket holds the port and
 * listens; it turns TCP clients away unless we take them (cm_tcp_take):
 * one socket, one port, both transports.  Alone (FERRY_TRANSPORT=tcp),
 * ours binds and listens -- unless the caller holds the port (the shim,
 * ferry_cm_hold_port): then the program's own socket listens, and the
 * shim offers us each client it accepts (ferry_cm_offer_tcp), which we
 * take when its first bytes are an MPA Request.
 *
 * A connection that sends anything but a valid Request in time, or
 * closes, is dropped with a line at info; the listener carries on.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "cm_tcp.h"

/* Most connections taken from the kernel per readiness of the listener. */
#define TCM_ACCEPT_BATCH 16
/* Most connections of a listener whose Request is not in yet: more are
 * closed at once, so that silent clients cost a bounded memory and
 * descriptors (each leaves within TCM_REQUEST_TIMEOUT_MS). */
#define TCM_PENDING_MAX 64
/* How long a listener out of descriptors leaves its socket alone. */
#define TCM_BACKOFF_MS 100

/* An accepted connection whose Request is not in yet. */
struct tcm_pending {
	struct tcm_id *lst;
	int fd;
	struct event *ev;
	struct ferry_tcp_mpa *mpa;
	uint64_t deadline_ms;
	struct tcm_pending *next, **pprev;
};

/* --- bind and listen --- */

/* Our own socket bound to the id's source (port 0: the kernel's pick). */
static int tcm_bind_socket(struct cm_id_priv *id)
{
	return cm_port_reserve((struct sockaddr *)&id->id.route.addr.src_addr);
}

/* Is tcp the transport FERRY_TRANSPORT forces? */
static bool tcm_forced(void)
{
	const struct cm_transport *forced;

	return cm_transport_forced(&forced) == 0 && forced == &cm_tcp_transport;
}

int tcm_bind(struct cm_id_priv *id)
{
	bool via_shm = *cm_tp_data(id, &cm_shm_transport) != NULL;
	struct tcm_id *st;
	int fd = -1;

	/* A port the caller holds (the shim) stays the caller's, and TCP's,
	 * unless tcp is forced: then its clients come through the caller. */
	if (id->port_held && !tcm_forced())
		return ERR(ENOTSUP);
	if (!via_shm && !id->port_held && (fd = tcm_bind_socket(id)) < 0)
		return -1;
	st = tcm_state_new(id, fd);
	if (!st) {
		if (fd >= 0)
			close(fd);
		return ERR(ENOMEM);
	}
	st->port_via_shm = via_shm;
	st->port_via_caller = id->port_held;
	st->phase = TCM_BOUND;
	return 0;
}

static void tcm_on_accept(evutil_socket_t fd, short what, void *arg);

int tcm_listen(struct cm_id_priv *id, int backlog)
{
	struct tcm_id *st = tcm_state(id);

	if (!st || st->phase != TCM_BOUND)
		return ERR(EINVAL);
	st->phase = TCM_LISTENING;
	id->in_loop = true;
	if (st->port_via_shm || st->port_via_caller)
		return 0;	/* another's socket listens, and hands clients over */
	if (listen(st->fd, backlog > 0 ? backlog : SOMAXCONN) < 0) {
		ferry_info("cm: tcp listen: %m");
		return -1;
	}
	st->ev = event_new(cm_thread_base(), st->fd, EV_READ | EV_PERSIST, tcm_on_accept, st);
	if (!st->ev || event_add(st->ev, NULL) < 0)
		return ERR(ENOMEM);
	return 0;
}

/* --- pending connections --- */

static void tcm_pending_free(struct tcm_pending *p)
{
	if (p->ev)
		event_free(p->ev);
	if (p->fd >= 0)
		close(p->fd);
	ferry_tcp_mpa_free(p->mpa);
	p->lst->npending--;
	*p->pprev = p->next;
	if (p->next)
		p->next->pprev = p->pprev;
	free(p);
}

void tcm_listen_destroy(struct tcm_id *st)
{
	while (st->pending)
		tcm_pending_free(st->pending);
	if (st->backoff_ev)
		event_free(st->backoff_ev);
	st->backoff_ev = NULL;
}

static void tcm_on_request_gone(evutil_socket_t fd, short what, void *arg);

/* The request's id, its CONNECT_REQUEST; the socket and exchange move to it. */
static void tcm_request(struct tcm_pending *p)
{
	struct cm_id_priv *lst = p->lst->id;
	struct cm_id_priv *id = cm_id_new_request(lst, &cm_tcp_transport);
	struct ferry_conn_param param = { .responder_resources = 16, .initiator_depth = 16,
					  .retry_count = 7, .rnr_retry_count = 7 };
	uint8_t pdata[FERRY_MAX_PRIVATE_DATA_CONNECT];
	struct tcm_id *st;
	const uint8_t *pd;
	size_t len;

	if (!id || !(st = tcm_state_new(id, p->fd))) {
		ferry_warn("cm: dropping a tcp connection request: %m");
		if (id)
			cm_id_free_unreported(id);
		tcm_pending_free(p);
		return;
	}
	pd = ferry_tcp_mpa_pdata(p->mpa, &len);
	if (len > sizeof(pdata))
		len = sizeof(pdata);	/* the API's limit for a request */
	if (len)
		memcpy(pdata, pd, len);
	param.private_data = len ? pdata : NULL;
	param.private_data_len = (uint8_t)len;
	st->mpa = p->mpa;
	st->phase = TCM_REQUESTED;
	p->mpa = NULL;
	p->fd = -1;
	tcm_pending_free(p);
	tcm_addrs_from_socket(id, st->fd);
	id->peer = (struct cm_qp_param){ .max_rd_atomic = 16, .max_dest_rd_atomic = 16,
					 .retry_count = 7, .rnr_retry_count = 7 };
	st->deadline_ms = 0;	/* the user takes the time it takes */
	if (tcm_arm(st, EV_READ, tcm_on_request_gone) < 0)
		ferry_info("cm: cannot watch a tcp request for its client's hang-up");
	cm_event_report(id, lst, FERRY_CM_EVENT_CONNECT_REQUEST, 0, &param);
}

static int tcm_pending_arm(struct tcm_pending *p);

static void tcm_on_request(evutil_socket_t fd, short what, void *arg)
{
	struct tcm_pending *p = arg;
	int rc;

	if (what & EV_TIMEOUT) {
		ferry_info("cm: a tcp client sent no MPA Request within %d ms",
			   TCM_REQUEST_TIMEOUT_MS);
		tcm_pending_free(p);
		return;
	}
	rc = ferry_tcp_mpa_read(p->mpa, p->fd);
	if (rc == 1) {
		tcm_request(p);
		return;
	}
	if (rc < 0)
		ferry_info("cm: dropping a tcp connection before its request: %m");
	if (rc < 0 || tcm_pending_arm(p) < 0)
		tcm_pending_free(p);
}

static int tcm_pending_arm(struct tcm_pending *p)
{
	uint64_t now = monotime_ms(), left = p->deadline_ms > now ? p->deadline_ms - now : 0;
	struct timeval tv = { .tv_sec = (time_t)(left / 1000),
			      .tv_usec = (suseconds_t)(left % 1000) * 1000 };

	if (!p->ev)
		p->ev = event_new(cm_thread_base(), p->fd, EV_READ, tcm_on_request, p);
	return p->ev && event_add(p->ev, &tv) == 0 ? 0 : ERR(ENOMEM);
}

/* Keep @fd, a fresh connection, until its Request is in. */
static void tcm_pending_new(struct tcm_id *lst, int fd)
{
	struct tcm_pending *p;
	int on = 1;

	if (lst->npending >= TCM_PENDING_MAX) {
		ferry_info("cm: %d tcp connections wait for their request: closing one more",
			   TCM_PENDING_MAX);
		close(fd);
		return;
	}
	p = calloc(1, sizeof(*p));
	if (!p || !(p->mpa = ferry_tcp_mpa_new(false, 7))) {
		ferry_warn("cm: out of memory, dropping a tcp connection");
		free(p);
		close(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	p->lst = lst;
	p->fd = fd;
	p->deadline_ms = monotime_ms() + TCM_REQUEST_TIMEOUT_MS;
	p->next = lst->pending;
	if (p->next)
		p->next->pprev = &p->next;
	p->pprev = &lst->pending;
	lst->pending = p;
	lst->npending++;
	if (tcm_pending_arm(p) < 0)
		tcm_pending_free(p);
}

/* Made non-blocking, kept above the descriptors programs use. */
static int tcm_take_fd(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -1;
	return ferry_fd_park(fd);
}

bool cm_tcp_take(struct cm_id_priv *listener, int fd)
{
	struct tcm_id *st = tcm_state(listener);

	if (!st || st->phase != TCM_LISTENING || !(st->port_via_shm || st->port_via_caller))
		return false;
	fd = tcm_take_fd(fd);
	if (fd >= 0)
		tcm_pending_new(st, fd);
	return true;
}

/* --- clients the caller offers (ferry_cm_offer_tcp) --- */

/* How long an offered client may take to send its first 16 bytes.  An
 * MPA initiator sends its Request at once; a client of a protocol where
 * the server speaks first costs the accept this long, once. */
#define TCM_OFFER_WAIT_MS 500

/* The key an MPA Request begins with (RFC 5044, 7.1). */
static const char tcm_req_key[16] = "MPA ID Req Frame";

/*
 * Do @fd's first bytes begin an MPA Request?  Peeked, so nothing is
 * consumed: a client that is not one stays whole for the caller.
 */
static bool tcm_offer_is_mpa(int fd)
{
	uint64_t end = monotime_ms() + TCM_OFFER_WAIT_MS, now;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char buf[sizeof(tcm_req_key)];
	ssize_t n;

	for (;;) {
		n = recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return false;	/* closed, or reset: the caller's to see */
		if (n > 0 && memcmp(buf, tcm_req_key, (size_t)n) != 0)
			return false;
		if (n == (ssize_t)sizeof(buf))
			return true;
		now = monotime_ms();
		if (now >= end)
			return false;
		/* A part of the key is in: wait for more (POLLIN stays up
		 * while those bytes wait, so sleep a little instead). */
		if (n > 0)
			usleep(1000);
		else
			poll(&p, 1, (int)(end - now));
	}
}

struct tcm_offer {
	struct cm_id_priv *listener;
	int fd;
	bool taken;
};

/* CM thread: the listener takes the client if its tcp side serves it. */
static int tcm_offer_op(void *arg)
{
	struct tcm_offer *o = arg;

	o->taken = o->listener->state == CM_LISTEN && cm_tcp_take(o->listener, o->fd);
	return 0;
}

int ferry_cm_offer_tcp(struct ferry_cm_id *listener, int fd)
{
	struct tcm_offer o = { listener ? to_cm_id(listener) : NULL, fd, false };

	if (!listener || fd < 0)
		return ERR(EINVAL);
	if (!tcm_forced() || !o.listener->port_held)
		return 0;	/* only a forced tcp serves a held port */
	if (!tcm_offer_is_mpa(fd))
		return 0;
	if (cm_thread_call(tcm_offer_op, &o) < 0)
		return -1;
	return o.taken ? 1 : 0;
}

/* The backoff is over: the listener takes connections again. */
static void tcm_on_backoff(evutil_socket_t fd, short what, void *arg)
{
	struct tcm_id *st = arg;

	if (event_add(st->ev, NULL) < 0)
		ferry_warn("cm: a tcp listener cannot watch its socket again");
}

/*
 * accept() failed for want of descriptors or memory: the socket stays
 * readable, so stop looking at it for TCM_BACKOFF_MS (else the CM thread
 * spins); the connections wait in the kernel's backlog meanwhile.
 */
static void tcm_accept_backoff(struct tcm_id *st)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = TCM_BACKOFF_MS * 1000 };

	ferry_info("cm: tcp accept: %m; pausing %d ms", TCM_BACKOFF_MS);
	if (!st->backoff_ev)
		st->backoff_ev = evtimer_new(cm_thread_base(), tcm_on_backoff, st);
	if (st->backoff_ev && evtimer_add(st->backoff_ev, &tv) == 0)
		event_del(st->ev);
}

static void tcm_on_accept(evutil_socket_t fd, short what, void *arg)
{
	struct tcm_id *st = arg;
	int i, sock;

	for (i = 0; i < TCM_ACCEPT_BATCH; i++) {
		sock = ferry_fd_park(accept4(st->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
		if (sock < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
				 errno == ENOMEM)) {
			tcm_accept_backoff(st);
			return;
		}
		if (sock < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED)
				ferry_info("cm: tcp accept: %m");
			return;	/* the kernel keeps the rest in its backlog */
		}
		tcm_pending_new(st, sock);
	}
}

/* --- accept and reject --- */

/* The client hung up (or sent before our Reply): the request is over. */
static void tcm_on_request_gone(evutil_socket_t fd, short what, void *arg)
{
	struct tcm_id *st = arg;
	struct cm_id_priv *id = st->id;

	ferry_info("cm: the tcp client of a request went away");
	tcm_close(st);
	if (id->state == CM_CONNECT_REQ || id->state == CM_ACCEPTING)
		cm_event_report(id, NULL, FERRY_CM_EVENT_CONNECT_ERROR, ECONNRESET, NULL);
}

int tcm_accept_begin(struct cm_id_priv *id, const struct ferry_conn_param *param)
{
	struct tcm_id *st = tcm_state(id);

	if (!st || st->phase != TCM_REQUESTED || st->fd < 0)
		return ERR(ECONNRESET);
	return 0;
}

/* ferry_accept's arguments, for the CM thread. */
struct tcm_accept_args {
	struct cm_id_priv *id;
	const struct ferry_conn_param *param;
};

static int tcm_accept_op(void *arg)
{
	struct tcm_accept_args *op = arg;
	struct tcm_id *st = tcm_state(op->id);
	const struct ferry_conn_param *param = op->param;
	struct cm_qp_param qpp = { .max_rd_atomic = 16, .max_dest_rd_atomic = 16,
				   .retry_count = param->retry_count,
				   .rnr_retry_count = param->rnr_retry_count };

	if (!st || st->phase != TCM_REQUESTED || st->fd < 0)
		return ERR(ECONNRESET);
	if (ferry_tcp_mpa_send_reply(st->mpa, st->fd, param->private_data,
				     param->private_data_len, false) < 0) {
		int e = errno;

		tcm_close(st);
		return ERR(e);
	}
	if (tcm_attach(st, &qpp) < 0)
		return -1;
	cm_event_report(op->id, NULL, FERRY_CM_EVENT_ESTABLISHED, 0, NULL);
	return 0;
}

/* Caller's thread: the work is the CM thread's, where the socket lives. */
int tcm_accept(struct cm_id_priv *id, const struct ferry_conn_param *param)
{
	struct tcm_accept_args op = { .id = id, .param = param };

	return cm_id_call(id, &cm_tcp_transport, tcm_accept_op, &op);
}

int tcm_reject(struct cm_id_priv *id, const void *pdata, uint8_t len)
{
	struct tcm_id *st = tcm_state(id);

	if (!st || st->phase != TCM_REQUESTED || st->fd < 0)
		return 0;	/* the client is gone: nobody to tell */
	if (ferry_tcp_mpa_send_reply(st->mpa, st->fd, pdata, len, true) < 0)
		ferry_info("cm: sending a tcp reject: %m");
	tcm_close(st);	/* an orderly close after the Reply */
	return 0;
}
