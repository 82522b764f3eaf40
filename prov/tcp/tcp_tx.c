/*
 * tcp_tx.c - the tcp transport's send engine: the SQ and the answers the
 * peer is owed, cut into FPDUs of at most the MSS (MULPDU) and written
 * without blocking, one FPDU at a time from qp->txbuf.
 *
 * What goes next is chosen at every FPDU boundary, in this order: a
 * Terminate (then nothing more), the RTR, READ Responses and atomic
 * Responses (so a READ is never stuck behind a large SEND), a fence, the
 * SQ.  A READ Response is tagged and may not cut into a WRITE (also
 * tagged: iWARP forbids two messages of one kind interleaved, and siw
 * enforces it), so it waits for the WRITE's last segment; it may cut into
 * a SEND, which is untagged.  A burst is capped (TCP_TX_BURST FPDUs) so
 * that one QP cannot hold the progress thread.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "tcp-internal.h"

#define TCP_TX_BURST	64
#define TCP_RESP_RUN	8	/* Response FPDUs before one of the SQ */
#define TCP_IMM_FOR_SEND 1u	/* Immediate Data flag: it belongs to the SEND after it */

static uint32_t tcp_orq_cap(const struct tcp_qp *qp)
{
	uint32_t cap = qp->conn.mpa.ord < TCP_MAX_RD ? qp->conn.mpa.ord : TCP_MAX_RD;

	if (qp->max_rd_atomic && qp->max_rd_atomic < cap)
		cap = qp->max_rd_atomic;
	return cap;
}

static bool tcp_orq_room(const struct tcp_qp *qp)
{
	return qp->orq_head - qp->orq_tail < tcp_orq_cap(qp);
}

static struct tcp_orq *tcp_orq_push(struct tcp_qp *qp, enum tcp_orq_kind kind)
{
	struct tcp_orq *o = &qp->orq[qp->orq_head++ % TCP_MAX_RD];

	memset(o, 0, sizeof(*o));
	o->kind = kind;
	o->sq_pos = qp->sq_tx;
	o->sink_stag = ++qp->next_req_id;
	o->req_id = o->sink_stag;
	return o;
}

/* Where the payload of @s goes in txbuf. */
static uint8_t *tcp_tx_payload(struct tcp_qp *qp, const struct tcpw_seg *s)
{
	return qp->txbuf + TCPW_FPDU_LEN_SIZE + tcpw_seg_hdr_len(s);
}

/* Header of @s before its payload (already in place), length and trailer. */
static bool tcp_tx_seal(struct tcp_qp *qp, const struct tcpw_seg *s, size_t payload_len)
{
	size_t cap = tcpw_fpdu_len(qp->mulpdu), hdr_len, trailer_len;
	uint8_t trailer[7];
	struct iovec iov;

	if (tcpw_seg_encode(s, qp->txbuf + TCPW_FPDU_LEN_SIZE, cap, &hdr_len) < 0)
		goto err;
	iov.iov_base = qp->txbuf + TCPW_FPDU_LEN_SIZE;
	iov.iov_len = hdr_len + payload_len;
	if (tcpw_fpdu_frame(&iov, 1, qp->conn.mpa.crc, qp->txbuf, trailer, &trailer_len) < 0)
		goto err;
	memcpy(qp->txbuf + TCPW_FPDU_LEN_SIZE + iov.iov_len, trailer, trailer_len);
	qp->tx_len = TCPW_FPDU_LEN_SIZE + iov.iov_len + trailer_len;
	qp->tx_off = 0;
	qp->stats.fpdus_sent++;
	if (qp->tx_len > qp->stats.max_fpdu_sent)
		qp->stats.max_fpdu_sent = (uint32_t)qp->tx_len;
	return true;
err:
	ferry_err("tcp QP %u: cannot encode opcode %u", qp->qp.qp_num, s->opcode);
	tcp_qp_set_error(qp, "encoder refused a segment");
	return false;
}

