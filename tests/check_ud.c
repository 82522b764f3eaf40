/*
 * check_ud.c - UD QPs and address handles (issue 17): what ibverbs gives
 * a UD program, on shm and (FERRY_TRANSPORT=verbs, in the Soft-RoCE VM)
 * on a real RDMA stack.
 *
 *  - ah: ferry_create_ah / ferry_destroy_ah and their errors; tcp has no
 *    UD (EOPNOTSUPP at create);
 *  - states: the UD state machine (RESET -> INIT needs P_Key index, port
 *    and Q_Key; INIT -> RTR takes no address; RTR -> RTS needs sq_psn);
 *  - one_to_one: the payload after 40 bytes of GRH, byte_len counting
 *    them, src_qp, slid, FERRY_WC_GRH and immediate data;
 *  - qkey: a datagram with another Q_Key is dropped and the receive stays
 *    posted; a remote_qkey with the high bit set sends the QP's own;
 *  - mtu: a message over the port's MTU is refused at post (EINVAL);
 *  - short_recv: a receive shorter than GRH + payload: LOC_LEN_ERR;
 *  - no_recv, no_qpn: nothing blocks or hangs a sender when nobody takes
 *    its datagrams;
 *  - err_flush: ERR flushes receives and sends; RESET and back, a new QP;
 *  - channel: a datagram raises an armed CQ's channel, and only then;
 *  - many (shm): two forked processes send to one QP;
 *  - hostile (shm): malformed datagrams, lies about size and source, a
 *    squatter of the next QP's name.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <ferry/verbs.h>

#include "check_suites.h"
#include "testutil.h"

#define UD_QKEY		0x11111111u
#define UD_BUF		(64 * 1024)
#define UD_SLOT		8192	/* a receive's slot of the buffer */
#define UD_QUIET_MS	200	/* how long "nothing arrives" is watched */

struct ud_end {
	struct ferry_context *ctx;
	struct ferry_pd *pd;
	struct ferry_comp_channel *ch;
	struct ferry_cq *cq;
	struct ferry_qp *qp;
	struct ferry_mr *mr;
	char *buf;
	uint16_t lid;
	union ferry_gid gid;
	uint32_t mtu;		/* bytes */
};

/* The failure a forked child reports by its exit status. */
#define UD_CHECK(child, cond) do { \
	if (child) { TU_CHILD_CHECK(cond); } else { ck_assert(cond); } } while (0)

static int ud_qp_ready(struct ferry_qp *qp, uint32_t qkey)
{
	struct ferry_qp_attr a = { .qp_state = FERRY_QPS_INIT, .port_num = 1, .qkey = qkey };

	if (ferry_modify_qp(qp, &a, FERRY_QP_STATE | FERRY_QP_PKEY_INDEX | FERRY_QP_PORT |
			    FERRY_QP_QKEY) < 0)
		return -1;
	a.qp_state = FERRY_QPS_RTR;
	if (ferry_modify_qp(qp, &a, FERRY_QP_STATE) < 0)
		return -1;
	a.qp_state = FERRY_QPS_RTS;
	a.sq_psn = 0x123;
	return ferry_modify_qp(qp, &a, FERRY_QP_STATE | FERRY_QP_SQ_PSN);
}

static void ud_open_as(struct ud_end *e, uint32_t qkey, bool channel, bool child)
{
	struct ferry_qp_init_attr ia = { .qp_type = FERRY_QPT_UD, .sq_sig_all = 1,
					 .cap = { .max_send_wr = 64, .max_recv_wr = 64,
						  .max_send_sge = 2, .max_recv_sge = 2 } };
	struct ferry_port_attr pa;

	memset(e, 0, sizeof(*e));
	e->ctx = ferry_open_transport(tu_transport());
	UD_CHECK(child, e->ctx != NULL);
	e->pd = ferry_alloc_pd(e->ctx);
	UD_CHECK(child, e->pd != NULL);
	if (channel) {
		e->ch = ferry_create_comp_channel(e->ctx);
		UD_CHECK(child, e->ch != NULL);
	}
	e->cq = ferry_create_cq(e->ctx, 256, NULL, e->ch, 0);
	UD_CHECK(child, e->cq != NULL);
	e->buf = calloc(1, UD_BUF);
	UD_CHECK(child, e->buf != NULL);
	e->mr = ferry_reg_mr(e->pd, e->buf, UD_BUF, FERRY_ACCESS_LOCAL_WRITE);
	UD_CHECK(child, e->mr != NULL);
	ia.send_cq = ia.recv_cq = e->cq;
	e->qp = ferry_create_qp(e->pd, &ia);
	UD_CHECK(child, e->qp != NULL);
	UD_CHECK(child, e->qp->qp_type == FERRY_QPT_UD);
	UD_CHECK(child, ud_qp_ready(e->qp, qkey) == 0);
	UD_CHECK(child, ferry_query_port(e->ctx, 1, &pa) == 0);
	UD_CHECK(child, ferry_query_gid(e->ctx, 1, 0, &e->gid) == 0);
	e->lid = pa.lid;
	e->mtu = 128u << pa.active_mtu;
}

