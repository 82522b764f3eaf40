/*
 * tcp_wire_ddp.c - the ULPDU inside each FPDU: a DDP header (RFC 5041),
 * tagged (STag, TO: placed at an address the peer advertised) or untagged
 * (QN, MSN, MO: placed in the next buffer of a queue), whose second byte
 * and, untagged, next four belong to RDMAP (RFC 5040, RFC 7306): version,
 * opcode, and an Invalidate STag or a reserved word.  Read Requests,
 * Terminates and atomics add a body after the DDP header.
 *
 * Decoding checks every field a later layer would otherwise trust; the
 * segmenter and the reassembly check keep TO/MO/MSN arithmetic in one
 * place for the sender and the receiver.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "tcp_wire.h"

/* DDP control byte (byte 0 of the ULPDU). */
#define DDP_T 0x80			/* tagged buffer model */
#define DDP_L 0x40			/* last segment of the message */
#define DDP_RSVD 0x3c
#define DDP_DV_MASK 0x03
#define DDP_VERSION 1
/* RDMAP control byte (byte 1). */
#define RDMAP_RV_MASK 0xc0
#define RDMAP_RV (1 << 6)		/* RDMAP version 1 */
#define RDMAP_RSVD 0x30
#define RDMAP_OP_MASK 0x0f
/* Terminate control word. */
#define TERM_M 0x8000			/* low half: header-control bits */
#define TERM_D 0x4000
#define TERM_R 0x2000
#define TERM_RSVD 0x1fff
#define TERM_CTRL_LEN 4
#define TERM_SEG_LEN 2

/* What each opcode's segments look like. */
struct op_shape {
	bool tagged;
	uint8_t qn;			/* untagged */
	uint8_t body;			/* bytes after the DDP header */
	bool one_segment;		/* L set, MO 0, never cut */
	int8_t payload;			/* -1 any, else exactly this many bytes */
	bool inval;			/* RsvdULP word is an STag, not reserved */
};

static const struct op_shape op_shapes[TCPW_OP_COUNT_] = {
	[TCPW_OP_WRITE] = { .tagged = true, .payload = -1 },
	[TCPW_OP_READ_REQ] = { .qn = TCPW_QN_READ_REQ, .body = TCPW_READ_REQ_BODY,
			       .one_segment = true },
	[TCPW_OP_READ_RESP] = { .tagged = true, .payload = -1 },
	[TCPW_OP_SEND] = { .qn = TCPW_QN_SEND, .payload = -1 },
	[TCPW_OP_SEND_INV] = { .qn = TCPW_QN_SEND, .payload = -1, .inval = true },
	[TCPW_OP_SEND_SE] = { .qn = TCPW_QN_SEND, .payload = -1 },
	[TCPW_OP_SEND_SE_INV] = { .qn = TCPW_QN_SEND, .payload = -1, .inval = true },
	[TCPW_OP_TERMINATE] = { .qn = TCPW_QN_TERMINATE, .body = TERM_CTRL_LEN,
				.one_segment = true },
	[TCPW_OP_IMM] = { .qn = TCPW_QN_SEND, .one_segment = true,
			  .payload = TCPW_IMM_DATA_LEN },
	[TCPW_OP_IMM_SE] = { .qn = TCPW_QN_SEND, .one_segment = true,
			     .payload = TCPW_IMM_DATA_LEN },
	[TCPW_OP_ATOMIC_REQ] = { .qn = TCPW_QN_READ_REQ, .body = TCPW_ATOMIC_REQ_BODY,
				 .one_segment = true },
	[TCPW_OP_ATOMIC_RESP] = { .qn = TCPW_QN_ATOMIC_RESP, .body = TCPW_ATOMIC_RESP_BODY,
				  .one_segment = true },
};

bool tcpw_op_tagged(uint8_t opcode)
{
	return opcode < TCPW_OP_COUNT_ && op_shapes[opcode].tagged;
}

uint32_t tcpw_op_qn(uint8_t opcode)
{
	return opcode < TCPW_OP_COUNT_ ? op_shapes[opcode].qn : 0;
}

/* A copied DDP header's length follows its own T bit. */
static size_t term_ddp_hdr_len(const uint8_t *ddp_hdr)
{
	return (ddp_hdr[0] & DDP_T) ? TCPW_DDP_TAGGED_HDR : TCPW_DDP_UNTAGGED_HDR;
}

