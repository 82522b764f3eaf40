/*
 * perf_stream.c - the stream-socket rows (op "stream"), run inside the
 * worker processes of perf_spawn.c: ferry's stream sockets over shm or
 * verbs, and kernel TCP loopback written with the same code through the
 * plain BSD calls, so that both pay for the same loop.
 *
 *   lat      ping-pong of row->size bytes each way (busy: FERRY_POLL_US
 *            large, TCP spins on MSG_DONTWAIT; block: FERRY_POLL_US=0,
 *            TCP blocking calls);
 *   bw       one-way stream of row->size writes until the byte or time
 *            budget is spent, then SHUT_WR and the receiver's byte count;
 *   rate     the same with 64-byte writes, counted in messages;
 *   connect  connect + accept + one byte each way + close, repeated for
 *            twice the bw duration (or -n connections).
 *
 * One connection per row (lat, bw, rate); the worker on the server side
 * listens on a fresh port and reports it before the client worker starts.
 * tcp+preload rows are tcp rows run under the preload shim (perf_preload.c).
 */
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ferry/socket.h>

#include "perf.h"

#define PS_BUSY_POLL_US "1000000"	/* FERRY_POLL_US of busy rows */
#define PS_RECV_CHUNK (256u << 10)	/* bw receiver: bytes per recv */
#define PS_QUIT_BYTE 'Q'		/* connect: the last connection */
#define PS_BACKLOG 128
#define PS_SYSFS_IB "/sys/class/infiniband"

/*
 * One stream API: ferry's calls or the kernel's.  The ferry calls mirror
 * the BSD ones, so a table of the same signatures covers both.
 */
struct ps_api {
	int (*socket)(int domain, int type, int protocol);
	int (*bind)(int fd, const struct sockaddr *addr, socklen_t len);
	int (*listen)(int fd, int backlog);
	int (*accept)(int fd, struct sockaddr *addr, socklen_t *len_p);
	int (*connect)(int fd, const struct sockaddr *addr, socklen_t len);
	ssize_t (*send)(int fd, const void *buf, size_t len, int flags);
	ssize_t (*recv)(int fd, void *buf, size_t len, int flags);
	int (*shutdown)(int fd, int how);
	int (*close)(int fd);
	int (*setsockopt)(int fd, int level, int name, const void *val,
			  socklen_t len);
	int (*getsockopt)(int fd, int level, int name, void *val,
			  socklen_t *len_p);
	int (*getsockname)(int fd, struct sockaddr *addr, socklen_t *len_p);
};

/* glibc declares some of these with transparent unions: thin wrappers. */
static int ps_k_socket(int domain, int type, int protocol)
{
	return socket(domain, type | SOCK_CLOEXEC, protocol);
}

static int ps_k_bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	return bind(fd, addr, len);
}

static int ps_k_accept(int fd, struct sockaddr *addr, socklen_t *len_p)
{
	return accept4(fd, addr, len_p, SOCK_CLOEXEC);
}

static int ps_k_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	return connect(fd, addr, len);
}

static int ps_k_getsockname(int fd, struct sockaddr *addr, socklen_t *len_p)
{
	return getsockname(fd, addr, len_p);
}

static const struct ps_api ps_kernel = {
	ps_k_socket, ps_k_bind, listen, ps_k_accept, ps_k_connect, send, recv,
	shutdown, close, setsockopt, getsockopt, ps_k_getsockname,
};

static const struct ps_api ps_ferry = {
	ferry_socket, ferry_sock_bind, ferry_sock_listen, ferry_sock_accept,
	ferry_sock_connect, ferry_sock_send, ferry_sock_recv,
	ferry_sock_shutdown, ferry_sock_close, ferry_sock_setsockopt,
	ferry_sock_getsockopt, ferry_sock_getsockname,
};