static void ud_open(struct ud_end *e, uint32_t qkey, bool channel)
{
	ud_open_as(e, qkey, channel, false);
}

static void ud_close(struct ud_end *e)
{
	ck_assert_int_eq(ferry_destroy_qp(e->qp), 0);
	ck_assert_int_eq(ferry_dereg_mr(e->mr), 0);
	ck_assert_int_eq(ferry_destroy_cq(e->cq), 0);
	if (e->ch)
		ck_assert_int_eq(ferry_destroy_comp_channel(e->ch), 0);
	ck_assert_int_eq(ferry_dealloc_pd(e->pd), 0);
	ck_assert_int_eq(ferry_close_device(e->ctx), 0);
	free(e->buf);
}

/* An AH from @from to @to; with a GRH when @global (RoCE always has one). */
static struct ferry_ah *ud_ah(struct ud_end *from, const struct ud_end *to, bool global)
{
	struct ferry_ah_attr a = { .dlid = to->lid, .port_num = 1 };

	if (global || !tu_on_shm()) {
		a.is_global = 1;
		a.grh.dgid = to->gid;
		a.grh.hop_limit = 1;
		a.grh.flow_label = 0x12345;
		a.grh.traffic_class = 0x20;
	}
	return ferry_create_ah(from->pd, &a);
}

static int ud_post_recv(struct ud_end *e, uint64_t wr_id, size_t off, uint32_t len)
{
	struct ferry_sge sge = { (uintptr_t)(e->buf + off), len, e->mr->lkey };
	struct ferry_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ferry_post_recv(e->qp, &wr, &bad);
}

/* Send @len bytes from @off of @e's buffer to (@ah, @qpn, @qkey); 0 or errno. */
static int ud_send(struct ud_end *e, struct ferry_ah *ah, uint32_t qpn, uint32_t qkey,
		   size_t off, uint32_t len, uint64_t wr_id)
{
	struct ferry_sge sge = { (uintptr_t)(e->buf + off), len, e->mr->lkey };
	struct ferry_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				    .opcode = FERRY_WR_SEND, .send_flags = FERRY_SEND_SIGNALED },
			     *bad = NULL;

	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = qkey;
	if (ferry_post_send(e->qp, &wr, &bad) < 0) {
		ck_assert_ptr_eq(bad, &wr);
		return errno;
	}
	return 0;
}

