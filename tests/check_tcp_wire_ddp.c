/*
 * check_tcp_wire_ddp.c - the tcp transport's DDP and RDMAP codec
 * (prov/tcp/tcp_wire_ddp.c): header bytes worked out by hand, round trips
 * of every opcode, every rejection of the decoders, the segmenter and the
 * reassembly check, the error names, and mutated inputs whose accepted
 * forms must re-encode to the same bytes.  Suite tcp_wire, case ddp (CRC,
 * MPA and FPDU framing: check_tcp_wire.c).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "tcp_wire.h"

/* ---- DDP / RDMAP ------------------------------------------------------ */

static size_t seg_encode_ok(const struct tcpw_seg *s, uint8_t *buf, size_t cap)
{
	size_t len = 0;

	ck_assert_int_eq(tcpw_seg_encode(s, buf, cap, &len), 0);
	ck_assert_uint_eq(len, tcpw_seg_hdr_len(s));
	return len;
}

/* One sample segment of every opcode, with its payload length. */
static void seg_sample(uint8_t op, struct tcpw_seg *s, size_t *payload_p)
{
	*s = (struct tcpw_seg){ .opcode = op, .last = true, .msn = 3, .stag = 0xdeadbeef,
				.to = 0x0102030405060708ull };
	*payload_p = op == TCPW_OP_IMM || op == TCPW_OP_IMM_SE ? 8 : 0;
	switch (op) {
	case TCPW_OP_WRITE:
	case TCPW_OP_READ_RESP:
	case TCPW_OP_SEND:
	case TCPW_OP_SEND_SE:
		s->last = false;
		s->mo = 100;
		*payload_p = 17;
		break;
	case TCPW_OP_SEND_INV:
	case TCPW_OP_SEND_SE_INV:
		s->inval_stag = 0x55aa55aa;
		*payload_p = 3;
		break;
	case TCPW_OP_READ_REQ:
		s->u.rreq = (struct tcpw_read_req){ 1, 2, 3, 4, 5 };
		break;
	case TCPW_OP_TERMINATE:
		s->u.term = (struct tcpw_term){ .layer = TCPW_LAYER_DDP, .etype = 2,
						.ecode = 4, .m = true, .d = true, .r = true,
						.ddp_seg_len = 40 };
		s->u.term.ddp_hdr[0] = 0x41;
		s->u.term.ddp_hdr[17] = 0x99;
		s->u.term.rdma_hdr[27] = 0x77;
		break;
	case TCPW_OP_ATOMIC_REQ:
		s->u.areq = (struct tcpw_atomic_req){ TCPW_ATOMIC_CMP_SWAP, 9, 8, 0x40, 7, 6,
						      5, 4 };
		break;
	case TCPW_OP_ATOMIC_RESP:
		s->u.aresp = (struct tcpw_atomic_resp){ 9, 0x1122334455667788ull };
		break;
	}
}

