/*
 * tcp_wire.h - the wire format of the tcp transport: iWARP as Linux
 * SoftiWARP (siw) speaks it over kernel TCP.  A codec only: it turns
 * structs into bytes and bytes into checked structs, and owns no socket,
 * queue or memory region; the tcp provider and its CM build on it.
 *
 *   tcp_wire_crc.c   CRC32c (slice-by-8, or SSE4.2 when the CPU has it)
 *   tcp_wire_mpa.c   MPA Request/Reply frames (RFC 5044, RFC 6581) and
 *                    the rules that negotiate CRC, IRD/ORD and RTR
 *   tcp_wire_fpdu.c  FPDU framing (length, pad, CRC), MULPDU, the
 *                    incremental receive parser
 *   tcp_wire_ddp.c   DDP (RFC 5041) and RDMAP (RFC 5040, RFC 7306)
 *                    headers, the segmenter and the reassembly check
 *
 * docs/tcp-wire.md says what ferry sends and where it departs from the
 * RFCs or follows siw.
 *
 * Error convention (the whole family): functions return 0 (or, where
 * said, a positive count) on success and a negative enum tcpw_err on
 * failure; tcpw_strerror() names it for a log line and tcpw_err_term()
 * gives the Terminate a peer should be sent for it.  Outputs (the _p
 * arguments) are written only on success.  Everything decoded comes from
 * a hostile peer: a decoder reads only the bytes it was given and checks
 * every field before it returns it.
 */
#ifndef FERRY_TCP_WIRE_H
#define FERRY_TCP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* ---- errors ----------------------------------------------------------- */

enum tcpw_err {
	TCPW_ERR_INVAL = -1,		/* an encoder was given impossible values */
	TCPW_ERR_NOSPACE = -2,		/* the output buffer is too small */
	/* MPA Request/Reply frames */
	TCPW_ERR_MPA_SHORT = -3,	/* fewer bytes than the frame's header says */
	TCPW_ERR_MPA_KEY = -4,		/* the first 16 bytes are no MPA key */
	TCPW_ERR_MPA_KIND = -5,		/* a Reply where a Request was due, or back */
	TCPW_ERR_MPA_REV = -6,		/* revision other than 1 or 2 */
	TCPW_ERR_MPA_PD_LEN = -7,	/* PD_Length over TCPW_MPA_PD_MAX */
	TCPW_ERR_MPA_TRAILING = -8,	/* bytes after the frame */
	TCPW_ERR_MPA_V2_SHORT = -9,	/* enhanced frame without its IRD/ORD block */
	TCPW_ERR_MPA_REJECT_BIT = -10,	/* R set in a Request */
	TCPW_ERR_MPA_MARKERS = -11,	/* markers asked for: ferry never uses them */
	TCPW_ERR_MPA_REJECTED = -12,	/* the Responder rejected the connection */
	TCPW_ERR_MPA_IRD = -13,		/* Responder's ORD above our IRD */
	TCPW_ERR_MPA_NO_RTR = -14,	/* no RTR kind both sides can use */
	TCPW_ERR_MPA_REPLY = -15,	/* a Reply that does not answer our Request */
	/* FPDU framing */
	TCPW_ERR_FPDU_SHORT = -16,	/* ULPDU_LENGTH below the smallest DDP header */
	TCPW_ERR_FPDU_LONG = -17,	/* ULPDU_LENGTH over the receiver's limit */
	TCPW_ERR_FPDU_CRC = -18,	/* CRC32c mismatch */
	/* DDP */
	TCPW_ERR_DDP_SHORT = -19,	/* ULPDU shorter than its opcode's header */
	TCPW_ERR_DDP_VERSION = -20,	/* DV other than 1 */
	TCPW_ERR_DDP_RESERVED = -21,	/* reserved DDP control bits set */
	TCPW_ERR_DDP_TAGGED = -22,	/* T flag wrong for the opcode */
	TCPW_ERR_DDP_QN = -23,		/* queue number wrong for the opcode */
	TCPW_ERR_DDP_MSN = -24,		/* MSN out of sequence */
	TCPW_ERR_DDP_MO = -25,		/* MO does not continue the message */
	TCPW_ERR_DDP_STAG = -26,	/* STag changed inside a tagged message */
	TCPW_ERR_DDP_TO = -27,		/* TO does not continue the message */
	TCPW_ERR_DDP_TO_WRAP = -28,	/* TO + length past 2^64 */
	TCPW_ERR_DDP_TOO_LONG = -29,	/* message past 2^32 bytes (MO would wrap) */
	/* RDMAP */
	TCPW_ERR_RDMAP_VERSION = -30,	/* RV other than 1 */
	TCPW_ERR_RDMAP_RESERVED = -31,	/* reserved RDMAP bits or fields set */
	TCPW_ERR_RDMAP_OPCODE = -32,	/* unknown or unexpected opcode */
	TCPW_ERR_RDMAP_SEGMENT = -33,	/* one-segment message not alone (L, MO) */
	TCPW_ERR_RDMAP_LEN = -34,	/* payload where the opcode allows none (or a
					 * wrong amount), bad Terminate header set */
	TCPW_ERR_RDMAP_ATOMIC = -35,	/* unknown atomic operation */
	TCPW_ERR_RDMAP_TERM = -36,	/* Terminate with a layer/etype out of range */
	TCPW_ERR_COUNT_ = 37		/* one past the last code, for tables */
};

