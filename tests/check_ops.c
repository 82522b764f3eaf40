/*
 * check_ops.c - every work-request opcode with its data verified and the
 * fields of its work completions checked: SEND (with immediate), RDMA WRITE
 * (with immediate), RDMA READ, both atomics; several SGEs on both sides,
 * inline data, signaled and unsignaled WRs, fences, WR chains, posting
 * errors; with ferry_alloc memory and with plain heap memory, in one
 * process.  Across fork(), and blocks registered around a connection:
 * check_ops_fork.c (the same suite, ops).
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

static struct tu_end a, b;

static void ops_open(bool malloc_buf, bool no_sig_all)
{
	struct tu_opts o = {
		.split_cq = true, .max_inline = 64, .malloc_buf = malloc_buf,
		.no_sig_all = no_sig_all, .buf_len = 2 << 20,
	};

	/* heap memory cannot take atomics: do not ask for them */
	if (malloc_buf)
		o.mr_access = FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE |
			      FERRY_ACCESS_REMOTE_READ;

	tu_pair_open(&a, &b, &o);
}

static void ops_setup(void)
{
	ops_open(false, false);
}

static void ops_setup_unsignaled(void)
{
	ops_open(false, true);
}

static void ops_setup_heap(void)
{
	ops_open(true, false);
}

static void ops_teardown(void)
{
	tu_pair_close(&a, &b);
}

static struct ferry_sge ops_sge(struct tu_end *e, size_t off, uint32_t len)
{
	struct ferry_sge sge = { (uintptr_t)(e->buf + off), len, e->mr->lkey };

	return sge;
}

static void ops_wr(struct ferry_send_wr *wr, uint64_t wr_id,
		   enum ferry_wr_opcode op, struct ferry_sge *sg, int n)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = wr_id;
	wr->opcode = op;
	wr->sg_list = sg;
	wr->num_sge = n;
	wr->send_flags = FERRY_SEND_SIGNALED;
}
/* The send completion of @wr_id: success with @opcode. */
static void ops_expect_send_wc(struct tu_end *e, uint64_t wr_id,
			       enum ferry_wc_opcode opcode, uint32_t byte_len)
{
	struct ferry_wc wc;

	tu_poll1(e->send_cq, &wc);
	ck_assert_msg(wc.status == FERRY_WC_SUCCESS, "status %s",
		      ferry_wc_status_str(wc.status));
	ck_assert_uint_eq(wc.wr_id, wr_id);
	ck_assert_int_eq(wc.opcode, opcode);
	ck_assert_uint_eq(wc.qp_num, e->qp->qp_num);
	if (opcode == FERRY_WC_RDMA_READ || opcode == FERRY_WC_COMP_SWAP ||
	    opcode == FERRY_WC_FETCH_ADD)
		ck_assert_uint_eq(wc.byte_len, byte_len);
}

/* The receive completion of @wr_id. */
static void ops_expect_recv_wc(struct tu_end *e, uint64_t wr_id,
			       enum ferry_wc_opcode opcode, uint32_t byte_len,
			       bool with_imm, uint32_t imm)
{
	struct ferry_wc wc;

	tu_poll1(e->recv_cq, &wc);
	ck_assert_msg(wc.status == FERRY_WC_SUCCESS, "status %s",
		      ferry_wc_status_str(wc.status));
	ck_assert_uint_eq(wc.wr_id, wr_id);
	ck_assert_int_eq(wc.opcode, opcode);
	ck_assert(wc.opcode & FERRY_WC_RECV);
	ck_assert_uint_eq(wc.byte_len, byte_len);
	ck_assert_uint_eq(wc.qp_num, e->qp->qp_num);
	if (with_imm) {
		ck_assert(wc.wc_flags & FERRY_WC_WITH_IMM);
		ck_assert_uint_eq(wc.imm_data, imm);
	} else {
		ck_assert(!(wc.wc_flags & FERRY_WC_WITH_IMM));
	}
}

static void ops_post_recv_sges(struct tu_end *e, uint64_t wr_id,
			       struct ferry_sge *sg, int n)
{
	struct ferry_recv_wr wr, *bad = NULL;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = sg;
	wr.num_sge = n;
	ck_assert_int_eq(ferry_post_recv(e->qp, &wr, &bad), 0);
}

