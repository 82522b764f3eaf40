/*
 * check_flush.c - moving a QP to ERR flushes every outstanding receive and
 * send with WR_FLUSH_ERR, in posting order, each on its own CQ with its
 * wr_id and qp_num; WRs posted in ERR flush too.
 */
#include "config.h"

#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "testutil.h"

static struct tu_end a, b;

static void flush_setup(void)
{
	struct tu_opts o = { .split_cq = true };

	tu_end_open(&a, &o);
	tu_end_open(&b, &o);
	memset(b.buf, 0xbb, b.len);
}

static void flush_teardown(void)
{
	tu_pair_close(&a, &b);
}

static void flush_to_err(struct ferry_qp *qp)
{
	struct ferry_qp_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_ERR;
	ck_assert_int_eq(ferry_modify_qp(qp, &attr, FERRY_QP_STATE), 0);
	ck_assert_int_eq(qp->state, FERRY_QPS_ERR);
}

/* @n flush completions with consecutive wr_ids from @first, then nothing. */
static void flush_expect(struct ferry_cq *cq, struct ferry_qp *qp,
			 uint64_t first, int n)
{
	struct ferry_wc wc;

	for (int i = 0; i < n; i++) {
		tu_poll1(cq, &wc);
		ck_assert_msg(wc.status == FERRY_WC_WR_FLUSH_ERR,
			      "wr %llu: %s", (unsigned long long)wc.wr_id,
			      ferry_wc_status_str(wc.status));
		ck_assert_uint_eq(wc.wr_id, first + (uint64_t)i);
		ck_assert_uint_eq(wc.qp_num, qp->qp_num);
	}
	tu_assert_cq_empty(cq);
}

START_TEST(test_flush_recvs_connected)
{
	tu_pair_connect(&a, &b, TU_QP_ACCESS_ALL);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(tu_post_recv1(b.qp, 100 + i, b.buf + 512 * i, 512,
					       b.mr->lkey), 0);
	flush_to_err(b.qp);
	flush_expect(b.recv_cq, b.qp, 100, 8);
	tu_assert_cq_empty(b.send_cq);
	ck_assert(tu_all_bytes(b.buf, b.len, 0xbb));
}
END_TEST

START_TEST(test_flush_recvs_init)
{
	/* receives posted in INIT flush as well */
	ck_assert_int_eq(tu_qp_to_init(b.qp, TU_QP_ACCESS_ALL), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(tu_post_recv1(b.qp, 7 + i, b.buf, 64, b.mr->lkey), 0);
	flush_to_err(b.qp);
	flush_expect(b.recv_cq, b.qp, 7, 5);
}
END_TEST

START_TEST(test_flush_sends)
{
	/*
	 * b has no receive and rnr_retry is 7: a's SENDs stay outstanding
	 * until a goes to ERR, then all of them flush, in order.
	 */
	tu_pair_connect_manual(&a, &b, 7, 1);
	tu_fill(a.buf, 4096, 3);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(tu_post_send1(a.qp, 200 + i, FERRY_WR_SEND, 0,
					       a.buf + 64 * i, 64, a.mr->lkey, 0, 0),
				 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(tu_post_recv1(a.qp, 300 + i, a.buf + 8192, 64,
					       a.mr->lkey), 0);
	tu_sleep_ms(20);
	tu_assert_cq_empty(a.send_cq);
	flush_to_err(a.qp);
	flush_expect(a.send_cq, a.qp, 200, 6);
	flush_expect(a.recv_cq, a.qp, 300, 3);
	ck_assert(tu_all_bytes(b.buf, b.len, 0xbb));

	/* none of them is delivered late: a receive posted now gets no data */
	ck_assert_int_eq(tu_post_recv1(b.qp, 400, b.buf, 64, b.mr->lkey), 0);
	tu_sleep_ms(20);
	{
		struct ferry_wc wc;

		if (ferry_poll_cq(b.recv_cq, 1, &wc) == 1)
			ck_assert_int_ne(wc.status, FERRY_WC_SUCCESS);
	}
	ck_assert(tu_all_bytes(b.buf, b.len, 0xbb));
}
END_TEST

START_TEST(test_flush_unsignaled_sends)
{
	struct tu_opts o = { .split_cq = true, .no_sig_all = true };

	/* ibverbs: flushed WRs complete even when unsignaled */
	tu_pair_close(&a, &b);
	tu_end_open(&a, &o);
	tu_end_open(&b, &o);
	tu_pair_connect_manual(&a, &b, 7, 1);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(tu_post_send1(a.qp, 10 + i, FERRY_WR_SEND, 0,
					       a.buf, 16, a.mr->lkey, 0, 0), 0);
	flush_to_err(a.qp);
	flush_expect(a.send_cq, a.qp, 10, 3);
}
END_TEST

START_TEST(test_post_in_err_flushes)
{
	tu_pair_connect(&a, &b, TU_QP_ACCESS_ALL);
	flush_to_err(a.qp);
	tu_assert_cq_empty(a.send_cq);
	tu_assert_cq_empty(a.recv_cq);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_WRITE, 0, a.buf, 64,
				       a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 2, FERRY_WR_SEND, 0, a.buf, 64,
				       a.mr->lkey, 0, 0), 0);
	ck_assert_int_eq(tu_post_recv1(a.qp, 3, a.buf, 64, a.mr->lkey), 0);
	flush_expect(a.send_cq, a.qp, 1, 2);
	flush_expect(a.recv_cq, a.qp, 3, 1);
	ck_assert(tu_all_bytes(b.buf, b.len, 0xbb));
}
END_TEST

