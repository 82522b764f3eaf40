/*
 * shm_recv.c - the receive side of the shm data path: post_recv publishes
 * receives in the QP's region, shm_poll_recv turns the peer's deliveries
 * into completions (and flushes what is left when the QP is in error).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm-internal.h"
#include "shm-ud.h"

static void shm_rq_kick_peer(struct shm_conn *conn);

/*
 * Does receive @seq bounce (a connection that bounces, and some SGE of it
 * a peer of another user may not write)?  rq_lock held.
 */
static bool shm_rq_bounces(struct shm_qp *qp, uint64_t seq)
{
	const struct shm_lsge *l = &qp->rq_local[(seq & (qp->rq_size - 1)) * qp->cap.max_recv_sge];
	uint32_t i, n = shm_rwqe_at(qp, seq)->num_sge;

	if (!qp->bounce)
		return false;
	for (i = 0; i < n; i++)
		if (l[i].length && !l[i].direct)
			return true;
	return false;
}

/* A bounced receive as the peer sees it: how much, never where. */
static void shm_rq_write_bounce(struct shm_qp *qp, uint64_t seq, uint8_t *ent)
{
	const struct shm_lsge *l = &qp->rq_local[(seq & (qp->rq_size - 1)) * qp->cap.max_recv_sge];
	struct shm_rwqe *r = shm_rwqe_at(qp, seq);
	struct shm_rsge *rs = (struct shm_rsge *)(ent + 8);
	uint32_t i;

	for (i = 0; i < r->num_sge; i++)
		rs[i] = (struct shm_rsge){ 0, 0, l[i].length };
	*(uint32_t *)ent = r->num_sge | SHM_RQ_BOUNCE;
	r->bounce = true;
	r->filled = 0;
}

/* Write receive @seq's translated SGEs into the region; rq_lock held. */
static void shm_rq_write_entry(struct shm_qp *qp, uint64_t seq)
{
	uint32_t slot = (uint32_t)(seq & (qp->rq_size - 1));
	uint8_t *ent = shm_rq_entry((uint8_t *)qp->region, qp->rq_stride, qp->rq_size, seq);
	uint32_t n = shm_rwqe_at(qp, seq)->num_sge;

	if (shm_rq_bounces(qp, seq)) {
		shm_rq_write_bounce(qp, seq, ent);
		return;
	}
	/*
	 * A fresh region reads zero, as does every receive without SGEs
	 * (sockets post only those): on the ring's first lap they are in
	 * place already, and not writing them keeps the ring's pages
	 * unallocated until the peer consumes receives.  A recycled region
	 * holds its last owner's receives: written whole.
	 */
	if (n == 0 && seq < qp->rq_size && qp->region_piece.zero)
		return;
	*(uint32_t *)ent = n;
	memcpy(ent + 8, &qp->rq_pending[(size_t)slot * qp->cap.max_recv_sge],
	       n * sizeof(struct shm_rsge));
}

/* Publish the receives posted before the region existed; rq_lock held. */
void shm_rq_publish(struct shm_qp *qp)
{
	uint64_t seq;

	for (seq = qp->rq_cons; seq < qp->rq_prod; seq++)
		shm_rq_write_entry(qp, seq);
	if (qp->srq)
		atomic_store(&qp->region->srq_kick, 1);
	atomic_store_explicit(&qp->region->rq_prod, qp->rq_prod, memory_order_release);
}

/*
 * Make room for one more outstanding receive in the private ring (at most
 * max_recv_wr <= rq_size are); rq_lock held.  0 or ENOMEM.
 */
static int shm_rq_grow(struct shm_qp *qp)
{
	uint32_t cap = qp->rq_cap ? 2 * qp->rq_cap : 16;
	struct shm_rwqe *n;
	uint64_t seq;

	if (cap > qp->rq_size)
		cap = qp->rq_size;
	if (cap <= qp->rq_cap)
		return ENOMEM;
	n = malloc(cap * sizeof(*n));
	if (!n)
		return ENOMEM;
	for (seq = qp->rq_cons; seq < qp->rq_prod; seq++)
		n[seq & (cap - 1)] = *shm_rwqe_at(qp, seq);
	free(qp->rq);
	qp->rq = n;
	qp->rq_cap = cap;
	return 0;
}