/* SEND from three SGEs into a receive of two SGEs. */
static void ops_send_scatter_gather(bool with_imm)
{
	struct ferry_sge ssg[3] = {
		ops_sge(&a, 0, 50), ops_sge(&a, 4096, 120), ops_sge(&a, 9000, 80),
	};
	struct ferry_sge rsg[2] = { ops_sge(&b, 100, 100), ops_sge(&b, 8192, 400) };
	struct ferry_send_wr wr;
	uint32_t imm = htonl(0x12345678);

	tu_fill(a.buf, 50, 1);
	tu_fill(a.buf + 4096, 120, 2);
	tu_fill(a.buf + 9000, 80, 3);
	memset(b.buf, 0xee, 16384);
	ops_post_recv_sges(&b, 77, rsg, 2);

	ops_wr(&wr, 11, with_imm ? FERRY_WR_SEND_WITH_IMM : FERRY_WR_SEND, ssg, 3);
	wr.imm_data = imm;
	tu_post_send_ok(a.qp, &wr);
	ops_expect_send_wc(&a, 11, FERRY_WC_SEND, 250);
	ops_expect_recv_wc(&b, 77, FERRY_WC_RECV, 250, with_imm, imm);

	/* 250 bytes: 100 into the first SGE, 150 into the second */
	ck_assert(tu_check(b.buf + 100, 50, 1));
	ck_assert(tu_check(b.buf + 150, 50, 2));
	ck_assert_mem_eq(b.buf + 8192, a.buf + 4096 + 50, 70);
	ck_assert_mem_eq(b.buf + 8192 + 70, a.buf + 9000, 80);
	/* nothing written outside the bytes that arrived */
	ck_assert(tu_all_bytes(b.buf, 100, 0xee));
	ck_assert(tu_all_bytes(b.buf + 200, 8192 - 200, 0xee));
	ck_assert(tu_all_bytes(b.buf + 8192 + 150, 16384 - 8192 - 150, 0xee));
	tu_assert_cq_empty(a.send_cq);
	tu_assert_cq_empty(b.recv_cq);
}

START_TEST(test_send)
{
	ops_send_scatter_gather(false);
}
END_TEST

START_TEST(test_send_with_imm)
{
	ops_send_scatter_gather(true);
}
END_TEST

START_TEST(test_send_zero_length)
{
	struct ferry_send_wr wr;

	ck_assert_int_eq(tu_post_recv1(b.qp, 5, b.buf, 64, b.mr->lkey), 0);
	ops_wr(&wr, 6, FERRY_WR_SEND, NULL, 0);
	tu_post_send_ok(a.qp, &wr);
	ops_expect_send_wc(&a, 6, FERRY_WC_SEND, 0);
	ops_expect_recv_wc(&b, 5, FERRY_WC_RECV, 0, false, 0);
}
END_TEST

START_TEST(test_send_many_in_order)
{
	enum { N = 32, LEN = 256 };

	for (int i = 0; i < N; i++)
		ck_assert_int_eq(tu_post_recv1(b.qp, 1000 + i, b.buf + i * LEN, LEN,
					       b.mr->lkey), 0);
	for (int i = 0; i < N; i++) {
		tu_fill(a.buf + i * LEN, (size_t)i + 1, (unsigned)i);
		ck_assert_int_eq(tu_post_send1(a.qp, 2000 + i, FERRY_WR_SEND, 0,
					       a.buf + i * LEN, (uint32_t)i + 1,
					       a.mr->lkey, 0, 0), 0);
	}
	for (int i = 0; i < N; i++) {
		ops_expect_send_wc(&a, 2000 + i, FERRY_WC_SEND, 0);
		ops_expect_recv_wc(&b, 1000 + i, FERRY_WC_RECV, (uint32_t)i + 1,
				   false, 0);
		ck_assert(tu_check(b.buf + i * LEN, (size_t)i + 1, (unsigned)i));
	}
}
END_TEST

START_TEST(test_rdma_write)
{
	struct ferry_sge sg[3] = {
		ops_sge(&a, 0, 1000), ops_sge(&a, 5000, 24), ops_sge(&a, 20000, 3000),
	};
	struct ferry_send_wr wr;
	uint64_t remote = (uintptr_t)b.buf + 777;

	tu_fill(a.buf, 1000, 10);
	tu_fill(a.buf + 5000, 24, 11);
	tu_fill(a.buf + 20000, 3000, 12);
	memset(b.buf, 0x5a, 8192);
	/* a receive posted on b must not be consumed by a plain WRITE */
	ck_assert_int_eq(tu_post_recv1(b.qp, 40, b.buf + 10000, 64, b.mr->lkey), 0);

	ops_wr(&wr, 21, FERRY_WR_RDMA_WRITE, sg, 3);
	wr.wr.rdma.remote_addr = remote;
	wr.wr.rdma.rkey = b.mr->rkey;
	tu_post_send_ok(a.qp, &wr);
	ops_expect_send_wc(&a, 21, FERRY_WC_RDMA_WRITE, 4024);

	ck_assert(tu_check(b.buf + 777, 1000, 10));
	ck_assert(tu_check(b.buf + 1777, 24, 11));
	ck_assert(tu_check(b.buf + 1801, 3000, 12));
	ck_assert(tu_all_bytes(b.buf, 777, 0x5a));
	ck_assert(tu_all_bytes(b.buf + 4801, 8192 - 4801, 0x5a));

	/* a SEND after it consumes the receive: the WRITE did not */
	ck_assert_int_eq(tu_post_send1(a.qp, 22, FERRY_WR_SEND, 0, a.buf, 3,
				       a.mr->lkey, 0, 0), 0);
	ops_expect_send_wc(&a, 22, FERRY_WC_SEND, 0);
	ops_expect_recv_wc(&b, 40, FERRY_WC_RECV, 3, false, 0);
	tu_assert_cq_empty(b.recv_cq);
}
END_TEST

