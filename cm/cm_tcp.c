/*
 * cm_tcp.c - the tcp transport of the CM: connections as rdma_cm makes
 * them on iWARP, a TCP connection then the MPA exchange carrying the CM's
 * private data (docs/tcp-wire.md, "What the CM's tcp transport needs").
 *
 *   client                                server
 *   connect(2), non-blocking  ---------->  accept (cm_tcp_listen.c)
 *   MPA Request (private data) -------->  CONNECT_REQUEST event
 *                                         ferry_accept: MPA Reply, QP
 *   <-------------------------- Reply     attached, RTR, RTS, ESTABLISHED
 *   QP attached, RTR, RTS, ESTABLISHED
 *
 * A Reply with R set is REJECTED (FERRY_CM_REJ_CONSUMER_DEFINED, with
 * the server's private data); a port nobody listens on refuses the TCP
 * connect: REJECTED with ECONNREFUSED, as on every transport.  Once
 * attached the QP owns the socket; the provider's hook
 * (ferry_tcp_qp_on_down) tells us when the QP goes to ERR -- the peer's
 * FIN or reset, a keepalive or retransmission timeout -- and an
 * established id gets DISCONNECTED.  ferry_disconnect takes the QP to
 * ERR, which sends our FIN.
 *
 * The address rule: any address the kernel routes to.  tcp comes last
 * in core's table, so it serves what shm and verbs do not.  The probe
 * says UNREACHED unless FERRY_TRANSPORT=tcp: the preload shim asks it
 * whether to take a connect from kernel TCP, and a host across the
 * network is the kernel's (a plain TCP server there would read an MPA
 * Request).  Forced, it says MAYBE for any address the kernel routes to:
 * the shim then tries ferry first, and falls back to TCP if that fails.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "cm_tcp.h"

/* Keepalive of an attached socket: a silent peer is dead within
 * TCM_KEEPIDLE_S + TCM_KEEPCNT * TCM_KEEPINTVL_S (20 s). */
#define TCM_KEEPIDLE_S	5
#define TCM_KEEPINTVL_S	5
#define TCM_KEEPCNT	3

struct tcm_id *tcm_state(struct cm_id_priv *id)
{
	return *cm_tp_data(id, &cm_tcp_transport);
}

struct tcm_id *tcm_state_new(struct cm_id_priv *id, int fd)
{
	void **slot = cm_tp_data(id, &cm_tcp_transport);
	struct tcm_id *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->id = id;
	st->fd = fd;
	*slot = st;
	return st;
}

int tcm_arm(struct tcm_id *st, short what, event_callback_fn cb)
{
	uint64_t now = monotime_ms(), left;
	struct timeval tv;

	left = st->deadline_ms > now ? st->deadline_ms - now : 0;
	tv.tv_sec = (time_t)(left / 1000);
	tv.tv_usec = (suseconds_t)(left % 1000) * 1000;
	if (st->ev)
		event_free(st->ev);
	st->ev = event_new(cm_thread_base(), st->fd, what, cb, st);
	if (!st->ev || event_add(st->ev, st->deadline_ms ? &tv : NULL) < 0)
		return ERR(ENOMEM);
	return 0;
}

/* An IPv4-mapped IPv6 address (a v4 client of a v6 wildcard) as IPv4. */
static void tcm_addr_unmap(struct sockaddr_storage *ss)
{
	struct sockaddr_in6 s6 = *(struct sockaddr_in6 *)ss;
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

	if (ss->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&s6.sin6_addr))
		return;
	memset(ss, 0, sizeof(*ss));
	s4->sin_family = AF_INET;
	s4->sin_port = s6.sin6_port;
	memcpy(&s4->sin_addr, &s6.sin6_addr.s6_addr[12], 4);
}

/* One end of @fd into @ss, unmapped; left as it was on failure. */
static void tcm_addr_of(int fd, bool peer, struct sockaddr_storage *ss)
{
	struct sockaddr_storage got;
	socklen_t len = sizeof(got);

	if ((peer ? getpeername(fd, (struct sockaddr *)&got, &len) :
		    getsockname(fd, (struct sockaddr *)&got, &len)) < 0)
		return;
	tcm_addr_unmap(&got);
	*ss = got;
}

void tcm_addrs_from_socket(struct cm_id_priv *id, int fd)
{
	tcm_addr_of(fd, false, &id->id.route.addr.src_addr);
	tcm_addr_of(fd, true, &id->id.route.addr.dst_addr);
}

