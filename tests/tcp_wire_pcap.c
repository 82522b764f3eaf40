/*
 * tcp_wire_pcap.c - write a pcap of one synthetic iWARP connection made
 * with ferry's wire encoder, for tests/tcp_wire_tshark.sh to hand to
 * Wireshark's iWARP dissectors, an implementation written apart from
 * ours.  A TCP handshake, the MPA Request and Reply (rev 2, CRC on, a
 * Write RTR), then FPDUs of Write (RTR, and 3000 bytes cut by the
 * segmenter at the MULPDU of MSS 1460), Send, Read Request and Response,
 * Send with SE and Invalidate, an atomic pair and a Terminate, each in
 * its own TCP segment as MPA asks senders to place them, and at the end
 * two Sends in one segment and one Send across two.
 *
 * Usage: tcp_wire_pcap FILE [--bad-crc]
 * Prints to stdout what the capture should dissect as, one line per
 * message: "req", "rep", or an RDMAP opcode number.  --bad-crc spoils the
 * CRC of the last FPDU (the checker must notice).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tcp_wire.h"

#define TCP_ACK 0x10
#define TCP_PSH 0x08
#define TCP_SYN 0x02
#define MSS 1460
#define HDRS_LEN (14 + 20 + 20)		/* Ethernet, IPv4, TCP (no options) */

struct end {
	uint8_t mac[6];
	uint32_t ip;
	uint16_t port;
	uint32_t seq;			/* next sequence number it sends */
};

struct capture {
	FILE *f;
	uint32_t usec;			/* timestamps 1 ms apart */
	struct end client, server;
	bool crc;			/* negotiated: FPDUs carry a real CRC */
	uint32_t msn_send[2];		/* next MSN per direction, QN 0 */
	uint32_t msn_read;		/* client's Read/Atomic Requests, QN 1 */
	uint32_t msn_resp;		/* server's Atomic Responses, QN 3 */
};

static void put_le32(FILE *f, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };

	fwrite(b, 1, 4, f);
}

static void pcap_global_header(FILE *f)
{
	put_le32(f, 0xa1b2c3d4);	/* microsecond pcap, little-endian */
	put_le32(f, 2 | 4u << 16);	/* version 2.4 */
	put_le32(f, 0);			/* GMT offset */
	put_le32(f, 0);			/* timestamp accuracy */
	put_le32(f, 65535);		/* snap length */
	put_le32(f, 1);			/* LINKTYPE_ETHERNET */
}

/* The Internet checksum (RFC 1071), continuing sum. */
static uint32_t csum_add(uint32_t sum, const uint8_t *p, size_t n)
{
	for (; n > 1; n -= 2, p += 2)
		sum += (uint32_t)(p[0] << 8 | p[1]);
	if (n)
		sum += (uint32_t)p[0] << 8;
	return sum;
}

static uint16_t csum_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

static void ipv4_header(uint8_t *ip, const struct end *from, const struct end *to,
			size_t payload)
{
	memset(ip, 0, 20);
	ip[0] = 0x45;
	tcpw_put16(ip + 2, (uint16_t)(20 + 20 + payload));
	ip[6] = 0x40;			/* don't fragment */
	ip[8] = 64;
	ip[9] = 6;			/* TCP */
	tcpw_put32(ip + 12, from->ip);
	tcpw_put32(ip + 16, to->ip);
	tcpw_put16(ip + 10, csum_fold(csum_add(0, ip, 20)));
}

static void tcp_header(uint8_t *tcp, const struct end *from, const struct end *to,
		       uint8_t flags, const uint8_t *payload, size_t len)
{
	uint8_t pseudo[12];
	uint32_t sum;

	memset(tcp, 0, 20);
	tcpw_put16(tcp, from->port);
	tcpw_put16(tcp + 2, to->port);
	tcpw_put32(tcp + 4, from->seq);
	tcpw_put32(tcp + 8, (flags & TCP_ACK) ? to->seq : 0);
	tcp[12] = 5 << 4;
	tcp[13] = flags;
	tcpw_put16(tcp + 14, 65535);
	tcpw_put32(pseudo, from->ip);
	tcpw_put32(pseudo + 4, to->ip);
	tcpw_put16(pseudo + 8, 6);
	tcpw_put16(pseudo + 10, (uint16_t)(20 + len));
	/* Pseudo-header and header have even lengths, so the payload's
	 * 16-bit words line up and only its last byte may stand alone. */
	sum = csum_add(csum_add(0, pseudo, 12), tcp, 20);
	tcpw_put16(tcp + 16, csum_fold(csum_add(sum, payload, len)));
}

