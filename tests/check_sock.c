/*
 * check_sock.c - ferry's stream sockets (lib/sock) over the shm transport:
 * both ends in one process (threads) or across fork, bounded waits only.
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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ferry/socket.h>

#include "check_suites.h"

#define TS_TIMEOUT_MS 5000

/* --- helpers --- */

static void ts_addr(struct sockaddr_in *sin, uint16_t port)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin->sin_port = htons(port);
}

/* A listener on 127.0.0.1, port chosen by the CM. */
static int ts_listen(uint16_t *port_p)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	int l = ferry_socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(l, 0);
	ts_addr(&sin, 0);
	ck_assert_int_eq(ferry_sock_bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(ferry_sock_listen(l, 16), 0);
	ck_assert_int_eq(ferry_sock_getsockname(l, (struct sockaddr *)&sin, &len), 0);
	ck_assert_uint_ne(ntohs(sin.sin_port), 0);
	*port_p = ntohs(sin.sin_port);
	return l;
}

/* Wait (bounded) for @events on ferry socket @fd. */
static short ts_poll(int fd, short events, int ms)
{
	struct pollfd p = { .fd = fd, .events = events };

	if (ferry_sock_poll(&p, 1, ms) <= 0)
		return 0;
	return p.revents;
}

/* A non-blocking connect to @port, made blocking again once connected. */
static __attribute__((unused)) int ts_connect_start(uint16_t port)
{
	struct sockaddr_in sin;
	int c = ferry_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int r;

	ck_assert_int_ge(c, 0);
	ts_addr(&sin, port);
	r = ferry_sock_connect(c, (struct sockaddr *)&sin, sizeof(sin));
	ck_assert(r == 0 || errno == EINPROGRESS);
	return c;
}

static void ts_connect_finish(int c)
{
	int err = -1;
	socklen_t len = sizeof(err);

	ck_assert(ts_poll(c, POLLOUT, TS_TIMEOUT_MS) & POLLOUT);
	ck_assert_int_eq(ferry_sock_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	ck_assert_int_eq(err, 0);
	ck_assert_int_eq(ferry_sock_fcntl(c, F_SETFL, 0), 0);
}

/* A connected pair in this process: *a the client, *b the accepted end. */
static void ts_pair_opts(int *a, int *b, int rcvbuf)
{
	uint16_t port;
	int l = ts_listen(&port), c;

	if (rcvbuf)
		ck_assert_int_eq(ferry_sock_setsockopt(l, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
						       sizeof(rcvbuf)), 0);
	c = ferry_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	ck_assert_int_ge(c, 0);
	if (rcvbuf)
		ck_assert_int_eq(ferry_sock_setsockopt(c, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
						       sizeof(rcvbuf)), 0);
	{
		struct sockaddr_in sin;
		int r;

		ts_addr(&sin, port);
		r = ferry_sock_connect(c, (struct sockaddr *)&sin, sizeof(sin));
		ck_assert(r == 0 || errno == EINPROGRESS);
	}
	ck_assert(ts_poll(l, POLLIN, TS_TIMEOUT_MS) & POLLIN);
	*b = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(*b, 0);
	ts_connect_finish(c);
	*a = c;
	ck_assert_int_eq(ferry_sock_close(l), 0);
}

static void ts_pair(int *a, int *b)
{
	ts_pair_opts(a, b, 0);
}

static __attribute__((unused)) void ts_fill(uint8_t *buf, size_t len, uint32_t seed)
{
	size_t i;

	for (i = 0; i < len; i++) {
		seed = seed * 1103515245u + 12345u;
		buf[i] = (uint8_t)(seed >> 16);
	}
}

/* Read exactly @len bytes (bounded by the socket's blocking). */
static void ts_read_all(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = ferry_sock_recv(fd, (char *)buf + got, len - got, 0);

		ck_assert_msg(n > 0, "recv: %zd (%s)", n, strerror(errno));
		got += (size_t)n;
	}
}

static __attribute__((unused)) void ts_write_all(int fd, const void *buf, size_t len)
{
	size_t put = 0;

	while (put < len) {
		ssize_t n = ferry_sock_send(fd, (const char *)buf + put, len - put, MSG_NOSIGNAL);

		ck_assert_msg(n > 0, "send: %zd (%s)", n, strerror(errno));
		put += (size_t)n;
	}
}

/* --- basics --- */

START_TEST(test_socket_args)
{
	int s;

	ck_assert_int_eq(ferry_socket(AF_UNIX, SOCK_STREAM, 0), -1);
	ck_assert_int_eq(errno, EAFNOSUPPORT);
	ck_assert_int_eq(ferry_socket(AF_INET, SOCK_DGRAM, 0), -1);
	s = ferry_socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(s, 0);
	ck_assert_int_eq(ferry_sock_is_ferry(s), 1);
	ck_assert(fcntl(s, F_GETFD) & FD_CLOEXEC);
	ck_assert_int_eq(ferry_sock_send(s, "x", 1, MSG_NOSIGNAL), -1);
	ck_assert_int_eq(errno, ENOTCONN);
	ck_assert_int_eq(ferry_sock_close(s), 0);
	ck_assert_int_eq(ferry_sock_is_ferry(s), 0);
	ck_assert_int_eq(ferry_sock_close(s), -1);
	ck_assert_int_eq(errno, EBADF);
}
END_TEST

START_TEST(test_connect_send_recv_close)
{
	char buf[64];
	int a, b;

	ts_pair(&a, &b);
	ck_assert_int_eq(ferry_sock_send(a, "hello", 5, 0), 5);
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), 0), 5);
	ck_assert_int_eq(memcmp(buf, "hello", 5), 0);
	ck_assert_int_eq(ferry_sock_write(b, "world!", 6), 6);
	ck_assert_int_eq(ferry_sock_read(a, buf, sizeof(buf)), 6);
	ck_assert_int_eq(memcmp(buf, "world!", 6), 0);
	/* Data sent before close arrives, then EOF. */
	ck_assert_int_eq(ferry_sock_send(a, "bye", 3, 0), 3);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ts_read_all(b, buf, 3);
	ck_assert_int_eq(memcmp(buf, "bye", 3), 0);
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), 0), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
}
END_TEST

Suite *sock_suite(void)
{
	Suite *s = suite_create("sock");
	TCase *tc = tcase_create("basic");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_socket_args);
	tcase_add_test(tc, test_connect_send_recv_close);
	suite_add_tcase(s, tc);
	return s;
}