static void tcp_untagged(struct tcp_qp *qp, struct tcpw_seg *s, uint8_t opcode)
{
	memset(s, 0, sizeof(*s));
	s->opcode = opcode;
	s->qn = tcpw_op_qn(opcode);
	s->msn = ++qp->msn[s->qn];
	s->last = true;
}

int tcp_wqe_gather(struct tcp_qp *qp, const struct tcp_swqe *w, uint32_t off, uint32_t len,
		   uint8_t *dst)
{
	struct tcp_context *tc = to_tctx(qp->qp.context);
	int i;

	if (w->inline_data) {
		memcpy(dst, w->inline_data + off, len);
		return 0;
	}
	for (i = 0; i < w->num_sge && len; i++) {
		const struct ferry_sge *g = &w->sge[i];
		uint32_t n;
		uint8_t why;

		if (off >= g->length) {
			off -= g->length;
			continue;
		}
		n = g->length - off < len ? g->length - off : len;
		/* The lkey is checked at every use: a region deregistered under
		 * a posted WR is never read. */
		if (!tcp_mr_check(tc, qp->qp.pd, g->lkey, g->addr + off, n, 0, &why))
			return -1;
		memcpy(dst, (const uint8_t *)(uintptr_t)g->addr + off, n);
		dst += n;
		len -= n;
		off = 0;
	}
	return len ? -1 : 0;
}

/* The WQE at sq_tx failed locally (bad lkey): it completes so, the QP errs. */
static bool tcp_tx_local_error(struct tcp_qp *qp, struct tcp_swqe *w)
{
	w->state = TCP_WQE_DONE;
	w->status = FERRY_WC_LOC_PROT_ERR;
	qp->sq_tx++;
	qp->seg_active = qp->seg_tagged = false;
	tcp_qp_set_error(qp, "local protection error");
	return false;
}

static struct tcp_swqe *tcp_sq_cur(struct tcp_qp *qp)
{
	return &qp->sq[qp->sq_tx & (qp->sq_size - 1)];
}

/* The WQE's last FPDU is built: it is on the wire once that is written. */
static void tcp_tx_wqe_built(struct tcp_qp *qp)
{
	qp->tx_wqe = qp->sq_tx++;
	qp->tx_wqe_pending = true;
}

static bool tcp_tx_imm(struct tcp_qp *qp, const struct tcp_swqe *w, uint32_t flags, bool se)
{
	struct tcpw_seg s;
	uint8_t *p;

	tcp_untagged(qp, &s, se ? TCPW_OP_IMM_SE : TCPW_OP_IMM);
	s.payload_len = TCPW_IMM_DATA_LEN;
	p = tcp_tx_payload(qp, &s);
	memcpy(p, &w->imm, 4);		/* as posted: network byte order */
	tcpw_put32(p + 4, flags);
	return tcp_tx_seal(qp, &s, TCPW_IMM_DATA_LEN);
}

/* The next segment of the SQ message being cut. */
static bool tcp_tx_seg(struct tcp_qp *qp)
{
	struct tcp_context *tc = to_tctx(qp->qp.context);
	struct tcp_swqe *w = tcp_sq_cur(qp);
	uint32_t off, len;
	struct tcpw_seg s;
	int rc;

	if (!tcpw_segmenter_next(&qp->seg, &s, &off, &len))
		return false;
	pthread_mutex_lock(&tc->mr_lock);
	rc = tcp_wqe_gather(qp, w, off, len, tcp_tx_payload(qp, &s));
	pthread_mutex_unlock(&tc->mr_lock);
	if (rc < 0)
		return tcp_tx_local_error(qp, w);
	if (!tcp_tx_seal(qp, &s, len))
		return false;
	if (s.last) {
		qp->seg_active = qp->seg_tagged = false;
		if (w->opcode == FERRY_WR_RDMA_WRITE_WITH_IMM)
			qp->imm_after = true;
		else
			tcp_tx_wqe_built(qp);
	}
	return true;
}