/* One TCP segment from -> to, carrying len bytes. */
static void segment(struct capture *c, struct end *from, struct end *to, uint8_t flags,
		    const uint8_t *payload, size_t len)
{
	static uint8_t frame[HDRS_LEN + 65536];

	memcpy(frame, to->mac, 6);
	memcpy(frame + 6, from->mac, 6);
	tcpw_put16(frame + 12, 0x0800);
	ipv4_header(frame + 14, from, to, len);
	tcp_header(frame + 34, from, to, flags, payload, len);
	if (len)	/* a SYN or an ACK carries none: payload may be NULL */
		memcpy(frame + HDRS_LEN, payload, len);
	put_le32(c->f, 1700000000);
	put_le32(c->f, c->usec += 1000);
	put_le32(c->f, (uint32_t)(HDRS_LEN + len));
	put_le32(c->f, (uint32_t)(HDRS_LEN + len));
	fwrite(frame, 1, HDRS_LEN + len, c->f);
	from->seq += (uint32_t)len + ((flags & TCP_SYN) ? 1 : 0);
}

static void handshake(struct capture *c)
{
	segment(c, &c->client, &c->server, TCP_SYN, NULL, 0);
	segment(c, &c->server, &c->client, TCP_SYN | TCP_ACK, NULL, 0);
	segment(c, &c->client, &c->server, TCP_ACK, NULL, 0);
}

static void mpa_exchange(struct capture *c)
{
	struct tcpw_mpa_local ini = { .want_crc = true, .ird = 4, .ord = 4, .p2p = true,
				      .rtr = TCPW_RTR_WRITE | TCPW_RTR_READ };
	struct tcpw_mpa_local resp = { .ird = 8, .ord = 8, .rtr = TCPW_RTR_ALL };
	struct tcpw_mpa_frame req, rep;
	struct tcpw_mpa_params params;
	uint8_t buf[64];
	size_t len;

	tcpw_mpa_request(&ini, (const uint8_t *)"ferry", 5, &req);
	if (tcpw_mpa_encode(&req, buf, sizeof(buf), &len))
		abort();
	segment(c, &c->client, &c->server, TCP_ACK | TCP_PSH, buf, len);
	puts("req");
	if (tcpw_mpa_answer(&req, &resp, NULL, 0, &rep, &params) ||
	    tcpw_mpa_encode(&rep, buf, sizeof(buf), &len))
		abort();
	segment(c, &c->server, &c->client, TCP_ACK | TCP_PSH, buf, len);
	puts("rep");
	c->crc = params.crc;
}

/* Encode one segment with its payload into an FPDU at buf. */
static size_t fpdu(const struct capture *c, const struct tcpw_seg *s, const void *payload,
		   size_t n, uint8_t *buf, size_t cap)
{
	uint8_t hdr[128];
	size_t hlen, len;

	if (tcpw_seg_encode(s, hdr, sizeof(hdr), &hlen) ||
	    tcpw_fpdu_build(hdr, hlen, payload, n, c->crc, buf, cap, &len))
		abort();
	printf("%u\n", s->opcode);
	return len;
}

/* A whole message, cut at the MULPDU, one TCP segment per FPDU. */
static void message(struct capture *c, bool from_client, const struct tcpw_seg *first,
		    const uint8_t *payload, uint32_t len)
{
	struct end *from = from_client ? &c->client : &c->server;
	struct end *to = from_client ? &c->server : &c->client;
	struct tcpw_segmenter sg;
	struct tcpw_seg s;
	uint32_t off, n;
	uint8_t buf[2048];

	if (tcpw_segmenter_init(&sg, first, len, tcpw_mulpdu(MSS, false)))
		abort();
	while (tcpw_segmenter_next(&sg, &s, &off, &n))
		segment(c, from, to, TCP_ACK | TCP_PSH, buf,
			fpdu(c, &s, payload + off, n, buf, sizeof(buf)));
}

static void send_msg(struct capture *c, bool from_client, uint8_t op, const char *text)
{
	struct tcpw_seg s = { .opcode = op, .msn = c->msn_send[from_client]++,
			      .inval_stag = 0x2002 };

	message(c, from_client, &s, (const uint8_t *)text, (uint32_t)strlen(text));
}