/* The send's own completion: UD completes locally, whatever the receiver does. */
static void ud_send_done(struct ud_end *e, uint64_t wr_id)
{
	struct ferry_wc wc;

	tu_poll1(e->cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_int_eq(wc.opcode, FERRY_WC_SEND);
	ck_assert_uint_eq(wc.wr_id, wr_id);
}

static void ud_send_ok(struct ud_end *e, struct ferry_ah *ah, const struct ud_end *to,
		       uint32_t qkey, size_t off, uint32_t len, uint64_t wr_id)
{
	ck_assert_int_eq(ud_send(e, ah, to->qp->qp_num, qkey, off, len, wr_id), 0);
	ud_send_done(e, wr_id);
}

/* --- address handles and states --- */

START_TEST(ah_errors)
{
	struct ferry_ah_attr a = { .port_num = 1, .dlid = 1 };
	struct ud_end e;
	struct ferry_ah *ah;

	ud_open(&e, UD_QKEY, false);
	ah = ud_ah(&e, &e, false);
	ck_assert_ptr_nonnull(ah);
	ck_assert_ptr_eq(ah->pd, e.pd);
	ck_assert_ptr_eq(ah->context, e.ctx);
	ck_assert_int_eq(ferry_destroy_ah(ah), 0);

	errno = 0;
	ck_assert_ptr_null(ferry_create_ah(NULL, &a));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_null(ferry_create_ah(e.pd, NULL));
	ck_assert_int_eq(errno, EINVAL);
	a.port_num = 0;
	ck_assert_ptr_null(ferry_create_ah(e.pd, &a));
	ck_assert_int_eq(errno, EINVAL);
	a.port_num = 1;
	a.dlid = 0xc000;	/* multicast, and no GRH */
	ck_assert_ptr_null(ferry_create_ah(e.pd, &a));
	ck_assert_int_eq(errno, EINVAL);
	if (tu_on_shm()) {
		a.dlid = 0;	/* no such LID */
		ck_assert_ptr_null(ferry_create_ah(e.pd, &a));
		ck_assert_int_eq(errno, EINVAL);
		a.dlid = 1;
		a.port_num = 2;	/* one port */
		ck_assert_ptr_null(ferry_create_ah(e.pd, &a));
		ck_assert_int_eq(errno, EINVAL);
	}
	ck_assert_int_eq(ferry_destroy_ah(NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ud_close(&e);
}
END_TEST

/* iWARP has no datagrams: tcp says so at both doors. */
START_TEST(tcp_has_none)
{
	struct ferry_context *ctx = ferry_open_transport("tcp");
	struct ferry_ah_attr a = { .port_num = 1, .dlid = 1 };
	struct ferry_qp_init_attr ia = { .qp_type = FERRY_QPT_UD };
	struct ferry_pd *pd;

	ck_assert_ptr_nonnull(ctx);
	pd = ferry_alloc_pd(ctx);
	ck_assert_ptr_nonnull(pd);
	ia.send_cq = ia.recv_cq = ferry_create_cq(ctx, 16, NULL, NULL, 0);
	ck_assert_ptr_nonnull(ia.send_cq);
	errno = 0;
	ck_assert_ptr_null(ferry_create_ah(pd, &a));
	ck_assert_int_eq(errno, EOPNOTSUPP);
	errno = 0;
	ck_assert_ptr_null(ferry_create_qp(pd, &ia));
	ck_assert_int_eq(errno, EOPNOTSUPP);
	ck_assert_int_eq(ferry_destroy_cq(ia.send_cq), 0);
	ck_assert_int_eq(ferry_dealloc_pd(pd), 0);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

START_TEST(states)
{
	struct ferry_qp_init_attr ia = { .qp_type = FERRY_QPT_UD,
					 .cap = { .max_send_wr = 4, .max_recv_wr = 4 } }, got;
	struct ferry_qp_attr a = { .qp_state = FERRY_QPS_INIT, .port_num = 1, .qkey = 7 }, q;
	struct ud_end e;
	struct ferry_qp *qp;
	int base = FERRY_QP_STATE | FERRY_QP_PKEY_INDEX | FERRY_QP_PORT;

	ud_open(&e, UD_QKEY, false);
	ia.send_cq = ia.recv_cq = e.cq;
	qp = ferry_create_qp(e.pd, &ia);
	ck_assert_ptr_nonnull(qp);
	ck_assert_int_eq(qp->state, FERRY_QPS_RESET);
	{
		struct ferry_sge sge = { (uintptr_t)e.buf, 64, e.mr->lkey };
		struct ferry_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;

		ck_assert_int_eq(ferry_post_recv(qp, &wr, &bad), -1);	/* RESET takes none */
		ck_assert_int_eq(errno, EINVAL);
	}
	ck_assert_int_eq(ferry_modify_qp(qp, &a, base), -1);	/* no Q_Key */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_modify_qp(qp, &a, base | FERRY_QP_QKEY | FERRY_QP_ACCESS_FLAGS),
			 -1);	/* RC's access flags are not UD's */
	ck_assert_int_eq(ferry_modify_qp(qp, &a, base | FERRY_QP_QKEY), 0);
	a.qp_state = FERRY_QPS_RTR;
	ck_assert_int_eq(ferry_modify_qp(qp, &a, FERRY_QP_STATE | FERRY_QP_AV), -1);
	ck_assert_int_eq(ferry_modify_qp(qp, &a, FERRY_QP_STATE | FERRY_QP_DEST_QPN), -1);
	ck_assert_int_eq(ferry_modify_qp(qp, &a, FERRY_QP_STATE), 0);
	a.qp_state = FERRY_QPS_RTS;
	ck_assert_int_eq(ferry_modify_qp(qp, &a, FERRY_QP_STATE), -1);	/* no sq_psn */
	ck_assert_int_eq(errno, EINVAL);
	a.qkey = 9;
	ck_assert_int_eq(ferry_modify_qp(qp, &a, FERRY_QP_STATE | FERRY_QP_SQ_PSN |
					 FERRY_QP_QKEY), 0);
	ck_assert_int_eq(ferry_query_qp(qp, &q, FERRY_QP_STATE | FERRY_QP_QKEY, &got), 0);
	ck_assert_int_eq(q.qp_state, FERRY_QPS_RTS);
	ck_assert_uint_eq(q.qkey, 9);
	ck_assert_int_eq(got.qp_type, FERRY_QPT_UD);
	ck_assert_int_eq(ferry_destroy_qp(qp), 0);
	ud_close(&e);
}
END_TEST

/* --- one datagram --- */

static void ud_check_grh(const struct ud_end *to, const struct ud_end *from, const char *at,
			 uint32_t len)
{
	struct ferry_grh grh;

	memcpy(&grh, at, sizeof(grh));
	ck_assert_uint_eq(sizeof(grh), FERRY_GRH_BYTES);
	if (!tu_on_shm())
		return;	/* RoCE v2 puts an IPv4 header there for IPv4 GIDs */
	ck_assert_uint_eq(ntohl(grh.version_tclass_flow), 6u << 28 | 0x20u << 20 | 0x12345);
	ck_assert_uint_eq(ntohs(grh.paylen), len);
	ck_assert_int_eq(memcmp(&grh.sgid, &from->gid, 16), 0);
	ck_assert_int_eq(memcmp(&grh.dgid, &to->gid, 16), 0);
}

START_TEST(one_to_one)
{
	struct ud_end a, b;
	struct ferry_ah *ah;
	struct ferry_sge sge;
	struct ferry_send_wr wr = { .wr_id = 5, .sg_list = &sge, .num_sge = 1,
				    .opcode = FERRY_WR_SEND_WITH_IMM,
				    .send_flags = FERRY_SEND_SIGNALED, .imm_data = htonl(0xabcd) },
			     *bad;
	struct ferry_wc wc;

	ud_open(&a, UD_QKEY, false);
	ud_open(&b, UD_QKEY, false);
	ah = ud_ah(&a, &b, true);
	ck_assert_ptr_nonnull(ah);
	memcpy(a.buf, "hello, datagram", 16);
	memset(b.buf, 0x5a, 256);
	ck_assert_int_eq(ud_post_recv(&b, 77, 0, FERRY_GRH_BYTES + 100), 0);
	sge = (struct ferry_sge){ (uintptr_t)a.buf, 16, a.mr->lkey };
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = b.qp->qp_num;
	wr.wr.ud.remote_qkey = UD_QKEY;
	ck_assert_int_eq(ferry_post_send(a.qp, &wr, &bad), 0);
	ud_send_done(&a, 5);
	tu_poll1(b.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.wr_id, 77);
	ck_assert_int_eq(wc.opcode, FERRY_WC_RECV);
	ck_assert_uint_eq(wc.byte_len, FERRY_GRH_BYTES + 16);
	ck_assert_uint_eq(wc.qp_num, b.qp->qp_num);
	ck_assert_uint_eq(wc.src_qp, a.qp->qp_num);
	ck_assert_uint_eq(wc.slid, a.lid);
	ck_assert_uint_eq(wc.wc_flags & (FERRY_WC_GRH | FERRY_WC_WITH_IMM),
			  FERRY_WC_GRH | FERRY_WC_WITH_IMM);
	ck_assert_uint_eq(ntohl(wc.imm_data), 0xabcd);
	ck_assert_str_eq(b.buf + FERRY_GRH_BYTES, "hello, datagram");
	ck_assert_uint_eq((uint8_t)b.buf[FERRY_GRH_BYTES + 16], 0x5a);
	ud_check_grh(&b, &a, b.buf, 16);
	ck_assert_int_eq(ferry_destroy_ah(ah), 0);

	if (tu_on_shm()) {	/* without a GRH: the flag stays off */
		ah = ud_ah(&a, &b, false);
		ck_assert_int_eq(ud_post_recv(&b, 78, 0, FERRY_GRH_BYTES + 100), 0);
		ud_send_ok(&a, ah, &b, UD_QKEY, 0, 16, 6);
		tu_poll1(b.cq, &wc);
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
		ck_assert_uint_eq(wc.byte_len, FERRY_GRH_BYTES + 16);
		ck_assert_uint_eq(wc.wc_flags & FERRY_WC_GRH, 0);
		ck_assert_int_eq(ferry_destroy_ah(ah), 0);
	}
	tu_assert_cq_empty(b.cq);
	ud_close(&a);
	ud_close(&b);
}
END_TEST

START_TEST(qkey)
{
	struct ud_end a, b;
	struct ferry_ah *ah;
	struct ferry_wc wc;

	ud_open(&a, UD_QKEY, false);
	ud_open(&b, UD_QKEY, false);
	ah = ud_ah(&a, &b, false);
	ck_assert_int_eq(ud_post_recv(&b, 1, 0, UD_SLOT), 0);
	ud_send_ok(&a, ah, &b, UD_QKEY + 1, 0, 32, 1);	/* wrong key: dropped */
	ck_assert_int_eq(tu_poll(b.cq, &wc, 1, UD_QUIET_MS), 0);
	a.buf[0] = 'k';
	/* On shm, the high bit: the sender's own Q_Key, which is b's (rxe
	 * sends the WR's key as it is: that rule is the device's). */
	ud_send_ok(&a, ah, &b, tu_on_shm() ? 0x80000000u : UD_QKEY, 0, 32, 2);
	tu_poll1(b.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.wr_id, 1);		/* the receive was still there */
	ck_assert_uint_eq(wc.byte_len, FERRY_GRH_BYTES + 32);
	ck_assert_int_eq(b.buf[FERRY_GRH_BYTES], 'k');
	tu_assert_cq_empty(b.cq);
	ck_assert_int_eq(ferry_destroy_ah(ah), 0);
	ud_close(&a);
	ud_close(&b);
}
END_TEST

START_TEST(mtu)
{
	struct ud_end a, b;
	struct ferry_ah *ah;
	struct ferry_wc wc;

	ud_open(&a, UD_QKEY, false);
	ud_open(&b, UD_QKEY, false);
	ah = ud_ah(&a, &b, false);
	ck_assert_int_eq(ud_post_recv(&b, 1, 0, UD_SLOT * 2), 0);
	if (tu_on_shm()) {
		ck_assert_int_eq(ud_send(&a, ah, b.qp->qp_num, UD_QKEY, 0, a.mtu + 1, 1),
				 EINVAL);
		tu_assert_cq_empty(a.cq);
	} else if (ud_send(&a, ah, b.qp->qp_num, UD_QKEY, 0, a.mtu + 1, 1) == 0) {
		/* A device may instead send nothing and say nothing (IBA
		 * C10-93.1.1; rxe does): the receive must stay unused. */
		tu_poll1(a.cq, &wc);
		ck_assert_uint_eq(wc.wr_id, 1);
	}
	ud_send_ok(&a, ah, &b, UD_QKEY, 0, a.mtu, 2);	/* the MTU itself goes */
	tu_poll1(b.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.wr_id, 1);
	ck_assert_uint_eq(wc.byte_len, FERRY_GRH_BYTES + a.mtu);
	ck_assert_int_eq(ferry_destroy_ah(ah), 0);
	ud_close(&a);
	ud_close(&b);
}
END_TEST

START_TEST(short_recv)
{
	struct ud_end a, b;
	struct ferry_ah *ah;
	struct ferry_wc wc;

	ud_open(&a, UD_QKEY, false);
	ud_open(&b, UD_QKEY, false);
	ah = ud_ah(&a, &b, false);
	ck_assert_int_eq(ud_post_recv(&b, 1, 0, FERRY_GRH_BYTES + 4), 0);
	memset(b.buf, 0x33, 256);
	ud_send_ok(&a, ah, &b, UD_QKEY, 0, 100, 1);
	tu_poll1(b.cq, &wc);
	ck_assert_uint_eq(wc.wr_id, 1);
	/* What a device says is its own: rxe, LOC_QP_OP_ERR. */
	ck_assert_int_eq(wc.status, tu_on_shm() ? FERRY_WC_LOC_LEN_ERR : wc.status);
	ck_assert_int_ne(wc.status, FERRY_WC_SUCCESS);
	if (tu_on_shm()) {
		/* Nothing was written past the receive, and the QP goes on. */
		ck_assert_uint_eq((uint8_t)b.buf[FERRY_GRH_BYTES + 4], 0x33);
		ck_assert_int_eq(ud_post_recv(&b, 2, 0, UD_SLOT), 0);
		ud_send_ok(&a, ah, &b, UD_QKEY, 0, 100, 2);
		tu_poll1(b.cq, &wc);
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
		ck_assert_uint_eq(wc.wr_id, 2);
	}
	ck_assert_int_eq(ferry_destroy_ah(ah), 0);
	ud_close(&a);
	ud_close(&b);
}
END_TEST

/* No receive posted: every send completes, none waits, none is kept. */
START_TEST(no_recv)
{
	struct ud_end a, b;
	struct ferry_ah *ah;
	struct ferry_wc wc;
	int i;

	ud_open(&a, UD_QKEY, false);
	ud_open(&b, UD_QKEY, false);
	ah = ud_ah(&a, &b, false);
	for (i = 0; i < 50; i++)	/* more than any socket queue holds */
		ud_send_ok(&a, ah, &b, UD_QKEY, 0, 64, (uint64_t)i);
	ck_assert_int_eq(tu_poll(b.cq, &wc, 1, UD_QUIET_MS), 0);
	/* Those were dropped on arrival: a receive posted now does not get one. */
	ck_assert_int_eq(ud_post_recv(&b, 100, 0, UD_SLOT), 0);
	ck_assert_int_eq(tu_poll(b.cq, &wc, 1, UD_QUIET_MS), 0);
	a.buf[0] = 'n';
	ud_send_ok(&a, ah, &b, UD_QKEY, 0, 64, 99);
	tu_poll1(b.cq, &wc);
	ck_assert_uint_eq(wc.wr_id, 100);
	ck_assert_int_eq(b.buf[FERRY_GRH_BYTES], 'n');
	ck_assert_int_eq(ferry_destroy_ah(ah), 0);
	ud_close(&a);
	ud_close(&b);
}
END_TEST

START_TEST(no_qpn)
{
	struct ud_end a;
	struct ferry_ah *ah;

	ud_open(&a, UD_QKEY, false);
	ah = ud_ah(&a, &a, false);
	ud_send_ok(&a, ah, &a, UD_QKEY, 0, 64, 1);	/* to itself, nothing posted */
	ck_assert_int_eq(ud_send(&a, ah, 0xfffff0, UD_QKEY, 0, 64, 2), 0);
	ud_send_done(&a, 2);
	tu_assert_cq_empty(a.cq);
	ck_assert_int_eq(ferry_destroy_ah(ah), 0);
	ud_close(&a);
}
END_TEST

/* ERR flushes what is posted and what comes; RESET and back makes it new. */
START_TEST(err_flush)
{
	struct ferry_qp_attr attr = { .qp_state = FERRY_QPS_ERR };
	struct ud_end a, b;
	struct ferry_ah *ah;
	struct ferry_wc wc[2];
	int got;

	ud_open(&a, UD_QKEY, false);
	ud_open(&b, UD_QKEY, false);
	ah = ud_ah(&a, &b, false);
	ck_assert_int_eq(ud_post_recv(&b, 1, 0, UD_SLOT), 0);
	ck_assert_int_eq(ud_post_recv(&b, 2, UD_SLOT, UD_SLOT), 0);
	ck_assert_int_eq(ferry_modify_qp(b.qp, &attr, FERRY_QP_STATE), 0);
	got = tu_poll(b.cq, wc, 2, TU_WAIT_MS);
	ck_assert_int_eq(got, 2);
	ck_assert_uint_eq(wc[0].wr_id, 1);
	ck_assert_uint_eq(wc[1].wr_id, 2);
	ck_assert_int_eq(wc[0].status, FERRY_WC_WR_FLUSH_ERR);
	ck_assert_int_eq(wc[1].status, FERRY_WC_WR_FLUSH_ERR);
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE), 0);
	ck_assert_int_eq(ud_send(&a, ah, b.qp->qp_num, UD_QKEY, 0, 8, 3), 0);
	tu_poll1(a.cq, wc);
	ck_assert_uint_eq(wc[0].wr_id, 3);
	ck_assert_int_eq(wc[0].status, FERRY_WC_WR_FLUSH_ERR);

	attr.qp_state = FERRY_QPS_RESET;
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE), 0);
	ck_assert_int_eq(ferry_modify_qp(b.qp, &attr, FERRY_QP_STATE), 0);
	ck_assert_int_eq(ud_qp_ready(a.qp, UD_QKEY), 0);
	ck_assert_int_eq(ud_qp_ready(b.qp, UD_QKEY), 0);
	ck_assert_int_eq(ud_post_recv(&b, 4, 0, UD_SLOT), 0);
	ud_send_ok(&a, ah, &b, UD_QKEY, 0, 8, 5);
	tu_poll1(b.cq, wc);
	ck_assert_uint_eq(wc[0].wr_id, 4);
	ck_assert_int_eq(wc[0].status, FERRY_WC_SUCCESS);
	tu_assert_cq_empty(b.cq);
	ck_assert_int_eq(ferry_destroy_ah(ah), 0);
	ud_close(&a);
	ud_close(&b);
}
END_TEST