static size_t term_extra_len(const struct tcpw_term *t)
{
	return (t->d ? TERM_SEG_LEN + term_ddp_hdr_len(t->ddp_hdr) : 0) +
	       (t->r ? TCPW_READ_REQ_BODY : 0);
}

size_t tcpw_seg_hdr_len(const struct tcpw_seg *s)
{
	const struct op_shape *shape;

	if (s->opcode >= TCPW_OP_COUNT_)
		return 0;
	shape = &op_shapes[s->opcode];
	if (shape->tagged)
		return TCPW_DDP_TAGGED_HDR;
	if (s->opcode == TCPW_OP_TERMINATE)
		return TCPW_DDP_UNTAGGED_HDR + TERM_CTRL_LEN + term_extra_len(&s->u.term);
	return TCPW_DDP_UNTAGGED_HDR + shape->body;
}

/* ---- encode ----------------------------------------------------------- */

static void put_read_req(uint8_t *p, const struct tcpw_read_req *r)
{
	tcpw_put32(p, r->sink_stag);
	tcpw_put64(p + 4, r->sink_to);
	tcpw_put32(p + 12, r->size);
	tcpw_put32(p + 16, r->src_stag);
	tcpw_put64(p + 20, r->src_to);
}

static void put_term(uint8_t *p, const struct tcpw_term *t)
{
	uint16_t hdrct = (t->m ? TERM_M : 0) | (t->d ? TERM_D : 0) | (t->r ? TERM_R : 0);
	size_t hlen = term_ddp_hdr_len(t->ddp_hdr);

	p[0] = (uint8_t)(t->layer << 4 | t->etype);
	p[1] = t->ecode;
	tcpw_put16(p + 2, hdrct);
	p += TERM_CTRL_LEN;
	if (t->d) {
		tcpw_put16(p, t->ddp_seg_len);
		memcpy(p + TERM_SEG_LEN, t->ddp_hdr, hlen);
		p += TERM_SEG_LEN + hlen;
	}
	if (t->r)
		memcpy(p, t->rdma_hdr, TCPW_READ_REQ_BODY);
}

static void put_atomic_req(uint8_t *p, const struct tcpw_atomic_req *a)
{
	tcpw_put32(p, a->op);		/* 28 reserved bits, then the op */
	tcpw_put32(p + 4, a->req_id);
	tcpw_put32(p + 8, a->stag);
	tcpw_put64(p + 12, a->to);
	tcpw_put64(p + 20, a->swap_add);
	tcpw_put64(p + 28, a->swap_add_mask);
	tcpw_put64(p + 36, a->compare);
	tcpw_put64(p + 44, a->compare_mask);
}

static void put_body(uint8_t *p, const struct tcpw_seg *s)
{
	switch (s->opcode) {
	case TCPW_OP_READ_REQ:
		put_read_req(p, &s->u.rreq);
		break;
	case TCPW_OP_TERMINATE:
		put_term(p, &s->u.term);
		break;
	case TCPW_OP_ATOMIC_REQ:
		put_atomic_req(p, &s->u.areq);
		break;
	case TCPW_OP_ATOMIC_RESP:
		tcpw_put32(p, s->u.aresp.req_id);
		tcpw_put64(p + 4, s->u.aresp.orig);
		break;
	default:
		break;
	}
}

/* Values an encoder must refuse rather than truncate onto the wire. */
static bool seg_fields_ok(const struct tcpw_seg *s)
{
	if (s->opcode >= TCPW_OP_COUNT_)
		return false;
	if (s->opcode == TCPW_OP_TERMINATE)
		return s->u.term.layer <= TCPW_LAYER_LLP && s->u.term.etype <= 0xf;
	if (s->opcode == TCPW_OP_ATOMIC_REQ)
		return s->u.areq.op <= TCPW_ATOMIC_CMP_SWAP;
	return true;
}

int tcpw_seg_encode(const struct tcpw_seg *s, uint8_t *buf, size_t cap, size_t *len_p)
{
	const struct op_shape *shape;
	size_t len;

	if (!seg_fields_ok(s))
		return TCPW_ERR_INVAL;
	shape = &op_shapes[s->opcode];
	len = tcpw_seg_hdr_len(s);
	if (cap < len)
		return TCPW_ERR_NOSPACE;
	buf[0] = (shape->tagged ? DDP_T : 0) | (s->last ? DDP_L : 0) | DDP_VERSION;
	buf[1] = RDMAP_RV | s->opcode;
	if (shape->tagged) {
		tcpw_put32(buf + 2, s->stag);
		tcpw_put64(buf + 6, s->to);
	} else {
		tcpw_put32(buf + 2, shape->inval ? s->inval_stag : 0);
		tcpw_put32(buf + 6, shape->qn);
		tcpw_put32(buf + 10, s->msn);
		tcpw_put32(buf + 14, s->mo);
		put_body(buf + TCPW_DDP_UNTAGGED_HDR, s);
	}
	*len_p = len;
	return 0;
}

