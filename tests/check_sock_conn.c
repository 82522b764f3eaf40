/*
 * check_sock_conn.c - ferry's stream sockets making and ending
 * connections: shutdown, EPIPE, resets, linger, keepalive, non-blocking
 * connects, accept4, connects after the buffers were resized or across
 * fork, descriptors kept flat over a close loop, peers gone early, churn.
 * How the suites pick a transport and skip: socktest.h.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/socket.h>

#include "check_suites.h"
#include "cmtest.h"
#include "sock-internal.h"
#include "socktest.h"
#include "testutil.h"

/* --- ends of connections --- */

START_TEST(test_shutdown_both_ways)
{
	char buf[16];
	int a, b;

	ts_pair(&a, &b);
	ck_assert_int_eq(ferry_sock_send(a, "last", 4, 0), 4);
	ck_assert_int_eq(ferry_sock_shutdown(a, SHUT_WR), 0);
	/* The data sent before the shutdown first, then EOF. */
	ts_read_all(b, buf, 4);
	ck_assert_int_eq(memcmp(buf, "last", 4), 0);
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), 0), 0);
	ck_assert(ts_poll(b, POLLRDHUP, TS_TIMEOUT_MS) & POLLRDHUP);
	/* a cannot write any more ... */
	ck_assert_int_eq(ferry_sock_send(a, "x", 1, MSG_NOSIGNAL), -1);
	ck_assert_int_eq(errno, EPIPE);
	/* ... but still reads what b sends. */
	ck_assert_int_eq(ferry_sock_send(b, "reply", 5, 0), 5);
	ts_read_all(a, buf, 5);
	ck_assert_int_eq(memcmp(buf, "reply", 5), 0);
	ck_assert_int_eq(ferry_sock_shutdown(b, SHUT_WR), 0);
	ck_assert_int_eq(ferry_sock_recv(a, buf, sizeof(buf), 0), 0);
	/* SHUT_RD: reads return 0 at once. */
	ck_assert_int_eq(ferry_sock_shutdown(b, SHUT_RD), 0);
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), 0), 0);
	ferry_sock_close(a);
	ferry_sock_close(b);
}
END_TEST

static volatile sig_atomic_t ts_sigpipes;

static void ts_on_sigpipe(int sig)
{
	(void)sig;
	ts_sigpipes++;
}

START_TEST(test_epipe_sigpipe)
{
	struct sigaction sa = { .sa_handler = ts_on_sigpipe }, old;
	char buf[8];
	int a, b;

	ts_pair(&a, &b);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	ck_assert_int_eq(ferry_sock_recv(a, buf, sizeof(buf), 0), 0);	/* EOF */
	ck_assert_int_eq(ferry_sock_send(a, "x", 1, MSG_NOSIGNAL), -1);
	ck_assert_int_eq(errno, EPIPE);
	ck_assert_int_eq(ts_sigpipes, 0);
	sigaction(SIGPIPE, &sa, &old);
	ck_assert_int_eq(ferry_sock_send(a, "x", 1, 0), -1);
	ck_assert_int_eq(errno, EPIPE);
	ck_assert_int_eq(ts_sigpipes, 1);
	sigaction(SIGPIPE, &old, NULL);
	ferry_sock_close(a);
}
END_TEST

/* What a forked client runs once connected. */
struct ts_child {
	void (*fn)(int fd);
};

