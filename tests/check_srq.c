/*
 * check_srq.c - shared receive queues and asynchronous events in one
 * process: create, query, modify and destroy and their errors; the limit
 * event, once per arm; LAST_WQE_REACHED and the SRQ getting back what a QP
 * in ERR held; the async fd, blocking and not, and the queue behind it;
 * RNR when the SRQ is empty.  With peers in other processes:
 * check_srq_peers.c.  Provider-generic: FERRY_TRANSPORT=verbs runs suite
 * "srq" on a device (tests/rxe/check-rxe.sh).
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
#include "srqtest.h"
#include "testutil.h"
#include "core-export.h"
#include "shm-internal.h"

START_TEST(test_srq_objects)
{
	struct ferry_srq_attr a;
	struct ferry_qp_attr qa;
	struct ferry_qp_init_attr qi;
	struct ferry_recv_wr *bad = NULL;
	struct ferry_sge sg = { (uintptr_t)rx.buf, S_SLOT, rx.mr->lkey };
	struct ferry_recv_wr wr = { .wr_id = 1, .sg_list = &sg, .num_sge = 1 };

	ck_assert_ptr_eq(srq_q->srq_context, rx.pd);
	ck_assert_int_eq(ferry_query_srq(srq_q, &a), 0);
	ck_assert_uint_ge(a.max_wr, S_MAX_WR);
	ck_assert_uint_ge(a.max_sge, 1);
	ck_assert_uint_eq(a.srq_limit, 0);

	a.srq_limit = a.max_wr + 1;	/* a limit above what it can hold */
	errno = 0;
	ck_assert_int_eq(ferry_modify_srq(srq_q, &a, FERRY_SRQ_LIMIT), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_modify_srq(srq_q, &a, 1 << 7), -1);
	ck_assert_int_eq(errno, EINVAL);
	srq_arm(srq_q, 5);
	ck_assert_int_eq(ferry_query_srq(srq_q, &a), 0);
	ck_assert_uint_eq(a.srq_limit, 5);

	/* Resized where the device can: up, and not below what is posted. */
	{
		struct ferry_device_attr dev;

		ck_assert_int_eq(ferry_query_device(rx.ctx, &dev), 0);
		if (dev.device_cap_flags & FERRY_DEVICE_SRQ_RESIZE) {
			for (uint32_t i = 0; i < 3; i++)
				srq_post(&rx, srq_q, i);
			a.max_wr = 2 * S_MAX_WR;
			ck_assert_int_eq(ferry_modify_srq(srq_q, &a, FERRY_SRQ_MAX_WR), 0);
			ck_assert_int_eq(ferry_query_srq(srq_q, &a), 0);
			ck_assert_uint_ge(a.max_wr, 2 * S_MAX_WR);
			ck_assert_uint_eq(a.srq_limit, 5);
			a.max_wr = 2;
			errno = 0;
			ck_assert_int_eq(ferry_modify_srq(srq_q, &a, FERRY_SRQ_MAX_WR), -1);
			ck_assert_int_eq(errno, EINVAL);
		}
	}

	/* Its QP has no receive queue of its own, and says whose it uses. */
	errno = 0;
	ck_assert_int_eq(ferry_post_recv(rx.qp, &wr, &bad), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_eq(bad, &wr);
	ck_assert_int_eq(ferry_query_qp(rx.qp, &qa, 0, &qi), 0);
	ck_assert_ptr_eq(qi.srq, srq_q);
	ck_assert_ptr_eq(rx.qp->srq, srq_q);

	/* Busy while a QP is on it. */
	errno = 0;
	ck_assert_int_eq(ferry_destroy_srq(srq_q), -1);
	ck_assert_int_eq(errno, EBUSY);
	ck_assert_int_eq(ferry_destroy_qp(rx.qp), 0);
	rx.qp = NULL;
	ck_assert_int_eq(srq_q->qp_refs, 0);
}
END_TEST

