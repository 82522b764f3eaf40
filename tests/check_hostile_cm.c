/*
 * check_hostile_cm.c - peers that stall the connection handshake (shm):
 * a client that sends its request and HELLO and then nothing, a server
 * that sends ACCEPT and then nothing, one that takes the client's side of
 * the QP exchange and hangs up without READY, and a listener process
 * stopped with SIGSTOP, and one out of descriptors when the client's
 * memory comes.  Each may delay only its own connection: the tests
 * check that the others go on meanwhile (by the order of events, not by
 * elapsed time: the bounds below only catch a hang), and that the stalled
 * one ends in an error rather than a connection that resets.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <ferry/socket.h>

#include "check_suites.h"
#include "cm_msg.h"
#include "cm_shm.h"
#include "cmtest.h"
#include "sock-internal.h"
#include "testutil.h"

/* The socket layer's short connect bound these tests ask for. */
#define HCM_BOUND_MS	500
/* shm_msg's type field: after magic and version. */
#define HCM_SHM_TYPE_OFF	8
#define HCM_SHM_HELLO		1
#define HCM_SHM_REGION		2

/* --- raw peers on rendezvous sockets --- */

/* The rendezvous of the listener on @port, found as a client finds it
 * (cm/cm_shm_owner.c: named after the TCP socket that holds the port). */
static socklen_t hcm_name(struct sockaddr_un *un, uint16_t port)
{
	struct sockaddr_storage ss;
	struct shm_cm_owner owner;
	socklen_t len;

	cmt_addr(&ss, AF_INET, port);
	ck_assert_int_eq(shm_cm_owner_of((struct sockaddr *)&ss, &owner), 0);
	shm_cm_name(&owner, un, &len);
	return len;
}

/*
 * Private data a stream listener takes for rsocket's (sock/sock_conn.c):
 * version, flags, credits, a target SGL and a buffer, never used.
 */
static void hcm_rsocket_pdata(struct cm_msg *m)
{
	struct rs_sge sgl = { .addr = 4096, .key = 1, .length = RS_SGL_SIZE };
	struct rs_sge buf = { .addr = 8192, .key = 1, .length = 4096 };
	uint16_t credits = htons(16);

	memset(m->pdata, 0, RS_PRIVATE_DATA_LEN);
	m->pdata[0] = RS_VERSION;
	memcpy(m->pdata + 2, &credits, sizeof(credits));
	memcpy(m->pdata + 8, &sgl, sizeof(sgl));
	memcpy(m->pdata + 24, &buf, sizeof(buf));
	m->pdata_len = RS_PRIVATE_DATA_LEN;
}

static void hcm_send_msg(int fd, enum cm_msg_type type, uint16_t port)
{
	struct cm_msg m = { .type = type };
	uint8_t buf[CM_MSG_MAX_SIZE];
	ssize_t n;

	if (type == CM_MSG_CONNECT_REQ)
		hcm_rsocket_pdata(&m);
	cmt_addr(&m.src, AF_INET, 1234);
	cmt_addr(&m.dst, AF_INET, port);
	n = cm_msg_encode(&m, buf, sizeof(buf));
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(send(fd, buf, (size_t)n, MSG_NOSIGNAL), n);
}

/*
 * A client that means no good: a valid CONNECT_REQ to @port, then a real
 * QP's HELLO (@e's, begun on the raw socket), then nothing.
 */
static int hcm_stalled_client(uint16_t port, struct tu_end *e)
{
	struct sockaddr_un un;
	socklen_t len = hcm_name(&un, port);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&un, len), 0);
	hcm_send_msg(fd, CM_MSG_CONNECT_REQ, port);
	tu_end_open(e, NULL);
	ck_assert_int_eq(tu_qp_to_init(e->qp, TU_QP_ACCESS_ALL), 0);
	ck_assert_int_eq(ferry_qp_exchange_begin(e->qp, fd), 0);
	return fd;
}

/* Has the other end of @fd hung up (now, no waiting)? */
static bool hcm_hung_up(int fd, int wait_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	return poll(&p, 1, wait_ms) == 1 && (p.revents & (POLLRDHUP | POLLHUP));
}

