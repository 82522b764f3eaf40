/*
 * tcp_rx.c - the tcp transport's receive engine: bytes from the socket
 * through the FPDU parser (length, CRC) and the DDP/RDMAP decoder, then
 * placed: tagged WRITEs into registered memory after the STag, bounds
 * and access checks, SENDs into posted receives, READ Requests and
 * atomics queued for the send engine, Responses into the WRs that asked.
 *
 * The peer is hostile.  Every violation (a codec error, an STag that is
 * not ours to use, a segment past its message or its receive, a Response
 * nobody asked for or longer than asked) sends a Terminate that names
 * it, takes the QP to ERR and ends the stream; nothing is copied before
 * its whole range is checked.  A receive that is too short completes
 * with LOC_LEN_ERR.  A partial FPDU that stalls (tcp_stall_ms) ends the
 * stream too.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp-internal.h"

#define TCP_RX_READS	16	/* read(2) calls per turn, for fairness */

enum tcp_rx_verdict {
	TCP_RX_OK,
	TCP_RX_HOLD,			/* wait for a receive (RNR) */
	TCP_RX_FAIL,			/* the QP is in ERR */
};

/* What the Terminate we are sent says about the WR it hits. */
static enum ferry_wc_status tcp_term_status(const struct tcpw_term *t)
{
	if (t->layer == TCPW_LAYER_RDMAP && t->etype == TCP_TERM_RDMAP_PROT)
		return FERRY_WC_REM_ACCESS_ERR;
	if (t->layer == TCPW_LAYER_DDP && t->etype == TCP_TERM_DDP_TAGGED)
		return FERRY_WC_REM_ACCESS_ERR;
	if (t->layer == TCPW_LAYER_DDP && t->etype == TCP_TERM_DDP_UNTAGGED &&
	    t->ecode == TCP_TERM_NO_BUFFER)
		return FERRY_WC_RNR_RETRY_EXC_ERR;
	if (t->layer == TCPW_LAYER_DDP && t->etype == TCP_TERM_DDP_UNTAGGED &&
	    t->ecode == TCP_TERM_TOO_LONG)
		return FERRY_WC_REM_INV_REQ_ERR;
	return FERRY_WC_REM_OP_ERR;
}

/* The peer broke a rule: say which, and end. */
static enum tcp_rx_verdict tcp_rx_violation(struct tcp_qp *qp, uint8_t layer, uint8_t etype,
					    uint8_t ecode, const struct tcpw_fpdu *f,
					    const char *why)
{
	struct tcpw_term_code code = { layer, etype, ecode };

	ferry_info("tcp QP %u: peer violated the protocol (%s): Terminate %u/%u/%#x",
		   qp->qp.qp_num, why, layer, etype, ecode);
	tcp_tx_terminate(qp, &code, f ? f->ulpdu : NULL, f ? f->ulpdu_len : 0);
	tcp_qp_set_error(qp, why);
	return TCP_RX_FAIL;
}

static enum tcp_rx_verdict tcp_rx_codec_error(struct tcp_qp *qp, int err,
					      const struct tcpw_fpdu *f)
{
	struct tcpw_term_code code;

	tcpw_err_term(err, f && f->ulpdu_len && (f->ulpdu[0] & 0x80), &code);
	return tcp_rx_violation(qp, code.layer, code.etype, code.ecode, f, tcpw_strerror(err));
}

static enum tcp_rx_verdict tcp_rx_reasm(struct tcp_qp *qp, struct tcpw_reasm *r,
					const struct tcpw_seg *s, const struct tcpw_fpdu *f,
					uint32_t *total_p)
{
	int rc = tcpw_reasm_check(r, s, total_p);

	if (rc < 0)
		return tcp_rx_codec_error(qp, rc, f);
	if (rc == 0)
		*total_p = UINT32_MAX;	/* not the last */
	return TCP_RX_OK;
}

