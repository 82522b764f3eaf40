/*
 * check_channel.c - completion channels: an armed CQ raises one event per
 * arming, solicited-only arming ignores unsolicited successes, the channel
 * fd works with poll() and O_NONBLOCK, a blocked ferry_get_cq_event wakes
 * on a completion made by another process, and a long arm/poll/sleep
 * ping-pong between two processes never loses a wake-up.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "check_suites.h"
#include "cmtest.h"
#include "core-export.h"
#include "shm-internal.h"
#include "testutil.h"

static struct tu_end a, b;

static void ch_setup(void)
{
	struct tu_opts o = { .split_cq = true, .channel = true };

	tu_pair_open(&a, &b, &o);
}

static void ch_teardown(void)
{
	tu_pair_close(&a, &b);
}

static void ch_set_nonblock(struct ferry_comp_channel *ch)
{
	int flags = fcntl(ch->fd, F_GETFL);

	ck_assert_int_ne(flags, -1);
	ck_assert_int_eq(fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK), 0);
}

/* Is the channel fd readable within @timeout_ms? */
static bool ch_readable(struct ferry_comp_channel *ch, int timeout_ms)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	int r;

	do
		r = poll(&pfd, 1, timeout_ms);
	while (r == -1 && errno == EINTR);
	ck_assert_int_ne(r, -1);
	return r == 1 && (pfd.revents & POLLIN);
}

/* An event must come (bounded): return its CQ, acknowledged. */
static struct ferry_cq *ch_get_event(struct ferry_comp_channel *ch, void *expect_ctx)
{
	struct ferry_cq *cq = NULL;
	void *ctx = NULL;

	ck_assert_msg(ch_readable(ch, TU_WAIT_MS), "no event within %d ms",
		      TU_WAIT_MS);
	ck_assert_int_eq(ferry_get_cq_event(ch, &cq, &ctx), 0);
	ck_assert_ptr_nonnull(cq);
	ck_assert_ptr_eq(ctx, expect_ctx);
	ck_assert_ptr_eq(cq->cq_context, ctx);
	ferry_ack_cq_events(cq, 1);
	return cq;
}

static void ch_expect_no_event(struct ferry_comp_channel *ch)
{
	struct ferry_cq *cq;
	void *ctx;

	ck_assert(!ch_readable(ch, 20));
	ch_set_nonblock(ch);
	errno = 0;
	ck_assert_int_eq(ferry_get_cq_event(ch, &cq, &ctx), -1);
	ck_assert_int_eq(errno, EAGAIN);
}

static void ch_send(uint64_t wr_id, unsigned int flags, unsigned int seed)
{
	tu_fill(a.buf, 64, seed);
	ck_assert_int_eq(tu_post_send1(a.qp, wr_id, FERRY_WR_SEND, flags, a.buf,
				       64, a.mr->lkey, 0, 0), 0);
}

static void ch_expect_recv(uint64_t wr_id, unsigned int seed)
{
	struct ferry_wc wc;

	tu_poll1(b.recv_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.wr_id, wr_id);
	ck_assert(tu_check(b.buf + 1024 * (wr_id % 16), 64, seed));
}

static void ch_post_recvs(int n)
{
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(tu_post_recv1(b.qp, (uint64_t)i,
					       b.buf + 1024 * (i % 16), 1024,
					       b.mr->lkey), 0);
}

START_TEST(test_event_after_arm)
{
	struct ferry_cq *cq = NULL;
	void *ctx = NULL;

	ch_post_recvs(1);
	ck_assert_int_eq(ferry_req_notify_cq(b.recv_cq, 0), 0);
	ch_send(1, 0, 5);
	/* blocking wait; the Check timeout catches a hang */
	ck_assert_int_eq(ferry_get_cq_event(b.channel, &cq, &ctx), 0);
	ck_assert_ptr_eq(cq, b.recv_cq);
	ck_assert_ptr_eq(ctx, &b);
	ferry_ack_cq_events(cq, 1);
	ch_expect_recv(0, 5);
}
END_TEST

START_TEST(test_no_event_unarmed)
{
	ch_post_recvs(1);
	ch_send(1, 0, 6);
	ch_expect_recv(0, 6);
	ch_expect_no_event(b.channel);
}
END_TEST