static bool ud_channel_ready(struct ud_end *e, int ms)
{
	struct pollfd pfd = { .fd = e->ch->fd, .events = POLLIN };

	return poll(&pfd, 1, ms) == 1;
}

START_TEST(channel)
{
	struct ud_end a, b;
	struct ferry_ah *ah;
	struct ferry_cq *cq;
	struct ferry_wc wc;
	void *cq_ctx;

	ud_open(&a, UD_QKEY, false);
	ud_open(&b, UD_QKEY, true);
	ah = ud_ah(&a, &b, false);
	ck_assert_int_eq(ud_post_recv(&b, 1, 0, UD_SLOT), 0);
	ck_assert_int_eq(ud_post_recv(&b, 2, 0, UD_SLOT), 0);
	ud_send_ok(&a, ah, &b, UD_QKEY, 0, 8, 1);
	ck_assert(!ud_channel_ready(&b, UD_QUIET_MS));	/* not armed: no event */
	tu_poll1(b.cq, &wc);
	ck_assert_int_eq(ferry_req_notify_cq(b.cq, 0), 0);
	ck_assert(!ud_channel_ready(&b, UD_QUIET_MS));
	ud_send_ok(&a, ah, &b, UD_QKEY, 0, 8, 2);
	ck_assert(ud_channel_ready(&b, TU_WAIT_MS));
	ck_assert_int_eq(ferry_get_cq_event(b.ch, &cq, &cq_ctx), 0);
	ck_assert_ptr_eq(cq, b.cq);
	ferry_ack_cq_events(cq, 1);
	tu_poll1(b.cq, &wc);
	ck_assert_uint_eq(wc.wr_id, 2);
	ck_assert_int_eq(ferry_destroy_ah(ah), 0);
	ud_close(&a);
	ud_close(&b);
}
END_TEST

