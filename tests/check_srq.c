/*
 * check_srq.c - shared receive queues and asynchronous events: create,
 * query, modify and destroy and their errors; QPs of two peer processes
 * draining one SRQ; the limit event, once per arm; LAST_WQE_REACHED and
 * the SRQ getting back what a QP in ERR held; the async fd; RNR when the
 * SRQ is empty; and (shm) a peer forging deliveries that must not make us
 * consume receives it was never given.  Provider-generic but the last:
 * FERRY_TRANSPORT=verbs runs it on a device (tests/rxe/check-rxe.sh).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <check.h>

#include "check_suites.h"
#include "testutil.h"
#include "core-export.h"
#include "shm-internal.h"

enum {
	S_SLOT = 256,		/* bytes per receive buffer */
	S_MAX_WR = 32,
	S_MSGS = 150,		/* messages each peer process sends */
	S_QUIET_MS = 100,	/* how long "no event" is looked for */
};

/* --- helpers --- */

/* How long a child may take to finish: much longer under valgrind, whose
 * children check for leaks as they exit. */
static int srq_child_ms(void)
{
	return tu_under_valgrind() ? 6 * TU_WAIT_MS : TU_WAIT_MS;
}

/* A QP on @srq, using @e's PD and CQs. */
static struct ferry_qp *srq_qp_create(struct tu_end *e, struct ferry_srq *srq)
{
	struct ferry_qp_init_attr init;

	memset(&init, 0, sizeof(init));
	init.send_cq = e->send_cq;
	init.recv_cq = e->recv_cq;
	init.srq = srq;
	init.cap.max_send_wr = 16;
	init.cap.max_send_sge = 1;
	init.qp_type = FERRY_QPT_RC;
	init.sq_sig_all = 1;
	return ferry_create_qp(e->pd, &init);
}

static struct ferry_srq *srq_create(struct ferry_pd *pd, uint32_t max_wr, uint32_t max_sge)
{
	struct ferry_srq_init_attr ia = { .srq_context = pd, .attr = { max_wr, max_sge, 0 } };

	return ferry_create_srq(pd, &ia);
}

/* Post receive @slot of @e's buffer (wr_id = slot) to @srq. */
static void srq_post(struct tu_end *e, struct ferry_srq *srq, uint32_t slot)
{
	struct ferry_sge sg = { (uintptr_t)e->buf + (size_t)slot * S_SLOT, S_SLOT, e->mr->lkey };
	struct ferry_recv_wr wr = { .wr_id = slot, .sg_list = &sg, .num_sge = 1 };
	struct ferry_recv_wr *bad = NULL;

	ck_assert_int_eq(ferry_post_srq_recv(srq, &wr, &bad), 0);
}

static void srq_arm(struct ferry_srq *srq, uint32_t limit)
{
	struct ferry_srq_attr a = { .srq_limit = limit };

	ck_assert_int_eq(ferry_modify_srq(srq, &a, FERRY_SRQ_LIMIT), 0);
}

static bool srq_fd_ready(struct ferry_context *ctx, int timeout_ms)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };

	return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

/* The next event is @type about @element (a QP or SRQ), within TU_WAIT_MS. */
static void srq_expect_event(struct ferry_context *ctx, enum ferry_event_type type,
			     const void *element)
{
	struct ferry_async_event ev;

	ck_assert_msg(srq_fd_ready(ctx, TU_WAIT_MS), "no %s event", ferry_event_type_str(type));
	ck_assert_int_eq(ferry_get_async_event(ctx, &ev), 0);
	ck_assert_msg(ev.event_type == type, "event %s, expected %s",
		      ferry_event_type_str(ev.event_type), ferry_event_type_str(type));
	ck_assert_ptr_eq(type == FERRY_EVENT_SRQ_LIMIT_REACHED ? (void *)ev.element.srq :
			 (void *)ev.element.qp, element);
	ferry_ack_async_event(&ev);
}

/* Send @n messages of @len bytes on @e's QP and see them complete. */
static void srq_send(struct tu_end *e, int n, uint32_t len)
{
	struct ferry_wc wc;

	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(tu_post_send1(e->qp, (uint64_t)i, FERRY_WR_SEND, 0, e->buf, len,
					       e->mr->lkey, 0, 0), 0);
		tu_poll1(e->send_cq, &wc);
		ck_assert_msg(wc.status == FERRY_WC_SUCCESS, "send: %s",
			      ferry_wc_status_str(wc.status));
	}
}

