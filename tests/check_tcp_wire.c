/*
 * check_tcp_wire.c - the tcp transport's wire codec (prov/tcp/tcp_wire*.c)
 * against bytes worked out by hand and from the RFCs: CRC32c vectors (RFC
 * 3720 B.4), siw's MPA Request, a Send and a Write RTR FPDU; then round
 * trips, every rejection each decoder has and the receive parser fed one
 * byte at a time.  DDP and RDMAP: check_tcp_wire_ddp.c.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "tcp_wire.h"

/* ---- CRC32c ----------------------------------------------------------- */

/* Bit at a time, straight from the definition: the reference the two
 * fast ones are held to. */
static uint32_t crc_bitwise(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffff;

	while (n--) {
		c ^= *p++;
		for (int i = 0; i < 8; i++)
			c = (c & 1) ? (c >> 1) ^ 0x82F63B78 : c >> 1;
	}
	return ~c;
}

typedef uint32_t crc_fn(uint32_t, const void *, size_t);

static void crc_check_vectors(crc_fn *fn)
{
	/* RFC 3720 B.4's iSCSI Read (10) command PDU. */
	static const uint8_t scsi_read[48] = {
		0x01, 0xc0, [16] = 0x14, [22] = 0x04, [27] = 0x14, [31] = 0x18,
		[32] = 0x28, [40] = 0x02,
	};
	uint8_t buf[32];

	ck_assert_uint_eq(fn(0, "123456789", 9), 0xE3069283);
	memset(buf, 0, sizeof(buf));
	ck_assert_uint_eq(fn(0, buf, 32), 0x8A9136AA);
	memset(buf, 0xff, sizeof(buf));
	ck_assert_uint_eq(fn(0, buf, 32), 0x62A8AB43);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)i;
	ck_assert_uint_eq(fn(0, buf, 32), 0x46DD794E);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)(31 - i);
	ck_assert_uint_eq(fn(0, buf, 32), 0x113FDB5C);
	ck_assert_uint_eq(fn(0, scsi_read, 48), 0xD9963A56);
	ck_assert_uint_eq(fn(0, buf, 0), 0);
}

START_TEST(test_crc_vectors)
{
	crc_check_vectors(tcpw_crc32c_sw);
	crc_check_vectors(tcpw_crc32c);
	if (tcpw_crc32c_hw_available())
		crc_check_vectors(tcpw_crc32c_hw);
}
END_TEST

/* Every alignment and length up to past two 8-byte blocks, chained at
 * every split point: the three agree with the definition. */
START_TEST(test_crc_alignment_and_chaining)
{
	uint8_t buf[64];

	srand(7);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rand();
	for (size_t off = 0; off < 8; off++) {
		for (size_t n = 0; n + off <= 40; n++) {
			uint32_t want = crc_bitwise(buf + off, n);

			ck_assert_uint_eq(tcpw_crc32c_sw(0, buf + off, n), want);
			ck_assert_uint_eq(tcpw_crc32c(0, buf + off, n), want);
			if (tcpw_crc32c_hw_available())
				ck_assert_uint_eq(tcpw_crc32c_hw(0, buf + off, n), want);
			for (size_t cut = 0; cut <= n; cut++)
				ck_assert_uint_eq(tcpw_crc32c(tcpw_crc32c_sw(0, buf + off, cut),
							      buf + off + cut, n - cut),
						  want);
		}
	}
}
END_TEST

/* Long buffers take the hardware path's three interleaved streams (384
 * bytes and more, 3072 and more) and the combining of their states: every
 * length around those edges, at odd offsets, and chained across a cut
 * inside a stream, must equal the slice-by-8 software CRC. */
START_TEST(test_crc_streams_vs_software)
{
	static uint8_t buf[3 * 3072 + 64];
	static const size_t lens[] = { 383, 384, 385, 391, 392, 767, 768, 1000,
		3071, 3072, 3073, 3079, 3456, 6143, 6144, 6151, 9216, 9217 };

	srand(11);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rand();
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		for (size_t off = 0; off < 8; off += 3) {
			size_t n = lens[l];
			uint32_t want = tcpw_crc32c_sw(0, buf + off, n);

			ck_assert_uint_eq(tcpw_crc32c(0, buf + off, n), want);
			if (tcpw_crc32c_hw_available())
				ck_assert_uint_eq(tcpw_crc32c_hw(0, buf + off, n), want);
			for (size_t cut = 1; cut < n; cut += 511)
				ck_assert_uint_eq(tcpw_crc32c(tcpw_crc32c(0, buf + off, cut),
							      buf + off + cut, n - cut),
						  want);
		}
	}
	/* random lengths and contents, and a seed CRC that is not zero */
	for (int r = 0; r < 200; r++) {
		size_t n = (size_t)rand() % (sizeof(buf) - 8), off = (size_t)rand() % 8;
		uint32_t seed = (uint32_t)rand();

		for (size_t i = 0; i < n; i++)
			buf[off + i] = (uint8_t)rand();
		ck_assert_uint_eq(tcpw_crc32c(seed, buf + off, n),
				  tcpw_crc32c_sw(seed, buf + off, n));
	}
}
END_TEST

