/*
 * perf_tcp.c - the kernel TCP loopback rows: a ping-pong of row->size bytes
 * each way and a one-way stream, TCP_NODELAY, plain blocking syscalls.  In
 * the address form the same rows run to the server's ADDR, on the path
 * ferry takes.  One
 * connection per row; the server's listening socket lives for the session
 * and its port travels over the control socket.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "perf.h"

/* Where the rows run: loopback, or the address form's ADDR (network order). */
static struct in_addr perf_tcp_addr = { .s_addr = 0 };

bool perf_tcp_set_addr(const char *addr)
{
	return inet_pton(AF_INET, addr, &perf_tcp_addr) == 1;
}

static struct in_addr perf_tcp_where(void)
{
	struct in_addr loopback = { .s_addr = htonl(INADDR_LOOPBACK) };

	return perf_tcp_addr.s_addr ? perf_tcp_addr : loopback;
}

static void perf_tcp_nodelay(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		perf_die_errno("setsockopt (TCP_NODELAY)");
}

int perf_tcp_listen(uint16_t *port_p)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	int one = 1, fd;

	sin.sin_addr = perf_tcp_where();
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		perf_die_errno("socket (tcp)");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		perf_die("bind (tcp %s): %s", inet_ntoa(sin.sin_addr), strerror(errno));
	if (listen(fd, 4) < 0)
		perf_die_errno("listen (tcp)");
	if (getsockname(fd, (struct sockaddr *)&sin, &len) < 0)
		perf_die_errno("getsockname (tcp)");
	*port_p = ntohs(sin.sin_port);
	return fd;
}

static int perf_tcp_connect(uint16_t port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	int fd;

	sin.sin_addr = perf_tcp_where();
	sin.sin_port = htons(port);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		perf_die_errno("socket (tcp)");
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		perf_die("connect (tcp %s:%u): %s", inet_ntoa(sin.sin_addr), port,
			 strerror(errno));
	perf_tcp_nodelay(fd);
	return fd;
}

static void perf_tcp_write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			perf_die_errno("send (tcp)");
		p += n;
		len -= (size_t)n;
	}
}

static void perf_tcp_read_full(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			perf_die_errno("recv (tcp)");
		if (n == 0)
			perf_die("recv (tcp): the peer closed the connection");
		p += n;
		len -= (size_t)n;
	}
}

static void perf_tcp_lat_client(int fd, const struct perf_row *row,
				void *buf, struct perf_result *res)
{
	uint64_t total = row->warmup + row->iters, i;
	uint64_t *ns = malloc(row->iters * sizeof(*ns));

	if (!ns)
		perf_die("out of memory");
	for (i = 0; i < total; i++) {
		uint64_t t0 = monotime_ns();

		perf_tcp_write_full(fd, buf, row->size);
		perf_tcp_read_full(fd, buf, row->size);
		if (i >= row->warmup)
			ns[i - row->warmup] = monotime_ns() - t0;
	}
	perf_lat_stats(ns, row->iters, res);
	free(ns);
}

/* Stream until the byte or time budget is spent, then wait for the count. */
static void perf_tcp_bw_client(int fd, const struct perf_row *row,
			       void *buf, struct perf_result *res)
{
	uint64_t per_check = row->size >= (1u << 20) ? 1 : (1u << 20) / row->size;
	uint64_t limit_ns = (uint64_t)(row->seconds * 1e9);
	uint64_t sent = 0, msgs = 0, seen, t0, k;

	t0 = monotime_ns();
	do {
		for (k = 0; k < per_check; k++)
			perf_tcp_write_full(fd, buf, row->size);
		msgs += per_check;
		sent += per_check * row->size;
	} while (sent < row->bytes && monotime_ns() - t0 < limit_ns);
	if (shutdown(fd, SHUT_WR) < 0)
		perf_die_errno("shutdown (tcp)");
	perf_tcp_read_full(fd, &seen, sizeof(seen));
	perf_bw_result(res, sent, msgs, monotime_ns() - t0);
	if (seen != sent)
		perf_die("tcp stream: the server saw %llu bytes of %llu",
			 (unsigned long long)seen, (unsigned long long)sent);
}

void perf_tcp_client(uint16_t port, const struct perf_row *row, void *buf,
		     int ctrl_fd, struct perf_result *res)
{
	int fd = perf_tcp_connect(port);

	(void)ctrl_fd;	/* a dead peer shows up as EOF or ECONNRESET */
	if (row->test == PERF_TEST_LAT)
		perf_tcp_lat_client(fd, row, buf, res);
	else
		perf_tcp_bw_client(fd, row, buf, res);
	close(fd);
}

/* Serves one row on a fresh connection; returns the bytes received. */
uint64_t perf_tcp_server(int listen_fd, const struct perf_row *row, void *buf)
{
	uint64_t total = row->warmup + row->iters, seen = 0, i;
	int fd;

	do
		fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		perf_die_errno("accept (tcp)");
	perf_tcp_nodelay(fd);
	if (row->test == PERF_TEST_LAT) {
		for (i = 0; i < total; i++) {
			perf_tcp_read_full(fd, buf, row->size);
			perf_tcp_write_full(fd, buf, row->size);
			seen += row->size;
		}
	} else {
		for (;;) {
			ssize_t n = recv(fd, buf, row->size, 0);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				perf_die_errno("recv (tcp)");
			if (n == 0)
				break;
			seen += (uint64_t)n;
		}
		perf_tcp_write_full(fd, &seen, sizeof(seen));
	}
	close(fd);
	return seen;
}
