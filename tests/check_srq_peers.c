/*
 * check_srq_peers.c - SRQs with peers in other processes: two peer
 * processes (fork) draining one SRQ, every message once and its
 * completion naming the QP it came on; and (shm) a peer forging
 * deliveries for receives it was never given, kicking our monitor to
 * fill its window, which must not make us consume or count any of them.
 * Suite "srq", with check_srq.c.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "check_suites.h"
#include "srqtest.h"
#include "shm-internal.h"

/* --- two peer processes drain one SRQ --- */

struct srq_msg {
	uint32_t peer;		/* which child */
	uint32_t seq;
};


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
		srq_post(&rx, srq_q, i);
	pid = tu_fork(srq_forger_child, NULL, &sock, &ctl);
	hq = srq_qp_create(&rx, srq_q);
	ck_assert_ptr_nonnull(hq);
	srq_connect_child(&rx, hq, sock);
	ck_assert_int_eq(tu_recv_u32(ctl, &ready, TU_WAIT_MS), 0);

	/* Meanwhile the honest sender's messages arrive, on its own QP. */
	ssrq = to_ssrq(srq_q);
	for (int k = 0; k < 20; k++) {
		struct ferry_wc wc;

		srq_send(&tx, 1, 48);
		tu_poll1(rx.recv_cq, &wc);
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
		ck_assert_uint_eq(wc.qp_num, rx.qp->qp_num);
		srq_post(&rx, srq_q, (uint32_t)wc.wr_id);
		/* The forger's window never holds more than a window. */
		ck_assert_uint_le(to_sqp(hq)->rq_prod - to_sqp(hq)->rq_cons, SHM_SRQ_WINDOW);
		tu_sleep_ms(SRQ_H_FORGE_MS / 20);
	}
	tu_assert_cq_empty(rx.recv_cq);	/* nothing of the forger's was taken */
	ck_assert_int_eq(tu_qp_state(hq), FERRY_QPS_RTS);
	pthread_mutex_lock(&ssrq->lock);
	ck_assert_uint_eq(ssrq->posted, 16);
	pthread_mutex_unlock(&ssrq->lock);

	/* ERR: the forger's window comes back; every receive is there still:
	 * with the limit at 15, the first receive leaves 15, the second 14. */
	ck_assert_int_eq(ferry_modify_qp(hq, &err, FERRY_QP_STATE), 0);
	srq_expect_event(rx.ctx, FERRY_EVENT_QP_LAST_WQE_REACHED, hq);
	srq_arm(srq_q, 15);
	tu_end_open(&s2, &o);
	r2 = rx;
	r2.qp = srq_qp_create(&rx, srq_q);
	ck_assert_ptr_nonnull(r2.qp);
	tu_pair_connect(&r2, &s2, TU_QP_ACCESS_ALL);
	srq_send(&s2, 1, 16);
	srq_recv(rx.recv_cq, 1, r2.qp->qp_num, NULL);
	ck_assert(!srq_fd_ready(rx.ctx, S_QUIET_MS));
	srq_send(&s2, 1, 16);
	srq_recv(rx.recv_cq, 1, r2.qp->qp_num, NULL);
	srq_expect_event(rx.ctx, FERRY_EVENT_SRQ_LIMIT_REACHED, srq_q);

	ck_assert_int_eq(tu_send_u32(ctl, SRQ_CTL_DONE), 0);
	ck_assert_int_eq(tu_wait_child(pid, srq_child_ms()), 0);
	close(ctl);
	ck_assert_int_eq(ferry_destroy_qp(r2.qp), 0);
	ck_assert_int_eq(ferry_destroy_qp(hq), 0);
	tu_end_close(&s2);
}
END_TEST

Suite *srq_peers_suite(void)
{
	Suite *su = suite_create("srq");
	TCase *tc = tcase_create("peers");

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
