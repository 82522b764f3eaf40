/*
 * check_tcp.c - the tcp provider between two of its own QPs over loopback
 * TCP: every operation both ways, completions and their channel, cutting
 * to the MSS, remote access faults, RNR, a vanished peer, the state
 * machine.  The hostile raw peer's cases are in check_tcp_hostile.c.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "check_suites.h"
#include "tcptest.h"
#include "testutil.h"

/* A tcp device is only there when asked for by name. */
START_TEST(test_tcp_never_by_default)
{
	struct ferry_device **list;
	struct ferry_context *ctx;
	int i, n;

	unsetenv("FERRY_TRANSPORT");
	list = ferry_get_device_list(&n);
	ck_assert(list);
	for (i = 0; i < n; i++)
		ck_assert_str_ne(ferry_get_device_transport(list[i]), "tcp");
	ferry_free_device_list(list);
	ctx = ferry_open_transport(NULL);
	ck_assert(ctx);
	ck_assert_str_ne(ctx->provider->name, "tcp");
	ferry_close_device(ctx);

	setenv("FERRY_TRANSPORT", "tcp", 1);
	list = ferry_get_device_list(&n);
	ck_assert_int_eq(n, 1);
	ck_assert_str_eq(ferry_get_device_name(list[0]), "tcp0");
	ferry_free_device_list(list);
	unsetenv("FERRY_TRANSPORT");
}
END_TEST

