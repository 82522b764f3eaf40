/*
 * check_tcp_hostile.c - the tcp provider against a raw peer that writes
 * the wire format by hand: a READ Response that must not wait behind a
 * 64 MiB SEND, and misbehaviour -- a bad CRC, a segment past its message
 * or its receive, a READ Response longer than asked, a stall mid-FPDU,
 * iWARP without ferry's extensions -- each ending in a Terminate and the
 * end of the stream, with nothing outside registered memory touched.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <check.h>

#include "export/tcp-export.h"
#include "tcptest.h"
#include "testutil.h"

/* Guard bytes around what a test lets the peer reach. */
#define TT_GUARD 0x5a

/* While a 64 MiB SEND is leaving, a READ Request is answered next:
 * its Response comes before the SEND's last segment. */
START_TEST(test_tcp_read_response_not_behind_send)
{
	struct tt_opts o = { .buf_len = 64u << 20, .rnr_retry = 7 };
	uint32_t big = 64u << 20, send_bytes = 0, resp_bytes = 0;
	bool send_done = false;
	struct tcpw_seg s = { 0 };
	struct tt_raw r;
	struct tt_end e;
	struct ferry_wc wc;
	int i;

	tt_raw_pair(&e, &r, &o, true);
	tu_fill(e.buf, 4096, 9);
	ck_assert_int_eq(tu_post_send1(e.qp, 1, FERRY_WR_SEND, FERRY_SEND_SIGNALED, e.buf, big,
				       e.mr->lkey, 0, 0), 0);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(tt_raw_recv(&r, &s), 1);
		ck_assert_int_eq(s.opcode, TCPW_OP_SEND);
		send_bytes += (uint32_t)s.payload_len;
	}
	memset(&s, 0, sizeof(s));
	s.opcode = TCPW_OP_READ_REQ;
	s.last = true;
	s.u.rreq = (struct tcpw_read_req){ .sink_stag = 0x77, .size = 4096,
					   .src_stag = e.mr->rkey, .src_to = (uintptr_t)e.buf };
	tt_raw_send(&r, &s, NULL, 0, false);
	while (resp_bytes < 4096) {
		ck_assert_int_eq(tt_raw_recv(&r, &s), 1);
		if (s.opcode == TCPW_OP_SEND) {
			send_bytes += (uint32_t)s.payload_len;
			send_done = s.last;
			ck_assert_msg(!send_done, "the SEND ended before the READ was answered");
			continue;
		}
		ck_assert_int_eq(s.opcode, TCPW_OP_READ_RESP);
		ck_assert_uint_eq(s.stag, 0x77);
		ck_assert_uint_eq(s.to, resp_bytes);
		ck_assert(tu_check(s.payload, s.payload_len, 9) || resp_bytes);
		resp_bytes += (uint32_t)s.payload_len;
	}
	ck_assert_uint_lt(send_bytes, big);
	/* The rest of the SEND, and its confirmation: the fence READ. */
	while (!send_done) {
		ck_assert_int_eq(tt_raw_recv(&r, &s), 1);
		ck_assert_int_eq(s.opcode, TCPW_OP_SEND);
		send_done = s.last;
	}
	ck_assert_int_eq(tt_raw_recv(&r, &s), 1);
	ck_assert_int_eq(s.opcode, TCPW_OP_READ_REQ);
	ck_assert_uint_eq(s.u.rreq.size, 0);
	memset(&wc, 0, sizeof(wc));
	ck_assert_int_eq(tu_poll(e.cq, &wc, 1, 0), 0);	/* not confirmed yet */
	{
		struct tcpw_seg resp = { .opcode = TCPW_OP_READ_RESP, .last = true,
					 .stag = s.u.rreq.sink_stag };

		tt_raw_send(&r, &resp, NULL, 0, false);
	}
	tu_poll1(e.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	tt_raw_close(&r);
	tt_end_close(&e);
}
END_TEST

/* The ferry end must have Terminated with @layer/@etype and closed, its
 * QP in ERR. */
static void tt_expect_term(struct tt_raw *r, struct tt_end *e, uint8_t layer, int etype)
{
	struct tcpw_term_code code;
	struct tcp_qp_stats st;

	ck_assert_msg(tt_raw_wait_term(r, &code) == 1, "no Terminate came");
	ck_assert_int_eq(code.layer, layer);
	if (etype >= 0)
		ck_assert_int_eq(code.etype, etype);
	ck_assert_msg(tt_raw_wait_eof(r), "the stream did not end after the Terminate");
	ck_assert(tu_wait_qp_state(e->qp, FERRY_QPS_ERR, TU_WAIT_MS));
	tcp_qp_stats(e->qp, &st);
	ck_assert_uint_eq(st.terms_sent, 1);
}

