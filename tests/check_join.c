/*
 * check_join.c - QPs joined out of band, the ibverbs way: each side learns
 * the other's (LID, QPN, PSN[, GID]) by means of its own and moves its QP
 * to RTR with dest_qp_num, rq_psn and an address vector, with no
 * ferry_qp_exchange before (rdma-core's rc_pingpong, perftest).  RC and UC,
 * in one process and across processes; what hardware does when nobody is
 * there (retry exceeded, never a hang), when the PSNs disagree, when the
 * peer dies, and against a process that claims to be the peer.
 *
 * Over shm unless FERRY_TRANSPORT says otherwise; the cases that play the
 * attacker against shm's rendezvous skip elsewhere.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_suites.h"
#include "testutil.h"
#include "pingpong.h"
#include "shm-internal.h"
#include "shm_join.h"

/* How one side is reached, as the ping-pong programs trade it. */
struct jt_addr {
	uint16_t lid;
	uint32_t qpn;
	uint32_t psn;
	union ferry_gid gid;
	/* For RDMA: where the side's buffer is. */
	uint64_t addr;
	uint32_t rkey;
};

/* Short retries where nobody answers (found out in ferry's floor of 2 s on
 * shm), long ones where somebody does (room for valgrind's pace). */
#define JT_TIMEOUT_SHORT 14	/* 4.096 us << 14 = 67 ms, twice */
#define JT_TIMEOUT_LONG	 21	/* 8.6 s, twice */
#define JT_RETRY_CNT	1
static uint8_t jt_timeout = JT_TIMEOUT_LONG;

/* The end's QP, remade as @type (tu_end_open makes RC). */
static void jt_end_open(struct tu_end *e, enum ferry_qp_type type)
{
	struct ferry_qp_init_attr init = {
		.send_cq = NULL, .cap = { .max_send_wr = 64, .max_recv_wr = 64,
					  .max_send_sge = 4, .max_recv_sge = 4 },
		.qp_type = type, .sq_sig_all = 1,
	};

	tu_end_open(e, NULL);
	if (type == FERRY_QPT_RC)
		return;
	init.send_cq = e->send_cq;
	init.recv_cq = e->recv_cq;
	ck_assert_int_eq(ferry_destroy_qp(e->qp), 0);
	e->qp = ferry_create_qp(e->pd, &init);
	ck_assert_ptr_nonnull(e->qp);
	ck_assert_int_eq(e->qp->qp_type, type);
}

static void jt_addr_of(struct tu_end *e, uint32_t psn, struct jt_addr *a)
{
	struct ferry_port_attr port;

	memset(a, 0, sizeof(*a));
	ck_assert_int_eq(ferry_query_port(e->ctx, 1, &port), 0);
	a->lid = port.lid;
	if (ferry_query_gid(e->ctx, 1, 0, &a->gid) < 0)
		memset(&a->gid, 0, sizeof(a->gid));
	a->qpn = e->qp->qp_num;
	a->psn = psn;
	a->addr = (uintptr_t)e->buf;
	a->rkey = e->mr->rkey;
}

/* INIT -> RTR -> RTS towards @peer, with the masks ibverbs wants for the
 * QP's type; by GID when @global.  0 or -1 (errno) from the first to fail. */
static int jt_join(struct ferry_qp *qp, uint32_t my_psn, const struct jt_addr *peer,
		   bool global)
{
	bool rc = qp->qp_type == FERRY_QPT_RC;
	struct ferry_qp_attr a = {
		.qp_state = FERRY_QPS_RTR, .path_mtu = FERRY_MTU_1024,
		.dest_qp_num = peer->qpn, .rq_psn = peer->psn,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .dlid = peer->lid, .port_num = 1 },
	};
	int mask = FERRY_QP_STATE | FERRY_QP_AV | FERRY_QP_PATH_MTU | FERRY_QP_DEST_QPN |
		   FERRY_QP_RQ_PSN;

	if (global || !peer->lid) {	/* RoCE: no LIDs, a GID always */
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = peer->gid;
		a.ah_attr.grh.hop_limit = 1;
		a.ah_attr.dlid = 0;
	}
	if (tu_qp_to_init(qp, TU_QP_ACCESS_ALL) < 0)
		return -1;
	if (rc)
		mask |= FERRY_QP_MAX_DEST_RD_ATOMIC | FERRY_QP_MIN_RNR_TIMER;
	if (ferry_modify_qp(qp, &a, mask) < 0)
		return -1;
	a.qp_state = FERRY_QPS_RTS;
	a.sq_psn = my_psn;
	a.timeout = jt_timeout;
	a.retry_cnt = JT_RETRY_CNT;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	mask = FERRY_QP_STATE | FERRY_QP_SQ_PSN;
	if (rc)
		mask |= FERRY_QP_TIMEOUT | FERRY_QP_RETRY_CNT | FERRY_QP_RNR_RETRY |
			FERRY_QP_MAX_QP_RD_ATOMIC;
	return ferry_modify_qp(qp, &a, mask);
}