/*
 * Check @wr's SGEs against @spd's MRs and translate them: @rs as the peer
 * will see them, @ls as posted.  0 or EINVAL.
 */
int shm_rq_translate(struct shm_pd *spd, const struct ferry_recv_wr *wr, uint32_t max_sge,
		     struct shm_rsge *rs, struct shm_lsge *ls, uint64_t *total_p)
{
	uint64_t total = 0;
	int i;

	if ((uint32_t)wr->num_sge > max_sge)
		return EINVAL;
	for (i = 0; i < wr->num_sge; i++) {
		const struct ferry_sge *g = &wr->sg_list[i];
		const struct shm_mr_entry *e = NULL;

		if (g->length) {
			e = shm_mr_lookup_local(spd, g->lkey);
			if (!e || g->addr < e->addr || g->addr - e->addr > e->length ||
			    g->length > e->length - (g->addr - e->addr) ||
			    !(e->access & FERRY_ACCESS_LOCAL_WRITE))
				return EINVAL;
		}
		/* A read-only window is no place for a SEND: the sender
		 * reaches such a receive as plain memory instead. */
		if (e && e->block_id && shm_window_writable(e->access))
			rs[i] = (struct shm_rsge){ e->block_id,
						   e->block_offset + (g->addr - e->addr), g->length };
		else
			rs[i] = (struct shm_rsge){ 0, g->addr, g->length };
		ls[i] = (struct shm_lsge){ g->addr, g->length,
					   e && e->block_id &&
					   (e->access & FERRY_ACCESS_REMOTE_WRITE) };
		total += g->length;
	}
	*total_p = total;
	return 0;
}

/* Room in the private ring for one more receive; rq_lock held.  0 or ENOMEM. */
static int shm_rq_room(struct shm_qp *qp)
{
	if (qp->rq_prod - qp->rq_cons >= qp->cap.max_recv_wr)
		return ENOMEM;
	if (qp->rq_prod - qp->rq_cons >= qp->rq_cap && shm_rq_grow(qp))
		return ENOMEM;
	return 0;
}

/* The receive in slot rq_prod is complete: publish it; rq_lock held. */
static void shm_rq_commit(struct shm_qp *qp, uint64_t wr_id, uint64_t total, uint32_t num_sge)
{
	*shm_rwqe_at(qp, qp->rq_prod) = (struct shm_rwqe){ .wr_id = wr_id, .total_len = total,
							   .num_sge = num_sge };
	if (qp->region)
		shm_rq_write_entry(qp, qp->rq_prod);
	qp->rq_prod++;
}

/* Check and translate one receive WR into slot rq_prod; rq_lock held. */
static int shm_rq_put(struct shm_qp *qp, const struct ferry_recv_wr *wr)
{
	size_t at = (size_t)(qp->rq_prod & (qp->rq_size - 1)) * qp->cap.max_recv_sge;
	uint64_t total;
	int err;

	err = shm_rq_room(qp);
	if (!err)
		err = shm_rq_translate(to_spd(qp->qp.pd), wr, qp->cap.max_recv_sge,
				       &qp->rq_pending[at], &qp->rq_local[at], &total);
	if (err)
		return err;
	shm_rq_commit(qp, wr->wr_id, total, (uint32_t)wr->num_sge);
	return 0;
}

int shm_rq_place(struct shm_qp *qp, uint64_t wr_id, uint64_t total, uint32_t num_sge,
		 const struct shm_rsge *rs, const struct shm_lsge *ls)
{
	size_t at = (size_t)(qp->rq_prod & (qp->rq_size - 1)) * qp->cap.max_recv_sge;
	int err = shm_rq_room(qp);

	if (err)
		return err;
	memcpy(&qp->rq_pending[at], rs, num_sge * sizeof(*rs));
	memcpy(&qp->rq_local[at], ls, num_sge * sizeof(*ls));
	shm_rq_commit(qp, wr_id, total, num_sge);
	return 0;
}

