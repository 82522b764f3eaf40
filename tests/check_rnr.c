/*
 * check_rnr.c - receiver-not-ready: a SEND or WRITE_WITH_IMM that finds no
 * receive posted retries rnr_retry times (min_rnr_timer apart) and then
 * fails with RNR_RETRY_EXC_ERR; with rnr_retry 7 it waits for a receive.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <check.h>

#include "check_suites.h"
#include "core-export.h"
#include "testutil.h"
#include "shm-internal.h"

static struct tu_end a, b;

static void rnr_open(uint8_t rnr_retry)
{
	struct tu_opts o = { .split_cq = true };

	tu_end_open(&a, &o);
	tu_end_open(&b, &o);
	/* min_rnr_timer 1 = 0.01 ms: retries exhaust quickly */
	tu_pair_connect_manual(&a, &b, rnr_retry, 1);
	tu_fill(a.buf, a.len, 1);
	memset(b.buf, 0xbb, b.len);
}

static void rnr_setup_few(void)
{
	rnr_open(1);
}

static void rnr_setup_forever(void)
{
	rnr_open(7);
}

static void rnr_teardown(void)
{
	tu_pair_close(&a, &b);
}

static void rnr_expect(struct ferry_cq *cq, uint64_t wr_id,
		       enum ferry_wc_status status)
{
	struct ferry_wc wc;

	tu_poll1(cq, &wc);
	ck_assert_msg(wc.status == status, "wr %llu: %s, expected %s",
		      (unsigned long long)wc.wr_id, ferry_wc_status_str(wc.status),
		      ferry_wc_status_str(status));
	ck_assert_uint_eq(wc.wr_id, wr_id);
}

START_TEST(test_send_rnr_exceeded)
{
	struct ferry_qp_attr attr;
	struct ferry_qp_init_attr init;

	ck_assert_int_eq(ferry_query_qp(a.qp, &attr, FERRY_QP_RNR_RETRY, &init), 0);
	ck_assert_uint_eq(attr.rnr_retry, 1);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_SEND, 0, a.buf, 128,
				       a.mr->lkey, 0, 0), 0);
	rnr_expect(a.send_cq, 1, FERRY_WC_RNR_RETRY_EXC_ERR);
	ck_assert(tu_wait_qp_state(a.qp, FERRY_QPS_ERR, TU_WAIT_MS));
	ck_assert(tu_all_bytes(b.buf, b.len, 0xbb));
	tu_assert_cq_empty(b.recv_cq);
}
END_TEST

START_TEST(test_write_imm_rnr_exceeded)
{
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_WRITE_WITH_IMM, 0,
				       a.buf, 128, a.mr->lkey, (uintptr_t)b.buf,
				       b.mr->rkey), 0);
	rnr_expect(a.send_cq, 1, FERRY_WC_RNR_RETRY_EXC_ERR);
	ck_assert(tu_wait_qp_state(a.qp, FERRY_QPS_ERR, TU_WAIT_MS));
	tu_assert_cq_empty(b.recv_cq);
}
END_TEST

START_TEST(test_rnr_then_flush)
{
	/* the WR behind the failed one flushes, and did not execute */
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_SEND, 0, a.buf, 64,
				       a.mr->lkey, 0, 0), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 2, FERRY_WR_RDMA_WRITE, 0, a.buf, 64,
				       a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey), 0);
	rnr_expect(a.send_cq, 1, FERRY_WC_RNR_RETRY_EXC_ERR);
	rnr_expect(a.send_cq, 2, FERRY_WC_WR_FLUSH_ERR);
	ck_assert(tu_all_bytes(b.buf, b.len, 0xbb));
}
END_TEST

START_TEST(test_rnr_recv_posted_in_time)
{
	/* with a receive there is no RNR at all, even with rnr_retry 1 */
	ck_assert_int_eq(tu_post_recv1(b.qp, 7, b.buf, 256, b.mr->lkey), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_SEND, 0, a.buf, 200,
				       a.mr->lkey, 0, 0), 0);
	rnr_expect(a.send_cq, 1, FERRY_WC_SUCCESS);
	rnr_expect(b.recv_cq, 7, FERRY_WC_SUCCESS);
	ck_assert(tu_check(b.buf, 200, 1));
}
END_TEST