/* A SEND of @len bytes of pattern @seed from @from's buffer into @to's. */
static void jt_send_ok(struct tu_end *from, struct tu_end *to, uint32_t len, unsigned int seed)
{
	struct ferry_wc wc;

	ck_assert_int_eq(tu_post_recv1(to->qp, 100 + seed, to->buf + 8192, len, to->mr->lkey), 0);
	tu_fill(from->buf, len, seed);
	ck_assert_int_eq(tu_post_send1(from->qp, seed, FERRY_WR_SEND, 0, from->buf, len,
				       from->mr->lkey, 0, 0), 0);
	tu_poll1(from->send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.wr_id, seed);
	tu_poll1(to->recv_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.byte_len, len);
	ck_assert(tu_check(to->buf + 8192, len, seed));
}

/* RDMA @opcode of @len bytes between @e's buffer and @peer's (at 16 KiB). */
static void jt_rdma_ok(struct tu_end *e, const struct jt_addr *peer,
		       enum ferry_wr_opcode opcode, uint32_t len)
{
	struct ferry_wc wc;

	ck_assert_int_eq(tu_post_send1(e->qp, 7, opcode, 0, e->buf + 4096, len, e->mr->lkey,
				       peer->addr + 16384, peer->rkey), 0);
	tu_poll1(e->send_cq, &wc);
	ck_assert_msg(wc.status == FERRY_WC_SUCCESS, "RDMA: %s", ferry_wc_status_str(wc.status));
}

static void jt_pair(struct tu_end *a, struct tu_end *b, enum ferry_qp_type type,
		    struct jt_addr *aa, struct jt_addr *ba, bool global)
{
	jt_end_open(a, type);
	jt_end_open(b, type);
	jt_addr_of(a, 0x123456, aa);
	jt_addr_of(b, 0x00abcd, ba);
	ck_assert_int_eq(jt_join(a->qp, aa->psn, ba, global), 0);
	ck_assert_int_eq(jt_join(b->qp, ba->psn, aa, global), 0);
}

START_TEST(test_join_rc_lid)
{
	struct tu_end a, b;
	struct jt_addr aa, ba;

	jt_pair(&a, &b, FERRY_QPT_RC, &aa, &ba, false);
	jt_send_ok(&a, &b, 100, 1);
	jt_send_ok(&b, &a, 2000, 2);
	tu_fill(a.buf + 4096, 512, 3);
	jt_rdma_ok(&a, &ba, FERRY_WR_RDMA_WRITE, 512);
	ck_assert(tu_check(b.buf + 16384, 512, 3));
	tu_fill(a.buf + 16384, 300, 4);
	jt_rdma_ok(&b, &aa, FERRY_WR_RDMA_READ, 300);
	ck_assert(tu_check(b.buf + 4096, 300, 4));
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_RTS);
	tu_end_close(&a);
	tu_end_close(&b);
}
END_TEST

START_TEST(test_join_rc_gid)
{
	struct tu_end a, b;
	struct jt_addr aa, ba;
	struct ferry_qp_attr attr;
	struct ferry_qp_init_attr init;

	if (!tu_on_shm())
		return;		/* the GID of a device: its index 0 may not be routable */
	jt_pair(&a, &b, FERRY_QPT_RC, &aa, &ba, true);
	jt_send_ok(&b, &a, 64, 5);
	jt_send_ok(&a, &b, 64, 6);
	ck_assert_int_eq(ferry_query_qp(a.qp, &attr, 0, &init), 0);
	ck_assert_uint_eq(attr.dest_qp_num, ba.qpn);
	ck_assert_uint_eq(attr.rq_psn, ba.psn);
	ck_assert_uint_eq(attr.sq_psn, aa.psn);
	ck_assert_int_eq(attr.ah_attr.is_global, 1);
	ck_assert_int_eq(init.qp_type, FERRY_QPT_RC);
	tu_end_close(&a);
	tu_end_close(&b);
}
END_TEST