/* Take @n receive completions of QP @qpn from @cq; their wr_ids in @ids. */
static void srq_recv(struct ferry_cq *cq, int n, uint32_t qpn, uint64_t *ids)
{
	struct ferry_wc wc;

	for (int i = 0; i < n; i++) {
		tu_poll1(cq, &wc);
		ck_assert_msg(wc.status == FERRY_WC_SUCCESS, "recv: %s",
			      ferry_wc_status_str(wc.status));
		ck_assert(wc.opcode & FERRY_WC_RECV);
		ck_assert_uint_eq(wc.qp_num, qpn);
		if (ids)
			ids[i] = wc.wr_id;
	}
}

/* --- one process: a receiver on an SRQ and a sender --- */

static struct tu_end r, s;
static struct ferry_srq *srq;

static void srq_pair_open(void)
{
	struct tu_opts o = { .split_cq = true, .buf_len = S_MAX_WR * S_SLOT };

	tu_end_open(&r, &o);
	tu_end_open(&s, &o);
	srq = srq_create(r.pd, S_MAX_WR, 1);
	ck_assert_ptr_nonnull(srq);
	ck_assert_int_eq(ferry_destroy_qp(r.qp), 0);
	r.qp = srq_qp_create(&r, srq);
	ck_assert_ptr_nonnull(r.qp);
	tu_fill(s.buf, s.len, 3);
}

static void srq_setup(void)
{
	srq_pair_open();
	tu_pair_connect(&r, &s, TU_QP_ACCESS_ALL);
}

static void srq_teardown(void)
{
	if (r.qp)
		ck_assert_int_eq(ferry_destroy_qp(r.qp), 0);
	r.qp = NULL;
	ck_assert_int_eq(ferry_destroy_srq(srq), 0);
	tu_end_close(&r);
	tu_end_close(&s);
}

START_TEST(test_srq_objects)
{
	struct ferry_srq_attr a;
	struct ferry_qp_attr qa;
	struct ferry_qp_init_attr qi;
	struct ferry_recv_wr *bad = NULL;
	struct ferry_sge sg = { (uintptr_t)r.buf, S_SLOT, r.mr->lkey };
	struct ferry_recv_wr wr = { .wr_id = 1, .sg_list = &sg, .num_sge = 1 };

	ck_assert_ptr_eq(srq->srq_context, r.pd);
	ck_assert_int_eq(ferry_query_srq(srq, &a), 0);
	ck_assert_uint_ge(a.max_wr, S_MAX_WR);
	ck_assert_uint_ge(a.max_sge, 1);
	ck_assert_uint_eq(a.srq_limit, 0);

	a.srq_limit = a.max_wr + 1;	/* a limit above what it can hold */
	errno = 0;
	ck_assert_int_eq(ferry_modify_srq(srq, &a, FERRY_SRQ_LIMIT), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_modify_srq(srq, &a, 1 << 7), -1);
	ck_assert_int_eq(errno, EINVAL);
	srq_arm(srq, 5);
	ck_assert_int_eq(ferry_query_srq(srq, &a), 0);
	ck_assert_uint_eq(a.srq_limit, 5);

	/* Resized where the device can: up, and not below what is posted. */
	{
		struct ferry_device_attr dev;

		ck_assert_int_eq(ferry_query_device(r.ctx, &dev), 0);
		if (dev.device_cap_flags & FERRY_DEVICE_SRQ_RESIZE) {
			for (uint32_t i = 0; i < 3; i++)
				srq_post(&r, srq, i);
			a.max_wr = 2 * S_MAX_WR;
			ck_assert_int_eq(ferry_modify_srq(srq, &a, FERRY_SRQ_MAX_WR), 0);
			ck_assert_int_eq(ferry_query_srq(srq, &a), 0);
			ck_assert_uint_ge(a.max_wr, 2 * S_MAX_WR);
			ck_assert_uint_eq(a.srq_limit, 5);
			a.max_wr = 2;
			errno = 0;
			ck_assert_int_eq(ferry_modify_srq(srq, &a, FERRY_SRQ_MAX_WR), -1);
			ck_assert_int_eq(errno, EINVAL);
		}
	}

	/* Its QP has no receive queue of its own, and says whose it uses. */
	errno = 0;
	ck_assert_int_eq(ferry_post_recv(r.qp, &wr, &bad), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_eq(bad, &wr);
	ck_assert_int_eq(ferry_query_qp(r.qp, &qa, 0, &qi), 0);
	ck_assert_ptr_eq(qi.srq, srq);
	ck_assert_ptr_eq(r.qp->srq, srq);

	/* Busy while a QP is on it. */
	errno = 0;
	ck_assert_int_eq(ferry_destroy_srq(srq), -1);
	ck_assert_int_eq(errno, EBUSY);
	ck_assert_int_eq(ferry_destroy_qp(r.qp), 0);
	r.qp = NULL;
	ck_assert_int_eq(srq->qp_refs, 0);
}
END_TEST

START_TEST(test_srq_create_errors)
{
	struct ferry_srq_init_attr ia = { .attr = { 0, 1, 0 } };
	struct ferry_device_attr dev;
	struct ferry_srq *small;
	struct ferry_recv_wr wr[3], *bad = NULL;
	struct ferry_sge sg = { (uintptr_t)r.buf, S_SLOT, r.mr->lkey };

	errno = 0;
	ck_assert_ptr_null(ferry_create_srq(r.pd, &ia));	/* max_wr 0 */
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(ferry_create_srq(NULL, &ia));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_query_device(r.ctx, &dev), 0);
	ck_assert_int_gt(dev.max_srq, 0);
	ck_assert_int_gt(dev.max_srq_wr, 0);
	ia.attr.max_wr = (uint32_t)dev.max_srq_wr + 1;
	errno = 0;
	ck_assert_ptr_null(ferry_create_srq(r.pd, &ia));
	ck_assert_int_eq(errno, EINVAL);

	/* Full: the WR past max_wr is refused, and named. */
	small = srq_create(r.pd, 2, 1);
	ck_assert_ptr_nonnull(small);
	ck_assert_int_eq(ferry_query_srq(small, &ia.attr), 0);
	for (int i = 0; i < 3; i++)
		wr[i] = (struct ferry_recv_wr){ .wr_id = (uint64_t)i, .sg_list = &sg, .num_sge = 1,
						.next = i < 2 ? &wr[i + 1] : NULL };
	if (ia.attr.max_wr == 2) {
		errno = 0;
		ck_assert_int_eq(ferry_post_srq_recv(small, wr, &bad), -1);
		ck_assert_int_eq(errno, ENOMEM);
		ck_assert_ptr_eq(bad, &wr[2]);
	}
	/* shm checks the lkey at post time (a device, when it uses it). */
	if (tu_on_shm()) {
		sg.lkey ^= 0x5a5a00;
		wr[0].next = NULL;
		errno = 0;
		ck_assert_int_eq(ferry_post_srq_recv(srq, wr, &bad), -1);
		ck_assert_int_eq(errno, EINVAL);
		ck_assert_ptr_eq(bad, &wr[0]);
	}
	ck_assert_int_eq(ferry_destroy_srq(small), 0);
}
END_TEST