/* --- many senders (shm: fork) --- */

#define UD_MANY_CHILDREN 2
#define UD_MANY_EACH	5	/* 10 in all: within a socket's queue */

struct ud_many_msg {
	uint32_t qpn;
	uint16_t lid;
	uint16_t seq;
};

static void ud_many_child(const struct ud_end *to)
{
	struct ud_end e;
	struct ferry_ah *ah;
	struct ferry_wc wc;
	int i;

	ud_open_as(&e, UD_QKEY, false, true);
	ah = ud_ah(&e, to, false);
	TU_CHILD_CHECK(ah != NULL);
	for (i = 0; i < UD_MANY_EACH; i++) {
		struct ud_many_msg m = { e.qp->qp_num, e.lid, (uint16_t)i };
		struct ferry_sge sge = { (uintptr_t)e.buf, sizeof(m), e.mr->lkey };
		struct ferry_send_wr wr = { .sg_list = &sge, .num_sge = 1,
					    .opcode = FERRY_WR_SEND }, *bad;

		memcpy(e.buf, &m, sizeof(m));
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = to->qp->qp_num;
		wr.wr.ud.remote_qkey = UD_QKEY;
		TU_CHILD_CHECK(ferry_post_send(e.qp, &wr, &bad) == 0);
		TU_CHILD_CHECK(tu_child_poll(e.cq, &wc, 1, TU_WAIT_MS) == 1);
		TU_CHILD_CHECK(wc.status == FERRY_WC_SUCCESS);
	}
	_exit(0);
}

