/*
 * check_ops_fork.c - work requests between two processes (across fork(),
 * heap and ferry_alloc memory of a real peer), and ferry_alloc blocks
 * registered before and after the connection, for local writes only or
 * more than a small PD's table holds; the rest of suite ops is
 * check_ops.c's.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "core-export.h"
#include "testutil.h"

/* --- across fork(): heap and ferry_alloc memory of a real peer --- */

enum { XP_LEN = 65536 };

/*
 * A receive buffer in ferry_alloc memory registered for LOCAL_WRITE only
 * (rping's choice): the sender must still be able to place a SEND there,
 * blocks registered before and after the connection alike.
 */
START_TEST(test_send_into_local_write_only_block)
{
	struct tu_opts o = { 0 };
	struct tu_end snd = { 0 }, rcv = { 0 };
	struct ferry_mr *early_mr, *late_mr;
	struct ferry_wc wc;
	uint8_t *early = ferry_alloc(4096), *late = ferry_alloc(4096);

	ck_assert_ptr_nonnull(early);
	ck_assert_ptr_nonnull(late);
	tu_end_open(&snd, &o);
	tu_end_open(&rcv, &o);
	early_mr = ferry_reg_mr(rcv.pd, early, 4096, FERRY_ACCESS_LOCAL_WRITE);
	ck_assert_msg(early_mr != NULL, "reg_mr: %s", strerror(errno));
	tu_pair_connect(&snd, &rcv, TU_QP_ACCESS_ALL);
	late_mr = ferry_reg_mr(rcv.pd, late, 4096, FERRY_ACCESS_LOCAL_WRITE);
	ck_assert_ptr_nonnull(late_mr);

	ck_assert_int_eq(tu_post_recv1(rcv.qp, 1, early, 4096, early_mr->lkey), 0);
	ck_assert_int_eq(tu_post_recv1(rcv.qp, 2, late, 4096, late_mr->lkey), 0);
	tu_fill(snd.buf, 3000, 77);
	tu_fill(snd.buf + 4096, 2000, 78);
	ck_assert_int_eq(tu_post_send1(snd.qp, 10, FERRY_WR_SEND, 0, snd.buf, 3000,
				       snd.mr->lkey, 0, 0), 0);
	ck_assert_int_eq(tu_post_send1(snd.qp, 11, FERRY_WR_SEND, 0, snd.buf + 4096, 2000,
				       snd.mr->lkey, 0, 0), 0);
	for (uint64_t id = 1; id <= 2; id++) {
		tu_poll1(rcv.recv_cq, &wc);
		ck_assert_msg(wc.status == FERRY_WC_SUCCESS, "recv %llu: %s",
			      (unsigned long long)wc.wr_id, ferry_wc_status_str(wc.status));
		ck_assert_uint_eq(wc.wr_id, id);
	}
	ck_assert(tu_check(early, 3000, 77));
	ck_assert(tu_check(late, 2000, 78));
	ck_assert_int_eq(ferry_dereg_mr(early_mr), 0);
	ck_assert_int_eq(ferry_dereg_mr(late_mr), 0);
	tu_pair_close(&snd, &rcv);
	ferry_free(early);
	ferry_free(late);
}
END_TEST