void tcm_close(struct tcm_id *st)
{
	if (st->ev)
		event_free(st->ev);
	st->ev = NULL;
	if (st->fd >= 0)
		close(st->fd);
	st->fd = -1;
	ferry_tcp_mpa_free(st->mpa);
	st->mpa = NULL;
	if (st->phase != TCM_LISTENING && st->phase != TCM_BOUND)
		st->phase = TCM_CLOSED;
}

/* --- the end of a connection --- */

/* Progress thread (QP lock held): only wake the CM thread. */
static void tcm_qp_down(void *arg)
{
	struct tcm_id *st = arg;

	event_active(st->down_ev, EV_READ, 0);
}

/* CM thread: the QP went to ERR; an established id is disconnected. */
static void tcm_on_down(evutil_socket_t fd, short what, void *arg)
{
	struct tcm_id *st = arg;

	/* st->qp may be gone already (ferry_cm_destroy_qp first): not read. */
	if (st->id->state == CM_ESTABLISHED) {
		ferry_debug("cm: a tcp connection is down");
		cm_id_disconnected(st->id);
	}
}

/* Keepalive, so that a peer gone silent (a dead host) ends too. */
static void tcm_keepalive(int fd)
{
	int on = 1, idle = TCM_KEEPIDLE_S, intvl = TCM_KEEPINTVL_S, cnt = TCM_KEEPCNT;

	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

int tcm_attach(struct tcm_id *st, const struct cm_qp_param *param)
{
	struct ferry_qp *qp = st->id->id.qp;
	int fd = st->fd, rc;

	if (st->ev)
		event_free(st->ev);
	st->ev = NULL;
	st->down_ev = event_new(cm_thread_base(), -1, 0, tcm_on_down, st);
	if (!st->down_ev)
		return ERR(ENOMEM);
	tcm_keepalive(fd);
	tcm_addrs_from_socket(st->id, fd);
	st->fd = -1;	/* the QP's now, also on failure */
	rc = ferry_tcp_mpa_attach(st->mpa, qp, fd);
	ferry_tcp_mpa_free(st->mpa);
	st->mpa = NULL;
	if (rc < 0)
		return -1;
	st->qp = qp;
	st->phase = TCM_ATTACHED;
	ferry_tcp_qp_on_down(qp, tcm_qp_down, st);
	/* iWARP has no QP number to aim at: dest_qp_num is meaningless. */
	return cm_qp_to_rts(st->id, 0, param);
}

/* --- resolution --- */

/*
 * Can a TCP connection go there at all?  Not to "this network" (0/8),
 * multicast, class E or broadcast, nor IPv6's unspecified and multicast
 * addresses, whatever a default route says.
 */
static bool tcm_unicast(const struct sockaddr *dst)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)dst;
	uint32_t a;

	if (dst->sa_family == AF_INET) {
		a = ntohl(((const struct sockaddr_in *)dst)->sin_addr.s_addr);
		return (a >> 24) != 0 && (a >> 28) < 14;	/* 14: 224/4, 15: 240/4 */
	}
	return dst->sa_family == AF_INET6 && !IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr) &&
	       !IN6_IS_ADDR_MULTICAST(&s6->sin6_addr);
}

/* The address rule (core's table): the kernel has a route to @dst. */
bool tcp_cm_reaches(const struct sockaddr *dst)
{
	int fd;
	bool ok;

	if (!tcm_unicast(dst))
		return false;
	fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	/* A UDP connect sends nothing: it only looks the route up. */
	ok = connect(fd, dst, cm_addr_len(dst)) == 0;
	close(fd);
	return ok;
}

static enum ferry_cm_probe tcm_probe(const struct sockaddr *dst)
{
	const struct cm_transport *forced;

	/* Unasked, the shim keeps remote hosts on kernel TCP (it is faster);
	 * FERRY_TRANSPORT=tcp asks for us wherever the kernel routes. */
	if (cm_transport_forced(&forced) == 0 && forced == &cm_tcp_transport &&
	    tcp_cm_reaches(dst))
		return FERRY_CM_PROBE_MAYBE;
	return FERRY_CM_PROBE_UNREACHED;
}

/*
 * The kernel settles the source at connect; nothing to wait for.  The
 * rule is checked again for a forced tcp (core skipped it then).
 */
static int tcm_resolve_addr(struct cm_id_priv *id, int timeout_ms)
{
	const struct sockaddr *dst = (struct sockaddr *)&id->id.route.addr.dst_addr;
	char buf[INET6_ADDRSTRLEN];

	if (!tcp_cm_reaches(dst)) {
		ferry_info("cm: tcp: no route to %s", cm_addr_ntop(dst, buf, sizeof(buf)));
		cm_event_report(id, NULL, FERRY_CM_EVENT_ADDR_ERROR, EHOSTUNREACH, NULL);
		return 0;
	}
	cm_event_report(id, NULL, FERRY_CM_EVENT_ADDR_RESOLVED, 0, NULL);
	return 0;
}