/* ---- MPA -------------------------------------------------------------- */

static const uint8_t key_req[] = "MPA ID Req Frame";
static const uint8_t key_rep[] = "MPA ID Rep Frame";

static size_t mpa_encode_ok(const struct tcpw_mpa_frame *f, uint8_t *buf, size_t cap)
{
	size_t len = 0;

	ck_assert_int_eq(tcpw_mpa_encode(f, buf, cap, &len), 0);
	return len;
}

/* siw's Request as it connects: rev 2, enhanced, no CRC, IRD/ORD from
 * rdma_connect's responder_resources/initiator_depth, no ULP data. */
START_TEST(test_mpa_request_bytes)
{
	struct tcpw_mpa_local local = { .ird = 16, .ord = 4 };
	struct tcpw_mpa_frame req;
	uint8_t buf[64];
	size_t len;

	tcpw_mpa_request(&local, NULL, 0, &req);
	len = mpa_encode_ok(&req, buf, sizeof(buf));
	ck_assert_uint_eq(len, 24);
	ck_assert_mem_eq(buf, key_req, 16);
	ck_assert_mem_eq(buf + 16, "\x10\x02\x00\x04\x00\x10\x00\x04", 8);
	local.want_crc = true;
	local.p2p = true;
	local.rtr = TCPW_RTR_WRITE | TCPW_RTR_READ | TCPW_RTR_SEND;
	tcpw_mpa_request(&local, (const uint8_t *)"hi", 2, &req);
	len = mpa_encode_ok(&req, buf, sizeof(buf));
	ck_assert_uint_eq(len, 26);
	/* P2P and Send-RTR ride in the IRD word, Write/Read-RTR in ORD. */
	ck_assert_mem_eq(buf + 16, "\x50\x02\x00\x06\xc0\x10\xc0\x04hi", 10);
}
END_TEST

START_TEST(test_mpa_round_trip)
{
	const uint8_t pd[5] = "abcde";
	struct tcpw_mpa_frame f = {
		.kind = TCPW_MPA_REP, .rev = 2, .crc = true, .enhanced = true,
		.ird = 0x3fff, .ord = 7, .p2p = true, .rtr = TCPW_RTR_READ,
		.pd = pd, .pd_len = 5,
	}, g;
	uint8_t buf[64];
	size_t len = mpa_encode_ok(&f, buf, sizeof(buf)), flen;

	ck_assert_mem_eq(buf, key_rep, 16);
	ck_assert_int_eq(tcpw_mpa_frame_len(buf, TCPW_MPA_REP, &flen), 0);
	ck_assert_uint_eq(flen, len);
	ck_assert_int_eq(tcpw_mpa_decode(buf, len, TCPW_MPA_REP, &g), 0);
	ck_assert(g.kind == TCPW_MPA_REP && g.rev == 2 && g.crc && !g.markers && !g.reject);
	ck_assert(g.enhanced && g.p2p && g.rtr == TCPW_RTR_READ);
	ck_assert_uint_eq(g.ird, 0x3fff);
	ck_assert_uint_eq(g.ord, 7);
	ck_assert_uint_eq(g.pd_len, 5);
	ck_assert_mem_eq(g.pd, pd, 5);
	/* Revision 1: no block, the private data is the ULP's whole. */
	f = (struct tcpw_mpa_frame){ .kind = TCPW_MPA_REQ, .rev = 1, .markers = true,
				     .pd = pd, .pd_len = 5 };
	len = mpa_encode_ok(&f, buf, sizeof(buf));
	ck_assert_uint_eq(len, 25);
	ck_assert_int_eq(tcpw_mpa_decode(buf, len, TCPW_MPA_REQ, &g), 0);
	ck_assert(g.markers && !g.enhanced && g.rev == 1 && g.pd_len == 5);
}
END_TEST

/* Reserved bits are ignored on receipt (RFC 5044); in revision 1 the H
 * bit is one of them, so 4 bytes that look like a block stay ULP data. */
