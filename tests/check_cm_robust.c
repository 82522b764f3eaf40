/*
 * check_cm_robust.c - the connection manager when things go wrong:
 * malformed handshakes sent straight to a rendezvous socket (shm), a client that
 * dies before being accepted, peers killed with SIGKILL on either side, a
 * listener that dies or is destroyed with requests pending, and thousands
 * of connections in a loop without a leaked descriptor or byte.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <check.h>

#include "check_suites.h"
#include "cm_msg.h"
#include "cm_shm.h"
#include "cmtest.h"
#include "testutil.h"

#define ROBUST_LOOP_CONNECTIONS	2000
/* On a device: each connection is a kernel CM handshake (slow under emulation). */
#define ROBUST_LOOP_CONNECTIONS_DEVICE	200
#define ROBUST_LOOP_WARMUP	20
/* Heap growth over the whole loop that still means "no leak per connection". */
#define ROBUST_LOOP_MAX_GROWTH	(256 * 1024)

/*
 * The status of REJECTED when the listener's side went away (died, or
 * destroyed the pending request): ECONNRESET.  Over rdma_cm the kernel's
 * IB CM rejects such a request as a consumer would (REJ reason 28, no
 * private data), indistinguishable from ferry_reject: accepted on verbs.
 */
static void robust_assert_reset(const struct ferry_cm_event *ev)
{
	if (tu_on_shm() || ev->status == ECONNRESET)
		ck_assert_int_eq(ev->status, ECONNRESET);
	else
		ck_assert_int_eq(ev->status, FERRY_CM_REJ_CONSUMER_DEFINED);
}

/* --- raw bytes at a listener (shm's rendezvous socket) --- */

/* The listener's rendezvous, found as a client finds it (cm_shm_owner.c). */
static int robust_raw_connect(uint16_t port)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_storage ss;
	struct shm_cm_owner owner;
	struct sockaddr_un un;
	socklen_t len;

	ck_assert_int_ge(fd, 0);
	cmt_addr(&ss, AF_INET, port);
	ck_assert_int_eq(shm_cm_owner_of((struct sockaddr *)&ss, &owner), 0);
	shm_cm_name(&owner, &un, &len);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&un, len), 0);
	return fd;
}

/* The listener must close the connection: EOF within the wait bound. */
static void robust_expect_dropped(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char byte;

	ck_assert_int_eq(poll(&pfd, 1, TU_WAIT_MS), 1);
	ck_assert_int_eq(recv(fd, &byte, 1, MSG_DONTWAIT), 0);
	close(fd);
}

static void robust_send_fd(int fd, const void *buf, size_t len)
{
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl = { 0 };
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	int passed = fd;

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &passed, sizeof(int));
	ck_assert_int_eq(sendmsg(fd, &mh, 0), (ssize_t)len);
}