START_TEST(test_join_uc)
{
	struct tu_end a, b;
	struct jt_addr aa, ba;
	struct ferry_send_wr *bad = NULL;
	struct ferry_sge sge;
	struct ferry_send_wr wr = { .sg_list = &sge, .num_sge = 1 };
	struct ferry_wc wc;

	jt_pair(&a, &b, FERRY_QPT_UC, &aa, &ba, false);
	jt_send_ok(&a, &b, 256, 7);
	jt_send_ok(&b, &a, 256, 8);
	tu_fill(a.buf + 4096, 1024, 9);
	jt_rdma_ok(&a, &ba, FERRY_WR_RDMA_WRITE, 1024);
	ck_assert(tu_check(b.buf + 16384, 1024, 9));
	/* WRITE_WITH_IMM takes a receive and says its immediate */
	ck_assert_int_eq(tu_post_recv1(b.qp, 55, b.buf, 0, b.mr->lkey), 0);
	sge = (struct ferry_sge){ (uintptr_t)a.buf, 16, a.mr->lkey };
	wr.opcode = FERRY_WR_RDMA_WRITE_WITH_IMM;
	wr.imm_data = htonl(0xfeed);
	wr.wr.rdma.remote_addr = ba.addr + 16384;
	wr.wr.rdma.rkey = ba.rkey;
	tu_post_send_ok(a.qp, &wr);
	tu_poll1(a.send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	tu_poll1(b.recv_cq, &wc);
	ck_assert_int_eq(wc.opcode, FERRY_WC_RECV_RDMA_WITH_IMM);
	ck_assert_uint_eq(ntohl(wc.imm_data), 0xfeed);
	/* no READ, no atomics on UC: refused at post time */
	wr.opcode = FERRY_WR_RDMA_READ;
	ck_assert_int_eq(ferry_post_send(a.qp, &wr, &bad), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_eq(bad, &wr);
	sge.length = 8;
	wr.opcode = FERRY_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = ba.addr;
	wr.wr.atomic.rkey = ba.rkey;
	ck_assert_int_eq(ferry_post_send(a.qp, &wr, &bad), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* no receive posted: dropped there, a success here, and no RNR wait */
	ck_assert_int_eq(tu_post_send1(a.qp, 60, FERRY_WR_SEND, 0, a.buf, 32, a.mr->lkey,
				       0, 0), 0);
	tu_poll1(a.send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	tu_assert_cq_empty(b.recv_cq);
	jt_send_ok(&a, &b, 32, 10);	/* the next one, with a receive, arrives */
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_RTS);
	tu_end_close(&a);
	tu_end_close(&b);
}
END_TEST

/* The UC state machine: RTR and RTS take none of RC's retry attributes. */
START_TEST(test_join_uc_masks)
{
	struct tu_end a;
	struct ferry_qp_attr attr = { .qp_state = FERRY_QPS_RTR, .path_mtu = FERRY_MTU_1024,
				      .dest_qp_num = 1, .ah_attr = { .dlid = 1 } };
	int mask = FERRY_QP_STATE | FERRY_QP_AV | FERRY_QP_PATH_MTU | FERRY_QP_DEST_QPN |
		   FERRY_QP_RQ_PSN;
	struct jt_addr self;

	jt_end_open(&a, FERRY_QPT_UC);
	jt_addr_of(&a, 0, &self);
	if (!self.lid) {	/* RoCE: a GID, not a LID */
		attr.ah_attr.is_global = 1;
		attr.ah_attr.grh.dgid = self.gid;
		attr.ah_attr.grh.hop_limit = 1;
	}
	ck_assert_int_eq(tu_qp_to_init(a.qp, FERRY_ACCESS_REMOTE_WRITE), 0);
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, mask | FERRY_QP_MIN_RNR_TIMER), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, mask), 0);
	attr.qp_state = FERRY_QPS_RTS;
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE | FERRY_QP_SQ_PSN |
					 FERRY_QP_RETRY_CNT), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE | FERRY_QP_SQ_PSN), 0);
	tu_end_close(&a);
}
END_TEST

/* UC through the exchange too: ferry_qp_connect_sock takes UC's masks. */
START_TEST(test_join_uc_exchange)
{
	struct tu_end a, b;
	struct jt_addr ba;

	jt_end_open(&a, FERRY_QPT_UC);
	jt_end_open(&b, FERRY_QPT_UC);
	tu_pair_connect(&a, &b, FERRY_ACCESS_REMOTE_WRITE);
	jt_send_ok(&a, &b, 100, 14);
	jt_addr_of(&b, 0, &ba);
	tu_fill(a.buf + 4096, 64, 15);
	jt_rdma_ok(&a, &ba, FERRY_WR_RDMA_WRITE, 64);
	ck_assert(tu_check(b.buf + 16384, 64, 15));
	tu_end_close(&a);
	tu_end_close(&b);
}
END_TEST