static int ts_child_connect(int sock, int ctl, void *arg)
{
	const struct ts_child *child = arg;
	struct sockaddr_in sin;
	uint32_t port;
	int c;

	(void)sock;
	if (tu_recv_u32(ctl, &port, TU_WAIT_MS) < 0)
		return 2;
	c = ferry_socket(AF_INET, SOCK_STREAM, 0);
	ts_addr(&sin, (uint16_t)port);
	if (c < 0 || ferry_sock_connect(c, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		return 2;
	child->fn(c);
	return 0;
}

/*
 * A listener in this process and a forked client of it running @child.
 * The fork comes first, as in the CM suites: on verbs, device contexts
 * librdmacm opened before a fork stay the parent's, and a child's
 * posts through them fail (EACCES).
 */
static pid_t ts_fork_client(const struct ts_child *child, int *l_p)
{
	uint16_t port;
	int sock, ctl;
	pid_t pid = tu_fork(ts_child_connect, (void *)child, &sock, &ctl);

	*l_p = ts_listen(&port);
	ck_assert_int_eq(tu_send_u32(ctl, port), 0);
	close(sock);
	close(ctl);
	return pid;
}

static void ts_child_send_and_hang(int fd)
{
	if (ferry_sock_send(fd, "alive", 5, 0) != 5)
		_exit(3);
	for (;;)
		pause();
}

START_TEST(test_econnreset_on_sigkill)
{
	static const struct ts_child child = { ts_child_send_and_hang };
	int l, b, to, status;
	pid_t pid = ts_fork_client(&child, &l);
	char buf[8];

	b = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(b, 0);
	ts_read_all(b, buf, 5);
	/* Moved, as the preload shim moves sockets: the hang-up follows. */
	to = dup(b);
	ck_assert_int_ge(to, 0);
	ck_assert_int_eq(sock_renumber(b, to), 0);
	b = to;
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	ck_assert(ts_poll(b, POLLIN, TS_TIMEOUT_MS) & (POLLIN | POLLERR | POLLHUP));
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), 0), -1);
	ck_assert_int_eq(errno, ECONNRESET);
	ferry_sock_close(b);
	ferry_sock_close(l);
}
END_TEST

START_TEST(test_linger_zero_resets)
{
	struct linger lg = { 1, 0 };
	char buf[8];
	int a, b;

	ts_pair(&a, &b);
	ck_assert_int_eq(ferry_sock_setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert(ts_poll(b, POLLIN, TS_TIMEOUT_MS) & (POLLIN | POLLERR));
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), 0), -1);
	ck_assert_int_eq(errno, ECONNRESET);
	ferry_sock_close(b);
}
END_TEST