START_TEST(test_ddp_header_bytes)
{
	struct tcpw_seg s = { .opcode = TCPW_OP_READ_REQ, .last = true, .msn = 1,
			      .u.rreq = { 0x11, 0x22, 0x33, 0x44, 0x55 } };
	uint8_t buf[128];

	/* Read Request: untagged, QN 1, then the 28-byte body. */
	ck_assert_uint_eq(seg_encode_ok(&s, buf, sizeof(buf)), 46);
	ck_assert_mem_eq(buf, "\x41\x41\0\0\0\0\0\0\0\x01\0\0\0\x01\0\0\0\0", 18);
	ck_assert_mem_eq(buf + 18, "\0\0\0\x11\0\0\0\0\0\0\0\x22\0\0\0\x33"
				   "\0\0\0\x44\0\0\0\0\0\0\0\x55", 28);
	/* Read Response, not last: tagged, no L. */
	s = (struct tcpw_seg){ .opcode = TCPW_OP_READ_RESP, .stag = 0xa0b0c0d0, .to = 0x10 };
	ck_assert_uint_eq(seg_encode_ok(&s, buf, sizeof(buf)), 14);
	ck_assert_mem_eq(buf, "\x81\x42\xa0\xb0\xc0\xd0\0\0\0\0\0\0\0\x10", 14);
	/* Send with SE and Invalidate carries the STag in RsvdULP. */
	s = (struct tcpw_seg){ .opcode = TCPW_OP_SEND_SE_INV, .last = true, .inval_stag = 0x77,
			       .msn = 2, .mo = 0 };
	seg_encode_ok(&s, buf, sizeof(buf));
	ck_assert_mem_eq(buf, "\x41\x46\0\0\0\x77\0\0\0\0\0\0\0\x02\0\0\0\0", 18);
	/* Terminate, LLP CRC error, no headers: QN 2. */
	s = (struct tcpw_seg){ .opcode = TCPW_OP_TERMINATE, .last = true, .msn = 1,
			       .u.term = { .layer = TCPW_LAYER_LLP, .ecode = 2 } };
	ck_assert_uint_eq(seg_encode_ok(&s, buf, sizeof(buf)), 22);
	ck_assert_mem_eq(buf, "\x41\x47\0\0\0\0\0\0\0\x02\0\0\0\x01\0\0\0\0\x20\x02\0\0", 22);
	/* Atomic Response: QN 3, request id then the original value. */
	s = (struct tcpw_seg){ .opcode = TCPW_OP_ATOMIC_RESP, .last = true, .msn = 1,
			       .u.aresp = { 0x0a, 0x0b } };
	ck_assert_uint_eq(seg_encode_ok(&s, buf, sizeof(buf)), 30);
	ck_assert_mem_eq(buf, "\x41\x4b\0\0\0\0\0\0\0\x03\0\0\0\x01\0\0\0\0"
			      "\0\0\0\x0a\0\0\0\0\0\0\0\x0b", 30);
}
END_TEST

static void seg_assert_same(const struct tcpw_seg *a, const struct tcpw_seg *b)
{
	ck_assert_uint_eq(a->opcode, b->opcode);
	ck_assert(a->last == b->last && a->tagged == tcpw_op_tagged(a->opcode));
	if (a->tagged) {
		ck_assert_uint_eq(a->stag, b->stag);
		ck_assert(a->to == b->to);
		return;
	}
	ck_assert_uint_eq(a->qn, tcpw_op_qn(a->opcode));
	ck_assert_uint_eq(a->msn, b->msn);
	ck_assert_uint_eq(a->mo, b->mo);
	if (a->opcode == TCPW_OP_SEND_INV || a->opcode == TCPW_OP_SEND_SE_INV)
		ck_assert_uint_eq(a->inval_stag, b->inval_stag);
	if (a->opcode == TCPW_OP_TERMINATE)
		ck_assert_uint_eq(a->u.term.ddp_hdr_len, TCPW_DDP_UNTAGGED_HDR);
	if (a->opcode == TCPW_OP_READ_REQ) {
		ck_assert_uint_eq(a->u.rreq.sink_stag, b->u.rreq.sink_stag);
		ck_assert(a->u.rreq.sink_to == b->u.rreq.sink_to);
		ck_assert_uint_eq(a->u.rreq.size, b->u.rreq.size);
		ck_assert_uint_eq(a->u.rreq.src_stag, b->u.rreq.src_stag);
		ck_assert(a->u.rreq.src_to == b->u.rreq.src_to);
	}
	if (a->opcode == TCPW_OP_ATOMIC_REQ) {
		const struct tcpw_atomic_req *x = &a->u.areq, *y = &b->u.areq;

		ck_assert(x->op == y->op && x->req_id == y->req_id && x->stag == y->stag);
		ck_assert(x->to == y->to && x->swap_add == y->swap_add &&
			  x->swap_add_mask == y->swap_add_mask && x->compare == y->compare &&
			  x->compare_mask == y->compare_mask);
	}
	if (a->opcode == TCPW_OP_ATOMIC_RESP)
		ck_assert(a->u.aresp.req_id == b->u.aresp.req_id &&
			  a->u.aresp.orig == b->u.aresp.orig);
}