/* A listening rendezvous socket of our own on a free port: a raw server.
 * It holds the port as a real listener must: a kernel TCP socket listening
 * there (kept open for the test), whose name it binds. */
static int hcm_raw_listener(uint16_t *port_p)
{
	struct sockaddr_storage ss;
	struct shm_cm_owner owner;
	struct sockaddr_un un;
	socklen_t len = sizeof(ss);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	int tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_ge(tcp, 0);
	cmt_addr(&ss, AF_INET, 0);
	ck_assert_int_eq(bind(tcp, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)), 0);
	ck_assert_int_eq(listen(tcp, 8), 0);
	ck_assert_int_eq(getsockname(tcp, (struct sockaddr *)&ss, &len), 0);
	ck_assert_int_eq(shm_cm_owner_of_fd(tcp, &owner), 0);
	shm_cm_name(&owner, &un, &len);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&un, len), 0);
	ck_assert_int_eq(listen(fd, 8), 0);
	*port_p = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

/* The raw server takes a client's connection and its request. */
static int hcm_raw_take(int lfd)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	uint8_t buf[CM_MSG_MAX_SIZE + 1];
	struct cm_msg m;
	ssize_t n;
	int fd;

	ck_assert_int_eq(poll(&p, 1, TU_WAIT_MS), 1);
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	p.fd = fd;
	ck_assert_int_eq(poll(&p, 1, TU_WAIT_MS), 1);
	n = recv(fd, buf, sizeof(buf), 0);
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(cm_msg_parse(buf, (size_t)n, &m), 0);
	ck_assert_int_eq(m.type, CM_MSG_CONNECT_REQ);
	return fd;
}

/* Is an event queued on @ch (no waiting)? */
static bool hcm_event_queued(struct ferry_event_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

/* --- a client that stalls the listener's handshake --- */

START_TEST(test_stalled_client_cm)
{
	struct cmt_end l, c, s;
	struct ferry_cm_event *ev;
	struct ferry_cm_id *stalled;
	struct sockaddr_storage dst;
	struct tu_end raw;
	uint16_t port;
	int fd;

	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	fd = hcm_stalled_client(port, &raw);
	ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev), 0);
	stalled = ev->id;
	ck_assert_int_eq(cmt_create_qp(stalled), 0);
	/* Returns with our side sent, not waiting for the client's. */
	ck_assert_int_eq(ferry_accept(stalled, NULL), 0);
	ferry_ack_cm_event(ev);

	/* A legitimate client is served meanwhile... */
	cmt_addr(&dst, AF_INET, port);
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, NULL, 0), 0);
	ck_assert_int_eq(cmt_accept(&l, &s), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	/* ... while the stalled one is still pending. */
	ck_assert(!hcm_hung_up(fd, 0));

	/* Its handshake ends at its deadline; the listener carries on. */
	ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_ERROR, &ev), 0);
	ck_assert_ptr_eq(ev->id, stalled);
	ferry_ack_cm_event(ev);
	ck_assert(hcm_hung_up(fd, TU_WAIT_MS));
	ferry_destroy_id(stalled);
	cmt_close(&c);
	cmt_close(&s);
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, NULL, 0), 0);
	ck_assert_int_eq(cmt_accept(&l, &s), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	cmt_close(&c);
	cmt_close(&s);
	cmt_close(&l);
	close(fd);
	tu_end_close(&raw);
}
END_TEST

static int hcm_sock_listen(uint16_t *port_p)
{
	struct sockaddr_storage ss;
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	int l = ferry_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

	ck_assert_int_ge(l, 0);
	cmt_addr(&ss, AF_INET, 0);
	ck_assert_int_eq(ferry_sock_bind(l, (struct sockaddr *)&ss, sizeof(sin)), 0);
	ck_assert_int_eq(ferry_sock_listen(l, 16), 0);
	ck_assert_int_eq(ferry_sock_getsockname(l, (struct sockaddr *)&sin, &len), 0);
	*port_p = ntohs(sin.sin_port);
	return l;
}

