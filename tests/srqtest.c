/*
 * srqtest.c - the SRQ suites' fixture and helpers (srqtest.h).
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "srqtest.h"

/* --- helpers --- */

/* How long a child may take to finish: much longer under valgrind, whose
 * children check for leaks as they exit. */
int srq_child_ms(void)
{
	return tu_under_valgrind() ? 6 * TU_WAIT_MS : TU_WAIT_MS;
}

/* A QP on @q, using @e's PD and CQs. */
struct ferry_qp *srq_qp_create(struct tu_end *e, struct ferry_srq *q)
{
	struct ferry_qp_init_attr init;

	memset(&init, 0, sizeof(init));
	init.send_cq = e->send_cq;
	init.recv_cq = e->recv_cq;
	init.srq = q;
	init.cap.max_send_wr = 16;
	init.cap.max_send_sge = 1;
	init.qp_type = FERRY_QPT_RC;
	init.sq_sig_all = 1;
	return ferry_create_qp(e->pd, &init);
}

struct ferry_srq *srq_create(struct ferry_pd *pd, uint32_t max_wr, uint32_t max_sge)
{
	struct ferry_srq_init_attr ia = { .srq_context = pd, .attr = { max_wr, max_sge, 0 } };

	return ferry_create_srq(pd, &ia);
}

/* Post receive @slot of @e's buffer (wr_id = slot) to @q. */
void srq_post(struct tu_end *e, struct ferry_srq *q, uint32_t slot)
{
	struct ferry_sge sg = { (uintptr_t)e->buf + (size_t)slot * S_SLOT, S_SLOT, e->mr->lkey };
	struct ferry_recv_wr wr = { .wr_id = slot, .sg_list = &sg, .num_sge = 1 };
	struct ferry_recv_wr *bad = NULL;

	ck_assert_int_eq(ferry_post_srq_recv(q, &wr, &bad), 0);
}

void srq_arm(struct ferry_srq *q, uint32_t limit)
{
	struct ferry_srq_attr a = { .srq_limit = limit };

	ck_assert_int_eq(ferry_modify_srq(q, &a, FERRY_SRQ_LIMIT), 0);
}

bool srq_fd_ready(struct ferry_context *ctx, int timeout_ms)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };

	return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

/* The next event is @type about @element (a QP or SRQ), within TU_WAIT_MS. */
void srq_expect_event(struct ferry_context *ctx, enum ferry_event_type type,
			     const void *element)
{
	struct ferry_async_event ev;

	ck_assert_msg(srq_fd_ready(ctx, TU_WAIT_MS), "no %s event", ferry_event_type_str(type));
	ck_assert_int_eq(ferry_get_async_event(ctx, &ev), 0);
	ck_assert_msg(ev.event_type == type, "event %s, expected %s",
		      ferry_event_type_str(ev.event_type), ferry_event_type_str(type));
	ck_assert_ptr_eq(type == FERRY_EVENT_SRQ_LIMIT_REACHED ? (void *)ev.element.srq :
			 (void *)ev.element.qp, element);
	ferry_ack_async_event(&ev);
}

/* Send @n messages of @len bytes on @e's QP and see them complete. */
void srq_send(struct tu_end *e, int n, uint32_t len)
{
	struct ferry_wc wc;

	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(tu_post_send1(e->qp, (uint64_t)i, FERRY_WR_SEND, 0, e->buf, len,
					       e->mr->lkey, 0, 0), 0);
		tu_poll1(e->send_cq, &wc);
		ck_assert_msg(wc.status == FERRY_WC_SUCCESS, "send: %s",
			      ferry_wc_status_str(wc.status));
	}
}

/* Take @n receive completions of QP @qpn from @cq; their wr_ids in @ids. */
void srq_recv(struct ferry_cq *cq, int n, uint32_t qpn, uint64_t *ids)
{
	struct ferry_wc wc;

	for (int i = 0; i < n; i++) {
		tu_poll1(cq, &wc);
		ck_assert_msg(wc.status == FERRY_WC_SUCCESS, "recv: %s",
			      ferry_wc_status_str(wc.status));
		ck_assert(wc.opcode & FERRY_WC_RECV);
		ck_assert_uint_eq(wc.qp_num, qpn);
		if (ids)
			ids[i] = wc.wr_id;
	}
}

/* --- one process: a receiver on an SRQ and a sender --- */

struct tu_end rx, tx;
struct ferry_srq *srq_q;

void srq_pair_open(void)
{
	struct tu_opts o = { .split_cq = true, .buf_len = S_MAX_WR * S_SLOT };

	tu_end_open(&rx, &o);
	tu_end_open(&tx, &o);
	srq_q = srq_create(rx.pd, S_MAX_WR, 1);
	ck_assert_ptr_nonnull(srq_q);
	ck_assert_int_eq(ferry_destroy_qp(rx.qp), 0);
	rx.qp = srq_qp_create(&rx, srq_q);
	ck_assert_ptr_nonnull(rx.qp);
	tu_fill(tx.buf, tx.len, 3);
}

void srq_setup(void)
{
	srq_pair_open();
	tu_pair_connect(&rx, &tx, TU_QP_ACCESS_ALL);
}

void srq_teardown(void)
{
	if (rx.qp)
		ck_assert_int_eq(ferry_destroy_qp(rx.qp), 0);
	rx.qp = NULL;
	ck_assert_int_eq(ferry_destroy_srq(srq_q), 0);
	tu_end_close(&rx);
	tu_end_close(&tx);
}

/* Connect @qp (of @e) to the child at the other end of @sock. */
void srq_connect_child(struct tu_end *e, struct ferry_qp *qp, int sock)
{
	struct tu_remote mine = { (uintptr_t)e->buf, e->len, e->mr->rkey, qp->qp_num, 0, 0, 0, 0 };
	struct tu_remote peer;

	ck_assert_int_eq(tu_msg_send(sock, &mine, sizeof(mine)), 0);
	ck_assert_int_eq(tu_msg_recv(sock, &peer, sizeof(peer), TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_qp_connect_sock(qp, sock, TU_QP_ACCESS_ALL), 0);
	close(sock);
}