START_TEST(test_mpa_reserved_bits_ignored)
{
	struct tcpw_mpa_frame f = { .kind = TCPW_MPA_REQ, .rev = 2, .enhanced = true,
				    .ird = 1, .ord = 1 }, g;
	uint8_t buf[64];
	size_t len = mpa_encode_ok(&f, buf, sizeof(buf));

	buf[16] |= 0x0f;
	ck_assert_int_eq(tcpw_mpa_decode(buf, len, TCPW_MPA_REQ, &g), 0);
	ck_assert(g.enhanced && g.ird == 1 && g.ord == 1 && g.pd_len == 0);
	buf[17] = 1;
	ck_assert_int_eq(tcpw_mpa_decode(buf, len, TCPW_MPA_REQ, &g), 0);
	ck_assert(!g.enhanced && g.pd_len == 4);
}
END_TEST

START_TEST(test_mpa_rejections)
{
	static const uint8_t pd[TCPW_MPA_PD_MAX];
	struct tcpw_mpa_frame f = { .kind = TCPW_MPA_REQ, .rev = 2, .enhanced = true,
				    .pd = pd, .pd_len = 10 }, g;
	uint8_t buf[TCPW_MPA_HDR_LEN + TCPW_MPA_PD_MAX + 8];
	size_t len = mpa_encode_ok(&f, buf, sizeof(buf)), flen;

	for (size_t n = 0; n < len; n++)
		ck_assert_int_eq(tcpw_mpa_decode(buf, n, TCPW_MPA_REQ, &g), TCPW_ERR_MPA_SHORT);
	ck_assert_int_eq(tcpw_mpa_decode(buf, len + 1, TCPW_MPA_REQ, &g),
			 TCPW_ERR_MPA_TRAILING);
	ck_assert_int_eq(tcpw_mpa_decode(buf, len, TCPW_MPA_REP, &g), TCPW_ERR_MPA_KIND);
	for (int i = 0; i < 16; i++) {
		buf[i] ^= 0x20;
		ck_assert_int_eq(tcpw_mpa_decode(buf, len, TCPW_MPA_REQ, &g), TCPW_ERR_MPA_KEY);
		buf[i] ^= 0x20;
	}
	for (int rev = 0; rev < 256; rev++) {
		buf[17] = (uint8_t)rev;
		ck_assert_int_eq(tcpw_mpa_frame_len(buf, TCPW_MPA_REQ, &flen),
				 rev == 1 || rev == 2 ? 0 : TCPW_ERR_MPA_REV);
	}
	buf[17] = 2;
	buf[16] |= TCPW_MPA_FLAG_R;
	ck_assert_int_eq(tcpw_mpa_decode(buf, len, TCPW_MPA_REQ, &g), TCPW_ERR_MPA_REJECT_BIT);
	buf[16] &= ~TCPW_MPA_FLAG_R;
	/* The length field alone decides, before more is read. */
	tcpw_put16(buf + 18, TCPW_MPA_PD_MAX + 1);
	ck_assert_int_eq(tcpw_mpa_frame_len(buf, TCPW_MPA_REQ, &flen), TCPW_ERR_MPA_PD_LEN);
	tcpw_put16(buf + 18, 0xffff);
	ck_assert_int_eq(tcpw_mpa_decode(buf, sizeof(buf), TCPW_MPA_REQ, &g),
			 TCPW_ERR_MPA_PD_LEN);
	for (uint16_t pd_len = 0; pd_len < 4; pd_len++) {
		tcpw_put16(buf + 18, pd_len);
		ck_assert_int_eq(tcpw_mpa_decode(buf, 20 + pd_len, TCPW_MPA_REQ, &g),
				 TCPW_ERR_MPA_V2_SHORT);
	}
}
END_TEST