static bool tcp_tx_seg_start(struct tcp_qp *qp, struct tcp_swqe *w)
{
	struct tcpw_seg first = { 0 };

	if (w->opcode == FERRY_WR_RDMA_WRITE || w->opcode == FERRY_WR_RDMA_WRITE_WITH_IMM) {
		first.opcode = TCPW_OP_WRITE;
		first.stag = w->rkey;
		first.to = w->remote_addr;
	} else {
		first.opcode = (w->flags & FERRY_SEND_SOLICITED) ? TCPW_OP_SEND_SE : TCPW_OP_SEND;
		/* SEND_WITH_IMM: the Immediate Data goes first, with the MSN before. */
		first.msn = qp->msn[TCPW_QN_SEND] + 1 +
			    (w->opcode == FERRY_WR_SEND_WITH_IMM);
	}
	if (tcpw_segmenter_init(&qp->seg, &first, w->len, qp->mulpdu) < 0) {
		/* TO + length past 2^64: the peer could not place it either. */
		w->state = TCP_WQE_DONE;
		w->status = FERRY_WC_LOC_LEN_ERR;
		qp->sq_tx++;
		tcp_qp_set_error(qp, "message cannot be segmented");
		return false;
	}
	qp->seg_active = true;
	qp->seg_tagged = first.opcode == TCPW_OP_WRITE;
	if (w->opcode == FERRY_WR_SEND_WITH_IMM) {
		if (!tcp_tx_imm(qp, w, TCP_IMM_FOR_SEND, false))
			return false;
		qp->msn[TCPW_QN_SEND]++;	/* the SEND's */
		return true;
	}
	if (first.opcode != TCPW_OP_WRITE)
		qp->msn[TCPW_QN_SEND]++;
	return tcp_tx_seg(qp);
}

static bool tcp_tx_read_req(struct tcp_qp *qp, struct tcp_swqe *w)
{
	struct tcp_orq *o = tcp_orq_push(qp, TCP_ORQ_READ);
	struct tcpw_seg s;

	o->wqe = qp->sq_tx;
	o->sq_pos = qp->sq_tx + 1;
	o->size = w->len;
	tcp_untagged(qp, &s, TCPW_OP_READ_REQ);
	s.u.rreq = (struct tcpw_read_req){
		.sink_stag = o->sink_stag, .sink_to = 0, .size = w->len,
		.src_stag = w->rkey, .src_to = w->remote_addr,
	};
	w->state = TCP_WQE_SENT;
	qp->sq_tx++;
	return tcp_tx_seal(qp, &s, 0);
}

static bool tcp_tx_atomic_req(struct tcp_qp *qp, struct tcp_swqe *w)
{
	struct tcp_orq *o = tcp_orq_push(qp, TCP_ORQ_ATOMIC);
	bool cas = w->opcode == FERRY_WR_ATOMIC_CMP_AND_SWP;
	struct tcpw_seg s;

	o->wqe = qp->sq_tx;
	o->sq_pos = qp->sq_tx + 1;
	tcp_untagged(qp, &s, TCPW_OP_ATOMIC_REQ);
	s.u.areq = (struct tcpw_atomic_req){
		.op = cas ? TCPW_ATOMIC_CMP_SWAP : TCPW_ATOMIC_FETCH_ADD,
		.req_id = o->req_id, .stag = w->rkey, .to = w->remote_addr,
		.swap_add = cas ? w->swap : w->compare_add, .swap_add_mask = ~0ull,
		.compare = cas ? w->compare_add : 0, .compare_mask = cas ? ~0ull : 0,
	};
	w->state = TCP_WQE_SENT;
	qp->sq_tx++;
	return tcp_tx_seal(qp, &s, 0);
}

static bool tcp_tx_local_sinks_ok(struct tcp_qp *qp, const struct tcp_swqe *w)
{
	struct tcp_context *tc = to_tctx(qp->qp.context);
	bool ok = true;
	uint8_t why;
	int i;

	pthread_mutex_lock(&tc->mr_lock);
	for (i = 0; i < w->num_sge && ok; i++)
		ok = tcp_mr_check(tc, qp->qp.pd, w->sge[i].lkey, w->sge[i].addr,
				  w->sge[i].length, FERRY_ACCESS_LOCAL_WRITE, &why) != NULL;
	pthread_mutex_unlock(&tc->mr_lock);
	return ok;
}