/* A name for the code, for log lines ("unknown error" when it is none). */
const char *tcpw_strerror(int err);

/* The Terminate that reports err to the peer (RFC 5040, RFC 5041,
 * RFC 5044, RFC 6581); tagged: the faulting segment's T bit, which picks
 * the DDP error type. */
struct tcpw_term_code {
	uint8_t layer;			/* TCPW_LAYER_* */
	uint8_t etype;
	uint8_t ecode;
};
void tcpw_err_term(int err, bool tagged, struct tcpw_term_code *code_p);

/* ---- big-endian fields ----------------------------------------------- */

static inline uint16_t tcpw_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t tcpw_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t tcpw_get64(const uint8_t *p)
{
	return (uint64_t)tcpw_get32(p) << 32 | tcpw_get32(p + 4);
}

static inline void tcpw_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void tcpw_put32(uint8_t *p, uint32_t v)
{
	tcpw_put16(p, (uint16_t)(v >> 16));
	tcpw_put16(p + 2, (uint16_t)v);
}

static inline void tcpw_put64(uint8_t *p, uint64_t v)
{
	tcpw_put32(p, (uint32_t)(v >> 32));
	tcpw_put32(p + 4, (uint32_t)v);
}

/* ---- CRC32c (tcp_wire_crc.c) ------------------------------------------ */

/*
 * CRC-32C (Castagnoli) of n bytes, continuing crc, the value an earlier
 * call returned (0 to start): tcpw_crc32c(tcpw_crc32c(0, a), b) is the CRC
 * of a followed by b.  The result is the finished CRC (pre- and post-
 * inverted); MPA puts it on the wire least significant byte first.
 * tcpw_crc32c() uses the SSE4.2 instruction when the CPU has it; the two
 * others are there so that tests check both against the same vectors.
 */
uint32_t tcpw_crc32c(uint32_t crc, const void *buf, size_t n);
uint32_t tcpw_crc32c_sw(uint32_t crc, const void *buf, size_t n);
bool tcpw_crc32c_hw_available(void);
uint32_t tcpw_crc32c_hw(uint32_t crc, const void *buf, size_t n);	/* only if available */

/* ---- MPA Request / Reply (tcp_wire_mpa.c) ----------------------------- */

#define TCPW_MPA_KEY_LEN 16
#define TCPW_MPA_HDR_LEN 20		/* key, flags, revision, PD_Length */
#define TCPW_MPA_PD_MAX 512		/* RFC 5044 s7.1: most private data */
#define TCPW_MPA_V2_LEN 4		/* RFC 6581 IRD/ORD block, inside the PD */
#define TCPW_MPA_IRD_ORD_MAX 0x3fff	/* 14-bit IRD and ORD fields */

/* Flags byte (byte 16). */
#define TCPW_MPA_FLAG_M 0x80		/* sender wants markers in what it receives */
#define TCPW_MPA_FLAG_C 0x40		/* sender wants CRC32c */
#define TCPW_MPA_FLAG_R 0x20		/* Reply only: connection rejected */
#define TCPW_MPA_FLAG_H 0x10		/* rev 2: the IRD/ORD block leads the PD */