int tcp_sge_scatter(struct tcp_qp *qp, const struct ferry_sge *sge, int num_sge, uint32_t off,
		    const uint8_t *src, uint32_t len)
{
	struct tcp_context *tc = to_tctx(qp->qp.context);
	int i, rc = 0;

	pthread_mutex_lock(&tc->mr_lock);
	for (i = 0; i < num_sge && len; i++) {
		uint32_t n;
		uint8_t why;

		if (off >= sge[i].length) {
			off -= sge[i].length;
			continue;
		}
		n = sge[i].length - off < len ? sge[i].length - off : len;
		if (!tcp_mr_check(tc, qp->qp.pd, sge[i].lkey, sge[i].addr + off, n,
				  FERRY_ACCESS_LOCAL_WRITE, &why)) {
			rc = -1;
			break;
		}
		memcpy((uint8_t *)(uintptr_t)sge[i].addr + off, src, n);
		src += n;
		len -= n;
		off = 0;
	}
	pthread_mutex_unlock(&tc->mr_lock);
	return rc < 0 || len ? -1 : 0;
}

/* A tagged WRITE segment: into our memory, if the STag lets it. */
static enum tcp_rx_verdict tcp_rx_write(struct tcp_qp *qp, const struct tcpw_seg *s,
					const struct tcpw_fpdu *f)
{
	struct tcp_context *tc = to_tctx(qp->qp.context);
	enum tcp_rx_verdict v;
	uint32_t total;
	uint8_t why = TCP_TERM_ACCESS;

	v = tcp_rx_reasm(qp, &qp->reasm_tagged, s, f, &total);
	if (v != TCP_RX_OK || !s->payload_len)
		return v;	/* a zero-length WRITE (an RTR) names no memory */
	pthread_mutex_lock(&tc->mr_lock);
	if (!(qp->access & FERRY_ACCESS_REMOTE_WRITE) ||
	    !tcp_mr_check(tc, qp->qp.pd, s->stag, s->to, s->payload_len,
			  FERRY_ACCESS_REMOTE_WRITE, &why)) {
		pthread_mutex_unlock(&tc->mr_lock);
		return tcp_rx_violation(qp, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_PROT, why, f,
					"WRITE to memory not granted");
	}
	memcpy((uint8_t *)(uintptr_t)s->to, s->payload, s->payload_len);
	pthread_mutex_unlock(&tc->mr_lock);
	return TCP_RX_OK;
}

/* Every WQE before @sq_pos that was waiting for its confirmation is done. */
static void tcp_rx_confirm(struct tcp_qp *qp, uint32_t sq_pos)
{
	uint32_t i;

	for (i = qp->sq_done; i != sq_pos && i != qp->sq_tx; i++) {
		struct tcp_swqe *w = &qp->sq[i & (qp->sq_size - 1)];

		if (w->state == TCP_WQE_SENT)
			w->state = TCP_WQE_DONE;
	}
	tcp_sq_retire(qp);
}

static enum tcp_rx_verdict tcp_rx_bad_response(struct tcp_qp *qp, struct tcp_orq *o,
					       const struct tcpw_fpdu *f, const char *why)
{
	if (o && (o->kind == TCP_ORQ_READ || o->kind == TCP_ORQ_ATOMIC)) {
		struct tcp_swqe *w = &qp->sq[o->wqe & (qp->sq_size - 1)];

		w->state = TCP_WQE_DONE;
		w->status = FERRY_WC_BAD_RESP_ERR;
	}
	return tcp_rx_violation(qp, TCPW_LAYER_DDP, TCP_TERM_DDP_TAGGED, TCP_TERM_BOUNDS, f, why);
}

