/*
 * tcp_wire_err.c - the tcp wire codec's error codes: a name for each, for
 * the line that logs it, and the Terminate (layer, error type, error
 * code) that tells the peer why its stream is being closed.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "tcp_wire.h"

/* Indexed by -err. */
static const char *const err_names[TCPW_ERR_COUNT_] = {
	[0] = "success",
	[-TCPW_ERR_INVAL] = "invalid argument to the encoder",
	[-TCPW_ERR_NOSPACE] = "output buffer too small",
	[-TCPW_ERR_MPA_SHORT] = "MPA frame: short",
	[-TCPW_ERR_MPA_KEY] = "MPA frame: bad key",
	[-TCPW_ERR_MPA_KIND] = "MPA frame: Request and Reply swapped",
	[-TCPW_ERR_MPA_REV] = "MPA frame: unsupported revision",
	[-TCPW_ERR_MPA_PD_LEN] = "MPA frame: private data over 512 bytes",
	[-TCPW_ERR_MPA_TRAILING] = "MPA frame: bytes after the frame",
	[-TCPW_ERR_MPA_V2_SHORT] = "MPA frame: enhanced without the IRD/ORD block",
	[-TCPW_ERR_MPA_REJECT_BIT] = "MPA frame: reject bit in a Request",
	[-TCPW_ERR_MPA_MARKERS] = "MPA: markers requested (not supported)",
	[-TCPW_ERR_MPA_REJECTED] = "MPA: connection rejected by the Responder",
	[-TCPW_ERR_MPA_IRD] = "MPA: insufficient IRD for the Responder's ORD",
	[-TCPW_ERR_MPA_NO_RTR] = "MPA: no matching RTR option",
	[-TCPW_ERR_MPA_REPLY] = "MPA: Reply does not match the Request",
	[-TCPW_ERR_FPDU_SHORT] = "FPDU: ULPDU length below a DDP header",
	[-TCPW_ERR_FPDU_LONG] = "FPDU: ULPDU length over the limit",
	[-TCPW_ERR_FPDU_CRC] = "FPDU: CRC32c mismatch",
	[-TCPW_ERR_DDP_SHORT] = "DDP: segment shorter than its header",
	[-TCPW_ERR_DDP_VERSION] = "DDP: bad version",
	[-TCPW_ERR_DDP_RESERVED] = "DDP: reserved bits set",
	[-TCPW_ERR_DDP_TAGGED] = "DDP: tagged flag wrong for the opcode",
	[-TCPW_ERR_DDP_QN] = "DDP: invalid queue number",
	[-TCPW_ERR_DDP_MSN] = "DDP: MSN out of sequence",
	[-TCPW_ERR_DDP_MO] = "DDP: MO does not continue the message",
	[-TCPW_ERR_DDP_STAG] = "DDP: STag changed inside a message",
	[-TCPW_ERR_DDP_TO] = "DDP: TO does not continue the message",
	[-TCPW_ERR_DDP_TO_WRAP] = "DDP: tagged offset wraps",
	[-TCPW_ERR_DDP_TOO_LONG] = "DDP: message too long",
	[-TCPW_ERR_RDMAP_VERSION] = "RDMAP: bad version",
	[-TCPW_ERR_RDMAP_RESERVED] = "RDMAP: reserved bits set",
	[-TCPW_ERR_RDMAP_OPCODE] = "RDMAP: unknown or unexpected opcode",
	[-TCPW_ERR_RDMAP_SEGMENT] = "RDMAP: message must be one segment",
	[-TCPW_ERR_RDMAP_LEN] = "RDMAP: wrong length for the opcode",
	[-TCPW_ERR_RDMAP_ATOMIC] = "RDMAP: unknown atomic operation",
	[-TCPW_ERR_RDMAP_TERM] = "RDMAP: bad Terminate header",
};

const char *tcpw_strerror(int err)
{
	if (err > 0 || err <= -TCPW_ERR_COUNT_ || !err_names[-err])
		return "unknown error";
	return err_names[-err];
}

#define TERM(l, t, c) { .layer = TCPW_LAYER_##l, .etype = (t), .ecode = (c) }

/* Terminates of the errors that do not depend on the buffer model.
 * MPA-level problems are LLP etype 0 (RFC 5044, RFC 6581 codes 5-7);
 * what the codec cannot place in a finer class is "unspecified". */