/* A send that waits for nobody: RETRY_EXC_ERR, then ERR, bounded. */
static void jt_expect_retry_exc(struct tu_end *e)
{
	struct ferry_wc wc[2];
	uint64_t t0 = tu_now_ms();

	ck_assert_int_eq(tu_post_send1(e->qp, 31, FERRY_WR_SEND, 0, e->buf, 8, e->mr->lkey,
				       0, 0), 0);
	ck_assert_int_eq(tu_post_send1(e->qp, 32, FERRY_WR_SEND, 0, e->buf, 8, e->mr->lkey,
				       0, 0), 0);
	ck_assert_int_eq(tu_poll(e->send_cq, wc, 2, TU_WAIT_MS), 2);
	ck_assert_uint_eq(wc[0].wr_id, 31);
	ck_assert_msg(wc[0].status == FERRY_WC_RETRY_EXC_ERR, "status %s",
		      ferry_wc_status_str(wc[0].status));
	ck_assert_uint_eq(wc[1].wr_id, 32);
	ck_assert_int_eq(wc[1].status, FERRY_WC_WR_FLUSH_ERR);
	ck_assert_int_eq(tu_qp_state(e->qp), FERRY_QPS_ERR);
	ck_assert_uint_lt(tu_now_ms() - t0, TU_WAIT_MS);
}

START_TEST(test_join_wrong_qpn)
{
	struct tu_end a, b;
	struct jt_addr aa, ba;

	jt_timeout = JT_TIMEOUT_SHORT;

	jt_end_open(&a, FERRY_QPT_RC);
	jt_end_open(&b, FERRY_QPT_RC);
	jt_addr_of(&a, 1, &aa);
	jt_addr_of(&b, 2, &ba);
	ba.qpn += 1000;		/* nobody */
	ck_assert_int_eq(jt_join(a.qp, aa.psn, &ba, false), 0);	/* RTR: no word of it */
	ck_assert_int_eq(jt_join(b.qp, 2, &aa, false), 0);
	jt_expect_retry_exc(&a);
	/* On shm a waits for another QP, so b finds nobody either; a device's
	 * RC responder takes b's packets (their source QPN is not in them). */
	if (tu_on_shm())
		jt_expect_retry_exc(&b);
	tu_end_close(&a);
	tu_end_close(&b);
}
END_TEST

START_TEST(test_join_unreachable_gid)
{
	struct tu_end a;
	struct jt_addr nobody = { .qpn = 0x77 };

	jt_timeout = JT_TIMEOUT_SHORT;

	if (!tu_on_shm())
		return;
	jt_end_open(&a, FERRY_QPT_RC);
	memset(nobody.gid.raw, 0xfe, sizeof(nobody.gid.raw));	/* not an shm GID */
	ck_assert_int_eq(jt_join(a.qp, 1, &nobody, true), 0);
	jt_expect_retry_exc(&a);
	tu_end_close(&a);
}
END_TEST

/*
 * RC with a PSN the peer does not expect: the sender's packets would be
 * out of sequence there, NAKed and retried in vain -- its first send
 * completes with RETRY_EXC_ERR and it goes to ERR.  The other direction,
 * whose PSNs agree, works until then.
 */
START_TEST(test_join_wrong_psn)
{
	struct tu_end a, b;
	struct jt_addr aa, ba;
	struct ferry_wc wc;

	jt_timeout = JT_TIMEOUT_SHORT;

	if (!tu_on_shm())
		return;		/* ferry's choice; devices differ (docs/wire.md) */
	jt_end_open(&a, FERRY_QPT_RC);
	jt_end_open(&b, FERRY_QPT_RC);
	jt_addr_of(&a, 100, &aa);
	jt_addr_of(&b, 200, &ba);
	ck_assert_int_eq(jt_join(a.qp, 101, &ba, false), 0);	/* b expects 100 */
	ck_assert_int_eq(jt_join(b.qp, 200, &aa, false), 0);
	jt_send_ok(&b, &a, 40, 11);
	ck_assert_int_eq(tu_post_recv1(b.qp, 9, b.buf, 64, b.mr->lkey), 0);
	jt_expect_retry_exc(&a);
	ck_assert_int_eq(tu_poll(b.recv_cq, &wc, 1, 200), 0);	/* nothing arrived */
	tu_end_close(&a);
	tu_end_close(&b);
}
END_TEST

/* UC resyncs on the first packet of a message: PSNs do not matter. */
START_TEST(test_join_uc_psn)
{
	struct tu_end a, b;
	struct jt_addr aa, ba;

	jt_end_open(&a, FERRY_QPT_UC);
	jt_end_open(&b, FERRY_QPT_UC);
	jt_addr_of(&a, 100, &aa);
	jt_addr_of(&b, 200, &ba);
	ck_assert_int_eq(jt_join(a.qp, 555, &ba, false), 0);
	ck_assert_int_eq(jt_join(b.qp, 666, &aa, false), 0);
	jt_send_ok(&a, &b, 40, 12);
	jt_send_ok(&b, &a, 40, 13);
	tu_end_close(&a);
	tu_end_close(&b);
}
END_TEST