START_TEST(test_srq_receive)
{
	uint64_t ids[4];

	for (uint32_t i = 0; i < 4; i++)
		srq_post(&r, srq, i);
	srq_send(&s, 4, 100);
	srq_recv(r.recv_cq, 4, r.qp->qp_num, ids);
	for (int i = 0; i < 4; i++) {
		ck_assert_uint_eq(ids[i], (uint64_t)i);	/* in the order posted */
		ck_assert(tu_check(r.buf + i * S_SLOT, 100, 3));
	}
	tu_assert_cq_empty(r.recv_cq);
}
END_TEST

START_TEST(test_srq_limit_once_per_arm)
{
	for (uint32_t i = 0; i < 8; i++)
		srq_post(&r, srq, i);
	srq_arm(srq, 4);
	/* 8 -> 4 posted: not below the limit yet. */
	srq_send(&s, 4, 64);
	srq_recv(r.recv_cq, 4, r.qp->qp_num, NULL);
	ck_assert(!srq_fd_ready(r.ctx, S_QUIET_MS));
	/* 3 < 4: the event, once, and the limit is 0 again. */
	srq_send(&s, 1, 64);
	srq_recv(r.recv_cq, 1, r.qp->qp_num, NULL);
	srq_expect_event(r.ctx, FERRY_EVENT_SRQ_LIMIT_REACHED, srq);
	{
		struct ferry_srq_attr a;

		ck_assert_int_eq(ferry_query_srq(srq, &a), 0);
		ck_assert_uint_eq(a.srq_limit, 0);
	}
	srq_send(&s, 2, 64);
	srq_recv(r.recv_cq, 2, r.qp->qp_num, NULL);
	ck_assert(!srq_fd_ready(r.ctx, S_QUIET_MS));
	/* Armed again: 1 + 3 = 4 posted, limit 3: the second receive fires it. */
	for (uint32_t i = 8; i < 11; i++)
		srq_post(&r, srq, i);
	srq_arm(srq, 3);
	srq_send(&s, 1, 64);
	srq_recv(r.recv_cq, 1, r.qp->qp_num, NULL);
	ck_assert(!srq_fd_ready(r.ctx, S_QUIET_MS));
	srq_send(&s, 1, 64);
	srq_recv(r.recv_cq, 1, r.qp->qp_num, NULL);
	srq_expect_event(r.ctx, FERRY_EVENT_SRQ_LIMIT_REACHED, srq);
	ck_assert(!srq_fd_ready(r.ctx, 0));
}
END_TEST

