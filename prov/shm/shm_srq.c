/*
 * shm_srq.c - shared receive queues of the shm provider.
 *
 * A peer reads the receives it may consume from the RQ ring of its QP's
 * region, which only we write (docs/wire.md); an SRQ keeps that.  The SRQ
 * itself is a pool in private memory, and every QP on it has an RQ of its
 * own holding its window (SHM_SRQ_WINDOW receives at most that its peer
 * has not delivered to), which we top up from the pool:
 *   - at ferry_post_srq_recv (QPs whose peers wait for a receive first),
 *   - when the QP's completions are polled (what was taken is replaced),
 *   - when a peer finds its window empty: it raises rnr_wait as for any
 *     RNR wait and, since our region says srq_kick, kicks our monitor,
 *     which tops up the QPs whose peers wait (shm_srq_monitor_pass).
 * A window holds at most its share of what is posted (shm_srq_window).
 * A receive handed to a window leaves the pool but still counts as posted
 * (srq->posted) until its completion is polled; when the QP goes to ERR,
 * the receives its peer did not take go back to the pool, the front of
 * it, in order (a device never flushes SRQ receives with a QP), and the
 * QP's LAST_WQE_REACHED follows; those it delivered to complete when
 * polled (flushed, if the delivery turns out malformed).  So a peer can
 * take no more than its window beyond what it delivered, and nothing it
 * writes is ever counted: deliveries are matched against our own private
 * window (shm_recv.c).
 *
 * The limit: armed by ferry_modify_srq(FERRY_SRQ_LIMIT), it fires once,
 * when posted drops below it as completions are polled, and disarms.
 *
 * Locks, in order: the process's SRQ list (the monitor's walk), an SRQ's
 * qps_lock, a QP's rq_lock, the SRQ's lock, the context's event queue.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "shm-internal.h"
#include "shm-ops.h"

/* Every SRQ of the process, for the monitor. */
static pthread_mutex_t srq_list_lock = PTHREAD_MUTEX_INITIALIZER;
FERRY_FORK_SAFE(srq_list, srq_list_lock)
static struct shm_srq *srq_list;

/* A pool entry: the receive, then max_sge published SGEs, then as many own. */
struct shm_srq_wqe {
	uint64_t wr_id;
	uint64_t total_len;
	uint32_t num_sge;
	uint32_t pad;
};

static struct shm_srq_wqe *shm_srq_at(struct shm_srq *srq, uint8_t *pool, uint32_t cap,
				      uint64_t idx)
{
	return (struct shm_srq_wqe *)(pool + (size_t)(idx & (cap - 1)) * srq->stride);
}

static struct shm_rsge *shm_srq_rsge(struct shm_srq_wqe *w)
{
	return (struct shm_rsge *)(w + 1);
}

static struct shm_lsge *shm_srq_lsge(struct shm_srq *srq, struct shm_srq_wqe *w)
{
	return (struct shm_lsge *)(shm_srq_rsge(w) + srq->max_sge);
}