START_TEST(test_tcp_hostile_bad_crc)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct tcpw_seg s = { .opcode = TCPW_OP_SEND, .last = true };
	struct tt_raw r;
	struct tt_end e;
	struct ferry_wc wc;

	tt_raw_pair(&e, &r, &o, true);
	ck_assert(r.crc);
	ck_assert_int_eq(tu_post_recv1(e.qp, 1, e.buf, 64, e.mr->lkey), 0);
	tt_raw_send(&r, &s, "poison!!", 8, true);
	tt_expect_term(&r, &e, TCPW_LAYER_LLP, -1);
	tu_poll1(e.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_WR_FLUSH_ERR);
	ck_assert(tu_all_bytes(e.buf, e.len, 0));
	tt_raw_close(&r);
	tt_end_close(&e);
}
END_TEST

/* A SEND whose second segment runs past the 64-byte receive. */
START_TEST(test_tcp_hostile_send_past_receive)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct tcpw_seg s = { .opcode = TCPW_OP_SEND };
	uint8_t data[100];
	struct tt_raw r;
	struct tt_end e;
	struct ferry_wc wc;

	tt_raw_pair(&e, &r, &o, true);
	memset(e.buf, TT_GUARD, e.len);
	memset(data, 0xee, sizeof(data));
	ck_assert_int_eq(tu_post_recv1(e.qp, 1, e.buf + 1000, 64, e.mr->lkey), 0);
	tt_raw_send(&r, &s, data, 40, false);
	s = (struct tcpw_seg){ .opcode = TCPW_OP_SEND, .last = true, .mo = 40, .msn = 1 };
	tt_raw_send(&r, &s, data, 60, false);
	tt_expect_term(&r, &e, TCPW_LAYER_DDP, TCP_TERM_DDP_UNTAGGED);
	tu_poll1(e.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_LOC_LEN_ERR);
	ck_assert(tu_all_bytes(e.buf, 1000, TT_GUARD));
	ck_assert(tu_all_bytes(e.buf + 1000, 40, 0xee));
	ck_assert(tu_all_bytes(e.buf + 1040, e.len - 1040, TT_GUARD));
	tt_raw_close(&r);
	tt_end_close(&e);
}
END_TEST

/* A WRITE message whose continuation leaves its MR. */
START_TEST(test_tcp_hostile_write_past_mr)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct ferry_mr *small;
	uint8_t data[256];
	struct tcpw_seg s;
	struct tt_raw r;
	struct tt_end e;

	tt_raw_pair(&e, &r, &o, true);
	memset(e.buf, TT_GUARD, e.len);
	memset(data, 0xee, sizeof(data));
	small = ferry_reg_mr(e.pd, e.buf + 4096, 256, TU_ACCESS_ALL);
	ck_assert(small);
	s = (struct tcpw_seg){ .opcode = TCPW_OP_WRITE, .stag = small->rkey,
			       .to = (uintptr_t)e.buf + 4096 };
	tt_raw_send(&r, &s, data, 200, false);
	s = (struct tcpw_seg){ .opcode = TCPW_OP_WRITE, .stag = small->rkey, .last = true,
			       .to = (uintptr_t)e.buf + 4096 + 200 };
	tt_raw_send(&r, &s, data, 100, false);
	tt_expect_term(&r, &e, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_PROT);
	ck_assert(tu_all_bytes(e.buf + 4096, 200, 0xee));
	ck_assert(tu_all_bytes(e.buf + 4296, e.len - 4296, TT_GUARD));
	ck_assert_int_eq(ferry_dereg_mr(small), 0);
	tt_raw_close(&r);
	tt_end_close(&e);
}
END_TEST

