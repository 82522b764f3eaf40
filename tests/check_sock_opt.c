/*
 * check_sock_opt.c - ferry's stream sockets' options and direct
 * placement: FIONREAD, SO_RCVBUF sizing the ring, the target SGL entry
 * stored once (this file stands in for libc's memcpy), FERRY_IOMAPSIZE
 * and riomap.  How the suites pick a transport and skip: socktest.h.
 */
#include "config.h"

#include <dlfcn.h>

#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ferry/socket.h>

#include "check_suites.h"
#include "sock-internal.h"
#include "socktest.h"
#include "testutil.h"

/* --- options --- */

START_TEST(test_fionread)
{
	int a, b, n = -1;

	ts_pair(&a, &b);
	ck_assert_int_eq(ferry_sock_ioctl(b, FIONREAD, &n), 0);
	ck_assert_int_eq(n, 0);
	ck_assert_int_eq(ferry_sock_send(a, "0123456789", 10, 0), 10);
	ck_assert(ts_poll(b, POLLIN, TS_TIMEOUT_MS) & POLLIN);
	ck_assert_int_eq(ferry_sock_ioctl(b, FIONREAD, &n), 0);
	ck_assert_int_eq(n, 10);
	ferry_sock_close(a);
	ferry_sock_close(b);
}
END_TEST

START_TEST(test_rcvbuf_sizes_ring)
{
	size_t len = 1 << 20;
	uint8_t *out = malloc(len);
	int a, b, v = 0;
	socklen_t vl = sizeof(v);
	ssize_t n;

	ts_pair_opts(&a, &b, 16 * 1024, 16 * 1024, 0);
	ck_assert_int_eq(ferry_sock_getsockopt(b, SOL_SOCKET, SO_RCVBUF, &v, &vl), 0);
	ck_assert_int_eq(v, 16 * 1024);
	ts_fill(out, len, 5);
	n = ferry_sock_send(a, out, len, MSG_DONTWAIT);
	ck_assert_int_gt(n, 0);
	ck_assert_int_le(n, 16 * 1024);
	ferry_sock_close(a);
	ferry_sock_close(b);
	free(out);
}
END_TEST

/*
 * The peer's target SGL entry is RDMA-written into memory the sender
 * updates as it writes (addr += n, length -= n).  The shm provider used to
 * copy it with memcpy, and glibc's memcpy of 16 bytes stores all 16 twice:
 * a writer preempted between the two stores put the entry back as
 * published after the sender had used part of it, and the sender wrote its
 * next bytes over those (a socat relay lost 8 KiB and got stale ring bytes
 * at the end, the length unchanged).  This process's memcpy stands for
 * glibc's (check_ferry links libferry in, so the provider's calls come
 * here): armed on the sender's entries, it stores a 16-byte copy twice and
 * lets the sender write between the two stores.
 */
#ifndef __SANITIZE_ADDRESS__
static void *(*ts_libc_memcpy)(void *, const void *, size_t);
/* Armed: the 16 bytes whose copy is stored twice (the first one only). */
static _Atomic bool ts_twice_armed;
static struct rs_sge ts_twice_what;
static void (*ts_twice_between)(void);

static void ts_bytes(void *dst, const void *src, size_t n)
{
	volatile uint8_t *d = dst;
	const volatile uint8_t *s = src;

	while (n--)
		*d++ = *s++;
}

static bool ts_same16(const void *a, const void *b)
{
	const volatile uint8_t *x = a, *y = b;
	int i;

	for (i = 0; i < 16; i++)
		if (x[i] != y[i])
			return false;
	return true;
}

__attribute__((constructor)) static void ts_memcpy_init(void)
{
	ts_libc_memcpy = (void *(*)(void *, const void *, size_t))dlsym(RTLD_NEXT, "memcpy");
}