START_TEST(test_mpa_encode_limits)
{
	static const uint8_t pd[TCPW_MPA_PD_MAX];
	struct tcpw_mpa_frame f = { .kind = TCPW_MPA_REQ, .rev = 2, .enhanced = true, .pd = pd };
	uint8_t buf[TCPW_MPA_HDR_LEN + TCPW_MPA_PD_MAX];
	size_t len;

	/* The block counts against the 512 bytes. */
	f.pd_len = TCPW_MPA_PD_MAX - TCPW_MPA_V2_LEN;
	ck_assert_uint_eq(mpa_encode_ok(&f, buf, sizeof(buf)), sizeof(buf));
	f.pd_len++;
	ck_assert_int_eq(tcpw_mpa_encode(&f, buf, sizeof(buf), &len), TCPW_ERR_MPA_PD_LEN);
	f.pd_len = 0;
	ck_assert_int_eq(tcpw_mpa_encode(&f, buf, 23, &len), TCPW_ERR_NOSPACE);
	f.ird = 0x4000;
	ck_assert_int_eq(tcpw_mpa_encode(&f, buf, sizeof(buf), &len), TCPW_ERR_INVAL);
	f.ird = 0;
	f.rev = 1;
	ck_assert_int_eq(tcpw_mpa_encode(&f, buf, sizeof(buf), &len), TCPW_ERR_INVAL);
	f.rev = 3;
	f.enhanced = false;
	ck_assert_int_eq(tcpw_mpa_encode(&f, buf, sizeof(buf), &len), TCPW_ERR_INVAL);
	f.rev = 2;
	f.reject = true;
	ck_assert_int_eq(tcpw_mpa_encode(&f, buf, sizeof(buf), &len), TCPW_ERR_INVAL);
}
END_TEST

/* Request -> bytes -> Reply -> bytes -> the Initiator's check. */
static int mpa_exchange(const struct tcpw_mpa_local *ini, const struct tcpw_mpa_local *resp,
			struct tcpw_mpa_params *ini_p, struct tcpw_mpa_params *resp_p,
			struct tcpw_mpa_frame *rep_p)
{
	struct tcpw_mpa_frame req, req_in, rep;
	uint8_t buf[64];
	size_t len;
	int err;

	tcpw_mpa_request(ini, NULL, 0, &req);
	len = mpa_encode_ok(&req, buf, sizeof(buf));
	ck_assert_int_eq(tcpw_mpa_decode(buf, len, TCPW_MPA_REQ, &req_in), 0);
	err = tcpw_mpa_answer(&req_in, resp, NULL, 0, &rep, resp_p);
	len = mpa_encode_ok(&rep, buf, sizeof(buf));
	ck_assert_int_eq(tcpw_mpa_decode(buf, len, TCPW_MPA_REP, rep_p), 0);
	if (err)
		return err;
	return tcpw_mpa_check_reply(&req, rep_p, ini_p);
}

START_TEST(test_mpa_negotiate_crc_and_counts)
{
	struct tcpw_mpa_params ip, rp;
	struct tcpw_mpa_frame rep;

	for (int mask = 0; mask < 4; mask++) {
		struct tcpw_mpa_local ini = { .want_crc = mask & 1, .ird = 8, .ord = 3 };
		struct tcpw_mpa_local resp = { .want_crc = mask & 2, .ird = 2, .ord = 128 };

		ck_assert_int_eq(mpa_exchange(&ini, &resp, &ip, &rp, &rep), 0);
		/* CRC in both directions if either side asked. */
		ck_assert(ip.crc == (mask != 0) && rp.crc == (mask != 0));
		ck_assert(ip.enhanced && rp.enhanced && !ip.rtr && !rp.rtr);
		/* The Responder issues no more Reads than we take (8); we no
		 * more than it serves (2). */
		ck_assert_uint_eq(rp.ord, 8);
		ck_assert_uint_eq(rp.ird, 2);
		ck_assert_uint_eq(ip.ird, 8);
		ck_assert_uint_eq(ip.ord, 2);
	}
}
END_TEST

START_TEST(test_mpa_negotiate_rtr)
{
	struct tcpw_mpa_local ini = { .ird = 1, .ord = 1, .p2p = true, .rtr = TCPW_RTR_ALL };
	struct tcpw_mpa_local resp = { .ird = 1, .ord = 1, .rtr = TCPW_RTR_ALL };
	struct tcpw_mpa_params ip, rp;
	struct tcpw_mpa_frame rep;

	ck_assert_int_eq(mpa_exchange(&ini, &resp, &ip, &rp, &rep), 0);
	ck_assert(rep.p2p && rep.rtr == TCPW_RTR_WRITE && ip.rtr == TCPW_RTR_WRITE);
	ini.rtr = TCPW_RTR_READ | TCPW_RTR_SEND;
	ck_assert_int_eq(mpa_exchange(&ini, &resp, &ip, &rp, &rep), 0);
	ck_assert(ip.rtr == TCPW_RTR_READ && rp.rtr == TCPW_RTR_READ);
	/* A Read RTR needs a Read credit: without one, Send is next. */
	ini.ord = 0;
	ck_assert_int_eq(mpa_exchange(&ini, &resp, &ip, &rp, &rep), 0);
	ck_assert(ip.rtr == TCPW_RTR_SEND);
	ini.rtr = TCPW_RTR_READ;
	ck_assert_int_eq(mpa_exchange(&ini, &resp, &ip, &rp, &rep), TCPW_ERR_MPA_NO_RTR);
	ck_assert(rep.reject && !rep.p2p);
	ini.ord = 1;
	ini.rtr = TCPW_RTR_SEND;
	resp.rtr = TCPW_RTR_WRITE | TCPW_RTR_READ;
	ck_assert_int_eq(mpa_exchange(&ini, &resp, &ip, &rp, &rep), TCPW_ERR_MPA_NO_RTR);
	ck_assert(rep.reject);
}
END_TEST