static void tt_send_both_ways(struct tt_end *x, struct tt_end *y, unsigned int seed)
{
	struct ferry_send_wr wr = { 0 }, *bad;
	struct ferry_sge sge = { (uintptr_t)x->buf, 3000, x->mr->lkey };
	struct ferry_wc wc;

	tu_fill(x->buf, 3000, seed);
	ck_assert_int_eq(tu_post_recv1(y->qp, 7, y->buf + 8192, 4096, y->mr->lkey), 0);
	ck_assert_int_eq(tu_post_recv1(y->qp, 8, y->buf + 16384, 64, y->mr->lkey), 0);
	ck_assert_int_eq(tu_post_send1(x->qp, 1, FERRY_WR_SEND, FERRY_SEND_SIGNALED, x->buf,
				       3000, x->mr->lkey, 0, 0), 0);
	/* SEND_WITH_IMM, inline, from memory the next line reuses. */
	memcpy(x->buf + 4096, "hello", 5);
	wr.wr_id = 2;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	sge.addr = (uintptr_t)(x->buf + 4096);
	sge.length = 5;
	wr.opcode = FERRY_WR_SEND_WITH_IMM;
	wr.imm_data = 0x12345678;
	wr.send_flags = FERRY_SEND_SIGNALED | FERRY_SEND_INLINE;
	ck_assert_int_eq(ferry_post_send(x->qp, &wr, &bad), 0);
	memset(x->buf + 4096, 0, 5);

	tu_poll1(y->cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_int_eq(wc.opcode, FERRY_WC_RECV);
	ck_assert_int_eq(wc.wr_id, 7);
	ck_assert_int_eq(wc.byte_len, 3000);
	ck_assert_int_eq(wc.wc_flags & FERRY_WC_WITH_IMM, 0);
	ck_assert(tu_check(y->buf + 8192, 3000, seed));
	tu_poll1(y->cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_int_eq(wc.wr_id, 8);
	ck_assert_int_eq(wc.byte_len, 5);
	ck_assert(wc.wc_flags & FERRY_WC_WITH_IMM);
	ck_assert_uint_eq(wc.imm_data, 0x12345678);
	ck_assert_int_eq(memcmp(y->buf + 16384, "hello", 5), 0);
	tu_poll1(x->cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_int_eq(wc.wr_id, 1);
	ck_assert_int_eq(wc.opcode, FERRY_WC_SEND);
	tu_poll1(x->cq, &wc);
	ck_assert_int_eq(wc.wr_id, 2);
}

START_TEST(test_tcp_send_both_ways)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct tt_end a, b;

	tt_pair(&a, &b, &o);
	tt_send_both_ways(&a, &b, 1);
	tt_send_both_ways(&b, &a, 2);
	tu_assert_cq_empty(a.cq);
	tu_assert_cq_empty(b.cq);
	tt_pair_close(&a, &b);
}
END_TEST

/* WRITE, WRITE_WITH_IMM, x to y. */
static void tt_write_one_way(struct tt_end *x, struct tt_end *y, unsigned int seed)
{
	uint64_t raddr = (uintptr_t)y->buf;
	struct ferry_wc wc;

	tu_fill(x->buf, 2000, seed);
	ck_assert_int_eq(tu_post_send1(x->qp, 10, FERRY_WR_RDMA_WRITE, FERRY_SEND_SIGNALED, x->buf,
				       2000, x->mr->lkey, raddr + 100, y->mr->rkey), 0);
	tu_poll1(x->cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_int_eq(wc.opcode, FERRY_WC_RDMA_WRITE);
	/* Complete means placed: the data is there already. */
	ck_assert(tu_check(y->buf + 100, 2000, seed));

	ck_assert_int_eq(tu_post_recv1(y->qp, 11, NULL, 0, y->mr->lkey), 0);
	{
		struct ferry_sge sge = { (uintptr_t)x->buf, 16, x->mr->lkey };
		struct ferry_send_wr wr = { .wr_id = 12, .sg_list = &sge, .num_sge = 1,
					    .opcode = FERRY_WR_RDMA_WRITE_WITH_IMM,
					    .send_flags = FERRY_SEND_SIGNALED,
					    .imm_data = 0xabcdef01 }, *bad;

		wr.wr.rdma.remote_addr = raddr + 4000;
		wr.wr.rdma.rkey = y->mr->rkey;
		ck_assert_int_eq(ferry_post_send(x->qp, &wr, &bad), 0);
	}
	tu_poll1(y->cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_int_eq(wc.opcode, FERRY_WC_RECV_RDMA_WITH_IMM);
	ck_assert_uint_eq(wc.imm_data, 0xabcdef01);
	ck_assert_int_eq(memcmp(y->buf + 4000, x->buf, 16), 0);
	tu_poll1(x->cq, &wc);
	ck_assert_int_eq(wc.wr_id, 12);
}

/* READ, compare-and-swap, fetch-and-add, x from y. */
static void tt_read_one_way(struct tt_end *x, struct tt_end *y, unsigned int seed)
{
	uint64_t raddr = (uintptr_t)y->buf, *target = (uint64_t *)(y->buf + 32768);
	struct ferry_wc wc;

	tu_fill(y->buf + 20000, 5000, seed + 1);
	ck_assert_int_eq(tu_post_send1(x->qp, 13, FERRY_WR_RDMA_READ, FERRY_SEND_SIGNALED,
				       x->buf + 8192, 5000, x->mr->lkey, raddr + 20000,
				       y->mr->rkey), 0);
	tu_poll1(x->cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_int_eq(wc.opcode, FERRY_WC_RDMA_READ);
	ck_assert_int_eq(wc.byte_len, 5000);
	ck_assert(tu_check(x->buf + 8192, 5000, seed + 1));

	*target = 5;
	ck_assert_int_eq(tu_post_atomic(x->qp, 14, FERRY_WR_ATOMIC_CMP_AND_SWP, x->buf + 40000,
					x->mr->lkey, (uintptr_t)target, y->mr->rkey, 5, 9), 0);
	tu_poll1(x->cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_int_eq(wc.opcode, FERRY_WC_COMP_SWAP);
	ck_assert_uint_eq(*(uint64_t *)(x->buf + 40000), 5);
	ck_assert_uint_eq(*target, 9);
	ck_assert_int_eq(tu_post_atomic(x->qp, 15, FERRY_WR_ATOMIC_CMP_AND_SWP, x->buf + 40000,
					x->mr->lkey, (uintptr_t)target, y->mr->rkey, 5, 1), 0);
	tu_poll1(x->cq, &wc);
	ck_assert_uint_eq(*(uint64_t *)(x->buf + 40000), 9);
	ck_assert_uint_eq(*target, 9);	/* compare failed: unchanged */
	ck_assert_int_eq(tu_post_atomic(x->qp, 16, FERRY_WR_ATOMIC_FETCH_AND_ADD, x->buf + 40000,
					x->mr->lkey, (uintptr_t)target, y->mr->rkey, 100, 0), 0);
	tu_poll1(x->cq, &wc);
	ck_assert_int_eq(wc.opcode, FERRY_WC_FETCH_ADD);
	ck_assert_uint_eq(*(uint64_t *)(x->buf + 40000), 9);
	ck_assert_uint_eq(*target, 109);
}

static void tt_rdma_one_way(struct tt_end *x, struct tt_end *y, unsigned int seed)
{
	tt_write_one_way(x, y, seed);
	tt_read_one_way(x, y, seed);
}

START_TEST(test_tcp_rdma_both_ways)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct tt_end a, b;

	tt_pair(&a, &b, &o);
	tt_rdma_one_way(&a, &b, 3);
	tt_rdma_one_way(&b, &a, 4);
	tu_assert_cq_empty(a.cq);
	tu_assert_cq_empty(b.cq);
	tt_pair_close(&a, &b);
}
END_TEST

/* Unsignaled WRs give no completion; the signaled one after them does. */
START_TEST(test_tcp_unsignaled)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct tt_end a, b;
	struct ferry_wc wc;
	int i;

	tt_pair(&a, &b, &o);
	for (i = 0; i < 10; i++)
		ck_assert_int_eq(tu_post_send1(a.qp, 100 + i, FERRY_WR_RDMA_WRITE,
					       i == 9 ? FERRY_SEND_SIGNALED : 0, a.buf + i,
					       1, a.mr->lkey, (uintptr_t)b.buf + i,
					       b.mr->rkey), 0);
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 109);
	tu_assert_cq_empty(a.cq);
	tt_pair_close(&a, &b);
}
END_TEST

static void tt_check_cut(struct tt_end *x, uint32_t mss)
{
	struct tcp_qp_stats st;

	tcp_qp_stats(x->qp, &st);
	ck_assert_msg(st.max_fpdu_sent <= mss, "FPDU of %u bytes over an MSS of %u",
		      st.max_fpdu_sent, mss);
}

START_TEST(test_tcp_segments_to_mss)
{
	struct tt_opts o = { .buf_len = 4u << 20, .mss = 1000, .rnr_retry = 7 };
	struct tcp_qp_stats st;
	struct tt_end a, b;
	struct ferry_wc wc;
	uint32_t mib = 1u << 20;

	tt_pair(&a, &b, &o);
	ck_assert_uint_le(a.mss, 1000);
	tu_fill(a.buf, mib, 5);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_WRITE, FERRY_SEND_SIGNALED, a.buf,
				       mib, a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey), 0);
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert(tu_check(b.buf, mib, 5));
	tcp_qp_stats(a.qp, &st);
	ck_assert_uint_ge(st.fpdus_sent, mib / a.mss);
	tt_check_cut(&a, a.mss);

	tu_fill(b.buf + 2 * mib, mib, 6);
	ck_assert_int_eq(tu_post_send1(a.qp, 2, FERRY_WR_RDMA_READ, FERRY_SEND_SIGNALED,
				       a.buf + 2 * mib, mib, a.mr->lkey,
				       (uintptr_t)b.buf + 2 * mib, b.mr->rkey), 0);
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert(tu_check(a.buf + 2 * mib, mib, 6));
	tcp_qp_stats(b.qp, &st);
	ck_assert_uint_ge(st.fpdus_sent, mib / b.mss);
	tt_check_cut(&b, b.mss);
	tt_pair_close(&a, &b);
}
END_TEST

/* Neither progress thread turns while nothing happens (no spinning, no
 * timer left): checked over a while, after letting the last events pass. */
static void tt_assert_idle(struct tt_end *a, struct tt_end *b)
{
	uint64_t t1, t2;

	tu_sleep_ms(100);
	t1 = tcp_progress_turns(a->ctx) + tcp_progress_turns(b->ctx);
	tu_sleep_ms(300);
	t2 = tcp_progress_turns(a->ctx) + tcp_progress_turns(b->ctx);
	ck_assert_msg(t2 == t1, "idle progress threads turned %llu times",
		      (unsigned long long)(t2 - t1));
}

/* Bad STag, bounds, access: REM_ACCESS_ERR at the initiator, a
 * Terminate on the wire, nothing written, both QPs in ERR. */
static void tt_access_fault(enum ferry_wr_opcode op, int mr_access, uint64_t off,
			    uint32_t rkey_xor)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct tcp_qp_stats sa, sb;
	struct tt_end a, b;
	struct ferry_mr *mr2;
	struct ferry_wc wc;

	tt_pair(&a, &b, &o);
	mr2 = ferry_reg_mr(b.pd, b.buf, 4096, mr_access);
	ck_assert(mr2);
	ck_assert_int_eq(tu_post_recv1(b.qp, 50, b.buf + 8192, 64, b.mr->lkey), 0);
	memset(a.buf, 0xaa, 4096);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, op, FERRY_SEND_SIGNALED, a.buf, 64, a.mr->lkey,
				       (uintptr_t)b.buf + off, mr2->rkey ^ rkey_xor), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 2, FERRY_WR_SEND, FERRY_SEND_SIGNALED, a.buf, 8,
				       a.mr->lkey, 0, 0), 0);
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 1);
	ck_assert_msg(wc.status == FERRY_WC_REM_ACCESS_ERR, "status %s",
		      ferry_wc_status_str(wc.status));
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 2);
	ck_assert_int_eq(wc.status, FERRY_WC_WR_FLUSH_ERR);
	tu_poll1(b.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 50);
	ck_assert_int_eq(wc.status, FERRY_WC_WR_FLUSH_ERR);
	ck_assert(tu_all_bytes(b.buf, 4096, 0));
	tcp_qp_stats(a.qp, &sa);
	tcp_qp_stats(b.qp, &sb);
	ck_assert_uint_eq(sb.terms_sent, 1);
	ck_assert_uint_eq(sa.terms_recv, 1);
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_ERR);
	ck_assert(tu_wait_qp_state(b.qp, FERRY_QPS_ERR, TU_WAIT_MS));
	tt_assert_idle(&a, &b);	/* both streams ended: nothing left to watch */
	ck_assert_int_eq(ferry_dereg_mr(mr2), 0);
	tt_pair_close(&a, &b);
}

