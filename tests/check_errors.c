/*
 * check_errors.c - work requests that must fail, with the status ibverbs
 * gives them, and the memory they aimed at verified untouched: bad rkey,
 * out-of-bounds remote address, missing remote access rights (MR and QP),
 * misaligned atomics, bad local keys, a SEND larger than the receive; after
 * each error the QP is in ERR and later WRs flush.
 *
 * Statuses.  On shm each fault has exactly one status.  An RDMA device may
 * classify some faults differently and still be within ibverbs: IBA leaves
 * the responder a choice of NAK for some faults, and the requester a choice
 * of local error class.  Where Soft-RoCE (rdma_rxe) differs, the test
 * accepts its status on verbs only (err_expect_either), still asserting an
 * error, the WR it belongs to, and the target memory untouched.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "testutil.h"

enum { ERR_LEN = 65536 };

static struct tu_end a, b;
static char *snapshot_b;	/* b.buf as it was before the failing WR */

static void err_open(int b_mr_access, int qp_access)
{
	struct tu_opts oa = { .buf_len = ERR_LEN };
	struct tu_opts ob = { .buf_len = ERR_LEN, .mr_access = b_mr_access };

	tu_end_open(&a, &oa);
	tu_end_open(&b, &ob);
	tu_pair_connect(&a, &b, qp_access);
	tu_fill(a.buf, ERR_LEN, 1);
	tu_fill(b.buf, ERR_LEN, 2);
	snapshot_b = malloc(ERR_LEN);
	ck_assert_ptr_nonnull(snapshot_b);
	memcpy(snapshot_b, b.buf, ERR_LEN);
}

static void err_setup(void)
{
	err_open(TU_ACCESS_ALL, TU_QP_ACCESS_ALL);
}

static void err_teardown(void)
{
	free(snapshot_b);
	snapshot_b = NULL;
	tu_pair_close(&a, &b);
}

static void err_assert_b_untouched(void)
{
	ck_assert_msg(memcmp(b.buf, snapshot_b, ERR_LEN) == 0,
		      "the target memory was modified");
}

/* One send completion: @wr_id with @status. */
static void err_expect(struct ferry_cq *cq, uint64_t wr_id,
		       enum ferry_wc_status status)
{
	struct ferry_wc wc;

	tu_poll1(cq, &wc);
	ck_assert_msg(wc.status == status, "wr %llu: status %s, expected %s",
		      (unsigned long long)wc.wr_id, ferry_wc_status_str(wc.status),
		      ferry_wc_status_str(status));
	ck_assert_uint_eq(wc.wr_id, wr_id);
}

/*
 * err_expect_either - as err_expect on shm; on another provider @status or
 * @alt, the other status ibverbs allows a device for the same fault.
 */
static void err_expect_either(struct ferry_cq *cq, uint64_t wr_id,
			      enum ferry_wc_status status, enum ferry_wc_status alt)
{
	struct ferry_wc wc;

	if (tu_on_shm()) {
		err_expect(cq, wr_id, status);
		return;
	}
	tu_poll1(cq, &wc);
	ck_assert_msg(wc.status == status || wc.status == alt,
		      "wr %llu: status %s, expected %s or %s",
		      (unsigned long long)wc.wr_id, ferry_wc_status_str(wc.status),
		      ferry_wc_status_str(status), ferry_wc_status_str(alt));
	ck_assert_uint_eq(wc.wr_id, wr_id);
}

/*
 * After an error completion on a: a is in ERR, and a WR posted now
 * completes with WR_FLUSH_ERR without touching b.
 */
static void err_assert_flushing(void)
{
	ck_assert(tu_wait_qp_state(a.qp, FERRY_QPS_ERR, TU_WAIT_MS));
	ck_assert_int_eq(a.qp->state, FERRY_QPS_ERR);
	ck_assert_int_eq(tu_post_send1(a.qp, 999, FERRY_WR_RDMA_WRITE,
				       FERRY_SEND_SIGNALED, a.buf, 64, a.mr->lkey,
				       (uintptr_t)b.buf, b.mr->rkey), 0);
	err_expect(a.send_cq, 999, FERRY_WC_WR_FLUSH_ERR);
	ck_assert_int_eq(tu_post_recv1(a.qp, 998, a.buf, 64, a.mr->lkey), 0);
	err_expect(a.recv_cq, 998, FERRY_WC_WR_FLUSH_ERR);
	tu_assert_cq_empty(a.send_cq);
	err_assert_b_untouched();
}