START_TEST(test_linger_delivers)
{
	struct linger lg = { 1, 3 };
	size_t len = 96 * 1024;
	uint8_t *out = malloc(len), *in = malloc(len);
	int a, b;

	ts_pair(&a, &b);
	ts_fill(out, len, 11);
	ck_assert_int_eq(ferry_sock_setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	ck_assert_int_eq(ferry_sock_send(a, out, len, 0), (ssize_t)len);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ts_read_all(b, in, len);
	ck_assert_int_eq(memcmp(in, out, len), 0);
	ck_assert_int_eq(ferry_sock_recv(b, in, 1, 0), 0);
	ferry_sock_close(b);
	free(out);
	free(in);
}
END_TEST

/* --- connect --- */

START_TEST(test_nonblocking_connect_refused)
{
	uint16_t port;
	int l = ts_listen(&port), c, err = 0;
	socklen_t len = sizeof(err);
	struct sockaddr_in sin;

	ferry_sock_close(l);	/* now nobody listens on port */
	c = ts_connect_start(port);
	ck_assert(ts_poll(c, POLLOUT, TS_TIMEOUT_MS) & (POLLOUT | POLLERR));
	ck_assert_int_eq(ferry_sock_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	ck_assert_int_eq(err, ECONNREFUSED);
	ferry_sock_close(c);
	/* A blocking connect says so itself. */
	c = ferry_socket(AF_INET, SOCK_STREAM, 0);
	ts_addr(&sin, port);
	ck_assert_int_eq(ferry_sock_connect(c, (struct sockaddr *)&sin, sizeof(sin)), -1);
	ck_assert_int_eq(errno, ECONNREFUSED);
	ferry_sock_close(c);
}
END_TEST

START_TEST(test_nonblocking_connect_ok)
{
	uint16_t port;
	int l = ts_listen(&port), c, b, err = -1;
	socklen_t len = sizeof(err);
	struct sockaddr_in peer, me;
	socklen_t plen = sizeof(peer), mlen = sizeof(me);

	c = ts_connect_start(port);
	ck_assert_int_eq(ferry_sock_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	ck_assert_int_eq(err, 0);
	b = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(b, 0);
	ts_connect_finish(c);
	ck_assert_int_eq(ferry_sock_getpeername(c, (struct sockaddr *)&peer, &plen), 0);
	ck_assert_int_eq(ntohs(peer.sin_port), port);
	ck_assert_int_eq(ferry_sock_getsockname(c, (struct sockaddr *)&me, &mlen), 0);
	ck_assert_int_eq(me.sin_family, AF_INET);
	ferry_sock_close(c);
	ferry_sock_close(b);
	ferry_sock_close(l);
}
END_TEST

START_TEST(test_accept4_flags)
{
	uint16_t port;
	int l = ts_listen(&port), c, b;
	char buf[4];

	ck_assert_int_eq(ferry_sock_fcntl(l, F_SETFL, O_NONBLOCK), 0);
	ck_assert_int_eq(ferry_sock_accept(l, NULL, NULL), -1);
	ck_assert_int_eq(errno, EAGAIN);
	c = ts_connect_start(port);
	ck_assert(ts_poll(l, POLLIN, TS_TIMEOUT_MS) & POLLIN);
	b = ferry_sock_accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	ck_assert_int_ge(b, 0);
	ck_assert(ferry_sock_fcntl(b, F_GETFL) & O_NONBLOCK);
	ck_assert(fcntl(b, F_GETFD) & FD_CLOEXEC);
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), 0), -1);
	ck_assert_int_eq(errno, EAGAIN);
	ts_connect_finish(c);
	ferry_sock_close(b);
	ferry_sock_close(c);
	c = ts_connect_start(port);
	ck_assert(ts_poll(l, POLLIN, TS_TIMEOUT_MS) & POLLIN);
	b = ferry_sock_accept4(l, NULL, NULL, 0);
	ck_assert_int_ge(b, 0);
	ck_assert(!(ferry_sock_fcntl(b, F_GETFL) & O_NONBLOCK));
	ck_assert(!(fcntl(b, F_GETFD) & FD_CLOEXEC));
	ferry_sock_close(b);
	ferry_sock_close(c);
	ferry_sock_close(l);
}
END_TEST

/* --- connects after resizing, and across fork --- */

/*
 * A listener makes the buffers of its next socket while accept waits; a
 * size set on the listener after that must still be what the accepted
 * socket gets (a ring too small for what it advertises breaks the stream).
 */
START_TEST(test_accept_after_listener_resized)
{
	int small = 16 * 1024, big = 256 * 1024, l, c, b, v = 0;
	socklen_t vl = sizeof(v);
	uint16_t port;

	l = ts_listen(&port);
	ck_assert_int_eq(ferry_sock_setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small,
					       sizeof(small)), 0);
	c = ts_connect_start(port);	/* the first request: buffers made then */
	ck_assert(ts_poll(l, POLLIN, TS_TIMEOUT_MS) & POLLIN);
	b = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(b, 0);
	ts_connect_finish(c);
	ferry_sock_close(c);
	ferry_sock_close(b);

	ck_assert_int_eq(ferry_sock_fcntl(l, F_SETFL, O_NONBLOCK), 0);
	ck_assert_int_eq(ferry_sock_accept(l, NULL, NULL), -1);	/* waits: a spare */
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert_int_eq(ferry_sock_setsockopt(l, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big)), 0);
	c = ts_connect_start(port);
	ck_assert(ts_poll(l, POLLIN, TS_TIMEOUT_MS) & POLLIN);
	b = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(b, 0);
	ts_connect_finish(c);
	ck_assert_int_eq(ferry_sock_getsockopt(b, SOL_SOCKET, SO_RCVBUF, &v, &vl), 0);
	ck_assert_int_eq(v, big);
	ts_move_checked(c, b, 4 * (size_t)big);
	ferry_sock_close(c);
	ferry_sock_close(b);
	ferry_sock_close(l);
}
END_TEST