START_TEST(test_tcp_write_bad_stag)
{
	tt_access_fault(FERRY_WR_RDMA_WRITE, TU_ACCESS_ALL, 0, 0x100);
}
END_TEST

START_TEST(test_tcp_write_out_of_bounds)
{
	tt_access_fault(FERRY_WR_RDMA_WRITE, TU_ACCESS_ALL, 4096 - 32, 0);
}
END_TEST

START_TEST(test_tcp_write_no_access)
{
	tt_access_fault(FERRY_WR_RDMA_WRITE, FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_READ,
			0, 0);
}
END_TEST

START_TEST(test_tcp_read_bad_stag)
{
	tt_access_fault(FERRY_WR_RDMA_READ, TU_ACCESS_ALL, 0, 0x100);
}
END_TEST

START_TEST(test_tcp_read_no_access)
{
	tt_access_fault(FERRY_WR_RDMA_READ, FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE,
			0, 0);
}
END_TEST

/* The peer goes: what is posted flushes, later posts too. */
START_TEST(test_tcp_peer_close_flushes)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct tt_end a, b;
	struct ferry_wc wc;

	tt_pair(&a, &b, &o);
	ck_assert_int_eq(tu_post_recv1(a.qp, 1, a.buf, 64, a.mr->lkey), 0);
	ck_assert_int_eq(tu_post_recv1(a.qp, 2, a.buf, 64, a.mr->lkey), 0);
	ck_assert_int_eq(ferry_destroy_qp(b.qp), 0);
	b.qp = NULL;
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 1);
	ck_assert_int_eq(wc.status, FERRY_WC_WR_FLUSH_ERR);
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 2);
	ck_assert_int_eq(wc.status, FERRY_WC_WR_FLUSH_ERR);
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_ERR);
	ck_assert_int_eq(tu_post_send1(a.qp, 3, FERRY_WR_SEND, 0, a.buf, 8, a.mr->lkey, 0, 0), 0);
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 3);
	ck_assert_int_eq(wc.status, FERRY_WC_WR_FLUSH_ERR);
	tt_pair_close(&a, &b);
}
END_TEST