/* UC towards nobody: sends complete (dropped), nothing retried, no ERR. */
START_TEST(test_join_uc_nobody)
{
	struct tu_end a;
	struct jt_addr aa, nobody;
	struct ferry_wc wc;

	jt_end_open(&a, FERRY_QPT_UC);
	jt_addr_of(&a, 1, &aa);
	nobody = aa;
	nobody.qpn = aa.qpn + 1000;
	ck_assert_int_eq(jt_join(a.qp, 1, &nobody, false), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 41, FERRY_WR_SEND, 0, a.buf, 8, a.mr->lkey,
				       0, 0), 0);
	tu_poll1(a.send_cq, &wc);
	ck_assert_uint_eq(wc.wr_id, 41);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_int_eq(tu_post_send1(a.qp, 42, FERRY_WR_SEND, 0, a.buf, 8, a.mr->lkey,
				       0, 0), 0);
	tu_poll1(a.send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_RTS);
	tu_end_close(&a);
}
END_TEST

/*
 * Across processes: the child joins by LID (the parent by GID), answers
 * one SEND with one, and waits to be told to go (or is killed).
 */
static int jt_child_peer(int sock, int ctl, void *arg)
{
	enum ferry_qp_type type = *(enum ferry_qp_type *)arg;
	struct tu_end e;
	struct jt_addr mine, peer;
	struct ferry_port_attr port;
	struct ferry_wc wc;
	uint32_t go;

	(void)sock;
	tu_child_end_open(&e, NULL);
	if (type == FERRY_QPT_UC) {
		struct ferry_qp_init_attr init = {
			.send_cq = e.send_cq, .recv_cq = e.recv_cq, .qp_type = type,
			.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 4,
				 .max_recv_sge = 4 }, .sq_sig_all = 1 };

		TU_CHILD_CHECK(ferry_destroy_qp(e.qp) == 0);
		TU_CHILD_CHECK((e.qp = ferry_create_qp(e.pd, &init)) != NULL);
	}
	TU_CHILD_CHECK(ferry_query_port(e.ctx, 1, &port) == 0);
	memset(&mine, 0, sizeof(mine));
	mine.lid = port.lid;
	mine.qpn = e.qp->qp_num;
	mine.psn = 0x4242;
	TU_CHILD_CHECK(ferry_query_gid(e.ctx, 1, 0, &mine.gid) == 0);
	mine.addr = (uintptr_t)e.buf;
	mine.rkey = e.mr->rkey;
	TU_CHILD_CHECK(tu_msg_send(ctl, &mine, sizeof(mine)) == 0);
	TU_CHILD_CHECK(tu_msg_recv(ctl, &peer, sizeof(peer), TU_WAIT_MS) == 0);
	TU_CHILD_CHECK(jt_join(e.qp, mine.psn, &peer, false) == 0);
	TU_CHILD_CHECK(tu_post_recv1(e.qp, 1, e.buf, 4096, e.mr->lkey) == 0);
	TU_CHILD_CHECK(tu_send_u32(ctl, 1) == 0);	/* ready */
	TU_CHILD_CHECK(tu_child_poll(e.recv_cq, &wc, 1, TU_WAIT_MS) == 1);
	TU_CHILD_CHECK(wc.status == FERRY_WC_SUCCESS && wc.byte_len == 64);
	TU_CHILD_CHECK(tu_post_send1(e.qp, 2, FERRY_WR_SEND, 0, e.buf, 64, e.mr->lkey,
				     0, 0) == 0);
	TU_CHILD_CHECK(tu_child_poll(e.send_cq, &wc, 1, TU_WAIT_MS) == 1);
	TU_CHILD_CHECK(wc.status == FERRY_WC_SUCCESS);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &go, 30000) == 0);
	tu_child_end_close(&e);
	return 0;
}

/* Parent's half: join the child (by GID), SEND, get the answer, WRITE. */
static pid_t jt_fork_joined(struct tu_end *e, enum ferry_qp_type *type, int *ctl_p,
			    struct jt_addr *child_p)
{
	struct jt_addr mine;
	struct ferry_wc wc;
	uint32_t ready;
	int sock;
	pid_t pid;

