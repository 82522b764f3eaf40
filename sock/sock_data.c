/*
 * sock_data.c - the data path of rsocket's protocol: data written into the
 * peer's ring with RDMA WRITE WITH IMM, credits and target SGL updates
 * going back, control messages, and the progress that turns completions
 * into ring and credit state.
 *
 * Sequence numbers of messages (sseq_no, sseq_comp, rseq_no, rseq_comp)
 * are 16 bits wide and compared modulo 2^16, as the 16-bit credits field
 * of the connect data implies; ring positions are absolute 64-bit byte
 * counts, taken modulo the (power of two) ring size.
 *
 * Credits count data and IOMAP_SGL messages only, on both sides, as
 * rsocket counts them: a credit or SGL update and a control message take
 * none.  Counting those too (as this file once did) is harmless between
 * two ferry ends but not against rsocket, whose grants then fall behind
 * what ferry thinks it has sent: ferry's credits shrink by one per update
 * it sends until it stalls with the peer waiting on it, or wrap around
 * 2^16 and overrun the peer.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <endian.h>
#include <signal.h>
#include <string.h>

#include "sock-internal.h"

/*
 * wr_id of receives.  Sends are signalled only now and then (see
 * sock_post_write); a signalled send's wr_id packs what it and the
 * unsignalled sends before it hold: SQ slots (high half) and sbuf bytes
 * (low half).  Unsignalled sends carry 0, so flushed ones free nothing.
 */
#define SOCK_WR_SLOTS(id)	((uint32_t)((id) >> 32))
#define SOCK_WR_BYTES(id)	((uint32_t)(id))

static inline uint32_t rs_imm(uint32_t op, uint32_t value)
{
	return htobe32(op | (value & RS_VALUE_MASK));
}

/* Does a message of this type take one of the receiver's credits? */
static inline bool rs_op_takes_credit(uint32_t op)
{
	return op == RS_OP_DATA || op == RS_OP_IOMAP_SGL;
}

/* --- posting (plock held) --- */

/*
 * Signal a send when a quarter of the SQ or of the send ring went out
 * unsignalled since the last signalled one: whatever the sender waits
 * for, most of it is covered by a signalled send still to complete, so
 * waiting for SQ slots or ring space always ends.  Control messages are
 * always signalled: close drains on them and keepalive probes on verbs
 * are acknowledged by their completion.
 */
static inline bool sock_want_signal(struct ferry_sock *s, bool force)
{
	return force || s->unsignaled >= s->sq_size / 4 ||
	       s->unsignaled_bytes >= s->sbuf_size / 4;
}

/*
 * Post @wr, signalled now and then (sock_want_signal); @sbuf_bytes of the
 * send ring are freed by its completion.  @direct: through
 * ferry_post_send_direct, its payload read from the caller's memory
 * during the call; one the provider does not take that way (EAGAIN,
 * EOPNOTSUPP) returns 1 with nothing changed, for the caller to stage.
 */
static int sock_post_send(struct ferry_sock *s, struct ferry_send_wr *wr, uint32_t sbuf_bytes,
			  bool force_signal, bool direct, unsigned int how)
{
	struct ferry_send_wr *bad;
	bool signal;
	int ret;

	s->unsignaled++;
	s->unsignaled_bytes += sbuf_bytes;
	signal = sock_want_signal(s, force_signal);
	if (signal) {
		wr->send_flags |= FERRY_SEND_SIGNALED;
		wr->wr_id = (uint64_t)s->unsignaled << 32 | s->unsignaled_bytes;
	}
	ret = direct ? ferry_post_send_direct(s->qp, wr, how) : ferry_post_send(s->qp, wr, &bad);
	if (ret < 0) {
		s->unsignaled--;
		s->unsignaled_bytes -= sbuf_bytes;
		if (direct && (errno == EAGAIN || errno == EOPNOTSUPP)) {
			if (errno == EOPNOTSUPP)
				s->direct = false;
			wr->send_flags &= ~(unsigned int)FERRY_SEND_SIGNALED;
			wr->wr_id = 0;
			return 1;
		}
		ferry_info("sock %d: post_send: %m", s->fd);
		atomic_fetch_or(&s->closed, SOCK_RESET);
		return -1;
	}
	if (signal)
		s->unsignaled = s->unsignaled_bytes = 0;
	atomic_fetch_sub(&s->sqe_avail, 1);
	return 0;
}