/* A connect sizes its ring as asked even after a connect of other sizes
 * left spare buffers behind. */
START_TEST(test_connect_after_resize)
{
	int small = 16 * 1024, big = 256 * 1024, l, c, b, v = 0;
	socklen_t vl = sizeof(v);
	uint16_t port;
	int round;

	l = ts_listen(&port);
	for (round = 0; round < 2; round++) {
		int size = round ? big : small;

		c = ferry_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		ck_assert_int_ge(c, 0);
		ck_assert_int_eq(ferry_sock_setsockopt(c, SOL_SOCKET, SO_RCVBUF, &size,
						       sizeof(size)), 0);
		{
			struct sockaddr_in sin;
			int r;

			ts_addr(&sin, port);
			r = ferry_sock_connect(c, (struct sockaddr *)&sin, sizeof(sin));
			ck_assert(r == 0 || errno == EINPROGRESS);
		}
		ck_assert(ts_poll(l, POLLIN, TS_TIMEOUT_MS) & POLLIN);
		b = ferry_sock_accept(l, NULL, NULL);
		ck_assert_int_ge(b, 0);
		ts_connect_finish(c);
		ck_assert_int_eq(ferry_sock_getsockopt(c, SOL_SOCKET, SO_RCVBUF, &v, &vl), 0);
		ck_assert_int_eq(v, size);
		ts_move_checked(b, c, 4 * (size_t)size);
		ferry_sock_close(c);
		ferry_sock_close(b);
	}
	ferry_sock_close(l);
}
END_TEST

static void ts_send_all(int fd, const void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = ferry_sock_send(fd, (const char *)buf + done, len - done, 0);

		ck_assert_msg(n > 0, "send: %s", strerror(errno));
		done += (size_t)n;
	}
}