/* What a worker knows about its row. */
struct ps_ctx {
	const struct ps_api *api;
	const struct perf_row *row;
	const char *what;	/* "ferry socket" / "tcp": for messages */
	int spin_flags;		/* MSG_DONTWAIT for busy TCP, else 0 */
	struct sockaddr_storage addr;
	socklen_t addr_len;
	char *buf;
	size_t buf_size;
};

void perf_stream_setenv(const struct perf_row *row)
{
	if (row->transport == PERF_TR_TCP)
		return;
	setenv("FERRY_POLL_US", row->mode == PERF_MODE_BUSY ? PS_BUSY_POLL_US : "0", 1);
	setenv("FERRY_TRANSPORT", row->transport == PERF_TR_VERBS ? "verbs" : "shm", 1);
}

bool perf_stream_verbs_present(char *note, size_t note_len)
{
	DIR *dir = opendir(PS_SYSFS_IB);
	struct dirent *de;
	bool found = false;

	while (dir && (de = readdir(dir)) != NULL)
		if (de->d_name[0] != '.')
			found = true;
	if (dir)
		closedir(dir);
	if (!found)
		snprintf(note, note_len, "skipped: no RDMA device (%s is empty or absent)",
			 PS_SYSFS_IB);
	return found;
}

/* The IPv4 address of the netdev of the first RDMA device's port 1. */
static bool perf_stream_verbs_ip(struct in_addr *ip, char *note, size_t note_len)
{
	char path[512], ifname[IF_NAMESIZE + 2] = "";
	struct ifaddrs *ifa, *it;
	struct dirent *de;
	DIR *dir = opendir(PS_SYSFS_IB);
	FILE *f = NULL;
	bool ok = false;

	while (dir && !f && (de = readdir(dir)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), PS_SYSFS_IB "/%s/ports/1/gid_attrs/ndevs/0",
			 de->d_name);
		f = fopen(path, "r");
	}
	if (dir)
		closedir(dir);
	if (!f || !fgets(ifname, sizeof(ifname), f)) {
		snprintf(note, note_len, "skipped: no RDMA device with a netdev (give --verbs-addr)");
		if (f)
			fclose(f);
		return false;
	}
	fclose(f);
	ifname[strcspn(ifname, "\n")] = 0;
	if (getifaddrs(&ifa) < 0)
		perf_die_errno("getifaddrs");
	for (it = ifa; it && !ok; it = it->ifa_next) {
		if (it->ifa_addr && it->ifa_addr->sa_family == AF_INET &&
		    strcmp(it->ifa_name, ifname) == 0) {
			*ip = ((struct sockaddr_in *)it->ifa_addr)->sin_addr;
			ok = true;
		}
	}
	freeifaddrs(ifa);
	if (!ok)
		snprintf(note, note_len, "skipped: %s (the RDMA device's netdev) has no IPv4 address",
			 ifname);
	return ok;
}

bool perf_stream_addr(enum perf_transport tr, const char *verbs_addr,
		      struct sockaddr_storage *ss, char *note, size_t note_len)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;

	memset(ss, 0, sizeof(*ss));
	sin->sin_family = AF_INET;
	if (tr != PERF_TR_VERBS) {
		sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return true;
	}
	if (verbs_addr) {
		if (inet_pton(AF_INET, verbs_addr, &sin->sin_addr) == 1)
			return true;
		snprintf(note, note_len, "skipped: --verbs-addr %s is not an IPv4 address",
			 verbs_addr);
		return false;
	}
	return perf_stream_verbs_present(note, note_len) &&
	       perf_stream_verbs_ip(&sin->sin_addr, note, note_len);
}

__attribute__((noreturn))
static void ps_die(const struct ps_ctx *c, const char *call)
{
	perf_die("%s (%s): %s", call, c->what, strerror(errno));
}

static void ps_nodelay(const struct ps_ctx *c, int fd)
{
	int one = 1;

	if (c->api->setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		ps_die(c, "setsockopt TCP_NODELAY");
}

static void ps_send_full(const struct ps_ctx *c, int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = c->api->send(fd, p, len, MSG_NOSIGNAL | c->spin_flags);

		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			ps_die(c, "send");
		p += n;
		len -= (size_t)n;
	}
}