int sock_post_one(struct ferry_sock *s, struct ferry_send_wr *wr, uint32_t sbuf_bytes,
		  bool force_signal)
{
	return sock_post_send(s, wr, sbuf_bytes, force_signal, false, 0);
}

/*
 * Post one of rsocket's messages (or a plain write), as immediate data or
 * in iWARP mode (sock_msg.c).  Neither a plain write nor an update or
 * control message takes a receive credit.
 */
static int sock_post(struct ferry_sock *s, struct ferry_send_wr *wr, uint32_t sbuf_bytes,
		     bool force_signal, bool direct, unsigned int how)
{
	bool credit = wr->opcode == FERRY_WR_RDMA_WRITE_WITH_IMM &&
		      rs_op_takes_credit(be32toh(wr->imm_data) & RS_OP_MASK);
	int ret;

	if (s->msg_send && wr->opcode == FERRY_WR_RDMA_WRITE_WITH_IMM)
		ret = sock_msg_post(s, wr, sbuf_bytes, force_signal);
	else
		ret = sock_post_send(s, wr, sbuf_bytes, force_signal, direct, how);
	if (ret == 0 && credit)
		s->sseq_no++;
	return ret;
}

int sock_post_wr(struct ferry_sock *s, enum ferry_wr_opcode op, struct ferry_sge *sge,
		 int nsge, unsigned int flags, uint64_t raddr, uint32_t rkey, uint32_t imm,
		 uint32_t sbuf_bytes, bool force_signal)
{
	struct ferry_send_wr wr = {
		.sg_list = sge,
		.num_sge = nsge,
		.opcode = op,
		.send_flags = flags,
		.imm_data = imm,
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	};

	return sock_post(s, &wr, sbuf_bytes, force_signal, false, 0);
}

static inline int sock_post_write(struct ferry_sock *s, struct ferry_sge *sge, int nsge,
				  unsigned int flags, uint64_t raddr, uint32_t rkey,
				  uint32_t imm, uint32_t sbuf_bytes, bool force_signal)
{
	return sock_post_wr(s, FERRY_WR_RDMA_WRITE_WITH_IMM, sge, nsge, flags, raddr, rkey,
			    imm, sbuf_bytes, force_signal);
}

uint16_t sock_credits(struct ferry_sock *s)
{
	return (uint16_t)(atomic_load_explicit(&s->sseq_comp, memory_order_acquire) -
			  s->sseq_no);
}

/* SQ slots are free for a control message (plock held, or as a hint). */
bool sock_ctrl_avail(struct ferry_sock *s)
{
	return atomic_load(&s->sqe_avail) >= (int)sock_msg_wrs(s);
}

static bool sock_ctrl_ready(struct ferry_sock *s)
{
	sock_progress(s);
	return sock_ctrl_avail(s) || (atomic_load(&s->closed) & SOCK_RESET);
}

/*
 * A 0-byte control message; takes plock.  The caller holds none of the
 * locks sock_wait's sleeper needs (slock is fine).  Data leaves SQ slots
 * to control messages, so the wait is rare; it is bounded by @timeout_ms.
 */
int sock_send_ctrl(struct ferry_sock *s, uint32_t ctrl, int timeout_ms)
{
	uint64_t deadline = monotime_ns() + (uint64_t)timeout_ms * 1000000u;
	int ret;

	if (!s->qp)
		return ERR(ENOTCONN);
	for (;;) {
		pthread_mutex_lock(&s->plock);
		if (sock_ctrl_avail(s))
			break;
		pthread_mutex_unlock(&s->plock);
		if (atomic_load(&s->closed) & SOCK_RESET)
			return ERR(ECONNRESET);
		if (timeout_ms <= 0)
			return ERR(EAGAIN);
		if (sock_wait(s, sock_ctrl_ready, deadline) < 0)
			return -1;
	}
	ret = sock_post_write(s, NULL, 0, 0, s->remote_sgl.addr, s->remote_sgl.key,
			      rs_imm(RS_OP_CTRL, ctrl), 0, true);
	pthread_mutex_unlock(&s->plock);
	return ret;
}

/* --- receives and credits --- */