void shm_rq_posted(struct shm_qp *qp)
{
	if (!qp->region)
		return;
	atomic_store_explicit(&qp->region->rq_prod, qp->rq_prod, memory_order_release);
	/* A sender waiting for a receive sleeps until kicked. */
	if (qp->conn)
		shm_rq_kick_peer(qp->conn);
}

int shm_post_recv(struct ferry_qp *fqp, struct ferry_recv_wr *wr, struct ferry_recv_wr **bad)
{
	struct shm_qp *qp = to_sqp(fqp);
	enum ferry_qp_state state;
	int err = 0;

	if (qp->ud)
		return shm_ud_post_recv(qp, wr, bad);	/* shm_ud_data.c */
	ferry_lock(&qp->rq_lock);
	state = __atomic_load_n(&qp->qp.state, __ATOMIC_ACQUIRE);
	if (state == FERRY_QPS_RESET) {
		err = EINVAL;
	} else {
		for (; wr; wr = wr->next) {
			err = shm_rq_put(qp, wr);
			if (err)
				break;
		}
	}
	shm_rq_posted(qp);
	ferry_unlock(&qp->rq_lock);
	if (state == FERRY_QPS_ERR) {
		struct shm_cq *rcq = to_scq(fqp->recv_cq);

		/* Posted to a QP in error: the poller flushes it; wake a sleeper. */
		ferry_lock(&rcq->lock);
		shm_cq_signal_local(rcq, true);
		ferry_unlock(&rcq->lock);
	}
	if (err) {
		*bad = wr;
		return ERR(err);
	}
	return 0;
}

/*
 * The receive side fails the connection: a receive completed in error, or
 * the peer broke the protocol.  The send side is flushed by the next
 * shm_sq_progress (we may not take sq_lock here).
 */
static void shm_rq_fatal(struct shm_qp *qp, const char *why, bool hostile)
{
	bool first = !atomic_exchange(&qp->async_error, true);

	if (first)
		ferry_log(hostile ? FERRY_LOG_WARN : FERRY_LOG_INFO,
			  "QP %u: %s: moving to ERR", qp->qp.qp_num, why);
	__atomic_store_n(&qp->qp.state, FERRY_QPS_ERR, __ATOMIC_RELEASE);
	if (qp->region)
		atomic_store(&qp->region->in_error, 1);
	/* No completion says why a broken protocol took the QP down. */
	if (first && hostile)
		ferry_async_post(qp->qp.context, FERRY_EVENT_QP_FATAL, &qp->qp);
	if (qp->srq)
		shm_srq_qp_error_locked(qp);
}

/* The peer waits for something of ours (a receive, room in its ring): kick it. */
static void shm_rq_kick_peer(struct shm_conn *conn)
{
	/* Pairs with the fence in shm_sq_rnr / shm_sq_wait_room. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&conn->peer_region->rnr_wait, memory_order_relaxed)) {
		shm_wake(&conn->peer_kick);
		/* A channel that is the connection: its pollers settle
		 * the send (shm_sq_settle_rnr) when woken. */
		if (atomic_load(&conn->peer_notify->word) & SHM_NOTIFY_CONN)
			shm_conn_wake(conn);
	}
}

/* Copy @len bytes from @src into receive @seq's own SGEs, from @off on. */
static void shm_rq_scatter(struct shm_qp *qp, uint64_t seq, uint64_t off, const uint8_t *src,
			   uint64_t len)
{
	const struct shm_lsge *l = &qp->rq_local[(seq & (qp->rq_size - 1)) * qp->cap.max_recv_sge];
	uint32_t i, n = shm_rwqe_at(qp, seq)->num_sge;

	for (i = 0; i < n && len; i++) {
		uint64_t take;

		if (off >= l[i].length) {
			off -= l[i].length;
			continue;
		}
		take = l[i].length - off;
		if (take > len)
			take = len;
		memcpy((uint8_t *)(uintptr_t)l[i].addr + off, src, take);
		src += take;
		len -= take;
		off = 0;
	}
}