/* No receive and rnr_retry 0: the SEND fails with RNR_RETRY_EXC_ERR. */
START_TEST(test_tcp_rnr_exhausted)
{
	struct tt_opts o = { .rnr_retry = 0, .min_rnr_timer = 1 };
	struct tt_end a, b;
	struct ferry_wc wc;

	tt_pair(&a, &b, &o);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_SEND, FERRY_SEND_SIGNALED, a.buf, 8,
				       a.mr->lkey, 0, 0), 0);
	tu_poll1(a.cq, &wc);
	ck_assert_msg(wc.status == FERRY_WC_RNR_RETRY_EXC_ERR, "status %s",
		      ferry_wc_status_str(wc.status));
	ck_assert(tu_wait_qp_state(b.qp, FERRY_QPS_ERR, TU_WAIT_MS));
	tt_pair_close(&a, &b);
}
END_TEST

/* rnr_retry 7: the SEND waits for the receive, however late, and the
 * READ behind it waits its turn too. */
START_TEST(test_tcp_rnr_waits)
{
	struct tt_opts o = { .rnr_retry = 7, .min_rnr_timer = 1 };
	struct tt_end a, b;
	struct ferry_wc wc;

	tt_pair(&a, &b, &o);
	tu_fill(a.buf, 100, 7);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_SEND, FERRY_SEND_SIGNALED, a.buf, 100,
				       a.mr->lkey, 0, 0), 0);
	ck_assert_int_eq(tu_poll(a.cq, &wc, 1, 100), 0);
	ck_assert_int_eq(tu_poll(b.cq, &wc, 1, 0), 0);
	ck_assert_int_eq(tu_post_recv1(b.qp, 2, b.buf, 100, b.mr->lkey), 0);
	tu_poll1(b.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert(tu_check(b.buf, 100, 7));
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	tt_pair_close(&a, &b);
}
END_TEST

