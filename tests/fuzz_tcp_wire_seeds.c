/*
 * fuzz_tcp_wire_seeds.c - write the seed corpus of tests/fuzz_tcp_wire
 * into a directory: an MPA Request and Reply as siw and ferry send them,
 * and FPDU streams (with and without CRC) holding one segment of every
 * opcode, so that the fuzzer starts from inputs that pass the key, length
 * and CRC checks instead of having to find them.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>

#include "tcp_wire.h"

static int seed(const char *dir, const char *name, const uint8_t *head, size_t head_len,
		const uint8_t *body, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(head, 1, head_len, f) != head_len || fwrite(body, 1, len, f) != len) {
		perror(path);
		if (f)
			fclose(f);
		return 1;
	}
	return fclose(f) != 0;
}

static int seed_mpa(const char *dir)
{
	struct tcpw_mpa_local local = { .want_crc = true, .ird = 16, .ord = 16, .p2p = true,
					.rtr = TCPW_RTR_ALL };
	struct tcpw_mpa_frame req, rep;
	struct tcpw_mpa_params params;
	uint8_t buf[64], mode;
	size_t len;
	int bad = 0;

	tcpw_mpa_request(&local, (const uint8_t *)"ferry", 5, &req);
	tcpw_mpa_encode(&req, buf, sizeof(buf), &len);
	mode = 0;
	bad |= seed(dir, "mpa-request", &mode, 1, buf, len);
	tcpw_mpa_answer(&req, &local, NULL, 0, &rep, &params);
	tcpw_mpa_encode(&rep, buf, sizeof(buf), &len);
	mode = 2;
	bad |= seed(dir, "mpa-reply", &mode, 1, buf, len);
	return bad;
}

/* Sample segment of an opcode, and the payload it carries. */
static size_t sample(uint8_t op, struct tcpw_seg *s)
{
	*s = (struct tcpw_seg){ .opcode = op, .last = true, .msn = 1, .stag = 0x100 };
	if (op == TCPW_OP_TERMINATE)
		s->u.term = (struct tcpw_term){ .layer = TCPW_LAYER_DDP, .etype = 2, .ecode = 1,
						.m = true, .d = true, .ddp_seg_len = 24,
						.ddp_hdr = { 0x41, 0x43 } };
	if (op == TCPW_OP_IMM || op == TCPW_OP_IMM_SE)
		return TCPW_IMM_DATA_LEN;
	return op == TCPW_OP_READ_REQ || op == TCPW_OP_TERMINATE || op >= TCPW_OP_ATOMIC_REQ
		       ? 0 : 11;
}

static int seed_stream(const char *dir, bool crc)
{
	static const uint8_t payload[16] = "payload bytes..";
	static uint8_t stream[4096];
	size_t at = 0;

	for (uint8_t op = 0; op < TCPW_OP_COUNT_; op++) {
		struct tcpw_seg s;
		size_t n = sample(op, &s), hlen, len;
		uint8_t hdr[128];

		tcpw_seg_encode(&s, hdr, sizeof(hdr), &hlen);
		tcpw_fpdu_build(hdr, hlen, payload, n, crc, stream + at, sizeof(stream) - at, &len);
		at += len;
	}
	/* Modes: odd = stream; bit 1 = CRC; then the chunking byte. */
	return seed(dir, crc ? "stream-crc" : "stream", (const uint8_t[]){ crc ? 3 : 1, 7 }, 2,
		    stream, at);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	return seed_mpa(argv[1]) | seed_stream(argv[1], true) | seed_stream(argv[1], false);
}