/* Child of test_connect_spare_stays_parents: connect, wait, check 'A's. */
static void ts_child_expect_a(uint16_t port, int to_child, int from_child)
{
	struct sockaddr_in sin;
	char buf[4096], x;
	size_t got = 0, i;
	int c = ferry_socket(AF_INET, SOCK_STREAM, 0);

	ts_addr(&sin, port);
	if (c < 0 || ferry_sock_connect(c, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		_exit(2);
	if (write(from_child, "c", 1) != 1 || read(to_child, &x, 1) != 1)
		_exit(3);
	while (got < sizeof(buf)) {
		ssize_t n = ferry_sock_recv(c, buf + got, sizeof(buf) - got, 0);

		if (n <= 0)
			_exit(4);
		got += (size_t)n;
	}
	for (i = 0; i < sizeof(buf); i++)
		if (buf[i] != 'A')
			_exit(5);
	_exit(0);
}

/*
 * The buffers a connect makes for the next one are this process's: a child
 * of fork() shares their memory with it and must make its own, or the two
 * connections would receive into one ring.
 */
START_TEST(test_connect_spare_stays_parents)
{
	int to_child[2], from_child[2], l, a, b1, b, c3, b3, status;
	char data[4096], buf[4096], x;
	uint16_t port;
	pid_t pid;

	if (ts_on_verbs())
		TS_SKIP("test_connect_spare_stays_parents", "a child of fork() cannot use the "
			"device contexts librdmacm opened in its parent");
	if (!tu_on_shm())
		TS_SKIP("test_connect_spare_stays_parents", "a child of fork() cannot use the "
			"contexts its parent opened: their progress thread is the parent's");
	l = ts_listen(&port);
	a = ts_connect_start(port);	/* leaves spare buffers in this process */
	ck_assert(ts_poll(l, POLLIN, TS_TIMEOUT_MS) & POLLIN);
	b1 = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(b1, 0);
	ts_connect_finish(a);
	ck_assert_int_eq(pipe(to_child), 0);
	ck_assert_int_eq(pipe(from_child), 0);
	pid = tu_fork_quiet();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		ts_child_expect_a(port, to_child[0], from_child[1]);

	b = ferry_sock_accept(l, NULL, NULL);	/* the child's */
	ck_assert_int_ge(b, 0);
	ck_assert_int_eq(read(from_child[0], &x, 1), 1);
	memset(data, 'A', sizeof(data));
	ts_send_all(b, data, sizeof(data));
	c3 = ts_connect_start(port);		/* takes this process's spare */
	ck_assert(ts_poll(l, POLLIN, TS_TIMEOUT_MS) & POLLIN);
	b3 = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(b3, 0);
	ts_connect_finish(c3);
	memset(data, 'B', sizeof(data));
	ts_send_all(b3, data, sizeof(data));
	ts_read_all(c3, buf, sizeof(buf));
	ck_assert(memcmp(buf, data, sizeof(buf)) == 0);
	ck_assert_int_eq(write(to_child[1], "g", 1), 1);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ferry_sock_close(c3);
	ferry_sock_close(b3);
	ferry_sock_close(b);
	ferry_sock_close(b1);
	ferry_sock_close(a);
	ferry_sock_close(l);
	close(to_child[0]);
	close(to_child[1]);
	close(from_child[0]);
	close(from_child[1]);
}
END_TEST

/*
 * Closing a connected socket leaves its resources to the next connect or
 * accept (sock_conn_bury): over many connections the process must still
 * hold as many descriptors as after the first few.
 */
START_TEST(test_close_loop_no_fd_growth)
{
	int l, c, b, i, fds_warm = 0;
	uint16_t port;
	char x = 'x';

	l = ts_listen(&port);
	for (i = 0; i < 105; i++) {
		if (i == 5)
			fds_warm = cmt_count_fds();
		c = ts_connect_start(port);
		ck_assert(ts_poll(l, POLLIN, TS_TIMEOUT_MS) & POLLIN);
		b = ferry_sock_accept(l, NULL, NULL);
		ck_assert_int_ge(b, 0);
		ts_connect_finish(c);
		ck_assert_int_eq(ferry_sock_send(c, &x, 1, 0), 1);
		ts_read_all(b, &x, 1);
		ck_assert_int_eq(ferry_sock_close(c), 0);
		ck_assert_int_eq(ferry_sock_close(b), 0);
	}
	ck_assert_int_eq(cmt_count_fds(), fds_warm);
	ferry_sock_close(l);
}
END_TEST

static void ts_child_keepalive_then_stop(int fd)
{
	int on = 1, one = 1;

	ferry_sock_setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	ferry_sock_setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof(one));
	if (ferry_sock_send(fd, "k", 1, 0) != 1)
		_exit(3);
	raise(SIGSTOP);	/* a peer that no longer answers */
	for (;;)
		pause();
}

START_TEST(test_keepalive_detects_dead_peer)
{
	static const struct ts_child child = { ts_child_keepalive_then_stop };
	int l, b, on = 1, one = 1, two = 2, status;
	pid_t pid;
	char buf[4];

	if (ts_on_verbs())
		TS_SKIP("test_keepalive_detects_dead_peer", "a stopped peer's RDMA device still acknowledges the probes, as "
			"its kernel would TCP's; only a vanished host goes unanswered");
	pid = ts_fork_client(&child, &l);
	b = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(b, 0);
	ck_assert_int_eq(ferry_sock_setsockopt(b, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)), 0);
	ck_assert_int_eq(ferry_sock_setsockopt(b, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof(one)), 0);
	ck_assert_int_eq(ferry_sock_setsockopt(b, IPPROTO_TCP, TCP_KEEPINTVL, &one, sizeof(one)), 0);
	ck_assert_int_eq(ferry_sock_setsockopt(b, IPPROTO_TCP, TCP_KEEPCNT, &two, sizeof(two)), 0);
	ts_read_all(b, buf, 1);
	/* Blocks until keepalive gives up (a few seconds), not for ever. */
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), 0), -1);
	ck_assert_int_eq(errno, ETIMEDOUT);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	ferry_sock_close(b);
	ferry_sock_close(l);
}
END_TEST