static enum tcp_rx_verdict tcp_rx_read_resp(struct tcp_qp *qp, const struct tcpw_seg *s,
					    const struct tcpw_fpdu *f)
{
	struct tcp_orq *o = &qp->orq[qp->orq_tail % TCP_MAX_RD];
	enum tcp_rx_verdict v;
	struct tcp_swqe *w;
	uint32_t total;

	if (qp->orq_tail == qp->orq_head || o->kind == TCP_ORQ_ATOMIC)
		return tcp_rx_bad_response(qp, NULL, f, "READ Response nobody asked for");
	if (s->stag != o->sink_stag || s->to != o->got)
		return tcp_rx_bad_response(qp, o, f, "READ Response to another place");
	if (s->payload_len > o->size - o->got)
		return tcp_rx_bad_response(qp, o, f, "READ Response longer than asked");
	v = tcp_rx_reasm(qp, &qp->reasm_tagged, s, f, &total);
	if (v != TCP_RX_OK)
		return v;
	w = &qp->sq[o->wqe & (qp->sq_size - 1)];
	if (o->kind == TCP_ORQ_READ && s->payload_len &&
	    tcp_sge_scatter(qp, w->sge, w->num_sge, o->got, s->payload,
			    (uint32_t)s->payload_len) < 0) {
		w->state = TCP_WQE_DONE;
		w->status = FERRY_WC_LOC_PROT_ERR;
		tcp_qp_set_error(qp, "READ sink not writable");
		return TCP_RX_FAIL;
	}
	o->got += (uint32_t)s->payload_len;
	if (total == UINT32_MAX)
		return TCP_RX_OK;
	if (o->got != o->size)
		return tcp_rx_bad_response(qp, o, f, "READ Response shorter than asked");
	if (o->kind == TCP_ORQ_READ)
		w->state = TCP_WQE_DONE;
	qp->orq_tail++;
	tcp_rx_confirm(qp, o->sq_pos);
	return TCP_RX_OK;
}

static enum tcp_rx_verdict tcp_rx_atomic_resp(struct tcp_qp *qp, const struct tcpw_seg *s,
					      const struct tcpw_fpdu *f)
{
	struct tcp_orq *o = &qp->orq[qp->orq_tail % TCP_MAX_RD];
	enum tcp_rx_verdict v;
	struct tcp_swqe *w;
	uint64_t orig = s->u.aresp.orig;
	uint32_t total;

	if (qp->orq_tail == qp->orq_head || o->kind != TCP_ORQ_ATOMIC ||
	    o->req_id != s->u.aresp.req_id)
		return tcp_rx_bad_response(qp, NULL, f, "atomic Response nobody asked for");
	v = tcp_rx_reasm(qp, &qp->reasm_q[TCPW_QN_ATOMIC_RESP], s, f, &total);
	if (v != TCP_RX_OK)
		return v;
	w = &qp->sq[o->wqe & (qp->sq_size - 1)];
	if (tcp_sge_scatter(qp, w->sge, w->num_sge, 0, (const uint8_t *)&orig, 8) < 0) {
		w->status = FERRY_WC_LOC_PROT_ERR;
		w->state = TCP_WQE_DONE;
		tcp_qp_set_error(qp, "atomic sink not writable");
		return TCP_RX_FAIL;
	}
	w->state = TCP_WQE_DONE;
	qp->orq_tail++;
	tcp_rx_confirm(qp, o->sq_pos);
	return TCP_RX_OK;
}

/* Room for one more inbound READ or atomic (our IRD)? */
static bool tcp_irq_room(const struct tcp_qp *qp)
{
	uint32_t cap = qp->conn.mpa.ird < TCP_MAX_RD ? qp->conn.mpa.ird : TCP_MAX_RD;

	/* The READ RTR needs one even when IRD is 0 (RFC 6581). */
	return qp->irq_head - qp->irq_tail < (cap ? cap : 1);
}

static enum tcp_rx_verdict tcp_rx_read_req(struct tcp_qp *qp, const struct tcpw_seg *s,
					   const struct tcpw_fpdu *f)
{
	struct tcp_context *tc = to_tctx(qp->qp.context);
	const struct tcpw_read_req *rr = &s->u.rreq;
	enum tcp_rx_verdict v;
	struct tcp_irq *e;
	uint32_t total;
	uint8_t why = TCP_TERM_ACCESS;

	v = tcp_rx_reasm(qp, &qp->reasm_q[TCPW_QN_READ_REQ], s, f, &total);
	if (v != TCP_RX_OK)
		return v;
	if (!tcp_irq_room(qp))
		return tcp_rx_violation(qp, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_OP,
					TCP_TERM_CATASTROPHIC, f, "READs beyond our IRD");
	if (rr->size) {
		bool ok;

		pthread_mutex_lock(&tc->mr_lock);
		ok = (qp->access & FERRY_ACCESS_REMOTE_READ) &&
		     tcp_mr_check(tc, qp->qp.pd, rr->src_stag, rr->src_to, rr->size,
				  FERRY_ACCESS_REMOTE_READ, &why);
		pthread_mutex_unlock(&tc->mr_lock);
		if (!ok)
			return tcp_rx_violation(qp, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_PROT, why,
						f, "READ of memory not granted");
	}
	e = &qp->irq[qp->irq_head++ % TCP_MAX_RD];
	memset(e, 0, sizeof(*e));
	e->rreq = *rr;
	return TCP_RX_OK;
}