/* ---- decode ----------------------------------------------------------- */

/* The two control bytes: versions, reserved bits, opcode, buffer model. */
static int decode_ctrl(const uint8_t *p, struct tcpw_seg *s)
{
	if ((p[0] & DDP_DV_MASK) != DDP_VERSION)
		return TCPW_ERR_DDP_VERSION;
	if (p[0] & DDP_RSVD)
		return TCPW_ERR_DDP_RESERVED;
	if ((p[1] & RDMAP_RV_MASK) != RDMAP_RV)
		return TCPW_ERR_RDMAP_VERSION;
	if (p[1] & RDMAP_RSVD)
		return TCPW_ERR_RDMAP_RESERVED;
	s->opcode = p[1] & RDMAP_OP_MASK;
	if (s->opcode >= TCPW_OP_COUNT_)
		return TCPW_ERR_RDMAP_OPCODE;
	s->tagged = (p[0] & DDP_T) != 0;
	s->last = (p[0] & DDP_L) != 0;
	if (s->tagged != op_shapes[s->opcode].tagged)
		return TCPW_ERR_DDP_TAGGED;
	return 0;
}

static void get_read_req(const uint8_t *p, struct tcpw_read_req *r)
{
	r->sink_stag = tcpw_get32(p);
	r->sink_to = tcpw_get64(p + 4);
	r->size = tcpw_get32(p + 12);
	r->src_stag = tcpw_get32(p + 16);
	r->src_to = tcpw_get64(p + 20);
}

/* Error types each layer defines (RFC 5040; DDP type 3 is left to
 * the LLP, MPA defines type 0 only). */
static bool term_etype_ok(uint8_t layer, uint8_t etype)
{
	switch (layer) {
	case TCPW_LAYER_RDMAP:
		return etype <= 2;
	case TCPW_LAYER_DDP:
		return etype <= 3;
	case TCPW_LAYER_LLP:
		return etype == 0;
	default:
		return false;
	}
}

/* p: after the DDP header; n: bytes from there to the ULPDU's end. */
static int get_term(const uint8_t *p, size_t n, struct tcpw_term *t)
{
	uint16_t hdrct = tcpw_get16(p + 2);
	size_t at = TERM_CTRL_LEN;

	t->layer = p[0] >> 4;
	t->etype = p[0] & 0xf;
	t->ecode = p[1];
	if (!term_etype_ok(t->layer, t->etype))
		return TCPW_ERR_RDMAP_TERM;
	if (hdrct & TERM_RSVD)
		return TCPW_ERR_RDMAP_RESERVED;
	t->m = (hdrct & TERM_M) != 0;
	t->d = (hdrct & TERM_D) != 0;
	t->r = (hdrct & TERM_R) != 0;
	if (t->d) {
		/* Segment length, then one byte of the copied header to learn
		 * its length, before anything else is read. */
		if (n < at + TERM_SEG_LEN + 1)
			return TCPW_ERR_RDMAP_LEN;
		t->ddp_seg_len = tcpw_get16(p + at);
		t->ddp_hdr_len = (uint8_t)term_ddp_hdr_len(p + at + TERM_SEG_LEN);
		if (n < at + TERM_SEG_LEN + t->ddp_hdr_len)
			return TCPW_ERR_RDMAP_LEN;
		memcpy(t->ddp_hdr, p + at + TERM_SEG_LEN, t->ddp_hdr_len);
		at += TERM_SEG_LEN + t->ddp_hdr_len;
	}
	if (t->r) {
		if (n < at + TCPW_READ_REQ_BODY)
			return TCPW_ERR_RDMAP_LEN;
		memcpy(t->rdma_hdr, p + at, TCPW_READ_REQ_BODY);
		at += TCPW_READ_REQ_BODY;
	}
	return at == n ? 0 : TCPW_ERR_RDMAP_LEN;
}