START_TEST(test_ddp_round_trip_every_opcode)
{
	for (uint8_t op = 0; op < TCPW_OP_COUNT_; op++) {
		struct tcpw_seg s, d;
		uint8_t buf[256];
		size_t n, hlen;

		seg_sample(op, &s, &n);
		hlen = seg_encode_ok(&s, buf, sizeof(buf));
		memset(buf + hlen, 0xab, n);
		ck_assert_int_eq(tcpw_seg_decode(buf, hlen + n, &d), 0);
		seg_assert_same(&d, &s);
		ck_assert_uint_eq(d.payload_len, n);
		ck_assert_ptr_eq(d.payload, buf + hlen);
		if (op == TCPW_OP_TERMINATE) {
			ck_assert(d.u.term.m && d.u.term.d && d.u.term.r);
			ck_assert_uint_eq(d.u.term.ddp_seg_len, 40);
			ck_assert_mem_eq(d.u.term.ddp_hdr, s.u.term.ddp_hdr, 18);
			ck_assert_mem_eq(d.u.term.rdma_hdr, s.u.term.rdma_hdr, 28);
		}
		/* Every truncation is refused. */
		for (size_t cut = 0; cut < hlen; cut++)
			ck_assert_int_lt(tcpw_seg_decode(buf, cut, &d), 0);
		ck_assert_int_eq(tcpw_seg_encode(&s, buf, hlen - 1, &n), TCPW_ERR_NOSPACE);
	}
}
END_TEST

static int decode_mutated(uint8_t op, size_t at, uint8_t xor_mask, size_t extra)
{
	struct tcpw_seg s, d;
	uint8_t buf[256] = { 0 };
	size_t n, hlen;

	seg_sample(op, &s, &n);
	hlen = seg_encode_ok(&s, buf, sizeof(buf));
	buf[at] ^= xor_mask;
	return tcpw_seg_decode(buf, hlen + n + extra, &d);
}

START_TEST(test_ddp_control_rejections)
{
	for (uint8_t op = 0; op < TCPW_OP_COUNT_; op++) {
		for (uint8_t dv = 1; dv < 4; dv++)
			ck_assert_int_eq(decode_mutated(op, 0, dv, 0), TCPW_ERR_DDP_VERSION);
		for (uint8_t bit = 0x04; bit <= 0x20; bit <<= 1)
			ck_assert_int_eq(decode_mutated(op, 0, bit, 0), TCPW_ERR_DDP_RESERVED);
		ck_assert_int_eq(decode_mutated(op, 1, 0x40, 0), TCPW_ERR_RDMAP_VERSION);
		ck_assert_int_eq(decode_mutated(op, 1, 0x80, 0), TCPW_ERR_RDMAP_VERSION);
		ck_assert_int_eq(decode_mutated(op, 1, 0x10, 0), TCPW_ERR_RDMAP_RESERVED);
		ck_assert_int_eq(decode_mutated(op, 1, 0x20, 0), TCPW_ERR_RDMAP_RESERVED);
		ck_assert_int_eq(decode_mutated(op, 0, 0x80, 0), TCPW_ERR_DDP_TAGGED);
	}
	for (uint8_t op = TCPW_OP_COUNT_; op < 16; op++) {
		uint8_t buf[32] = { 0x41, (uint8_t)(0x40 | op) };
		struct tcpw_seg d;

		ck_assert_int_eq(tcpw_seg_decode(buf, sizeof(buf), &d), TCPW_ERR_RDMAP_OPCODE);
	}
}
END_TEST