START_TEST(many)
{
	pid_t kids[UD_MANY_CHILDREN];
	int seen[UD_MANY_CHILDREN] = { 0 }, i, st;
	uint16_t lids[UD_MANY_CHILDREN] = { 0 };
	struct ud_end b;
	struct ferry_wc wc;

	if (!tu_on_shm())
		return;	/* forked children and RDMA devices: the shm transport only */
	ud_open(&b, UD_QKEY, false);
	for (i = 0; i < UD_MANY_CHILDREN * UD_MANY_EACH; i++)
		ck_assert_int_eq(ud_post_recv(&b, (uint64_t)i, (size_t)i * 64, 64), 0);
	for (i = 0; i < UD_MANY_CHILDREN; i++) {
		kids[i] = tu_fork_quiet();
		ck_assert_int_ge(kids[i], 0);
		if (kids[i] == 0)
			ud_many_child(&b);
	}
	for (i = 0; i < UD_MANY_CHILDREN * UD_MANY_EACH; i++) {
		struct ud_many_msg m;
		int k;

		tu_poll1(b.cq, &wc);
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
		ck_assert_uint_eq(wc.byte_len, FERRY_GRH_BYTES + sizeof(m));
		memcpy(&m, b.buf + wc.wr_id * 64 + FERRY_GRH_BYTES, sizeof(m));
		/* What the kernel says of the source is what the sender says. */
		ck_assert_uint_eq(wc.src_qp, m.qpn);
		ck_assert_uint_eq(wc.slid, m.lid);
		ck_assert_uint_ne(m.lid, b.lid);	/* a LID per process */
		/* Senders are told apart by LID: forked from one process,
		 * both may have made the same QPN. */
		for (k = 0; k < UD_MANY_CHILDREN && lids[k] && lids[k] != m.lid; k++)
			;
		ck_assert_int_lt(k, UD_MANY_CHILDREN);
		lids[k] = m.lid;
		ck_assert_int_eq(m.seq, seen[k]);	/* one sender's stay in order */
		seen[k]++;
	}
	for (i = 0; i < UD_MANY_CHILDREN; i++) {
		ck_assert_int_eq(waitpid(kids[i], &st, 0), kids[i]);
		ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		ck_assert_int_eq(seen[i], UD_MANY_EACH);
	}
	tu_assert_cq_empty(b.cq);
	ud_close(&b);
}
END_TEST