/* Apply an atomic to @p; the value before it. */
static uint64_t tcp_atomic_apply(uint64_t *p, const struct tcpw_atomic_req *a)
{
	uint64_t expected = a->compare;

	switch (a->op) {
	case TCPW_ATOMIC_FETCH_ADD:
		return __atomic_fetch_add(p, a->swap_add, __ATOMIC_SEQ_CST);
	case TCPW_ATOMIC_SWAP:
		return __atomic_exchange_n(p, a->swap_add, __ATOMIC_SEQ_CST);
	default:
		__atomic_compare_exchange_n(p, &expected, a->swap_add, false, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
		return expected;
	}
}

static enum tcp_rx_verdict tcp_rx_atomic_req(struct tcp_qp *qp, const struct tcpw_seg *s,
					     const struct tcpw_fpdu *f)
{
	struct tcp_context *tc = to_tctx(qp->qp.context);
	const struct tcpw_atomic_req *a = &s->u.areq;
	enum tcp_rx_verdict v;
	struct tcp_irq *e;
	uint32_t total;
	uint8_t why = TCP_TERM_ACCESS;
	uint64_t orig;

	v = tcp_rx_reasm(qp, &qp->reasm_q[TCPW_QN_READ_REQ], s, f, &total);
	if (v != TCP_RX_OK)
		return v;
	if (!tcp_irq_room(qp))
		return tcp_rx_violation(qp, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_OP,
					TCP_TERM_CATASTROPHIC, f, "atomics beyond our IRD");
	/* ferry sends whole-word operations only; masked ones it refuses. */
	if (a->swap_add_mask != ~0ull ||
	    a->compare_mask != (a->op == TCPW_ATOMIC_CMP_SWAP ? ~0ull : 0))
		return tcp_rx_violation(qp, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_OP,
					TCP_TERM_UNEXPECTED_OP, f, "masked atomic");
	pthread_mutex_lock(&tc->mr_lock);
	if ((a->to & 7) || !(qp->access & FERRY_ACCESS_REMOTE_ATOMIC) ||
	    !tcp_mr_check(tc, qp->qp.pd, a->stag, a->to, 8, FERRY_ACCESS_REMOTE_ATOMIC, &why)) {
		pthread_mutex_unlock(&tc->mr_lock);
		return tcp_rx_violation(qp, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_PROT,
					(a->to & 7) ? TCP_TERM_BOUNDS : why, f,
					"atomic on memory not granted");
	}
	orig = tcp_atomic_apply((uint64_t *)(uintptr_t)a->to, a);
	pthread_mutex_unlock(&tc->mr_lock);
	e = &qp->irq[qp->irq_head++ % TCP_MAX_RD];
	memset(e, 0, sizeof(*e));
	e->atomic = true;
	e->aresp.req_id = a->req_id;
	e->aresp.orig = orig;
	return TCP_RX_OK;
}

static void tcp_rx_complete_recv(struct tcp_qp *qp, enum ferry_wc_status status,
				 enum ferry_wc_opcode opcode, uint32_t len, bool solicited)
{
	struct tcp_rwqe *r = &qp->rq[qp->rq_cons & (qp->rq_size - 1)];
	struct ferry_wc wc = {
		.wr_id = r->wr_id,
		.status = status,
		.opcode = opcode,
		.byte_len = len,
		.qp_num = qp->qp.qp_num,
		.src_qp = qp->dest_qp_num,
	};

	if (qp->imm_pending || opcode == FERRY_WC_RECV_RDMA_WITH_IMM) {
		wc.wc_flags = FERRY_WC_WITH_IMM;
		wc.imm_data = qp->imm_for_send;
	}
	qp->imm_pending = false;
	qp->recv_active = false;
	qp->rq_cons++;
	tcp_cq_push(to_tcq(qp->qp.recv_cq), &wc, solicited);
}

static enum tcp_rx_verdict tcp_rx_send(struct tcp_qp *qp, const struct tcpw_seg *s,
				       const struct tcpw_fpdu *f)
{
	enum tcp_rx_verdict v;
	struct tcp_rwqe *r;
	uint32_t total;

	if (s->opcode == TCPW_OP_SEND_INV || s->opcode == TCPW_OP_SEND_SE_INV)
		return tcp_rx_violation(qp, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_OP,
					TCP_TERM_UNEXPECTED_OP, f, "SEND with Invalidate");
	if (!qp->recv_active && !s->mo && qp->rq_cons == qp->rq_prod)
		return TCP_RX_HOLD;
	v = tcp_rx_reasm(qp, &qp->reasm_q[TCPW_QN_SEND], s, f, &total);
	if (v != TCP_RX_OK)
		return v;
	qp->recv_active = true;
	r = &qp->rq[qp->rq_cons & (qp->rq_size - 1)];
	if (s->payload_len > r->len || s->mo > r->len - s->payload_len) {
		tcp_rx_complete_recv(qp, FERRY_WC_LOC_LEN_ERR, FERRY_WC_RECV, 0, false);
		return tcp_rx_violation(qp, TCPW_LAYER_DDP, TCP_TERM_DDP_UNTAGGED,
					TCP_TERM_TOO_LONG, f, "SEND longer than the receive");
	}
	if (s->payload_len &&
	    tcp_sge_scatter(qp, r->sge, r->num_sge, s->mo, s->payload,
			    (uint32_t)s->payload_len) < 0) {
		tcp_rx_complete_recv(qp, FERRY_WC_LOC_PROT_ERR, FERRY_WC_RECV, 0, false);
		tcp_qp_set_error(qp, "receive buffer not writable");
		return TCP_RX_FAIL;
	}
	if (total != UINT32_MAX)
		tcp_rx_complete_recv(qp, FERRY_WC_SUCCESS, FERRY_WC_RECV, total,
				     s->opcode == TCPW_OP_SEND_SE);
	return TCP_RX_OK;
}

/* Immediate Data: for the SEND after it (ferry's SEND_WITH_IMM), or a
 * receive of its own (WRITE_WITH_IMM). */
static enum tcp_rx_verdict tcp_rx_imm(struct tcp_qp *qp, const struct tcpw_seg *s,
				      const struct tcpw_fpdu *f)
{
	bool for_send = tcpw_get32(s->payload + 4) & 1;
	enum tcp_rx_verdict v;
	uint32_t total;

	if (!qp->conn.rfc7306)
		return tcp_rx_violation(qp, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_OP,
					TCP_TERM_UNEXPECTED_OP, f, "Immediate Data not agreed");
	if (!for_send && qp->rq_cons == qp->rq_prod)
		return TCP_RX_HOLD;
	if (qp->recv_active || qp->imm_pending)
		return tcp_rx_violation(qp, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_OP,
					TCP_TERM_UNEXPECTED_OP, f, "Immediate Data inside a SEND");
	v = tcp_rx_reasm(qp, &qp->reasm_q[TCPW_QN_SEND], s, f, &total);
	if (v != TCP_RX_OK)
		return v;
	memcpy(&qp->imm_for_send, s->payload, 4);
	if (for_send)
		qp->imm_pending = true;
	else
		tcp_rx_complete_recv(qp, FERRY_WC_SUCCESS, FERRY_WC_RECV_RDMA_WITH_IMM, 0,
				     s->opcode == TCPW_OP_IMM_SE);
	return TCP_RX_OK;
}

static enum tcp_rx_verdict tcp_rx_terminate(struct tcp_qp *qp, const struct tcpw_seg *s)
{
	uint32_t i;

	qp->stats.terms_recv++;
	qp->stats.last_term_recv = (struct tcpw_term_code){
		s->u.term.layer, s->u.term.etype, s->u.term.ecode };
	/* The peer processes in order: the oldest WR not yet confirmed is the
	 * one it refused. */
	for (i = qp->sq_done; i != qp->sq_head; i++) {
		struct tcp_swqe *w = &qp->sq[i & (qp->sq_size - 1)];

		if (w->state != TCP_WQE_DONE) {
			w->state = TCP_WQE_DONE;
			w->status = tcp_term_status(&s->u.term);
			break;
		}
	}
	ferry_info("tcp QP %u: peer sent Terminate %u/%u/%#x", qp->qp.qp_num, s->u.term.layer,
		   s->u.term.etype, s->u.term.ecode);
	tcp_qp_set_error(qp, "peer sent Terminate");
	return TCP_RX_FAIL;
}

static enum tcp_rx_verdict tcp_rx_fpdu(struct tcp_qp *qp, const struct tcpw_fpdu *f)
{
	struct tcpw_seg s;
	int rc = tcpw_seg_decode(f->ulpdu, f->ulpdu_len, &s);

	if (rc < 0)
		return tcp_rx_codec_error(qp, rc, f);
	qp->hold_tx = false;	/* the peer spoke first: we may answer */
	switch (s.opcode) {
	case TCPW_OP_WRITE:
		return tcp_rx_write(qp, &s, f);
	case TCPW_OP_READ_REQ:
		return tcp_rx_read_req(qp, &s, f);
	case TCPW_OP_READ_RESP:
		return tcp_rx_read_resp(qp, &s, f);
	case TCPW_OP_SEND:
	case TCPW_OP_SEND_SE:
	case TCPW_OP_SEND_INV:
	case TCPW_OP_SEND_SE_INV:
		return tcp_rx_send(qp, &s, f);
	case TCPW_OP_TERMINATE:
		return tcp_rx_terminate(qp, &s);
	case TCPW_OP_IMM:
	case TCPW_OP_IMM_SE:
		return tcp_rx_imm(qp, &s, f);
	case TCPW_OP_ATOMIC_REQ:
		if (!qp->conn.rfc7306)
			break;
		return tcp_rx_atomic_req(qp, &s, f);
	case TCPW_OP_ATOMIC_RESP:
		return tcp_rx_atomic_resp(qp, &s, f);
	}
	return tcp_rx_violation(qp, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_OP, TCP_TERM_UNEXPECTED_OP,
				f, "unexpected opcode");
}

/* IB's encoding of min_rnr_timer, in microseconds (0 is the longest). */
static uint64_t tcp_rnr_us(uint8_t code)
{
	static const uint32_t us[32] = {
		655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280,
		1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440,
		81920, 122880, 163840, 245760, 327680, 491520,
	};

	return us[code & 31];
}

/* A SEND found no receive: stop reading until one is posted or time is up. */
static void tcp_rx_hold(struct tcp_qp *qp, const struct tcpw_fpdu *f)
{
	uint8_t retry = qp->conn.peer_rnr_retry;

	qp->held = *f;
	qp->rx_held = true;
	if (retry < 7) {
		uint64_t wait = tcp_rnr_us(qp->min_rnr_timer) * 1000 * (retry + 1u);

		__atomic_store_n(&qp->deadline_ns, monotime_ns() + wait, __ATOMIC_RELAXED);
	}
}

/* Feed what was read to the parser and act on each FPDU; false to stop. */
static bool tcp_rx_feed(struct tcp_qp *qp)
{
	while (qp->rd_off < qp->rd_len) {
		struct tcpw_fpdu f;
		size_t used = 0;
		int rc = tcpw_fpdu_parser_feed(&qp->parser, qp->rdbuf + qp->rd_off,
					       qp->rd_len - qp->rd_off, &used, &f);

		qp->rd_off += used;
		if (rc < 0) {
			tcp_rx_codec_error(qp, rc, NULL);
			return false;
		}
		if (rc == 0)
			break;
		qp->stats.fpdus_recv++;
		qp->partial_since_ns = 0;
		switch (tcp_rx_fpdu(qp, &f)) {
		case TCP_RX_HOLD:
			tcp_rx_hold(qp, &f);
			return false;
		case TCP_RX_FAIL:
			qp->rd_off = qp->rd_len;
			return qp->qp.state != FERRY_QPS_ERR;
		default:
			break;
		}
	}
	return true;
}

/* The stall timer: a partial FPDU is in the parser since when? */
static void tcp_rx_note_partial(struct tcp_qp *qp)
{
	const struct tcpw_fpdu_parser *p = &qp->parser;

	if (qp->rx_held)
		return;		/* the RNR timer runs instead */
	/* have == need: a whole FPDU, handed out, not a partial one. */
	if (!p->have || (p->need && p->have == p->need) || qp->qp.state == FERRY_QPS_ERR) {
		qp->partial_since_ns = 0;
		__atomic_store_n(&qp->deadline_ns, 0, __ATOMIC_RELAXED);
		return;
	}
	if (!qp->partial_since_ns) {
		qp->partial_since_ns = monotime_ns();
		__atomic_store_n(&qp->deadline_ns,
				 qp->partial_since_ns + tcp_stall_ms() * 1000000ull,
				 __ATOMIC_RELAXED);
	}
}

static void tcp_rx_eof(struct tcp_qp *qp, const char *why)
{
	qp->rx_eof = true;
	if (qp->qp.state != FERRY_QPS_ERR)
		tcp_qp_set_error(qp, why);
}

/* Take up an FPDU that waited for a receive; false while it still waits. */
static bool tcp_rx_unhold(struct tcp_qp *qp)
{
	enum tcp_rx_verdict v;

	if (!qp->rx_held)
		return true;
	if (qp->rq_cons == qp->rq_prod)
		return false;
	qp->rx_held = false;
	__atomic_store_n(&qp->deadline_ns, 0, __ATOMIC_RELAXED);
	v = tcp_rx_fpdu(qp, &qp->held);
	if (v == TCP_RX_HOLD) {
		tcp_rx_hold(qp, &qp->held);
		return false;
	}
	return v == TCP_RX_OK;
}

void tcp_rx_progress(struct tcp_qp *qp)
{
	int reads;

	if (qp->fd < 0 || qp->rx_eof || qp->qp.state < FERRY_QPS_RTR)
		return;
	if (qp->qp.state != FERRY_QPS_ERR && !tcp_rx_unhold(qp))
		return;
	for (reads = 0; reads < TCP_RX_READS && !qp->rx_held; reads++) {
		ssize_t n;

		if (qp->qp.state != FERRY_QPS_ERR && qp->rd_off < qp->rd_len && !tcp_rx_feed(qp))
			break;
		n = recv(qp->fd, qp->rdbuf, TCP_RDBUF_SIZE, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			tcp_rx_eof(qp, n == 0 ? "peer closed the connection" : "connection reset");
			break;
		}
		qp->rd_len = (size_t)n;
		qp->rd_off = qp->qp.state == FERRY_QPS_ERR ? qp->rd_len : 0;	/* ERR: drop */
		if (qp->rd_off < qp->rd_len && !tcp_rx_feed(qp))
			break;
	}
	tcp_rx_note_partial(qp);
}

void tcp_rx_timers(struct tcp_qp *qp, uint64_t now)
{
	uint64_t due = __atomic_load_n(&qp->deadline_ns, __ATOMIC_RELAXED);

	if (!due || now < due)
		return;
	/* Cleared whatever comes of it: a due timer left set would make the
	 * progress thread spin. */
	__atomic_store_n(&qp->deadline_ns, 0, __ATOMIC_RELAXED);
	if (qp->qp.state == FERRY_QPS_ERR)
		return;
	if (qp->rx_held) {
		qp->rx_held = false;
		tcp_rx_violation(qp, TCPW_LAYER_DDP, TCP_TERM_DDP_UNTAGGED, TCP_TERM_NO_BUFFER,
				 &qp->held, "no receive posted (RNR timer)");
		return;
	}
	if (qp->partial_since_ns)
		tcp_rx_violation(qp, TCPW_LAYER_LLP, 0, 0x05, NULL, "peer stalled mid-FPDU");
}