	/* Fork first: memory registered before a fork is the child's too on
	 * a device (copy-on-write moves the parent's pages off the MR). */
	pid = tu_fork(jt_child_peer, type, &sock, ctl_p);
	close(sock);
	jt_end_open(e, *type);
	jt_addr_of(e, 0x99, &mine);
	ck_assert_int_eq(tu_msg_recv(*ctl_p, child_p, sizeof(*child_p), TU_WAIT_MS), 0);
	ck_assert_int_eq(tu_msg_send(*ctl_p, &mine, sizeof(mine)), 0);
	ck_assert_int_eq(jt_join(e->qp, 0x99, child_p, true), 0);	/* by its GID */
	ck_assert_int_eq(tu_post_recv1(e->qp, 3, e->buf + 8192, 4096, e->mr->lkey), 0);
	ck_assert_int_eq(tu_recv_u32(*ctl_p, &ready, TU_WAIT_MS), 0);
	ck_assert_int_eq(tu_post_send1(e->qp, 4, FERRY_WR_SEND, 0, e->buf, 64, e->mr->lkey,
				       0, 0), 0);
	tu_poll1(e->send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	tu_poll1(e->recv_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.byte_len, 64);
	return pid;
}

START_TEST(test_join_fork_rc)
{
	enum ferry_qp_type type = FERRY_QPT_RC;
	struct jt_addr child;
	struct tu_end e;
	int ctl;
	pid_t pid;

	pid = jt_fork_joined(&e, &type, &ctl, &child);
	tu_fill(e.buf + 4096, 777, 21);
	jt_rdma_ok(&e, &child, FERRY_WR_RDMA_WRITE, 777);
	memset(e.buf + 4096, 0, 777);
	jt_rdma_ok(&e, &child, FERRY_WR_RDMA_READ, 777);	/* read it back */
	ck_assert(tu_check(e.buf + 4096, 777, 21));
	ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	close(ctl);
	tu_end_close(&e);
}
END_TEST

START_TEST(test_join_fork_uc)
{
	enum ferry_qp_type type = FERRY_QPT_UC;
	struct jt_addr child;
	struct tu_end e;
	int ctl;
	pid_t pid;

	pid = jt_fork_joined(&e, &type, &ctl, &child);
	ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	close(ctl);
	tu_end_close(&e);
}
END_TEST

/* The peer is killed after RTR and one exchange: errors, never a hang. */
START_TEST(test_join_dead_peer)
{
	enum ferry_qp_type type = FERRY_QPT_RC;
	struct jt_addr child;
	struct ferry_wc wc[4];
	struct tu_end e;
	int ctl, n;
	pid_t pid;

	jt_timeout = JT_TIMEOUT_SHORT;

	pid = jt_fork_joined(&e, &type, &ctl, &child);
	ck_assert_int_eq(tu_post_recv1(e.qp, 5, e.buf + 8192, 64, e.mr->lkey), 0);
	kill(pid, SIGKILL);
	ck_assert_int_ne(tu_wait_child(pid, TU_WAIT_MS), 0);
	/* shm sees the hang-up at once; a device at the next send's retries */
	if (tu_on_shm())
		ck_assert(tu_wait_qp_state(e.qp, FERRY_QPS_ERR, TU_WAIT_MS));
	ck_assert_int_eq(tu_post_send1(e.qp, 6, FERRY_WR_SEND, 0, e.buf, 8, e.mr->lkey,
				       0, 0), 0);
	n = tu_poll(e.send_cq, wc, 2, TU_WAIT_MS);
	ck_assert_int_ge(n, 2);		/* the receive flushed, the send failed */
	ck_assert_int_ne(wc[0].status, FERRY_WC_SUCCESS);
	ck_assert_int_ne(wc[1].status, FERRY_WC_SUCCESS);
	close(ctl);
	tu_end_close(&e);
}
END_TEST

/* The peer process is killed before it joins: the first send finds nobody. */
START_TEST(test_join_peer_gone_before)
{
	struct tu_end e;
	struct jt_addr mine, gone;
	int sv[2];
	pid_t pid;

	jt_timeout = JT_TIMEOUT_SHORT;

	jt_end_open(&e, FERRY_QPT_RC);
	jt_addr_of(&e, 5, &mine);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	pid = tu_fork_quiet();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		struct ferry_port_attr port;
		struct tu_end c;

		tu_child_end_open(&c, NULL);
		TU_CHILD_CHECK(ferry_query_port(c.ctx, 1, &port) == 0);
		memset(&gone, 0, sizeof(gone));
		gone.lid = port.lid;
		gone.qpn = c.qp->qp_num;
		TU_CHILD_CHECK(tu_msg_send(sv[1], &gone, sizeof(gone)) == 0);
		pause();
		_exit(0);
	}
	ck_assert_int_eq(tu_msg_recv(sv[0], &gone, sizeof(gone), TU_WAIT_MS), 0);
	kill(pid, SIGKILL);	/* gone, LID and all, before it joined */
	ck_assert_int_ne(tu_wait_child(pid, TU_WAIT_MS), 0);
	close(sv[0]);
	close(sv[1]);
	ck_assert_int_eq(jt_join(e.qp, 5, &gone, false), 0);
	jt_expect_retry_exc(&e);
	tu_end_close(&e);
}
END_TEST