void *memcpy(void *dst, const void *src, size_t n)
{
	bool armed = true;

	if (n == 16 && atomic_load(&ts_twice_armed) && ts_same16(src, &ts_twice_what) &&
	    atomic_compare_exchange_strong(&ts_twice_armed, &armed, false)) {
		uint8_t v[16];

		ts_bytes(v, src, 16);
		ts_bytes(dst, v, 16);	/* the first store */
		ts_twice_between();	/* the writer is preempted here */
		ts_bytes(dst, v, 16);	/* the second */
		return dst;
	}
	if (!ts_libc_memcpy) {
		ts_bytes(dst, src, n);
		return dst;
	}
	return ts_libc_memcpy(dst, src, n);
}

#define TS_SGL_RING	(16 * 1024)
#define TS_SGL_LEN	(256 * 1024)
static int ts_sgl_sender;
static uint8_t *ts_sgl_out;
static _Atomic size_t ts_sgl_sent;

/* Between the two stores of an entry: the sender uses half of it. */
static void ts_sgl_between(void)
{
	size_t at = atomic_load(&ts_sgl_sent);
	ssize_t n = ferry_sock_send(ts_sgl_sender, ts_sgl_out + at, TS_SGL_RING / 4, MSG_DONTWAIT);

	if (n > 0)
		atomic_fetch_add(&ts_sgl_sent, (size_t)n);
}

START_TEST(test_sgl_entry_stored_once)
{
	uint8_t *in = malloc(TS_SGL_LEN);
	struct ferry_sock *sa, *sb;
	size_t got = 0;
	int a, b;

	if (!tu_on_shm()) {
		printf("SKIP test_sgl_entry_stored_once on %s: the %s writes the entry, not the "
		       "peer through a mapping\n", tu_transport(),
		       ts_on_verbs() ? "device" : "provider's progress thread");
		free(in);
		return;
	}
	ts_sgl_out = malloc(TS_SGL_LEN);
	ck_assert(in && ts_sgl_out);
	ts_fill(ts_sgl_out, TS_SGL_LEN, 23);
	ts_pair_opts(&a, &b, TS_SGL_RING, 0, 0);
	sa = sock_get(a);
	ck_assert_ptr_nonnull(sa);
	ts_sgl_sender = a;
	atomic_store(&ts_sgl_sent, 0);
	sb = sock_get(b);
	ck_assert_ptr_nonnull(sb);
	ck_assert(!sb->peer_swap);
	ts_twice_between = ts_sgl_between;
	/* What b publishes first: the second half of its ring, into a's
	 * entry 1 (through b's own mapping of a's memory). */
	ts_twice_what = (struct rs_sge){ (uintptr_t)(sb->rbuf + TS_SGL_RING / 2),
					 sb->rmr->rkey, TS_SGL_RING / 2 };
	atomic_store(&ts_twice_armed, true);
	/* The first half (the connect data's): the receiver publishes the
	 * second into entry 1 once it sees data. */
	ck_assert_int_eq(ferry_sock_send(a, ts_sgl_out, TS_SGL_RING / 2, MSG_DONTWAIT),
			 TS_SGL_RING / 2);
	atomic_store(&ts_sgl_sent, TS_SGL_RING / 2);
	while (got < TS_SGL_LEN) {
		ssize_t n;

		if (atomic_load(&ts_sgl_sent) < TS_SGL_LEN) {
			size_t at = atomic_load(&ts_sgl_sent);

			n = ferry_sock_send(a, ts_sgl_out + at, TS_SGL_LEN - at, MSG_DONTWAIT);
			ck_assert_msg(n > 0 || errno == EAGAIN, "send: %s", strerror(errno));
			if (n > 0)
				atomic_fetch_add(&ts_sgl_sent, (size_t)n);
		}
		n = ferry_sock_recv(b, in + got, TS_SGL_LEN - got, MSG_DONTWAIT);
		ck_assert_msg(n > 0 || errno == EAGAIN, "recv: %zd (%s)", n, strerror(errno));
		got += n > 0 ? (size_t)n : 0;
	}
	atomic_store(&ts_twice_armed, false);
	ck_assert(memcmp(in, ts_sgl_out, TS_SGL_LEN) == 0);
	ferry_sock_close(a);
	ferry_sock_close(b);
	free(in);
	free(ts_sgl_out);
}
END_TEST
#endif