static inline uint64_t shm_bounce_rec_size(uint32_t len)
{
	return sizeof(struct shm_bounce_rec) + (((uint64_t)len + 15) & ~15ull);
}

/*
 * shm_bounce_drain - copy what the peer has staged for our receives into
 * them, each record's header copied once, then checked: a receive we have
 * posted that bounces, the next bytes of it, within its length and the
 * ring.  rq_lock held.  false: the peer broke the rules.
 */
static bool shm_bounce_drain(struct shm_qp *qp, struct shm_conn *conn)
{
	uint64_t prod = atomic_load_explicit(&conn->peer_region->bounce_prod, memory_order_acquire);
	uint64_t start = qp->bounce_cons;

	if (prod - qp->bounce_cons > SHM_BOUNCE_SIZE)
		return false;
	while (qp->bounce_cons != prod) {
		uint64_t pos = qp->bounce_cons & (SHM_BOUNCE_SIZE - 1);
		struct shm_bounce_rec h;
		struct shm_rwqe *r;

		if (prod - qp->bounce_cons < sizeof(h))
			return false;
		memcpy(&h, conn->peer_bounce + pos, sizeof(h));
		if (h.len > SHM_BOUNCE_SIZE - pos - sizeof(h) ||
		    shm_bounce_rec_size(h.len) > prod - qp->bounce_cons ||
		    h.recv < qp->rq_cons || h.recv >= qp->rq_prod)
			return false;
		r = shm_rwqe_at(qp, h.recv);
		if (!r->bounce || h.off != r->filled || h.len > r->total_len - r->filled)
			return false;
		shm_rq_scatter(qp, h.recv, h.off, conn->peer_bounce + pos + sizeof(h), h.len);
		r->filled += h.len;
		qp->bounce_cons += shm_bounce_rec_size(h.len);
	}
	if (qp->bounce_cons != start) {
		atomic_store_explicit(&qp->region->bounce_cons, qp->bounce_cons,
				      memory_order_release);
		shm_rq_kick_peer(conn);
	}
	return true;
}

static bool shm_delivery_ok(const struct shm_delivery *d, const struct shm_rwqe *r)
{
	if (d->status != FERRY_WC_SUCCESS && d->status != FERRY_WC_LOC_LEN_ERR)
		return false;
	/* A bounced receive's bytes came through the ring, all of them; no
	 * other receive's can. */
	if (d->opcode == FERRY_WC_RECV && d->status == FERRY_WC_SUCCESS &&
	    (r->bounce ? !(d->flags & SHM_DELIVERY_BOUNCE) || r->filled != d->byte_len :
			 (d->flags & SHM_DELIVERY_BOUNCE) != 0))
		return false;
	if (d->opcode == FERRY_WC_RECV)
		return d->status != FERRY_WC_SUCCESS || d->byte_len <= r->total_len;
	return d->opcode == FERRY_WC_RECV_RDMA_WITH_IMM && d->status == FERRY_WC_SUCCESS &&
	       d->byte_len <= 0x80000000u;
}

/* Flush receives into @wc from *@got_p up to @n; rq_lock held.  How many. */
static int shm_rq_flush(struct shm_qp *qp, struct ferry_wc *wc, int n, int *got_p)
{
	int start = *got_p;

	while (*got_p < n && qp->rq_cons != qp->rq_prod) {
		struct ferry_wc *w = &wc[(*got_p)++];

		memset(w, 0, sizeof(*w));
		w->wr_id = shm_rwqe_at(qp, qp->rq_cons)->wr_id;
		w->status = FERRY_WC_WR_FLUSH_ERR;
		w->opcode = FERRY_WC_RECV;
		w->qp_num = qp->qp.qp_num;
		qp->rq_cons++;
	}
	return *got_p - start;
}

/*
 * @n receives completed: a QP on an SRQ accounts for them and takes more.
 * (No COMM_EST: a connection's every QP would raise one, into a queue the
 * stream sockets never read.)  rq_lock held.
 */
static void shm_poll_recv_note(struct shm_qp *qp, uint32_t n)
{
	if (qp->srq) {
		shm_srq_consumed(qp, n);
		shm_srq_fill_locked(qp);
	}
}

