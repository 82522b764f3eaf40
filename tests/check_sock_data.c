/*
 * check_sock_data.c - ferry's stream sockets moving bytes: sends and
 * receives whole and partial, flags, vectors, poll and select, streams
 * checked byte by byte on threads, credits, and the send backlog.
 * FERRY_SOCK_STREAM_MB sizes the integrity stream (default 256 MiB on
 * shm, 16 MiB on a device, whose software emulation is slow).  How the
 * suites pick a transport and skip: socktest.h.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/socket.h>

#include "check_suites.h"
#include "sock-internal.h"
#include "socktest.h"
#include "testutil.h"

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

/* sock_pid answers without a system call, and a child of fork() its own. */
START_TEST(test_sock_pid_follows_fork)
{
	int status = -1;
	pid_t child;

	ck_assert_int_eq(sock_pid(), getpid());
	child = tu_fork_quiet();
	ck_assert_int_ge(child, 0);
	if (child == 0)
		_exit(sock_pid() == getpid() ? 0 : 1);
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ck_assert_int_eq(sock_pid(), getpid());
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

/* --- partial transfers and flags --- */

START_TEST(test_partial_write_read)
{
	size_t len = 1 << 20;
	uint8_t *out = malloc(len), *in = malloc(len);
	ssize_t n, m;
	int a, b;

	/* SO_SNDBUF fixes the send buffer: no backlog beyond the ring. */
	ts_pair_opts(&a, &b, 0, 128 * 1024, 0);
	ts_fill(out, len, 7);
	/*
	 * The peer's ring (128 KiB) takes only part of a non-blocking send;
	 * sends go on taking what the peer opens (its progress may publish
	 * the ring's second half meanwhile) until EAGAIN, never past the ring.
	 */
	n = ferry_sock_send(a, out, len, MSG_DONTWAIT);
	ck_assert_int_gt(n, 0);
	for (;;) {
		ck_assert_int_le(n, 128 * 1024);
		m = ferry_sock_send(a, out + n, len - (size_t)n, MSG_DONTWAIT);
		if (m < 0)
			break;
		ck_assert_int_gt(m, 0);
		n += m;
	}
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert_int_lt(n, (ssize_t)len);
	/* A read with a bigger buffer returns what is there: a partial read. */
	m = ferry_sock_recv(b, in, len, 0);
	ck_assert_int_gt(m, 0);
	ck_assert_int_le(m, n);
	ck_assert_int_eq(memcmp(in, out, (size_t)m), 0);
	ferry_sock_close(a);
	ferry_sock_close(b);
	free(out);
	free(in);
}
END_TEST

START_TEST(test_peek_dontwait)
{
	char buf[32];
	int a, b;

	ts_pair(&a, &b);
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), MSG_DONTWAIT), -1);
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert_int_eq(ferry_sock_send(a, "0123456789", 10, 0), 10);
	ck_assert(ts_poll(b, POLLIN, TS_TIMEOUT_MS) & POLLIN);
	ck_assert_int_eq(ferry_sock_recv(b, buf, 4, MSG_PEEK), 4);
	ck_assert_int_eq(memcmp(buf, "0123", 4), 0);
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), MSG_PEEK), 10);
	ck_assert_int_eq(ferry_sock_recv(b, buf, 6, 0), 6);
	ck_assert_int_eq(memcmp(buf, "012345", 6), 0);
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), MSG_DONTWAIT), 4);
	ck_assert_int_eq(memcmp(buf, "6789", 4), 0);
	ferry_sock_close(a);
	ferry_sock_close(b);
}
END_TEST

struct ts_slow {
	int fd;
	int pieces;
};

static void *ts_slow_writer(void *arg)
{
	struct ts_slow *w = arg;
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	int i;

	for (i = 0; i < w->pieces; i++) {
		nanosleep(&ts, NULL);
		if (ferry_sock_send(w->fd, "abcd", 4, 0) != 4)
			return (void *)1;
	}
	return NULL;
}

