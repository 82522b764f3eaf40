/*
 * tcp_wire_mpa.c - MPA's start-up frames: the Request the Initiator sends
 * right after TCP connects and the Reply the Responder answers with (RFC
 * 5044 s7.1), with RFC 6581's IRD/ORD block (revision 2, "enhanced"), and
 * the rules that turn the two into the connection's parameters.
 *
 * Frame: 16-byte key, flags (M C R H and four reserved bits), revision,
 * 16-bit PD_Length, then PD_Length bytes of private data whose first four
 * are the IRD/ORD block when the frame is enhanced.  Pure functions of
 * bytes: the CM does the reading and the timing.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "tcp_wire.h"

static const uint8_t key_req[TCPW_MPA_KEY_LEN] = "MPA ID Req Frame";
static const uint8_t key_rep[TCPW_MPA_KEY_LEN] = "MPA ID Rep Frame";

/* Flag bits of the IRD and ORD words of the block (RFC 6581). */
#define V2_IRD_P2P 0x8000		/* peer-to-peer: an RTR will follow */
#define V2_IRD_SEND_RTR 0x4000		/* zero-length Send RTR */
#define V2_ORD_WRITE_RTR 0x8000		/* zero-length Write RTR */
#define V2_ORD_READ_RTR 0x4000		/* zero-length Read RTR */
#define V2_COUNT_MASK 0x3fff

static const uint8_t *mpa_key(enum tcpw_mpa_kind kind)
{
	return kind == TCPW_MPA_REQ ? key_req : key_rep;
}

static bool mpa_frame_fields_ok(const struct tcpw_mpa_frame *f)
{
	if (f->rev != 1 && f->rev != 2)
		return false;
	if (f->enhanced && f->rev != 2)
		return false;
	if (f->kind == TCPW_MPA_REQ && f->reject)
		return false;
	return f->ird <= TCPW_MPA_IRD_ORD_MAX && f->ord <= TCPW_MPA_IRD_ORD_MAX &&
	       (f->rtr & ~TCPW_RTR_ALL) == 0 && (f->pd_len == 0 || f->pd);
}

static void mpa_v2_put(const struct tcpw_mpa_frame *f, uint8_t *p)
{
	uint16_t ird = f->ird, ord = f->ord;

	if (f->p2p)
		ird |= V2_IRD_P2P;
	if (f->rtr & TCPW_RTR_SEND)
		ird |= V2_IRD_SEND_RTR;
	if (f->rtr & TCPW_RTR_WRITE)
		ord |= V2_ORD_WRITE_RTR;
	if (f->rtr & TCPW_RTR_READ)
		ord |= V2_ORD_READ_RTR;
	tcpw_put16(p, ird);
	tcpw_put16(p + 2, ord);
}

int tcpw_mpa_encode(const struct tcpw_mpa_frame *f, uint8_t *buf, size_t cap,
		    size_t *len_p)
{
	size_t block = f->enhanced ? TCPW_MPA_V2_LEN : 0;
	size_t pd_total = block + f->pd_len;
	uint8_t flags = 0;

	if (!mpa_frame_fields_ok(f))
		return TCPW_ERR_INVAL;
	if (pd_total > TCPW_MPA_PD_MAX)
		return TCPW_ERR_MPA_PD_LEN;
	if (cap < TCPW_MPA_HDR_LEN + pd_total)
		return TCPW_ERR_NOSPACE;
	flags |= f->markers ? TCPW_MPA_FLAG_M : 0;
	flags |= f->crc ? TCPW_MPA_FLAG_C : 0;
	flags |= f->reject ? TCPW_MPA_FLAG_R : 0;
	flags |= f->enhanced ? TCPW_MPA_FLAG_H : 0;
	memcpy(buf, mpa_key(f->kind), TCPW_MPA_KEY_LEN);
	buf[16] = flags;
	buf[17] = f->rev;
	tcpw_put16(buf + 18, (uint16_t)pd_total);
	if (block)
		mpa_v2_put(f, buf + TCPW_MPA_HDR_LEN);
	if (f->pd_len)
		memcpy(buf + TCPW_MPA_HDR_LEN + block, f->pd, f->pd_len);
	*len_p = TCPW_MPA_HDR_LEN + pd_total;
	return 0;
}