static int sock_post_recvs(struct ferry_sock *s, uint32_t n)
{
	struct ferry_recv_wr wrs[SOCK_POLL_BATCH], *bad;
	struct ferry_sge slots[SOCK_POLL_BATCH];
	uint32_t i, k;

	while (n) {
		k = n < SOCK_POLL_BATCH ? n : SOCK_POLL_BATCH;
		for (i = 0; i < k; i++) {
			sock_msg_recv_wr(s, &wrs[i], &slots[i]);
			wrs[i].next = i + 1 < k ? &wrs[i + 1] : NULL;
		}
		if (ferry_post_recv(s->qp, wrs, &bad) < 0)
			return -1;
		n -= k;
	}
	return 0;
}

/* The first window's credits, and receives for them and for control
 * messages (the rest come as the window grows). */
int sock_post_initial_recvs(struct ferry_sock *s)
{
	s->credit_window = s->rq_size < SOCK_FIRST_CREDITS ? s->rq_size : SOCK_FIRST_CREDITS;
	s->rseq_comp = (uint16_t)s->credit_window;
	return sock_post_recvs(s, s->credit_window + RS_QP_CTRL_SIZE);
}

/*
 * Double the credit window (up to rq_size): the peer used half of it since
 * the last grant.  The new receives are posted before the grant that
 * offers them goes out.  plock held; the window stays if posting fails.
 */
static void sock_credit_window_grow(struct ferry_sock *s)
{
	uint32_t w = s->credit_window * 2;

	if (w > s->rq_size)
		w = s->rq_size;
	if (sock_post_recvs(s, w - s->credit_window) == 0)
		s->credit_window = w;
}

/*
 * sock_give_credits - grant credits (absolute: rseq_no + the credit window)
 * when half the window was used since the last grant, and publish the next
 * half of the ring once the application has freed it.  Takes plock.
 *
 * The ring's second half (the connect data gave the first) goes out only
 * once data came into the first: until then the peer has nothing it could
 * put there, and an idle connection sends no update at all, so neither end
 * writes the other's target SGL and its page of shared memory stays
 * unallocated.
 */
void sock_give_credits(struct ferry_sock *s, bool force)
{
	uint16_t rseq, limit;
	uint64_t consumed, half = s->rbuf_size / 2;
	bool publish, credit;
	struct rs_sge sge;
	struct ferry_sge g;

	/* Not before ESTABLISHED: the peer's target SGL is not known yet, and
	 * a peer that finished first may already have sent (a connect still
	 * waiting takes that completion); the credits go with the next look. */
	if (!s->qp || !sock_is_connected(s) || !s->remote_sgl.length ||
	    (atomic_load(&s->closed) & (SOCK_RESET | SOCK_DISC_SENT)))
		return;
	pthread_mutex_lock(&s->plock);
	rseq = atomic_load(&s->rseq_no);
	consumed = atomic_load(&s->r_consumed);
	limit = (uint16_t)(rseq + s->credit_window);
	publish = atomic_load_explicit(&s->r_received, memory_order_relaxed) &&
		  s->r_published + half <= consumed + s->rbuf_size;
	credit = (uint16_t)(limit - s->rseq_comp) >= s->credit_window / 2;
	if ((!publish && !credit && !force) || !sock_ctrl_avail(s)) {
		pthread_mutex_unlock(&s->plock);
		return;
	}
	if (credit && s->credit_window < s->rq_size) {
		sock_credit_window_grow(s);
		limit = (uint16_t)(rseq + s->credit_window);
	}
	if (publish) {
		sge.addr = (uintptr_t)(s->rbuf + (s->r_published & (s->rbuf_size - 1)));
		sge.key = s->rmr->rkey;
		sge.length = (uint32_t)half;
		if (s->peer_swap) {
			sge.addr = __builtin_bswap64(sge.addr);
			sge.key = __builtin_bswap32(sge.key);
			sge.length = __builtin_bswap32(sge.length);
		}
		g.addr = (uintptr_t)&sge;
		g.length = sizeof(sge);
		g.lkey = 0;
		if (sock_post_write(s, &g, 1, FERRY_SEND_INLINE,
				    s->remote_sgl.addr + (uint64_t)s->remote_idx * sizeof(sge),
				    s->remote_sgl.key, rs_imm(RS_OP_SGL, limit), 0, false) == 0) {
			s->remote_idx = (s->remote_idx + 1) % (int)s->remote_sgl.length;
			s->r_published += half;
			s->rseq_comp = limit;
		}
	} else if (sock_post_write(s, NULL, 0, 0, s->remote_sgl.addr, s->remote_sgl.key,
				   rs_imm(RS_OP_SGL, limit), 0, force) == 0) {
		s->rseq_comp = limit;
	}
	pthread_mutex_unlock(&s->plock);
}