START_TEST(test_ddp_body_rejections)
{
	for (uint8_t op = 0; op < TCPW_OP_COUNT_; op++) {
		if (tcpw_op_tagged(op))
			continue;
		/* QN is bytes 6..9; a wrong one is refused. */
		ck_assert_int_eq(decode_mutated(op, 9, 0x04, 0), TCPW_ERR_DDP_QN);
		ck_assert_int_eq(decode_mutated(op, 5, 0x01, 0),
				 op == TCPW_OP_SEND_INV || op == TCPW_OP_SEND_SE_INV
					 ? 0 : TCPW_ERR_RDMAP_RESERVED);
	}
	/* One-segment messages: L set, MO 0, no payload (Immediate: 8). */
	ck_assert_int_eq(decode_mutated(TCPW_OP_READ_REQ, 0, 0x40, 0), TCPW_ERR_RDMAP_SEGMENT);
	ck_assert_int_eq(decode_mutated(TCPW_OP_ATOMIC_REQ, 17, 0x01, 0),
			 TCPW_ERR_RDMAP_SEGMENT);
	ck_assert_int_eq(decode_mutated(TCPW_OP_READ_REQ, 0, 0, 1), TCPW_ERR_RDMAP_LEN);
	ck_assert_int_eq(decode_mutated(TCPW_OP_ATOMIC_RESP, 0, 0, 4), TCPW_ERR_RDMAP_LEN);
	ck_assert_int_eq(decode_mutated(TCPW_OP_IMM, 0, 0, 1), TCPW_ERR_RDMAP_LEN);
	ck_assert_int_eq(decode_mutated(TCPW_OP_IMM_SE, 0, 0x40, 0), TCPW_ERR_RDMAP_SEGMENT);
	/* Atomics: the op (byte 21's low nibble) and 28 reserved bits. */
	ck_assert_int_eq(decode_mutated(TCPW_OP_ATOMIC_REQ, 21, 0x01, 0), TCPW_ERR_RDMAP_ATOMIC);
	ck_assert_int_eq(decode_mutated(TCPW_OP_ATOMIC_REQ, 21, 0x10, 0),
			 TCPW_ERR_RDMAP_RESERVED);
	ck_assert_int_eq(decode_mutated(TCPW_OP_ATOMIC_REQ, 18, 0x80, 0),
			 TCPW_ERR_RDMAP_RESERVED);
	/* Terminate: layer 3, an etype its layer lacks, reserved bits, a
	 * header set that does not match the bytes. */
	ck_assert_int_eq(decode_mutated(TCPW_OP_TERMINATE, 18, 0x20, 0), TCPW_ERR_RDMAP_TERM);
	ck_assert_int_eq(decode_mutated(TCPW_OP_TERMINATE, 18, 0x0c, 0), TCPW_ERR_RDMAP_TERM);
	ck_assert_int_eq(decode_mutated(TCPW_OP_TERMINATE, 21, 0x01, 0),
			 TCPW_ERR_RDMAP_RESERVED);
	ck_assert_int_eq(decode_mutated(TCPW_OP_TERMINATE, 20, 0x20, 0), TCPW_ERR_RDMAP_LEN);
	ck_assert_int_eq(decode_mutated(TCPW_OP_TERMINATE, 0, 0, 1), TCPW_ERR_RDMAP_LEN);
	/* The copied header's T bit makes it 14 bytes: 4 too many. */
	ck_assert_int_eq(decode_mutated(TCPW_OP_TERMINATE, 24, 0x80, 0), TCPW_ERR_RDMAP_LEN);
}
END_TEST

START_TEST(test_ddp_encode_refusals)
{
	struct tcpw_seg s = { .opcode = TCPW_OP_COUNT_ };
	uint8_t buf[128];
	size_t len;

	ck_assert_int_eq(tcpw_seg_encode(&s, buf, sizeof(buf), &len), TCPW_ERR_INVAL);
	ck_assert_uint_eq(tcpw_seg_hdr_len(&s), 0);
	s = (struct tcpw_seg){ .opcode = TCPW_OP_TERMINATE, .u.term.layer = 3 };
	ck_assert_int_eq(tcpw_seg_encode(&s, buf, sizeof(buf), &len), TCPW_ERR_INVAL);
	s = (struct tcpw_seg){ .opcode = TCPW_OP_ATOMIC_REQ, .u.areq.op = 3 };
	ck_assert_int_eq(tcpw_seg_encode(&s, buf, sizeof(buf), &len), TCPW_ERR_INVAL);
}
END_TEST

/* ---- segmenter and reassembly ----------------------------------------- */

/* Cut a message, check every segment through bytes and the reassembly
 * check; returns how many segments it took. */
static int cut_and_check(const struct tcpw_seg *first, uint32_t len, size_t mulpdu,
			 struct tcpw_reasm *r)
{
	struct tcpw_segmenter sg;
	struct tcpw_seg s, d;
	uint32_t off, n, expect_off = 0, total = 0;
	int segs = 0, rc = 0;
	static uint8_t buf[TCPW_ULPDU_MAX];