int tcpw_mpa_frame_len(const uint8_t *hdr, enum tcpw_mpa_kind want, size_t *len_p)
{
	enum tcpw_mpa_kind other = want == TCPW_MPA_REQ ? TCPW_MPA_REP : TCPW_MPA_REQ;
	uint16_t pd_len = tcpw_get16(hdr + 18);

	if (memcmp(hdr, mpa_key(want), TCPW_MPA_KEY_LEN) != 0)
		return memcmp(hdr, mpa_key(other), TCPW_MPA_KEY_LEN) == 0 ? TCPW_ERR_MPA_KIND
									  : TCPW_ERR_MPA_KEY;
	/* Revision 0 (pre-IETF MPA, which siw still takes) is refused: its
	 * frames are laid out the same but its rules are not RFC 5044's. */
	if (hdr[17] != 1 && hdr[17] != 2)
		return TCPW_ERR_MPA_REV;
	if (pd_len > TCPW_MPA_PD_MAX)
		return TCPW_ERR_MPA_PD_LEN;
	*len_p = TCPW_MPA_HDR_LEN + pd_len;
	return 0;
}

static void mpa_v2_get(const uint8_t *p, struct tcpw_mpa_frame *f)
{
	uint16_t ird = tcpw_get16(p), ord = tcpw_get16(p + 2);

	f->ird = ird & V2_COUNT_MASK;
	f->ord = ord & V2_COUNT_MASK;
	f->p2p = (ird & V2_IRD_P2P) != 0;
	f->rtr = (ird & V2_IRD_SEND_RTR ? TCPW_RTR_SEND : 0) |
		 (ord & V2_ORD_WRITE_RTR ? TCPW_RTR_WRITE : 0) |
		 (ord & V2_ORD_READ_RTR ? TCPW_RTR_READ : 0);
}

int tcpw_mpa_decode(const uint8_t *buf, size_t len, enum tcpw_mpa_kind want,
		    struct tcpw_mpa_frame *f_p)
{
	struct tcpw_mpa_frame f = { .kind = want };
	size_t frame_len, block;
	int err;

	if (len < TCPW_MPA_HDR_LEN)
		return TCPW_ERR_MPA_SHORT;
	err = tcpw_mpa_frame_len(buf, want, &frame_len);
	if (err)
		return err;
	if (len < frame_len)
		return TCPW_ERR_MPA_SHORT;
	if (len > frame_len)
		return TCPW_ERR_MPA_TRAILING;
	f.rev = buf[17];
	f.markers = (buf[16] & TCPW_MPA_FLAG_M) != 0;
	f.crc = (buf[16] & TCPW_MPA_FLAG_C) != 0;
	f.reject = (buf[16] & TCPW_MPA_FLAG_R) != 0;
	if (f.reject && want == TCPW_MPA_REQ)
		return TCPW_ERR_MPA_REJECT_BIT;
	/* In revision 1 the H bit is one of the reserved bits: ignored. */
	f.enhanced = f.rev == 2 && (buf[16] & TCPW_MPA_FLAG_H);
	block = f.enhanced ? TCPW_MPA_V2_LEN : 0;
	if (frame_len - TCPW_MPA_HDR_LEN < block)
		return TCPW_ERR_MPA_V2_SHORT;
	if (block)
		mpa_v2_get(buf + TCPW_MPA_HDR_LEN, &f);
	f.pd = buf + TCPW_MPA_HDR_LEN + block;
	f.pd_len = (uint16_t)(frame_len - TCPW_MPA_HDR_LEN - block);
	*f_p = f;
	return 0;
}

static uint16_t clamp_count(uint16_t n)
{
	return n > TCPW_MPA_IRD_ORD_MAX ? TCPW_MPA_IRD_ORD_MAX : n;
}

static uint16_t min16(uint16_t a, uint16_t b)
{
	return a < b ? a : b;
}

void tcpw_mpa_request(const struct tcpw_mpa_local *local, const uint8_t *pd,
		      uint16_t pd_len, struct tcpw_mpa_frame *req_p)
{
	*req_p = (struct tcpw_mpa_frame){
		.kind = TCPW_MPA_REQ,
		.rev = 2,
		.crc = local->want_crc,
		.enhanced = true,
		.ird = clamp_count(local->ird),
		.ord = clamp_count(local->ord),
		.p2p = local->p2p,
		.rtr = local->p2p ? local->rtr & TCPW_RTR_ALL : 0,
		.pd = pd,
		.pd_len = pd_len,
	};
}

void tcpw_mpa_reject(const struct tcpw_mpa_frame *req, const uint8_t *pd, uint16_t pd_len,
		     struct tcpw_mpa_frame *rep_p)
{
	/* Same revision and block layout as the Request, as siw answers, so
	 * that an enhanced Initiator parses the reject's private data. */
	*rep_p = (struct tcpw_mpa_frame){
		.kind = TCPW_MPA_REP,
		.rev = req->rev,
		.crc = req->crc,
		.reject = true,
		.enhanced = req->enhanced,
		.pd = pd,
		.pd_len = pd_len,
	};
}

