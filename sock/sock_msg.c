/*
 * sock_msg.c - how rsocket's 32-bit messages travel: as the immediate
 * data of an RDMA WRITE WITH IMM, or, where the connection has no such
 * operation (iWARP: RFC 5040 has none; RFC 7306 adds it but siw does not
 * speak it), in rsocket's iWARP mode: a plain RDMA WRITE of the payload,
 * if any, then a 4-byte inline SEND carrying the message (docs/wire.md,
 * section 1, "iWARP mode").
 *
 * librdmacm picks the mode by the device's transport (IBV_TRANSPORT_IWARP:
 * RS_OPT_MSG_SEND), each end on its own, so two ends on one fabric agree.
 * ferry asks the QP once the connection is up (ferry_qp_write_imm_ok): on
 * verbs that is the device's transport too; on ferry's tcp transport it
 * is what the MPA exchange settled, so two ferry ends keep the faster
 * WRITE WITH IMM and an end facing siw sends messages.
 *
 * Receives.  A SEND needs a buffer: in iWARP mode each receive carries a
 * 4-byte slot, as rsocket's do (it keeps rq_size of them after its ring).
 * Which form a message came in is told by its completion (FERRY_WC_WITH_IMM
 * or not), as librdmacm does, so the slots are posted wherever the mode
 * may turn out to be iWARP's -- on every transport but shm, whose QPs
 * always take immediate data -- and before it is known: on tcp the peer's
 * first message may come before our ESTABLISHED.  The slots live after the
 * send ring, in its registration, which grants the peer nothing.
 *
 * Credits.  Each message still takes one receive at the peer, WRITE or no
 * WRITE, so credits count as before; what doubles is the SQ slots a
 * message with a payload takes (the WRITE and the SEND), as rsocket's
 * sqe_avail does.
 *
 * Byte order.  The message word is sent in the sender's byte order: rsocket
 * copies its host-order word into the SEND and reads the slot as its own,
 * so this is what it does between ends of one byte order; a receiver whose
 * peer's NET flag differs swaps it.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "sock-internal.h"

/*
 * Slots beyond the deepest receive queue (sock_recv_depth): receives are
 * posted by the progress (cqlock) and by a growing credit window (plock),
 * each numbering its own from one counter, so a slot's number may run a
 * batch ahead of its place in the queue.
 */
#define SOCK_MSG_SLACK		64

/* FERRY_STREAM_IWARP=1: speak iWARP mode on every connection but shm's,
 * whatever the QP takes, to test it between ferry ends (-1: not read). */
static atomic_int sock_msg_forced = -1;

static bool sock_msg_forced_get(void)
{
	int v = atomic_load_explicit(&sock_msg_forced, memory_order_relaxed);

	if (v < 0) {
		const char *env = getenv("FERRY_STREAM_IWARP");

		v = env && !strcmp(env, "1");
		if (env && *env && strcmp(env, "0") && strcmp(env, "1"))
			ferry_warn("FERRY_STREAM_IWARP=%s is not 0 or 1: using 0", env);
		atomic_store_explicit(&sock_msg_forced, v, memory_order_relaxed);
	}
	return v;
}

void sock_msg_force(int on)
{
	atomic_store_explicit(&sock_msg_forced, on, memory_order_relaxed);
}

uint32_t sock_msg_slot_count(const struct ferry_sock *s)
{
	return sock_recv_depth(s) + SOCK_MSG_SLACK;
}

size_t sock_msg_area_size(const struct ferry_sock *s)
{
	return (size_t)sock_msg_slot_count(s) * sizeof(uint32_t);
}

/*
 * Not on shm, even when forced: its SENDs land only in ferry_alloc memory
 * the peer has mapped, which the send ring is not.
 */
void sock_msg_buffers(struct ferry_sock *s)
{
	s->recv_slots = !s->shm_transport;
	s->msg_slot = (uint32_t *)(s->sbuf + s->sbuf_size);
	atomic_store(&s->msg_slot_next, 0);
}

/*
 * The QP is made: iWARP mode's SEND is inline (the word lives on the
 * stack of its poster), so a QP that may need it must take 4 bytes
 * inline.  -1 + ENOTSUP if it cannot.
 */