/* Asked for 100 bytes, the peer answers 200: refused before a byte lands. */
START_TEST(test_tcp_hostile_read_response_too_long)
{
	struct tt_opts o = { .rnr_retry = 7 };
	uint8_t data[200];
	struct tcpw_seg s;
	struct tt_raw r;
	struct tt_end e;
	struct ferry_wc wc;

	tt_raw_pair(&e, &r, &o, true);
	memset(e.buf, TT_GUARD, e.len);
	memset(data, 0xee, sizeof(data));
	ck_assert_int_eq(tu_post_send1(e.qp, 1, FERRY_WR_RDMA_READ, FERRY_SEND_SIGNALED,
				       e.buf + 512, 100, e.mr->lkey, 0x1000, 0x4242), 0);
	ck_assert_int_eq(tt_raw_recv(&r, &s), 1);
	ck_assert_int_eq(s.opcode, TCPW_OP_READ_REQ);
	ck_assert_uint_eq(s.u.rreq.size, 100);
	s = (struct tcpw_seg){ .opcode = TCPW_OP_READ_RESP, .last = true,
			       .stag = s.u.rreq.sink_stag, .to = s.u.rreq.sink_to };
	tt_raw_send(&r, &s, data, sizeof(data), false);
	tt_expect_term(&r, &e, TCPW_LAYER_DDP, TCP_TERM_DDP_TAGGED);
	tu_poll1(e.cq, &wc);
	ck_assert_int_eq(wc.wr_id, 1);
	ck_assert_int_eq(wc.status, FERRY_WC_BAD_RESP_ERR);
	ck_assert(tu_all_bytes(e.buf, e.len, TT_GUARD));
	tt_raw_close(&r);
	tt_end_close(&e);
}
END_TEST

/* Half an FPDU, then nothing: the stall timer ends the stream. */
START_TEST(test_tcp_hostile_stall_mid_fpdu)
{
	struct tt_opts o = { .rnr_retry = 7 };
	uint8_t half[10] = { 0x00, 0x40, 0x41, 0x43 };
	struct tt_raw r;
	struct tt_end e;
	struct ferry_wc wc;

	setenv("FERRY_TCP_STALL_MS", "200", 1);
	tt_raw_pair(&e, &r, &o, true);
	ck_assert_int_eq(tu_post_recv1(e.qp, 1, e.buf, 64, e.mr->lkey), 0);
	ck_assert_int_eq(send(r.fd, half, sizeof(half), 0), (ssize_t)sizeof(half));
	tt_expect_term(&r, &e, TCPW_LAYER_LLP, -1);
	tu_poll1(e.cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_WR_FLUSH_ERR);
	ck_assert(tu_all_bytes(e.buf, e.len, 0));
	tt_raw_close(&r);
	tt_end_close(&e);
	unsetenv("FERRY_TCP_STALL_MS");
}
END_TEST

/* A peer that did not announce RFC 7306 (siw) sending an atomic anyway. */
START_TEST(test_tcp_hostile_unannounced_atomic)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct tcpw_seg s = { .opcode = TCPW_OP_ATOMIC_REQ, .last = true };
	struct tt_raw r;
	struct tt_end e;

	tt_raw_pair(&e, &r, &o, false);
	s.u.areq = (struct tcpw_atomic_req){ .op = TCPW_ATOMIC_FETCH_ADD, .req_id = 1,
					     .stag = e.mr->rkey, .to = (uintptr_t)e.buf,
					     .swap_add = 1, .swap_add_mask = ~0ull };
	tt_raw_send(&r, &s, NULL, 0, false);
	tt_expect_term(&r, &e, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_OP);
	ck_assert(tu_all_bytes(e.buf, e.len, 0));
	tt_raw_close(&r);
	tt_end_close(&e);
}
END_TEST

/* A READ Response for a READ never asked. */
START_TEST(test_tcp_hostile_unasked_response)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct tcpw_seg s = { .opcode = TCPW_OP_READ_RESP, .last = true, .stag = 1 };
	struct tt_raw r;
	struct tt_end e;

	tt_raw_pair(&e, &r, &o, true);
	tt_raw_send(&r, &s, "x", 1, false);
	tt_expect_term(&r, &e, TCPW_LAYER_DDP, TCP_TERM_DDP_TAGGED);
	ck_assert(tu_all_bytes(e.buf, e.len, 0));
	tt_raw_close(&r);
	tt_end_close(&e);
}
END_TEST

/* Atomics from a raw peer: applied and answered; misaligned or into
 * another PD's region, refused with nothing changed. */