/* --- hostile senders (shm): the wire format of docs/wire.md, "UD" --- */

struct ud_wire_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t flags;
	uint32_t qkey;
	uint32_t imm_data;
	uint32_t payload_len;
	uint32_t flow_label;
	uint8_t traffic_class, hop_limit, sl, pad;
	uint8_t dgid[16];
};

static socklen_t ud_name(const char *text, struct sockaddr_un *un)
{
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	memcpy(un->sun_path + 1, text, strlen(text));
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(text));
}

/* A socket bound to @text (NULL: unbound). */
static int ud_raw_socket(const char *text)
{
	struct sockaddr_un un;
	int fd = socket(AF_UNIX, SOCK_DGRAM, 0);

	ck_assert_int_ge(fd, 0);
	if (text)
		ck_assert_int_eq(bind(fd, (struct sockaddr *)&un, ud_name(text, &un)), 0);
	return fd;
}

static void ud_raw_send(int fd, const struct ud_end *to, const void *p, size_t len)
{
	struct sockaddr_un un;
	char text[64];

	snprintf(text, sizeof(text), "ferry/shm/ud/v1/%u/%u", to->lid, to->qp->qp_num);
	ck_assert_int_eq(sendto(fd, p, len, 0, (struct sockaddr *)&un, ud_name(text, &un)),
			 (ssize_t)len);
}

static size_t ud_raw_msg(char *out, uint32_t payload_len, uint32_t real_len, uint16_t flags)
{
	struct ud_wire_hdr h = { .magic = 0x46525544u, .version = 1, .flags = flags,
				 .qkey = UD_QKEY, .payload_len = payload_len };

	memcpy(out, &h, sizeof(h));
	memset(out + sizeof(h), 'x', real_len);
	return sizeof(h) + real_len;
}