/* A Request with M set gets a Reply with R set and M cleared, as siw
 * answers it. */
START_TEST(test_mpa_markers_declined)
{
	struct tcpw_mpa_frame req = { .kind = TCPW_MPA_REQ, .rev = 1, .markers = true }, rep;
	struct tcpw_mpa_local resp = { .ird = 1, .ord = 1 };
	struct tcpw_mpa_params rp;
	uint8_t buf[64];
	size_t len;

	ck_assert_int_eq(tcpw_mpa_answer(&req, &resp, NULL, 0, &rep, &rp), TCPW_ERR_MPA_MARKERS);
	len = mpa_encode_ok(&rep, buf, sizeof(buf));
	ck_assert_uint_eq(len, 20);
	ck_assert_mem_eq(buf, key_rep, 16);
	ck_assert_mem_eq(buf + 16, "\x20\x01\x00\x00", 4);
	ck_assert_int_eq(tcpw_mpa_check_reply(&req, &rep, &rp), TCPW_ERR_MPA_REJECTED);
	/* And an Initiator refuses a Reply that wants markers. */
	rep = (struct tcpw_mpa_frame){ .kind = TCPW_MPA_REP, .rev = 1, .markers = true };
	ck_assert_int_eq(tcpw_mpa_check_reply(&req, &rep, &rp), TCPW_ERR_MPA_MARKERS);
}
END_TEST

START_TEST(test_mpa_reply_checks)
{
	struct tcpw_mpa_local ini = { .ird = 4, .ord = 4 };
	struct tcpw_mpa_frame req, rep;
	struct tcpw_mpa_params ip;
	uint8_t buf[64];
	size_t len;

	tcpw_mpa_request(&ini, NULL, 0, &req);
	rep = (struct tcpw_mpa_frame){ .kind = TCPW_MPA_REP, .rev = 2, .enhanced = true,
				       .ird = 4, .ord = 5 };
	ck_assert_int_eq(tcpw_mpa_check_reply(&req, &rep, &ip), TCPW_ERR_MPA_IRD);
	rep.ord = 4;
	rep.p2p = true;
	rep.rtr = TCPW_RTR_WRITE;
	ck_assert_int_eq(tcpw_mpa_check_reply(&req, &rep, &ip), TCPW_ERR_MPA_REPLY);
	rep.p2p = false;
	rep.rtr = 0;
	rep.rev = 3;
	ck_assert_int_eq(tcpw_mpa_check_reply(&req, &rep, &ip), TCPW_ERR_MPA_REPLY);
	/* A revision 1 Responder: accepted, nothing negotiated. */
	rep = (struct tcpw_mpa_frame){ .kind = TCPW_MPA_REP, .rev = 1, .crc = true };
	ck_assert_int_eq(tcpw_mpa_check_reply(&req, &rep, &ip), 0);
	ck_assert(ip.crc && !ip.enhanced && ip.ord == 4 && ip.ird == 4);
	/* ... unless we need an RTR. */
	ini.p2p = true;
	ini.rtr = TCPW_RTR_WRITE | TCPW_RTR_READ;
	tcpw_mpa_request(&ini, NULL, 0, &req);
	ck_assert_int_eq(tcpw_mpa_check_reply(&req, &rep, &ip), TCPW_ERR_MPA_NO_RTR);
	rep = (struct tcpw_mpa_frame){ .kind = TCPW_MPA_REP, .rev = 2, .enhanced = true,
				       .ird = 1, .ord = 1, .p2p = true };
	ck_assert_int_eq(tcpw_mpa_check_reply(&req, &rep, &ip), TCPW_ERR_MPA_NO_RTR);
	rep.rtr = TCPW_RTR_WRITE | TCPW_RTR_READ;	/* exactly one, please */
	ck_assert_int_eq(tcpw_mpa_check_reply(&req, &rep, &ip), TCPW_ERR_MPA_NO_RTR);
	rep.rtr = TCPW_RTR_SEND;			/* one we did not offer */
	ck_assert_int_eq(tcpw_mpa_check_reply(&req, &rep, &ip), TCPW_ERR_MPA_NO_RTR);
	rep.rtr = TCPW_RTR_READ;
	ck_assert_int_eq(tcpw_mpa_check_reply(&req, &rep, &ip), 0);
	ck_assert(ip.rtr == TCPW_RTR_READ && ip.ord == 1);
	/* The ULP's own reject carries its private data back. */
	tcpw_mpa_reject(&req, (const uint8_t *)"no", 2, &rep);
	len = mpa_encode_ok(&rep, buf, sizeof(buf));
	ck_assert_int_eq(tcpw_mpa_decode(buf, len, TCPW_MPA_REP, &rep), 0);
	ck_assert(rep.reject && rep.pd_len == 2 && memcmp(rep.pd, "no", 2) == 0);
	ck_assert_int_eq(tcpw_mpa_check_reply(&req, &rep, &ip), TCPW_ERR_MPA_REJECTED);
}
END_TEST