START_TEST(test_rdma_write_with_imm)
{
	struct ferry_sge sg[2] = { ops_sge(&a, 0, 300), ops_sge(&a, 1000, 200) };
	struct ferry_send_wr wr;
	uint32_t imm = htonl(0xdeadbeef);

	tu_fill(a.buf, 300, 20);
	tu_fill(a.buf + 1000, 200, 21);
	memset(b.buf, 0x11, 65536);
	/* the receive's own buffer stays untouched: data goes to remote_addr */
	ck_assert_int_eq(tu_post_recv1(b.qp, 50, b.buf + 40000, 1000, b.mr->lkey), 0);
	ops_wr(&wr, 31, FERRY_WR_RDMA_WRITE_WITH_IMM, sg, 2);
	wr.imm_data = imm;
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf + 20000;
	wr.wr.rdma.rkey = b.mr->rkey;
	tu_post_send_ok(a.qp, &wr);
	ops_expect_send_wc(&a, 31, FERRY_WC_RDMA_WRITE, 500);
	ops_expect_recv_wc(&b, 50, FERRY_WC_RECV_RDMA_WITH_IMM, 500, true, imm);
	ck_assert(tu_check(b.buf + 20000, 300, 20));
	ck_assert(tu_check(b.buf + 20300, 200, 21));
	ck_assert(tu_all_bytes(b.buf + 40000, 1000, 0x11));
	ck_assert(tu_all_bytes(b.buf, 20000, 0x11));

	/* a receive with no SGE at all is enough for WRITE_WITH_IMM */
	ops_post_recv_sges(&b, 51, NULL, 0);
	ops_wr(&wr, 32, FERRY_WR_RDMA_WRITE_WITH_IMM, sg, 1);
	wr.imm_data = htonl(7);
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf + 30000;
	wr.wr.rdma.rkey = b.mr->rkey;
	tu_post_send_ok(a.qp, &wr);
	ops_expect_send_wc(&a, 32, FERRY_WC_RDMA_WRITE, 300);
	ops_expect_recv_wc(&b, 51, FERRY_WC_RECV_RDMA_WITH_IMM, 300, true, htonl(7));
	ck_assert(tu_check(b.buf + 30000, 300, 20));
}
END_TEST

START_TEST(test_rdma_read)
{
	struct ferry_sge sg[3] = {
		ops_sge(&a, 100, 10), ops_sge(&a, 3000, 1000), ops_sge(&a, 9000, 990),
	};
	struct ferry_send_wr wr;

	tu_fill(b.buf + 5000, 2000, 30);
	memset(a.buf, 0x77, 16384);
	ops_wr(&wr, 41, FERRY_WR_RDMA_READ, sg, 3);
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf + 5000;
	wr.wr.rdma.rkey = b.mr->rkey;
	tu_post_send_ok(a.qp, &wr);
	ops_expect_send_wc(&a, 41, FERRY_WC_RDMA_READ, 2000);
	ck_assert_mem_eq(a.buf + 100, b.buf + 5000, 10);
	ck_assert_mem_eq(a.buf + 3000, b.buf + 5010, 1000);
	ck_assert_mem_eq(a.buf + 9000, b.buf + 6010, 990);
	ck_assert(tu_all_bytes(a.buf, 100, 0x77));
	ck_assert(tu_all_bytes(a.buf + 110, 3000 - 110, 0x77));
	ck_assert(tu_all_bytes(a.buf + 4000, 5000, 0x77));
	ck_assert(tu_all_bytes(a.buf + 9990, 16384 - 9990, 0x77));
	tu_assert_cq_empty(b.recv_cq);
}
END_TEST

START_TEST(test_large_write_read)
{
	enum { LEN = 1 << 20 };
	struct ferry_send_wr wr;
	struct ferry_sge sg = ops_sge(&a, 0, LEN);

	tu_fill(a.buf, LEN, 40);
	ops_wr(&wr, 1, FERRY_WR_RDMA_WRITE, &sg, 1);
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf + LEN;
	wr.wr.rdma.rkey = b.mr->rkey;
	tu_post_send_ok(a.qp, &wr);
	ops_expect_send_wc(&a, 1, FERRY_WC_RDMA_WRITE, LEN);
	ck_assert(tu_check(b.buf + LEN, LEN, 40));

	tu_fill(b.buf, LEN, 41);
	sg = ops_sge(&a, LEN, LEN);
	ops_wr(&wr, 2, FERRY_WR_RDMA_READ, &sg, 1);
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf;
	wr.wr.rdma.rkey = b.mr->rkey;
	tu_post_send_ok(a.qp, &wr);
	ops_expect_send_wc(&a, 2, FERRY_WC_RDMA_READ, LEN);
	ck_assert(tu_check(a.buf + LEN, LEN, 41));
}
END_TEST