/* RTR kinds (RFC 6581): the zero-length message the Initiator sends
 * first, which tells a peer-to-peer Responder it may start sending. */
#define TCPW_RTR_SEND 0x1		/* zero-length Send */
#define TCPW_RTR_WRITE 0x2		/* zero-length RDMA Write */
#define TCPW_RTR_READ 0x4		/* zero-length RDMA Read Request */
#define TCPW_RTR_ALL 0x7

enum tcpw_mpa_kind {
	TCPW_MPA_REQ,			/* "MPA ID Req Frame", Initiator -> Responder */
	TCPW_MPA_REP			/* "MPA ID Rep Frame", Responder -> Initiator */
};

/* One Request or Reply, as fields. */
struct tcpw_mpa_frame {
	enum tcpw_mpa_kind kind;
	uint8_t rev;			/* 1 (RFC 5044) or 2 (RFC 6581) */
	bool markers;			/* M */
	bool crc;			/* C */
	bool reject;			/* R (Reply only) */
	bool enhanced;			/* rev 2 and H: ird/ord/p2p/rtr are valid */
	uint16_t ird;			/* inbound RDMA Reads the sender will take */
	uint16_t ord;			/* outbound RDMA Reads the sender will issue */
	bool p2p;			/* peer-to-peer: an RTR follows the Reply */
	uint8_t rtr;			/* TCPW_RTR_*: offered (Req) or chosen (Rep) */
	const uint8_t *pd;		/* the ULP's private data (after the block) */
	uint16_t pd_len;
};

/*
 * Write f into buf (cap bytes), *len_p = its length.  The IRD/ORD block is
 * written when f->enhanced (which needs rev 2); PD_Length counts it.
 */
int tcpw_mpa_encode(const struct tcpw_mpa_frame *f, uint8_t *buf, size_t cap,
		    size_t *len_p);

/*
 * From the first TCPW_MPA_HDR_LEN bytes of a frame of kind `want`: its
 * whole length, so that a reader knows how much more to read (and reads
 * no byte past the frame).  Checks key, kind, revision and PD_Length.
 */
int tcpw_mpa_frame_len(const uint8_t *hdr, enum tcpw_mpa_kind want, size_t *len_p);

/*
 * Decode exactly one frame of kind `want` that fills buf[0..len).  f_p->pd
 * points into buf.  Reserved flag bits are ignored (RFC 5044 s7.1).
 */
int tcpw_mpa_decode(const uint8_t *buf, size_t len, enum tcpw_mpa_kind want,
		    struct tcpw_mpa_frame *f_p);

/* What one side wants from the connection. */
struct tcpw_mpa_local {
	bool want_crc;			/* ask for CRC32c */
	uint16_t ird;			/* inbound Reads we can serve at once */
	uint16_t ord;			/* outbound Reads we want in flight */
	bool p2p;			/* Initiator: ask for an RTR */
	uint8_t rtr;			/* RTR kinds we can send (Initiator) or
					 * accept (Responder) */
};

/* What a connection runs with, once the Reply is in. */
struct tcpw_mpa_params {
	bool crc;			/* both directions carry a real CRC32c */
	bool enhanced;			/* IRD/ORD were negotiated */
	uint16_t ird, ord;		/* ours */
	uint8_t rtr;			/* the one RTR kind, 0 = none */
};

/* The Request an Initiator sends (rev 2, enhanced, never markers). */
void tcpw_mpa_request(const struct tcpw_mpa_local *local, const uint8_t *pd,
		      uint16_t pd_len, struct tcpw_mpa_frame *req_p);

/*
 * Responder: the Reply to req, and the parameters it sets.  Returns 0 for
 * an accepting Reply, or the reason for a rejecting one (R set, markers
 * cleared, no private data): TCPW_ERR_MPA_MARKERS when req wants markers
 * (siw declines them the same way), TCPW_ERR_MPA_NO_RTR when req is
 * peer-to-peer and offers no RTR kind local accepts.  *rep_p is written
 * either way; *params_p only on 0.
 */