/* Reads exactly @len bytes; false on EOF before the first byte. */
static bool ps_recv_full(const struct ps_ctx *c, int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t want = len;

	while (len) {
		ssize_t n = c->api->recv(fd, p, len, c->spin_flags);

		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			ps_die(c, "recv");
		if (n == 0) {
			if (len == want)
				return false;
			perf_die("recv (%s): the peer closed the connection mid-message",
				 c->what);
		}
		p += n;
		len -= (size_t)n;
	}
	return true;
}

static int ps_connect(const struct ps_ctx *c)
{
	int fd = c->api->socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		ps_die(c, "socket");
	if (c->api->connect(fd, (const struct sockaddr *)&c->addr, c->addr_len) < 0)
		ps_die(c, "connect");
	ps_nodelay(c, fd);
	return fd;
}

static int ps_accept(const struct ps_ctx *c, int lfd)
{
	int fd;

	do
		fd = c->api->accept(lfd, NULL, NULL);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		ps_die(c, "accept");
	ps_nodelay(c, fd);
	return fd;
}

/* Verbs rows must really run on verbs, preload rows on ferry: ask the socket. */
static bool ps_check_transport(const struct ps_ctx *c, int fd, char *note,
			       size_t note_len)
{
	char tp[16] = "";
	socklen_t len = sizeof(tp);

	if (c->row->transport == PERF_TR_PRELOAD)
		return perf_preload_on_ferry(fd, note, note_len);
	if (c->api != &ps_ferry || c->row->transport != PERF_TR_VERBS)
		return true;
	if (c->api->getsockopt(fd, SOL_FERRY, FERRY_TRANSPORT_OPT, tp, &len) < 0)
		ps_die(c, "getsockopt FERRY_TRANSPORT_OPT");
	if (strcmp(tp, "verbs") == 0)
		return true;
	snprintf(note, note_len, "skipped: the socket runs on \"%s\", not verbs", tp);
	return false;
}

static void ps_ctx_init(struct ps_ctx *c, const struct perf_row *row)
{
	/* tcp+preload: the very code of tcp, the shim takes the calls */
	bool kernel = row->transport == PERF_TR_TCP ||
		      row->transport == PERF_TR_PRELOAD;

	memset(c, 0, sizeof(*c));
	c->row = row;
	c->api = kernel ? &ps_kernel : &ps_ferry;
	c->what = row->transport == PERF_TR_TCP ? "tcp" :
		  row->transport == PERF_TR_PRELOAD ? "tcp under the preload" :
		  row->transport == PERF_TR_VERBS ? "ferry socket, verbs" :
		  "ferry socket, shm";
	c->spin_flags = kernel && row->mode == PERF_MODE_BUSY ? MSG_DONTWAIT : 0;
	c->addr_len = sizeof(struct sockaddr_in);
	c->buf_size = row->size > PS_RECV_CHUNK ? row->size : PS_RECV_CHUNK;
	c->buf = aligned_alloc(4096, (c->buf_size + 4095) & ~(size_t)4095);
	if (!c->buf)
		perf_die("out of memory");
	memset(c->buf, 'f', c->buf_size);
}

/* --- server worker --- */

static uint64_t ps_serve_lat(const struct ps_ctx *c, int fd)
{
	uint64_t seen = 0;

	while (ps_recv_full(c, fd, c->buf, c->row->size)) {
		ps_send_full(c, fd, c->buf, c->row->size);
		seen += c->row->size;
	}
	return seen;
}