static int ops_cross_child(int sock, int ctl, void *arg)
{
	struct tu_opts o = { .max_inline = 64 };
	struct tu_remote mine, peer;
	struct tu_end e;
	struct ferry_wc wc;
	char *heap;
	struct ferry_mr *heap_mr;
	uint64_t *result;
	uint32_t verdict;

	tu_child_end_open(&e, &o);
	heap = malloc(XP_LEN);
	TU_CHILD_CHECK(heap != NULL);
	memset(heap, 0, XP_LEN);
	heap_mr = ferry_reg_mr(e.pd, heap, XP_LEN, FERRY_ACCESS_LOCAL_WRITE |
			       FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ);
	TU_CHILD_CHECK(heap_mr != NULL);
	mine = (struct tu_remote){ (uintptr_t)e.buf, e.len, e.mr->rkey,
				   e.qp->qp_num, (uintptr_t)heap, XP_LEN,
				   heap_mr->rkey, 0 };
	TU_CHILD_CHECK(tu_msg_send(sock, &mine, sizeof(mine)) == 0);
	TU_CHILD_CHECK(tu_msg_recv(sock, &peer, sizeof(peer), TU_WAIT_MS) == 0);
	TU_CHILD_CHECK(ferry_qp_connect_sock(e.qp, sock, TU_QP_ACCESS_ALL) == 0);
	TU_CHILD_CHECK(tu_post_recv1(e.qp, 1, e.buf + 32768, 4096, e.mr->lkey) == 0);

	/* the parent WRITEs into both regions, then SENDs */
	TU_CHILD_CHECK(tu_child_poll(e.recv_cq, &wc, 1, TU_WAIT_MS) == 1);
	TU_CHILD_CHECK(wc.status == FERRY_WC_SUCCESS && wc.wr_id == 1);
	TU_CHILD_CHECK(wc.opcode == FERRY_WC_RECV && wc.byte_len == 100);
	TU_CHILD_CHECK((wc.wc_flags & FERRY_WC_WITH_IMM) && wc.imm_data == htonl(42));
	TU_CHILD_CHECK(tu_check(e.buf + 32768, 100, 502));
	TU_CHILD_CHECK(tu_check(e.buf + 1000, 5000, 500));
	TU_CHILD_CHECK(tu_check(heap + 2000, 6000, 501));

	/* fetch-add on the parent's shared memory, READ of its heap */
	result = (uint64_t *)(e.buf + 16384);
	TU_CHILD_CHECK(tu_post_atomic(e.qp, 2, FERRY_WR_ATOMIC_FETCH_AND_ADD,
				      result, e.mr->lkey, peer.addr + 64,
				      peer.rkey, 1000, 0) == 0);
	TU_CHILD_CHECK(tu_child_poll(e.send_cq, &wc, 1, TU_WAIT_MS) == 1);
	TU_CHILD_CHECK(wc.status == FERRY_WC_SUCCESS && wc.wr_id == 2);
	TU_CHILD_CHECK(*result == 7);
	TU_CHILD_CHECK(tu_post_send1(e.qp, 3, FERRY_WR_RDMA_READ, 0, e.buf + 20000,
				     3000, e.mr->lkey, peer.addr2 + 300,
				     peer.rkey2) == 0);
	TU_CHILD_CHECK(tu_child_poll(e.send_cq, &wc, 1, TU_WAIT_MS) == 1);
	TU_CHILD_CHECK(wc.status == FERRY_WC_SUCCESS && wc.wr_id == 3);
	TU_CHILD_CHECK(wc.opcode == FERRY_WC_RDMA_READ && wc.byte_len == 3000);
	TU_CHILD_CHECK(tu_check(e.buf + 20000, 3000, 503));

	/* WRITE into the parent's heap, then report */
	tu_fill(e.buf + 40000, 1500, 504);
	TU_CHILD_CHECK(tu_post_send1(e.qp, 4, FERRY_WR_RDMA_WRITE, 0, e.buf + 40000,
				     1500, e.mr->lkey, peer.addr2 + 10000,
				     peer.rkey2) == 0);
	verdict = 0x600d;
	memcpy(e.buf + 50000, &verdict, sizeof(verdict));
	TU_CHILD_CHECK(tu_post_send1(e.qp, 5, FERRY_WR_SEND, 0, e.buf + 50000, 4,
				     e.mr->lkey, 0, 0) == 0);
	TU_CHILD_CHECK(tu_child_poll(e.send_cq, &wc, 1, TU_WAIT_MS) == 1);
	TU_CHILD_CHECK(wc.status == FERRY_WC_SUCCESS && wc.wr_id == 4);
	TU_CHILD_CHECK(tu_child_poll(e.send_cq, &wc, 1, TU_WAIT_MS) == 1);
	TU_CHILD_CHECK(wc.status == FERRY_WC_SUCCESS && wc.wr_id == 5);

	/* stay until the parent is done with our memory */
	TU_CHILD_CHECK(tu_recv_u32(ctl, &verdict, TU_WAIT_MS) == 0);
	TU_CHILD_CHECK(ferry_dereg_mr(heap_mr) == 0);
	free(heap);
	tu_child_end_close(&e);
	(void)arg;
	return 0;
}