START_TEST(test_malformed_handshakes)
{
	uint8_t valid[CM_MSG_MAX_SIZE], junk[300];
	struct cm_msg m = { .type = CM_MSG_CONNECT_REQ };
	struct cmt_end l, c, s;
	struct sockaddr_storage dst;
	uint16_t port;
	ssize_t n;
	int fd;

	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	cmt_addr(&m.src, AF_INET, 1234);
	cmt_addr(&m.dst, AF_INET, port);
	n = cm_msg_encode(&m, valid, sizeof(valid));
	ck_assert_int_gt(n, 0);
	memset(junk, 0xa5, sizeof(junk));

	fd = robust_raw_connect(port);		/* garbage */
	ck_assert_int_eq(send(fd, junk, 17, 0), 17);
	robust_expect_dropped(fd);
	fd = robust_raw_connect(port);		/* truncated request */
	ck_assert_int_eq(send(fd, valid, (size_t)n - 1, 0), n - 1);
	robust_expect_dropped(fd);
	fd = robust_raw_connect(port);		/* oversized record */
	memcpy(junk, valid, (size_t)n);
	ck_assert_int_eq(send(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	robust_expect_dropped(fd);
	fd = robust_raw_connect(port);		/* the wrong message type */
	valid[5] = CM_MSG_ACCEPT;
	ck_assert_int_eq(send(fd, valid, (size_t)n, 0), n);
	robust_expect_dropped(fd);
	valid[5] = CM_MSG_CONNECT_REQ;
	fd = robust_raw_connect(port);		/* a request with a descriptor */
	robust_send_fd(fd, valid, (size_t)n);
	robust_expect_dropped(fd);
	fd = robust_raw_connect(port);		/* nothing at all */
	ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
	robust_expect_dropped(fd);

	/* None of those became a request; the listener still serves. */
	cmt_addr(&dst, AF_INET, port);
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, NULL, 0), 0);
	ck_assert_int_eq(cmt_accept(&l, &s), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	cmt_close(&c);
	cmt_close(&s);
	cmt_close(&l);
}
END_TEST

/* --- processes that die --- */

/* Child: connect to the port the parent sends, report, wait to be killed. */
static int robust_client_child(int sock, int ctl, void *arg)
{
	const bool wait_established = arg != NULL;
	struct sockaddr_storage dst;
	struct cmt_end c;
	uint32_t port;

	close(sock);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &port, TU_WAIT_MS) == 0);
	cmt_addr(&dst, AF_INET, (uint16_t)port);
	TU_CHILD_CHECK(cmt_connect(&c, (struct sockaddr *)&dst, "x", 2) == 0);
	if (wait_established)
		TU_CHILD_CHECK(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ESTABLISHED) == 0);
	TU_CHILD_CHECK(tu_send_u32(ctl, 1) == 0);
	pause();
	return 0;
}

/* Child: listen, send the port, take one request (accept it if @arg). */
static int robust_server_child(int sock, int ctl, void *arg)
{
	const bool accept_it = arg != NULL;
	struct cmt_end l, s;
	uint16_t port;

	close(sock);
	TU_CHILD_CHECK(cmt_listen(&l, AF_INET, &port) == 0);
	TU_CHILD_CHECK(tu_send_u32(ctl, port) == 0);
	if (accept_it) {
		TU_CHILD_CHECK(cmt_accept(&l, &s) == 0);
	} else {
		struct ferry_cm_event *ev;

		TU_CHILD_CHECK(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev) == 0);
	}
	TU_CHILD_CHECK(tu_send_u32(ctl, 1) == 0);
	pause();
	return 0;
}

/*
 * On iWARP a client killed while its request waits for the reply exits
 * only when iw_cm lets its id go: when the driver gives up waiting for
 * the MPA reply (siw: 10 s).  Reaping it may take that long on top.
 */
static void robust_kill(pid_t pid)
{
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(tu_wait_child(pid, tu_on_iwarp() ? 3 * TU_WAIT_MS : TU_WAIT_MS),
			 128 + SIGKILL);
}

/*
 * On verbs: rdma_cm reports nothing for a request whose client died before
 * the server answered (the kernel's ucma drops events of ids not yet
 * accepted), so the server learns it at ferry_accept: that fails with
 * ECONNRESET when the IB CM already dropped the request, else the dead
 * client's CM rejects the reply and the id, established for the server,
 * is disconnected.  Either way within bounds, never a hang.
 */