START_TEST(test_one_event_per_arm)
{
	ch_post_recvs(3);
	ck_assert_int_eq(ferry_req_notify_cq(b.recv_cq, 0), 0);
	ch_send(1, 0, 7);
	ck_assert_ptr_eq(ch_get_event(b.channel, &b), b.recv_cq);
	ch_expect_recv(0, 7);
	ch_send(2, 0, 8);
	ch_expect_recv(1, 8);
	ch_expect_no_event(b.channel);	/* not re-armed */

	/* re-armed: the next one raises an event again */
	ck_assert_int_eq(ferry_req_notify_cq(b.recv_cq, 0), 0);
	ch_send(3, 0, 9);
	ck_assert_ptr_eq(ch_get_event(b.channel, &b), b.recv_cq);
	ch_expect_recv(2, 9);
}
END_TEST

START_TEST(test_solicited_only)
{
	ch_post_recvs(2);
	ck_assert_int_eq(ferry_req_notify_cq(b.recv_cq, 1), 0);
	ch_send(1, 0, 10);
	ch_expect_recv(0, 10);
	ck_assert(!ch_readable(b.channel, 20));
	/* still armed: a solicited SEND wakes it */
	ch_send(2, FERRY_SEND_SOLICITED, 11);
	ck_assert_ptr_eq(ch_get_event(b.channel, &b), b.recv_cq);
	ch_expect_recv(1, 11);
}
END_TEST

START_TEST(test_solicited_error_wakes)
{
	struct ferry_qp_attr attr;
	struct ferry_wc wc;

	/* an error completion counts as solicited */
	ch_post_recvs(1);
	ck_assert_int_eq(ferry_req_notify_cq(b.recv_cq, 1), 0);
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_ERR;
	ck_assert_int_eq(ferry_modify_qp(b.qp, &attr, FERRY_QP_STATE), 0);
	ck_assert_ptr_eq(ch_get_event(b.channel, &b), b.recv_cq);
	tu_poll1(b.recv_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_WR_FLUSH_ERR);
}
END_TEST

START_TEST(test_nonblocking_eagain)
{
	struct ferry_cq *cq;
	void *ctx;

	ch_set_nonblock(b.channel);
	ck_assert_int_eq(ferry_req_notify_cq(b.recv_cq, 0), 0);
	errno = 0;
	ck_assert_int_eq(ferry_get_cq_event(b.channel, &cq, &ctx), -1);
	ck_assert_int_eq(errno, EAGAIN);

	/* non-blocking still returns an event that is there */
	ch_post_recvs(1);
	ch_send(1, 0, 12);
	ck_assert(ch_readable(b.channel, TU_WAIT_MS));
	ck_assert_int_eq(ferry_get_cq_event(b.channel, &cq, &ctx), 0);
	ck_assert_ptr_eq(cq, b.recv_cq);
	ferry_ack_cq_events(cq, 1);
	errno = 0;
	ck_assert_int_eq(ferry_get_cq_event(b.channel, &cq, &ctx), -1);
	ck_assert_int_eq(errno, EAGAIN);
	ch_expect_recv(0, 12);
}
END_TEST

START_TEST(test_poll_fd)
{
	ck_assert(!ch_readable(b.channel, 0));
	ch_post_recvs(1);
	ck_assert_int_eq(ferry_req_notify_cq(b.recv_cq, 0), 0);
	ck_assert(!ch_readable(b.channel, 0));
	ch_send(1, 0, 13);
	ck_assert(ch_readable(b.channel, TU_WAIT_MS));
	ck_assert(ch_readable(b.channel, 0));	/* level: stays until read */
	ck_assert_ptr_eq(ch_get_event(b.channel, &b), b.recv_cq);
	ck_assert(!ch_readable(b.channel, 0));
	ch_expect_recv(0, 13);
}
END_TEST

START_TEST(test_two_cqs_one_channel)
{
	struct ferry_wc wc;

	/* a's send CQ and receive CQ share a's channel */
	ck_assert_ptr_eq(a.send_cq->channel, a.channel);
	ck_assert_ptr_eq(a.recv_cq->channel, a.channel);
	ck_assert_int_eq(tu_post_recv1(a.qp, 1, a.buf + 4096, 64, a.mr->lkey), 0);
	ch_post_recvs(1);
	ck_assert_int_eq(ferry_req_notify_cq(a.send_cq, 0), 0);
	ck_assert_int_eq(ferry_req_notify_cq(a.recv_cq, 0), 0);
	ch_send(7, 0, 14);
	ck_assert_ptr_eq(ch_get_event(a.channel, &a), a.send_cq);
	tu_poll1(a.send_cq, &wc);
	ck_assert_uint_eq(wc.wr_id, 7);
	ck_assert(!ch_readable(a.channel, 20));	/* the recv CQ is quiet */

	ck_assert_int_eq(tu_post_send1(b.qp, 8, FERRY_WR_SEND, 0, b.buf, 16,
				       b.mr->lkey, 0, 0), 0);
	ck_assert_ptr_eq(ch_get_event(a.channel, &a), a.recv_cq);
	tu_poll1(a.recv_cq, &wc);
	ck_assert_uint_eq(wc.wr_id, 1);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
}
END_TEST