/* ---- FPDU ------------------------------------------------------------- */

START_TEST(test_fpdu_sizes)
{
	static const size_t pads[8] = { 2, 1, 0, 3, 2, 1, 0, 3 };

	for (size_t n = 0; n < 8; n++) {
		ck_assert_uint_eq(tcpw_fpdu_pad(n), pads[n]);
		ck_assert_uint_eq(tcpw_fpdu_len(n) % 4, 0);
	}
	ck_assert_uint_eq(tcpw_fpdu_len(23), 32);
	ck_assert_uint_eq(tcpw_fpdu_len(14), 20);
	/* RFC 5044: EMSS - (6 + EMSS mod 4), less 4 per 512 with markers. */
	ck_assert_uint_eq(tcpw_mulpdu(1460, false), 1454);
	ck_assert_uint_eq(tcpw_mulpdu(1461, false), 1454);
	ck_assert_uint_eq(tcpw_mulpdu(1448, false), 1442);
	ck_assert_uint_eq(tcpw_mulpdu(1460, true), 1442);
	ck_assert_uint_eq(tcpw_mulpdu(536, true), 536 - 6 - 8);
	ck_assert_uint_eq(tcpw_mulpdu(6, false), 0);
	ck_assert_uint_eq(tcpw_mulpdu(1u << 20, false), TCPW_ULPDU_MAX);
	/* siw: the MSS rounded down to 8 is the whole FPDU. */
	ck_assert_uint_eq(tcpw_mulpdu_siw(1448), 1442);
	ck_assert_uint_eq(tcpw_mulpdu_siw(1460), 1450);
	ck_assert_uint_eq(tcpw_mulpdu_siw(65483), 65474);
	ck_assert_uint_eq(tcpw_mulpdu_siw(6), 0);
	for (uint32_t mss = 64; mss < 9000; mss++) {
		ck_assert_uint_le(tcpw_fpdu_len(tcpw_mulpdu(mss, false)), mss);
		ck_assert_uint_le(tcpw_fpdu_len(tcpw_mulpdu_siw(mss)), mss);
	}
}
END_TEST

/* The first Send of a connection, "hello", as siw sends it: 32 bytes. */
static const uint8_t send_hello[32] = {
	0x00, 0x17, 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0,
	'h', 'e', 'l', 'l', 'o', 0, 0, 0, 0xb9, 0x90, 0xb1, 0x0c,
};
/* A zero-length Write RTR (STag 1, TO 0). */
static const uint8_t write_rtr[20] = {
	0x00, 0x0e, 0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xeb, 0xd3, 0x4c, 0x5f,
};

static size_t fpdu_of(const struct tcpw_seg *s, const void *payload, size_t n, bool crc,
		      uint8_t *buf, size_t cap)
{
	uint8_t hdr[128];
	size_t hlen, len;

	ck_assert_int_eq(tcpw_seg_encode(s, hdr, sizeof(hdr), &hlen), 0);
	ck_assert_int_eq(tcpw_fpdu_build(hdr, hlen, payload, n, crc, buf, cap, &len), 0);
	return len;
}