START_TEST(test_rnr_forever_send)
{
	struct ferry_wc wc;

	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_SEND, 0, a.buf, 100,
				       a.mr->lkey, 0, 0), 0);
	/* however long we wait, it cannot complete before a receive exists */
	for (int i = 0; i < 50; i++) {
		ck_assert_int_eq(ferry_poll_cq(a.send_cq, 1, &wc), 0);
		tu_sleep_ms(2);
	}
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_RTS);
	ck_assert_int_eq(tu_post_recv1(b.qp, 8, b.buf + 4096, 128, b.mr->lkey), 0);
	rnr_expect(a.send_cq, 1, FERRY_WC_SUCCESS);
	rnr_expect(b.recv_cq, 8, FERRY_WC_SUCCESS);
	ck_assert(tu_check(b.buf + 4096, 100, 1));
	ck_assert(tu_all_bytes(b.buf, 4096, 0xbb));
}
END_TEST

START_TEST(test_rnr_forever_write_imm)
{
	struct ferry_sge sg = { (uintptr_t)a.buf, 300, a.mr->lkey };
	struct ferry_send_wr wr, *bad = NULL;
	struct ferry_wc wc;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.opcode = FERRY_WR_RDMA_WRITE_WITH_IMM;
	wr.sg_list = &sg;
	wr.num_sge = 1;
	wr.imm_data = htonl(99);
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf + 1000;
	wr.wr.rdma.rkey = b.mr->rkey;
	ck_assert_int_eq(ferry_post_send(a.qp, &wr, &bad), 0);
	for (int i = 0; i < 50; i++) {
		ck_assert_int_eq(ferry_poll_cq(a.send_cq, 1, &wc), 0);
		tu_sleep_ms(2);
	}
	ck_assert_int_eq(tu_post_recv1(b.qp, 9, b.buf + 60000, 0, b.mr->lkey), 0);
	rnr_expect(a.send_cq, 1, FERRY_WC_SUCCESS);
	tu_poll1(b.recv_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.wr_id, 9);
	ck_assert_int_eq(wc.opcode, FERRY_WC_RECV_RDMA_WITH_IMM);
	ck_assert_uint_eq(wc.imm_data, htonl(99));
	ck_assert_uint_eq(wc.byte_len, 300);
	ck_assert(tu_check(b.buf + 1000, 300, 1));
}
END_TEST

/* The receive comes from another thread while the sender only polls. */
static void *rnr_late_recv_thread(void *arg)
{
	(void)arg;
	tu_sleep_ms(100);
	for (int i = 0; i < 4; i++)
		if (tu_post_recv1(b.qp, 20 + (uint64_t)i, b.buf + 1024 * i, 1024,
				  b.mr->lkey))
			return (void *)1;
	return NULL;
}

START_TEST(test_rnr_forever_ordered)
{
	pthread_t thread;
	void *ret;

	/* four SENDs queued behind an RNR wait keep their order */
	for (int i = 0; i < 4; i++) {
		tu_fill(a.buf + 1024 * i, 500, 30 + (unsigned)i);
		ck_assert_int_eq(tu_post_send1(a.qp, 10 + (uint64_t)i, FERRY_WR_SEND,
					       0, a.buf + 1024 * i, 500,
					       a.mr->lkey, 0, 0), 0);
	}
	ck_assert_int_eq(pthread_create(&thread, NULL, rnr_late_recv_thread, NULL), 0);
	for (int i = 0; i < 4; i++)
		rnr_expect(a.send_cq, 10 + (uint64_t)i, FERRY_WC_SUCCESS);
	pthread_join(thread, &ret);
	ck_assert_ptr_null(ret);
	for (int i = 0; i < 4; i++) {
		rnr_expect(b.recv_cq, 20 + (uint64_t)i, FERRY_WC_SUCCESS);
		ck_assert(tu_check(b.buf + 1024 * i, 500, 30 + (unsigned)i));
	}
}
END_TEST

struct exchange_job {
	struct ferry_qp *qp;
	int sock;
	int rc;
	uint32_t peer_qpn;
};

static void *exchange_thread(void *arg)
{
	struct exchange_job *j = arg;

	j->rc = ferry_qp_exchange(j->qp, j->sock, &j->peer_qpn);
	return NULL;
}

/*
 * Receives posted in INIT are in the region before the peer sees the region:
 * a peer whose exchange has returned must find them at once (it used to
 * find none, and waited out an RNR timer of 655 ms at min_rnr_timer 0).
 */
/*
 * ferry_post_send_direct takes no WR that would have to wait: not one the
 * peer has no receive for, nor one behind a WR still waiting for its
 * receive.  Nothing of a refused one is posted or written.
 */
