/*
 * check_sock_iwarp.c - rsocket's iWARP mode (sock/sock_msg.c): messages
 * as a plain WRITE and a 4-byte SEND where the connection has no WRITE
 * WITH IMM.  Which mode a connection takes; streams in that mode, every
 * byte checked, over a small ring so that credits and ring halves go back
 * and forth by the thousand; and a peer breaking the mode's rules.
 *
 * The mode is forced between two ferry ends (sock_msg_force, as
 * FERRY_STREAM_IWARP=1 does) on every transport but shm, whose QPs always
 * take immediate data and whose SENDs only reach memory the peer mapped;
 * against librdmacm's rsocket on siw it runs in the VM
 * (tests/rxe/interop-rsocket.sh).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/socket.h>
#include <ferry/verbs.h>

#include "check_suites.h"
#include "sock-internal.h"
#include "socktest.h"
#include "testutil.h"

/* The receive ring of the streams: 16 KiB, a grant every 8 KiB. */
#define TI_RING		(16 * 1024)

/* Byte @pos of stream @seed: a position-keyed generator, for checks at
 * any offset. */
static uint8_t ti_byte(uint32_t seed, uint64_t pos)
{
	uint64_t x = (pos + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)seed << 32;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	return (uint8_t)(x >> 32);
}

struct ti_flow {
	int fd;
	uint32_t seed;
	size_t total;
	size_t bad_at;	/* first wrong byte + 1; 0: none */
	int err;
};

/* Writes of random sizes, 1 byte to 200 KiB: inline, staged, split. */
static void *ti_writer(void *arg)
{
	struct ti_flow *f = arg;
	uint8_t *buf = malloc(200 * 1024);
	unsigned int r = f->seed;
	size_t done = 0;

	while (buf && done < f->total) {
		size_t n = 1 + (size_t)rand_r(&r) % (rand_r(&r) % 4 ? 64 : 200 * 1024), i;
		ssize_t put;

		if (n > f->total - done)
			n = f->total - done;
		for (i = 0; i < n; i++)
			buf[i] = ti_byte(f->seed, done + i);
		put = ferry_sock_send(f->fd, buf, n, MSG_NOSIGNAL);
		if (put <= 0) {
			f->err = put < 0 ? errno : EIO;
			break;
		}
		done += (size_t)put;
	}
	free(buf);
	return NULL;
}

static void *ti_reader(void *arg)
{
	struct ti_flow *f = arg;
	uint8_t *buf = malloc(100 * 1024);
	unsigned int r = f->seed * 7 + 1;
	size_t done = 0;

	while (buf && done < f->total && !f->bad_at) {
		size_t n = 1 + (size_t)rand_r(&r) % (100 * 1024), i;
		ssize_t got = ferry_sock_recv(f->fd, buf, n, 0);

		if (got <= 0) {
			f->err = got < 0 ? errno : EPIPE;
			break;
		}
		for (i = 0; i < (size_t)got && !f->bad_at; i++) {
			if (buf[i] != ti_byte(f->seed, done + i))
				f->bad_at = done + i + 1;
		}
		done += (size_t)got;
	}
	free(buf);
	return NULL;
}

/* @total bytes each way between @a and @b at once, every byte checked. */
static void ti_duplex(int a, int b, size_t total)
{
	struct ti_flow f[4] = {
		{ .fd = a, .seed = 11, .total = total }, { .fd = b, .seed = 11, .total = total },
		{ .fd = b, .seed = 12, .total = total }, { .fd = a, .seed = 12, .total = total },
	};
	pthread_t t[4];
	int i;

	for (i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, i % 2 ? ti_reader : ti_writer,
						&f[i]), 0);
	for (i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	for (i = 0; i < 4; i++) {
		ck_assert_msg(!f[i].err, "flow %d: %s", i, strerror(f[i].err));
		ck_assert_msg(!f[i].bad_at, "flow %d: byte %zu differs", i, f[i].bad_at - 1);
	}
}

/* Does a connection here take immediate data (no iWARP mode)? */
static bool ti_expect_imm(void)
{
	return !ts_on_verbs() || !tu_on_iwarp();
}

/*
 * A connection picks its mode from its QP: immediate data between two
 * ferry ends over shm and tcp (the MPA exchange settles RFC 7306) and on
 * Soft-RoCE, iWARP mode on an RNIC; receives carry slots wherever the
 * mode could be iWARP's.
 */