/* Begin the WQE at sq_tx; false when it must wait (ORD, FENCE) or failed. */
static bool tcp_tx_start(struct tcp_qp *qp)
{
	struct tcp_swqe *w = tcp_sq_cur(qp);
	bool reads = w->opcode >= FERRY_WR_RDMA_READ;

	if ((w->flags & FERRY_SEND_FENCE) && qp->orq_head != qp->orq_tail)
		return false;
	if (reads && !tcp_orq_room(qp)) {
		if (tcp_orq_cap(qp) == 0) {	/* the peer takes no READs at all */
			w->state = TCP_WQE_DONE;
			w->status = FERRY_WC_REM_INV_REQ_ERR;
			qp->sq_tx++;
			tcp_qp_set_error(qp, "READ or atomic with an ORD of 0");
		}
		return false;
	}
	if (reads && !tcp_tx_local_sinks_ok(qp, w))
		return tcp_tx_local_error(qp, w);
	if (w->opcode == FERRY_WR_RDMA_READ)
		return tcp_tx_read_req(qp, w);
	if (reads)
		return tcp_tx_atomic_req(qp, w);
	return tcp_tx_seg_start(qp, w);
}

/* A READ Request of nothing: its Response says the peer processed all before it. */
static bool tcp_tx_fence(struct tcp_qp *qp, enum tcp_orq_kind kind)
{
	struct tcp_orq *o = tcp_orq_push(qp, kind);
	struct tcpw_seg s;

	tcp_untagged(qp, &s, TCPW_OP_READ_REQ);
	/* Source STag 1 as siw's RTR: a zero-length READ is never checked. */
	s.u.rreq = (struct tcpw_read_req){ .sink_stag = o->sink_stag, .src_stag = 1 };
	qp->fence_wanted = false;
	return tcp_tx_seal(qp, &s, 0);
}

static bool tcp_tx_rtr(struct tcp_qp *qp)
{
	struct tcpw_seg s = { 0 };

	qp->rtr_pending = false;
	if (qp->conn.mpa.rtr == TCPW_RTR_READ)
		return tcp_tx_fence(qp, TCP_ORQ_RTR);
	if (qp->conn.mpa.rtr == TCPW_RTR_SEND) {
		tcp_untagged(qp, &s, TCPW_OP_SEND);
		return tcp_tx_seal(qp, &s, 0);
	}
	/* WRITE RTR: zero-length, STag 1, TO 0 (siw's). */
	s.opcode = TCPW_OP_WRITE;
	s.stag = 1;
	s.last = true;
	return tcp_tx_seal(qp, &s, 0);
}

static bool tcp_tx_terminate_fpdu(struct tcp_qp *qp)
{
	struct tcpw_seg s;

	tcp_untagged(qp, &s, TCPW_OP_TERMINATE);
	s.msn = 1;		/* siw sends 1: the Terminate queue carries one message */
	s.u.term = qp->term;
	qp->term_pending = false;
	qp->tx_after_term = true;
	qp->stats.terms_sent++;
	return tcp_tx_seal(qp, &s, 0);
}