START_TEST(test_tcp_hostile_atomics)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct tcpw_seg s = { .opcode = TCPW_OP_ATOMIC_REQ, .last = true };
	struct ferry_pd *other;
	struct ferry_mr *elsewhere;
	uint64_t *word;
	struct tt_raw r;
	struct tt_end e;

	tt_raw_pair(&e, &r, &o, true);
	word = (uint64_t *)(e.buf + 64);
	*word = 40;
	s.u.areq = (struct tcpw_atomic_req){ .op = TCPW_ATOMIC_FETCH_ADD, .req_id = 7,
					     .stag = e.mr->rkey, .to = (uintptr_t)word,
					     .swap_add = 2, .swap_add_mask = ~0ull };
	tt_raw_send(&r, &s, NULL, 0, false);
	ck_assert_int_eq(tt_raw_recv(&r, &s), 1);
	ck_assert_int_eq(s.opcode, TCPW_OP_ATOMIC_RESP);
	ck_assert_uint_eq(s.u.aresp.req_id, 7);
	ck_assert_uint_eq(s.u.aresp.orig, 40);
	ck_assert_uint_eq(*word, 42);

	other = ferry_alloc_pd(e.ctx);
	ck_assert(other);
	elsewhere = ferry_reg_mr(other, e.buf + 4096, 4096, TU_ACCESS_ALL);
	ck_assert(elsewhere);
	s = (struct tcpw_seg){ .opcode = TCPW_OP_ATOMIC_REQ, .last = true };
	s.u.areq = (struct tcpw_atomic_req){ .op = TCPW_ATOMIC_FETCH_ADD, .req_id = 8,
					     .stag = elsewhere->rkey,
					     .to = (uintptr_t)e.buf + 4096, .swap_add = 1,
					     .swap_add_mask = ~0ull };
	tt_raw_send(&r, &s, NULL, 0, false);
	tt_expect_term(&r, &e, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_PROT);
	ck_assert(tu_all_bytes(e.buf + 4096, 4096, 0));
	ck_assert_int_eq(ferry_dereg_mr(elsewhere), 0);
	ck_assert_int_eq(ferry_dealloc_pd(other), 0);
	tt_raw_close(&r);
	tt_end_close(&e);
}
END_TEST

START_TEST(test_tcp_hostile_misaligned_atomic)
{
	struct tt_opts o = { .rnr_retry = 7 };
	struct tcpw_seg s = { .opcode = TCPW_OP_ATOMIC_REQ, .last = true };
	struct tt_raw r;
	struct tt_end e;

	tt_raw_pair(&e, &r, &o, true);
	s.u.areq = (struct tcpw_atomic_req){ .op = TCPW_ATOMIC_CMP_SWAP, .req_id = 1,
					     .stag = e.mr->rkey, .to = (uintptr_t)e.buf + 3,
					     .swap_add = ~0ull, .swap_add_mask = ~0ull,
					     .compare_mask = ~0ull };
	tt_raw_send(&r, &s, NULL, 0, false);
	tt_expect_term(&r, &e, TCPW_LAYER_RDMAP, TCP_TERM_RDMAP_PROT);
	ck_assert(tu_all_bytes(e.buf, e.len, 0));
	tt_raw_close(&r);
	tt_end_close(&e);
}
END_TEST

/* ferry confirms a signaled SEND with a zero-length READ towards ferry
 * only: siw may answer one with its previous WQE's bytes (tcp_tx.c), so
 * towards a stranger the SENDs complete as written, with nothing between. */
static void tt_signaled_sends(bool ferry_pd)
{
	struct tt_opts o = { .rnr_retry = 7 };
	int i, n = ferry_pd ? 1 : 2;	/* ferry: one, whose fence must come */
	struct tcpw_seg s;
	struct ferry_wc wc;
	struct tt_raw r;
	struct tt_end e;

	tt_raw_pair(&e, &r, &o, ferry_pd);
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(tu_post_send1(e.qp, (uint64_t)i, FERRY_WR_SEND,
					       FERRY_SEND_SIGNALED, e.buf, 8, e.mr->lkey, 0, 0), 0);
		if (ferry_pd)
			continue;
		tu_poll1(e.cq, &wc);	/* the raw peer has answered nothing */
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
		ck_assert_uint_eq(wc.wr_id, (uint64_t)i);
	}
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(tt_raw_recv(&r, &s), 1);
		ck_assert_int_eq(s.opcode, TCPW_OP_SEND);
	}
	if (ferry_pd) {
		ck_assert_int_eq(tt_raw_recv(&r, &s), 1);
		ck_assert_int_eq(s.opcode, TCPW_OP_READ_REQ);
		ck_assert_uint_eq(s.u.rreq.size, 0);
		tu_assert_cq_empty(e.cq);	/* until the Response comes */
	}
	tt_raw_close(&r);
	tt_end_close(&e);
}

START_TEST(test_tcp_no_zero_read_to_stranger)
{
	tt_signaled_sends(false);
}
END_TEST

START_TEST(test_tcp_zero_read_to_ferry)
{
	tt_signaled_sends(true);
}
END_TEST

