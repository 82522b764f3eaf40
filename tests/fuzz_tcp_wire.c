/*
 * fuzz_tcp_wire.c - libFuzzer target over the tcp transport's wire codec
 * (prov/tcp/tcp_wire_*.c): the MPA frame parser and its negotiation, and
 * the FPDU receive parser with the DDP/RDMAP decoder and the reassembly
 * check behind it, as a receive path will chain them.  Built and run by
 * `make fuzz` beside the CM's and shm's targets; seeds from
 * tests/fuzz_tcp_wire_seeds.c.
 *
 * Input: one byte that picks the path, then bytes as a peer sends them.
 *   even: an MPA frame (bit 1: expect a Reply rather than a Request)
 *   odd:  the FPDU stream of full operation; bit 1: CRC on; the next byte
 *         sets the chunk sizes the stream is fed in (0: 1 byte at a time)
 * Properties, besides no crash and no out-of-bounds read (ASan, UBSan):
 * an accepted frame re-encodes to the same bytes but for reserved flag
 * bits; whatever Reply a Responder makes to an accepted Request, the
 * Initiator that sent it accepts or gets the reject it was sent; the
 * parser consumes every byte once, yields FPDUs whose CRC holds and whose
 * length is in bounds; an accepted segment re-encodes to its own header.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "tcp_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fz_assert(bool ok)
{
	if (!ok)
		abort();
}

/* The Responder's answer must satisfy the Initiator's check. */
static void fz_mpa_answer(const struct tcpw_mpa_frame *req, uint8_t salt)
{
	struct tcpw_mpa_local local = {
		.want_crc = salt & 1, .ird = salt, .ord = (uint16_t)(salt * 3),
		.rtr = (salt >> 2) & TCPW_RTR_ALL,
	};
	struct tcpw_mpa_frame rep, rep_in;
	struct tcpw_mpa_params rp, ip;
	uint8_t buf[TCPW_MPA_HDR_LEN + TCPW_MPA_V2_LEN];
	size_t len;
	int err = tcpw_mpa_answer(req, &local, NULL, 0, &rep, &rp);

	fz_assert(tcpw_mpa_encode(&rep, buf, sizeof(buf), &len) == 0);
	fz_assert(tcpw_mpa_decode(buf, len, TCPW_MPA_REP, &rep_in) == 0);
	if (err) {
		fz_assert(rep_in.reject && !rep_in.markers);
		fz_assert(tcpw_mpa_check_reply(req, &rep_in, &ip) == TCPW_ERR_MPA_REJECTED);
		return;
	}
	fz_assert(tcpw_mpa_check_reply(req, &rep_in, &ip) == 0);
	fz_assert(ip.crc == rp.crc && ip.rtr == rp.rtr);
	fz_assert(!rp.enhanced || (rp.ord <= req->ird && ip.ord <= rp.ird));
}

static void fz_mpa(const uint8_t *data, size_t size, enum tcpw_mpa_kind kind)
{
	static uint8_t again[TCPW_MPA_HDR_LEN + TCPW_MPA_PD_MAX];
	struct tcpw_mpa_frame f;
	size_t len;

	if (tcpw_mpa_decode(data, size, kind, &f) != 0)
		return;
	fz_assert(f.pd >= data && f.pd + f.pd_len == data + size);
	fz_assert(tcpw_mpa_encode(&f, again, sizeof(again), &len) == 0);
	fz_assert(len == size && memcmp(again, data, 16) == 0);
	fz_assert(memcmp(again + 17, data + 17, size - 17) == 0);
	/* Reserved flag bits are not kept; H is one of them in revision 1. */
	fz_assert((again[16] ^ data[16]) == ((data[16] & (f.rev == 1 ? 0x1f : 0x0f))));
	if (kind == TCPW_MPA_REQ)
		fz_mpa_answer(&f, size ? data[size - 1] : 0);
}

static void fz_segment(const struct tcpw_fpdu *fpdu, struct tcpw_reasm *reasm)
{
	uint8_t again[128];
	struct tcpw_seg s;
	uint32_t total;
	size_t len;
	int rc;

	if (tcpw_seg_decode(fpdu->ulpdu, fpdu->ulpdu_len, &s) != 0)
		return;
	fz_assert(s.payload + s.payload_len == fpdu->ulpdu + fpdu->ulpdu_len);
	fz_assert(tcpw_seg_encode(&s, again, sizeof(again), &len) == 0);
	fz_assert(s.payload == fpdu->ulpdu + len && memcmp(again, fpdu->ulpdu, len) == 0);
	/* One reassembly per tagged stream and per untagged queue. */
	rc = tcpw_reasm_check(&reasm[s.tagged ? 0 : 1 + s.qn], &s, &total);
	fz_assert(rc <= 1);
}

static void fz_stream(const uint8_t *data, size_t size, bool crc, uint8_t chunking)
{
	static uint8_t pbuf[TCPW_ULPDU_MAX + 8];
	struct tcpw_reasm reasm[5];
	struct tcpw_fpdu_parser p;
	struct tcpw_fpdu f;
	size_t at = 0, used;
	int rc = 0;

	for (int i = 0; i < 5; i++)
		tcpw_reasm_init(&reasm[i]);
	fz_assert(tcpw_fpdu_parser_init(&p, pbuf, sizeof(pbuf), 2048, crc) == 0);
	while (at < size && rc >= 0) {
		size_t n = chunking ? 1 + (data[at] % chunking) : 1;

		n = n > size - at ? size - at : n;
		rc = tcpw_fpdu_parser_feed(&p, data + at, n, &used, &f);
		if (rc < 0)
			break;
		fz_assert(used <= n && (rc == 1 || used == n));
		at += used;
		if (rc == 1) {
			fz_assert(f.ulpdu_len >= TCPW_DDP_TAGGED_HDR && f.ulpdu_len <= 2048);
			fz_assert(!crc || tcpw_crc32c(0, f.ulpdu - 2,
						      tcpw_fpdu_len(f.ulpdu_len)) ==
						  0x48674bc7);	/* CRC residue */
			fz_segment(&f, reasm);
		}
	}
	/* A failed parser stays failed. */
	if (rc < 0)
		fz_assert(tcpw_fpdu_parser_feed(&p, data, size, &used, &f) == rc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	if (data[0] & 1)
		fz_stream(data + 2, size - 2, data[0] & 2, data[1]);
	else
		fz_mpa(data + 1, size - 1, data[0] & 2 ? TCPW_MPA_REP : TCPW_MPA_REQ);
	return 0;
}