/* --- direct placement (iomap) --- */

/* Send one byte from @from and take it at @to: everything before has landed. */
static void ts_sync(int from, int to, char c)
{
	char got = 0;

	ck_assert_int_eq(ferry_sock_send(from, &c, 1, 0), 1);
	ts_read_all(to, &got, 1);
	ck_assert_int_eq(got, c);
}

START_TEST(test_iomap_places_in_order)
{
	static uint8_t target[8192], big[100000];
	uint8_t src[6000], stream[16];
	int a, b, n = 4, i;
	socklen_t len = sizeof(n);
	off_t off;

	ts_pair_opts(&a, &b, 0, 0, 2);
	ck_assert_int_eq(ferry_sock_getsockopt(b, SOL_FERRY, FERRY_IOMAPSIZE, &n, &len), 0);
	ck_assert_int_eq(n, 2);
	memset(target, 0, sizeof(target));
	/* b maps target at offset 4096 for a to write into. */
	off = ferry_sock_iomap(b, target, sizeof(target), PROT_WRITE, 0, 4096);
	ck_assert_int_eq(off, 4096);
	ts_sync(b, a, 'm');
	/* Small (inline) and large (ring) writes land at the offset asked,
	 * before the stream bytes sent after them. */
	ck_assert_uint_eq(ferry_sock_iowrite(a, "hello", 5, 4096 + 100, 0), 5);
	ts_fill(src, sizeof(src), 7);
	ck_assert_uint_eq(ferry_sock_iowrite(a, src, sizeof(src), 4096 + 2000, 0), sizeof(src));
	ck_assert_int_eq(ferry_sock_send(a, "after", 5, 0), 5);
	ts_read_all(b, stream, 5);
	ck_assert_int_eq(memcmp(stream, "after", 5), 0);
	ck_assert_int_eq(memcmp(target + 100, "hello", 5), 0);
	ck_assert_int_eq(memcmp(target + 2000, src, sizeof(src)), 0);
	for (i = 0; i < 100; i++)
		ck_assert_uint_eq(target[i], 0);
	ck_assert_uint_eq(target[105], 0);
	ck_assert_uint_eq(target[1999], 0);
	ck_assert_uint_eq(target[8000], 0);

	/* Interleaved with the stream, many times: the stream never overtakes. */
	for (i = 0; i < 200; i++) {
		uint32_t v = (uint32_t)i, got;

		ck_assert_uint_eq(ferry_sock_iowrite(a, &v, sizeof(v), 4096, 0), sizeof(v));
		ck_assert_int_eq(ferry_sock_send(a, &v, sizeof(v), 0), (ssize_t)sizeof(v));
		ts_read_all(b, &got, sizeof(got));
		ck_assert_uint_eq(got, v);
		memcpy(&got, target, sizeof(got));
		ck_assert_uint_eq(got, v);
	}

	/* A write larger than one transfer and than the send ring. */
	off = ferry_sock_iomap(b, big, sizeof(big), PROT_WRITE, 0, -1);
	ck_assert_int_eq(off, (off_t)(uintptr_t)big);
	ts_sync(b, a, 'n');
	{
		static uint8_t bsrc[100000];

		ts_fill(bsrc, sizeof(bsrc), 9);
		ck_assert_uint_eq(ferry_sock_iowrite(a, bsrc, sizeof(bsrc), off, 0), sizeof(bsrc));
		ts_sync(a, b, 'o');
		ck_assert_int_eq(memcmp(big, bsrc, sizeof(bsrc)), 0);
	}
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
}
END_TEST

