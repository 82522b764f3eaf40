/*
 * tcp_wire_fpdu.c - MPA's framing of full operation (RFC 5044 s4): each
 * DDP segment travels as an FPDU, ULPDU_LENGTH (16 bits), the ULPDU, 0-3
 * zero bytes of PAD to a 4-byte boundary, and a CRC32c over all that,
 * stored least significant byte first.  Without negotiated CRC the field
 * is still there and zero, as siw sends it.  ferry never sends markers
 * and refuses peers that want them (tcp_wire_mpa.c), so nothing here
 * looks for one.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "tcp_wire.h"

size_t tcpw_mulpdu(uint32_t emss, bool markers)
{
	/* 2 bytes of length and 4 of CRC, and the FPDU a multiple of 4. */
	uint64_t overhead = 6 + emss % 4;

	if (markers)
		overhead += 4 * (((uint64_t)emss + 511) / 512);
	if (emss <= overhead)
		return 0;
	return emss - overhead > TCPW_ULPDU_MAX ? TCPW_ULPDU_MAX : emss - overhead;
}

size_t tcpw_mulpdu_siw(uint32_t mss)
{
	uint32_t fpdu = mss & ~7u;

	if (fpdu <= TCPW_FPDU_LEN_SIZE + TCPW_FPDU_CRC_SIZE)
		return 0;
	fpdu -= TCPW_FPDU_LEN_SIZE + TCPW_FPDU_CRC_SIZE;
	return fpdu > TCPW_ULPDU_MAX ? TCPW_ULPDU_MAX : fpdu;
}

int tcpw_fpdu_frame(const struct iovec *ulpdu, int iovcnt, bool crc, uint8_t head_p[2],
		    uint8_t trailer_p[7], size_t *trailer_len_p)
{
	static const uint8_t zeros[3];
	size_t len = 0, pad;
	uint32_t c;

	for (int i = 0; i < iovcnt; i++) {
		if (ulpdu[i].iov_len > TCPW_ULPDU_MAX - len)
			return TCPW_ERR_INVAL;
		len += ulpdu[i].iov_len;
	}
	pad = tcpw_fpdu_pad(len);
	tcpw_put16(head_p, (uint16_t)len);
	memset(trailer_p, 0, pad + TCPW_FPDU_CRC_SIZE);
	if (crc) {
		c = tcpw_crc32c(0, head_p, TCPW_FPDU_LEN_SIZE);
		for (int i = 0; i < iovcnt; i++)
			c = tcpw_crc32c(c, ulpdu[i].iov_base, ulpdu[i].iov_len);
		c = tcpw_crc32c(c, zeros, pad);
		for (int i = 0; i < 4; i++)
			trailer_p[pad + i] = (uint8_t)(c >> (8 * i));
	}
	*trailer_len_p = pad + TCPW_FPDU_CRC_SIZE;
	return 0;
}

int tcpw_fpdu_build(const uint8_t *hdr, size_t hdr_len, const void *payload,
		    size_t payload_len, bool crc, uint8_t *buf, size_t cap, size_t *len_p)
{
	struct iovec iov[2] = {
		{ .iov_base = (void *)hdr, .iov_len = hdr_len },
		{ .iov_base = (void *)payload, .iov_len = payload_len },
	};
	uint8_t head[2], trailer[7];
	size_t trailer_len, len;
	int err;

	err = tcpw_fpdu_frame(iov, 2, crc, head, trailer, &trailer_len);
	if (err)
		return err;
	len = tcpw_fpdu_len(hdr_len + payload_len);
	if (cap < len)
		return TCPW_ERR_NOSPACE;
	memcpy(buf, head, sizeof(head));
	memcpy(buf + TCPW_FPDU_LEN_SIZE, hdr, hdr_len);
	if (payload_len)
		memcpy(buf + TCPW_FPDU_LEN_SIZE + hdr_len, payload, payload_len);
	memcpy(buf + len - trailer_len, trailer, trailer_len);
	*len_p = len;
	return 0;
}

int tcpw_fpdu_parser_init(struct tcpw_fpdu_parser *p, uint8_t *buf, size_t cap,
			  size_t max_ulpdu, bool crc)
{
	/* The largest ULPDU whose FPDU fits buf: CRC out, then length and
	 * ULPDU rounded down to the 4-byte boundary PAD would round up to. */
	size_t fits = cap < 8 ? 0 : ((cap - TCPW_FPDU_CRC_SIZE) & ~(size_t)3) - 2;

	if (max_ulpdu > TCPW_ULPDU_MAX)
		max_ulpdu = TCPW_ULPDU_MAX;
	if (max_ulpdu > fits)
		max_ulpdu = fits;
	if (max_ulpdu < TCPW_DDP_TAGGED_HDR)
		return TCPW_ERR_INVAL;
	*p = (struct tcpw_fpdu_parser){ .buf = buf, .max_ulpdu = max_ulpdu, .crc = crc };
	return 0;
}

/* Once ULPDU_LENGTH is in: the FPDU's whole length, or why it is refused
 * before any more of it is read.  The smallest ULPDU is a tagged DDP
 * header; a shorter length would make the header parser read past it. */
static int fpdu_check_len(struct tcpw_fpdu_parser *p)
{
	size_t ulpdu_len = tcpw_get16(p->buf);

	if (ulpdu_len < TCPW_DDP_TAGGED_HDR)
		return TCPW_ERR_FPDU_SHORT;
	if (ulpdu_len > p->max_ulpdu)
		return TCPW_ERR_FPDU_LONG;
	p->need = tcpw_fpdu_len(ulpdu_len);
	return 0;
}

static int fpdu_check_crc(const struct tcpw_fpdu_parser *p)
{
	const uint8_t *field = p->buf + p->need - TCPW_FPDU_CRC_SIZE;
	uint32_t wire = (uint32_t)field[0] | (uint32_t)field[1] << 8 |
			(uint32_t)field[2] << 16 | (uint32_t)field[3] << 24;

	if (!p->crc)
		return 0;	/* siw sends zero then, and does not look */
	return tcpw_crc32c(0, p->buf, p->need - TCPW_FPDU_CRC_SIZE) == wire ? 0
									    : TCPW_ERR_FPDU_CRC;
}

/* Copy what the current FPDU still lacks (or, before its length is
 * known, what the length lacks). */
static size_t fpdu_take(struct tcpw_fpdu_parser *p, const uint8_t *data, size_t len)
{
	size_t want = (p->need ? p->need : TCPW_FPDU_LEN_SIZE) - p->have;
	size_t n = len < want ? len : want;

	memcpy(p->buf + p->have, data, n);
	p->have += n;
	return n;
}

int tcpw_fpdu_parser_feed(struct tcpw_fpdu_parser *p, const uint8_t *data, size_t len,
			  size_t *used_p, struct tcpw_fpdu *fpdu_p)
{
	size_t used = 0;

	if (p->error)
		return p->error;
	if (p->need && p->have == p->need)
		p->have = p->need = 0;	/* the last FPDU was handed out */
	while (used < len) {
		used += fpdu_take(p, data + used, len - used);
		if (!p->need && p->have == TCPW_FPDU_LEN_SIZE)
			p->error = fpdu_check_len(p);
		if (!p->error && p->need && p->have == p->need)
			p->error = fpdu_check_crc(p);
		if (p->error)
			return p->error;
		if (p->need && p->have == p->need) {
			fpdu_p->ulpdu = p->buf + TCPW_FPDU_LEN_SIZE;
			fpdu_p->ulpdu_len = tcpw_get16(p->buf);
			*used_p = used;
			return 1;
		}
	}
	*used_p = used;
	return 0;
}