/*
 * A single-CQ channel (the stream sockets'): on shm its fd is its CQ's
 * wake socket, the one a peer signals by name, so channel and CQ cost one
 * descriptor; a second CQ is refused; events come and go as on any
 * channel.
 */
START_TEST(test_single_channel)
{
	struct ferry_context *ctx = b.qp->context;
	struct ferry_comp_channel *ch;
	struct ferry_cq *cq, *cq2, *got = NULL;
	int fds_before, marker;
	void *gctx = NULL;

	if (tu_on_shm())	/* the process's wake sender, made once */
		shm_wake(&(struct shm_wake_name){ .len = 2 });
	fds_before = cmt_count_fds();
	ch = ferry_create_comp_channel_single(ctx);
	ck_assert_ptr_nonnull(ch);
	cq = ferry_create_cq(ctx, 16, &marker, ch, 0);
	ck_assert_ptr_nonnull(cq);
	if (tu_on_shm()) {
		ck_assert_int_eq(cmt_count_fds(), fds_before + 1);
		ck_assert_int_eq(to_scq(cq)->efd, ch->fd);
		errno = 0;
		ck_assert_ptr_null(ferry_create_cq(ctx, 16, NULL, ch, 0));
		ck_assert_int_eq(errno, EBUSY);
		/* what a peer does to signal the CQ */
		ck_assert_int_eq(ferry_req_notify_cq(cq, 0), 0);
		shm_wake(&to_scq(cq)->wake);
	} else {
		cq2 = ferry_create_cq(ctx, 16, NULL, ch, 0);
		ck_assert_ptr_nonnull(cq2);
		ck_assert_int_eq(ferry_destroy_cq(cq2), 0);
		printf("SKIP test_single_channel (shm parts) on %s\n", tu_transport());
		ck_assert_int_eq(ferry_destroy_cq(cq), 0);
		ck_assert_int_eq(ferry_destroy_comp_channel(ch), 0);
		return;
	}
	ck_assert(ch_readable(ch, TU_WAIT_MS));
	ck_assert_int_eq(ferry_get_cq_event(ch, &got, &gctx), 0);
	ck_assert_ptr_eq(got, cq);
	ck_assert_ptr_eq(gctx, &marker);
	ferry_ack_cq_events(cq, 1);
	ck_assert(!ch_readable(ch, 0));
	errno = 0;
	ck_assert_int_eq(ferry_get_cq_event(ch, &got, &gctx), -1);
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert_int_eq(ferry_destroy_comp_channel(ch), -1);	/* EBUSY: the CQ */
	ck_assert_int_eq(ferry_destroy_cq(cq), 0);
	ck_assert_int_eq(ferry_destroy_comp_channel(ch), 0);
	ck_assert_int_eq(cmt_count_fds(), fds_before);
}
END_TEST

/*
 * Wake-ups by name (shm): they reach a CQ's socket from this process as
 * from any other, and still do when the process's sender has no room
 * left, its buffer full of wake-ups other sockets have not read (each
 * holds part of it until it is read): the send goes again from a socket
 * of its own.
 */
#define TC_WAKE_RECEIVERS 64