	ck_assert_int_eq(tcpw_segmenter_init(&sg, first, len, mulpdu), 0);
	while (tcpw_segmenter_next(&sg, &s, &off, &n)) {
		size_t hlen = seg_encode_ok(&s, buf, sizeof(buf));

		ck_assert_uint_le(hlen + n, mulpdu);
		ck_assert_uint_eq(off, expect_off);
		ck_assert_int_eq(tcpw_seg_decode(buf, hlen + n, &d), 0);
		if (d.tagged)
			ck_assert(d.to == first->to + off);
		else
			ck_assert_uint_eq(d.mo, first->mo + off);
		ck_assert(d.last == (off + n == len));
		ck_assert_int_eq(rc, 0);	/* nothing after the last */
		rc = tcpw_reasm_check(r, &d, &total);
		ck_assert_int_ge(rc, 0);
		expect_off += n;
		segs++;
	}
	ck_assert_int_eq(rc, 1);
	ck_assert_uint_eq(total, len);
	ck_assert_uint_eq(expect_off, len);
	return segs;
}

START_TEST(test_segmenter_cuts)
{
	struct tcpw_seg w = { .opcode = TCPW_OP_WRITE, .stag = 7, .to = 0x1000 };
	struct tcpw_seg snd = { .opcode = TCPW_OP_SEND_SE, .msn = 1 };
	struct tcpw_reasm tagged, untagged;
	size_t mulpdu = tcpw_mulpdu(1448, false);	/* 1442: 1428 per Write */

	tcpw_reasm_init(&tagged);
	tcpw_reasm_init(&untagged);
	ck_assert_int_eq(cut_and_check(&w, 3000, mulpdu, &tagged), 3);
	ck_assert_int_eq(cut_and_check(&w, 2 * 1428, mulpdu, &tagged), 2);
	ck_assert_int_eq(cut_and_check(&w, 0, mulpdu, &tagged), 1);
	ck_assert_int_eq(cut_and_check(&snd, 0, mulpdu, &untagged), 1);
	snd.msn = 2;
	ck_assert_int_eq(cut_and_check(&snd, 1424, mulpdu, &untagged), 1);
	snd.msn = 3;
	ck_assert_int_eq(cut_and_check(&snd, 1425, mulpdu, &untagged), 2);
	snd.msn = 4;
	ck_assert_int_eq(cut_and_check(&snd, 100000, 64, &untagged), (100000 + 45) / 46);
	ck_assert_uint_eq(untagged.expect_msn, 5);
}
END_TEST

START_TEST(test_segmenter_refusals)
{
	struct tcpw_seg s = { .opcode = TCPW_OP_READ_REQ };
	struct tcpw_segmenter sg;

	ck_assert_int_eq(tcpw_segmenter_init(&sg, &s, 1, 1000), TCPW_ERR_RDMAP_LEN);
	ck_assert_int_eq(tcpw_segmenter_init(&sg, &s, 0, 45), TCPW_ERR_INVAL);
	ck_assert_int_eq(tcpw_segmenter_init(&sg, &s, 0, 46), 0);
	s.opcode = TCPW_OP_IMM;
	ck_assert_int_eq(tcpw_segmenter_init(&sg, &s, 7, 1000), TCPW_ERR_RDMAP_LEN);
	ck_assert_int_eq(tcpw_segmenter_init(&sg, &s, 8, 25), TCPW_ERR_INVAL);
	s.opcode = TCPW_OP_SEND;
	ck_assert_int_eq(tcpw_segmenter_init(&sg, &s, 1, 18), TCPW_ERR_INVAL);
	ck_assert_int_eq(tcpw_segmenter_init(&sg, &s, 0, 18), 0);
	/* MO reaches 2^32 - 1, not past. */
	s.mo = 1;
	ck_assert_int_eq(tcpw_segmenter_init(&sg, &s, UINT32_MAX, 1000), 0);
	s.mo = 2;
	ck_assert_int_eq(tcpw_segmenter_init(&sg, &s, UINT32_MAX, 1000), TCPW_ERR_DDP_TOO_LONG);
	s = (struct tcpw_seg){ .opcode = TCPW_OP_WRITE, .to = UINT64_MAX - 9 };
	ck_assert_int_eq(tcpw_segmenter_init(&sg, &s, 10, 1000), 0);
	ck_assert_int_eq(tcpw_segmenter_init(&sg, &s, 11, 1000), TCPW_ERR_DDP_TO_WRAP);
	s.opcode = 12;
	ck_assert_int_eq(tcpw_segmenter_init(&sg, &s, 0, 1000), TCPW_ERR_INVAL);
}
END_TEST