/* A solicited-only arm ignores a plain SEND and fires for SEND_SE. */
START_TEST(test_tcp_channel_solicited)
{
	struct tt_opts o = { .rnr_retry = 7, .channel = true };
	struct pollfd pfd;
	struct ferry_cq *cq;
	struct tt_end a, b;
	struct ferry_wc wc;
	void *cq_ctx;

	tt_pair(&a, &b, &o);
	ck_assert_int_eq(tu_post_recv1(b.qp, 1, b.buf, 64, b.mr->lkey), 0);
	ck_assert_int_eq(tu_post_recv1(b.qp, 2, b.buf, 64, b.mr->lkey), 0);
	ck_assert_int_eq(ferry_req_notify_cq(b.cq, 1), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_SEND, 0, a.buf, 8, a.mr->lkey, 0, 0), 0);
	tu_poll1(b.cq, &wc);
	pfd = (struct pollfd){ .fd = b.ch->fd, .events = POLLIN };
	ck_assert_int_eq(poll(&pfd, 1, 0), 0);	/* decided when the WC was added */
	ck_assert_int_eq(tu_post_send1(a.qp, 2, FERRY_WR_SEND, FERRY_SEND_SOLICITED, a.buf, 8,
				       a.mr->lkey, 0, 0), 0);
	ck_assert_int_eq(ferry_get_cq_event(b.ch, &cq, &cq_ctx), 0);	/* blocks until then */
	ck_assert_ptr_eq(cq, b.cq);
	ferry_ack_cq_events(cq, 1);
	tu_poll1(b.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 2);
	ck_assert_int_eq(ferry_req_notify_cq(a.cq, 0), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 3, FERRY_WR_RDMA_WRITE, FERRY_SEND_SIGNALED, a.buf, 8,
				       a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey), 0);
	ck_assert_int_eq(ferry_get_cq_event(a.ch, &cq, &cq_ctx), 0);
	ferry_ack_cq_events(cq, 1);
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 3);
	tt_pair_close(&a, &b);
}
END_TEST