/*
 * shm_poll_recv - completions for up to @n of @qp's receives: those the peer
 * consumed, then, if the QP is in error, flushes.  Called with the recv CQ's
 * lock held; takes rq_lock.
 */
int shm_poll_recv(struct shm_qp *qp, int n, struct ferry_wc *wc)
{
	struct shm_conn *conn = qp->conn;	/* stable: reset takes our CQ's lock */
	uint32_t mask = qp->rq_size - 1;
	uint32_t consumed = 0;
	int got = 0;

	/* rq_cons only moves here, under the CQ lock: peek without rq_lock. */
	if (conn && __atomic_load_n(&qp->qp.state, __ATOMIC_RELAXED) != FERRY_QPS_ERR &&
	    !conn->dead &&
	    atomic_load_explicit(&(conn->peer_dq - (qp->rq_cons & mask))->seq,
				 memory_order_relaxed) != qp->rq_cons + 1 &&
	    (!qp->bounce || atomic_load_explicit(&conn->peer_region->bounce_prod,
						 memory_order_relaxed) == qp->bounce_cons))
		return 0;

	ferry_lock(&qp->rq_lock);
	/* The peer's staged bytes first: its deliveries follow their records. */
	if (conn && qp->bounce && !conn->dead &&
	    __atomic_load_n(&qp->qp.state, __ATOMIC_RELAXED) != FERRY_QPS_ERR &&
	    !shm_bounce_drain(qp, conn))
		shm_rq_fatal(qp, "peer staged a malformed SEND", true);
	while (conn && got < n && qp->rq_cons != qp->rq_prod) {
		const struct shm_rwqe *r = shm_rwqe_at(qp, qp->rq_cons);
		struct shm_delivery *pd = conn->peer_dq - (qp->rq_cons & mask);
		struct shm_delivery d;
		struct ferry_wc *w = &wc[got];

		if (atomic_load_explicit(&pd->seq, memory_order_acquire) != qp->rq_cons + 1)
			break;
		memcpy((char *)&d + sizeof(d.seq), (char *)pd + sizeof(d.seq),
		       sizeof(d) - sizeof(d.seq));
		/* Its last records came before it: a look at the ring after
		 * the delivery's (acquire) finds them. */
		if (r->bounce && r->filled != d.byte_len && !shm_bounce_drain(qp, conn)) {
			shm_rq_fatal(qp, "peer staged a malformed SEND", true);
			break;
		}
		if (!shm_delivery_ok(&d, r)) {
			shm_rq_fatal(qp, "peer wrote a malformed delivery", true);
			break;
		}
		memset(w, 0, sizeof(*w));
		w->wr_id = r->wr_id;
		w->status = d.status;
		w->opcode = d.opcode;
		w->byte_len = d.byte_len;
		w->qp_num = qp->qp.qp_num;
		w->src_qp = conn->peer_qpn;
		if (d.flags & SHM_DELIVERY_IMM) {
			w->imm_data = d.imm_data;
			w->wc_flags = FERRY_WC_WITH_IMM;
		}
		qp->rq_cons++;
		got++;
		consumed++;
		if (d.status != FERRY_WC_SUCCESS) {
			/* As in IB, a receive in error takes the QP down. */
			shm_rq_fatal(qp, ferry_wc_status_str(d.status), false);
			break;
		}
	}
	if (qp->srq && __atomic_load_n(&qp->qp.state, __ATOMIC_ACQUIRE) == FERRY_QPS_ERR) {
		/* What the peer did not take goes back to the SRQ; what is
		 * left is delivered, and flushed unless it completed above. */
		shm_srq_qp_error_locked(qp);
		consumed += (uint32_t)(shm_rq_flush(qp, wc, n, &got));
	} else if (!qp->srq && (__atomic_load_n(&qp->qp.state, __ATOMIC_ACQUIRE) == FERRY_QPS_ERR ||
				(conn && conn->dead))) {
		shm_rq_flush(qp, wc, n, &got);
	}
	if (consumed)
		shm_poll_recv_note(qp, consumed);
	ferry_unlock(&qp->rq_lock);
	return got;
}