START_TEST(test_waitall)
{
	struct ts_slow w;
	pthread_t th;
	char buf[16];
	void *ret;
	int a, b;

	ts_pair(&a, &b);
	w.fd = a;
	w.pieces = 4;
	ck_assert_int_eq(pthread_create(&th, NULL, ts_slow_writer, &w), 0);
	ck_assert_int_eq(ferry_sock_recv(b, buf, 16, MSG_WAITALL), 16);
	ck_assert_int_eq(memcmp(buf, "abcdabcdabcdabcd", 16), 0);
	pthread_join(th, &ret);
	ck_assert_ptr_null(ret);
	ferry_sock_close(a);
	ferry_sock_close(b);
}
END_TEST

START_TEST(test_writev_readv_many)
{
	enum { NV = 100 };
	struct iovec wv[NV], rv[NV];
	uint8_t out[NV * 37], in[NV * 37];
	size_t off = 0, total;
	int a, b, i;

	ts_pair(&a, &b);
	ts_fill(out, sizeof(out), 3);
	for (i = 0; i < NV; i++) {
		size_t l = (size_t)(i % 7) * 11;	/* 0 .. 66, some empty */

		wv[i].iov_base = out + off;
		wv[i].iov_len = l;
		off += l;
	}
	total = off;
	ck_assert_int_eq(ferry_sock_writev(a, wv, NV), (ssize_t)total);
	/* Read into iovecs of other sizes: every one must be filled. */
	off = 0;
	for (i = 0; i < NV && off < total; i++) {
		size_t l = 1 + (size_t)(i % 5) * 23;

		if (l > total - off)
			l = total - off;
		rv[i].iov_base = in + off;
		rv[i].iov_len = l;
		off += l;
	}
	ck_assert(ts_poll(b, POLLIN, TS_TIMEOUT_MS) & POLLIN);
	{
		ssize_t got = 0;

		while ((size_t)got < total) {
			struct msghdr msg = { 0 };
			int k = 0;
			size_t skip = (size_t)got;

			while (skip >= rv[k].iov_len) {
				skip -= rv[k].iov_len;
				k++;
			}
			ck_assert_int_eq(skip, 0);
			msg.msg_iov = &rv[k];
			msg.msg_iovlen = (size_t)(i - k);
			ssize_t n = ferry_sock_recvmsg(b, &msg, MSG_WAITALL);

			ck_assert_int_gt(n, 0);
			got += n;
		}
		ck_assert_int_eq(got, (ssize_t)total);
	}
	ck_assert_int_eq(memcmp(in, out, total), 0);
	ferry_sock_close(a);
	ferry_sock_close(b);
}
END_TEST

/* --- poll and select --- */

START_TEST(test_poll_select_mixed)
{
	struct pollfd p[2];
	int a, b, pfd[2];
	fd_set rd;
	struct timeval tv = { 5, 0 };
	char c;

	ts_pair(&a, &b);
	ck_assert_int_eq(pipe(pfd), 0);
	p[0] = (struct pollfd){ .fd = b, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = pfd[0], .events = POLLIN };
	ck_assert_int_eq(ferry_sock_poll(p, 2, 50), 0);
	ck_assert_int_eq(write(pfd[1], "p", 1), 1);
	ck_assert_int_eq(ferry_sock_poll(p, 2, TS_TIMEOUT_MS), 1);
	ck_assert_int_eq(p[0].revents, 0);
	ck_assert(p[1].revents & POLLIN);
	ck_assert_int_eq(read(pfd[0], &c, 1), 1);
	ck_assert_int_eq(ferry_sock_send(a, "s", 1, 0), 1);
	ck_assert_int_eq(ferry_sock_poll(p, 2, TS_TIMEOUT_MS), 1);
	ck_assert(p[0].revents & POLLIN);
	ck_assert_int_eq(p[1].revents, 0);
	/* select: both ready. */
	ck_assert_int_eq(write(pfd[1], "p", 1), 1);
	FD_ZERO(&rd);
	FD_SET(b, &rd);
	FD_SET(pfd[0], &rd);
	ck_assert_int_eq(ferry_sock_select((b > pfd[0] ? b : pfd[0]) + 1, &rd, NULL, NULL, &tv), 2);
	ck_assert(FD_ISSET(b, &rd) && FD_ISSET(pfd[0], &rd));
	close(pfd[0]);
	close(pfd[1]);
	ferry_sock_close(a);
	ferry_sock_close(b);
}
END_TEST