static int reasm_feed(struct tcpw_reasm *r, struct tcpw_seg s)
{
	uint32_t total;

	s.tagged = tcpw_op_tagged(s.opcode);
	s.qn = tcpw_op_qn(s.opcode);
	return tcpw_reasm_check(r, &s, &total);
}

START_TEST(test_reasm_rejections)
{
	struct tcpw_seg t = { .opcode = TCPW_OP_WRITE, .stag = 1, .to = 100, .payload_len = 10 };
	struct tcpw_seg u = { .opcode = TCPW_OP_SEND, .msn = 1, .payload_len = 10 };
	struct tcpw_reasm r;

	tcpw_reasm_init(&r);
	ck_assert_int_eq(reasm_feed(&r, t), 0);
	ck_assert_int_eq(reasm_feed(&r, (t.to = 111, t)), TCPW_ERR_DDP_TO);
	ck_assert_int_eq(reasm_feed(&r, (t.to = 110, t.stag = 2, t)), TCPW_ERR_DDP_STAG);
	ck_assert_int_eq(reasm_feed(&r, (t.stag = 1, t.opcode = TCPW_OP_READ_RESP, t)),
			 TCPW_ERR_RDMAP_OPCODE);
	t.opcode = TCPW_OP_WRITE;
	t.last = true;
	ck_assert_int_eq(reasm_feed(&r, t), 1);
	/* TO past 2^64. */
	t = (struct tcpw_seg){ .opcode = TCPW_OP_WRITE, .to = UINT64_MAX - 8, .payload_len = 10 };
	ck_assert_int_eq(reasm_feed(&r, t), TCPW_ERR_DDP_TO_WRAP);

	tcpw_reasm_init(&r);
	ck_assert_int_eq(reasm_feed(&r, (u.msn = 2, u)), TCPW_ERR_DDP_MSN);
	ck_assert_int_eq(reasm_feed(&r, (u.msn = 1, u.mo = 5, u)), TCPW_ERR_DDP_MO);
	ck_assert_int_eq(reasm_feed(&r, (u.mo = 0, u)), 0);
	ck_assert_int_eq(reasm_feed(&r, (u.mo = 11, u)), TCPW_ERR_DDP_MO);
	ck_assert_int_eq(reasm_feed(&r, (u.mo = 10, u.msn = 2, u)), TCPW_ERR_DDP_MSN);
	ck_assert_int_eq(reasm_feed(&r, (u.msn = 1, u.opcode = TCPW_OP_SEND_SE, u)),
			 TCPW_ERR_RDMAP_OPCODE);
	/* Immediate Data on the same queue cannot cut into a Send. */
	ck_assert_int_eq(reasm_feed(&r, (struct tcpw_seg){ .opcode = TCPW_OP_IMM, .msn = 2,
							   .last = true, .payload_len = 8 }),
			 TCPW_ERR_DDP_MSN);
	u.opcode = TCPW_OP_SEND;
	u.mo = 10;
	u.last = true;
	u.payload_len = UINT32_MAX;
	ck_assert_int_eq(reasm_feed(&r, u), TCPW_ERR_DDP_TOO_LONG);
	/* MSN wraps mod 2^32. */
	tcpw_reasm_init(&r);
	r.expect_msn = UINT32_MAX;
	u = (struct tcpw_seg){ .opcode = TCPW_OP_SEND, .msn = UINT32_MAX, .last = true };
	ck_assert_int_eq(reasm_feed(&r, u), 1);
	ck_assert_int_eq(reasm_feed(&r, (u.msn = 0, u)), 1);
	ck_assert_uint_eq(r.expect_msn, 1);
}
END_TEST