START_TEST(test_iomap_errors)
{
	static uint8_t target[4096], other[64];
	int a, b, c, d;

	ts_pair_opts(&a, &b, 0, 0, 1);
	/* Arguments. */
	ck_assert_int_eq(ferry_sock_iomap(b, NULL, 10, PROT_WRITE, 0, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_sock_iomap(b, target, 0, PROT_WRITE, 0, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_sock_iomap(b, target, 10, PROT_READ, 0, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_sock_iomap(b, target, 10, PROT_WRITE, 0, -5), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_sock_iounmap(b, other, sizeof(other)), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* Nothing mapped yet: every offset is bad. */
	ck_assert_uint_eq(ferry_sock_iowrite(a, "x", 1, 0, 0), (size_t)-1);
	ck_assert_int_eq(errno, EINVAL);

	ck_assert_int_eq(ferry_sock_iomap(b, target, sizeof(target), PROT_WRITE, 0, 0), 0);
	/* a offered one slot: b has no second one. */
	ck_assert_int_eq(ferry_sock_iomap(b, other, sizeof(other), PROT_WRITE, 0, 8192), -1);
	ck_assert_int_eq(errno, ENOMEM);
	/* Local-only registration needs no slot. */
	ck_assert_int_eq(ferry_sock_iomap(b, other, sizeof(other), PROT_NONE, 0, 8192), 8192);
	ts_sync(b, a, 'm');
	/* Past the end, straddling it, beyond everything. */
	ck_assert_uint_eq(ferry_sock_iowrite(a, "abcdef", 6, 4093, 0), (size_t)-1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(ferry_sock_iowrite(a, "x", 1, 4096, 0), (size_t)-1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(ferry_sock_iowrite(a, "x", 1, 1 << 30, 0), (size_t)-1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_uint_eq(ferry_sock_iowrite(a, "x", 1, -1, 0), (size_t)-1);
	ck_assert_int_eq(errno, EINVAL);
	/* The last byte is fine; the connection survived the refusals. */
	ck_assert_uint_eq(ferry_sock_iowrite(a, "z", 1, 4095, 0), 1);
	ts_sync(a, b, 'p');
	ck_assert_uint_eq(target[4095], 'z');

	/* Unmapped: the peer learns it in order with the stream. */
	ck_assert_int_eq(ferry_sock_iounmap(b, target, sizeof(target)), 0);
	ck_assert_int_eq(ferry_sock_iounmap(b, other, sizeof(other)), 0);
	ts_sync(b, a, 'u');
	ck_assert_uint_eq(ferry_sock_iowrite(a, "z", 1, 0, 0), (size_t)-1);
	ck_assert_int_eq(errno, EINVAL);
	/* The slot is free again. */
	ck_assert_int_eq(ferry_sock_iomap(b, target, 16, PROT_WRITE, 0, 0), 0);
	ts_sync(b, a, 'r');
	ck_assert_uint_eq(ferry_sock_iowrite(a, "q", 1, 15, 0), 1);
	ts_sync(a, b, 's');
	ck_assert_uint_eq(target[15], 'q');
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);

	/* No iomap offered (the default): ENOMEM, as rsocket. */
	ts_pair(&c, &d);
	ck_assert_int_eq(ferry_sock_iomap(d, target, sizeof(target), PROT_WRITE, 0, 0), -1);
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_int_eq(ferry_sock_close(c), 0);
	ck_assert_int_eq(ferry_sock_close(d), 0);
}
END_TEST

Suite *sock_opt_suite(void)
{
	Suite *s = suite_create("sock");
	TCase *tc;

	tc = tcase_create("basic");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_fionread);
	tcase_add_test(tc, test_rcvbuf_sizes_ring);
#ifndef __SANITIZE_ADDRESS__
	tcase_add_test(tc, test_sgl_entry_stored_once);
#endif
	tcase_add_test(tc, test_iomap_places_in_order);
	tcase_add_test(tc, test_iomap_errors);
	suite_add_tcase(s, tc);
	return s;
}