START_TEST(test_atomic_cmp_swp)
{
	uint64_t *target = (uint64_t *)(b.buf + 4096);
	uint64_t *result = (uint64_t *)(a.buf + 512);

	*target = 5;
	*result = 0;
	ck_assert_int_eq(tu_post_atomic(a.qp, 51, FERRY_WR_ATOMIC_CMP_AND_SWP,
					result, a.mr->lkey, (uintptr_t)target,
					b.mr->rkey, 5, 9), 0);
	ops_expect_send_wc(&a, 51, FERRY_WC_COMP_SWAP, 8);
	ck_assert_uint_eq(*result, 5);
	ck_assert_uint_eq(*target, 9);

	/* compare fails: nothing swapped, old value returned */
	ck_assert_int_eq(tu_post_atomic(a.qp, 52, FERRY_WR_ATOMIC_CMP_AND_SWP,
					result, a.mr->lkey, (uintptr_t)target,
					b.mr->rkey, 5, 11), 0);
	ops_expect_send_wc(&a, 52, FERRY_WC_COMP_SWAP, 8);
	ck_assert_uint_eq(*result, 9);
	ck_assert_uint_eq(*target, 9);

	/* full 64-bit values */
	*target = 0x0123456789abcdefULL;
	ck_assert_int_eq(tu_post_atomic(a.qp, 53, FERRY_WR_ATOMIC_CMP_AND_SWP,
					result, a.mr->lkey, (uintptr_t)target,
					b.mr->rkey, 0x0123456789abcdefULL,
					0xfedcba9876543210ULL), 0);
	ops_expect_send_wc(&a, 53, FERRY_WC_COMP_SWAP, 8);
	ck_assert_uint_eq(*result, 0x0123456789abcdefULL);
	ck_assert_uint_eq(*target, 0xfedcba9876543210ULL);
	tu_assert_cq_empty(b.recv_cq);
}
END_TEST

START_TEST(test_atomic_fetch_add)
{
	uint64_t *target = (uint64_t *)(b.buf + 8);
	uint64_t *result = (uint64_t *)(a.buf + 64);

	target[-1] = 0x1111;
	target[1] = 0x2222;
	*target = 100;
	ck_assert_int_eq(tu_post_atomic(a.qp, 61, FERRY_WR_ATOMIC_FETCH_AND_ADD,
					result, a.mr->lkey, (uintptr_t)target,
					b.mr->rkey, 23, 0), 0);
	ops_expect_send_wc(&a, 61, FERRY_WC_FETCH_ADD, 8);
	ck_assert_uint_eq(*result, 100);
	ck_assert_uint_eq(*target, 123);

	/* wraps modulo 2^64 */
	*target = UINT64_MAX;
	ck_assert_int_eq(tu_post_atomic(a.qp, 62, FERRY_WR_ATOMIC_FETCH_AND_ADD,
					result, a.mr->lkey, (uintptr_t)target,
					b.mr->rkey, 2, 0), 0);
	ops_expect_send_wc(&a, 62, FERRY_WC_FETCH_ADD, 8);
	ck_assert_uint_eq(*result, UINT64_MAX);
	ck_assert_uint_eq(*target, 1);
	/* neighbours untouched */
	ck_assert_uint_eq(target[-1], 0x1111);
	ck_assert_uint_eq(target[1], 0x2222);

	/* many in a row (within the send queue's 64) add up */
	*target = 0;
	for (int i = 0; i < 50; i++)
		ck_assert_int_eq(tu_post_atomic(a.qp, 100 + i,
						FERRY_WR_ATOMIC_FETCH_AND_ADD,
						result, a.mr->lkey, (uintptr_t)target,
						b.mr->rkey, 3, 0), 0);
	for (int i = 0; i < 50; i++)
		ops_expect_send_wc(&a, 100 + (uint64_t)i, FERRY_WC_FETCH_ADD, 8);
	ck_assert_uint_eq(*target, 150);
	ck_assert_uint_eq(*result, 147);
}
END_TEST