START_TEST(test_srq_async_fd_nonblocking)
{
	struct ferry_async_event ev;
	int fl = fcntl(r.ctx->async_fd, F_GETFL);

	ck_assert_int_ge(fl, 0);
	ck_assert_int_eq(fl & O_NONBLOCK, 0);	/* blocking, as ibverbs' */
	ck_assert_int_eq(fcntl(r.ctx->async_fd, F_SETFL, fl | O_NONBLOCK), 0);
	errno = 0;
	ck_assert_int_eq(ferry_get_async_event(r.ctx, &ev), -1);
	ck_assert_int_eq(errno, EAGAIN);
	srq_post(&r, srq, 0);
	srq_post(&r, srq, 1);
	srq_arm(srq, 2);
	srq_send(&s, 1, 32);
	srq_recv(r.recv_cq, 1, r.qp->qp_num, NULL);
	ck_assert(srq_fd_ready(r.ctx, TU_WAIT_MS));
	ck_assert_int_eq(ferry_get_async_event(r.ctx, &ev), 0);
	ck_assert_int_eq(ev.event_type, FERRY_EVENT_SRQ_LIMIT_REACHED);
	ck_assert_ptr_eq(ev.element.srq, srq);
	ferry_ack_async_event(&ev);
	errno = 0;
	ck_assert_int_eq(ferry_get_async_event(r.ctx, &ev), -1);
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert_int_eq(fcntl(r.ctx->async_fd, F_SETFL, fl), 0);
}
END_TEST

struct srq_waiter {
	struct ferry_context *ctx;
	struct ferry_async_event ev;
	int ret;
};

static void *srq_wait_thread(void *arg)
{
	struct srq_waiter *w = arg;

	w->ret = ferry_get_async_event(w->ctx, &w->ev);
	return NULL;
}

/* On a blocking async_fd, ferry_get_async_event waits for the event. */
START_TEST(test_srq_async_blocking)
{
	struct srq_waiter w = { .ctx = r.ctx, .ret = -2 };
	pthread_t t;

	ck_assert_int_eq(pthread_create(&t, NULL, srq_wait_thread, &w), 0);
	tu_sleep_ms(20);
	ck_assert_int_eq(__atomic_load_n(&w.ret, __ATOMIC_ACQUIRE), -2);	/* still waiting */
	srq_post(&r, srq, 0);
	srq_post(&r, srq, 1);
	srq_arm(srq, 2);
	srq_send(&s, 1, 32);
	srq_recv(r.recv_cq, 1, r.qp->qp_num, NULL);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(w.ret, 0);
	ck_assert_int_eq(w.ev.event_type, FERRY_EVENT_SRQ_LIMIT_REACHED);
	ck_assert_ptr_eq(w.ev.element.srq, srq);
	ferry_ack_async_event(&w.ev);
	ck_assert(!srq_fd_ready(r.ctx, 0));
}
END_TEST

/*
 * The queue (core/async.c) as a provider fills it: the events of an
 * object destroyed go with it, the fd turns unreadable with the last one,
 * and events nobody reads stop piling up at 1,024.
 */
START_TEST(test_srq_async_queue)
{
	struct ferry_context *ctx = ferry_open_transport("shm");
	struct ferry_async_event ev;
	int a, b, n;

	ck_assert_ptr_nonnull(ctx);
	ck_assert_int_eq(fcntl(ctx->async_fd, F_SETFL, O_NONBLOCK), 0);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(ferry_async_post(ctx, FERRY_EVENT_QP_FATAL, &a), 0);
		ck_assert_int_eq(ferry_async_post(ctx, FERRY_EVENT_SRQ_LIMIT_REACHED, &b), 0);
	}
	ck_assert(srq_fd_ready(ctx, 0));
	ferry_async_forget(ctx, &a);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(ferry_get_async_event(ctx, &ev), 0);
		ck_assert_int_eq(ev.event_type, FERRY_EVENT_SRQ_LIMIT_REACHED);
		ck_assert_ptr_eq(ev.element.srq, (void *)&b);
	}
	ck_assert(!srq_fd_ready(ctx, 0));
	ck_assert_int_eq(ferry_async_post(ctx, FERRY_EVENT_QP_FATAL, &a), 0);
	ferry_async_forget(ctx, &a);
	ck_assert(!srq_fd_ready(ctx, 0));
	errno = 0;
	ck_assert_int_eq(ferry_get_async_event(ctx, &ev), -1);
	ck_assert_int_eq(errno, EAGAIN);

	for (n = 0; ferry_async_post(ctx, FERRY_EVENT_QP_FATAL, &a) == 0; n++)
		ck_assert_int_lt(n, 100000);
	ck_assert_int_eq(errno, ENOBUFS);
	ck_assert_int_eq(n, 1024);
	for (n = 0; ferry_get_async_event(ctx, &ev) == 0; n++)
		;
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert_int_eq(n, 1024);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