static int err_write(uint64_t wr_id, size_t len, uint64_t raddr, uint32_t rkey)
{
	return tu_post_send1(a.qp, wr_id, FERRY_WR_RDMA_WRITE, FERRY_SEND_SIGNALED,
			     a.buf, (uint32_t)len, a.mr->lkey, raddr, rkey);
}

START_TEST(test_write_bad_rkey)
{
	ck_assert_int_eq(err_write(1, 256, (uintptr_t)b.buf, b.mr->rkey ^ 0x5a5a),
			 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	err_assert_b_untouched();
	err_assert_flushing();
}
END_TEST

START_TEST(test_write_lkey_as_rkey)
{
	/* a key of a's MR is no key of b's (unless the numbers collide) */
	if (a.mr->rkey == b.mr->rkey)
		return;
	ck_assert_int_eq(err_write(1, 64, (uintptr_t)b.buf, a.mr->rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	err_assert_b_untouched();
}
END_TEST

START_TEST(test_write_out_of_bounds)
{
	/* straddles the end of b's MR: not even the part inside is written */
	ck_assert_int_eq(err_write(1, 8, (uintptr_t)b.buf + ERR_LEN - 4,
				   b.mr->rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	err_assert_b_untouched();
	err_assert_flushing();
}
END_TEST

START_TEST(test_write_below_mr)
{
	ck_assert_int_eq(err_write(1, 16, (uintptr_t)b.buf - 8, b.mr->rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	err_assert_b_untouched();
}
END_TEST

START_TEST(test_write_wrapping_address)
{
	/* remote_addr + length overflows 64 bits */
	ck_assert_int_eq(err_write(1, 4096, UINT64_MAX - 100, b.mr->rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	err_assert_b_untouched();
}
END_TEST

START_TEST(test_read_out_of_bounds)
{
	char *before = malloc(ERR_LEN);

	ck_assert_ptr_nonnull(before);
	memcpy(before, a.buf, ERR_LEN);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_READ,
				       FERRY_SEND_SIGNALED, a.buf, 128, a.mr->lkey,
				       (uintptr_t)b.buf + ERR_LEN - 64, b.mr->rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	ck_assert_msg(memcmp(before, a.buf, ERR_LEN) == 0,
		      "the READ destination was written");
	free(before);
	err_assert_b_untouched();
	err_assert_flushing();
}
END_TEST

START_TEST(test_read_bad_rkey)
{
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_READ,
				       FERRY_SEND_SIGNALED, a.buf, 128, a.mr->lkey,
				       (uintptr_t)b.buf, b.mr->rkey + 1000), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	ck_assert(tu_check(a.buf, 128, 1));
}
END_TEST

START_TEST(test_chain_error_then_flush)
{
	struct ferry_sge sg1 = { (uintptr_t)a.buf, 64, a.mr->lkey };
	struct ferry_sge sg2 = { (uintptr_t)a.buf + 64, 64, a.mr->lkey };
	struct ferry_send_wr w1, w2, *bad = NULL;

	/* the first WR fails; the second, valid one, must not execute */
	memset(&w1, 0, sizeof(w1));
	w1.wr_id = 1;
	w1.opcode = FERRY_WR_RDMA_WRITE;
	w1.send_flags = FERRY_SEND_SIGNALED;
	w1.sg_list = &sg1;
	w1.num_sge = 1;
	w1.wr.rdma.remote_addr = (uintptr_t)b.buf;
	w1.wr.rdma.rkey = ~b.mr->rkey;
	w2 = w1;
	w2.wr_id = 2;
	w2.sg_list = &sg2;
	w2.wr.rdma.rkey = b.mr->rkey;
	w1.next = &w2;
	ck_assert_int_eq(ferry_post_send(a.qp, &w1, &bad), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	err_expect(a.send_cq, 2, FERRY_WC_WR_FLUSH_ERR);
	err_assert_b_untouched();
	err_assert_flushing();
}
END_TEST

/* b's MR lacks one remote right */

static void err_setup_no_remote_write(void)
{
	err_open(FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_READ |
		 FERRY_ACCESS_REMOTE_ATOMIC, TU_QP_ACCESS_ALL);
}

static void err_setup_no_remote_read(void)
{
	err_open(FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE |
		 FERRY_ACCESS_REMOTE_ATOMIC, TU_QP_ACCESS_ALL);
}

static void err_setup_no_remote_atomic(void)
{
	err_open(FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE |
		 FERRY_ACCESS_REMOTE_READ, TU_QP_ACCESS_ALL);
}

START_TEST(test_mr_no_remote_write)
{
	ck_assert_int_eq(err_write(1, 64, (uintptr_t)b.buf, b.mr->rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	err_assert_b_untouched();
	err_assert_flushing();
}
END_TEST

START_TEST(test_mr_no_remote_write_imm)
{
	ck_assert_int_eq(tu_post_recv1(b.qp, 5, b.buf + 4096, 64, b.mr->lkey), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_WRITE_WITH_IMM,
				       FERRY_SEND_SIGNALED, a.buf, 64, a.mr->lkey,
				       (uintptr_t)b.buf, b.mr->rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	err_assert_b_untouched();
}
END_TEST

START_TEST(test_mr_no_remote_read)
{
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_READ,
				       FERRY_SEND_SIGNALED, a.buf, 64, a.mr->lkey,
				       (uintptr_t)b.buf, b.mr->rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	ck_assert(tu_check(a.buf, 64, 1));
	err_assert_flushing();
}
END_TEST

START_TEST(test_mr_no_remote_atomic)
{
	uint64_t *target = (uint64_t *)b.buf;
	uint64_t *result = (uint64_t *)a.buf;
	uint64_t old_result = *result;

	*target = 10;
	memcpy(snapshot_b, b.buf, 8);
	ck_assert_int_eq(tu_post_atomic(a.qp, 1, FERRY_WR_ATOMIC_FETCH_AND_ADD,
					result, a.mr->lkey, (uintptr_t)target,
					b.mr->rkey, 5, 0), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	ck_assert_uint_eq(*target, 10);
	ck_assert_uint_eq(*result, old_result);
	err_assert_flushing();
}
END_TEST

START_TEST(test_mr_no_remote_atomic_cas)
{
	uint64_t *target = (uint64_t *)b.buf + 8;

	*target = 10;
	memcpy(snapshot_b, b.buf, ERR_LEN);
	ck_assert_int_eq(tu_post_atomic(a.qp, 1, FERRY_WR_ATOMIC_CMP_AND_SWP,
					a.buf, a.mr->lkey, (uintptr_t)target,
					b.mr->rkey, 10, 20), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	ck_assert_uint_eq(*target, 10);
	err_assert_b_untouched();
}
END_TEST

/* the QP's own access flags gate remote access too */

static void err_setup_qp_read_only(void)
{
	err_open(TU_ACCESS_ALL, FERRY_ACCESS_REMOTE_READ);
}

/*
 * A request b's QP does not permit: rdma_rxe NAKs it as an invalid request
 * (REM_INV_REQ_ERR: the opcode is not enabled on the QP) where shm reports
 * a remote access error.
 */
START_TEST(test_qp_access_denies_write)
{
	ck_assert_int_eq(err_write(1, 64, (uintptr_t)b.buf, b.mr->rkey), 0);
	err_expect_either(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR, FERRY_WC_REM_INV_REQ_ERR);
	err_assert_b_untouched();
}
END_TEST

START_TEST(test_qp_access_denies_atomic)
{
	uint64_t *target = (uint64_t *)b.buf;

	*target = 3;
	memcpy(snapshot_b, b.buf, 8);
	ck_assert_int_eq(tu_post_atomic(a.qp, 1, FERRY_WR_ATOMIC_FETCH_AND_ADD,
					a.buf, a.mr->lkey, (uintptr_t)target,
					b.mr->rkey, 1, 0), 0);
	err_expect_either(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR, FERRY_WC_REM_INV_REQ_ERR);
	ck_assert_uint_eq(*target, 3);
}
END_TEST

START_TEST(test_qp_access_allows_read)
{
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_READ,
				       FERRY_SEND_SIGNALED, a.buf, 64, a.mr->lkey,
				       (uintptr_t)b.buf + 64, b.mr->rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_SUCCESS);
	ck_assert_mem_eq(a.buf, b.buf + 64, 64);
}
END_TEST

START_TEST(test_atomic_misaligned)
{
	uint64_t *result = (uint64_t *)(a.buf + 8);
	uint64_t old_result = *result;

	/*
	 * ibverbs requires 8-byte aligned atomics; the status may vary.  A
	 * device may also refuse the WR at post (EINVAL, as rdma_rxe's
	 * library does): then nothing was sent and the QP is unharmed.
	 */
	if (tu_post_atomic(a.qp, 1, FERRY_WR_ATOMIC_FETCH_AND_ADD, result,
			   a.mr->lkey, (uintptr_t)b.buf + 4, b.mr->rkey, 1, 0) != 0) {
		ck_assert_msg(!tu_on_shm(), "shm refused a misaligned atomic at post");
		ck_assert_int_eq(errno, EINVAL);
		tu_assert_cq_empty(a.send_cq);
		ck_assert_uint_eq(*result, old_result);
		err_assert_b_untouched();
		ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_RTS);
		return;
	}
	{
		struct ferry_wc wc;

		tu_poll1(a.send_cq, &wc);
		ck_assert_uint_eq(wc.wr_id, 1);
		ck_assert_msg(wc.status != FERRY_WC_SUCCESS,
			      "misaligned atomic succeeded");
		ck_assert_msg(wc.status != FERRY_WC_WR_FLUSH_ERR,
			      "misaligned atomic flushed instead of failing");
	}
	ck_assert_uint_eq(*result, old_result);
	err_assert_b_untouched();
	err_assert_flushing();
}
END_TEST

START_TEST(test_atomic_heap_memory)
{
	char *heap = aligned_alloc(64, 4096);
	struct ferry_mr *mr;
	struct ferry_wc wc;

	/*
	 * On shm atomics need ferry_alloc memory: heap memory refuses them.
	 * An RDMA device runs them on any registered memory.
	 */
	ck_assert_ptr_nonnull(heap);
	memset(heap, 0x33, 4096);
	errno = 0;
	mr = ferry_reg_mr(b.pd, heap, 4096, TU_ACCESS_ALL);
	if (!tu_on_shm()) {
		uint64_t swapped = 7;

		ck_assert_ptr_nonnull(mr);
		ck_assert_int_eq(tu_post_atomic(a.qp, 1, FERRY_WR_ATOMIC_CMP_AND_SWP,
						a.buf, a.mr->lkey, (uintptr_t)heap,
						mr->rkey, 0x3333333333333333ULL, 7), 0);
		tu_poll1(a.send_cq, &wc);
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
		ck_assert(memcmp(heap, &swapped, sizeof(swapped)) == 0);
		ck_assert(tu_all_bytes(heap + 8, 4096 - 8, 0x33));
		ck_assert_int_eq(ferry_dereg_mr(mr), 0);
		free(heap);
		return;
	}
	if (!mr) {
		ck_assert_int_ne(errno, 0);	/* refused at registration */
		free(heap);
		return;
	}
	ck_assert_int_eq(tu_post_atomic(a.qp, 1, FERRY_WR_ATOMIC_CMP_AND_SWP,
					a.buf, a.mr->lkey, (uintptr_t)heap,
					mr->rkey, 0x3333333333333333ULL, 7), 0);
	tu_poll1(a.send_cq, &wc);
	ck_assert_uint_eq(wc.wr_id, 1);
	ck_assert_int_ne(wc.status, FERRY_WC_SUCCESS);
	ck_assert(tu_all_bytes(heap, 4096, 0x33));
	ck_assert_int_eq(ferry_dereg_mr(mr), 0);
	free(heap);
}
END_TEST

START_TEST(test_bad_lkey)
{
	ck_assert_int_eq(tu_post_recv1(b.qp, 5, b.buf + 8192, 256, b.mr->lkey), 0);
	memcpy(snapshot_b, b.buf, ERR_LEN);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_SEND, FERRY_SEND_SIGNALED,
				       a.buf, 64, a.mr->lkey ^ 0x777, 0, 0), 0);
	/* an lkey no MR has: rdma_rxe fails the WR as invalid (LOC_QP_OP_ERR) */
	err_expect_either(a.send_cq, 1, FERRY_WC_LOC_PROT_ERR, FERRY_WC_LOC_QP_OP_ERR);
	err_assert_b_untouched();
	err_assert_flushing();
}
END_TEST

START_TEST(test_bad_lkey_write)
{
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_WRITE,
				       FERRY_SEND_SIGNALED, a.buf, 64,
				       a.mr->lkey + 12345, (uintptr_t)b.buf,
				       b.mr->rkey), 0);
	err_expect_either(a.send_cq, 1, FERRY_WC_LOC_PROT_ERR, FERRY_WC_LOC_QP_OP_ERR);
	err_assert_b_untouched();
}
END_TEST

START_TEST(test_lkey_out_of_bounds)
{
	/* a valid lkey, but the SGE runs past the end of its MR */
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_WRITE,
				       FERRY_SEND_SIGNALED, a.buf + ERR_LEN - 32, 64,
				       a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_LOC_PROT_ERR);
	err_assert_b_untouched();
}
END_TEST

START_TEST(test_read_into_readonly_mr)
{
	char *ro = ferry_alloc(4096);
	struct ferry_mr *mr;

	/* a READ writes local memory: its MR needs LOCAL_WRITE */
	ck_assert_ptr_nonnull(ro);
	memset(ro, 0x44, 4096);
	mr = ferry_reg_mr(a.pd, ro, 4096, FERRY_ACCESS_REMOTE_READ);
	ck_assert_ptr_nonnull(mr);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_READ,
				       FERRY_SEND_SIGNALED, ro, 64, mr->lkey,
				       (uintptr_t)b.buf, b.mr->rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_LOC_PROT_ERR);
	ck_assert(tu_all_bytes(ro, 4096, 0x44));
	ck_assert_int_eq(ferry_dereg_mr(mr), 0);
	ferry_free(ro);
}
END_TEST

START_TEST(test_send_too_long)
{
	/* 300 bytes into a 100-byte receive */
	ck_assert_int_eq(tu_post_recv1(b.qp, 5, b.buf + 1000, 100, b.mr->lkey), 0);
	memcpy(snapshot_b, b.buf, ERR_LEN);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_SEND, FERRY_SEND_SIGNALED,
				       a.buf, 300, a.mr->lkey, 0, 0), 0);
	/*
	 * rdma_rxe finds the receive too small while placing the data and
	 * NAKs with a remote operation error (REM_OP_ERR) instead of the
	 * invalid-request NAK of a length error.
	 */
	err_expect_either(a.send_cq, 1, FERRY_WC_REM_INV_REQ_ERR, FERRY_WC_REM_OP_ERR);
	err_expect_either(b.recv_cq, 5, FERRY_WC_LOC_LEN_ERR, FERRY_WC_LOC_QP_OP_ERR);
	/* the receive buffer's content is undefined; nothing beyond it moved */
	ck_assert_mem_eq(b.buf, snapshot_b, 1000);
	ck_assert_mem_eq(b.buf + 1100, snapshot_b + 1100, ERR_LEN - 1100);
	/* both ends are in error now */
	ck_assert(tu_wait_qp_state(b.qp, FERRY_QPS_ERR, TU_WAIT_MS));
	memcpy(snapshot_b, b.buf, ERR_LEN);
	err_assert_flushing();
}
END_TEST

START_TEST(test_recv_flush_after_error)
{
	/* a's posted receives flush when a's send fails */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(tu_post_recv1(a.qp, 10 + i, a.buf + 256 * i, 256,
					       a.mr->lkey), 0);
	ck_assert_int_eq(err_write(1, 64, (uintptr_t)b.buf, 0xdeadbeef), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	for (int i = 0; i < 3; i++)
		err_expect(a.recv_cq, 10 + (uint64_t)i, FERRY_WC_WR_FLUSH_ERR);
	tu_assert_cq_empty(a.recv_cq);
	err_assert_b_untouched();
}
END_TEST

START_TEST(test_deregistered_rkey)
{
	struct ferry_mr *extra = ferry_reg_mr(b.pd, b.buf + 4096, 4096,
					      TU_ACCESS_ALL);
	uint32_t rkey;

	/* an rkey that was valid and is no more */
	ck_assert_ptr_nonnull(extra);
	rkey = extra->rkey;
	ck_assert_int_eq(ferry_dereg_mr(extra), 0);
	ck_assert_int_eq(err_write(1, 64, (uintptr_t)b.buf + 4096, rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	err_assert_b_untouched();
}
END_TEST

/* The key of an MR without remote access opens nothing to the peer. */
START_TEST(test_write_local_only_key)
{
	struct ferry_mr *local = ferry_reg_mr(b.pd, b.buf + 4096, 4096,
					      FERRY_ACCESS_LOCAL_WRITE);

	ck_assert_ptr_nonnull(local);
	ck_assert_int_eq(err_write(1, 64, (uintptr_t)b.buf + 4096, local->rkey), 0);
	err_expect(a.send_cq, 1, FERRY_WC_REM_ACCESS_ERR);
	err_assert_b_untouched();
	ck_assert_int_eq(ferry_dereg_mr(local), 0);
}
END_TEST

static TCase *err_tcase(Suite *s, const char *name, void (*setup)(void))
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_checked_fixture(tc, setup, err_teardown);
	suite_add_tcase(s, tc);
	return tc;
}

Suite *errors_suite(void)
{
	Suite *s = suite_create("errors");
	TCase *tc;

	tc = err_tcase(s, "remote", err_setup);
	tcase_add_test(tc, test_write_bad_rkey);
	tcase_add_test(tc, test_write_lkey_as_rkey);
	tcase_add_test(tc, test_write_out_of_bounds);
	tcase_add_test(tc, test_write_below_mr);
	tcase_add_test(tc, test_write_wrapping_address);
	tcase_add_test(tc, test_read_out_of_bounds);
	tcase_add_test(tc, test_read_bad_rkey);
	tcase_add_test(tc, test_chain_error_then_flush);
	tcase_add_test(tc, test_atomic_misaligned);
	tcase_add_test(tc, test_atomic_heap_memory);
	tcase_add_test(tc, test_deregistered_rkey);
	tcase_add_test(tc, test_write_local_only_key);

	tc = err_tcase(s, "no_remote_write", err_setup_no_remote_write);
	tcase_add_test(tc, test_mr_no_remote_write);
	tcase_add_test(tc, test_mr_no_remote_write_imm);
	tc = err_tcase(s, "no_remote_read", err_setup_no_remote_read);
	tcase_add_test(tc, test_mr_no_remote_read);
	tc = err_tcase(s, "no_remote_atomic", err_setup_no_remote_atomic);
	tcase_add_test(tc, test_mr_no_remote_atomic);
	tcase_add_test(tc, test_mr_no_remote_atomic_cas);
	tc = err_tcase(s, "qp_access", err_setup_qp_read_only);
	tcase_add_test(tc, test_qp_access_denies_write);
	tcase_add_test(tc, test_qp_access_denies_atomic);
	tcase_add_test(tc, test_qp_access_allows_read);

	tc = err_tcase(s, "local", err_setup);
	tcase_add_test(tc, test_bad_lkey);
	tcase_add_test(tc, test_bad_lkey_write);
	tcase_add_test(tc, test_lkey_out_of_bounds);
	tcase_add_test(tc, test_read_into_readonly_mr);
	tcase_add_test(tc, test_send_too_long);
	tcase_add_test(tc, test_recv_flush_after_error);
	return s;
}