/* --- progress --- */

/* A failed completion: the connection is gone, orderly or not. */
static void sock_wc_failed(struct ferry_sock *s, const struct ferry_wc *wc)
{
	unsigned int closed = atomic_load(&s->closed);

	if (wc->status != FERRY_WC_WR_FLUSH_ERR)
		ferry_info("sock %d: %s completion: %s", s->fd,
			   wc->opcode & FERRY_WC_RECV ? "receive" : "send",
			   ferry_wc_status_str(wc->status));
	if (!(closed & SOCK_PEER_GONE) || wc->status != FERRY_WC_WR_FLUSH_ERR)
		atomic_fetch_or(&s->closed, SOCK_RESET);
}

static void sock_recv_msg(struct ferry_sock *s, uint32_t imm, bool *answer)
{
	uint32_t value = imm & RS_VALUE_MASK;

	if (rs_op_takes_credit(imm & RS_OP_MASK))
		atomic_fetch_add(&s->rseq_no, 1);
	switch (imm & RS_OP_MASK) {
	case RS_OP_DATA:
		atomic_fetch_add_explicit(&s->r_received, value, memory_order_release);
		sock_stat_add(&s->stat->rx_ring_in, value);
		break;
	case RS_OP_SGL:
		atomic_store_explicit(&s->sseq_comp, (uint16_t)value, memory_order_release);
		atomic_store_explicit(&s->full_since_ns, 0, memory_order_relaxed);
		break;
	case RS_OP_CTRL:
		if (value == RS_CTRL_DISCONNECT)
			atomic_fetch_or(&s->closed, SOCK_PEER_SHUT_WR | SOCK_PEER_GONE);
		else if (value == RS_CTRL_SHUTDOWN)
			atomic_fetch_or(&s->closed, SOCK_PEER_SHUT_WR);
		else if (value == RS_CTRL_KEEPALIVE)
			*answer = true;
		break;
	case RS_OP_IOMAP_SGL:
		sock_iomap_take(s, value);
		break;
	default:
		break;
	}
}

int sock_progress(struct ferry_sock *s)
{
	struct ferry_wc wc[SOCK_POLL_BATCH];
	bool got_recv = false, answer = false;
	int n, i, total = 0;
	uint32_t msg;

	if (!s->cq)
		return 0;
	pthread_mutex_lock(&s->cqlock);
	do {
		n = ferry_poll_cq(s->cq, SOCK_POLL_BATCH, wc);
		for (i = 0; i < n; i++) {
			if (wc[i].opcode & FERRY_WC_RECV) {
				s->recv_repost++;
				if (wc[i].status != FERRY_WC_SUCCESS) {
					sock_wc_failed(s, &wc[i]);
					continue;
				}
				if (!sock_msg_of_wc(s, &wc[i], &msg)) {
					atomic_fetch_or(&s->closed, SOCK_RESET);
					continue;
				}
				got_recv = true;
				sock_recv_msg(s, msg, &answer);
			} else {
				if (wc[i].status != FERRY_WC_SUCCESS)
					sock_wc_failed(s, &wc[i]);
				else if (s->verbs_transport)
					s->ka_probe_acked = true;
				atomic_fetch_add(&s->sqe_avail, (int)SOCK_WR_SLOTS(wc[i].wr_id));
				atomic_fetch_add(&s->sbuf_free, SOCK_WR_BYTES(wc[i].wr_id));
				sock_stat_add(&s->stat->tx_ring_out, SOCK_WR_BYTES(wc[i].wr_id));
			}
		}
		total += n > 0 ? n : 0;
	} while (n == SOCK_POLL_BATCH);
	if (s->recv_repost && !(atomic_load(&s->closed) & SOCK_RESET)) {
		if (sock_post_recvs(s, s->recv_repost) == 0)
			s->recv_repost = 0;
	}
	pthread_mutex_unlock(&s->cqlock);
	sock_stat_flags(s);
	if (got_recv) {
		if (s->keepalive)
			atomic_store(&s->last_rx_ns, monotime_ns());
		sock_give_credits(s, answer);
		/* A receive may be the peer's update that frees its ring. */
		if (sock_backlog_bytes(s) || atomic_load(&s->bl_ctrl) >= 0)
			sock_backlog_kick(s);
	}
	return total;
}