/*
 * A hostile process dials our LID and says it is the peer our QP waits
 * for (its LID and QPN, which it may well know): it is refused, since it
 * does not hold that LID, and the QP still joins its real peer.
 */
static int jt_child_impostor(int sock, int ctl, void *arg)
{
	const struct jt_addr *w = arg;	/* [0]: the waiting QP, [1]: its real peer */
	struct shm_join_msg m;
	struct sockaddr_un un;
	socklen_t len = shm_port_lid_name(w[0].lid, &un);
	char buf[64];
	ssize_t n;
	int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	(void)sock;
	memset(&m, 0, sizeof(m));	/* padding too: it goes out whole */
	m.type = SHM_JOIN_REQ;
	m.qp_type = FERRY_QPT_RC;
	m.src_lid = w[1].lid;
	m.dst_lid = w[0].lid;
	m.src_qpn = w[1].qpn;
	m.dst_qpn = w[0].qpn;
	m.rq_psn = w[1].psn;
	m.magic = SHM_JOIN_MAGIC;
	m.version = SHM_JOIN_VERSION;
	TU_CHILD_CHECK(s >= 0);
	/* The join thread listens at the LID soon after the QP's RTR, not
	 * within it: a slow run (valgrind) may dial first. */
	for (int tries = 0; connect(s, (struct sockaddr *)&un, len) < 0; tries++) {
		TU_CHILD_CHECK((errno == ECONNREFUSED || errno == ENOENT) && tries < 1000);
		usleep(10000);
	}
	TU_CHILD_CHECK(send(s, &m, sizeof(m), 0) == (ssize_t)sizeof(m));
	n = recv(s, buf, sizeof(buf), 0);
	/* A REFUSE, or the door shut (reset, if it shut with our JOIN unread);
	 * never an ACCEPT. */
	TU_CHILD_CHECK(n == 0 || (n < 0 && errno == ECONNRESET) ||
		       (n == (ssize_t)sizeof(m) &&
			((struct shm_join_msg *)buf)->type == SHM_JOIN_REFUSE));
	TU_CHILD_CHECK(tu_send_u32(ctl, 1) == 0);
	close(s);
	return 0;
}