static int hcm_sock_connect_start(uint16_t port)
{
	struct sockaddr_storage ss;
	int c = ferry_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int r;

	ck_assert_int_ge(c, 0);
	cmt_addr(&ss, AF_INET, port);
	r = ferry_sock_connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in));
	ck_assert(r == 0 || errno == EINPROGRESS);
	return c;
}

/* Drive non-blocking listener @l and connecting @c until @l accepts. */
static int hcm_sock_accept_one(int l, int c)
{
	struct pollfd p[2] = { { .fd = l, .events = POLLIN }, { .fd = c, .events = POLLOUT } };
	int i, a;

	for (i = 0; i < TU_WAIT_MS / 10; i++) {
		a = ferry_sock_accept(l, NULL, NULL);
		if (a >= 0)
			return a;
		ck_assert_int_eq(errno, EAGAIN);
		ferry_sock_poll(p, 2, 10);
	}
	ck_abort_msg("no connection accepted");
	return -1;
}

/* The byte @c writes reaches @a. */
static void hcm_sock_byte(int c, int a)
{
	struct pollfd p[2] = { { .fd = c, .events = POLLOUT }, { .fd = a, .events = POLLIN } };
	char x = 'h', y = 0;
	int i;

	for (i = 0; i < TU_WAIT_MS / 10 && ferry_sock_write(c, &x, 1) != 1; i++)
		ferry_sock_poll(p, 1, 10);
	for (i = 0; i < TU_WAIT_MS / 10 && ferry_sock_read(a, &y, 1) != 1; i++)
		ferry_sock_poll(p + 1, 1, 10);
	ck_assert_int_eq(y, 'h');
}

START_TEST(test_stalled_client_sock)
{
	struct pollfd p;
	struct tu_end raw;
	uint16_t port;
	int l, fd, c, a, i;

	l = hcm_sock_listen(&port);
	fd = hcm_stalled_client(port, &raw);
	/* Until the listener has answered the stalled client (ACCEPT). */
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	for (i = 0; i < TU_WAIT_MS / 10 && poll(&p, 1, 0) == 0; i++) {
		ck_assert_int_lt(ferry_sock_accept(l, NULL, NULL), 0);
		tu_sleep_ms(10);
	}
	ck_assert_int_eq(poll(&p, 1, 0), 1);

	/* ferry_sock_accept hands out the good client meanwhile. */
	c = hcm_sock_connect_start(port);
	a = hcm_sock_accept_one(l, c);
	ck_assert(!hcm_hung_up(fd, 0));
	hcm_sock_byte(c, a);

	/* The stalled one is dropped at its deadline, and is no socket. */
	ck_assert(hcm_hung_up(fd, TU_WAIT_MS));
	ferry_sock_close(c);
	ferry_sock_close(a);
	c = hcm_sock_connect_start(port);
	a = hcm_sock_accept_one(l, c);
	hcm_sock_byte(c, a);
	ck_assert_int_lt(ferry_sock_accept(l, NULL, NULL), 0);
	ck_assert_int_eq(errno, EAGAIN);
	ferry_sock_close(c);
	ferry_sock_close(a);
	ferry_sock_close(l);
	close(fd);
	tu_end_close(&raw);
}
END_TEST

/*
 * A client that sends its request and HELLO and goes before the listener
 * accepts.  A listener that reports events for its requests learns it at
 * once (CONNECT_ERROR, nothing accepted).  A quiet one (stream sockets:
 * ferry_cm_quiet) does not watch its requests, as the kernel's backlog
 * keeps a departed client's connection: its accept fails then, at once or
 * with CONNECT_ERROR, never ESTABLISHED, and nothing of the request stays.
 */
