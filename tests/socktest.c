/*
 * socktest.c - what the stream-socket suites (check_sock_*.c) share: a
 * listener on the test address, connected pairs, bounded waits, checked
 * transfers.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ferry/socket.h>

#include "cmtest.h"
#include "socktest.h"
#include "testutil.h"

/* FERRY_TEST_ADDR (default 127.0.0.1), port @port. */
void ts_addr(struct sockaddr_in *sin, uint16_t port)
{
	struct sockaddr_storage ss;

	cmt_addr(&ss, AF_INET, port);
	memcpy(sin, &ss, sizeof(*sin));
}

/* A listener on the test address, port chosen by the CM. */
int ts_listen(uint16_t *port_p)
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
short ts_poll(int fd, short events, int ms)
{
	struct pollfd p = { .fd = fd, .events = events };

	if (ferry_sock_poll(&p, 1, ms) <= 0)
		return 0;
	return p.revents;
}

/* A non-blocking connect to @port, made blocking again once connected. */
int ts_connect_start(uint16_t port)
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

void ts_connect_finish(int c)
{
	int err = -1;
	socklen_t len = sizeof(err);

	ck_assert(ts_poll(c, POLLOUT, TS_TIMEOUT_MS) & POLLOUT);
	ck_assert_int_eq(ferry_sock_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	ck_assert_int_eq(err, 0);
	ck_assert_int_eq(ferry_sock_fcntl(c, F_SETFL, 0), 0);
}

/* A connected pair in this process: *a the client, *b the accepted end. */
void ts_pair_opts(int *a, int *b, int rcvbuf, int sndbuf, int iomap)
{
	uint16_t port;
	int l = ts_listen(&port), c;

	if (rcvbuf)
		ck_assert_int_eq(ferry_sock_setsockopt(l, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
						       sizeof(rcvbuf)), 0);
	if (sndbuf)
		ck_assert_int_eq(ferry_sock_setsockopt(l, SOL_SOCKET, SO_SNDBUF, &sndbuf,
						       sizeof(sndbuf)), 0);
	c = ferry_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	ck_assert_int_ge(c, 0);
	if (sndbuf)
		ck_assert_int_eq(ferry_sock_setsockopt(c, SOL_SOCKET, SO_SNDBUF, &sndbuf,
						       sizeof(sndbuf)), 0);
	if (iomap) {
		ck_assert_int_eq(ferry_sock_setsockopt(l, SOL_FERRY, FERRY_IOMAPSIZE, &iomap,
						       sizeof(iomap)), 0);
		ck_assert_int_eq(ferry_sock_setsockopt(c, SOL_FERRY, FERRY_IOMAPSIZE, &iomap,
						       sizeof(iomap)), 0);
	}
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

void ts_pair(int *a, int *b)
{
	ts_pair_opts(a, b, 0, 0, 0);
}

void ts_fill(uint8_t *buf, size_t len, uint32_t seed)
{
	size_t i;

	for (i = 0; i < len; i++) {
		seed = seed * 1103515245u + 12345u;
		buf[i] = (uint8_t)(seed >> 16);
	}
}

/* Read exactly @len bytes (bounded by the socket's blocking). */
void ts_read_all(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = ferry_sock_recv(fd, (char *)buf + got, len - got, 0);

		ck_assert_msg(n > 0, "recv: %zd (%s)", n, strerror(errno));
		got += (size_t)n;
	}
}

/* Move @len bytes from @a to @b in one thread, checking every byte. */
void ts_move_checked(int a, int b, size_t len)
{
	uint8_t *out = malloc(len), *in = malloc(len);
	size_t sent = 0, got = 0;

	ck_assert(out && in);
	ts_fill(out, len, 11);
	while (got < len) {
		ssize_t n;

		if (sent < len) {
			n = ferry_sock_send(a, out + sent, len - sent, MSG_DONTWAIT);
			ck_assert_msg(n > 0 || errno == EAGAIN, "send: %s", strerror(errno));
			sent += n > 0 ? (size_t)n : 0;
		}
		n = ferry_sock_recv(b, in + got, len - got, MSG_DONTWAIT);
		ck_assert_msg(n > 0 || errno == EAGAIN, "recv: %zd (%s)", n, strerror(errno));
		got += n > 0 ? (size_t)n : 0;
	}
	ck_assert(memcmp(in, out, len) == 0);
	free(in);
	free(out);
}