START_TEST(test_flush_after_completions)
{
	struct ferry_wc wc;

	/* completed WRs are not flushed again; only the pending ones */
	tu_pair_connect(&a, &b, TU_QP_ACCESS_ALL);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(tu_post_recv1(b.qp, 50 + i, b.buf + 256 * i, 256,
					       b.mr->lkey), 0);
	tu_fill(a.buf, 100, 9);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_SEND, 0, a.buf, 100,
				       a.mr->lkey, 0, 0), 0);
	tu_poll1(a.send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	tu_poll1(b.recv_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.wr_id, 50);
	flush_to_err(b.qp);
	flush_expect(b.recv_cq, b.qp, 51, 3);
	ck_assert(tu_check(b.buf, 100, 9));
}
END_TEST

START_TEST(test_flush_shared_cq)
{
	struct tu_opts o = { 0 };
	struct ferry_wc wc[8];
	int sends = 0, recvs = 0;

	/* one CQ for both queues: every WR appears once, each queue in order */
	tu_pair_close(&a, &b);
	tu_end_open(&a, &o);
	tu_end_open(&b, &o);
	tu_pair_connect_manual(&a, &b, 7, 1);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(tu_post_recv1(a.qp, 100 + i, a.buf, 64, a.mr->lkey), 0);
		ck_assert_int_eq(tu_post_send1(a.qp, 200 + i, FERRY_WR_SEND, 0,
					       a.buf, 16, a.mr->lkey, 0, 0), 0);
	}
	flush_to_err(a.qp);
	ck_assert_int_eq(tu_poll(a.send_cq, wc, 8, TU_WAIT_MS), 8);
	for (int i = 0; i < 8; i++) {
		ck_assert_int_eq(wc[i].status, FERRY_WC_WR_FLUSH_ERR);
		if (wc[i].wr_id >= 200)
			ck_assert_uint_eq(wc[i].wr_id, 200 + (uint64_t)sends++);
		else
			ck_assert_uint_eq(wc[i].wr_id, 100 + (uint64_t)recvs++);
	}
	ck_assert_int_eq(sends, 4);
	ck_assert_int_eq(recvs, 4);
	tu_assert_cq_empty(a.send_cq);
}
END_TEST

Suite *flush_suite(void)
{
	Suite *s = suite_create("flush");
	TCase *tc = tcase_create("to_err");

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_checked_fixture(tc, flush_setup, flush_teardown);
	tcase_add_test(tc, test_flush_recvs_connected);
	tcase_add_test(tc, test_flush_recvs_init);
	tcase_add_test(tc, test_flush_sends);
	tcase_add_test(tc, test_flush_unsignaled_sends);
	tcase_add_test(tc, test_post_in_err_flushes);
	tcase_add_test(tc, test_flush_after_completions);
	tcase_add_test(tc, test_flush_shared_cq);
	suite_add_tcase(s, tc);
	return s;
}