static int get_atomic_req(const uint8_t *p, struct tcpw_atomic_req *a)
{
	uint32_t word = tcpw_get32(p);

	if (word & ~0xfu)
		return TCPW_ERR_RDMAP_RESERVED;
	if (word > TCPW_ATOMIC_CMP_SWAP)
		return TCPW_ERR_RDMAP_ATOMIC;
	a->op = (uint8_t)word;
	a->req_id = tcpw_get32(p + 4);
	a->stag = tcpw_get32(p + 8);
	a->to = tcpw_get64(p + 12);
	a->swap_add = tcpw_get64(p + 20);
	a->swap_add_mask = tcpw_get64(p + 28);
	a->compare = tcpw_get64(p + 36);
	a->compare_mask = tcpw_get64(p + 44);
	return 0;
}

/* The opcode's body (after the untagged header; n bytes from there). */
static int decode_body(const uint8_t *p, size_t n, struct tcpw_seg *s)
{
	switch (s->opcode) {
	case TCPW_OP_READ_REQ:
		get_read_req(p, &s->u.rreq);
		return 0;
	case TCPW_OP_TERMINATE:
		return get_term(p, n, &s->u.term);
	case TCPW_OP_ATOMIC_REQ:
		return get_atomic_req(p, &s->u.areq);
	case TCPW_OP_ATOMIC_RESP:
		s->u.aresp.req_id = tcpw_get32(p);
		s->u.aresp.orig = tcpw_get64(p + 4);
		return 0;
	default:
		return 0;
	}
}

static int decode_untagged(const uint8_t *ulpdu, size_t len, struct tcpw_seg *s)
{
	const struct op_shape *shape = &op_shapes[s->opcode];
	uint32_t rsvd_ulp = tcpw_get32(ulpdu + 2);
	int err;

	if (len < TCPW_DDP_UNTAGGED_HDR + (size_t)shape->body)
		return TCPW_ERR_DDP_SHORT;
	s->qn = tcpw_get32(ulpdu + 6);
	s->msn = tcpw_get32(ulpdu + 10);
	s->mo = tcpw_get32(ulpdu + 14);
	if (s->qn != shape->qn)
		return TCPW_ERR_DDP_QN;
	if (shape->inval)
		s->inval_stag = rsvd_ulp;
	else if (rsvd_ulp)
		return TCPW_ERR_RDMAP_RESERVED;
	err = decode_body(ulpdu + TCPW_DDP_UNTAGGED_HDR, len - TCPW_DDP_UNTAGGED_HDR, s);
	if (err)
		return err;
	s->payload = ulpdu + tcpw_seg_hdr_len(s);
	s->payload_len = len - tcpw_seg_hdr_len(s);
	return 0;
}

int tcpw_seg_decode(const uint8_t *ulpdu, size_t len, struct tcpw_seg *s_p)
{
	struct tcpw_seg s = { 0 };
	const struct op_shape *shape;
	int err;

	if (len < TCPW_DDP_TAGGED_HDR)
		return TCPW_ERR_DDP_SHORT;
	err = decode_ctrl(ulpdu, &s);
	if (err)
		return err;
	shape = &op_shapes[s.opcode];
	if (s.tagged) {
		s.stag = tcpw_get32(ulpdu + 2);
		s.to = tcpw_get64(ulpdu + 6);
		s.payload = ulpdu + TCPW_DDP_TAGGED_HDR;
		s.payload_len = len - TCPW_DDP_TAGGED_HDR;
	} else {
		err = decode_untagged(ulpdu, len, &s);
		if (err)
			return err;
	}
	if (shape->one_segment && (!s.last || s.mo != 0))
		return TCPW_ERR_RDMAP_SEGMENT;
	if (shape->payload >= 0 && s.payload_len != (size_t)shape->payload)
		return TCPW_ERR_RDMAP_LEN;
	*s_p = s;
	return 0;
}

/* ---- segmenter -------------------------------------------------------- */

/* Whether the message's bytes can be addressed: TO must not pass 2^64
 * (RFC 5041's TO wrap), MO must not pass 2^32. */
static int seg_range_ok(const struct tcpw_seg *first, uint32_t msg_len)
{
	if (first->tagged || tcpw_op_tagged(first->opcode))
		return msg_len && first->to > UINT64_MAX - (msg_len - 1) ? TCPW_ERR_DDP_TO_WRAP
									 : 0;
	return (uint64_t)first->mo + msg_len > (uint64_t)UINT32_MAX + 1 ? TCPW_ERR_DDP_TOO_LONG
									  : 0;
}