/* --- threads and integrity --- */

struct ts_stream {
	int fd;
	size_t total;
	uint32_t seed;
	uint64_t sum;	/* FNV-1a of the bytes */
	int err;
};

static uint64_t ts_fnv(uint64_t h, const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static void *ts_stream_writer(void *arg)
{
	struct ts_stream *w = arg;
	size_t cap = 300 * 1024, done = 0;
	uint8_t *buf = malloc(cap);
	unsigned int r = w->seed;

	w->sum = 14695981039346656037ull;
	while (done < w->total) {
		size_t n = 1 + (size_t)rand_r(&r) % cap, k;
		struct iovec iov[3];
		ssize_t put;

		if (n > w->total - done)
			n = w->total - done;
		ts_fill(buf, n, (uint32_t)done);
		k = n / 3;
		iov[0] = (struct iovec){ buf, k };
		iov[1] = (struct iovec){ buf + k, k };
		iov[2] = (struct iovec){ buf + 2 * k, n - 2 * k };
		put = ferry_sock_writev(w->fd, iov, 3);
		if (put != (ssize_t)n) {
			w->err = errno ? errno : EIO;
			break;
		}
		w->sum = ts_fnv(w->sum, buf, n);
		done += n;
	}
	free(buf);
	return NULL;
}

static void *ts_stream_reader(void *arg)
{
	struct ts_stream *w = arg;
	size_t cap = 400 * 1024, done = 0;
	uint8_t *buf = malloc(cap);
	unsigned int r = w->seed;

	w->sum = 14695981039346656037ull;
	while (done < w->total) {
		size_t n = 1 + (size_t)rand_r(&r) % cap;
		ssize_t got = ferry_sock_recv(w->fd, buf, n, 0);

		if (got <= 0) {
			w->err = got < 0 ? errno : EPIPE;
			break;
		}
		w->sum = ts_fnv(w->sum, buf, (size_t)got);
		done += (size_t)got;
	}
	free(buf);
	return NULL;
}

/* Stream @total bytes a -> b (and b -> a when @duplex) on threads. */
static void ts_stream(size_t total, bool duplex)
{
	struct ts_stream w1 = { 0 }, r1 = { 0 }, w2 = { 0 }, r2 = { 0 };
	pthread_t t[4];
	int a, b;

	ts_pair(&a, &b);
	w1 = (struct ts_stream){ .fd = a, .total = total, .seed = 1 };
	r1 = (struct ts_stream){ .fd = b, .total = total, .seed = 2 };
	ck_assert_int_eq(pthread_create(&t[0], NULL, ts_stream_writer, &w1), 0);
	ck_assert_int_eq(pthread_create(&t[1], NULL, ts_stream_reader, &r1), 0);
	if (duplex) {
		w2 = (struct ts_stream){ .fd = b, .total = total, .seed = 3 };
		r2 = (struct ts_stream){ .fd = a, .total = total, .seed = 4 };
		ck_assert_int_eq(pthread_create(&t[2], NULL, ts_stream_writer, &w2), 0);
		ck_assert_int_eq(pthread_create(&t[3], NULL, ts_stream_reader, &r2), 0);
	}
	pthread_join(t[0], NULL);
	pthread_join(t[1], NULL);
	if (duplex) {
		pthread_join(t[2], NULL);
		pthread_join(t[3], NULL);
	}
	ck_assert_int_eq(w1.err, 0);
	ck_assert_int_eq(r1.err, 0);
	ck_assert(w1.sum == r1.sum);
	if (duplex) {
		ck_assert_int_eq(w2.err, 0);
		ck_assert_int_eq(r2.err, 0);
		ck_assert(w2.sum == r2.sum);
	}
	ferry_sock_close(a);
	ferry_sock_close(b);
}

/* MiB of the integrity stream; the duplex test moves an eighth each way. */
static size_t ts_stream_mb(void)
{
	const char *env = getenv("FERRY_SOCK_STREAM_MB");

	if (env && *env)
		return strtoul(env, NULL, 10);
	return tu_on_shm() ? 256 : 16;
}

START_TEST(test_duplex_threads)
{
	size_t mb = ts_stream_mb() / 8;

	ts_stream((mb ? mb : 1) << 20, true);
}
END_TEST

START_TEST(test_integrity_stream)
{
	ts_stream(ts_stream_mb() << 20, false);
}
END_TEST

/*
 * The integrity stream with each kind of store forced (FERRY_STREAM_COPY,
 * read at the first large write of the test's own process): direct writes
 * of odd sizes and addresses, non-temporal ones included, on shm; on a
 * device every write is staged whatever the variable says.
 */
static void ts_stream_copy_kind(const char *kind, unsigned int how)
{
	size_t mb = ts_stream_mb() / 8;
	struct ferry_sock *sa;
	int a, b;

	ck_assert_int_eq(setenv("FERRY_STREAM_COPY", kind, 1), 0);
	ts_stream((mb ? mb : 1) << 20, false);
	ts_pair(&a, &b);
	sa = sock_get(a);
	ck_assert_ptr_nonnull(sa);
	ck_assert_uint_eq(sock_copy_how(sa, 65536), how);
	ck_assert_uint_eq(sock_copy_how(sa, 100), how);
	ferry_sock_close(a);
	ferry_sock_close(b);
}

START_TEST(test_integrity_stream_nocache)
{
	ts_stream_copy_kind("nocache", FERRY_DIRECT_NOCACHE);
}
END_TEST

START_TEST(test_integrity_stream_cached)
{
	ts_stream_copy_kind("cached", 0);
}
END_TEST

/*
 * A write the provider cannot carry out at once (here: the QP is in SQD,
 * which holds new work) is refused by ferry_post_send_direct and staged
 * through the send ring instead: send() returns with the bytes copied
 * (the caller's buffer is reused at once), nothing arrives until the QP
 * runs again, then everything does, in order, followed by a direct write.
 */
START_TEST(test_direct_refused_stages)
{
	size_t len = 20000;
	uint8_t *out, *in;
	struct ferry_qp_attr attr;
	struct ferry_sock *sa;
	char c;
	int a, b;

	if (!tu_on_shm())
		TS_SKIP("test_direct_refused_stages", "only shm executes writes at post time");
	out = malloc(2 * len);
	in = malloc(2 * len);
	ts_pair(&a, &b);
	sa = sock_get(a);
	ck_assert_ptr_nonnull(sa);
	ck_assert(sa->direct);
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_SQD;
	ck_assert_int_eq(ferry_modify_qp(sa->qp, &attr, FERRY_QP_STATE), 0);
	ts_fill(out, 2 * len, 31);
	memcpy(in, out, len);
	ck_assert_int_eq(ferry_sock_send(a, in, len, 0), (ssize_t)len);
	memset(in, 0, len);		/* staged: the buffer is ours again */
	ck_assert_int_eq(ferry_sock_recv(b, &c, 1, MSG_DONTWAIT), -1);
	ck_assert_int_eq(errno, EAGAIN);
	attr.qp_state = FERRY_QPS_RTS;
	ck_assert_int_eq(ferry_modify_qp(sa->qp, &attr, FERRY_QP_STATE), 0);
	ck_assert_int_eq(ferry_sock_send(a, out + len, len, 0), (ssize_t)len);
	ts_read_all(b, in, 2 * len);
	ck_assert(memcmp(in, out, 2 * len) == 0);
	ck_assert(sa->direct);
	ferry_sock_close(a);
	ferry_sock_close(b);
	free(out);
	free(in);
}
END_TEST

/*
 * Credits count data messages only, as rsocket counts them: the credit
 * and SGL updates a reader sends take none of its peer's credits, and the
 * peer counts none of them as taken.  An rsocket peer grants back only
 * the data it consumed, so a socket counting its updates too lost one
 * credit per update and stalled (or wrapped around) after a few MiB.
 */
START_TEST(test_credits_count_data_only)
{
	size_t len = 2u << 20;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct ferry_sock *sa, *sb;
	int a, b;

	ts_pair(&a, &b);
	sa = sock_get(a);
	sb = sock_get(b);
	ck_assert_ptr_nonnull(sa);
	ck_assert_ptr_nonnull(sb);
	ts_fill(out, len, 13);
	/* b reads 2 MiB: it publishes 32 ring halves and grants credits. */
	{
		struct ts_stream w = { .fd = a, .total = len, .seed = 5 };
		pthread_t t;
		size_t got = 0;

		ck_assert_int_eq(pthread_create(&t, NULL, ts_stream_writer, &w), 0);
		while (got < len) {
			ssize_t n = ferry_sock_recv(b, in, len - got, 0);

			ck_assert_int_gt(n, 0);
			got += (size_t)n;
		}
		pthread_join(t, NULL);
		ck_assert_int_eq(w.err, 0);
	}
	/* Every message b sent so far was an update: no credit taken ... */
	ck_assert_uint_eq(sb->sseq_no, 0);
	/* ... and a, which received them, counted none. */
	ck_assert_uint_eq(atomic_load(&sa->rseq_no), 0);
	/* b's data does take credits, one per message. */
	ck_assert_int_eq(ferry_sock_send(b, "x", 1, 0), 1);
	ts_read_all(a, in, 1);
	ck_assert_uint_eq(sb->sseq_no, 1);
	ck_assert_uint_eq(atomic_load(&sa->rseq_no), 1);
	ferry_sock_close(a);
	ferry_sock_close(b);
	free(out);
	free(in);
}
END_TEST

/*
 * A connection starts with SOCK_FIRST_CREDITS credits (and receives posted
 * for them), not rq_size: an idle one keeps its receive queue small.  A
 * busy direction's window doubles at each grant up to rq_size; the idle
 * one stays as it started.
 */
START_TEST(test_credit_window_grows)
{
	struct ferry_sock *sa, *sb;
	char c = 0;
	int a, b, i;

	ts_pair(&a, &b);
	sa = sock_get(a);
	sb = sock_get(b);
	ck_assert_ptr_nonnull(sa);
	ck_assert_ptr_nonnull(sb);
	ck_assert_uint_lt(SOCK_FIRST_CREDITS, sb->rq_size);
	ck_assert_uint_eq(sb->credit_window, SOCK_FIRST_CREDITS);
	ck_assert_uint_eq(sock_credits(sa), SOCK_FIRST_CREDITS);
	/* One-byte messages: one credit each, far more than the first window. */
	for (i = 0; i < 4 * (int)sb->rq_size; i++) {
		ck_assert_int_eq(ferry_sock_send(a, &c, 1, 0), 1);
		ts_read_all(b, &c, 1);
	}
	ck_assert_uint_eq(sb->credit_window, sb->rq_size);
	/* b's last grant gave a more than half the full window. */
	for (i = 0; i < 1000 && sock_credits(sa) <= sb->rq_size / 2; i++)
		sock_progress(sa);
	ck_assert_uint_gt(sock_credits(sa), sb->rq_size / 2);
	ck_assert_uint_eq(sa->credit_window, SOCK_FIRST_CREDITS);
	ferry_sock_close(a);
	ferry_sock_close(b);
}
END_TEST

/* --- the send backlog: buffering like TCP's --- */

/* net.ipv4.tcp_wmem's maximum, which bounds a sender's backlog. */
static size_t ts_wmem_max(void)
{
	unsigned long long lo, def, max = 0;
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_wmem", "r");

	if (f) {
		if (fscanf(f, "%llu %llu %llu", &lo, &def, &max) != 3)
			max = 0;
		fclose(f);
	}
	return max ? (size_t)max : SOCK_BACKLOG_DEF_MAX;
}

/* The backlog of @fd holds no byte and no memory (taken under slock, as
 * the flusher drops a piece only after its last byte went out). */
static void ts_assert_backlog_empty(int fd)
{
	struct ferry_sock *s = sock_get(fd);

	ck_assert_ptr_nonnull(s);
	pthread_mutex_lock(&s->slock);
	ck_assert_uint_eq(sock_backlog_bytes(s), 0);
	ck_assert_ptr_null(s->bl_head);
	pthread_mutex_unlock(&s->slock);
}

/*
 * A writer runs ahead of a reader that does not read by the peer's ring
 * and tcp_wmem's maximum, as over TCP, and no further; the reader then
 * drains every byte, in order, and the writer's backlog memory goes.
 */
START_TEST(test_backlog_runs_ahead_then_drains)
{
	size_t limit = ts_wmem_max(), len = limit + (1u << 20), n = 0;
	uint8_t *out = malloc(len), *in = malloc(len);
	ssize_t m;
	int a, b;

	ts_pair(&a, &b);
	ck_assert_uint_eq(sock_get(a)->bl_limit, limit);
	ts_fill(out, len, 11);
	for (;;) {
		m = ferry_sock_send(a, out + n, len - n, MSG_DONTWAIT);
		if (m < 0)
			break;
		ck_assert_int_gt(m, 0);
		n += (size_t)m;
	}
	ck_assert_int_eq(errno, EAGAIN);
	/* The peer's first half-ring at least (the second comes when its
	 * progress sees the first in use), the backlog, never more. */
	ck_assert_uint_ge(n, limit + 64 * 1024);
	ck_assert_uint_le(n, limit + 128 * 1024);
	ts_read_all(b, in, n);
	ck_assert_int_eq(memcmp(in, out, n), 0);
	ck_assert_int_eq(ferry_sock_recv(b, in, 1, MSG_DONTWAIT), -1);
	ck_assert_int_eq(errno, EAGAIN);
	ts_assert_backlog_empty(a);
	ferry_sock_close(a);
	ferry_sock_close(b);
	free(out);
	free(in);
}
END_TEST

/*
 * A blocking writer of far more than ring and backlog fills both while the
 * reader does not read, then blocks; once the reader reads, every byte
 * arrives intact.
 */
START_TEST(test_backlog_blocking_writer)
{
	size_t limit = ts_wmem_max();
	struct ts_stream w = { 0 }, r = { 0 };
	pthread_t tw, tr;
	int a, b, i;

	ts_pair(&a, &b);
	w = (struct ts_stream){ .fd = a, .total = 2 * limit + (1u << 20), .seed = 5 };
	r = (struct ts_stream){ .fd = b, .total = w.total, .seed = 6 };
	ck_assert_int_eq(pthread_create(&tw, NULL, ts_stream_writer, &w), 0);
	for (i = 0; i < TS_TIMEOUT_MS && sock_backlog_bytes(sock_get(a)) < limit; i++)
		usleep(1000);
	ck_assert_uint_eq(sock_backlog_bytes(sock_get(a)), limit);
	ck_assert_int_eq(pthread_create(&tr, NULL, ts_stream_reader, &r), 0);
	pthread_join(tw, NULL);
	pthread_join(tr, NULL);
	ck_assert_int_eq(w.err, 0);
	ck_assert_int_eq(r.err, 0);
	ck_assert(w.sum == r.sum);
	ts_assert_backlog_empty(a);
	ferry_sock_close(a);
	ferry_sock_close(b);
}
END_TEST

/*
 * shutdown(SHUT_WR) with data in the backlog returns at once and its EOF
 * comes after that data; close waits for the reader to take it.
 */
START_TEST(test_backlog_before_shutdown_and_close)
{
	size_t len = 1u << 20;
	uint8_t *out = malloc(len), *in = malloc(len);
	struct ts_stream r = { 0 };
	uint64_t sum = 14695981039346656037ull;
	pthread_t tr;
	int a, b;

	ts_fill(out, len, 21);
	ts_pair(&a, &b);
	ck_assert_int_eq(ferry_sock_send(a, out, len, MSG_DONTWAIT), (ssize_t)len);
	ck_assert_uint_gt(sock_backlog_bytes(sock_get(a)), 0);
	ck_assert_int_eq(ferry_sock_shutdown(a, SHUT_WR), 0);
	ck_assert_int_eq(ferry_sock_send(a, out, 1, MSG_NOSIGNAL), -1);
	ck_assert_int_eq(errno, EPIPE);
	ts_read_all(b, in, len);
	ck_assert_int_eq(memcmp(in, out, len), 0);
	ck_assert_int_eq(ferry_sock_recv(b, in, 1, 0), 0);
	ferry_sock_close(a);
	ferry_sock_close(b);

	/* ts_stream_reader's bytes are ts_fill's of their offset. */
	ts_pair(&a, &b);
	ts_fill(out, len, 0);
	r = (struct ts_stream){ .fd = b, .total = len };
	ck_assert_int_eq(ferry_sock_send(a, out, len, MSG_DONTWAIT), (ssize_t)len);
	ck_assert_int_eq(pthread_create(&tr, NULL, ts_stream_reader, &r), 0);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	pthread_join(tr, NULL);
	ck_assert_int_eq(r.err, 0);
	ck_assert(r.sum == ts_fnv(sum, out, len));
	ck_assert_int_eq(ferry_sock_recv(b, in, 1, 0), 0);
	ferry_sock_close(b);
	free(out);
	free(in);
}
END_TEST

/* SO_SNDBUF set by the program fixes the send buffer: no backlog. */
START_TEST(test_sndbuf_fixes_size)
{
	size_t len = 1u << 20;
	uint8_t *out = malloc(len);
	int a, b, v = 0;
	socklen_t vl = sizeof(v);
	ssize_t n;

	ts_pair_opts(&a, &b, 0, 64 * 1024, 0);
	ck_assert_int_eq(ferry_sock_getsockopt(a, SOL_SOCKET, SO_SNDBUF, &v, &vl), 0);
	ck_assert_int_eq(v, 64 * 1024);
	ck_assert_uint_eq(sock_get(a)->bl_limit, 0);
	ck_assert_uint_eq(sock_get(b)->bl_limit, 0);
	ts_fill(out, len, 3);
	n = ferry_sock_send(a, out, len, MSG_DONTWAIT);
	ck_assert_int_gt(n, 0);
	ck_assert_int_le(n, 128 * 1024);
	ck_assert_uint_eq(sock_backlog_bytes(sock_get(a)), 0);
	ferry_sock_close(a);
	ferry_sock_close(b);
	free(out);
}
END_TEST

Suite *sock_data_suite(void)
{
	Suite *s = suite_create("sock");
	TCase *tc;

	tc = tcase_create("basic");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_socket_args);
	tcase_add_test(tc, test_sock_pid_follows_fork);
	tcase_add_test(tc, test_connect_send_recv_close);
	tcase_add_test(tc, test_partial_write_read);
	tcase_add_test(tc, test_peek_dontwait);
	tcase_add_test(tc, test_waitall);
	tcase_add_test(tc, test_writev_readv_many);
	tcase_add_test(tc, test_backlog_runs_ahead_then_drains);
	tcase_add_test(tc, test_backlog_blocking_writer);
	tcase_add_test(tc, test_backlog_before_shutdown_and_close);
	tcase_add_test(tc, test_sndbuf_fixes_size);
	tcase_add_test(tc, test_poll_select_mixed);
	suite_add_tcase(s, tc);

	tc = tcase_create("stream");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_duplex_threads);
	tcase_add_test(tc, test_integrity_stream);
	tcase_add_test(tc, test_integrity_stream_nocache);
	tcase_add_test(tc, test_integrity_stream_cached);
	tcase_add_test(tc, test_direct_refused_stages);
	tcase_add_test(tc, test_credits_count_data_only);
	tcase_add_test(tc, test_credit_window_grows);
	suite_add_tcase(s, tc);
	return s;
}