START_TEST(test_inline)
{
	char payload[48];
	struct ferry_sge sg = { (uintptr_t)payload, sizeof(payload), 0 };
	struct ferry_send_wr wr;
	struct ferry_qp_attr attr;
	struct ferry_qp_init_attr init;

	ck_assert_int_eq(ferry_query_qp(a.qp, &attr, FERRY_QP_CAP, &init), 0);
	ck_assert_uint_ge(attr.cap.max_inline_data, 64);

	/* unregistered stack memory, lkey ignored, reused right after posting */
	tu_fill(payload, sizeof(payload), 70);
	ck_assert_int_eq(tu_post_recv1(b.qp, 71, b.buf, 128, b.mr->lkey), 0);
	ops_wr(&wr, 72, FERRY_WR_SEND, &sg, 1);
	wr.send_flags |= FERRY_SEND_INLINE;
	tu_post_send_ok(a.qp, &wr);
	memset(payload, 0, sizeof(payload));
	ops_expect_send_wc(&a, 72, FERRY_WC_SEND, 0);
	ops_expect_recv_wc(&b, 71, FERRY_WC_RECV, sizeof(payload), false, 0);
	ck_assert(tu_check(b.buf, sizeof(payload), 70));

	/* inline RDMA WRITE */
	tu_fill(payload, sizeof(payload), 73);
	ops_wr(&wr, 74, FERRY_WR_RDMA_WRITE, &sg, 1);
	wr.send_flags |= FERRY_SEND_INLINE;
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf + 1000;
	wr.wr.rdma.rkey = b.mr->rkey;
	tu_post_send_ok(a.qp, &wr);
	memset(payload, 0, sizeof(payload));
	ops_expect_send_wc(&a, 74, FERRY_WC_RDMA_WRITE, 0);
	ck_assert(tu_check(b.buf + 1000, sizeof(payload), 73));
}
END_TEST

START_TEST(test_inline_too_long)
{
	char payload[4096];
	struct ferry_sge sg = { (uintptr_t)payload, sizeof(payload), 0 };
	struct ferry_send_wr wr, *bad = NULL;
	struct ferry_qp_attr attr;
	struct ferry_qp_init_attr init;

	ck_assert_int_eq(ferry_query_qp(a.qp, &attr, FERRY_QP_CAP, &init), 0);
	ck_assert_uint_lt(attr.cap.max_inline_data, sizeof(payload));
	memset(payload, 1, sizeof(payload));
	ops_wr(&wr, 1, FERRY_WR_SEND, &sg, 1);
	wr.send_flags |= FERRY_SEND_INLINE;
	errno = 0;
	ck_assert_int_eq(ferry_post_send(a.qp, &wr, &bad), -1);
	ck_assert_int_ne(errno, 0);
	ck_assert_ptr_eq(bad, &wr);
	tu_assert_cq_empty(a.send_cq);
}
END_TEST

/*
 * ferry_post_send_direct: a write from unregistered memory, larger than
 * any inline limit, carried out inside the call (the caller's buffer is
 * overwritten right after it), with plain and with non-temporal stores,
 * at odd addresses and lengths; its completions are those of any WR.
 */