/* One departed client of listener @l on @port. */
static void hcm_departed_round(struct cmt_end *l, uint16_t port, bool quiet)
{
	struct ferry_cm_event *ev;
	struct ferry_cm_id *gone;
	struct tu_end raw;
	int fd;

	fd = hcm_stalled_client(port, &raw);
	ck_assert_int_eq(cmt_wait(l->ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev), 0);
	gone = ev->id;
	ferry_ack_cm_event(ev);
	close(fd);
	tu_end_close(&raw);
	if (!quiet) {
		ck_assert_int_eq(cmt_wait(l->ch, FERRY_CM_EVENT_CONNECT_ERROR, &ev), 0);
		ck_assert_ptr_eq(ev->id, gone);
		ferry_ack_cm_event(ev);
	} else {
		tu_sleep_ms(50);	/* a hang-up seen would have been reported by now */
		ck_assert(!hcm_event_queued(l->ch));
		ck_assert_int_eq(cmt_create_qp(gone), 0);
		if (ferry_accept(gone, NULL) == 0) {
			ck_assert_int_eq(cmt_wait(l->ch, FERRY_CM_EVENT_CONNECT_ERROR, &ev), 0);
			ck_assert_ptr_eq(ev->id, gone);
			ferry_ack_cm_event(ev);
		}
		ferry_cm_destroy_qp(gone);
	}
	ck_assert_int_eq(ferry_destroy_id(gone), 0);
}

static void hcm_departed_client(bool quiet)
{
	struct cmt_end l;
	uint16_t port;
	int fds_before;

	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	if (quiet)
		ferry_cm_quiet(l.id);
	/* The first round makes what a process keeps (the monitor, ...). */
	hcm_departed_round(&l, port, quiet);
	fds_before = cmt_count_fds();
	hcm_departed_round(&l, port, quiet);
	ck_assert_int_eq(cmt_count_fds(), fds_before);
	cmt_close(&l);
}

START_TEST(test_departed_client)
{
	hcm_departed_client(false);
}
END_TEST

START_TEST(test_departed_client_quiet)
{
	hcm_departed_client(true);
}
END_TEST

/* --- servers that stall the client's handshake --- */

START_TEST(test_server_stalls_after_accept)
{
	struct sockaddr_storage dst;
	struct cmt_end a, l, b, s;
	uint16_t raw_port, port;
	int lfd, fd;

	/* A: a server that answers ACCEPT and then nothing. */
	lfd = hcm_raw_listener(&raw_port);
	cmt_addr(&dst, AF_INET, raw_port);
	ck_assert_int_eq(cmt_connect(&a, (struct sockaddr *)&dst, NULL, 0), 0);
	fd = hcm_raw_take(lfd);
	hcm_send_msg(fd, CM_MSG_ACCEPT, raw_port);

	/* B, meanwhile, in the same process: its CM thread is not held. */
	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	cmt_addr(&dst, AF_INET, port);
	ck_assert_int_eq(cmt_connect(&b, (struct sockaddr *)&dst, NULL, 0), 0);
	ck_assert_int_eq(cmt_accept(&l, &s), 0);
	ck_assert_int_eq(cmt_wait_ack(b.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert(!hcm_event_queued(a.ch));

	/* A fails at its deadline, and hangs up. */
	ck_assert_int_eq(cmt_wait_ack(a.ch, FERRY_CM_EVENT_CONNECT_ERROR), 0);
	ck_assert(hcm_hung_up(fd, TU_WAIT_MS));
	cmt_close(&a);
	cmt_close(&b);
	cmt_close(&s);
	cmt_close(&l);
	close(fd);
	close(lfd);
}
END_TEST

/*
 * A relay between a client's rendezvous connection and a socketpair whose
 * other end a real server QP exchanges on: the test decides what passes,
 * and when, so that the client's timing cannot change what a test checks.
 * hcm_forward moves one record from @from to @to, descriptors and all, and
 * returns its shm message type (0 if it has none).
 */
static uint32_t hcm_forward(int from, int to)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} ctl;
	struct pollfd p = { .fd = from, .events = POLLIN };
	uint8_t buf[512];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm;
	uint32_t type = 0;
	ssize_t n;
	int fds[8], nfds = 0;

	ck_assert_int_eq(poll(&p, 1, TU_WAIT_MS), 1);
	n = recvmsg(from, &mh, MSG_CMSG_CLOEXEC);
	ck_assert_int_gt(n, 0);
	ck_assert(!(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)));
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			nfds = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(cm), sizeof(int) * (size_t)nfds);
		}
	if (n >= HCM_SHM_TYPE_OFF + 4)
		memcpy(&type, buf + HCM_SHM_TYPE_OFF, sizeof(type));
	iov.iov_len = (size_t)n;
	mh.msg_controllen = 0;
	mh.msg_control = NULL;
	if (nfds) {
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	n = sendmsg(to, &mh, MSG_NOSIGNAL) == n ? n : -errno;
	ck_assert_msg(n > 0, "relaying a record: %s", strerror((int)-n));
	while (nfds > 0)
		close(fds[--nfds]);
	return type;
}