START_TEST(test_fpdu_worked_examples)
{
	struct tcpw_seg send = { .opcode = TCPW_OP_SEND, .last = true, .msn = 1 };
	struct tcpw_seg rtr = { .opcode = TCPW_OP_WRITE, .last = true, .stag = 1 };
	uint8_t buf[64];

	ck_assert_uint_eq(fpdu_of(&send, "hello", 5, true, buf, sizeof(buf)), 32);
	ck_assert_mem_eq(buf, send_hello, 32);
	ck_assert_uint_eq(fpdu_of(&rtr, NULL, 0, true, buf, sizeof(buf)), 20);
	ck_assert_mem_eq(buf, write_rtr, 20);
	/* No CRC negotiated: the field is there, zero. */
	ck_assert_uint_eq(fpdu_of(&rtr, NULL, 0, false, buf, sizeof(buf)), 20);
	ck_assert_mem_eq(buf, write_rtr, 16);
	ck_assert_mem_eq(buf + 16, "\0\0\0\0", 4);
	ck_assert_int_eq(tcpw_fpdu_build(buf, 14, NULL, 0, true, buf + 32, 19, &(size_t){ 0 }),
			 TCPW_ERR_NOSPACE);
}
END_TEST

/* writev's three pieces make the same bytes as one buffer. */
START_TEST(test_fpdu_frame_iov)
{
	struct iovec iov[3] = {
		{ .iov_base = (void *)(send_hello + 2), .iov_len = 18 },
		{ .iov_base = "hel", .iov_len = 3 },
		{ .iov_base = "lo", .iov_len = 2 },
	};
	uint8_t head[2], trailer[7], big[3] = { 0 };
	size_t tlen;

	ck_assert_int_eq(tcpw_fpdu_frame(iov, 3, true, head, trailer, &tlen), 0);
	ck_assert_uint_eq(tlen, 7);
	ck_assert_mem_eq(head, send_hello, 2);
	ck_assert_mem_eq(trailer, send_hello + 25, 7);
	iov[0] = (struct iovec){ .iov_base = big, .iov_len = TCPW_ULPDU_MAX };
	iov[1] = (struct iovec){ .iov_base = big, .iov_len = 1 };
	ck_assert_int_eq(tcpw_fpdu_frame(iov, 2, true, head, trailer, &tlen), TCPW_ERR_INVAL);
}
END_TEST

/* A stream of several FPDUs of different shapes. */
static size_t stream_build(uint8_t *buf, size_t cap, size_t *ends, int *count)
{
	static uint8_t data[1000];
	struct tcpw_seg segs[4] = {
		{ .opcode = TCPW_OP_WRITE, .last = true, .stag = 1 },
		{ .opcode = TCPW_OP_SEND, .last = true, .msn = 1 },
		{ .opcode = TCPW_OP_WRITE, .last = true, .stag = 0x1234, .to = 0x1000 },
		{ .opcode = TCPW_OP_READ_REQ, .last = true, .msn = 1,
		  .u.rreq = { .sink_stag = 5, .sink_to = 6, .size = 7, .src_stag = 8,
			      .src_to = 9 } },
	};
	static const size_t lens[4] = { 0, 5, sizeof(data), 0 };
	size_t at = 0;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 7);
	for (int i = 0; i < 4; i++) {
		at += fpdu_of(&segs[i], i == 1 ? (const void *)"hello" : data, lens[i], true,
			      buf + at, cap - at);
		ends[i] = at;
	}
	*count = 4;
	return at;
}

/* Feed the stream in chunks of `chunk` bytes (0: random sizes); every
 * FPDU comes out whole, in order, when its last byte is in. */
static void parse_in_chunks(size_t chunk)
{
	static uint8_t stream[2048], pbuf[1100];
	struct tcpw_fpdu_parser p;
	struct tcpw_fpdu f;
	size_t ends[4], len, at = 0, begin = 0;
	int count, got = 0;

	len = stream_build(stream, sizeof(stream), ends, &count);
	ck_assert_int_eq(tcpw_fpdu_parser_init(&p, pbuf, sizeof(pbuf), 65535, true), 0);
	srand(11);
	while (at < len) {
		size_t n = chunk ? chunk : 1 + (size_t)rand() % 300, used;
		int rc;

		n = n > len - at ? len - at : n;
		rc = tcpw_fpdu_parser_feed(&p, stream + at, n, &used, &f);
		ck_assert_int_ge(rc, 0);
		at += used;
		if (rc == 0) {
			ck_assert_uint_eq(used, n);
			continue;
		}
		ck_assert_int_lt(got, count);
		ck_assert_uint_eq(at, ends[got]);
		ck_assert_uint_eq(f.ulpdu_len, tcpw_get16(stream + begin));
		ck_assert_mem_eq(f.ulpdu, stream + begin + 2, f.ulpdu_len);
		begin = ends[got++];
	}
	ck_assert_int_eq(got, count);
}