/*
 * The RTR a Responder picks from what the Initiator offers and it takes:
 * Write first, as siw does, then Read (which needs a Read credit each way),
 * then Send (which costs the Responder a posted receive).  0: none.
 */
static uint8_t mpa_pick_rtr(const struct tcpw_mpa_frame *req, uint8_t accept, uint16_t our_ird)
{
	uint8_t both = req->rtr & accept;

	if (both & TCPW_RTR_WRITE)
		return TCPW_RTR_WRITE;
	if ((both & TCPW_RTR_READ) && req->ord >= 1 && our_ird >= 1)
		return TCPW_RTR_READ;
	if (both & TCPW_RTR_SEND)
		return TCPW_RTR_SEND;
	return 0;
}

/* The Reply's IRD/ORD block: never more outbound Reads than the
 * Initiator takes in; our IRD is what we can serve, and bounds its ORD. */
static int mpa_answer_v2(const struct tcpw_mpa_frame *req, const struct tcpw_mpa_local *local,
			 struct tcpw_mpa_frame *rep)
{
	rep->ord = min16(clamp_count(local->ord), req->ird);
	rep->ird = clamp_count(local->ird);
	if (!req->p2p)
		return 0;
	rep->p2p = true;
	rep->rtr = mpa_pick_rtr(req, local->rtr, rep->ird);
	return rep->rtr ? 0 : TCPW_ERR_MPA_NO_RTR;
}

int tcpw_mpa_answer(const struct tcpw_mpa_frame *req, const struct tcpw_mpa_local *local,
		    const uint8_t *pd, uint16_t pd_len, struct tcpw_mpa_frame *rep_p,
		    struct tcpw_mpa_params *params_p)
{
	struct tcpw_mpa_frame rep = {
		.kind = TCPW_MPA_REP,
		.rev = req->rev,
		.crc = req->crc || local->want_crc,	/* CRC if either side asks */
		.enhanced = req->enhanced,
		.pd = pd,
		.pd_len = pd_len,
	};
	int err = 0;

	/* ferry never inserts markers, and a peer that needs them cannot do
	 * without: refuse, M cleared, as siw does. */
	if (req->markers)
		err = TCPW_ERR_MPA_MARKERS;
	else if (rep.enhanced)
		err = mpa_answer_v2(req, local, &rep);
	if (err) {
		tcpw_mpa_reject(req, NULL, 0, rep_p);
		return err;
	}
	*rep_p = rep;
	*params_p = (struct tcpw_mpa_params){
		.crc = rep.crc,
		.enhanced = rep.enhanced,
		.ird = rep.enhanced ? rep.ird : clamp_count(local->ird),
		.ord = rep.enhanced ? rep.ord : clamp_count(local->ord),
		.rtr = rep.rtr,
	};
	return 0;
}

/* An enhanced Reply's RTR must be exactly one of the kinds offered, and
 * a Read RTR needs a Read credit on both sides. */
static int mpa_check_rtr(const struct tcpw_mpa_frame *req, const struct tcpw_mpa_frame *rep)
{
	if (!req->p2p)
		return rep->p2p || rep->rtr ? TCPW_ERR_MPA_REPLY : 0;
	if (!rep->p2p || (rep->rtr & (rep->rtr - 1)) || !(rep->rtr & req->rtr))
		return TCPW_ERR_MPA_NO_RTR;
	if (rep->rtr == TCPW_RTR_READ && (req->ord == 0 || rep->ird == 0))
		return TCPW_ERR_MPA_NO_RTR;
	return 0;
}

int tcpw_mpa_check_reply(const struct tcpw_mpa_frame *req, const struct tcpw_mpa_frame *rep,
			 struct tcpw_mpa_params *params_p)
{
	struct tcpw_mpa_params params = {
		.crc = req->crc || rep->crc,
		.enhanced = rep->enhanced,
		.ird = req->ird,
		.ord = req->ord,
	};
	int err;

	if (rep->reject)
		return TCPW_ERR_MPA_REJECTED;
	if (rep->markers)
		return TCPW_ERR_MPA_MARKERS;
	if (rep->rev > req->rev || (rep->enhanced && !req->enhanced))
		return TCPW_ERR_MPA_REPLY;
	if (!rep->enhanced) {
		/* A revision 1 Responder waits for our first FPDU anyway, but
		 * a peer-to-peer Initiator may have none to send. */
		if (req->p2p)
			return TCPW_ERR_MPA_NO_RTR;
		*params_p = params;
		return 0;
	}
	if (rep->ord > req->ird)
		return TCPW_ERR_MPA_IRD;
	err = mpa_check_rtr(req, rep);
	if (err)
		return err;
	params.ord = min16(req->ord, rep->ird);
	params.rtr = req->p2p ? rep->rtr : 0;
	*params_p = params;
	return 0;
}