/* Forward records from @from to @to up to and with one of @type. */
static void hcm_forward_until(int from, int to, uint32_t type)
{
	while (hcm_forward(from, to) != type)
		;
}

/*
 * A raw server with a real QP behind a relay: it has taken @c's request
 * and answered ACCEPT on *fd_p; the QP has the client's HELLO and has sent
 * its whole side (HELLO, BLOCK..., REGION), all of which the client has;
 * the QP exchanges on *qp_p, the test's end of the relay is *relay_p; the
 * exchange waits for the client's REGION, which nothing has forwarded yet.
 */
static void hcm_relay_server(struct cmt_end *c, struct tu_end *srv, int *lfd_p, int *fd_p,
			     int *qp_p, int *relay_p)
{
	struct sockaddr_storage dst;
	uint16_t port;
	uint32_t qpn;
	int sp[2];

	*lfd_p = hcm_raw_listener(&port);
	cmt_addr(&dst, AF_INET, port);
	ck_assert_int_eq(cmt_connect(c, (struct sockaddr *)&dst, NULL, 0), 0);
	*fd_p = hcm_raw_take(*lfd_p);
	hcm_send_msg(*fd_p, CM_MSG_ACCEPT, port);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	tu_end_open(srv, NULL);
	ck_assert_int_eq(tu_qp_to_init(srv->qp, TU_QP_ACCESS_ALL), 0);
	ck_assert_int_eq(ferry_qp_exchange_begin(srv->qp, sp[0]), 0);
	*qp_p = sp[0];	/* held by the provider too: ferry_fd_close it */
	*relay_p = sp[1];
	hcm_forward_until(*relay_p, *fd_p, HCM_SHM_HELLO);	/* ours to the client */
	hcm_forward_until(*fd_p, *relay_p, HCM_SHM_HELLO);	/* the client's to us */
	ck_assert_int_lt(ferry_qp_exchange_step(srv->qp, &qpn), 0);
	ck_assert_int_eq(errno, EAGAIN);
	hcm_forward_until(*relay_p, *fd_p, HCM_SHM_REGION);	/* our blocks, region */
}

/*
 * A server that takes the client's REGION and hangs up without READY: the
 * client never connected (no ESTABLISHED first, then a reset).
 */
START_TEST(test_no_ready_no_connection)
{
	struct tu_end srv;
	struct cmt_end c;
	int lfd, fd, qpfd, relay;
	uint32_t qpn;

	hcm_relay_server(&c, &srv, &lfd, &fd, &qpfd, &relay);
	hcm_forward_until(fd, relay, HCM_SHM_REGION);
	/* Our QP takes it and sends READY, which the relay keeps. */
	(void)ferry_qp_exchange_step(srv.qp, &qpn);
	shutdown(fd, SHUT_RDWR);
	close(fd);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_CONNECT_ERROR), 0);
	cmt_close(&c);
	close(relay);
	tu_end_close(&srv);
	ferry_fd_close(qpfd);
	close(lfd);
}
END_TEST

/*
 * Take up every free descriptor of this process (under a soft limit
 * lowered to at most 1024); their number.  hcm_fds_release gives them back.
 */
static int hcm_fds_exhaust(int *fds, int max, struct rlimit *old)
{
	struct rlimit low;
	int n = 0;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, old), 0);
	low = *old;
	if (low.rlim_cur > 1024)
		low.rlim_cur = 1024;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (n < max && (fds[n] = dup(0)) >= 0)
		n++;
	ck_assert_int_eq(errno, EMFILE);
	return n;
}