START_TEST(test_cross_process)
{
	struct tu_opts o = { .max_inline = 64 };
	struct tu_remote mine, peer;
	struct tu_end p;
	struct ferry_wc wc;
	struct ferry_sge sg;
	struct ferry_send_wr wr;
	char *heap;
	struct ferry_mr *heap_mr;
	int sock, ctl;
	pid_t pid;
	uint32_t verdict;

	/* fork first: the child inherits none of our ferry state */
	pid = tu_fork(ops_cross_child, NULL, &sock, &ctl);
	tu_end_open(&p, &o);
	heap = malloc(XP_LEN);
	ck_assert_ptr_nonnull(heap);
	tu_fill(heap, XP_LEN, 0);
	tu_fill(heap + 300, 3000, 503);
	heap_mr = ferry_reg_mr(p.pd, heap, XP_LEN, FERRY_ACCESS_LOCAL_WRITE |
			       FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ);
	ck_assert_ptr_nonnull(heap_mr);
	*(uint64_t *)(p.buf + 64) = 7;

	mine = (struct tu_remote){ (uintptr_t)p.buf, p.len, p.mr->rkey,
				   p.qp->qp_num, (uintptr_t)heap, XP_LEN,
				   heap_mr->rkey, 0 };
	ck_assert_int_eq(tu_msg_send(sock, &mine, sizeof(mine)), 0);
	ck_assert_int_eq(tu_msg_recv(sock, &peer, sizeof(peer), TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_qp_connect_sock(p.qp, sock, TU_QP_ACCESS_ALL), 0);
	ck_assert_int_eq(tu_post_recv1(p.qp, 9, p.buf + 30000, 64, p.mr->lkey), 0);
	close(sock);

	tu_fill(p.buf + 1000, 5000, 500);
	tu_fill(p.buf + 8000, 6000, 501);
	tu_fill(p.buf + 15000, 100, 502);
	ck_assert_int_eq(tu_post_send1(p.qp, 1, FERRY_WR_RDMA_WRITE, 0, p.buf + 1000,
				       5000, p.mr->lkey, peer.addr + 1000, peer.rkey), 0);
	ck_assert_int_eq(tu_post_send1(p.qp, 2, FERRY_WR_RDMA_WRITE, 0, p.buf + 8000,
				       6000, p.mr->lkey, peer.addr2 + 2000,
				       peer.rkey2), 0);
	sg = (struct ferry_sge){ (uintptr_t)(p.buf + 15000), 100, p.mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 3;
	wr.opcode = FERRY_WR_SEND_WITH_IMM;
	wr.imm_data = htonl(42);
	wr.sg_list = &sg;
	wr.num_sge = 1;
	tu_post_send_ok(p.qp, &wr);
	for (uint64_t i = 1; i <= 3; i++) {
		tu_poll1(p.send_cq, &wc);
		ck_assert_msg(wc.status == FERRY_WC_SUCCESS, "wr %llu: %s",
			      (unsigned long long)wc.wr_id,
			      ferry_wc_status_str(wc.status));
		ck_assert_uint_eq(wc.wr_id, i);
	}

	/* the child's report; by then its atomic and WRITE have landed */
	tu_poll1(p.recv_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.wr_id, 9);
	ck_assert_uint_eq(wc.byte_len, 4);
	memcpy(&verdict, p.buf + 30000, 4);
	ck_assert_uint_eq(verdict, 0x600d);
	ck_assert_uint_eq(*(uint64_t *)(p.buf + 64), 1007);
	ck_assert(tu_check(heap + 10000, 1500, 504));
	ck_assert(tu_check(heap + 300, 3000, 503));

	ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	close(ctl);
	ck_assert_int_eq(ferry_dereg_mr(heap_mr), 0);
	free(heap);
	tu_end_close(&p);
}
END_TEST

/*
 * A PD sized for one MR with remote access takes more once connected (a
 * socket's iomaps): on shm the rest of its table is made then and reaches
 * the peer before the keys can, and the peer writes into each.
 */
START_TEST(test_small_pd_grows_connected)
{
	struct tu_opts o = { .buf_len = 1 << 16, .pd_max_remote = 1 };
	struct ferry_mr *extra[3];
	struct tu_end x, y;
	struct ferry_wc wc;
	int i;

	tu_pair_open(&x, &y, &o);	/* x.mr and y.mr fill the small tables */
	for (i = 0; i < 3; i++) {
		extra[i] = ferry_reg_mr(y.pd, y.buf + 4096 * (i + 1), 4096,
					FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE);
		ck_assert_ptr_nonnull(extra[i]);
	}
	tu_fill(x.buf, 3 * 4096, 7);
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(tu_post_send1(x.qp, (uint64_t)i, FERRY_WR_RDMA_WRITE,
					       FERRY_SEND_SIGNALED, x.buf + 4096 * i, 4096,
					       x.mr->lkey, (uintptr_t)(y.buf + 4096 * (i + 1)),
					       extra[i]->rkey), 0);
	for (i = 0; i < 3; i++) {
		tu_poll1(x.send_cq, &wc);
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	}
	ck_assert(tu_check(y.buf + 4096, 3 * 4096, 7));
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(ferry_dereg_mr(extra[i]), 0);
	tu_pair_close(&x, &y);
}
END_TEST

Suite *ops_fork_suite(void)
{
	Suite *s = suite_create("ops");
	TCase *tc;

	tc = tcase_create("blocks");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_send_into_local_write_only_block);
	tcase_add_test(tc, test_small_pd_grows_connected);
	suite_add_tcase(s, tc);

	tc = tcase_create("cross_process");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_cross_process);
	suite_add_tcase(s, tc);
	return s;
}