/* ---- errors ----------------------------------------------------------- */

START_TEST(test_errors_named_and_mapped)
{
	struct tcpw_term_code c;

	for (int e = 1; e < TCPW_ERR_COUNT_; e++) {
		ck_assert_str_ne(tcpw_strerror(-e), "unknown error");
		for (int f = 1; f < e; f++)
			ck_assert_str_ne(tcpw_strerror(-e), tcpw_strerror(-f));
	}
	ck_assert_str_eq(tcpw_strerror(1), "unknown error");
	ck_assert_str_eq(tcpw_strerror(-TCPW_ERR_COUNT_), "unknown error");
	tcpw_err_term(TCPW_ERR_FPDU_CRC, false, &c);
	ck_assert(c.layer == TCPW_LAYER_LLP && c.etype == 0 && c.ecode == 0x02);
	tcpw_err_term(TCPW_ERR_MPA_IRD, false, &c);
	ck_assert(c.layer == TCPW_LAYER_LLP && c.ecode == 0x06);
	tcpw_err_term(TCPW_ERR_MPA_NO_RTR, false, &c);
	ck_assert(c.layer == TCPW_LAYER_LLP && c.ecode == 0x07);
	tcpw_err_term(TCPW_ERR_DDP_VERSION, true, &c);
	ck_assert(c.layer == TCPW_LAYER_DDP && c.etype == 1 && c.ecode == 0x04);
	tcpw_err_term(TCPW_ERR_DDP_VERSION, false, &c);
	ck_assert(c.layer == TCPW_LAYER_DDP && c.etype == 2 && c.ecode == 0x06);
	tcpw_err_term(TCPW_ERR_RDMAP_OPCODE, false, &c);
	ck_assert(c.layer == TCPW_LAYER_RDMAP && c.etype == 2 && c.ecode == 0x06);
	tcpw_err_term(-1000, false, &c);
	ck_assert(c.layer == TCPW_LAYER_RDMAP && c.ecode == 0xff);
}
END_TEST

/* ---- mutated inputs --------------------------------------------------- */

/* Any ULPDU the decoder accepts re-encodes to the same header bytes:
 * there is one way to write each accepted header, so nothing a peer set
 * can hide in a field the decoder skipped. */
START_TEST(test_ddp_mutations_canonical)
{
	srand(5);
	for (int iter = 0; iter < 20000; iter++) {
		struct tcpw_seg s, d;
		uint8_t buf[256] = { 0 }, again[256];
		size_t n, hlen, alen;
		uint8_t op = (uint8_t)(rand() % TCPW_OP_COUNT_);

		seg_sample(op, &s, &n);
		hlen = seg_encode_ok(&s, buf, sizeof(buf));
		for (int k = rand() % 3; k >= 0; k--)
			buf[rand() % (hlen + n)] ^= (uint8_t)(1u << (rand() % 8));
		n = hlen + n + (size_t)(rand() % 3) - 1;
		if (tcpw_seg_decode(buf, n, &d) != 0)
			continue;
		ck_assert_int_eq(tcpw_seg_encode(&d, again, sizeof(again), &alen), 0);
		ck_assert_uint_le(alen, n);
		ck_assert_mem_eq(again, buf, alen);
		ck_assert_ptr_eq(d.payload, buf + alen);
	}
}
END_TEST

Suite *tcp_wire_ddp_suite(void)
{
	Suite *s = suite_create("tcp_wire");
	TCase *ddp = tcase_create("ddp");

	tcase_add_test(ddp, test_ddp_header_bytes);
	tcase_add_test(ddp, test_ddp_round_trip_every_opcode);
	tcase_add_test(ddp, test_ddp_control_rejections);
	tcase_add_test(ddp, test_ddp_body_rejections);
	tcase_add_test(ddp, test_ddp_encode_refusals);
	tcase_add_test(ddp, test_segmenter_cuts);
	tcase_add_test(ddp, test_segmenter_refusals);
	tcase_add_test(ddp, test_reasm_rejections);
	tcase_add_test(ddp, test_errors_named_and_mapped);
	tcase_add_test(ddp, test_ddp_mutations_canonical);
	suite_add_tcase(s, ddp);
	return s;
}