/* The next FPDU of the READ or atomic Response at the IRQ's head. */
static bool tcp_tx_response(struct tcp_qp *qp)
{
	struct tcp_context *tc = to_tctx(qp->qp.context);
	struct tcp_irq *e = &qp->irq[qp->irq_tail % TCP_MAX_RD];
	struct tcpw_seg s = { 0 };
	uint32_t len;
	struct tcpw_term_code code = { TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_PROT, 0 };
	uint8_t why;

	if (e->atomic) {
		tcp_untagged(qp, &s, TCPW_OP_ATOMIC_RESP);
		s.u.aresp = e->aresp;
		qp->irq_tail++;
		return tcp_tx_seal(qp, &s, 0);
	}
	s.opcode = TCPW_OP_READ_RESP;
	s.stag = e->rreq.sink_stag;
	s.to = e->rreq.sink_to + e->sent;
	len = e->rreq.size - e->sent;
	if (len > qp->mulpdu - TCPW_DDP_TAGGED_HDR)
		len = (uint32_t)(qp->mulpdu - TCPW_DDP_TAGGED_HDR);
	s.last = e->sent + len == e->rreq.size;
	if (len) {
		/* Checked again for every segment: the region may have gone. */
		pthread_mutex_lock(&tc->mr_lock);
		if (!(qp->access & FERRY_ACCESS_REMOTE_READ) ||
		    !tcp_mr_check(tc, qp->qp.pd, e->rreq.src_stag, e->rreq.src_to + e->sent,
				  len, FERRY_ACCESS_REMOTE_READ, &why)) {
			pthread_mutex_unlock(&tc->mr_lock);
			code.ecode = why;
			tcp_tx_terminate(qp, &code, NULL, 0);
			tcp_qp_set_error(qp, "READ source gone");
			return qp->term_pending && tcp_tx_terminate_fpdu(qp);
		}
		memcpy(tcp_tx_payload(qp, &s),
		       (const uint8_t *)(uintptr_t)(e->rreq.src_to + e->sent), len);
		pthread_mutex_unlock(&tc->mr_lock);
	}
	e->sent += len;
	if (s.last)
		qp->irq_tail++;
	return tcp_tx_seal(qp, &s, len);
}

/* The next FPDU of the SQ (and the fences it needs); false: none now. */
static bool tcp_tx_sq_next(struct tcp_qp *qp)
{
	enum ferry_qp_state st = qp->qp.state;

	if (st != FERRY_QPS_RTS && !(st == FERRY_QPS_SQD && (qp->seg_active || qp->imm_after)))
		return false;
	if (qp->imm_after) {
		struct tcp_swqe *w = tcp_sq_cur(qp);

		qp->imm_after = false;
		tcp_tx_wqe_built(qp);
		return tcp_tx_imm(qp, w, 0, w->flags & FERRY_SEND_SOLICITED);
	}
	if (qp->seg_active)
		return tcp_tx_seg(qp);
	if (qp->fence_wanted && tcp_orq_room(qp))
		return tcp_tx_fence(qp, TCP_ORQ_FENCE);
	if (qp->sq_tx == qp->sq_head || st != FERRY_QPS_RTS)
		return false;
	return tcp_tx_start(qp);
}

/* May the Response at the IRQ's head go now? */
static bool tcp_tx_response_ready(const struct tcp_qp *qp)
{
	return qp->irq_tail != qp->irq_head && qp->qp.state != FERRY_QPS_ERR &&
	       (qp->irq[qp->irq_tail % TCP_MAX_RD].atomic || !qp->seg_tagged);
}

/*
 * Choose and build the next FPDU into txbuf; false: nothing to send now.
 * Responses go first, but after TCP_RESP_RUN of them in a row one FPDU
 * of the SQ does (siw's rule, roughly): a peer that keeps asking cannot
 * starve our own sends.
 */
static bool tcp_tx_next(struct tcp_qp *qp)
{
	enum ferry_qp_state st = qp->qp.state;

	if (qp->tx_shut)
		return false;
	if (qp->term_pending)
		return tcp_tx_terminate_fpdu(qp);
	if (st == FERRY_QPS_ERR || st < FERRY_QPS_RTR)
		return false;
	if (qp->rtr_pending)
		return tcp_tx_rtr(qp);
	if (qp->hold_tx)
		return false;
	if (tcp_tx_response_ready(qp) && qp->resp_run < TCP_RESP_RUN) {
		qp->resp_run++;
		return tcp_tx_response(qp);
	}
	if (tcp_tx_sq_next(qp)) {
		qp->resp_run = 0;
		return true;
	}
	if (tcp_tx_response_ready(qp)) {
		qp->resp_run++;
		return tcp_tx_response(qp);
	}
	return qp->term_pending && tcp_tx_terminate_fpdu(qp);
}