START_TEST(test_srq_create_errors)
{
	struct ferry_srq_init_attr ia = { .attr = { 0, 1, 0 } };
	struct ferry_device_attr dev;
	struct ferry_srq *small;
	struct ferry_recv_wr wr[3], *bad = NULL;
	struct ferry_sge sg = { (uintptr_t)rx.buf, S_SLOT, rx.mr->lkey };

	errno = 0;
	ck_assert_ptr_null(ferry_create_srq(rx.pd, &ia));	/* max_wr 0 */
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(ferry_create_srq(NULL, &ia));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_query_device(rx.ctx, &dev), 0);
	ck_assert_int_gt(dev.max_srq, 0);
	ck_assert_int_gt(dev.max_srq_wr, 0);
	ia.attr.max_wr = (uint32_t)dev.max_srq_wr + 1;
	errno = 0;
	ck_assert_ptr_null(ferry_create_srq(rx.pd, &ia));
	ck_assert_int_eq(errno, EINVAL);

	/* Full: the WR past max_wr is refused, and named. */
	small = srq_create(rx.pd, 2, 1);
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
		ck_assert_int_eq(ferry_post_srq_recv(srq_q, wr, &bad), -1);
		ck_assert_int_eq(errno, EINVAL);
		ck_assert_ptr_eq(bad, &wr[0]);
	}
	ck_assert_int_eq(ferry_destroy_srq(small), 0);

	/* shm's UD QPs take their receives from their own socket: no SRQ. */
	if (tu_on_shm()) {
		struct ferry_qp_init_attr qa = {
			.send_cq = rx.send_cq, .recv_cq = rx.recv_cq, .srq = srq_q, .qp_type = FERRY_QPT_UD,
			.cap = { .max_send_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		};

		errno = 0;
		ck_assert_ptr_null(ferry_create_qp(rx.pd, &qa));
		ck_assert_int_eq(errno, EOPNOTSUPP);
	}
}
END_TEST

START_TEST(test_srq_receive)
{
	uint64_t ids[4];

	for (uint32_t i = 0; i < 4; i++)
		srq_post(&rx, srq_q, i);
	srq_send(&tx, 4, 100);
	srq_recv(rx.recv_cq, 4, rx.qp->qp_num, ids);
	for (int i = 0; i < 4; i++) {
		ck_assert_uint_eq(ids[i], (uint64_t)i);	/* in the order posted */
		ck_assert(tu_check(rx.buf + i * S_SLOT, 100, 3));
	}
	tu_assert_cq_empty(rx.recv_cq);
}
END_TEST

START_TEST(test_srq_limit_once_per_arm)
{
	for (uint32_t i = 0; i < 8; i++)
		srq_post(&rx, srq_q, i);
	srq_arm(srq_q, 4);
	/* 8 -> 4 posted: not below the limit yet. */
	srq_send(&tx, 4, 64);
	srq_recv(rx.recv_cq, 4, rx.qp->qp_num, NULL);
	ck_assert(!srq_fd_ready(rx.ctx, S_QUIET_MS));
	/* 3 < 4: the event, once, and the limit is 0 again. */
	srq_send(&tx, 1, 64);
	srq_recv(rx.recv_cq, 1, rx.qp->qp_num, NULL);
	srq_expect_event(rx.ctx, FERRY_EVENT_SRQ_LIMIT_REACHED, srq_q);
	{
		struct ferry_srq_attr a;

		ck_assert_int_eq(ferry_query_srq(srq_q, &a), 0);
		ck_assert_uint_eq(a.srq_limit, 0);
	}
	srq_send(&tx, 2, 64);
	srq_recv(rx.recv_cq, 2, rx.qp->qp_num, NULL);
	ck_assert(!srq_fd_ready(rx.ctx, S_QUIET_MS));
	/* Armed again: 1 + 3 = 4 posted, limit 3: the second receive fires it. */
	for (uint32_t i = 8; i < 11; i++)
		srq_post(&rx, srq_q, i);
	srq_arm(srq_q, 3);
	srq_send(&tx, 1, 64);
	srq_recv(rx.recv_cq, 1, rx.qp->qp_num, NULL);
	ck_assert(!srq_fd_ready(rx.ctx, S_QUIET_MS));
	srq_send(&tx, 1, 64);
	srq_recv(rx.recv_cq, 1, rx.qp->qp_num, NULL);
	srq_expect_event(rx.ctx, FERRY_EVENT_SRQ_LIMIT_REACHED, srq_q);
	ck_assert(!srq_fd_ready(rx.ctx, 0));
}
END_TEST