START_TEST(test_fpdu_parser_chunks)
{
	parse_in_chunks(1);
	parse_in_chunks(3);
	parse_in_chunks(0);
	parse_in_chunks(4096);
}
END_TEST

START_TEST(test_fpdu_parser_rejections)
{
	uint8_t pbuf[256], fpdu[32], stream[4];
	struct tcpw_fpdu_parser p;
	struct tcpw_fpdu f;
	size_t used;

	ck_assert_int_eq(tcpw_fpdu_parser_init(&p, pbuf, 19, 65535, true), TCPW_ERR_INVAL);
	/* Any flipped bit after the length field is a CRC error. */
	for (size_t i = 2; i < sizeof(send_hello); i++) {
		memcpy(fpdu, send_hello, sizeof(fpdu));
		fpdu[i] ^= 0x08;
		tcpw_fpdu_parser_init(&p, pbuf, sizeof(pbuf), 65535, true);
		ck_assert_int_eq(tcpw_fpdu_parser_feed(&p, fpdu, 32, &used, &f),
				 TCPW_ERR_FPDU_CRC);
		/* Sticky: the stream cannot be found again. */
		ck_assert_int_eq(tcpw_fpdu_parser_feed(&p, send_hello, 32, &used, &f),
				 TCPW_ERR_FPDU_CRC);
		/* Not checked when CRC was not negotiated. */
		tcpw_fpdu_parser_init(&p, pbuf, sizeof(pbuf), 65535, false);
		ck_assert_int_eq(tcpw_fpdu_parser_feed(&p, fpdu, 32, &used, &f), 1);
	}
	/* Lengths are refused as soon as the two bytes are in. */
	tcpw_put16(stream, 13);
	tcpw_fpdu_parser_init(&p, pbuf, sizeof(pbuf), 65535, true);
	ck_assert_int_eq(tcpw_fpdu_parser_feed(&p, stream, 1, &used, &f), 0);
	ck_assert_int_eq(tcpw_fpdu_parser_feed(&p, stream + 1, 1, &used, &f),
			 TCPW_ERR_FPDU_SHORT);
	tcpw_put16(stream, 101);
	tcpw_fpdu_parser_init(&p, pbuf, sizeof(pbuf), 100, true);
	ck_assert_int_eq(tcpw_fpdu_parser_feed(&p, stream, 2, &used, &f), TCPW_ERR_FPDU_LONG);
	/* The buffer's size limits too: 256 bytes hold a 250-byte ULPDU. */
	tcpw_fpdu_parser_init(&p, pbuf, sizeof(pbuf), 65535, true);
	ck_assert_uint_eq(p.max_ulpdu, 250);
	tcpw_put16(stream, 251);
	ck_assert_int_eq(tcpw_fpdu_parser_feed(&p, stream, 2, &used, &f), TCPW_ERR_FPDU_LONG);
}
END_TEST

Suite *tcp_wire_suite(void)
{
	Suite *s = suite_create("tcp_wire");
	TCase *crc = tcase_create("crc32c");
	TCase *mpa = tcase_create("mpa");
	TCase *fpdu = tcase_create("fpdu");

	tcase_add_test(crc, test_crc_vectors);
	tcase_add_test(crc, test_crc_alignment_and_chaining);
	tcase_add_test(crc, test_crc_streams_vs_software);
	suite_add_tcase(s, crc);
	tcase_add_test(mpa, test_mpa_request_bytes);
	tcase_add_test(mpa, test_mpa_round_trip);
	tcase_add_test(mpa, test_mpa_reserved_bits_ignored);
	tcase_add_test(mpa, test_mpa_rejections);
	tcase_add_test(mpa, test_mpa_encode_limits);
	tcase_add_test(mpa, test_mpa_negotiate_crc_and_counts);
	tcase_add_test(mpa, test_mpa_negotiate_rtr);
	tcase_add_test(mpa, test_mpa_markers_declined);
	tcase_add_test(mpa, test_mpa_reply_checks);
	suite_add_tcase(s, mpa);
	tcase_add_test(fpdu, test_fpdu_sizes);
	tcase_add_test(fpdu, test_fpdu_worked_examples);
	tcase_add_test(fpdu, test_fpdu_frame_iov);
	tcase_add_test(fpdu, test_fpdu_parser_chunks);
	tcase_add_test(fpdu, test_fpdu_parser_rejections);
	suite_add_tcase(s, fpdu);
	return s;
}