/* --- sending --- */

/* The peer's buffer the next write goes to (slock held, or as a hint). */
static inline volatile struct rs_sge *sock_target(struct ferry_sock *s)
{
	return s->target_idx < 0 ? &s->first_target : &s->target_sgl[s->target_idx];
}

/* On to the next entry; first_target stands for entry 0.  slock held. */
static inline void sock_target_next(struct ferry_sock *s)
{
	s->target_idx = s->target_idx < 0 ? 1 : (s->target_idx + 1) % RS_SGL_SIZE;
}

/*
 * Bytes that may go in the next write; slock held.  The last
 * RS_QP_CTRL_SIZE credits stay unused: an rsocket receiver posts one
 * receive per credit it grants, so the control messages in flight find
 * receives too and never wait on the peer's RNR retries.
 */
uint32_t sock_send_space(struct ferry_sock *s)
{
	volatile struct rs_sge *t = sock_target(s);
	/* The peer writes the entry's length last: what it published before
	 * (the address) is seen with it. */
	uint32_t space = __atomic_load_n(&t->length, __ATOMIC_ACQUIRE);
	uint32_t free_bytes = atomic_load(&s->sbuf_free);

	if (!space || sock_credits(s) <= RS_QP_CTRL_SIZE ||
	    atomic_load(&s->sqe_avail) < RS_QP_CTRL_SIZE + (int)sock_msg_wrs(s))
		return 0;
	if (space > RS_MAX_TRANSFER)
		space = RS_MAX_TRANSFER;
	if (space > free_bytes)
		space = free_bytes;
	return space;
}

/*
 * Writable as TCP is: while the backlog has room, even if the peer's ring
 * is full (a hint, read without slock).
 */
bool sock_writable(struct ferry_sock *s)
{
	size_t queued = sock_backlog_bytes(s);

	return !s->qp || (atomic_load(&s->closed) & (SOCK_RESET | SOCK_PEER_GONE)) ||
	       queued < s->bl_limit || (!queued && sock_send_space(s) > 0);
}

/*
 * For a blocking sender waiting with slock held: it moves its own backlog
 * on, and waits for room in the peer's ring, or for the ring to have
 * stalled (then the backlog takes what it writes).
 */
static bool sock_send_ready(struct ferry_sock *s)
{
	sock_progress(s);
	sock_backlog_flush(s);
	return !s->qp || (atomic_load(&s->closed) & (SOCK_RESET | SOCK_PEER_GONE)) ||
	       (!s->bl_head && sock_send_space(s) > 0) ||
	       (sock_backlog_bytes(s) < s->bl_limit && sock_backlog_stalled(s));
}

/* The errno a send gets on a connection that cannot carry it, or 0. */
int sock_send_error(struct ferry_sock *s)
{
	unsigned int closed = atomic_load(&s->closed);

	if (!sock_is_connected(s))
		return ENOTCONN;
	if (closed & SOCK_TIMEDOUT)
		return ETIMEDOUT;
	if (closed & (SOCK_SHUT_WR | SOCK_PEER_GONE))
		return EPIPE;
	if (closed & SOCK_RESET)
		return ECONNRESET;
	return 0;
}

/*
 * Take the next piece of at most @max bytes at the iovec cursor (*@p_p:
 * where it starts) and move the cursor past it, and past the iovec if
 * that ends it (an empty one gives a 0-byte piece and is left behind).
 */
static size_t sock_cursor_step(const struct iovec **iov_p, size_t *off_p, size_t max,
			       const uint8_t **p_p)
{
	const struct iovec *v = *iov_p;
	size_t n = v->iov_len - *off_p;

	if (n > max)
		n = max;
	*p_p = (const uint8_t *)v->iov_base + *off_p;
	*off_p += n;
	if (*off_p == v->iov_len) {
		(*iov_p)++;
		*off_p = 0;
	}
	return n;
}

/* Move the iovec cursor @len bytes on. */
static void sock_skip(size_t len, const struct iovec **iov_p, size_t *off_p)
{
	const uint8_t *p;

	while (len)
		len -= sock_cursor_step(iov_p, off_p, len, &p);
}

/* Gather @len bytes from the iovec cursor into @dst. */
void sock_gather(uint8_t *dst, size_t len, const struct iovec **iov_p, size_t *off_p)
{
	while (len) {
		const uint8_t *p;
		size_t n = sock_cursor_step(iov_p, off_p, len, &p);

		memcpy(dst, p, n);
		dst += n;
		len -= n;
	}
}