static int tcm_resolve_route(struct cm_id_priv *id, int timeout_ms)
{
	cm_event_report(id, NULL, FERRY_CM_EVENT_ROUTE_RESOLVED, 0, NULL);
	return 0;
}

static int tcm_qp_init(struct cm_id_priv *id)
{
	return cm_qp_to_init_default(id);
}

/* --- the active side --- */

/* Report @type with @status, and let the socket go. */
static void tcm_connect_failed(struct tcm_id *st, enum ferry_cm_event_type type, int status,
			       const struct ferry_conn_param *param)
{
	cm_event_report(st->id, NULL, type, status, param);
	tcm_close(st);
}

/* A connect's errno as the event other transports give. */
static void tcm_connect_error(struct tcm_id *st, int err)
{
	if (err == ECONNREFUSED)
		tcm_connect_failed(st, FERRY_CM_EVENT_REJECTED, ECONNREFUSED, NULL);
	else if (err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
		 err == EHOSTDOWN)
		tcm_connect_failed(st, FERRY_CM_EVENT_UNREACHABLE, EHOSTUNREACH, NULL);
	else
		tcm_connect_failed(st, FERRY_CM_EVENT_CONNECT_ERROR, err, NULL);
}

/* The server's Reply rejected us: REJECTED with its private data. */
static void tcm_rejected(struct tcm_id *st)
{
	struct ferry_conn_param param = { 0 };
	uint8_t pdata[FERRY_MAX_PRIVATE_DATA_REJECT];
	const uint8_t *pd;
	size_t len;

	pd = ferry_tcp_mpa_pdata(st->mpa, &len);
	if (len > sizeof(pdata))
		len = sizeof(pdata);
	if (len)
		memcpy(pdata, pd, len);
	param.private_data = len ? pdata : NULL;
	param.private_data_len = (uint8_t)len;
	tcm_connect_failed(st, FERRY_CM_EVENT_REJECTED, FERRY_CM_REJ_CONSUMER_DEFINED, &param);
}

/* The Reply is in: the QP to RTS, ESTABLISHED with the server's data. */
static void tcm_established(struct tcm_id *st)
{
	struct cm_qp_param qpp = { .max_rd_atomic = 16, .max_dest_rd_atomic = 16,
				   .retry_count = 7, .rnr_retry_count = 7 };
	struct ferry_conn_param param = { 0 };
	uint8_t pdata[FERRY_MAX_PRIVATE_DATA_ACCEPT];
	const uint8_t *pd;
	size_t len;

	pd = ferry_tcp_mpa_pdata(st->mpa, &len);
	if (len > sizeof(pdata))
		len = sizeof(pdata);
	if (len)
		memcpy(pdata, pd, len);
	param.private_data = len ? pdata : NULL;
	param.private_data_len = (uint8_t)len;
	if (tcm_attach(st, &qpp) < 0) {
		int err = errno;

		ferry_info("cm: completing a tcp connection: %m");
		tcm_connect_failed(st, FERRY_CM_EVENT_CONNECT_ERROR, err, NULL);
		return;
	}
	cm_event_report(st->id, NULL, FERRY_CM_EVENT_ESTABLISHED, 0, &param);
}

static void tcm_on_reply(evutil_socket_t fd, short what, void *arg)
{
	struct tcm_id *st = arg;
	int rc;

	if (what & EV_TIMEOUT) {
		ferry_info("cm: no MPA Reply within the connect's time");
		tcm_connect_failed(st, FERRY_CM_EVENT_UNREACHABLE, ETIMEDOUT, NULL);
		return;
	}
	rc = ferry_tcp_mpa_read(st->mpa, st->fd);
	if (rc == 0 && tcm_arm(st, EV_READ, tcm_on_reply) == 0)
		return;
	if (rc == 1)
		tcm_established(st);
	else if (rc < 0 && errno == ECONNREFUSED)
		tcm_rejected(st);
	else if (rc < 0 && errno == ECONNRESET)	/* the server went away: as on shm */
		tcm_connect_failed(st, FERRY_CM_EVENT_REJECTED, ECONNRESET, NULL);
	else
		tcm_connect_failed(st, FERRY_CM_EVENT_CONNECT_ERROR, rc < 0 ? errno : ENOMEM,
				   NULL);
}