int tcpw_mpa_answer(const struct tcpw_mpa_frame *req, const struct tcpw_mpa_local *local,
		    const uint8_t *pd, uint16_t pd_len, struct tcpw_mpa_frame *rep_p,
		    struct tcpw_mpa_params *params_p);

/* Responder: a rejecting Reply to req (the ULP said no), with pd. */
void tcpw_mpa_reject(const struct tcpw_mpa_frame *req, const uint8_t *pd, uint16_t pd_len,
		     struct tcpw_mpa_frame *rep_p);

/* Initiator: check rep against the req it sent; the parameters on 0. */
int tcpw_mpa_check_reply(const struct tcpw_mpa_frame *req, const struct tcpw_mpa_frame *rep,
			 struct tcpw_mpa_params *params_p);

/* ---- FPDU framing (tcp_wire_fpdu.c) ----------------------------------- */

#define TCPW_FPDU_LEN_SIZE 2		/* ULPDU_LENGTH */
#define TCPW_FPDU_CRC_SIZE 4
#define TCPW_ULPDU_MAX 65535		/* ULPDU_LENGTH is 16 bits */

/* PAD after a ULPDU: (2 + ULPDU + PAD) is a multiple of 4. */
static inline size_t tcpw_fpdu_pad(size_t ulpdu_len)
{
	return (4 - ((ulpdu_len + TCPW_FPDU_LEN_SIZE) & 3)) & 3;
}

/* Whole FPDU: ULPDU_LENGTH, ULPDU, PAD, CRC. */
static inline size_t tcpw_fpdu_len(size_t ulpdu_len)
{
	return TCPW_FPDU_LEN_SIZE + ulpdu_len + tcpw_fpdu_pad(ulpdu_len) + TCPW_FPDU_CRC_SIZE;
}

/* MULPDU for an effective MSS (RFC 5044): EMSS - (6 + EMSS mod 4),
 * less 4 per 512 bytes when markers are on; 0 when nothing fits. */
size_t tcpw_mulpdu(uint32_t emss, bool markers);

/* siw's: its FPDU is the MSS rounded down to a multiple of 8 (loopback's
 * MSS is odd), so the ULPDU is that less 6. */
size_t tcpw_mulpdu_siw(uint32_t mss);

/*
 * Frame a ULPDU given as iovcnt pieces (a header and the payload, say)
 * for writev: head_p gets ULPDU_LENGTH, trailer_p gets PAD and CRC
 * (*trailer_len_p bytes, at most 7).  With crc false the CRC field is
 * zero, as siw sends it.  TCPW_ERR_INVAL past TCPW_ULPDU_MAX.
 */
int tcpw_fpdu_frame(const struct iovec *ulpdu, int iovcnt, bool crc, uint8_t head_p[2],
		    uint8_t trailer_p[7], size_t *trailer_len_p);

/* Same, into one buffer: header and payload become one FPDU. */
int tcpw_fpdu_build(const uint8_t *hdr, size_t hdr_len, const void *payload,
		    size_t payload_len, bool crc, uint8_t *buf, size_t cap, size_t *len_p);

/* One received FPDU's ULPDU, inside the parser's buffer. */
struct tcpw_fpdu {
	const uint8_t *ulpdu;
	size_t ulpdu_len;
};

/*
 * Receive side: fed the stream in chunks of any size (one byte works),
 * it yields one complete FPDU at a time, length-checked and (when crc)
 * CRC-checked.  It copies into buf, which must hold tcpw_fpdu_len(max).
 * An error is sticky: the stream cannot be re-synchronised (ferry uses
 * no markers), so the connection must end with a Terminate.
 */
struct tcpw_fpdu_parser {
	uint8_t *buf;			/* the FPDU being received */
	size_t have;			/* bytes of it in buf */
	size_t need;			/* its whole length, 0 until 2 bytes are in */
	size_t max_ulpdu;		/* longest ULPDU accepted */
	bool crc;			/* check the CRC field */
	int error;			/* 0, or the error every later call returns */
};

/* buf holds cap bytes; max_ulpdu is clamped to what buf and 16 bits allow. */
int tcpw_fpdu_parser_init(struct tcpw_fpdu_parser *p, uint8_t *buf, size_t cap,
			  size_t max_ulpdu, bool crc);