START_TEST(test_mode_follows_qp)
{
	struct ferry_sock *sa, *sb;
	int a, b;

	ts_pair(&a, &b);
	sa = sock_get(a);
	sb = sock_get(b);
	ck_assert(sa && sb);
	ck_assert_int_eq(ferry_qp_write_imm_ok(sa->qp), ti_expect_imm());
	ck_assert_int_eq(sa->msg_send, !ti_expect_imm());
	ck_assert_int_eq(sb->msg_send, !ti_expect_imm());
	ck_assert_int_eq(sa->recv_slots, !tu_on_shm());
	ck_assert_int_eq(sb->recv_slots, !tu_on_shm());
	ts_move_checked(a, b, 300 * 1024);
	ts_move_checked(b, a, 300 * 1024);
	ferry_sock_close(a);
	ferry_sock_close(b);
}
END_TEST

/*
 * Forced iWARP mode: 8 MiB each way at once over 16 KiB rings (some
 * thousand ring halves and grants, each a WRITE and a SEND, and ten
 * thousand writes, past every wrap of the receive slots; 2 MiB on a
 * device, whose software emulation is slow: still past the wraps); then
 * an orderly end: the peer reads what was sent, then EOF.
 */
START_TEST(test_iwarp_mode_stream)
{
	struct ferry_sock *sa, *sb;
	char c = 0;
	int a, b;

	if (tu_on_shm())
		TS_SKIP("test_iwarp_mode_stream", "shm's QPs always take immediate data");
	sock_msg_force(1);
	ts_pair_opts(&a, &b, TI_RING, 0, 0);
	sock_msg_force(0);
	sa = sock_get(a);
	sb = sock_get(b);
	ck_assert(sa && sb && sa->msg_send && sb->msg_send);
	ck_assert(!sa->direct && !sb->direct);
	ti_duplex(a, b, ts_on_verbs() ? 2u << 20 : 8u << 20);
	ck_assert_int_eq(ferry_sock_send(a, "z", 1, MSG_NOSIGNAL), 1);
	ck_assert_int_eq(ferry_sock_shutdown(a, SHUT_WR), 0);
	ck_assert_int_eq(ferry_sock_recv(b, &c, 1, MSG_WAITALL), 1);
	ck_assert_int_eq(c, 'z');
	ck_assert_int_eq(ferry_sock_recv(b, &c, 1, 0), 0);
	ck_assert_int_eq(ferry_sock_send(b, "y", 1, MSG_NOSIGNAL), 1);
	ck_assert_int_eq(ferry_sock_recv(a, &c, 1, MSG_WAITALL), 1);
	ck_assert_int_eq(c, 'y');
	ferry_sock_close(a);
	ferry_sock_close(b);
}
END_TEST

/*
 * The peer plays the attacker with its own QP: a SEND that is not one
 * 4-byte word (empty, or 8 bytes) ends the connection with ECONNRESET
 * instead of being read as a message -- in either mode: a receive with
 * its slot takes both forms.
 */
static void ti_bad_send(uint32_t len, bool forced)
{
	uint8_t junk[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct ferry_sge sge = { (uintptr_t)junk, len, 0 };
	struct ferry_send_wr wr = { .sg_list = &sge, .num_sge = len ? 1 : 0,
				    .opcode = FERRY_WR_SEND, .send_flags = FERRY_SEND_INLINE },
			     *bad;
	struct ferry_sock *sa;
	char buf[16];
	int a, b;

	sock_msg_force(forced);
	ts_pair(&a, &b);
	sock_msg_force(0);
	ts_move_checked(a, b, 1000);
	sa = sock_get(a);
	ck_assert_ptr_nonnull(sa);
	pthread_mutex_lock(&sa->plock);
	ck_assert_int_eq(ferry_post_send(sa->qp, &wr, &bad), 0);
	pthread_mutex_unlock(&sa->plock);
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), 0), -1);
	ck_assert_int_eq(errno, ECONNRESET);
	ferry_sock_close(a);
	ferry_sock_close(b);
}

START_TEST(test_bad_send_resets)
{
	if (tu_on_shm())
		TS_SKIP("test_bad_send_resets", "shm's receives have no slot for a SEND");
	ti_bad_send(0, true);
	ti_bad_send(8, true);
	ti_bad_send(0, false);
}
END_TEST

Suite *sock_iwarp_suite(void)
{
	Suite *s = suite_create("sock");
	TCase *tc = tcase_create("iwarp");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_mode_follows_qp);
	tcase_add_test(tc, test_iwarp_mode_stream);
	tcase_add_test(tc, test_bad_send_resets);
	suite_add_tcase(s, tc);
	return s;
}