START_TEST(test_post_send_direct)
{
	size_t len = 40000 + 37;
	uint8_t *src = malloc(len + 64);
	struct ferry_sge sg[2] = { { (uintptr_t)(src + 3), 1000, 0 },
				   { (uintptr_t)(src + 3 + 1000), (uint32_t)len - 1000, 0 } };
	struct ferry_send_wr wr, chain;
	uint32_t imm = htonl(0x5eed);
	unsigned int how;

	ck_assert_ptr_nonnull(src);
	ops_wr(&wr, 90, FERRY_WR_RDMA_WRITE_WITH_IMM, sg, 2);
	if (!tu_on_shm()) {
		errno = 0;
		ck_assert_int_eq(ferry_post_send_direct(a.qp, &wr, 0), -1);
		ck_assert_int_eq(errno, EOPNOTSUPP);
		free(src);
		return;
	}
	for (how = 0; how <= FERRY_DIRECT_NOCACHE; how++) {
		size_t at = 5 + how * 65536;	/* unaligned target */

		tu_fill(src + 3, len, 90 + how);
		memset(b.buf, 0x11, 2 * 65536 + 64);
		ops_post_recv_sges(&b, 91, NULL, 0);
		ops_wr(&wr, 92, FERRY_WR_RDMA_WRITE_WITH_IMM, sg, 2);
		wr.imm_data = imm;
		wr.wr.rdma.remote_addr = (uintptr_t)b.buf + at;
		wr.wr.rdma.rkey = b.mr->rkey;
		ck_assert_msg(ferry_post_send_direct(a.qp, &wr, how) == 0, "direct: %s",
			      strerror(errno));
		memset(src, 0, len + 64);	/* copied during the call */
		ops_expect_send_wc(&a, 92, FERRY_WC_RDMA_WRITE, 0);
		ops_expect_recv_wc(&b, 91, FERRY_WC_RECV_RDMA_WITH_IMM, (uint32_t)len, true, imm);
		ck_assert(tu_check(b.buf + at, len, 90 + how));
		ck_assert(tu_all_bytes(b.buf, at, 0x11));
		ck_assert(tu_all_bytes(b.buf + at + len, 64, 0x11));
	}

	/* a plain SEND straight from the caller's memory */
	tu_fill(src, 300, 95);
	ck_assert_int_eq(tu_post_recv1(b.qp, 96, b.buf + 1000, 300, b.mr->lkey), 0);
	sg[0] = (struct ferry_sge){ (uintptr_t)src, 300, 0 };
	ops_wr(&wr, 97, FERRY_WR_SEND, sg, 1);
	ck_assert_int_eq(ferry_post_send_direct(a.qp, &wr, FERRY_DIRECT_NOCACHE), 0);
	ops_expect_send_wc(&a, 97, FERRY_WC_SEND, 0);
	ops_expect_recv_wc(&b, 96, FERRY_WC_RECV, 300, false, 0);
	ck_assert(tu_check(b.buf + 1000, 300, 95));

	/* what it does not take: a READ (it writes our memory), a chain, an
	 * unknown how, INLINE (it is implied) */
	ops_wr(&wr, 98, FERRY_WR_RDMA_READ, sg, 1);
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf;
	wr.wr.rdma.rkey = b.mr->rkey;
	errno = 0;
	ck_assert_int_eq(ferry_post_send_direct(a.qp, &wr, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	ops_wr(&wr, 98, FERRY_WR_RDMA_WRITE, sg, 1);
	wr.wr.rdma.remote_addr = (uintptr_t)b.buf;
	wr.wr.rdma.rkey = b.mr->rkey;
	chain = wr;
	wr.next = &chain;
	errno = 0;
	ck_assert_int_eq(ferry_post_send_direct(a.qp, &wr, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	wr.next = NULL;
	errno = 0;
	ck_assert_int_eq(ferry_post_send_direct(a.qp, &wr, 2), -1);
	ck_assert_int_eq(errno, EINVAL);
	wr.send_flags |= FERRY_SEND_INLINE;
	errno = 0;
	ck_assert_int_eq(ferry_post_send_direct(a.qp, &wr, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	tu_assert_cq_empty(a.send_cq);
	free(src);
}
END_TEST

START_TEST(test_sig_all)
{
	/* sq_sig_all = 1: completions even without FERRY_SEND_SIGNALED */
	tu_fill(a.buf, 64, 80);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(tu_post_send1(a.qp, 90 + i, FERRY_WR_RDMA_WRITE, 0,
					       a.buf, 64, a.mr->lkey,
					       (uintptr_t)b.buf + 64 * i,
					       b.mr->rkey), 0);
	for (int i = 0; i < 3; i++)
		ops_expect_send_wc(&a, 90 + (uint64_t)i, FERRY_WC_RDMA_WRITE, 0);
	for (int i = 0; i < 3; i++)
		ck_assert(tu_check(b.buf + 64 * i, 64, 80));
}
END_TEST

START_TEST(test_unsignaled)
{
	/* sq_sig_all = 0 (fixture): only the signaled WR completes */
	tu_fill(a.buf, 64, 81);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_WRITE, 0, a.buf, 64,
				       a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 2, FERRY_WR_RDMA_WRITE, 0, a.buf, 64,
				       a.mr->lkey, (uintptr_t)b.buf + 64,
				       b.mr->rkey), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 3, FERRY_WR_RDMA_WRITE,
				       FERRY_SEND_SIGNALED, a.buf, 64, a.mr->lkey,
				       (uintptr_t)b.buf + 128, b.mr->rkey), 0);
	/* completions are in order: had 1 or 2 made one, it would come first */
	ops_expect_send_wc(&a, 3, FERRY_WC_RDMA_WRITE, 0);
	tu_assert_cq_empty(a.send_cq);
	for (int i = 0; i < 3; i++)
		ck_assert(tu_check(b.buf + 64 * i, 64, 81));

	/* many unsignaled WRs do not fill the send queue for good */
	for (int i = 0; i < 1000; i++) {
		unsigned int flags = (i % 16 == 15) ? FERRY_SEND_SIGNALED : 0;

		ck_assert_int_eq(tu_post_send1(a.qp, 1000 + i, FERRY_WR_RDMA_WRITE,
					       flags, a.buf, 8, a.mr->lkey,
					       (uintptr_t)b.buf + 1024, b.mr->rkey), 0);
		if (flags)
			ops_expect_send_wc(&a, 1000 + (uint64_t)i,
					   FERRY_WC_RDMA_WRITE, 0);
	}
	tu_assert_cq_empty(a.send_cq);
	/* receives always complete */
	ck_assert_int_eq(tu_post_recv1(b.qp, 9, b.buf + 4096, 64, b.mr->lkey), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 10, FERRY_WR_SEND, 0, a.buf, 64,
				       a.mr->lkey, 0, 0), 0);
	ops_expect_recv_wc(&b, 9, FERRY_WC_RECV, 64, false, 0);
	ck_assert(tu_check(b.buf + 4096, 64, 81));
}
END_TEST

START_TEST(test_fence)
{
	struct ferry_sge rsg = ops_sge(&a, 0, 256);
	struct ferry_sge wsg = ops_sge(&a, 1024, 256);
	struct ferry_send_wr rd, wrt;

	/* READ remote X, then a fenced WRITE of new data over X */
	tu_fill(b.buf + 8192, 256, 90);
	tu_fill(a.buf + 1024, 256, 91);
	ops_wr(&rd, 1, FERRY_WR_RDMA_READ, &rsg, 1);
	rd.wr.rdma.remote_addr = (uintptr_t)b.buf + 8192;
	rd.wr.rdma.rkey = b.mr->rkey;
	ops_wr(&wrt, 2, FERRY_WR_RDMA_WRITE, &wsg, 1);
	wrt.send_flags |= FERRY_SEND_FENCE;
	wrt.wr.rdma.remote_addr = (uintptr_t)b.buf + 8192;
	wrt.wr.rdma.rkey = b.mr->rkey;
	rd.next = &wrt;
	tu_post_send_ok(a.qp, &rd);
	ops_expect_send_wc(&a, 1, FERRY_WC_RDMA_READ, 256);
	ops_expect_send_wc(&a, 2, FERRY_WC_RDMA_WRITE, 0);
	ck_assert(tu_check(a.buf, 256, 90));	/* the old data */
	ck_assert(tu_check(b.buf + 8192, 256, 91));	/* the new data */

	/* FENCE on a plain SEND is accepted too */
	ck_assert_int_eq(tu_post_recv1(b.qp, 3, b.buf, 64, b.mr->lkey), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 4, FERRY_WR_SEND,
				       FERRY_SEND_FENCE | FERRY_SEND_SIGNALED,
				       a.buf, 32, a.mr->lkey, 0, 0), 0);
	ops_expect_send_wc(&a, 4, FERRY_WC_SEND, 0);
	ops_expect_recv_wc(&b, 3, FERRY_WC_RECV, 32, false, 0);
}
END_TEST

START_TEST(test_wr_chain)
{
	enum { N = 8 };
	struct ferry_send_wr wr[N];
	struct ferry_sge sg[N];
	struct ferry_recv_wr rwr[N], *rbad = NULL;
	struct ferry_sge rsg[N];

	for (int i = 0; i < N; i++) {
		rsg[i] = ops_sge(&b, 1024 * (size_t)i, 1024);
		memset(&rwr[i], 0, sizeof(rwr[i]));
		rwr[i].wr_id = 500 + (uint64_t)i;
		rwr[i].sg_list = &rsg[i];
		rwr[i].num_sge = 1;
		rwr[i].next = i + 1 < N ? &rwr[i + 1] : NULL;
	}
	ck_assert_int_eq(ferry_post_recv(b.qp, rwr, &rbad), 0);
	for (int i = 0; i < N; i++) {
		sg[i] = ops_sge(&a, 512 * (size_t)i, 100 + (uint32_t)i);
		tu_fill(a.buf + 512 * i, 100 + (size_t)i, 200 + (unsigned)i);
		ops_wr(&wr[i], 600 + (uint64_t)i, FERRY_WR_SEND, &sg[i], 1);
		wr[i].next = i + 1 < N ? &wr[i + 1] : NULL;
	}
	tu_post_send_ok(a.qp, wr);
	for (int i = 0; i < N; i++) {
		ops_expect_send_wc(&a, 600 + (uint64_t)i, FERRY_WC_SEND, 0);
		ops_expect_recv_wc(&b, 500 + (uint64_t)i, FERRY_WC_RECV,
				   100 + (uint32_t)i, false, 0);
		ck_assert(tu_check(b.buf + 1024 * i, 100 + (size_t)i,
				   200 + (unsigned)i));
	}
}
END_TEST

START_TEST(test_post_too_many_sge)
{
	struct ferry_qp_attr attr;
	struct ferry_qp_init_attr init;
	struct ferry_sge sg[64];
	struct ferry_send_wr good, badwr, *bad = NULL;
	struct ferry_recv_wr rwr, *rbad = NULL;
	int n;

	ck_assert_int_eq(ferry_query_qp(a.qp, &attr, FERRY_QP_CAP, &init), 0);
	n = (int)attr.cap.max_send_sge + 1;
	ck_assert_int_le(n, 64);
	for (int i = 0; i < n; i++)
		sg[i] = ops_sge(&a, 16 * (size_t)i, 16);

	/* the first WR of the chain is posted, the second is refused */
	tu_fill(a.buf + 4096, 32, 95);
	{
		struct ferry_sge gsg = ops_sge(&a, 4096, 32);

		ops_wr(&good, 1, FERRY_WR_RDMA_WRITE, &gsg, 1);
		good.wr.rdma.remote_addr = (uintptr_t)b.buf;
		good.wr.rdma.rkey = b.mr->rkey;
		ops_wr(&badwr, 2, FERRY_WR_RDMA_WRITE, sg, n);
		badwr.wr.rdma.remote_addr = (uintptr_t)b.buf + 1024;
		badwr.wr.rdma.rkey = b.mr->rkey;
		good.next = &badwr;
		errno = 0;
		ck_assert_int_eq(ferry_post_send(a.qp, &good, &bad), -1);
		ck_assert_int_eq(errno, EINVAL);
		ck_assert_ptr_eq(bad, &badwr);
		ops_expect_send_wc(&a, 1, FERRY_WC_RDMA_WRITE, 0);
		tu_assert_cq_empty(a.send_cq);
		ck_assert(tu_check(b.buf, 32, 95));
	}

	ck_assert_int_eq(ferry_query_qp(b.qp, &attr, FERRY_QP_CAP, &init), 0);
	n = (int)attr.cap.max_recv_sge + 1;
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 3;
	rwr.sg_list = sg;
	rwr.num_sge = n;
	errno = 0;
	ck_assert_int_eq(ferry_post_recv(b.qp, &rwr, &rbad), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_eq(rbad, &rwr);

	/* an unknown opcode */
	ops_wr(&badwr, 4, (enum ferry_wr_opcode)99, sg, 1);
	errno = 0;
	ck_assert_int_eq(ferry_post_send(a.qp, &badwr, &bad), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_eq(bad, &badwr);
	tu_assert_cq_empty(a.send_cq);
}
END_TEST

START_TEST(test_both_directions)
{
	/* b to a at the same time as a to b, on the same QPs */
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(tu_post_recv1(a.qp, 10 + i, a.buf + 1024 * i, 1024,
					       a.mr->lkey), 0);
		ck_assert_int_eq(tu_post_recv1(b.qp, 20 + i, b.buf + 1024 * i, 1024,
					       b.mr->lkey), 0);
	}
	for (int i = 0; i < 4; i++) {
		tu_fill(a.buf + 8192 + 1024 * i, 1000, 300 + (unsigned)i);
		tu_fill(b.buf + 8192 + 1024 * i, 900, 400 + (unsigned)i);
		ck_assert_int_eq(tu_post_send1(a.qp, 30 + i, FERRY_WR_SEND, 0,
					       a.buf + 8192 + 1024 * i, 1000,
					       a.mr->lkey, 0, 0), 0);
		ck_assert_int_eq(tu_post_send1(b.qp, 40 + i, FERRY_WR_SEND, 0,
					       b.buf + 8192 + 1024 * i, 900,
					       b.mr->lkey, 0, 0), 0);
	}
	for (int i = 0; i < 4; i++) {
		ops_expect_send_wc(&a, 30 + (uint64_t)i, FERRY_WC_SEND, 0);
		ops_expect_send_wc(&b, 40 + (uint64_t)i, FERRY_WC_SEND, 0);
		ops_expect_recv_wc(&b, 20 + (uint64_t)i, FERRY_WC_RECV, 1000, false, 0);
		ops_expect_recv_wc(&a, 10 + (uint64_t)i, FERRY_WC_RECV, 900, false, 0);
		ck_assert(tu_check(b.buf + 1024 * i, 1000, 300 + (unsigned)i));
		ck_assert(tu_check(a.buf + 1024 * i, 900, 400 + (unsigned)i));
	}
}
END_TEST

Suite *ops_suite(void)
{
	Suite *s = suite_create("ops");
	TCase *tc;

	tc = tcase_create("shared_memory");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_checked_fixture(tc, ops_setup, ops_teardown);
	tcase_add_test(tc, test_send);
	tcase_add_test(tc, test_send_with_imm);
	tcase_add_test(tc, test_send_zero_length);
	tcase_add_test(tc, test_send_many_in_order);
	tcase_add_test(tc, test_rdma_write);
	tcase_add_test(tc, test_rdma_write_with_imm);
	tcase_add_test(tc, test_rdma_read);
	tcase_add_test(tc, test_large_write_read);
	tcase_add_test(tc, test_atomic_cmp_swp);
	tcase_add_test(tc, test_atomic_fetch_add);
	tcase_add_test(tc, test_inline);
	tcase_add_test(tc, test_inline_too_long);
	tcase_add_test(tc, test_post_send_direct);
	tcase_add_test(tc, test_sig_all);
	tcase_add_test(tc, test_fence);
	tcase_add_test(tc, test_wr_chain);
	tcase_add_test(tc, test_post_too_many_sge);
	tcase_add_test(tc, test_both_directions);
	suite_add_tcase(s, tc);

	tc = tcase_create("unsignaled");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_checked_fixture(tc, ops_setup_unsignaled, ops_teardown);
	tcase_add_test(tc, test_unsignaled);
	suite_add_tcase(s, tc);

	/* the same transfers with heap memory (process_vm_readv/writev) */
	tc = tcase_create("heap_memory");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_checked_fixture(tc, ops_setup_heap, ops_teardown);
	tcase_add_test(tc, test_send);
	tcase_add_test(tc, test_send_with_imm);
	tcase_add_test(tc, test_rdma_write);
	tcase_add_test(tc, test_rdma_write_with_imm);
	tcase_add_test(tc, test_rdma_read);
	tcase_add_test(tc, test_large_write_read);
	tcase_add_test(tc, test_inline);
	tcase_add_test(tc, test_wr_chain);
	suite_add_tcase(s, tc);
	return s;
}