/* bw and rate: count until EOF, then tell the count. */
static uint64_t ps_serve_stream(const struct ps_ctx *c, int fd)
{
	uint64_t seen = 0;

	for (;;) {
		ssize_t n = c->api->recv(fd, c->buf, c->buf_size, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			ps_die(c, "recv");
		if (n == 0)
			break;
		seen += (uint64_t)n;
	}
	ps_send_full(c, fd, &seen, sizeof(seen));
	return seen;
}

/* connect: one byte each way per connection until the quit byte. */
static uint64_t ps_serve_connect(const struct ps_ctx *c, int lfd)
{
	uint64_t conns = 0;
	char byte;

	do {
		int fd = ps_accept(c, lfd);

		if (!ps_recv_full(c, fd, &byte, 1))
			perf_die("recv (%s): a connection closed before its byte", c->what);
		ps_send_full(c, fd, &byte, 1);
		if (c->api->close(fd) < 0)
			ps_die(c, "close");
		conns++;
	} while (byte != PS_QUIT_BYTE);
	return conns;
}

static int ps_listen(const struct ps_ctx *c, uint16_t *port_p)
{
	struct sockaddr_storage ss = c->addr;
	socklen_t len = c->addr_len;
	int one = 1, fd;

	fd = c->api->socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		ps_die(c, "socket");
	c->api->setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (c->api->bind(fd, (struct sockaddr *)&ss, len) < 0 ||
	    c->api->listen(fd, PS_BACKLOG) < 0 ||
	    c->api->getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
		c->api->close(fd);
		return -1;
	}
	*port_p = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

void perf_stream_serve(const struct perf_opts *opts, const struct perf_row *row,
		       int chan_fd)
{
	char note[96] = "";
	struct ps_ctx c;
	uint16_t port = 0;
	uint64_t seen;
	int lfd, fd;

	ps_ctx_init(&c, row);
	if (!perf_stream_addr(row->transport, opts->verbs_addr, &c.addr, note,
			      sizeof(note))) {
		perf_stream_report_port(chan_fd, 0, note);
		return;
	}
	lfd = ps_listen(&c, &port);
	if (lfd < 0) {
		snprintf(note, sizeof(note), "skipped: listen (%s): %s", c.what,
			 strerror(errno));
		perf_stream_report_port(chan_fd, 0, note);
		return;
	}
	perf_stream_report_port(chan_fd, port, NULL);
	if (row->test == PERF_TEST_CONNECT) {
		seen = ps_serve_connect(&c, lfd);
	} else {
		fd = ps_accept(&c, lfd);
		/* a client that finds no verbs under its socket closes it */
		if (!ps_check_transport(&c, fd, note, sizeof(note)))
			seen = 0;
		else if (row->test == PERF_TEST_LAT)
			seen = ps_serve_lat(&c, fd);
		else
			seen = ps_serve_stream(&c, fd);
		c.api->close(fd);
	}
	c.api->close(lfd);
	free(c.buf);
	perf_stream_report_bytes(chan_fd, seen);
}

/* --- client worker --- */

static void ps_run_lat(const struct ps_ctx *c, int fd, struct perf_result *res)
{
	uint64_t total = c->row->warmup + c->row->iters, i;
	uint64_t *ns = malloc(c->row->iters * sizeof(*ns));

	if (!ns)
		perf_die("out of memory");
	for (i = 0; i < total; i++) {
		uint64_t t0 = monotime_ns();

		ps_send_full(c, fd, c->buf, c->row->size);
		if (!ps_recv_full(c, fd, c->buf, c->row->size))
			perf_die("recv (%s): the server closed the connection", c->what);
		if (i >= c->row->warmup)
			ns[i - c->row->warmup] = monotime_ns() - t0;
	}
	perf_lat_stats(ns, c->row->iters, res);
	free(ns);
}

/* bw and rate: write until the budget is spent, then wait for the count. */
static void ps_run_stream(const struct ps_ctx *c, int fd, struct perf_result *res)
{
	size_t size = c->row->size;
	/* look at the clock every 256 writes or 1 MiB: a slow row ends on time */
	uint64_t per_check = size >= (4u << 10) ? ((1u << 20) + size - 1) / size : 256;
	uint64_t limit_ns = (uint64_t)(c->row->seconds * 1e9);
	uint64_t sent = 0, msgs = 0, seen = 0, t0, k;

	t0 = monotime_ns();
	do {
		for (k = 0; k < per_check; k++)
			ps_send_full(c, fd, c->buf, size);
		msgs += per_check;
		sent += per_check * size;
	} while (sent < c->row->bytes && monotime_ns() - t0 < limit_ns);
	if (c->api->shutdown(fd, SHUT_WR) < 0)
		ps_die(c, "shutdown");
	if (!ps_recv_full(c, fd, &seen, sizeof(seen)))
		perf_die("recv (%s): no byte count from the server", c->what);
	perf_bw_result(res, sent, msgs, monotime_ns() - t0);
	if (seen != sent)
		perf_die("%s stream: the server received %llu bytes of %llu",
			 c->what, (unsigned long long)seen,
			 (unsigned long long)sent);
}

/* One connection; false (and @note) when it ran on the wrong transport. */
static bool ps_one_connection(const struct ps_ctx *c, char byte, char *note,
			      size_t note_len)
{
	int fd = ps_connect(c);
	bool ok = ps_check_transport(c, fd, note, note_len);

	ps_send_full(c, fd, &byte, 1);
	if (!ps_recv_full(c, fd, &byte, 1))
		perf_die("recv (%s): the server closed before its byte", c->what);
	if (c->api->close(fd) < 0)
		ps_die(c, "close");
	return ok;
}

static void ps_run_connect(const struct ps_ctx *c, struct perf_result *res)
{
	uint64_t limit_ns = (uint64_t)(c->row->seconds * 1e9), conns = 0, t0, dt;
	uint64_t wrong = 0;
	char note[sizeof(res->note)] = "", tail[64];
	size_t keep;

	t0 = monotime_ns();
	do {
		wrong += !ps_one_connection(c, 'c', note, sizeof(note));
		conns++;
	} while (conns < c->row->iters && monotime_ns() - t0 < limit_ns);
	dt = monotime_ns() - t0;
	wrong += !ps_one_connection(c, PS_QUIT_BYTE, note, sizeof(note));
	res->iters = conns;
	res->seconds = dt / 1e9;
	res->conn_s = conns / (dt ? dt / 1e9 : 1e-9);
	if (wrong) {
		res->skipped = true;
		/* the reason, shortened if need be, and the count */
		snprintf(tail, sizeof(tail), " (%llu of %llu connections)",
			 (unsigned long long)wrong, (unsigned long long)conns + 1);
		keep = sizeof(res->note) - 1 - strlen(tail);
		if (strlen(note) < keep)
			keep = strlen(note);
		memcpy(res->note, note, keep);
		strcpy(res->note + keep, tail);
	}
}

void perf_stream_run(const struct perf_opts *opts, const struct perf_row *row,
		     uint16_t port, struct perf_result *res)
{
	struct ps_ctx c;
	int fd;

	memset(res, 0, sizeof(*res));
	res->test = row->test;
	res->op = row->op;
	res->transport = row->transport;
	res->mode = row->mode;
	res->size = row->size;
	ps_ctx_init(&c, row);
	if (!perf_stream_addr(row->transport, opts->verbs_addr, &c.addr,
			      res->note, sizeof(res->note)))
		goto skip;
	((struct sockaddr_in *)&c.addr)->sin_port = htons(port);
	if (row->test == PERF_TEST_CONNECT) {
		ps_run_connect(&c, res);
	} else {
		fd = ps_connect(&c);
		if (!ps_check_transport(&c, fd, res->note, sizeof(res->note))) {
			c.api->close(fd);
			goto skip;
		}
		if (row->test == PERF_TEST_LAT)
			ps_run_lat(&c, fd, res);
		else
			ps_run_stream(&c, fd, res);
		c.api->close(fd);
	}
	free(c.buf);
	return;
skip:
	res->skipped = true;
	free(c.buf);
}