/*
 * sock_stage - gather @len bytes from the cursor into what a write is sent
 * from: @small, sent inline, when they fit the inline threshold, else the
 * send ring.  Fills @sge, *@nsge_p and *@flags_p; returns the ring bytes
 * used (freed by the write's completion).  slock held, @len <= sbuf_free.
 */
uint32_t sock_stage(struct ferry_sock *s, uint32_t len, const struct iovec **iov_p,
		    size_t *off_p, uint8_t small[SOCK_SMALL_MAX], struct ferry_sge sge[2],
		    int *nsge_p, unsigned int *flags_p)
{
	uint32_t wr_bytes = 0;

	*nsge_p = 1;
	*flags_p = 0;
	if (len <= s->inline_size && len <= SOCK_SMALL_MAX) {
		sock_gather(small, len, iov_p, off_p);
		sge[0] = (struct ferry_sge){ (uintptr_t)small, len, 0 };
		*flags_p = FERRY_SEND_INLINE;
	} else {
		uint32_t head = s->sbuf_head, first = s->sbuf_size - head;

		if (first > len)
			first = len;
		sock_gather(s->sbuf + head, first, iov_p, off_p);
		sge[0] = (struct ferry_sge){ (uintptr_t)(s->sbuf + head), first, s->smr->lkey };
		if (first < len) {
			sock_gather(s->sbuf, len - first, iov_p, off_p);
			sge[1] = (struct ferry_sge){ (uintptr_t)s->sbuf, len - first,
						     s->smr->lkey };
			*nsge_p = 2;
		}
		s->sbuf_head = (head + len) & (s->sbuf_size - 1);
		atomic_fetch_sub(&s->sbuf_free, len);
		sock_stat_add(&s->stat->tx_ring_in, len);
		wr_bytes = len;
	}
	return wr_bytes;
}

/*
 * How many of the @len bytes at the cursor a direct write covers, from
 * at most two iovecs (the SGEs of a socket's QP), filling @sge and
 * *@nsge_p; 0 when a direct write does not pay: a short piece of a longer
 * write made of many small iovecs is staged whole instead.
 */
static uint32_t sock_direct_sges(struct ferry_sock *s, uint32_t len, const struct iovec *v,
				 size_t off, struct ferry_sge sge[2], int *nsge_p)
{
	uint32_t done = 0;
	int n = 0;

	if (!s->direct || len <= s->inline_size)
		return 0;
	while (done < len && n < 2) {
		size_t piece = v->iov_len - off;

		if (piece > len - done)
			piece = len - done;
		if (piece) {
			sge[n++] = (struct ferry_sge){
				(uintptr_t)((const uint8_t *)v->iov_base + off), (uint32_t)piece, 0 };
			done += (uint32_t)piece;
		}
		v++;
		off = 0;
	}
	*nsge_p = n;
	return done == len || done >= SOCK_DIRECT_MIN ? done : 0;
}

/*
 * Write at most @len bytes from the cursor into the current target
 * buffer; slock held.  Returns the bytes written, or -1.  On shm a write
 * is tried first straight from the caller's memory into the peer's ring
 * (ferry_post_send_direct): one copy of each byte on this side instead
 * of two.  Where the provider cannot take it now it is staged as usual.
 */
ssize_t sock_write_data(struct ferry_sock *s, uint32_t len, const struct iovec **iov_p,
			size_t *off_p)
{
	volatile struct rs_sge *t = sock_target(s);
	uint64_t raddr = t->addr;
	uint32_t rkey = t->key;
	uint8_t small[SOCK_SMALL_MAX];
	struct ferry_sge sge[2];
	struct ferry_send_wr wr = { .sg_list = sge, .opcode = FERRY_WR_RDMA_WRITE_WITH_IMM,
				    .wr.rdma = { .remote_addr = raddr, .rkey = rkey } };
	uint32_t wr_bytes = 0, direct;
	unsigned int flags;
	int ret = 1;

	direct = sock_direct_sges(s, len, *iov_p, *off_p, sge, &wr.num_sge);
	if (direct)
		len = direct;
	/*
	 * Consume the target entry before the write: once the data lands,
	 * the peer may read it, free the buffer and publish the next one
	 * into this very entry.
	 */
	t->addr = raddr + len;
	t->length -= len;
	if (!t->length)
		sock_target_next(s);
	wr.imm_data = rs_imm(RS_OP_DATA, len);
	if (direct) {
		unsigned int how = sock_copy_how(s, len);

		pthread_mutex_lock(&s->plock);
		ret = sock_post(s, &wr, 0, false, true, how);
		pthread_mutex_unlock(&s->plock);
		if (ret == 0) {
			sock_skip(len, iov_p, off_p);
			if (how & FERRY_DIRECT_NOCACHE)
				sock_stat_add(&s->stat->tx_nocache, len);
		}
	}
	if (ret == 1) {
		wr_bytes = sock_stage(s, len, iov_p, off_p, small, sge, &wr.num_sge, &flags);
		wr.send_flags = flags;
		pthread_mutex_lock(&s->plock);
		ret = sock_post(s, &wr, wr_bytes, false, false, 0);
		pthread_mutex_unlock(&s->plock);
	}
	return ret < 0 ? -1 : (ssize_t)len;
}