int sock_msg_qp_check(struct ferry_sock *s, uint32_t max_inline)
{
	if (s->recv_slots && max_inline < sizeof(uint32_t)) {
		ferry_info("sock %d: the QP sends %u bytes inline: rsocket's iWARP mode needs 4",
			   s->fd, max_inline);
		return ERR(ENOTSUP);
	}
	return 0;
}

void sock_msg_setup(struct ferry_sock *s)
{
	s->msg_send = s->recv_slots && (sock_msg_forced_get() || !ferry_qp_write_imm_ok(s->qp));
	if (s->msg_send)
		s->direct = false;	/* a direct write is one WR; this mode posts two */
	ferry_debug("sock %d: messages as %s", s->fd,
		    s->msg_send ? "SENDs (rsocket's iWARP mode)" : "immediate data");
}

void sock_msg_recv_wr(struct ferry_sock *s, struct ferry_recv_wr *wr, struct ferry_sge *sge)
{
	uint32_t slot;

	if (!s->recv_slots) {
		*wr = (struct ferry_recv_wr){ .wr_id = SOCK_WR_RECV };
		return;
	}
	slot = atomic_fetch_add_explicit(&s->msg_slot_next, 1, memory_order_relaxed) %
	       sock_msg_slot_count(s);
	*sge = (struct ferry_sge){ (uintptr_t)&s->msg_slot[slot], sizeof(uint32_t),
				   s->smr->lkey };
	*wr = (struct ferry_recv_wr){ .wr_id = SOCK_WR_RECV | slot, .sg_list = sge,
				      .num_sge = 1 };
}

/*
 * The message a successful receive completion brings, host order, in
 * *@msg_p; false if it is none of the two forms (the peer broke the
 * protocol: the caller resets the connection).  A SEND must be exactly
 * the 4 bytes of a word, into a slot of ours.
 */
bool sock_msg_of_wc(struct ferry_sock *s, const struct ferry_wc *wc, uint32_t *msg_p)
{
	uint64_t slot = wc->wr_id & ~SOCK_WR_RECV;
	uint32_t msg;

	if (wc->wc_flags & FERRY_WC_WITH_IMM) {
		*msg_p = be32toh(wc->imm_data);
		return true;
	}
	if (!s->recv_slots || wc->opcode != FERRY_WC_RECV || wc->byte_len != sizeof(msg) ||
	    slot >= sock_msg_slot_count(s)) {
		ferry_info("sock %d: the peer sent a message of %u bytes without immediate "
			   "data (opcode %d)", s->fd, wc->byte_len, (int)wc->opcode);
		return false;
	}
	memcpy(&msg, &s->msg_slot[slot], sizeof(msg));
	*msg_p = s->peer_swap ? __builtin_bswap32(msg) : msg;
	return true;
}

/*
 * Post @wr, a WRITE WITH IMM of rsocket's, as iWARP mode has it: the
 * payload as a plain WRITE (none for a bare message), then the word as an
 * inline SEND, which is the one signalled when @force_signal asks (a
 * control message's completion is waited for) and frees nothing of the
 * ring.  plock held.  0, or -1 (the connection is reset).
 */
int sock_msg_post(struct ferry_sock *s, struct ferry_send_wr *wr, uint32_t sbuf_bytes,
		  bool force_signal)
{
	uint32_t msg = be32toh(wr->imm_data);
	struct ferry_sge word = { (uintptr_t)&msg, sizeof(msg), 0 };
	struct ferry_send_wr send = {
		.sg_list = &word,
		.num_sge = 1,
		.opcode = FERRY_WR_SEND,
		.send_flags = FERRY_SEND_INLINE,
	};
	uint32_t i, len = 0;

	for (i = 0; i < (uint32_t)wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len) {
		wr->opcode = FERRY_WR_RDMA_WRITE;
		wr->imm_data = 0;
		if (sock_post_one(s, wr, sbuf_bytes, false) < 0)
			return -1;
	}
	return sock_post_one(s, &send, 0, force_signal);
}