static void robust_accept_dead_client(struct cmt_end *l, struct ferry_cm_id *req)
{
	ck_assert_int_eq(cmt_create_qp(req), 0);
	if (ferry_accept(req, NULL) < 0) {
		ck_assert_int_eq(errno, ECONNRESET);
		return;
	}
	ck_assert_int_eq(cmt_wait_ack(l->ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert_int_eq(cmt_wait_ack(l->ch, FERRY_CM_EVENT_DISCONNECTED), 0);
	ck_assert_int_eq(cmt_wait_ack(l->ch, FERRY_CM_EVENT_TIMEWAIT_EXIT), 0);
	ck_assert(tu_wait_qp_state(req->qp, FERRY_QPS_ERR, TU_WAIT_MS));
	ferry_cm_destroy_qp(req);
}

START_TEST(test_client_dies_before_accept)
{
	struct ferry_cm_event *ev;
	struct ferry_cm_id *req;
	struct cmt_end l;
	uint16_t port;
	uint32_t ready;
	int sock, ctl;
	pid_t pid;

	pid = tu_fork(robust_client_child, NULL, &sock, &ctl);
	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	ck_assert_int_eq(tu_send_u32(ctl, port), 0);
	ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev), 0);
	req = ev->id;
	ferry_ack_cm_event(ev);
	ck_assert_int_eq(tu_recv_u32(ctl, &ready, TU_WAIT_MS), 0);
	robust_kill(pid);

	if (!tu_on_shm()) {
		robust_accept_dead_client(&l, req);
	} else {
		ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_ERROR, &ev), 0);
		ck_assert_ptr_eq(ev->id, req);
		ck_assert_int_eq(ev->status, ECONNRESET);
		ferry_ack_cm_event(ev);
		ck_assert_int_eq(cmt_create_qp(req), 0);
		ck_assert_int_eq(ferry_accept(req, NULL), -1);
		ck_assert_int_eq(errno, ECONNRESET);
	}
	ck_assert_int_eq(ferry_destroy_id(req), 0);
	cmt_close(&l);
	close(sock);
	close(ctl);
}
END_TEST

/*
 * A call the request refuses (disconnecting it before it was accepted)
 * must not cost it the watch on its client: the client's death is still
 * reported.  On shm such calls take the id from the CM thread first.
 */
START_TEST(test_refused_call_keeps_watch)
{
	struct ferry_cm_event *ev;
	struct ferry_cm_id *req;
	struct cmt_end l;
	uint16_t port;
	uint32_t ready;
	int sock, ctl;
	pid_t pid;

	pid = tu_fork(robust_client_child, NULL, &sock, &ctl);
	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	ck_assert_int_eq(tu_send_u32(ctl, port), 0);
	ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev), 0);
	req = ev->id;
	ferry_ack_cm_event(ev);
	ck_assert_int_eq(tu_recv_u32(ctl, &ready, TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_disconnect(req), -1);
	ck_assert_int_eq(errno, EINVAL);
	robust_kill(pid);
	ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_ERROR, &ev), 0);
	ck_assert_ptr_eq(ev->id, req);
	ck_assert_int_eq(ev->status, ECONNRESET);
	ferry_ack_cm_event(ev);
	ck_assert_int_eq(ferry_destroy_id(req), 0);
	cmt_close(&l);
	close(sock);
	close(ctl);
}
END_TEST

START_TEST(test_client_killed_when_established)
{
	struct cmt_end l, s;
	uint16_t port;
	uint32_t ready;
	int sock, ctl;
	pid_t pid;

	/* Listen first: the child inherits a running CM and must start its own. */
	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	pid = tu_fork(robust_client_child, "wait", &sock, &ctl);
	ck_assert_int_eq(tu_send_u32(ctl, port), 0);
	ck_assert_int_eq(cmt_accept(&l, &s), 0);
	ck_assert_int_eq(tu_recv_u32(ctl, &ready, TU_WAIT_MS), 0);
	robust_kill(pid);
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_DISCONNECTED), 0);
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_TIMEWAIT_EXIT), 0);
	ck_assert(tu_wait_qp_state(s.id->qp, FERRY_QPS_ERR, TU_WAIT_MS));
	cmt_close(&s);
	cmt_close(&l);
	close(sock);
	close(ctl);
}
END_TEST