/*
 * Bytes this send may write into the peer's ring now: none while older
 * ones wait in the backlog, which goes first to keep the stream in order.
 * slock held.
 */
static uint32_t sock_send_now(struct ferry_sock *s)
{
	if (s->bl_head && (sock_backlog_flush(s) < 0 || s->bl_head))
		return 0;
	return sock_send_space(s);
}

ssize_t sock_data_send(struct ferry_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
	bool nonblock = (flags & MSG_DONTWAIT) || atomic_load(&s->nonblock);
	const struct iovec *cur = iov;
	size_t total = 0, sent = 0, off = 0;
	uint64_t start_ns = 0;
	int i, err = 0;

	for (i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	while (iovcnt > 0 && cur->iov_len == 0 && cur < iov + iovcnt - 1)
		cur++;
	pthread_mutex_lock(&s->slock);
	if (s->direct && total >= SOCK_COPY_LARGE)
		start_ns = monotime_ns();	/* for sock_copy_account */
	while (sent < total || (total == 0 && !sent)) {
		uint32_t space;
		ssize_t written;

		err = sock_send_error(s);
		if (err || total == 0)
			break;
		space = sock_send_now(s);
		if (!space) {
			sock_progress(s);
			space = sock_send_now(s);
		}
		if (!space) {
			size_t queued = 0;

			/* A non-blocking writer cannot wait to see whether the
			 * reader keeps up: its bytes go to the backlog at once. */
			if (nonblock || sock_backlog_stalled(s))
				queued = sock_backlog_put(s, total - sent, &cur, &off);
			if (queued) {
				sent += queued;
				sock_stat_add(&s->stat->tx_bytes, queued);
				continue;
			}
			if (nonblock) {
				err = EAGAIN;
				break;
			}
			if (sock_wait(s, sock_send_ready, sock_backlog_full(s)) < 0 &&
			    errno != ETIMEDOUT) {
				err = errno;
				break;
			}
			continue;
		}
		if (space > total - sent)
			space = (uint32_t)(total - sent);
		while (cur->iov_len == 0)
			cur++;
		written = sock_write_data(s, space, &cur, &off);
		if (written < 0) {
			err = sock_send_error(s);
			break;
		}
		sent += (size_t)written;
		sock_stat_add(&s->stat->tx_bytes, (uint64_t)written);
	}
	if (start_ns && sent)
		sock_copy_account(s, sent, start_ns, monotime_ns());
	pthread_mutex_unlock(&s->slock);
	if (sent)
		return (ssize_t)sent;
	if (err == EPIPE && !(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	return err ? ERR(err) : 0;
}

/* Every send completed (a peer that sent DISCONNECT reads nothing more). */
static bool sock_sends_done(struct ferry_sock *s)
{
	sock_progress(s);
	return atomic_load(&s->sqe_avail) >= (int)s->sq_size ||
	       (atomic_load(&s->closed) & (SOCK_RESET | SOCK_PEER_GONE));
}

/*
 * Wait, sleeping on the completion channel, until every send completed or
 * @timeout_ms passed.  On verbs a send completes when the peer's device
 * acknowledged it; one that never will fails the QP after the retries.
 */
bool sock_drain_sends(struct ferry_sock *s, int timeout_ms)
{
	return sock_wait(s, sock_sends_done,
			 monotime_ns() + (uint64_t)timeout_ms * 1000000u) == 0;
}

/* --- receiving --- */

uint64_t sock_readable_bytes(struct ferry_sock *s)
{
	return atomic_load_explicit(&s->r_received, memory_order_acquire) -
	       atomic_load_explicit(&s->r_consumed, memory_order_relaxed);
}

static bool sock_recv_ready(struct ferry_sock *s)
{
	sock_progress(s);
	return sock_readable_bytes(s) > 0 || atomic_load(&s->closed) || !sock_is_connected(s);
}

/* Copy up to @len ring bytes from absolute position @pos into the iovecs. */
static size_t sock_ring_copy(struct ferry_sock *s, uint64_t pos, size_t len,
			     const struct iovec **iov_p, size_t *off_p, const struct iovec *end)
{
	size_t done = 0;

	while (done < len && *iov_p < end) {
		const struct iovec *v = *iov_p;
		size_t ring_off = (size_t)((pos + done) & (s->rbuf_size - 1));
		size_t n = len - done;

		if (n > s->rbuf_size - ring_off)
			n = s->rbuf_size - ring_off;
		if (n > v->iov_len - *off_p)
			n = v->iov_len - *off_p;
		memcpy((uint8_t *)v->iov_base + *off_p, s->rbuf + ring_off, n);
		done += n;
		*off_p += n;
		if (*off_p == v->iov_len) {
			(*iov_p)++;
			*off_p = 0;
		}
	}
	return done;
}

ssize_t sock_data_recv(struct ferry_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
	bool nonblock = (flags & MSG_DONTWAIT) || atomic_load(&s->nonblock);
	const struct iovec *cur = iov, *end = iov + iovcnt;
	size_t total = 0, got = 0, off = 0;
	int i, err = 0;

	for (i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	if (!s->qp)
		return sock_is_connected(s) ? 0 : ERR(ENOTCONN);
	pthread_mutex_lock(&s->rlock);
	for (;;) {
		/*
		 * The flags before the bytes: progress (any thread's: a sender's
		 * looks too) counts a message's bytes before the shutdown or
		 * disconnect that follows it, so a flag seen here comes with
		 * every byte sent before it.  Read the other way round, a
		 * progress between the two reads showed EOF with data unread.
		 */
		unsigned int closed = atomic_load(&s->closed);
		uint64_t avail = sock_readable_bytes(s), pos;
		size_t n;

		if (avail < total - got) {
			sock_progress(s);
			closed = atomic_load(&s->closed);
			avail = sock_readable_bytes(s);
		}
		if (closed & SOCK_SHUT_RD)
			break;
		if (avail && total) {
			size_t want = avail < total - got ? (size_t)avail : total - got;

			pos = atomic_load(&s->r_consumed) + ((flags & MSG_PEEK) ? got : 0);
			if (!(flags & MSG_PEEK)) {
				/* Half by half: each half of the ring goes back to
				 * the peer as soon as it is read (sock_give_credits),
				 * so the peer refills it while we copy the next one,
				 * instead of both ends taking turns on the whole
				 * ring. */
				size_t half = s->rbuf_size / 2;
				size_t to_half = half - (size_t)(pos & (half - 1));

				if (want > to_half)
					want = to_half;
			}
			n = sock_ring_copy(s, pos, want, &cur, &off, end);
			got += n;
			if (!(flags & MSG_PEEK)) {
				atomic_fetch_add_explicit(&s->r_consumed, n, memory_order_release);
				sock_stat_add(&s->stat->rx_bytes, n);
				sock_give_credits(s, false);
			}
			if (got == total || (flags & MSG_PEEK))
				break;
			if (n < avail)
				continue;	/* the rest of what was there */
			if (!(flags & MSG_WAITALL))
				break;
			continue;
		}
		if (!total)
			break;
		if (closed & SOCK_PEER_SHUT_WR)
			break;
		if (closed & (SOCK_RESET | SOCK_TIMEDOUT)) {
			err = closed & SOCK_TIMEDOUT ? ETIMEDOUT : ECONNRESET;
			break;
		}
		if (nonblock) {
			err = EAGAIN;
			break;
		}
		pthread_mutex_unlock(&s->rlock);
		if (sock_wait(s, sock_recv_ready, 0) < 0)
			err = errno;
		pthread_mutex_lock(&s->rlock);
		if (err)
			break;
	}
	pthread_mutex_unlock(&s->rlock);
	if (got || !err)
		return (ssize_t)got;
	return ERR(err);
}