static const struct tcpw_term_code err_terms[TCPW_ERR_COUNT_] = {
	[-TCPW_ERR_INVAL] = TERM(RDMAP, 0, 0x00),	/* local catastrophic */
	[-TCPW_ERR_NOSPACE] = TERM(RDMAP, 0, 0x00),
	[-TCPW_ERR_MPA_SHORT] = TERM(LLP, 0, 0x04),	/* invalid Request/Reply */
	[-TCPW_ERR_MPA_KEY] = TERM(LLP, 0, 0x04),
	[-TCPW_ERR_MPA_KIND] = TERM(LLP, 0, 0x04),
	[-TCPW_ERR_MPA_REV] = TERM(LLP, 0, 0x04),
	[-TCPW_ERR_MPA_PD_LEN] = TERM(LLP, 0, 0x04),
	[-TCPW_ERR_MPA_TRAILING] = TERM(LLP, 0, 0x04),
	[-TCPW_ERR_MPA_V2_SHORT] = TERM(LLP, 0, 0x04),
	[-TCPW_ERR_MPA_REJECT_BIT] = TERM(LLP, 0, 0x04),
	[-TCPW_ERR_MPA_MARKERS] = TERM(LLP, 0, 0x04),
	[-TCPW_ERR_MPA_REJECTED] = TERM(LLP, 0, 0x04),
	[-TCPW_ERR_MPA_IRD] = TERM(LLP, 0, 0x06),
	[-TCPW_ERR_MPA_NO_RTR] = TERM(LLP, 0, 0x07),
	[-TCPW_ERR_MPA_REPLY] = TERM(LLP, 0, 0x04),
	[-TCPW_ERR_FPDU_SHORT] = TERM(LLP, 0, 0x03),	/* marker/length mismatch */
	[-TCPW_ERR_FPDU_LONG] = TERM(LLP, 0, 0x03),
	[-TCPW_ERR_FPDU_CRC] = TERM(LLP, 0, 0x02),
	[-TCPW_ERR_DDP_SHORT] = TERM(DDP, 0, 0x00),	/* local catastrophic */
	[-TCPW_ERR_DDP_RESERVED] = TERM(DDP, 0, 0x00),
	[-TCPW_ERR_DDP_TAGGED] = TERM(RDMAP, 2, 0x06),	/* unexpected opcode */
	[-TCPW_ERR_DDP_QN] = TERM(DDP, 2, 0x01),
	[-TCPW_ERR_DDP_MSN] = TERM(DDP, 2, 0x03),	/* MSN range not valid */
	[-TCPW_ERR_DDP_MO] = TERM(DDP, 2, 0x04),
	[-TCPW_ERR_DDP_STAG] = TERM(DDP, 1, 0x00),	/* invalid STag */
	[-TCPW_ERR_DDP_TO] = TERM(DDP, 1, 0x01),	/* base or bounds */
	[-TCPW_ERR_DDP_TO_WRAP] = TERM(DDP, 1, 0x03),
	[-TCPW_ERR_DDP_TOO_LONG] = TERM(DDP, 2, 0x05),
	[-TCPW_ERR_RDMAP_VERSION] = TERM(RDMAP, 2, 0x05),
	[-TCPW_ERR_RDMAP_RESERVED] = TERM(RDMAP, 2, 0xff),
	[-TCPW_ERR_RDMAP_OPCODE] = TERM(RDMAP, 2, 0x06),
	[-TCPW_ERR_RDMAP_SEGMENT] = TERM(RDMAP, 2, 0xff),
	[-TCPW_ERR_RDMAP_LEN] = TERM(RDMAP, 2, 0xff),
	[-TCPW_ERR_RDMAP_ATOMIC] = TERM(RDMAP, 2, 0x06),
	[-TCPW_ERR_RDMAP_TERM] = TERM(RDMAP, 2, 0xff),
};

void tcpw_err_term(int err, bool tagged, struct tcpw_term_code *code_p)
{
	if (err == TCPW_ERR_DDP_VERSION) {
		/* The DDP version code sits in the class of the segment. */
		*code_p = tagged ? (struct tcpw_term_code)TERM(DDP, 1, 0x04)
				 : (struct tcpw_term_code)TERM(DDP, 2, 0x06);
		return;
	}
	if (err >= 0 || err <= -TCPW_ERR_COUNT_) {
		*code_p = (struct tcpw_term_code)TERM(RDMAP, 2, 0xff);
		return;
	}
	*code_p = err_terms[-err];
}