START_TEST(test_server_killed_when_established)
{
	struct sockaddr_storage dst;
	struct cmt_end c;
	uint32_t port, ready;
	int sock, ctl;
	pid_t pid;

	pid = tu_fork(robust_server_child, "accept", &sock, &ctl);
	ck_assert_int_eq(tu_recv_u32(ctl, &port, TU_WAIT_MS), 0);
	cmt_addr(&dst, AF_INET, (uint16_t)port);
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, NULL, 0), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert_int_eq(tu_recv_u32(ctl, &ready, TU_WAIT_MS), 0);
	robust_kill(pid);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_DISCONNECTED), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_TIMEWAIT_EXIT), 0);
	ck_assert(tu_wait_qp_state(c.id->qp, FERRY_QPS_ERR, TU_WAIT_MS));
	cmt_close(&c);
	close(sock);
	close(ctl);
}
END_TEST

START_TEST(test_listener_dies_with_pending_request)
{
	struct sockaddr_storage dst;
	struct ferry_cm_event *ev;
	struct cmt_end c;
	uint32_t port, ready;
	int sock, ctl;
	pid_t pid;

	pid = tu_fork(robust_server_child, NULL, &sock, &ctl);
	ck_assert_int_eq(tu_recv_u32(ctl, &port, TU_WAIT_MS), 0);
	cmt_addr(&dst, AF_INET, (uint16_t)port);
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, NULL, 0), 0);
	ck_assert_int_eq(tu_recv_u32(ctl, &ready, TU_WAIT_MS), 0);
	robust_kill(pid);
	ck_assert_int_eq(cmt_wait(c.ch, FERRY_CM_EVENT_REJECTED, &ev), 0);
	robust_assert_reset(ev);
	ferry_ack_cm_event(ev);
	cmt_close(&c);
	close(sock);
	close(ctl);
}
END_TEST

/* A listener destroyed with a request still queued on its channel. */
START_TEST(test_listener_destroyed_with_queued_request)
{
	struct pollfd pfd = { .events = POLLIN };
	struct sockaddr_storage dst;
	struct ferry_cm_event *ev;
	struct cmt_end l, c;
	uint16_t port;

	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	cmt_addr(&dst, AF_INET, port);
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, NULL, 0), 0);
	pfd.fd = l.ch->fd;
	ck_assert_int_eq(poll(&pfd, 1, TU_WAIT_MS), 1);	/* CONNECT_REQUEST queued */
	ck_assert_int_eq(ferry_destroy_id(l.id), 0);
	l.id = NULL;
	ck_assert_int_eq(poll(&pfd, 1, 0), 0);		/* and dropped */
	ck_assert_int_eq(ferry_destroy_event_channel(l.ch), 0);
	ck_assert_int_eq(cmt_wait(c.ch, FERRY_CM_EVENT_REJECTED, &ev), 0);
	robust_assert_reset(ev);
	ferry_ack_cm_event(ev);
	cmt_close(&c);
}
END_TEST

/*
 * Raw TCP clients at a listener's port (the tcp transport's, or shm's
 * socket handing them over): one sends a frame that is no MPA Request,
 * one stays silent.  The first is closed at once, the second waits
 * without holding anyone up: a ferry client connects meanwhile.
 */
static int robust_raw_tcp(const struct sockaddr_storage *dst)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(connect(fd, (const struct sockaddr *)dst, sizeof(struct sockaddr_in)),
			 0);
	return fd;
}