int tcpw_segmenter_init(struct tcpw_segmenter *sg, const struct tcpw_seg *first,
			uint32_t msg_len, size_t mulpdu)
{
	size_t hdr = tcpw_seg_hdr_len(first);
	const struct op_shape *shape;
	int err;

	if (!hdr || !seg_fields_ok(first))
		return TCPW_ERR_INVAL;
	shape = &op_shapes[first->opcode];
	if (mulpdu > TCPW_ULPDU_MAX)
		mulpdu = TCPW_ULPDU_MAX;
	if (shape->payload >= 0 && msg_len != (uint32_t)shape->payload)
		return TCPW_ERR_RDMAP_LEN;
	/* Room for the header and, if there is payload, one byte of it; a
	 * one-segment message must fit whole. */
	if (mulpdu < hdr || (msg_len && mulpdu == hdr) ||
	    (shape->one_segment && (first->mo != 0 || hdr + msg_len > mulpdu)))
		return TCPW_ERR_INVAL;
	err = seg_range_ok(first, msg_len);
	if (err)
		return err;
	*sg = (struct tcpw_segmenter){
		.next = *first,
		.msg_len = msg_len,
		.max_payload = mulpdu - hdr,
	};
	sg->next.tagged = shape->tagged;
	sg->next.qn = shape->qn;
	return 0;
}

bool tcpw_segmenter_next(struct tcpw_segmenter *sg, struct tcpw_seg *seg_p, uint32_t *off_p,
			 uint32_t *len_p)
{
	uint32_t left = sg->msg_len - sg->done;
	uint32_t n = left < sg->max_payload ? left : (uint32_t)sg->max_payload;

	if (sg->finished)
		return false;
	*seg_p = sg->next;
	seg_p->last = n == left;
	seg_p->payload = NULL;
	seg_p->payload_len = n;
	*off_p = sg->done;
	*len_p = n;
	sg->done += n;
	/* Both advance; only the one of the message's model goes out. */
	sg->next.to += n;
	sg->next.mo += n;
	sg->finished = seg_p->last;
	return true;
}

/* ---- reassembly check ------------------------------------------------- */

void tcpw_reasm_init(struct tcpw_reasm *r)
{
	*r = (struct tcpw_reasm){ .expect_msn = 1 };
}

/* First segment of a message: where it starts. */
static int reasm_start(struct tcpw_reasm *r, const struct tcpw_seg *seg)
{
	if (!seg->tagged) {
		if (seg->msn != r->expect_msn)
			return TCPW_ERR_DDP_MSN;
		if (seg->mo != 0)
			return TCPW_ERR_DDP_MO;
	}
	r->opcode = seg->opcode;
	r->stag = seg->stag;
	r->next_to = seg->to;
	r->qn = seg->qn;
	r->msn = seg->msn;
	r->received = 0;
	return 0;
}

/* A later segment: the same message, right after the bytes so far. */
static int reasm_continue(const struct tcpw_reasm *r, const struct tcpw_seg *seg)
{
	if (seg->tagged) {
		if (seg->opcode != r->opcode)
			return TCPW_ERR_RDMAP_OPCODE;
		if (seg->stag != r->stag)
			return TCPW_ERR_DDP_STAG;
		return seg->to == r->next_to ? 0 : TCPW_ERR_DDP_TO;
	}
	if (seg->qn != r->qn)
		return TCPW_ERR_DDP_QN;
	if (seg->msn != r->msn)
		return TCPW_ERR_DDP_MSN;
	if (seg->opcode != r->opcode)
		return TCPW_ERR_RDMAP_OPCODE;
	return seg->mo == r->received ? 0 : TCPW_ERR_DDP_MO;
}

int tcpw_reasm_check(struct tcpw_reasm *r, const struct tcpw_seg *seg, uint32_t *total_p)
{
	int err = r->active ? reasm_continue(r, seg) : reasm_start(r, seg);

	if (err)
		return err;
	if (seg->payload_len > UINT32_MAX - r->received)
		return TCPW_ERR_DDP_TOO_LONG;
	if (seg->tagged && seg->payload_len && r->next_to > UINT64_MAX - (seg->payload_len - 1))
		return TCPW_ERR_DDP_TO_WRAP;
	r->received += (uint32_t)seg->payload_len;
	r->next_to += seg->payload_len;
	r->active = !seg->last;
	if (r->active)
		return 0;
	if (!seg->tagged)
		r->expect_msn++;	/* wraps mod 2^32, as RFC 5041 says */
	*total_p = r->received;
	return 1;
}