/* ferry_tcp_mpa_read until the frame is in (a loopback peer: at once). */
static int tt_mpa_read_all(struct ferry_tcp_mpa *m, int fd)
{
	int rc, i;

	for (i = 0; i < 1000; i++) {
		rc = ferry_tcp_mpa_read(m, fd);
		if (rc != 0)
			return rc;
		usleep(1000);
	}
	return 0;
}

/* Read one raw MPA frame of @kind from @fd into @buf, decoded in @f_p. */
static void tt_mpa_raw_read(int fd, enum tcpw_mpa_kind kind, uint8_t *buf,
			    struct tcpw_mpa_frame *f_p)
{
	size_t len;

	ck_assert_int_eq(recv(fd, buf, TCPW_MPA_HDR_LEN, MSG_WAITALL), TCPW_MPA_HDR_LEN);
	ck_assert_int_eq(tcpw_mpa_frame_len(buf, kind, &len), 0);
	ck_assert_int_eq(recv(fd, buf + TCPW_MPA_HDR_LEN, len - TCPW_MPA_HDR_LEN, MSG_WAITALL),
			 (ssize_t)(len - TCPW_MPA_HDR_LEN));
	ck_assert_int_eq(tcpw_mpa_decode(buf, len, kind, f_p), 0);
}

/*
 * rdma_cm on iWARP gives a siw peer's ULP the MPA private data as it is:
 * the CM's data must come first, ferry's 8 bytes after them (rsocket, for
 * one, reads its header at offset 0).  And a siw Request's private data,
 * 8 bytes or more of the ULP's own, reaches the CM whole.
 */
START_TEST(test_tcp_mpa_ulp_data_first)
{
	static const char ulp[] = "rsocket-style header";
	uint8_t buf[TCPW_MPA_HDR_LEN + TCPW_MPA_PD_MAX], out[TCPW_MPA_HDR_LEN + TCPW_MPA_PD_MAX];
	struct tcpw_mpa_frame req, rep;
	struct tcpw_mpa_params params;
	struct tcpw_mpa_local local;
	struct ferry_tcp_mpa *m;
	const uint8_t *pd;
	size_t len;
	int a, b;

	tt_tcp_pair(&a, &b, 0);
	m = ferry_tcp_mpa_new(true, 3);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(ferry_tcp_mpa_send_request(m, a, ulp, sizeof(ulp)), 0);
	tt_mpa_raw_read(b, TCPW_MPA_REQ, buf, &req);
	ck_assert_uint_eq(req.pd_len, sizeof(ulp) + TCP_PD_LEN);
	ck_assert_mem_eq(req.pd, ulp, sizeof(ulp));
	ck_assert_uint_eq(tcpw_get32(req.pd + req.pd_len - 4), TCP_PD_MAGIC);
	/* A stranger's Reply: 12 bytes of its ULP, none of ferry's. */
	ferry_tcp_mpa_local_default(&local);
	ck_assert_int_eq(tcpw_mpa_answer(&req, &local, (const uint8_t *)"siw's answer", 12,
					 &rep, &params), 0);
	ck_assert_int_eq(tcpw_mpa_encode(&rep, out, sizeof(out), &len), 0);
	ck_assert_int_eq(send(b, out, len, 0), (ssize_t)len);
	ck_assert_int_eq(tt_mpa_read_all(m, a), 1);
	pd = ferry_tcp_mpa_pdata(m, &len);
	ck_assert_uint_eq(len, 12);
	ck_assert_mem_eq(pd, "siw's answer", 12);
	ferry_tcp_mpa_free(m);
	close(a);
	close(b);
}
END_TEST

void tcp_hostile_tcases(Suite *s)
{
	TCase *tc = tcase_create("hostile");

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_tcp_read_response_not_behind_send);
	tcase_add_test(tc, test_tcp_hostile_bad_crc);
	tcase_add_test(tc, test_tcp_hostile_send_past_receive);
	tcase_add_test(tc, test_tcp_hostile_write_past_mr);
	tcase_add_test(tc, test_tcp_hostile_read_response_too_long);
	tcase_add_test(tc, test_tcp_hostile_stall_mid_fpdu);
	tcase_add_test(tc, test_tcp_hostile_unannounced_atomic);
	tcase_add_test(tc, test_tcp_hostile_unasked_response);
	tcase_add_test(tc, test_tcp_hostile_atomics);
	tcase_add_test(tc, test_tcp_hostile_misaligned_atomic);
	tcase_add_test(tc, test_tcp_no_zero_read_to_stranger);
	tcase_add_test(tc, test_tcp_zero_read_to_ferry);
	tcase_add_test(tc, test_tcp_mpa_ulp_data_first);
	suite_add_tcase(s, tc);
}