static uint32_t shm_srq_pow2(uint32_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

/* A pool of @cap entries with the pool's entries copied in; lock held. */
static int shm_srq_pool_resize(struct shm_srq *srq, uint32_t cap)
{
	uint8_t *pool = calloc(cap, srq->stride);
	uint64_t i;

	if (!pool)
		return ENOMEM;
	for (i = srq->head; i != srq->tail; i++)
		memcpy(shm_srq_at(srq, pool, cap, i - srq->head),
		       shm_srq_at(srq, srq->pool, srq->cap, i), srq->stride);
	free(srq->pool);
	srq->pool = pool;
	srq->tail -= srq->head;
	srq->head = 0;
	srq->cap = cap;
	return 0;
}

struct ferry_srq *shm_create_srq(struct ferry_pd *pd, struct ferry_srq_init_attr *init)
{
	struct ferry_srq_attr *a = &init->attr;
	struct shm_srq *srq;

	(void)pd;
	if (a->max_wr > SHM_MAX_QP_WR || a->max_sge > SHM_MAX_SGE) {
		errno = EINVAL;
		return NULL;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	srq->max_wr = a->max_wr;
	srq->max_sge = a->max_sge ? a->max_sge : 1;
	srq->stride = sizeof(struct shm_srq_wqe) +
		      srq->max_sge * (sizeof(struct shm_rsge) + sizeof(struct shm_lsge));
	if (shm_srq_pool_resize(srq, shm_srq_pow2(srq->max_wr))) {
		free(srq);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&srq->lock, NULL);
	pthread_mutex_init(&srq->qps_lock, NULL);
	a->max_wr = srq->max_wr;
	a->max_sge = srq->max_sge;
	a->srq_limit = 0;
	pthread_mutex_lock(&srq_list_lock);
	srq->next = srq_list;
	srq_list = srq;
	pthread_mutex_unlock(&srq_list_lock);
	return &srq->srq;
}

int shm_destroy_srq(struct ferry_srq *fsrq)
{
	struct shm_srq *srq = to_ssrq(fsrq), **pp;

	/* The core saw no QP on it; the monitor may be walking it. */
	pthread_mutex_lock(&srq_list_lock);
	for (pp = &srq_list; *pp && *pp != srq; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = srq->next;
	pthread_mutex_unlock(&srq_list_lock);
	pthread_mutex_destroy(&srq->lock);
	pthread_mutex_destroy(&srq->qps_lock);
	free(srq->qps);
	free(srq->pool);
	free(srq);
	return 0;
}

int shm_modify_srq(struct ferry_srq *fsrq, struct ferry_srq_attr *attr, int mask)
{
	struct shm_srq *srq = to_ssrq(fsrq);
	uint32_t max_wr;
	int err = 0;

	pthread_mutex_lock(&srq->lock);
	max_wr = (mask & FERRY_SRQ_MAX_WR) ? attr->max_wr : srq->max_wr;
	/* What is posted stays: the queue may not shrink below it. */
	if (max_wr > SHM_MAX_QP_WR || max_wr < srq->posted ||
	    ((mask & FERRY_SRQ_LIMIT) && attr->srq_limit > max_wr))
		err = EINVAL;
	else if (shm_srq_pow2(max_wr) != srq->cap)
		err = shm_srq_pool_resize(srq, shm_srq_pow2(max_wr));
	if (!err) {
		srq->max_wr = max_wr;
		if (mask & FERRY_SRQ_LIMIT)
			srq->limit = attr->srq_limit;
	}
	pthread_mutex_unlock(&srq->lock);
	return err ? ERR(err) : 0;
}

int shm_query_srq(struct ferry_srq *fsrq, struct ferry_srq_attr *attr)
{
	struct shm_srq *srq = to_ssrq(fsrq);

	pthread_mutex_lock(&srq->lock);
	attr->max_wr = srq->max_wr;
	attr->max_sge = srq->max_sge;
	attr->srq_limit = srq->limit;
	pthread_mutex_unlock(&srq->lock);
	return 0;
}

/* Check and translate @wr into the pool's tail; srq->lock held.  0 or an errno. */
static int shm_srq_put(struct shm_srq *srq, const struct ferry_recv_wr *wr)
{
	struct shm_srq_wqe *w;
	uint64_t total;
	int err;

	if (srq->posted >= srq->max_wr)
		return ENOMEM;
	w = shm_srq_at(srq, srq->pool, srq->cap, srq->tail);
	err = shm_rq_translate(to_spd(srq->srq.pd), wr, srq->max_sge, shm_srq_rsge(w),
			       shm_srq_lsge(srq, w), &total);
	if (err)
		return err;
	w->wr_id = wr->wr_id;
	w->total_len = total;
	w->num_sge = (uint32_t)wr->num_sge;
	srq->tail++;
	srq->posted++;
	return 0;
}

/* Does the peer of @qp wait for a receive?  rq_lock held (conn is stable). */
static bool shm_srq_peer_waits(struct shm_qp *qp)
{
	return qp->conn && !qp->conn->dead &&
	       atomic_load_explicit(&qp->conn->peer_region->rnr_wait, memory_order_relaxed);
}

/* Top up the QPs on @srq: with @waiting, only those whose peers wait. */
static void shm_srq_fill_all(struct shm_srq *srq, bool waiting)
{
	uint32_t i;

	pthread_mutex_lock(&srq->qps_lock);
	for (i = 0; i < srq->nqps; i++) {
		struct shm_qp *qp = srq->qps[i];

		ferry_lock(&qp->rq_lock);
		if (!waiting || shm_srq_peer_waits(qp))
			shm_srq_fill_locked(qp);
		ferry_unlock(&qp->rq_lock);
	}
	pthread_mutex_unlock(&srq->qps_lock);
}

int shm_post_srq_recv(struct ferry_srq *fsrq, struct ferry_recv_wr *wr,
		      struct ferry_recv_wr **bad)
{
	struct shm_srq *srq = to_ssrq(fsrq);
	int err = 0;

	pthread_mutex_lock(&srq->lock);
	for (; wr; wr = wr->next) {
		err = shm_srq_put(srq, wr);
		if (err)
			break;
	}
	pthread_mutex_unlock(&srq->lock);
	/* Senders that wait first, then every window. */
	shm_srq_fill_all(srq, true);
	shm_srq_fill_all(srq, false);
	if (err) {
		*bad = wr;
		return ERR(err);
	}
	return 0;
}

void shm_srq_monitor_pass(void)
{
	struct shm_srq *srq;

	pthread_mutex_lock(&srq_list_lock);
	for (srq = srq_list; srq; srq = srq->next)
		shm_srq_fill_all(srq, true);
	pthread_mutex_unlock(&srq_list_lock);
}

/* --- the QPs on an SRQ --- */

int shm_srq_qp_caps(struct shm_srq *srq, struct ferry_pd *pd, struct ferry_qp_cap *cap)
{
	/* Receives are translated with the SRQ's PD, and its blocks are
	 * announced to the connections of that PD's QPs alone. */
	if (srq->srq.pd != pd)
		return EINVAL;
	cap->max_recv_wr = shm_srq_pow2(srq->max_wr < SHM_SRQ_RING ? srq->max_wr : SHM_SRQ_RING);
	cap->max_recv_sge = srq->max_sge;
	return 0;
}

int shm_srq_attach(struct shm_srq *srq, struct shm_qp *qp)
{
	int err = 0;

	pthread_mutex_lock(&srq->qps_lock);
	if (srq->nqps == srq->qps_cap) {
		uint32_t cap = srq->qps_cap ? 2 * srq->qps_cap : 4;
		struct shm_qp **n = realloc(srq->qps, cap * sizeof(*n));

		if (n) {
			srq->qps = n;
			srq->qps_cap = cap;
		} else {
			err = ENOMEM;
		}
	}
	if (!err) {
		srq->qps[srq->nqps] = qp;
		/* Read under srq->lock alone (shm_srq_window). */
		__atomic_store_n(&srq->nqps, srq->nqps + 1, __ATOMIC_RELAXED);
		qp->srq = srq;
	}
	pthread_mutex_unlock(&srq->qps_lock);
	return err;
}

void shm_srq_detach(struct shm_qp *qp)
{
	struct shm_srq *srq = qp->srq;
	uint32_t i;

	pthread_mutex_lock(&srq->qps_lock);
	for (i = 0; i < srq->nqps; i++) {
		if (srq->qps[i] == qp) {
			srq->qps[i] = srq->qps[srq->nqps - 1];
			__atomic_store_n(&srq->nqps, srq->nqps - 1, __ATOMIC_RELAXED);
			break;
		}
	}
	pthread_mutex_unlock(&srq->qps_lock);
}

/*
 * How many of the QP's receives the peer has taken: those from rq_cons on
 * with their deliveries in place, not yet polled.  A peer that writes a
 * delivery early has delivered (we complete it at the next poll), so
 * nothing it writes here makes us count more than it will deliver.
 * rq_lock held.
 */
static uint64_t shm_srq_delivered(struct shm_qp *qp)
{
	struct shm_conn *conn = qp->conn;
	uint64_t seq = qp->rq_cons;

	/* A dead peer's ring stays mapped: what it delivered still counts. */
	if (!conn)
		return 0;
	while (seq != qp->rq_prod &&
	       atomic_load_explicit(&(conn->peer_dq - (seq & (qp->rq_size - 1)))->seq,
				    memory_order_relaxed) == seq + 1)
		seq++;
	return seq - qp->rq_cons;
}

/*
 * How many receives a QP's peer may hold undelivered: SHM_SRQ_WINDOW, but
 * never more than its share of what is posted.  A window is never taken
 * back (its peer may be writing into it), so were the windows of QPs
 * whose peers have nothing to send to hold every receive, the others
 * would wait for ever; with shares, a QP whose window is empty finds
 * receives in the pool, or completions to be polled, as long as at least
 * as many receives are posted as there are QPs.  srq->lock held.
 */
static uint32_t shm_srq_window(struct shm_srq *srq)
{
	uint32_t nqps = __atomic_load_n(&srq->nqps, __ATOMIC_RELAXED);
	uint32_t share = nqps ? srq->posted / nqps : srq->posted;

	if (share < 1)
		return 1;
	return share < SHM_SRQ_WINDOW ? share : SHM_SRQ_WINDOW;
}

void shm_srq_fill_locked(struct shm_qp *qp)
{
	struct shm_srq *srq = qp->srq;
	enum ferry_qp_state state = __atomic_load_n(&qp->qp.state, __ATOMIC_ACQUIRE);
	uint64_t open;
	uint32_t moved = 0;

	if (state == FERRY_QPS_RESET || state == FERRY_QPS_ERR || qp->srq_last_wqe)
		return;
	/* The receives the peer may still take: at most a window of them. */
	open = qp->rq_prod - qp->rq_cons - shm_srq_delivered(qp);
	pthread_mutex_lock(&srq->lock);
	while (srq->head != srq->tail && open + moved < shm_srq_window(srq)) {
		struct shm_srq_wqe *w = shm_srq_at(srq, srq->pool, srq->cap, srq->head);

		if (shm_rq_place(qp, w->wr_id, w->total_len, w->num_sge, shm_srq_rsge(w),
				 shm_srq_lsge(srq, w)))
			break;	/* the window is full */
		srq->head++;
		moved++;
	}
	pthread_mutex_unlock(&srq->lock);
	if (moved)
		shm_rq_posted(qp);
}

void shm_srq_fill(struct shm_qp *qp)
{
	ferry_lock(&qp->rq_lock);
	shm_srq_fill_locked(qp);
	ferry_unlock(&qp->rq_lock);
}

void shm_srq_consumed(struct shm_qp *qp, uint32_t n)
{
	struct shm_srq *srq = qp->srq;
	bool fire = false;

	pthread_mutex_lock(&srq->lock);
	srq->posted -= n < srq->posted ? n : srq->posted;
	if (srq->limit && srq->posted < srq->limit) {
		srq->limit = 0;		/* once per arm */
		fire = true;
	}
	pthread_mutex_unlock(&srq->lock);
	if (fire)
		ferry_async_post(srq->srq.context, FERRY_EVENT_SRQ_LIMIT_REACHED, &srq->srq);
}

/*
 * The window's receives back to the front of the pool, in order: all of
 * them, or (@keep_delivered) those the peer has not delivered to -- the
 * others complete when polled, as a device's completions outlive the
 * QP's error.  rq_lock held.
 */
static void shm_srq_take_back(struct shm_qp *qp, bool keep_delivered)
{
	struct shm_srq *srq = qp->srq;
	uint64_t keep = qp->rq_cons + (keep_delivered ? shm_srq_delivered(qp) : 0);

	pthread_mutex_lock(&srq->lock);
	while (qp->rq_prod != keep) {
		uint64_t seq = --qp->rq_prod;
		size_t at = (size_t)(seq & (qp->rq_size - 1)) * qp->cap.max_recv_sge;
		const struct shm_rwqe *r = shm_rwqe_at(qp, seq);
		struct shm_srq_wqe *w = shm_srq_at(srq, srq->pool, srq->cap, --srq->head);

		w->wr_id = r->wr_id;
		w->total_len = r->total_len;
		w->num_sge = r->num_sge;
		memcpy(shm_srq_rsge(w), &qp->rq_pending[at], r->num_sge * sizeof(struct shm_rsge));
		memcpy(shm_srq_lsge(srq, w), &qp->rq_local[at],
		       r->num_sge * sizeof(struct shm_lsge));
	}
	pthread_mutex_unlock(&srq->lock);
}

void shm_srq_qp_error_locked(struct shm_qp *qp)
{
	if (qp->srq_last_wqe)
		return;
	shm_srq_take_back(qp, true);
	qp->srq_last_wqe = true;
	ferry_async_post(qp->qp.context, FERRY_EVENT_QP_LAST_WQE_REACHED, &qp->qp);
}

void shm_srq_qp_error(struct shm_qp *qp)
{
	ferry_lock(&qp->rq_lock);
	shm_srq_qp_error_locked(qp);
	ferry_unlock(&qp->rq_lock);
}

void shm_srq_qp_reset(struct shm_qp *qp)
{
	shm_srq_take_back(qp, false);
	qp->srq_last_wqe = false;
}