/*
 * Take bytes from data[0..len) up to the end of the next FPDU; *used_p =
 * how many were taken.  Returns 1 with *fpdu_p when an FPDU is complete
 * (valid until the next call), 0 when all len bytes were taken and more
 * are needed, or the (sticky) error.
 */
int tcpw_fpdu_parser_feed(struct tcpw_fpdu_parser *p, const uint8_t *data, size_t len,
			  size_t *used_p, struct tcpw_fpdu *fpdu_p);

/* ---- DDP and RDMAP (tcp_wire_ddp.c) ----------------------------------- */

#define TCPW_DDP_TAGGED_HDR 14		/* ctrl, RDMAP ctrl, STag, TO */
#define TCPW_DDP_UNTAGGED_HDR 18	/* ctrl, RDMAP ctrl, RsvdULP, QN, MSN, MO */
#define TCPW_READ_REQ_BODY 28		/* sink STag/TO, size, source STag/TO */
#define TCPW_ATOMIC_REQ_BODY 52		/* RFC 7306 Atomic Request */
#define TCPW_ATOMIC_RESP_BODY 12	/* RFC 7306 Atomic Response */
#define TCPW_IMM_DATA_LEN 8		/* RFC 7306: immediate data bytes */

/* RDMAP opcodes (RFC 5040; 8-11 from RFC 7306). */
enum tcpw_opcode {
	TCPW_OP_WRITE = 0,
	TCPW_OP_READ_REQ = 1,
	TCPW_OP_READ_RESP = 2,
	TCPW_OP_SEND = 3,
	TCPW_OP_SEND_INV = 4,
	TCPW_OP_SEND_SE = 5,
	TCPW_OP_SEND_SE_INV = 6,
	TCPW_OP_TERMINATE = 7,
	TCPW_OP_IMM = 8,
	TCPW_OP_IMM_SE = 9,
	TCPW_OP_ATOMIC_REQ = 10,
	TCPW_OP_ATOMIC_RESP = 11,
	TCPW_OP_COUNT_ = 12
};

/* Untagged queues (RFC 5040; 3 from RFC 7306). */
#define TCPW_QN_SEND 0			/* Send family, Immediate Data */
#define TCPW_QN_READ_REQ 1		/* Read Requests, Atomic Requests */
#define TCPW_QN_TERMINATE 2
#define TCPW_QN_ATOMIC_RESP 3

/* Terminate layers. */
#define TCPW_LAYER_RDMAP 0
#define TCPW_LAYER_DDP 1
#define TCPW_LAYER_LLP 2		/* MPA */

/* Atomic operations (RFC 7306). */
#define TCPW_ATOMIC_FETCH_ADD 0
#define TCPW_ATOMIC_SWAP 1
#define TCPW_ATOMIC_CMP_SWAP 2

struct tcpw_read_req {
	uint32_t sink_stag;
	uint64_t sink_to;
	uint32_t size;
	uint32_t src_stag;
	uint64_t src_to;
};

struct tcpw_term {
	uint8_t layer, etype, ecode;
	bool m;				/* ddp_seg_len is valid */
	bool d;				/* ddp_hdr holds the faulting DDP header */
	bool r;				/* rdma_hdr holds the faulting Read Request */
	uint16_t ddp_seg_len;		/* the faulting segment's ULPDU_LENGTH */
	uint8_t ddp_hdr_len;		/* decode: 14 or 18, by the copy's T bit (which
					 * is what encode goes by) */
	uint8_t ddp_hdr[TCPW_DDP_UNTAGGED_HDR];
	uint8_t rdma_hdr[TCPW_READ_REQ_BODY];
};

struct tcpw_atomic_req {
	uint8_t op;			/* TCPW_ATOMIC_* */
	uint32_t req_id;
	uint32_t stag;
	uint64_t to;			/* 8-byte aligned target */
	uint64_t swap_add, swap_add_mask;
	uint64_t compare, compare_mask;
};

struct tcpw_atomic_resp {
	uint32_t req_id;		/* the request's req_id */
	uint64_t orig;			/* the target's value before the operation */
};