START_TEST(test_rnr_direct_refused)
{
	char payload[5000];
	struct ferry_sge sg = { (uintptr_t)payload, sizeof(payload), 0 };
	struct ferry_send_wr wr = { .wr_id = 9, .sg_list = &sg, .num_sge = 1,
				    .opcode = FERRY_WR_RDMA_WRITE_WITH_IMM,
				    .send_flags = FERRY_SEND_SIGNALED };
	struct ferry_wc wc;

	if (!tu_on_shm())
		return;		/* verbs: EOPNOTSUPP (check_ops) */
	memset(payload, 0x5a, sizeof(payload));
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf;
	wr.wr.rdma.rkey = b.mr->rkey;
	errno = 0;
	ck_assert_int_eq(ferry_post_send_direct(a.qp, &wr, FERRY_DIRECT_NOCACHE), -1);
	ck_assert_int_eq(errno, EAGAIN);
	tu_assert_cq_empty(a.send_cq);
	ck_assert(tu_all_bytes(b.buf, b.len, 0xbb));

	/* a WR that waits for its receive holds the SQ: a plain WRITE, which
	 * needs none, is refused behind it too */
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_WRITE_WITH_IMM,
				       FERRY_SEND_SIGNALED, a.buf, 100, a.mr->lkey,
				       (uintptr_t)b.buf + 8192, b.mr->rkey), 0);
	wr.opcode = FERRY_WR_RDMA_WRITE;
	errno = 0;
	ck_assert_int_eq(ferry_post_send_direct(a.qp, &wr, 0), -1);
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert_int_eq(ferry_poll_cq(a.send_cq, 1, &wc), 0);
	ck_assert(tu_all_bytes(b.buf, 8192, 0xbb));

	/* once the receive comes, the queue drains and direct WRs run */
	ck_assert_int_eq(tu_post_recv1(b.qp, 2, NULL, 0, 0), 0);
	rnr_expect(a.send_cq, 1, FERRY_WC_SUCCESS);
	rnr_expect(b.recv_cq, 2, FERRY_WC_SUCCESS);
	ck_assert(tu_check(b.buf + 8192, 100, 1));
	ck_assert_int_eq(ferry_post_send_direct(a.qp, &wr, 0), 0);
	rnr_expect(a.send_cq, 9, FERRY_WC_SUCCESS);
	ck_assert(tu_all_bytes(b.buf, sizeof(payload), 0x5a));
}
END_TEST

START_TEST(test_init_receives_visible_when_exchange_returns)
{
	struct tu_opts o = { 0 };
	struct tu_end x = { 0 }, y = { 0 };
	struct exchange_job jx, jy;
	const struct shm_region *seen;
	uint64_t posted;
	pthread_t t;
	int sv[2];

	if (!tu_on_shm())
		return;		/* a fact about the shm provider's exchange */
	tu_end_open(&x, &o);
	tu_end_open(&y, &o);
	ck_assert_int_eq(tu_qp_to_init(x.qp, TU_QP_ACCESS_ALL), 0);
	ck_assert_int_eq(tu_qp_to_init(y.qp, TU_QP_ACCESS_ALL), 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(tu_post_recv1(y.qp, (uint64_t)i, y.buf, 64, y.mr->lkey), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	jx = (struct exchange_job){ .qp = x.qp, .sock = sv[0] };
	jy = (struct exchange_job){ .qp = y.qp, .sock = sv[1] };
	ck_assert_int_eq(pthread_create(&t, NULL, exchange_thread, &jy), 0);
	exchange_thread(&jx);
	ck_assert_int_eq(jx.rc, 0);
	/* Before y's exchange is known to have finished: */
	seen = to_sqp(x.qp)->conn->peer_region;
	posted = atomic_load(&seen->rq_prod);
	ck_assert_uint_eq(posted, 3);
	pthread_join(t, NULL);
	ck_assert_int_eq(jy.rc, 0);
	close(sv[0]);
	close(sv[1]);
	tu_end_close(&x);
	tu_end_close(&y);
}
END_TEST

Suite *rnr_suite(void)
{
	Suite *s = suite_create("rnr");
	TCase *tc;

	tc = tcase_create("retry_exceeded");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_checked_fixture(tc, rnr_setup_few, rnr_teardown);
	tcase_add_test(tc, test_send_rnr_exceeded);
	tcase_add_test(tc, test_write_imm_rnr_exceeded);
	tcase_add_test(tc, test_rnr_then_flush);
	tcase_add_test(tc, test_rnr_recv_posted_in_time);
	suite_add_tcase(s, tc);

	tc = tcase_create("retry_forever");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_checked_fixture(tc, rnr_setup_forever, rnr_teardown);
	tcase_add_test(tc, test_rnr_forever_send);
	tcase_add_test(tc, test_rnr_forever_write_imm);
	tcase_add_test(tc, test_rnr_forever_ordered);
	tcase_add_test(tc, test_rnr_direct_refused);
	suite_add_tcase(s, tc);

	tc = tcase_create("exchange");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_init_receives_visible_when_exchange_returns);
	suite_add_tcase(s, tc);
	return s;
}