/* The FPDU that ended a SEND or WRITE is written: on the wire now. */
static void tcp_tx_wqe_written(struct tcp_qp *qp)
{
	struct tcp_swqe *w = &qp->sq[qp->tx_wqe & (qp->sq_size - 1)];

	qp->tx_wqe_pending = false;
	if (w->state != TCP_WQE_POSTED)
		return;		/* flushed meanwhile */
	/*
	 * No fence possible (ORD 0), or none to trust: siw (Linux 6.1)
	 * answers a zero-length READ that arrives while it is sending with
	 * the length and memory of its previous WQE (siw_activate_tx leaves
	 * sge[0] stale for an IRQ entry without SGEs), a Response we must
	 * refuse.  Towards a peer that is not ferry a WR completes when TCP
	 * took it, as siw's own do.
	 */
	if (tcp_orq_cap(qp) == 0 || !qp->conn.fence_reads) {
		w->state = TCP_WQE_DONE;
	} else {
		w->state = TCP_WQE_SENT;
		if (w->flags & FERRY_SEND_SIGNALED)
			qp->fence_wanted = true;
	}
	tcp_sq_retire(qp);
}

/* Write txbuf; 1 when it is all out, 0 when the socket is full, -1 on error. */
static int tcp_tx_write(struct tcp_qp *qp)
{
	while (qp->tx_off < qp->tx_len) {
		ssize_t n = send(qp->fd, qp->txbuf + qp->tx_off, qp->tx_len - qp->tx_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n < 0) {
			ferry_debug("tcp QP %u: send: %m", qp->qp.qp_num);
			return -1;
		}
		qp->tx_off += (size_t)n;
	}
	return 1;
}

void tcp_tx_progress(struct tcp_qp *qp)
{
	int burst, rc;

	if (qp->fd < 0 || qp->tx_shut)
		goto idle;
	for (burst = 0; burst < TCP_TX_BURST; burst++) {
		rc = tcp_tx_write(qp);
		if (rc < 0) {
			qp->tx_shut = true;
			qp->tx_len = qp->tx_off = 0;
			tcp_qp_set_error(qp, "connection lost while sending");
			goto idle;
		}
		if (rc == 0) {
			tcp_progress_want_out(qp, true);
			return;
		}
		qp->tx_len = qp->tx_off = 0;
		if (qp->tx_wqe_pending)
			tcp_tx_wqe_written(qp);
		if (qp->tx_after_term) {
			qp->tx_after_term = false;
			shutdown(qp->fd, SHUT_WR);
			qp->tx_shut = true;
			goto idle;
		}
		if (!tcp_tx_next(qp))
			goto idle;
	}
	/* More to do: let the thread come back once the others had a turn. */
	tcp_progress_want_out(qp, true);
	return;
idle:
	tcp_progress_want_out(qp, false);
}

void tcp_tx_terminate(struct tcp_qp *qp, const struct tcpw_term_code *code,
		      const uint8_t *ulpdu, size_t ulpdu_len)
{
	struct tcpw_term *t = &qp->term;

	if (qp->term_pending || qp->tx_shut || qp->qp.state == FERRY_QPS_ERR)
		return;		/* one Terminate per stream, and only while we speak */
	memset(t, 0, sizeof(*t));
	t->layer = code->layer;
	t->etype = code->etype;
	t->ecode = code->ecode;
	if (ulpdu && ulpdu_len >= TCPW_DDP_TAGGED_HDR) {
		bool tagged = ulpdu[0] & 0x80;
		size_t hl = tagged ? TCPW_DDP_TAGGED_HDR : TCPW_DDP_UNTAGGED_HDR;

		t->m = true;
		t->ddp_seg_len = (uint16_t)ulpdu_len;
		if (ulpdu_len >= hl) {
			t->d = true;
			memcpy(t->ddp_hdr, ulpdu, hl);
		}
		if (!tagged && ulpdu_len >= hl + TCPW_READ_REQ_BODY &&
		    (ulpdu[1] & 0x0f) == TCPW_OP_READ_REQ) {
			t->r = true;
			memcpy(t->rdma_hdr, ulpdu + hl, TCPW_READ_REQ_BODY);
		}
	}
	qp->stats.last_term_sent = *code;
	qp->term_pending = true;
}