static void hcm_fds_release(int *fds, int n, const struct rlimit *old)
{
	while (n > 0)
		close(fds[--n]);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, old), 0);
}

/*
 * A server out of descriptors when the client's REGION comes: the kernel
 * drops the region's descriptor (MSG_CTRUNC).  Its exchange fails with
 * EMFILE (not EPROTO: the peer did nothing wrong), and the client, which
 * never had its READY, does not connect.
 */
START_TEST(test_fds_exhausted_no_connection)
{
	static int fillers[1024];
	struct rlimit old;
	struct tu_end srv;
	struct cmt_end c;
	int lfd, fd, qpfd, relay, n, r, e;
	uint32_t qpn;

	if (tu_under_valgrind()) {
		printf("SKIP test_fds_exhausted_no_connection: valgrind keeps descriptors "
		       "past the limit it shows\n");
		return;
	}

	hcm_relay_server(&c, &srv, &lfd, &fd, &qpfd, &relay);
	hcm_forward_until(fd, relay, HCM_SHM_REGION);	/* waits for our QP */
	n = hcm_fds_exhaust(fillers, 1024, &old);
	r = ferry_qp_exchange_step(srv.qp, &qpn);
	e = errno;
	hcm_fds_release(fillers, n, &old);
	ck_assert_int_lt(r, 0);
	ck_assert_int_eq(e, EMFILE);

	shutdown(fd, SHUT_RDWR);	/* what the CM does with a failed exchange */
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_CONNECT_ERROR), 0);
	close(fd);
	close(relay);
	cmt_close(&c);
	tu_end_close(&srv);
	ferry_fd_close(qpfd);
	close(lfd);
}
END_TEST

/*
 * A listener whose accept() fails for want of descriptors must pause, not
 * spin: the rendezvous socket stays readable, and a persistent event on it
 * fired again at once (7,012 warnings in one run of fdlimit.sh).  The CPU
 * the process burns while a connection waits in the backlog and nothing
 * can be accepted tells: a spin takes a whole core.  A TCP client at the
 * listener's port (the TCP socket that holds it, whose clients the CM
 * resets) waits meanwhile too, and must not make it spin either.  Once
 * descriptors are free again, the waiting client's request is taken.
 */
START_TEST(test_listener_out_of_fds_pauses)
{
	static int fds[1100];
	struct ferry_cm_event *ev;
	struct ferry_cm_id *req;
	struct timespec c0, c1;
	struct rlimit old;
	struct cmt_end l;
	struct sockaddr_un un;
	socklen_t len;
	uint16_t port;
	struct sockaddr_storage dst;
	uint64_t cpu_ms;
	int n, raw, tcp;

	if (tu_under_valgrind()) {
		printf("SKIP test_listener_out_of_fds_pauses: valgrind keeps descriptors "
		       "past the limit it shows (an accept it refuses loses the connection)\n");
		return;
	}

	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	len = hcm_name(&un, port);
	raw = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(raw, 0);
	tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(tcp, 0);
	cmt_addr(&dst, AF_INET, port);
	n = hcm_fds_exhaust(fds, (int)(sizeof(fds) / sizeof(fds[0])), &old);
	ck_assert_int_eq(clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0), 0);
	ck_assert_int_eq(connect(tcp, (struct sockaddr *)&dst, sizeof(struct sockaddr_in)), 0);
	ck_assert_int_eq(connect(raw, (struct sockaddr *)&un, len), 0);
	hcm_send_msg(raw, CM_MSG_CONNECT_REQ, port);
	tu_sleep_ms(400);
	ck_assert_int_eq(clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1), 0);
	cpu_ms = (uint64_t)(c1.tv_sec - c0.tv_sec) * 1000 +
		 (uint64_t)(c1.tv_nsec - c0.tv_nsec) / 1000000;
	hcm_fds_release(fds, n, &old);
	ck_assert_msg(cpu_ms < 200, "the listener spun: %llu ms of CPU in 400 ms out of "
		      "descriptors", (unsigned long long)cpu_ms);
	/* Descriptors again: the request that waited is taken. */
	ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev), 0);
	req = ev->id;
	ck_assert_int_eq(ferry_reject(req, NULL, 0), 0);
	ferry_ack_cm_event(ev);
	ferry_destroy_id(req);
	close(raw);
	close(tcp);
	cmt_close(&l);
}
END_TEST