static void rdma_traffic(struct capture *c)
{
	static uint8_t data[3000];
	struct tcpw_seg s;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)i;
	/* The RTR the Reply chose, then the client's messages. */
	message(c, true, &(struct tcpw_seg){ .opcode = TCPW_OP_WRITE, .stag = 1 }, NULL, 0);
	send_msg(c, true, TCPW_OP_SEND, "hello");
	message(c, true, &(struct tcpw_seg){ .opcode = TCPW_OP_WRITE, .stag = 0x1001,
					     .to = 0x10000 }, data, sizeof(data));
	s = (struct tcpw_seg){ .opcode = TCPW_OP_READ_REQ, .msn = c->msn_read++,
			       .u.rreq = { .sink_stag = 0x1003, .sink_to = 0x20000, .size = 100,
					   .src_stag = 0x2001, .src_to = 0x30000 } };
	message(c, true, &s, NULL, 0);
	message(c, false, &(struct tcpw_seg){ .opcode = TCPW_OP_READ_RESP, .stag = 0x1003,
					      .to = 0x20000 }, data, 100);
	send_msg(c, false, TCPW_OP_SEND_SE_INV, "bye");
	s = (struct tcpw_seg){ .opcode = TCPW_OP_ATOMIC_REQ, .msn = c->msn_read++,
			       .u.areq = { .op = TCPW_ATOMIC_FETCH_ADD, .req_id = 7, .stag = 0x2001,
					   .to = 0x30008, .swap_add = 5 } };
	message(c, true, &s, NULL, 0);
	s = (struct tcpw_seg){ .opcode = TCPW_OP_ATOMIC_RESP, .msn = c->msn_resp++,
			       .u.aresp = { .req_id = 7, .orig = 42 } };
	message(c, false, &s, NULL, 0);
}

/* Two Sends in one TCP segment, then one Send split across two: the
 * dissector must find FPDUs by their length, not by segment. */
static void packed_and_split(struct capture *c)
{
	struct tcpw_seg s = { .opcode = TCPW_OP_SEND, .last = true };
	uint8_t buf[256];
	size_t len;

	s.msn = c->msn_send[1]++;
	len = fpdu(c, &s, "one", 3, buf, sizeof(buf));
	s.msn = c->msn_send[1]++;
	len += fpdu(c, &s, "two", 3, buf + len, sizeof(buf) - len);
	segment(c, &c->client, &c->server, TCP_ACK | TCP_PSH, buf, len);
	s.msn = c->msn_send[1]++;
	len = fpdu(c, &s, "split across two", 16, buf, sizeof(buf));
	segment(c, &c->client, &c->server, TCP_ACK, buf, 10);
	segment(c, &c->client, &c->server, TCP_ACK | TCP_PSH, buf + 10, len - 10);
}

/* The server ends the stream: a DDP untagged "invalid MSN" Terminate
 * with a copy of the header it refused. */
static void terminate(struct capture *c, bool bad_crc)
{
	struct tcpw_seg s = { .opcode = TCPW_OP_TERMINATE, .last = true, .msn = 1,
			      .u.term = { .layer = TCPW_LAYER_DDP, .etype = 2, .ecode = 3,
					  .m = true, .d = true, .ddp_seg_len = 23 } };
	uint8_t bad[TCPW_DDP_UNTAGGED_HDR] = { 0x41, 0x43, [13] = 9 }, buf[128];
	size_t len;

	memcpy(s.u.term.ddp_hdr, bad, sizeof(bad));
	len = fpdu(c, &s, NULL, 0, buf, sizeof(buf));
	if (bad_crc)
		buf[len - 1] ^= 0x01;
	segment(c, &c->server, &c->client, TCP_ACK | TCP_PSH, buf, len);
}

int main(int argc, char **argv)
{
	struct capture c = {
		.client = { { 2, 0, 0, 0, 0, 1 }, 0x0a000001, 40000, 1000 },
		.server = { { 2, 0, 0, 0, 0, 2 }, 0x0a000002, 35000, 5000 },
		.msn_send = { 1, 1 }, .msn_read = 1, .msn_resp = 1,
	};

	if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "--bad-crc") != 0)) {
		fprintf(stderr, "usage: %s FILE [--bad-crc]\n", argv[0]);
		return 2;
	}
	c.f = fopen(argv[1], "wb");
	if (!c.f) {
		perror(argv[1]);
		return 1;
	}
	pcap_global_header(c.f);
	handshake(&c);
	mpa_exchange(&c);
	rdma_traffic(&c);
	packed_and_split(&c);
	terminate(&c, argc == 3);
	return fclose(c.f) == 0 ? 0 : 1;
}