START_TEST(test_raw_tcp_clients)
{
	static const char junk[] = "GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxx";
	struct pollfd pfd = { .events = POLLIN };
	struct sockaddr_storage dst;
	struct cmt_end l, c, srv;
	char buf[64];
	int bad, silent;
	uint16_t port;

	if (strcmp(tu_transport(), "verbs") == 0) {
		printf("SKIP test_raw_tcp_clients on verbs: rdma_cm's port is no TCP port\n");
		return;
	}
	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	cmt_addr(&dst, AF_INET, port);
	silent = robust_raw_tcp(&dst);
	bad = robust_raw_tcp(&dst);
	ck_assert_int_eq(send(bad, junk, sizeof(junk), MSG_NOSIGNAL), (ssize_t)sizeof(junk));
	pfd.fd = bad;
	ck_assert_int_eq(poll(&pfd, 1, TU_WAIT_MS), 1);
	ck_assert_int_le(recv(bad, buf, sizeof(buf), 0), 0);	/* closed or reset */
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, "ok", 3), 0);
	ck_assert_int_eq(cmt_accept(&l, &srv), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	cmt_close(&c);
	cmt_close(&srv);
	cmt_close(&l);
	close(bad);
	close(silent);
}
END_TEST

/* --- many connections --- */

static void robust_one_connection(struct cmt_end *l, const struct sockaddr *dst)
{
	struct cmt_end c, s;

	ck_assert_int_eq(cmt_connect(&c, dst, "loop", 5), 0);
	ck_assert_int_eq(cmt_accept(l, &s), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert_int_eq(ferry_disconnect(c.id), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_DISCONNECTED), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_TIMEWAIT_EXIT), 0);
	ck_assert_int_eq(cmt_wait_ack(l->ch, FERRY_CM_EVENT_DISCONNECTED), 0);
	ck_assert_int_eq(cmt_wait_ack(l->ch, FERRY_CM_EVENT_TIMEWAIT_EXIT), 0);
	cmt_close(&c);
	cmt_close(&s);
}

START_TEST(test_connection_loop_no_leak)
{
	struct sockaddr_storage dst;
	struct cmt_end l;
	size_t heap_before, heap_after;
	int fds_before, i, n;
	uint16_t port;

	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	cmt_addr(&dst, AF_INET, port);
	for (i = 0; i < ROBUST_LOOP_WARMUP; i++)
		robust_one_connection(&l, (struct sockaddr *)&dst);
	fds_before = cmt_count_fds();
	heap_before = mallinfo2().uordblks;
	n = tu_on_shm() ? ROBUST_LOOP_CONNECTIONS : ROBUST_LOOP_CONNECTIONS_DEVICE;
	for (i = 0; i < n; i++)
		robust_one_connection(&l, (struct sockaddr *)&dst);
	ck_assert_int_eq(cmt_count_fds(), fds_before);
	heap_after = mallinfo2().uordblks;
	ck_assert_msg(heap_after < heap_before + ROBUST_LOOP_MAX_GROWTH,
		      "heap grew from %zu to %zu bytes over %d connections",
		      heap_before, heap_after, n);
	cmt_close(&l);
}
END_TEST

Suite *cm_robust_suite(void)
{
	Suite *s = suite_create("cm_robust");
	TCase *bad = tcase_create("malformed");
	TCase *death = tcase_create("death");
	TCase *loop = tcase_create("loop");

	/* The handshake parser is shm's: other transports have their own. */
	tcase_set_timeout(bad, TU_TCASE_TIMEOUT);
	if (tu_on_shm())
		tcase_add_test(bad, test_malformed_handshakes);
	suite_add_tcase(s, bad);

	tcase_set_timeout(death, TU_TCASE_TIMEOUT);
	tcase_add_test(death, test_client_dies_before_accept);
	if (tu_on_shm())	/* verbs reports no such death (see above) */
		tcase_add_test(death, test_refused_call_keeps_watch);
	tcase_add_test(death, test_client_killed_when_established);
	tcase_add_test(death, test_server_killed_when_established);
	tcase_add_test(death, test_listener_dies_with_pending_request);
	tcase_add_test(death, test_listener_destroyed_with_queued_request);
	tcase_add_test(death, test_raw_tcp_clients);
	suite_add_tcase(s, death);

	tcase_set_timeout(loop, 120);
	tcase_add_test(loop, test_connection_loop_no_leak);
	suite_add_tcase(s, loop);
	return s;
}