/* --- a listener process stopped with SIGSTOP --- */

/* Child: a stream listener; its port to the parent; echo one byte a client. */
static int hcm_listener_child(int sock, int ctl, void *arg)
{
	uint16_t port;
	int l = hcm_sock_listen(&port);

	ferry_sock_fcntl(l, F_SETFL, 0);
	if (tu_send_u32(ctl, port) < 0)
		return 1;
	for (;;) {
		int a = ferry_sock_accept(l, NULL, NULL);
		char x;

		if (a < 0)
			continue;
		if (ferry_sock_read(a, &x, 1) == 1)
			ferry_sock_write(a, &x, 1);
		ferry_sock_close(a);
	}
	return 0;
}

/* A blocking connect to @port with the shim's short bound; its errno. */
static int hcm_bounded_connect(uint16_t port, int *fd_p)
{
	struct sockaddr_storage ss;
	int c = ferry_socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(c, 0);
	ck_assert_int_eq(sock_connect_bound(c, HCM_BOUND_MS), 0);
	cmt_addr(&ss, AF_INET, port);
	*fd_p = c;
	if (ferry_sock_connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)) == 0)
		return 0;
	return errno;
}

static uint64_t hcm_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

START_TEST(test_stopped_listener_times_out)
{
	uint64_t start;
	uint32_t port;
	int sock, ctl, st, c;
	char x = 'z', y = 0;
	pid_t pid;

	pid = tu_fork(hcm_listener_child, NULL, &sock, &ctl);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(tu_recv_u32(ctl, &port, TU_WAIT_MS), 0);
	ck_assert_int_eq(kill(pid, SIGSTOP), 0);
	ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
	ck_assert(WIFSTOPPED(st));

	/* Fails, and well before the CM's 30 s (the bound only catches a hang). */
	start = hcm_now_ms();
	ck_assert_int_eq(hcm_bounded_connect((uint16_t)port, &c), ETIMEDOUT);
	ck_assert_uint_lt(hcm_now_ms() - start, TU_WAIT_MS);
	ferry_sock_close(c);

	/* Continued, the listener meets a request whose client gave up, and
	 * carries on serving. */
	ck_assert_int_eq(kill(pid, SIGCONT), 0);
	ck_assert_int_eq(hcm_bounded_connect((uint16_t)port, &c), 0);
	ck_assert_int_eq(ferry_sock_write(c, &x, 1), 1);
	ck_assert_int_eq(ferry_sock_read(c, &y, 1), 1);
	ck_assert_int_eq(y, 'z');
	ferry_sock_close(c);
	kill(pid, SIGKILL);
	tu_wait_child(pid, TU_WAIT_MS);
	close(sock);
	close(ctl);
}
END_TEST

Suite *hostile_cm_suite(void)
{
	Suite *s = suite_create("hostile_cm");
	TCase *stall = tcase_create("stall");

	/* Raw peers speak shm's rendezvous protocol; verbs has rdma_cm's. */
	tcase_set_timeout(stall, TU_TCASE_TIMEOUT);
	if (tu_on_shm()) {
		tcase_add_test(stall, test_stalled_client_cm);
		tcase_add_test(stall, test_stalled_client_sock);
		tcase_add_test(stall, test_departed_client);
		tcase_add_test(stall, test_departed_client_quiet);
		tcase_add_test(stall, test_server_stalls_after_accept);
		tcase_add_test(stall, test_no_ready_no_connection);
		tcase_add_test(stall, test_fds_exhausted_no_connection);
		tcase_add_test(stall, test_listener_out_of_fds_pauses);
		tcase_add_test(stall, test_stopped_listener_times_out);
	}
	suite_add_tcase(s, stall);
	return s;
}