START_TEST(test_srq_async_fd_nonblocking)
{
	struct ferry_async_event ev;
	int fl = fcntl(rx.ctx->async_fd, F_GETFL);

	ck_assert_int_ge(fl, 0);
	ck_assert_int_eq(fl & O_NONBLOCK, 0);	/* blocking, as ibverbs' */
	ck_assert_int_eq(fcntl(rx.ctx->async_fd, F_SETFL, fl | O_NONBLOCK), 0);
	errno = 0;
	ck_assert_int_eq(ferry_get_async_event(rx.ctx, &ev), -1);
	ck_assert_int_eq(errno, EAGAIN);
	srq_post(&rx, srq_q, 0);
	srq_post(&rx, srq_q, 1);
	srq_arm(srq_q, 2);
	srq_send(&tx, 1, 32);
	srq_recv(rx.recv_cq, 1, rx.qp->qp_num, NULL);
	ck_assert(srq_fd_ready(rx.ctx, TU_WAIT_MS));
	ck_assert_int_eq(ferry_get_async_event(rx.ctx, &ev), 0);
	ck_assert_int_eq(ev.event_type, FERRY_EVENT_SRQ_LIMIT_REACHED);
	ck_assert_ptr_eq(ev.element.srq, srq_q);
	ferry_ack_async_event(&ev);
	errno = 0;
	ck_assert_int_eq(ferry_get_async_event(rx.ctx, &ev), -1);
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert_int_eq(fcntl(rx.ctx->async_fd, F_SETFL, fl), 0);
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
	struct srq_waiter w = { .ctx = rx.ctx, .ret = -2 };
	pthread_t t;

	ck_assert_int_eq(pthread_create(&t, NULL, srq_wait_thread, &w), 0);
	tu_sleep_ms(20);
	ck_assert_int_eq(__atomic_load_n(&w.ret, __ATOMIC_ACQUIRE), -2);	/* still waiting */
	srq_post(&rx, srq_q, 0);
	srq_post(&rx, srq_q, 1);
	srq_arm(srq_q, 2);
	srq_send(&tx, 1, 32);
	srq_recv(rx.recv_cq, 1, rx.qp->qp_num, NULL);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(w.ret, 0);
	ck_assert_int_eq(w.ev.event_type, FERRY_EVENT_SRQ_LIMIT_REACHED);
	ck_assert_ptr_eq(w.ev.element.srq, srq_q);
	ferry_ack_async_event(&w.ev);
	ck_assert(!srq_fd_ready(rx.ctx, 0));
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
		srq_post(&rx, srq_q, i);
	srq_send(&tx, 2, 40);	/* delivered, not polled */
	ck_assert_int_eq(ferry_modify_qp(rx.qp, &attr, FERRY_QP_STATE), 0);
	/* rxe (Linux 6.1's) raises none: the event is the device's to give. */
	if (tu_on_shm() || srq_fd_ready(rx.ctx, 2000))
		srq_expect_event(rx.ctx, FERRY_EVENT_QP_LAST_WQE_REACHED, rx.qp);
	else
		printf("note: the device raised no LAST_WQE_REACHED\n");
	ck_assert(!srq_fd_ready(rx.ctx, S_QUIET_MS));
	srq_recv(rx.recv_cq, 2, rx.qp->qp_num, ids);
	ck_assert_uint_eq(ids[0], 0);
	ck_assert_uint_eq(ids[1], 1);
	ck_assert(tu_check(rx.buf, 40, 3));
	tu_assert_cq_empty(rx.recv_cq);

	/* r2 borrows r's PD and CQs for a second QP on the SRQ. */
	tu_end_open(&s2, &o);
	r2 = rx;
	r2.qp = srq_qp_create(&rx, srq_q);
	ck_assert_ptr_nonnull(r2.qp);
	tu_fill(s2.buf, s2.len, 9);
	tu_pair_connect(&r2, &s2, TU_QP_ACCESS_ALL);
	srq_send(&s2, 4, 80);
	srq_recv(rx.recv_cq, 4, r2.qp->qp_num, ids);
	for (int i = 0; i < 4; i++) {
		ck_assert_uint_eq(ids[i], (uint64_t)i + 2);
		ck_assert(tu_check(rx.buf + (i + 2) * S_SLOT, 80, 9));
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
	tu_pair_connect_manual(&rx, &tx, 2, 1);
	ck_assert_int_eq(tu_post_send1(tx.qp, 1, FERRY_WR_SEND, 0, tx.buf, 64, tx.mr->lkey, 0, 0),
			 0);
	tu_poll1(tx.send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_RNR_RETRY_EXC_ERR);
	tu_assert_cq_empty(rx.recv_cq);
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
	tu_pair_connect_manual(&rx, &tx, 7, 1);
	ck_assert_int_eq(tu_post_send1(tx.qp, 1, FERRY_WR_SEND, 0, tx.buf, 64, tx.mr->lkey, 0, 0),
			 0);
	for (int i = 0; i < 20; i++) {
		ck_assert_int_eq(ferry_poll_cq(tx.send_cq, 1, &wc), 0);
		tu_sleep_ms(2);
	}
	srq_post(&rx, srq_q, 3);
	tu_poll1(tx.send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	srq_recv(rx.recv_cq, 1, rx.qp->qp_num, NULL);
	ck_assert(tu_check(rx.buf + 3 * S_SLOT, 64, 3));
	srq_teardown();
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

	return su;
}