/* --- connections that end early, and churn --- */


/* Accept, send one byte, close; @n times. */
struct ts_quick_server {
	int l, n, failed;
};

static void *ts_quick_serve(void *arg)
{
	struct ts_quick_server *q = arg;
	char x = 'q';

	for (int i = 0; i < q->n; i++) {
		int fd = ferry_sock_accept(q->l, NULL, NULL);

		if (fd < 0 || ferry_sock_send(fd, &x, 1, MSG_NOSIGNAL) != 1)
			q->failed++;
		if (fd >= 0)
			ferry_sock_close(fd);
	}
	return NULL;
}

/*
 * A server that accepts, sends and closes at once can be gone before the
 * client has finished setting the connection up: the client still connects,
 * reads the byte, then EOF, as over TCP.  This once lost the byte (the
 * peer's hang-up put the client's QP in ERR before RTR: connect failed with
 * EINVAL), hung (the shm monitor's watch list was relinked through a freed
 * node) and read freed memory (a CM watch freed while its callback ran).
 */
START_TEST(test_peer_gone_before_established)
{
	struct ts_quick_server q = { .n = tu_on_shm() ? 1500 : 10 };
	struct sockaddr_in sin;
	uint16_t port;
	pthread_t th;

	/* Seen in check-siw: 3 runs in 4 lost one of the 10 connections,
	 * none in 5 more with logging on. */
	if (ts_on_verbs() && tu_on_iwarp())
		TS_SKIP("test_peer_gone_before_established", "siw fails the odd client whose "
			"server sends and closes at once: rdma_cm's CONNECT_ERROR (EINVAL) while "
			"it awaits the MPA Reply, before ferry has a say");

	q.l = ts_listen(&port);
	ts_addr(&sin, port);
	ck_assert_int_eq(pthread_create(&th, NULL, ts_quick_serve, &q), 0);
	for (int i = 0; i < q.n; i++) {
		int fd = ferry_socket(AF_INET, SOCK_STREAM, 0);
		char c = 0;

		ck_assert_int_ge(fd, 0);
		if (ferry_sock_connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
			ck_abort_msg("connection %d: connect: %s", i, strerror(errno));
		ck_assert_int_eq(ferry_sock_recv(fd, &c, 1, 0), 1);
		ck_assert_int_eq(c, 'q');
		ck_assert_int_eq(ferry_sock_recv(fd, &c, 1, 0), 0);
		ck_assert_int_eq(ferry_sock_close(fd), 0);
	}
	pthread_join(th, NULL);
	ck_assert_int_eq(q.failed, 0);
	ferry_sock_close(q.l);
}
END_TEST

/* Connect to @port, send a byte, take it back, close; @n times.  0: all did. */
static int ts_churn_client(uint16_t port, int n)
{
	struct sockaddr_in sin;

	ts_addr(&sin, port);
	for (int i = 0; i < n; i++) {
		int fd = ferry_socket(AF_INET, SOCK_STREAM, 0);
		char c = (char)i;

		if (fd < 0 || ferry_sock_connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
		    ferry_sock_send(fd, &c, 1, MSG_NOSIGNAL) != 1 ||
		    ferry_sock_recv(fd, &c, 1, 0) != 1 || c != (char)i) {
			fprintf(stderr, "test_connect_churn: connection %d: %s\n", i,
				strerror(errno));
			return 1;
		}
		ferry_sock_close(fd);
	}
	return 0;
}

/*
 * Connections made and closed one after another between two processes, a
 * byte each way (ferry-perf's connect test): every one works.  (The shm
 * monitor once took a hang-up event of a closed connection for a fresh
 * one whose QP had been allocated at the same address, and reset it:
 * ferry-perf's connect test, its processes pinned to a CPU each and
 * busy-polling, failed in about one run in five; this test, which is
 * neither, did not catch it in ten runs.  tests/ferry-perf-connect.sh
 * runs that one.)
 */
struct ts_churn {
	uint16_t port;
	int n, failed;
};

static void *ts_churn_thread(void *arg)
{
	struct ts_churn *c = arg;

	c->failed = ts_churn_client(c->port, c->n);
	return NULL;
}

START_TEST(test_connect_churn)
{
	struct ts_churn c = { .n = tu_on_shm() ? 3000 : 10 };
	int l, status = 0, failed = 0;
	pthread_t th;
	pid_t child = -1;

	l = ts_listen(&c.port);
	/* The client in a process of its own on shm; in a thread elsewhere:
	 * a verbs device is not to be used across fork(). */
	if (tu_on_shm()) {
		child = tu_fork_quiet();
		ck_assert_int_ge(child, 0);
		if (child == 0)
			_exit(ts_churn_client(c.port, c.n));
	} else {
		ck_assert_int_eq(pthread_create(&th, NULL, ts_churn_thread, &c), 0);
	}
	for (int i = 0; i < c.n && !failed; i++) {
		int fd = ferry_sock_accept(l, NULL, NULL);
		char x = 0;

		if (fd < 0 || ferry_sock_recv(fd, &x, 1, 0) != 1 ||
		    ferry_sock_send(fd, &x, 1, MSG_NOSIGNAL) != 1)
			failed = i + 1;
		if (fd >= 0)
			ferry_sock_close(fd);
	}
	if (child < 0) {
		pthread_join(th, NULL);	/* a failed connection was closed: it is told */
		ck_assert_msg(!failed, "connection %d failed at the server", failed - 1);
		ck_assert_int_eq(c.failed, 0);
	} else {
		if (failed)
			kill(child, SIGKILL);	/* it may wait for an answer */
		ck_assert_int_eq(waitpid(child, &status, 0), child);
		ck_assert_msg(!failed, "connection %d failed at the server", failed - 1);
		ck_assert(WIFEXITED(status));
		ck_assert_int_eq(WEXITSTATUS(status), 0);
	}
	ferry_sock_close(l);
}
END_TEST

Suite *sock_conn_suite(void)
{
	Suite *s = suite_create("sock");
	TCase *tc;

	tc = tcase_create("basic");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_nonblocking_connect_ok);
	tcase_add_test(tc, test_nonblocking_connect_refused);
	tcase_add_test(tc, test_accept4_flags);
	tcase_add_test(tc, test_accept_after_listener_resized);
	tcase_add_test(tc, test_connect_after_resize);
	tcase_add_test(tc, test_connect_spare_stays_parents);
	tcase_add_test(tc, test_close_loop_no_fd_growth);
	suite_add_tcase(s, tc);

	tc = tcase_create("ends");
	/* Keepalive needs a few seconds of its own; one CI run with two VMs
	 * and another test suite on the same two cores took over 30. */
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_shutdown_both_ways);
	tcase_add_test(tc, test_epipe_sigpipe);
	tcase_add_test(tc, test_econnreset_on_sigkill);
	tcase_add_test(tc, test_linger_zero_resets);
	tcase_add_test(tc, test_linger_delivers);
	tcase_add_test(tc, test_keepalive_detects_dead_peer);
	suite_add_tcase(s, tc);

	tc = tcase_create("early");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_peer_gone_before_established);
	tcase_add_test(tc, test_connect_churn);
	suite_add_tcase(s, tc);
	return s;
}