START_TEST(test_wake_sender_full)
{
	struct shm_wake_name names[TC_WAKE_RECEIVERS], last;
	int fds[TC_WAKE_RECEIVERS], sender, fd, i, n = 0, small = 1, was = 0;
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	socklen_t len = sizeof(was);
	char byte = 'x';

	if (!tu_on_shm()) {
		printf("SKIP test_wake_sender_full on %s: shm's wake-ups\n", tu_transport());
		return;
	}
	sender = shm_wake_test_sender();
	ck_assert_int_ge(sender, 0);
	/* As small as the kernel lets it be: a few wake-ups fill it. */
	ck_assert_int_eq(getsockopt(sender, SOL_SOCKET, SO_SNDBUF, &was, &len), 0);
	ck_assert_int_eq(setsockopt(sender, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	/* Unread wake-ups, each at its own socket, until the sender is full. */
	for (i = 0; i < TC_WAKE_RECEIVERS; i++) {
		fds[i] = shm_wake_socket(&names[i]);
		ck_assert_int_ge(fds[i], 0);
		memcpy(un.sun_path, names[i].bytes, names[i].len);
		if (sendto(sender, &byte, 1, MSG_DONTWAIT, (struct sockaddr *)&un,
			   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + names[i].len)) < 0) {
			ck_assert_int_eq(errno, EAGAIN);
			break;
		}
		n++;
	}
	ck_assert_msg(i < TC_WAKE_RECEIVERS, "the sender never filled up (%d wake-ups)", n);
	/* A fresh socket, nothing queued at it: its wake-up arrives all the same. */
	fd = shm_wake_socket(&last);
	ck_assert_int_ge(fd, 0);
	shm_wake(&last);
	ck_assert_int_eq(shm_wake_drain(fd), 1);
	ck_assert_int_eq(shm_wake_drain(fd), 0);
	close(fd);
	for (i = 0; i <= n && i < TC_WAKE_RECEIVERS; i++)
		close(fds[i]);
	/* The sender as it was (the kernel reports twice what was asked). */
	was /= 2;
	if (setsockopt(sender, SOL_SOCKET, SO_SNDBUFFORCE, &was, sizeof(was)) < 0)
		setsockopt(sender, SOL_SOCKET, SO_SNDBUF, &was, sizeof(was));
}
END_TEST

/*
 * A wake socket given back (a stream socket's channel, once its connection
 * took over) serves the next CQ: the same socket and name, reachable.  A
 * child of fork never gets its parent's spares (both would hand the one
 * socket to a CQ of their own, each draining the other's wake-ups).
 */
static bool ch_name_eq(const struct shm_wake_name *x, const struct shm_wake_name *y)
{
	return x->len == y->len && memcmp(x->bytes, y->bytes, x->len) == 0;
}

START_TEST(test_wake_spares)
{
	struct shm_wake_name first, again, mine;
	int fd, status;
	pid_t pid;

	if (!tu_on_shm()) {
		printf("SKIP test_wake_spares on %s: shm's wake sockets\n", tu_transport());
		return;
	}
	fd = shm_wake_socket(&first);
	ck_assert_int_ge(fd, 0);
	shm_wake_socket_put(fd, &first);
	ck_assert_int_eq(shm_wake_socket(&again), fd);
	ck_assert(ch_name_eq(&first, &again));
	shm_wake(&again);
	ck_assert_int_eq(shm_wake_drain(fd), 1);
	shm_wake_socket_put(fd, &again);

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int cfd = shm_wake_socket(&mine);

		_exit(cfd < 0 ? 2 : ch_name_eq(&mine, &first) ? 1 : 0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the child got its parent's spare wake socket (status %d)", status);
	/* The parent's spare is still its own. */
	ck_assert_int_eq(shm_wake_socket(&mine), fd);
	ck_assert(ch_name_eq(&mine, &first));
	close(fd);
}
END_TEST

START_TEST(test_ack_many)
{
	struct ferry_cq *cq;
	void *ctx;
	int events = 0;

	/* several events acknowledged at once, then the CQ can go */
	ch_post_recvs(5);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(ferry_req_notify_cq(b.recv_cq, 0), 0);
		ch_send((uint64_t)i + 1, 0, 20 + (unsigned)i);
		ck_assert(ch_readable(b.channel, TU_WAIT_MS));
		ck_assert_int_eq(ferry_get_cq_event(b.channel, &cq, &ctx), 0);
		ck_assert_ptr_eq(cq, b.recv_cq);
		events++;
		ch_expect_recv((uint64_t)i, 20 + (unsigned)i);
	}
	ferry_ack_cq_events(b.recv_cq, (unsigned int)events);
}
END_TEST

/* --- across processes --- */

/*
 * Wait for one receive completion with the arm / re-poll / sleep pattern.
 * Returns 0, or -1 on a failed call.  No Check calls: children use it.
 */
static int ch_wait_recv(struct tu_end *e, struct ferry_wc *wc)
{
	bool armed = false;

	for (;;) {
		struct ferry_cq *cq;
		void *ctx;
		int n = ferry_poll_cq(e->recv_cq, 1, wc);

		if (n < 0)
			return -1;
		if (n == 1)
			return 0;
		if (!armed) {
			/* arm, then poll again before sleeping */
			if (ferry_req_notify_cq(e->recv_cq, 0))
				return -1;
			armed = true;
			continue;
		}
		if (ferry_get_cq_event(e->channel, &cq, &ctx) || cq != e->recv_cq)
			return -1;
		ferry_ack_cq_events(cq, 1);
		armed = false;
	}
}

static void ch_exchange(int sock, struct tu_end *e, struct tu_remote *peer)
{
	struct tu_remote mine = { (uintptr_t)e->buf, e->len, e->mr->rkey,
				  e->qp->qp_num, 0, 0, 0, 0 };

	TU_CHILD_CHECK(tu_msg_send(sock, &mine, sizeof(mine)) == 0);
	TU_CHILD_CHECK(tu_msg_recv(sock, peer, sizeof(*peer), TU_WAIT_MS) == 0);
}

static int ch_late_sender_child(int sock, int ctl, void *arg)
{
	struct tu_end e;
	struct tu_remote peer;
	struct ferry_wc wc;
	uint32_t go;

	tu_child_end_open(&e, NULL);
	ch_exchange(sock, &e, &peer);
	TU_CHILD_CHECK(ferry_qp_connect_sock(e.qp, sock, TU_QP_ACCESS_ALL) == 0);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &go, TU_WAIT_MS) == 0);
	tu_sleep_ms(100);	/* let the parent block first (not required) */
	tu_fill(e.buf, 256, 33);
	TU_CHILD_CHECK(tu_post_send1(e.qp, 1, FERRY_WR_SEND, 0, e.buf, 256,
				     e.mr->lkey, 0, 0) == 0);
	TU_CHILD_CHECK(tu_child_poll(e.send_cq, &wc, 1, TU_WAIT_MS) == 1);
	TU_CHILD_CHECK(wc.status == FERRY_WC_SUCCESS);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &go, TU_WAIT_MS) == 0);
	tu_child_end_close(&e);
	(void)arg;
	return 0;
}