/* One DDP segment: what the header says, and where its payload is. */
struct tcpw_seg {
	uint8_t opcode;			/* enum tcpw_opcode */
	bool tagged;			/* set by the opcode; checked on decode */
	bool last;			/* L */
	uint32_t stag;			/* tagged: sink STag */
	uint64_t to;			/* tagged: TO of the first payload byte */
	uint32_t inval_stag;		/* Send with Invalidate: the STag */
	uint32_t qn, msn, mo;		/* untagged */
	union {
		struct tcpw_read_req rreq;	/* TCPW_OP_READ_REQ */
		struct tcpw_term term;		/* TCPW_OP_TERMINATE */
		struct tcpw_atomic_req areq;	/* TCPW_OP_ATOMIC_REQ */
		struct tcpw_atomic_resp aresp;	/* TCPW_OP_ATOMIC_RESP */
	} u;
	const uint8_t *payload;		/* decode: inside the ULPDU */
	size_t payload_len;
};

/* Header bytes an opcode's segment carries before payload (0: unknown);
 * a Terminate's depends on its d/r flags, so pass the segment. */
size_t tcpw_seg_hdr_len(const struct tcpw_seg *s);

/* Whether an opcode uses the tagged model; its queue (untagged). */
bool tcpw_op_tagged(uint8_t opcode);
uint32_t tcpw_op_qn(uint8_t opcode);

/*
 * Write s's DDP and RDMAP header (and its opcode's body: Read Request,
 * Terminate, atomics) into buf; *len_p = its length.  The payload goes
 * after it (tcpw_fpdu_build or tcpw_fpdu_frame).  s->tagged and s->qn are
 * taken from the opcode, not from s.
 */
int tcpw_seg_encode(const struct tcpw_seg *s, uint8_t *buf, size_t cap, size_t *len_p);

/* Decode and check one ULPDU; s_p->payload points into ulpdu. */
int tcpw_seg_decode(const uint8_t *ulpdu, size_t len, struct tcpw_seg *s_p);

/*
 * Sender: cuts one message into segments whose ULPDU fits mulpdu, each
 * with the TO (tagged) or MO (untagged) of its first byte and L on the
 * last.  Messages that are one segment by definition (Read Request,
 * Terminate, atomics, Immediate Data) must fit one.
 */
struct tcpw_segmenter {
	struct tcpw_seg next;		/* header of the next segment */
	uint32_t msg_len;		/* payload bytes of the message */
	uint32_t done;			/* of them already cut */
	size_t max_payload;		/* per segment */
	bool finished;			/* the L segment was handed out */
};

/* first: the message's header as its first segment carries it (TO/MO of
 * the start, MSN); msg_len: its payload bytes. */
int tcpw_segmenter_init(struct tcpw_segmenter *sg, const struct tcpw_seg *first,
			uint32_t msg_len, size_t mulpdu);

/* The next segment's header and its payload's [*off_p, *off_p + *len_p)
 * within the message; false once the last one was handed out. */
bool tcpw_segmenter_next(struct tcpw_segmenter *sg, struct tcpw_seg *seg_p, uint32_t *off_p,
			 uint32_t *len_p);

/*
 * Receiver: one message in reassembly, per tagged stream or untagged
 * queue.  Every segment must continue the message (same opcode, STag or
 * QN/MSN, TO or MO right after the bytes so far); an untagged message
 * starts at MO 0 with the queue's next MSN (1 first, then +1, mod 2^32).
 */
struct tcpw_reasm {
	bool active;			/* a message is half received */
	uint8_t opcode;
	uint32_t stag;			/* tagged */
	uint64_t next_to;		/* tagged */
	uint32_t qn, msn;		/* untagged */
	uint32_t expect_msn;		/* untagged: MSN of the next message */
	uint32_t received;		/* payload bytes of this message so far */
};

void tcpw_reasm_init(struct tcpw_reasm *r);

/* Check seg against the message so far: 1 when it completes the message
 * (*total_p its length), 0 when more is due, or the error. */
int tcpw_reasm_check(struct tcpw_reasm *r, const struct tcpw_seg *seg, uint32_t *total_p);

#endif /* FERRY_TCP_WIRE_H */