static void tcm_on_connected(evutil_socket_t fd, short what, void *arg)
{
	struct tcm_id *st = arg;
	socklen_t len = sizeof(int);
	int err = 0;

	if (what & EV_TIMEOUT)
		err = ETIMEDOUT;
	else if (getsockopt(st->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		tcm_connect_error(st, err);
		return;
	}
	st->phase = TCM_WAIT_REPLY;
	if (ferry_tcp_mpa_send_request(st->mpa, st->fd, st->req_pd, st->req_pd_len) < 0 ||
	    tcm_arm(st, EV_READ, tcm_on_reply) < 0)
		tcm_connect_failed(st, FERRY_CM_EVENT_CONNECT_ERROR, errno, NULL);
}

/* A non-blocking TCP socket connecting to the id's destination. */
static int tcm_socket_connect(struct cm_id_priv *id)
{
	const struct sockaddr *dst = (struct sockaddr *)&id->id.route.addr.dst_addr;
	int fd, on = 1;

	fd = ferry_fd_park(socket(dst->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (fd < 0)
		return -1;
	/* MPA frames and small messages go out at once. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	if (connect(fd, dst, cm_addr_len(dst)) < 0 && errno != EINPROGRESS) {
		int e = errno;

		close(fd);
		return ERR(e);
	}
	return fd;
}

static int tcm_connect(struct cm_id_priv *id, const struct ferry_conn_param *param)
{
	unsigned int ms = id->connect_timeout_ms ? id->connect_timeout_ms :
			  TCM_CONNECT_TIMEOUT_MS;
	struct tcm_id *st = tcm_state(id);
	int fd;

	if (!id->id.qp || (st && st->phase != TCM_CLOSED))
		return ERR(EINVAL);
	if (!st && !(st = tcm_state_new(id, -1)))
		return -1;
	st->mpa = ferry_tcp_mpa_new(true, param->rnr_retry_count);
	if (!st->mpa)
		return ERR(ENOMEM);
	if (param->private_data_len)
		memcpy(st->req_pd, param->private_data, param->private_data_len);
	st->req_pd_len = param->private_data_len;
	st->deadline_ms = monotime_ms() + ms;
	st->phase = TCM_CONNECTING;
	fd = tcm_socket_connect(id);
	if (fd < 0) {
		/* refused or unreachable at once (loopback): the usual events */
		tcm_connect_error(st, errno);
		return 0;
	}
	st->fd = fd;
	/* The kernel picked the source at connect: the request carries it. */
	tcm_addr_of(fd, false, &id->id.route.addr.src_addr);
	if (tcm_arm(st, EV_WRITE, tcm_on_connected) < 0) {
		tcm_close(st);
		return ERR(ENOMEM);
	}
	return 0;
}

/* --- the end --- */

static int tcm_disconnect(struct cm_id_priv *id)
{
	struct tcm_id *st = tcm_state(id);

	if (st && st->phase != TCM_ATTACHED)
		tcm_close(st);	/* a connect under way: the socket's close tells */
	return 0;	/* the core moves the QP to ERR: our FIN */
}

static void tcm_destroy(struct cm_id_priv *id)
{
	void **slot = cm_tp_data(id, &cm_tcp_transport);
	struct tcm_id *st = *slot;

	if (!st)
		return;
	/* The QP outlives us (the core destroys it after): no more news. */
	if (st->qp && id->id.qp == st->qp) {
		ferry_tcp_qp_on_down(st->qp, NULL, NULL);
		cm_qp_to_error(id);	/* a connected peer sees our FIN */
	}
	if (st->down_ev)
		event_free(st->down_ev);
	tcm_listen_destroy(st);
	tcm_close(st);
	free(st);
	*slot = NULL;
}

/* Every event of an id may come any time: the loop keeps it. */
static int tcm_unloop(struct cm_id_priv *id)
{
	return ERR(ENOTSUP);
}

static void tcm_reloop(struct cm_id_priv *id)
{
}

const struct cm_transport cm_tcp_transport = {
	.calls_inline = false,
	.probe = tcm_probe,
	.bind = tcm_bind,
	.listen = tcm_listen,
	.resolve_addr = tcm_resolve_addr,
	.resolve_route = tcm_resolve_route,
	.qp_init = tcm_qp_init,
	.connect = tcm_connect,
	.unloop = tcm_unloop,
	.reloop = tcm_reloop,
	.accept_begin = tcm_accept_begin,
	.accept = tcm_accept,
	.reject = tcm_reject,
	.disconnect = tcm_disconnect,
	.destroy = tcm_destroy,
};