START_TEST(hostile_datagrams)
{
	static char msg[10000];
	struct ud_wire_hdr h;
	struct ud_end b;
	struct ferry_wc wc;
	int liar, anon, odd;
	size_t n;

	if (!tu_on_shm())
		return;
	ud_open(&b, UD_QKEY, false);
	ck_assert_int_eq(ud_post_recv(&b, 1, 0, UD_SLOT), 0);
	ck_assert_int_eq(ud_post_recv(&b, 2, UD_SLOT, UD_SLOT), 0);
	liar = ud_raw_socket("ferry/shm/ud/v1/77/4242");
	anon = ud_raw_socket(NULL);
	odd = ud_raw_socket("ferry/shm/ud/v1/077/4242");	/* not a name ferry makes */

	ud_raw_send(liar, &b, "abc", 3);				/* too short */
	n = ud_raw_msg(msg, 16, 16, 0);
	memcpy(&h, msg, sizeof(h));
	h.magic ^= 1;
	memcpy(msg, &h, sizeof(h));
	ud_raw_send(liar, &b, msg, n);					/* bad magic */
	ud_raw_send(liar, &b, msg, ud_raw_msg(msg, 4000, 16, 0));	/* says more */
	ud_raw_send(liar, &b, msg, ud_raw_msg(msg, 8, 16, 0));		/* says less */
	ud_raw_send(liar, &b, msg, ud_raw_msg(msg, 0xffffffffu, 16, 0));
	ud_raw_send(liar, &b, msg, ud_raw_msg(msg, 16, 16, 0x80));	/* unknown flag */
	ud_raw_send(liar, &b, msg, ud_raw_msg(msg, 9000, 9000, 0));	/* over the MTU */
	ud_raw_send(anon, &b, msg, ud_raw_msg(msg, 16, 16, 0));		/* no source */
	ud_raw_send(odd, &b, msg, ud_raw_msg(msg, 16, 16, 0));		/* forged source */
	ck_assert_int_eq(tu_poll(b.cq, &wc, 1, UD_QUIET_MS), 0);

	/* A well-formed one is taken, and its source is its socket's name. */
	n = ud_raw_msg(msg, 16, 16, 0);
	memcpy(msg + sizeof(h), "well-formed. ok", 16);
	ud_raw_send(liar, &b, msg, n);
	tu_poll1(b.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.wr_id, 1);
	ck_assert_uint_eq(wc.byte_len, FERRY_GRH_BYTES + 16);
	ck_assert_uint_eq(wc.src_qp, 4242);
	ck_assert_uint_eq(wc.slid, 77);
	ck_assert_str_eq(b.buf + FERRY_GRH_BYTES, "well-formed. ok");
	tu_assert_cq_empty(b.cq);
	close(liar);
	close(anon);
	close(odd);
	ud_close(&b);
}
END_TEST

/*
 * A squatter binds the names our next QPs would take: they take others,
 * and what is sent to them reaches them, not the squatter.  (It could
 * not bind a live QP's name at all: the kernel refuses a second bind.)
 */
START_TEST(hostile_squat)
{
	struct ud_end a, b;
	struct ferry_ah *ah;
	struct ferry_wc wc;
	char text[64];
	int squat[4], i;

	if (!tu_on_shm())
		return;
	ud_open(&a, UD_QKEY, false);
	for (i = 0; i < 4; i++) {
		snprintf(text, sizeof(text), "ferry/shm/ud/v1/%u/%u", a.lid,
			 a.qp->qp_num + 1 + (uint32_t)i);
		squat[i] = ud_raw_socket(text);
	}
	snprintf(text, sizeof(text), "ferry/shm/ud/v1/%u/%u", a.lid, a.qp->qp_num);
	{
		struct sockaddr_un un;
		int fd = socket(AF_UNIX, SOCK_DGRAM, 0);

		ck_assert_int_eq(bind(fd, (struct sockaddr *)&un, ud_name(text, &un)), -1);
		ck_assert_int_eq(errno, EADDRINUSE);
		close(fd);
	}
	ud_open(&b, UD_QKEY, false);	/* same process, same LID: the next QPNs */
	ck_assert_uint_eq(b.lid, a.lid);
	ck_assert_uint_gt(b.qp->qp_num, a.qp->qp_num + 4);
	ah = ud_ah(&a, &b, false);
	ck_assert_int_eq(ud_post_recv(&b, 9, 0, UD_SLOT), 0);
	ud_send_ok(&a, ah, &b, UD_QKEY, 0, 32, 1);
	tu_poll1(b.cq, &wc);
	ck_assert_uint_eq(wc.wr_id, 9);
	for (i = 0; i < 4; i++) {
		char c;

		ck_assert_int_eq(recv(squat[i], &c, 1, MSG_DONTWAIT), -1);
		ck_assert_int_eq(errno, EAGAIN);
		close(squat[i]);
	}
	ck_assert_int_eq(ferry_destroy_ah(ah), 0);
	ud_close(&a);
	ud_close(&b);
}
END_TEST

Suite *ud_suite(void)
{
	Suite *s = suite_create("ud");
	TCase *t = tcase_create("ah");

	tcase_set_timeout(t, TU_TCASE_TIMEOUT);
	tcase_add_test(t, ah_errors);
	tcase_add_test(t, tcp_has_none);
	tcase_add_test(t, states);
	suite_add_tcase(s, t);
	t = tcase_create("data");
	tcase_set_timeout(t, TU_TCASE_TIMEOUT);
	tcase_add_test(t, one_to_one);
	tcase_add_test(t, qkey);
	tcase_add_test(t, mtu);
	tcase_add_test(t, short_recv);
	tcase_add_test(t, no_recv);
	tcase_add_test(t, no_qpn);
	tcase_add_test(t, err_flush);
	tcase_add_test(t, channel);
	tcase_add_test(t, many);
	suite_add_tcase(s, t);
	t = tcase_create("hostile");
	tcase_set_timeout(t, TU_TCASE_TIMEOUT);
	tcase_add_test(t, hostile_datagrams);
	tcase_add_test(t, hostile_squat);
	suite_add_tcase(s, t);
	return s;
}