START_TEST(test_join_impostor)
{
	struct tu_end lo, hi;
	struct jt_addr w[2];
	uint32_t done;
	int sock, ctl;
	pid_t pid;

	if (!tu_on_shm())
		return;
	jt_end_open(&lo, FERRY_QPT_RC);	/* lower QPN: the one that dials */
	jt_end_open(&hi, FERRY_QPT_RC);
	jt_addr_of(&hi, 0x10, &w[0]);
	jt_addr_of(&lo, 0x20, &w[1]);
	ck_assert_uint_lt(w[1].qpn, w[0].qpn);
	ck_assert_int_eq(jt_join(hi.qp, w[0].psn, &w[1], false), 0);	/* waits */
	pid = tu_fork(jt_child_impostor, w, &sock, &ctl);
	ck_assert_int_eq(tu_recv_u32(ctl, &done, TU_WAIT_MS), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	close(sock);
	close(ctl);
	ck_assert_ptr_null(to_sqp(hi.qp)->conn);	/* the impostor got nothing */
	ck_assert_int_eq(jt_join(lo.qp, w[1].psn, &w[0], false), 0);
	jt_send_ok(&lo, &hi, 128, 22);
	jt_send_ok(&hi, &lo, 128, 23);
	tu_end_close(&lo);
	tu_end_close(&hi);
}
END_TEST

/* Garbage at the LID's door: the rendezvous drops it and goes on. */
START_TEST(test_join_garbage)
{
	struct tu_end a, b;
	struct jt_addr aa, ba;
	struct ferry_port_attr port;
	struct sockaddr_un un;
	socklen_t len;
	char junk[200];
	int i, s;

	if (!tu_on_shm())
		return;
	jt_end_open(&a, FERRY_QPT_RC);
	ck_assert_int_eq(ferry_query_port(a.ctx, 1, &port), 0);
	jt_end_open(&b, FERRY_QPT_RC);
	jt_addr_of(&a, 1, &aa);
	jt_addr_of(&b, 2, &ba);
	ck_assert_int_eq(jt_join(b.qp, 2, &aa, false), 0);	/* the listener runs */
	len = shm_port_lid_name(port.lid, &un);
	for (i = 0; i < 8; i++) {
		s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		ck_assert_int_ge(s, 0);
		ck_assert_int_eq(connect(s, (struct sockaddr *)&un, len), 0);
		memset(junk, i * 37, sizeof(junk));
		ck_assert_int_ge(send(s, junk, (size_t)(i * 13 + 1), 0), 0);
		close(s);
	}
	ck_assert_int_eq(jt_join(a.qp, 1, &ba, false), 0);
	jt_send_ok(&a, &b, 16, 24);
	tu_end_close(&a);
	tu_end_close(&b);
}
END_TEST

/* tcp: iWARP QPs are joined by the CM only, and are RC only. */
START_TEST(test_join_tcp_refuses)
{
	struct ferry_context *ctx = ferry_open_transport("tcp");
	struct ferry_pd *pd;
	struct ferry_cq *cq;
	struct ferry_qp *qp;
	struct ferry_qp_init_attr init = { .qp_type = FERRY_QPT_UC,
					   .cap = { .max_send_wr = 4, .max_recv_wr = 4 } };
	struct jt_addr nobody = { .lid = 1, .qpn = 2 };

	if (!ctx)
		return;		/* no tcp transport in this build */
	pd = ferry_alloc_pd(ctx);
	cq = ferry_create_cq(ctx, 8, NULL, NULL, 0);
	ck_assert_ptr_nonnull(pd);
	ck_assert_ptr_nonnull(cq);
	init.send_cq = init.recv_cq = cq;
	ck_assert_ptr_null(ferry_create_qp(pd, &init));
	ck_assert_int_eq(errno, EOPNOTSUPP);
	init.qp_type = FERRY_QPT_RC;
	qp = ferry_create_qp(pd, &init);
	ck_assert_ptr_nonnull(qp);
	ck_assert_int_eq(jt_join(qp, 1, &nobody, false), -1);
	ck_assert_int_eq(errno, ENOTCONN);
	ck_assert_int_eq(ferry_destroy_qp(qp), 0);
	ck_assert_int_eq(ferry_destroy_cq(cq), 0);
	ck_assert_int_eq(ferry_dealloc_pd(pd), 0);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

/* The ping-pong examples' address message: rdma-core's text, strictly. */
START_TEST(test_join_pp_message)
{
	struct pp_dest d = { .lid = 0x1b, .qpn = 0xabcdef, .psn = 0x123 }, back;
	char msg[PP_MSG_SIZE];
	int i;

	for (i = 0; i < 16; i++)
		d.gid.raw[i] = (uint8_t)(0xf0 + i);
	pp_dest_format(&d, msg);
	ck_assert_str_eq(msg, "001b:abcdef:000123:f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff");
	ck_assert_int_eq(pp_dest_parse(msg, &back), 0);
	ck_assert_uint_eq(back.lid, d.lid);
	ck_assert_uint_eq(back.qpn, d.qpn);
	ck_assert_uint_eq(back.psn, d.psn);
	ck_assert_mem_eq(back.gid.raw, d.gid.raw, 16);
	/* what a peer may send instead */
	msg[4] = '-';
	ck_assert_int_eq(pp_dest_parse(msg, &back), -1);
	pp_dest_format(&d, msg);
	msg[7] = 'x';
	ck_assert_int_eq(pp_dest_parse(msg, &back), -1);
	pp_dest_format(&d, msg);
	msg[PP_MSG_SIZE - 1] = 'a';	/* unterminated */
	ck_assert_int_eq(pp_dest_parse(msg, &back), -1);
}
END_TEST

/* Every test starts with the long retries (CK_FORK=no keeps globals). */
static void jt_setup(void)
{
	jt_timeout = JT_TIMEOUT_LONG;
}

Suite *join_suite(void)
{
	Suite *s = suite_create("join");
	TCase *tc = tcase_create("join");

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_checked_fixture(tc, jt_setup, NULL);
	tcase_add_test(tc, test_join_rc_lid);
	tcase_add_test(tc, test_join_rc_gid);
	tcase_add_test(tc, test_join_uc);
	tcase_add_test(tc, test_join_uc_masks);
	tcase_add_test(tc, test_join_uc_exchange);
	tcase_add_test(tc, test_join_wrong_qpn);
	tcase_add_test(tc, test_join_unreachable_gid);
	tcase_add_test(tc, test_join_wrong_psn);
	tcase_add_test(tc, test_join_uc_psn);
	tcase_add_test(tc, test_join_uc_nobody);
	tcase_add_test(tc, test_join_fork_rc);
	tcase_add_test(tc, test_join_fork_uc);
	tcase_add_test(tc, test_join_dead_peer);
	tcase_add_test(tc, test_join_peer_gone_before);
	tcase_add_test(tc, test_join_impostor);
	tcase_add_test(tc, test_join_garbage);
	tcase_add_test(tc, test_join_tcp_refuses);
	tcase_add_test(tc, test_join_pp_message);
	suite_add_tcase(s, tc);
	return s;
}