START_TEST(test_cross_process_wakeup)
{
	struct tu_opts o = { .channel = true, .split_cq = true };
	struct tu_end p;
	struct tu_remote peer;
	struct ferry_cq *cq = NULL;
	struct ferry_wc wc;
	void *ctx = NULL;
	int sock, ctl;
	pid_t pid;

	pid = tu_fork(ch_late_sender_child, NULL, &sock, &ctl);
	tu_end_open(&p, &o);
	ch_exchange(sock, &p, &peer);
	ck_assert_int_eq(ferry_qp_connect_sock(p.qp, sock, TU_QP_ACCESS_ALL), 0);
	ck_assert_int_eq(tu_post_recv1(p.qp, 5, p.buf, 1024, p.mr->lkey), 0);
	close(sock);
	ck_assert_int_eq(ferry_req_notify_cq(p.recv_cq, 0), 0);
	ck_assert_int_eq(ferry_poll_cq(p.recv_cq, 1, &wc), 0);
	ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
	alarm(20);
	ck_assert_int_eq(ferry_get_cq_event(p.channel, &cq, &ctx), 0);
	alarm(0);
	ck_assert_ptr_eq(cq, p.recv_cq);
	ck_assert_ptr_eq(ctx, &p);
	ferry_ack_cq_events(cq, 1);
	tu_poll1(p.recv_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.wr_id, 5);
	ck_assert_uint_eq(wc.byte_len, 256);
	ck_assert(tu_check(p.buf, 256, 33));
	ck_assert_int_eq(tu_send_u32(ctl, 2), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	close(ctl);
	tu_end_close(&p);
}
END_TEST

enum { PP_ROUNDS = 20000, PP_RECVS = 16 };

/*
 * Rounds of the ping-pong.  Every round of a device provider crosses the
 * kernel; under Soft-RoCE in an emulated VM one takes about a millisecond,
 * so it runs fewer: still thousands of sleeps that a lost wake-up hangs.
 */
static uint32_t pp_rounds(void)
{
	return tu_on_shm() ? PP_ROUNDS : PP_ROUNDS / 10;
}

/* Post receive slot @i of the ping-pong ring. */
static int pp_post_recv(struct tu_end *e, uint64_t i)
{
	return tu_post_recv1(e->qp, i, e->buf + 64 * (i % PP_RECVS), 64,
			     e->mr->lkey);
}

/*
 * One side of the ping-pong: @first sends first.  Each message carries its
 * round number; each side checks it and answers with the next.  Returns 0
 * or the (nonzero) line of the first failure.
 */
static int pp_run(struct tu_end *e, bool first)
{
	uint32_t *out = (uint32_t *)(e->buf + 4096);
	struct ferry_wc wc, swc;
	uint64_t posted = 0;

	for (; posted < PP_RECVS; posted++)
		if (pp_post_recv(e, posted))
			return __LINE__;
	for (uint32_t round = 0, rounds = pp_rounds(); round < rounds; round++) {
		bool mine = (round % 2 == 0) == first;
		uint32_t got;

		if (mine) {
			*out = round;
			if (tu_post_send1(e->qp, round, FERRY_WR_SEND, 0, out, 4,
					  e->mr->lkey, 0, 0))
				return __LINE__;
			continue;
		}
		if (ch_wait_recv(e, &wc))
			return __LINE__;
		if (wc.status != FERRY_WC_SUCCESS || wc.byte_len != 4)
			return __LINE__;
		memcpy(&got, e->buf + 64 * (wc.wr_id % PP_RECVS), 4);
		if (got != round)
			return __LINE__;
		if (pp_post_recv(e, posted++))
			return __LINE__;
		/* drain send completions without blocking */
		while (ferry_poll_cq(e->send_cq, 1, &swc) == 1)
			if (swc.status != FERRY_WC_SUCCESS)
				return __LINE__;
	}
	return 0;
}

static int ch_pingpong_child(int sock, int ctl, void *arg)
{
	struct tu_opts o = { .channel = true, .split_cq = true, .cqe = 1024,
			     .max_send_wr = 256 };
	struct tu_end e;
	struct tu_remote peer;
	int line;

	tu_child_end_open(&e, &o);
	ch_exchange(sock, &e, &peer);
	TU_CHILD_CHECK(ferry_qp_connect_sock(e.qp, sock, TU_QP_ACCESS_ALL) == 0);
	line = pp_run(&e, false);
	if (line)
		fprintf(stderr, "ping-pong child failed at line %d\n", line);
	TU_CHILD_CHECK(line == 0);
	{
		uint32_t bye;

		TU_CHILD_CHECK(tu_recv_u32(ctl, &bye, TU_WAIT_MS) == 0);
	}
	tu_child_end_close(&e);
	(void)arg;
	return 0;
}

START_TEST(test_pingpong_no_lost_wakeup)
{
	struct tu_opts o = { .channel = true, .split_cq = true, .cqe = 1024,
			     .max_send_wr = 256 };
	struct tu_end p;
	struct tu_remote peer;
	int sock, ctl, line;
	pid_t pid;

	pid = tu_fork(ch_pingpong_child, NULL, &sock, &ctl);
	tu_end_open(&p, &o);
	ch_exchange(sock, &p, &peer);
	ck_assert_int_eq(ferry_qp_connect_sock(p.qp, sock, TU_QP_ACCESS_ALL), 0);
	close(sock);
	alarm(50);	/* a lost wake-up hangs: fail instead */
	line = pp_run(&p, true);
	alarm(0);
	ck_assert_msg(line == 0, "ping-pong failed at line %d", line);
	ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	close(ctl);
	tu_end_close(&p);
}
END_TEST

Suite *channel_suite(void)
{
	Suite *s = suite_create("channel");
	TCase *tc;

	tc = tcase_create("events");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_checked_fixture(tc, ch_setup, ch_teardown);
	tcase_add_test(tc, test_event_after_arm);
	tcase_add_test(tc, test_no_event_unarmed);
	tcase_add_test(tc, test_one_event_per_arm);
	tcase_add_test(tc, test_solicited_only);
	tcase_add_test(tc, test_solicited_error_wakes);
	tcase_add_test(tc, test_nonblocking_eagain);
	tcase_add_test(tc, test_poll_fd);
	tcase_add_test(tc, test_two_cqs_one_channel);
	tcase_add_test(tc, test_single_channel);
	tcase_add_test(tc, test_wake_sender_full);
	tcase_add_test(tc, test_wake_spares);
	tcase_add_test(tc, test_ack_many);
	suite_add_tcase(s, tc);

	tc = tcase_create("cross_process");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cross_process_wakeup);
	tcase_add_test(tc, test_pingpong_no_lost_wakeup);
	suite_add_tcase(s, tc);
	return s;
}