/* tcp has no SRQs (an explicit EOPNOTSUPP), but an async_fd all the same. */
START_TEST(test_srq_tcp_unsupported)
{
	struct ferry_context *ctx = ferry_open_transport("tcp");
	struct ferry_srq_init_attr ia = { .attr = { 16, 1, 0 } };
	struct ferry_async_event ev;
	struct ferry_pd *pd;

	if (!ctx) {
		printf("SKIP test_srq_tcp_unsupported: no tcp transport: %s\n", strerror(errno));
		return;
	}
	pd = ferry_alloc_pd(ctx);
	ck_assert_ptr_nonnull(pd);
	errno = 0;
	ck_assert_ptr_null(ferry_create_srq(pd, &ia));
	ck_assert_int_eq(errno, EOPNOTSUPP);
	ck_assert_int_ge(ctx->async_fd, 0);
	ck_assert(!srq_fd_ready(ctx, 0));
	ck_assert_int_eq(fcntl(ctx->async_fd, F_SETFL, O_NONBLOCK), 0);
	errno = 0;
	ck_assert_int_eq(ferry_get_async_event(ctx, &ev), -1);
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert_int_eq(ferry_dealloc_pd(pd), 0);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

/*
 * A QP moved to ERR: LAST_WQE_REACHED; what it received completes still;
 * what it held and was not delivered to stays in the SRQ (no flush): a
 * second QP on it receives into those very buffers.
 */
START_TEST(test_srq_last_wqe)
{
	struct ferry_qp_attr attr = { .qp_state = FERRY_QPS_ERR };
	struct tu_opts o = { .split_cq = true };
	struct tu_end s2, r2;
	uint64_t ids[4];

	for (uint32_t i = 0; i < 6; i++)
		srq_post(&r, srq, i);
	srq_send(&s, 2, 40);	/* delivered, not polled */
	ck_assert_int_eq(ferry_modify_qp(r.qp, &attr, FERRY_QP_STATE), 0);
	/* rxe (Linux 6.1's) raises none: the event is the device's to give. */
	if (tu_on_shm() || srq_fd_ready(r.ctx, 2000))
		srq_expect_event(r.ctx, FERRY_EVENT_QP_LAST_WQE_REACHED, r.qp);
	else
		printf("note: the device raised no LAST_WQE_REACHED\n");
	ck_assert(!srq_fd_ready(r.ctx, S_QUIET_MS));
	srq_recv(r.recv_cq, 2, r.qp->qp_num, ids);
	ck_assert_uint_eq(ids[0], 0);
	ck_assert_uint_eq(ids[1], 1);
	ck_assert(tu_check(r.buf, 40, 3));
	tu_assert_cq_empty(r.recv_cq);

	/* r2 borrows r's PD and CQs for a second QP on the SRQ. */
	tu_end_open(&s2, &o);
	r2 = r;
	r2.qp = srq_qp_create(&r, srq);
	ck_assert_ptr_nonnull(r2.qp);
	tu_fill(s2.buf, s2.len, 9);
	tu_pair_connect(&r2, &s2, TU_QP_ACCESS_ALL);
	srq_send(&s2, 4, 80);
	srq_recv(r.recv_cq, 4, r2.qp->qp_num, ids);
	for (int i = 0; i < 4; i++) {
		ck_assert_uint_eq(ids[i], (uint64_t)i + 2);
		ck_assert(tu_check(r.buf + (i + 2) * S_SLOT, 80, 9));
	}
	ck_assert_int_eq(ferry_destroy_qp(r2.qp), 0);
	tu_end_close(&s2);
}
END_TEST

/* RNR when the SRQ is empty: retried as configured, then RNR_RETRY_EXC_ERR. */
START_TEST(test_srq_rnr_empty)
{
	struct ferry_wc wc;

	if (tu_on_iwarp())
		return;	/* iWARP has no RNR retries */
	srq_pair_open();
	tu_pair_connect_manual(&r, &s, 2, 1);
	ck_assert_int_eq(tu_post_send1(s.qp, 1, FERRY_WR_SEND, 0, s.buf, 64, s.mr->lkey, 0, 0),
			 0);
	tu_poll1(s.send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_RNR_RETRY_EXC_ERR);
	tu_assert_cq_empty(r.recv_cq);
	srq_teardown();
}
END_TEST

/* With rnr_retry 7 the sender waits until the SRQ gets a receive. */
START_TEST(test_srq_rnr_then_post)
{
	struct ferry_wc wc;

	if (tu_on_iwarp())
		return;
	srq_pair_open();
	tu_pair_connect_manual(&r, &s, 7, 1);
	ck_assert_int_eq(tu_post_send1(s.qp, 1, FERRY_WR_SEND, 0, s.buf, 64, s.mr->lkey, 0, 0),
			 0);
	for (int i = 0; i < 20; i++) {
		ck_assert_int_eq(ferry_poll_cq(s.send_cq, 1, &wc), 0);
		tu_sleep_ms(2);
	}
	srq_post(&r, srq, 3);
	tu_poll1(s.send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	srq_recv(r.recv_cq, 1, r.qp->qp_num, NULL);
	ck_assert(tu_check(r.buf + 3 * S_SLOT, 64, 3));
	srq_teardown();
}
END_TEST

/* --- two peer processes drain one SRQ --- */

struct srq_msg {
	uint32_t peer;		/* which child */
	uint32_t seq;
};

enum { SRQ_CTL_DONE = 0x5d };

static int srq_sender_child(int sock, int ctl, void *arg)
{
	uint32_t peer = *(uint32_t *)arg, done;
	struct tu_opts o = { .buf_len = 64 * 1024 };
	struct tu_remote remote;
	struct tu_end e;
	struct ferry_wc wc;

	tu_child_connect(&e, &o, sock, &remote);
	for (uint32_t i = 0; i < S_MSGS; i++) {
		struct srq_msg *m = (struct srq_msg *)(e.buf + (i % 64) * 64);

		/* Never more than 32 sends in flight: the SQ holds 64. */
		if (i >= 32)
			TU_CHILD_CHECK(tu_child_poll(e.send_cq, &wc, 1, TU_WAIT_MS) == 1 &&
				       wc.status == FERRY_WC_SUCCESS);
		*m = (struct srq_msg){ peer, i };
		TU_CHILD_CHECK(tu_post_send1(e.qp, i, FERRY_WR_SEND, 0, m, sizeof(*m),
					     e.mr->lkey, 0, 0) == 0);
	}
	for (int i = 0; i < 32; i++)
		TU_CHILD_CHECK(tu_child_poll(e.send_cq, &wc, 1, TU_WAIT_MS) == 1 &&
			       wc.status == FERRY_WC_SUCCESS);
	/* Stay until the parent has taken everything. */
	TU_CHILD_CHECK(tu_recv_u32(ctl, &done, 3 * srq_child_ms()) == 0 && done == SRQ_CTL_DONE);
	tu_child_end_close(&e);
	return 0;
}

/* Connect @qp (of @e) to the child at the other end of @sock. */
static void srq_connect_child(struct tu_end *e, struct ferry_qp *qp, int sock)
{
	struct tu_remote mine = { (uintptr_t)e->buf, e->len, e->mr->rkey, qp->qp_num, 0, 0, 0, 0 };
	struct tu_remote peer;

	ck_assert_int_eq(tu_msg_send(sock, &mine, sizeof(mine)), 0);
	ck_assert_int_eq(tu_msg_recv(sock, &peer, sizeof(peer), TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_qp_connect_sock(qp, sock, TU_QP_ACCESS_ALL), 0);
	close(sock);
}

/* Take one receive completion and check it; repost its buffer. */
static void srq_drain_one(struct tu_end *e, struct ferry_srq *q, struct ferry_qp **qps,
			  bool seen[2][S_MSGS])
{
	struct ferry_wc wc;
	struct srq_msg m;

	tu_poll1(e->recv_cq, &wc);
	ck_assert_msg(wc.status == FERRY_WC_SUCCESS, "recv: %s", ferry_wc_status_str(wc.status));
	ck_assert_uint_eq(wc.byte_len, sizeof(m));
	ck_assert_uint_lt(wc.wr_id, S_MAX_WR);
	memcpy(&m, e->buf + wc.wr_id * S_SLOT, sizeof(m));
	ck_assert_uint_lt(m.peer, 2);
	ck_assert_uint_lt(m.seq, S_MSGS);
	ck_assert_msg(!seen[m.peer][m.seq], "peer %u message %u twice", m.peer, m.seq);
	seen[m.peer][m.seq] = true;
	/* The completion names the QP the message came on. */
	ck_assert_uint_eq(wc.qp_num, qps[m.peer]->qp_num);
	srq_post(e, q, (uint32_t)wc.wr_id);
}

START_TEST(test_srq_two_peers)
{
	static bool seen[2][S_MSGS];
	uint32_t ids[2] = { 0, 1 };
	struct tu_opts o = { .buf_len = S_MAX_WR * S_SLOT, .cqe = 512 };
	struct ferry_qp *qps[2];
	struct ferry_srq *q;
	struct tu_end e;
	int sock[2], ctl[2];
	pid_t pid[2];

	memset(seen, 0, sizeof(seen));
	/* Fork first: a child must not inherit a device we opened. */
	for (int i = 0; i < 2; i++)
		pid[i] = tu_fork(srq_sender_child, &ids[i], &sock[i], &ctl[i]);
	tu_end_open(&e, &o);
	q = srq_create(e.pd, S_MAX_WR, 1);
	ck_assert_ptr_nonnull(q);
	for (uint32_t i = 0; i < S_MAX_WR; i++)
		srq_post(&e, q, i);
	for (int i = 0; i < 2; i++) {
		qps[i] = srq_qp_create(&e, q);
		ck_assert_ptr_nonnull(qps[i]);
		srq_connect_child(&e, qps[i], sock[i]);
	}
	for (int n = 0; n < 2 * S_MSGS; n++)
		srq_drain_one(&e, q, qps, seen);
	tu_assert_cq_empty(e.recv_cq);
	for (int i = 0; i < 2; i++) {
		for (int k = 0; k < S_MSGS; k++)
			ck_assert_msg(seen[i][k], "peer %d message %d lost", i, k);
		ck_assert_int_eq(tu_send_u32(ctl[i], SRQ_CTL_DONE), 0);
		ck_assert_int_eq(tu_wait_child(pid[i], srq_child_ms()), 0);
		close(ctl[i]);
	}
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(ferry_destroy_qp(qps[i]), 0);
	ck_assert_int_eq(ferry_destroy_srq(q), 0);
	tu_end_close(&e);
}
END_TEST

/* --- shm: a peer that forges deliveries --- */

enum { SRQ_H_FORGE_MS = 300, SRQ_H_READY = 0x4f };

/*
 * The hostile child: it sends nothing, but writes deliveries for receives
 * it was never given (the next laps of its window, and seq 0) into its DQ
 * ring, raises rnr_wait and kicks our monitor without end, to make us pour
 * the SRQ into its window and count receives it did not deliver to.
 */
static int srq_forger_child(int sock, int ctl, void *arg)
{
	struct tu_opts o = { 0 };
	struct tu_remote remote;
	struct tu_end e;
	struct shm_qp *qp;
	struct shm_conn *conn;
	uint32_t size, done;
	uint64_t until;

	(void)arg;
	tu_child_connect(&e, &o, sock, &remote);
	qp = to_sqp(e.qp);
	conn = qp->conn;
	size = conn->peer_rq_size;
	TU_CHILD_CHECK(tu_send_u32(ctl, SRQ_H_READY) == 0);
	until = tu_now_ms() + SRQ_H_FORGE_MS;
	for (uint64_t lap = 1; tu_now_ms() < until; lap++) {
		for (uint32_t i = 0; i < size; i++) {
			struct shm_delivery *d = conn->my_dq - i;

			d->opcode = FERRY_WC_RECV;
			d->status = FERRY_WC_SUCCESS;
			d->byte_len = 0;
			/* slot i's receive of a lap not yet given; or none */
			atomic_store(&d->seq, lap % 3 ? i + 1 + size * lap : 0);
		}
		atomic_store(&qp->region->rnr_wait, 1);
		shm_wake(&conn->peer_kick);
		tu_sleep_ms(1);
	}
	TU_CHILD_CHECK(tu_recv_u32(ctl, &done, 3 * srq_child_ms()) == 0 && done == SRQ_CTL_DONE);
	tu_child_end_close(&e);
	return 0;
}

START_TEST(test_srq_forged_deliveries)
{
	struct ferry_qp_attr err = { .qp_state = FERRY_QPS_ERR };
	struct tu_opts o = { .split_cq = true };
	uint32_t ready;
	struct ferry_qp *hq;
	struct tu_end s2, r2;
	struct shm_srq *ssrq;
	int sock, ctl;
	pid_t pid;

	if (!tu_on_shm())
		return;
	/* srq_setup made r (QP on the SRQ, to s): 16 receives, all posted. */
	for (uint32_t i = 0; i < 16; i++)
		srq_post(&r, srq, i);
	pid = tu_fork(srq_forger_child, NULL, &sock, &ctl);
	hq = srq_qp_create(&r, srq);
	ck_assert_ptr_nonnull(hq);
	srq_connect_child(&r, hq, sock);
	ck_assert_int_eq(tu_recv_u32(ctl, &ready, TU_WAIT_MS), 0);

	/* Meanwhile the honest sender's messages arrive, on its own QP. */
	ssrq = to_ssrq(srq);
	for (int k = 0; k < 20; k++) {
		struct ferry_wc wc;

		srq_send(&s, 1, 48);
		tu_poll1(r.recv_cq, &wc);
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
		ck_assert_uint_eq(wc.qp_num, r.qp->qp_num);
		srq_post(&r, srq, (uint32_t)wc.wr_id);
		/* The forger's window never holds more than a window. */
		ck_assert_uint_le(to_sqp(hq)->rq_prod - to_sqp(hq)->rq_cons, SHM_SRQ_WINDOW);
		tu_sleep_ms(SRQ_H_FORGE_MS / 20);
	}
	tu_assert_cq_empty(r.recv_cq);	/* nothing of the forger's was taken */
	ck_assert_int_eq(tu_qp_state(hq), FERRY_QPS_RTS);
	pthread_mutex_lock(&ssrq->lock);
	ck_assert_uint_eq(ssrq->posted, 16);
	pthread_mutex_unlock(&ssrq->lock);

	/* ERR: the forger's window comes back; every receive is there still:
	 * with the limit at 15, the first receive leaves 15, the second 14. */
	ck_assert_int_eq(ferry_modify_qp(hq, &err, FERRY_QP_STATE), 0);
	srq_expect_event(r.ctx, FERRY_EVENT_QP_LAST_WQE_REACHED, hq);
	srq_arm(srq, 15);
	tu_end_open(&s2, &o);
	r2 = r;
	r2.qp = srq_qp_create(&r, srq);
	ck_assert_ptr_nonnull(r2.qp);
	tu_pair_connect(&r2, &s2, TU_QP_ACCESS_ALL);
	srq_send(&s2, 1, 16);
	srq_recv(r.recv_cq, 1, r2.qp->qp_num, NULL);
	ck_assert(!srq_fd_ready(r.ctx, S_QUIET_MS));
	srq_send(&s2, 1, 16);
	srq_recv(r.recv_cq, 1, r2.qp->qp_num, NULL);
	srq_expect_event(r.ctx, FERRY_EVENT_SRQ_LIMIT_REACHED, srq);

	ck_assert_int_eq(tu_send_u32(ctl, SRQ_CTL_DONE), 0);
	ck_assert_int_eq(tu_wait_child(pid, srq_child_ms()), 0);
	close(ctl);
	ck_assert_int_eq(ferry_destroy_qp(r2.qp), 0);
	ck_assert_int_eq(ferry_destroy_qp(hq), 0);
	tu_end_close(&s2);
}
END_TEST

Suite *srq_suite(void)
{
	Suite *su = suite_create("srq");
	TCase *tc = tcase_create("objects");

	tcase_add_checked_fixture(tc, srq_setup, srq_teardown);
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_srq_objects);
	tcase_add_test(tc, test_srq_create_errors);
	tcase_add_test(tc, test_srq_tcp_unsupported);
	tcase_add_test(tc, test_srq_async_queue);
	suite_add_tcase(su, tc);

	tc = tcase_create("receive");
	tcase_add_checked_fixture(tc, srq_setup, srq_teardown);
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_srq_receive);
	tcase_add_test(tc, test_srq_limit_once_per_arm);
	tcase_add_test(tc, test_srq_async_fd_nonblocking);
	tcase_add_test(tc, test_srq_async_blocking);
	tcase_add_test(tc, test_srq_last_wqe);
	suite_add_tcase(su, tc);

	tc = tcase_create("rnr");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_srq_rnr_empty);
	tcase_add_test(tc, test_srq_rnr_then_post);
	suite_add_tcase(su, tc);

	tc = tcase_create("peers");
	tcase_set_timeout(tc, 2 * TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_srq_two_peers);
	suite_add_tcase(su, tc);

	tc = tcase_create("hostile");
	tcase_add_checked_fixture(tc, srq_setup, srq_teardown);
	tcase_set_timeout(tc, 2 * TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_srq_forged_deliveries);
	suite_add_tcase(su, tc);
	return su;
}