START_TEST(test_tcp_states)
{
	struct tt_opts o = { 0 };
	struct ferry_qp_attr attr = { .qp_state = FERRY_QPS_RTR };
	struct ferry_qp_init_attr init;
	struct tt_end e;
	struct ferry_wc wc;

	tt_end_open(&e, &o);
	ck_assert_int_eq(tu_post_send1(e.qp, 1, FERRY_WR_SEND, 0, e.buf, 8, e.mr->lkey, 0, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(tu_qp_to_init(e.qp, TU_QP_ACCESS_ALL), 0);
	ck_assert_int_eq(tu_qp_to_rtr(e.qp, 0, 1), -1);
	ck_assert_int_eq(errno, ENOTCONN);
	ck_assert_int_eq(ferry_modify_qp(e.qp, &attr, FERRY_QP_STATE), -1);	/* mask short */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(tu_post_recv1(e.qp, 2, e.buf, 8, e.mr->lkey), 0);
	attr.qp_state = FERRY_QPS_ERR;
	ck_assert_int_eq(ferry_modify_qp(e.qp, &attr, FERRY_QP_STATE), 0);
	tu_poll1(e.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 2);
	ck_assert_int_eq(wc.status, FERRY_WC_WR_FLUSH_ERR);
	ck_assert_int_eq(ferry_query_qp(e.qp, &attr, 0, &init), 0);
	ck_assert_int_eq(attr.qp_state, FERRY_QPS_ERR);
	attr.qp_state = FERRY_QPS_RESET;
	ck_assert_int_eq(ferry_modify_qp(e.qp, &attr, FERRY_QP_STATE), 0);
	ck_assert_int_eq(tu_qp_state(e.qp), FERRY_QPS_RESET);
	ck_assert_int_eq(ferry_destroy_cq(e.cq), -1);	/* the QP holds it */
	ck_assert_int_eq(errno, EBUSY);
	tt_end_close(&e);
}
END_TEST

/* Opcodes 8-11 only with a peer that said it takes them. */
START_TEST(test_tcp_rfc7306_only_when_agreed)
{
	struct tt_opts o = { .rnr_retry = 7, .no_rfc7306 = true };
	struct tt_end a, b;
	struct ferry_wc wc;

	tt_pair(&a, &b, &o);
	ck_assert_int_eq(tu_post_atomic(a.qp, 1, FERRY_WR_ATOMIC_FETCH_AND_ADD, a.buf, a.mr->lkey,
					(uintptr_t)b.buf, b.mr->rkey, 1, 0), -1);
	ck_assert_int_eq(errno, EOPNOTSUPP);
	ck_assert_int_eq(tu_post_send1(a.qp, 2, FERRY_WR_SEND_WITH_IMM, 0, a.buf, 8, a.mr->lkey,
				       0, 0), -1);
	ck_assert_int_eq(errno, EOPNOTSUPP);
	/* The rest works as with siw. */
	ck_assert_int_eq(tu_post_send1(a.qp, 3, FERRY_WR_RDMA_READ, FERRY_SEND_SIGNALED, a.buf,
				       64, a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey), 0);
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	tt_pair_close(&a, &b);
}
END_TEST

/*
 * A READ posted while a 64 MiB SEND is in flight towards its poster
 * completes first.  b's progress thread is held while the SEND starts,
 * so the SEND cannot end (the socket buffers hold far less than 64 MiB)
 * before a has the READ Request: its Response must cut into the SEND.
 */
START_TEST(test_tcp_read_completes_before_send)
{
	struct tt_opts o = { .buf_len = 65u << 20, .rnr_retry = 7 };
	uint32_t big = 64u << 20;
	struct tt_end a, b;
	struct ferry_wc wc;

	tt_pair(&a, &b, &o);
	tu_fill(a.buf + big, 8192, 11);
	/* b has heard from a (the RTR, a WRITE): it may send at once. */
	ck_assert_int_eq(tu_post_send1(a.qp, 9, FERRY_WR_RDMA_WRITE, FERRY_SEND_SIGNALED, a.buf,
				       8, a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey), 0);
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(tu_post_recv1(b.qp, 1, b.buf, big, b.mr->lkey), 0);
	tcp_progress_pause(b.ctx, true);
	ck_assert_int_eq(tu_post_send1(a.qp, 2, FERRY_WR_SEND, FERRY_SEND_SIGNALED, a.buf, big,
				       a.mr->lkey, 0, 0), 0);
	/* Posted from this thread, the READ Request leaves at once. */
	ck_assert_int_eq(tu_post_send1(b.qp, 3, FERRY_WR_RDMA_READ, FERRY_SEND_SIGNALED,
				       b.buf + big, 8192, b.mr->lkey, (uintptr_t)a.buf + big,
				       a.mr->rkey), 0);
	tcp_progress_pause(b.ctx, false);
	tu_poll1(b.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_msg(wc.wr_id == 3, "the SEND (%llu) completed before the READ",
		      (unsigned long long)wc.wr_id);
	ck_assert(tu_check(b.buf + big, 8192, 11));
	tu_poll1(b.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 1);
	ck_assert_int_eq(wc.byte_len, big);
	tu_poll1(a.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 2);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	tt_pair_close(&a, &b);
}
END_TEST

/* WRITEs land while the application computes (no poll, no post), and
 * an idle connection wakes nobody. */
START_TEST(test_tcp_progress_without_application)
{
	struct tt_opts o = { .rnr_retry = 7 };
	volatile uint8_t *seen;
	struct tt_end a, b;
	struct ferry_wc wc;
	uint64_t until;

	tt_pair(&a, &b, &o);
	seen = b.buf + 100;
	a.buf[0] = 0x42;
	ck_assert_int_eq(tu_post_send1(a.qp, 1, FERRY_WR_RDMA_WRITE, 0, a.buf, 1, a.mr->lkey,
				       (uintptr_t)b.buf + 100, b.mr->rkey), 0);
	until = tu_now_ms() + TU_WAIT_MS;
	/* b's application only looks at memory; it sleeps between looks, so
	 * that a scheduler that runs one thread at a time (valgrind's) lets
	 * the progress thread run. */
	while (*seen != 0x42 && tu_now_ms() < until)
		usleep(1000);
	ck_assert_int_eq(*seen, 0x42);
	ck_assert_int_eq(tu_post_send1(a.qp, 2, FERRY_WR_SEND, FERRY_SEND_SIGNALED, a.buf, 1,
				       a.mr->lkey, 0, 0), 0);
	ck_assert_int_eq(tu_post_recv1(b.qp, 3, b.buf, 1, b.mr->lkey), 0);
	tu_poll1(a.cq, &wc);
	tu_poll1(b.cq, &wc);
	tt_assert_idle(&a, &b);
	tt_pair_close(&a, &b);
}
END_TEST

/* Without CRC (both sides said so) the CRC field is zero and unchecked. */
START_TEST(test_tcp_without_crc)
{
	struct tt_opts o = { .rnr_retry = 7, .no_crc = true };
	struct tt_end a, b;

	tt_pair(&a, &b, &o);
	tt_send_both_ways(&a, &b, 12);
	tt_rdma_one_way(&b, &a, 13);
	tt_pair_close(&a, &b);
}
END_TEST

/* A Request that wants markers is rejected with R set, markers clear. */
START_TEST(test_tcp_mpa_markers_declined)
{
	struct tcpw_mpa_frame req = { .kind = TCPW_MPA_REQ, .rev = 2, .markers = true,
				      .enhanced = true, .ird = 1, .ord = 1 }, rep;
	uint8_t buf[TCPW_MPA_HDR_LEN + TCPW_MPA_PD_MAX];
	struct tcpw_mpa_local local;
	struct tcp_attach conn;
	size_t len;
	int fa, fb;

	tt_tcp_pair(&fa, &fb, 0);
	ck_assert_int_eq(tcpw_mpa_encode(&req, buf, sizeof(buf), &len), 0);
	ck_assert_int_eq(send(fa, buf, len, 0), (ssize_t)len);
	ferry_tcp_mpa_local_default(&local);
	ck_assert_int_eq(ferry_tcp_mpa_respond(fb, &local, 7, &conn), -1);
	ck_assert_int_eq(errno, ECONNREFUSED);
	len = (size_t)recv(fa, buf, sizeof(buf), 0);
	ck_assert_int_eq(tcpw_mpa_decode(buf, len, TCPW_MPA_REP, &rep), 0);
	ck_assert(rep.reject);
	ck_assert(!rep.markers);
	close(fa);
	close(fb);
}
END_TEST

/* A child of fork lets go of its copies; the parent's connection lives on. */
START_TEST(test_tcp_fork_child_lets_go)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct tt_end a, b;
	int status;
	pid_t pid;

	tt_pair(&a, &b, &o);
	pid = fork();
	ck_assert(pid >= 0);
	if (pid == 0) {
		int rc = ferry_destroy_qp(a.qp) | ferry_destroy_qp(b.qp) |
			 ferry_close_device(a.ctx) | ferry_close_device(b.ctx);

		_exit(rc ? 1 : 0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	tt_send_both_ways(&a, &b, 14);
	tt_pair_close(&a, &b);
}
END_TEST

/*
 * A CQ whose event was fired but never read is destroyed (the kernel drops
 * such events with their CQ; it used to fail with EBUSY and leak, which
 * ferry-ping met at teardown after a disconnect's flushes); the stale
 * record left in the channel is skipped, and a new CQ on the channel gets
 * its own events only.
 */
START_TEST(test_tcp_unread_event_destroy)
{
	struct ferry_context *ctx = ferry_open_transport("tcp");
	struct ferry_wc wc = { .status = FERRY_WC_SUCCESS };
	struct ferry_comp_channel *ch;
	struct ferry_cq *cq, *cq2, *got;
	void *got_ctx;

	ck_assert_ptr_nonnull(ctx);
	ch = ferry_create_comp_channel(ctx);
	ck_assert_ptr_nonnull(ch);
	cq = ferry_create_cq(ctx, 4, NULL, ch, 0);
	ck_assert_ptr_nonnull(cq);
	ck_assert_int_eq(ferry_req_notify_cq(cq, 0), 0);
	tcp_cq_push(to_tcq(cq), &wc, false);		/* fires: a record in the pipe */
	ck_assert_int_eq(ferry_destroy_cq(cq), 0);
	cq2 = ferry_create_cq(ctx, 4, NULL, ch, 0);
	ck_assert_ptr_nonnull(cq2);
	ck_assert_int_eq(fcntl(ch->fd, F_SETFL, O_NONBLOCK), 0);
	errno = 0;
	ck_assert_int_eq(ferry_get_cq_event(ch, &got, &got_ctx), -1);
	ck_assert_int_eq(errno, EAGAIN);		/* the old record: skipped */
	ck_assert_int_eq(ferry_req_notify_cq(cq2, 0), 0);
	tcp_cq_push(to_tcq(cq2), &wc, false);
	ck_assert_int_eq(ferry_get_cq_event(ch, &got, &got_ctx), 0);
	ck_assert_ptr_eq(got, cq2);
	ck_assert_int_eq(ferry_destroy_cq(cq2), -1);	/* read, not acknowledged */
	ck_assert_int_eq(errno, EBUSY);
	ferry_ack_cq_events(cq2, 1);
	ck_assert_int_eq(ferry_destroy_cq(cq2), 0);
	ck_assert_int_eq(ferry_destroy_comp_channel(ch), 0);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

Suite *tcp_suite(void)
{
	Suite *s = suite_create("tcp");
	TCase *ops = tcase_create("ops"), *faults = tcase_create("faults");

	tcase_set_timeout(ops, TU_TCASE_TIMEOUT);
	tcase_set_timeout(faults, TU_TCASE_TIMEOUT);
	tcase_add_test(ops, test_tcp_never_by_default);
	tcase_add_test(ops, test_tcp_unread_event_destroy);
	tcase_add_test(ops, test_tcp_send_both_ways);
	tcase_add_test(ops, test_tcp_rdma_both_ways);
	tcase_add_test(ops, test_tcp_unsignaled);
	tcase_add_test(ops, test_tcp_segments_to_mss);
	tcase_add_test(ops, test_tcp_read_completes_before_send);
	tcase_add_test(ops, test_tcp_progress_without_application);
	tcase_add_test(ops, test_tcp_channel_solicited);
	tcase_add_test(ops, test_tcp_states);
	tcase_add_test(ops, test_tcp_rfc7306_only_when_agreed);
	tcase_add_test(ops, test_tcp_without_crc);
	tcase_add_test(ops, test_tcp_mpa_markers_declined);
	tcase_add_test(ops, test_tcp_fork_child_lets_go);
	suite_add_tcase(s, ops);
	tcase_add_test(faults, test_tcp_write_bad_stag);
	tcase_add_test(faults, test_tcp_write_out_of_bounds);
	tcase_add_test(faults, test_tcp_write_no_access);
	tcase_add_test(faults, test_tcp_read_bad_stag);
	tcase_add_test(faults, test_tcp_read_no_access);
	tcase_add_test(faults, test_tcp_peer_close_flushes);
	tcase_add_test(faults, test_tcp_rnr_exhausted);
	tcase_add_test(faults, test_tcp_rnr_waits);
	suite_add_tcase(s, faults);
	tcp_hostile_tcases(s);
	return s;
}
