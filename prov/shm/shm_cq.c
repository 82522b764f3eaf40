/*
 * shm_cq.c - the shm provider's CQs: the ring of completions made in this
 * process, polling it and the receiving QPs' deliveries, and the notify
 * word peers read before they wake the CQ (armed by req_notify_cq and by
 * futex sleeps), with a copy of it in each peer process's pool as a PD's
 * MR table has (see shm_pd.c).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm-internal.h"
#include "shm-ops.h"
#include "shm-ud.h"

/* --- the notify word, and the copies peers read --- */

/*
 * shm_notify_update - the CQ's arm word becomes generation @gen with its
 * bits @clear taken off and @set put on; scq->lock held.  A channel's
 * arm (the mode) and a futex sleeper's (SHM_NOTIFY_FUTEX) come and go
 * apart: neither may take the other's away.  seq_cst: an arm pairs with
 * the fence a sender runs between publishing a delivery and reading this
 * word (see shm_data.c).
 */
void shm_notify_update(struct shm_cq *scq, uint64_t gen, uint32_t clear, uint32_t set)
{
	uint64_t w = atomic_load_explicit(&scq->notify->word, memory_order_relaxed);
	struct shm_mirror *m;

	w = SHM_NOTIFY_WORD(gen, (w & SHM_NOTIFY_BITS & ~clear) | set);
	atomic_store(&scq->notify->word, w);
	/* Each peer process reads its own copy: the same store, in each. */
	for (m = scq->mirrors; m; m = m->next)
		atomic_store(&((struct shm_notify *)m->piece.addr)->word, w);
}

/* A new copy of @scq's word in @pool; scq->lock held. */
static struct shm_mirror *shm_cq_mirror_make(struct shm_cq *scq, struct shm_pool *pool)
{
	struct shm_mirror *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	if (shm_arena_get(pool, sizeof(struct shm_notify), SHM_PIECE_NOTIFY, &m->piece) < 0) {
		free(m);
		errno = ENOMEM;
		return NULL;
	}
	atomic_store(&((struct shm_notify *)m->piece.addr)->word,
		     atomic_load_explicit(&scq->notify->word, memory_order_relaxed));
	m->pool = pool;
	m->refs = 1;
	m->next = scq->mirrors;
	scq->mirrors = m;
	return m;
}

struct shm_mirror *shm_cq_mirror_get(struct shm_cq *scq, struct shm_pool *pool)
{
	struct shm_mirror *m;

	ferry_lock(&scq->lock);
	for (m = scq->mirrors; m; m = m->next)
		if (m->pool == pool)
			break;
	if (m)
		m->refs++;
	else
		m = shm_cq_mirror_make(scq, pool);
	ferry_unlock(&scq->lock);
	return m;
}

void shm_cq_mirror_put(struct shm_cq *scq, struct shm_mirror *m)
{
	struct shm_mirror **pp;

	if (!m)
		return;
	ferry_lock(&scq->lock);
	if (--m->refs > 0) {
		ferry_unlock(&scq->lock);
		return;
	}
	for (pp = &scq->mirrors; *pp != m; pp = &(*pp)->next)
		;
	*pp = m->next;
	ferry_unlock(&scq->lock);
	if (scq->detached)
		shm_arena_drop(&m->piece);	/* the other process's peers read it */
	else
		shm_arena_put(&m->piece, sizeof(struct shm_notify));
	free(m);
}

/* shm_notify_update under scq->lock, in a new generation if @new_gen. */
static void shm_notify_change(struct shm_cq *scq, bool new_gen, uint32_t clear, uint32_t set)
{
	ferry_lock(&scq->lock);
	shm_notify_update(scq, new_gen ? ++scq->gen : scq->gen, clear, set);
	ferry_unlock(&scq->lock);
}

/* --- completion queues --- */

struct ferry_cq *shm_create_cq(struct ferry_context *ctx, int cqe,
				      struct ferry_comp_channel *ch)
{
	struct shm_cq *scq;
	struct epoll_event ev = { .events = EPOLLIN };

	if (cqe > SHM_MAX_CQE) {
		errno = EINVAL;
		return NULL;
	}
	if (ch && to_sch(ch)->single && to_sch(ch)->cq) {
		errno = EBUSY;	/* one CQ per single channel */
		return NULL;
	}
	scq = calloc(1, sizeof(*scq));
	if (!scq)
		return NULL;
	if (ch && to_sch(ch)->single) {
		scq->efd = ch->fd;
		scq->wake = to_sch(ch)->wake;
	} else {
		scq->efd = shm_wake_socket(&scq->wake);
	}
	if (scq->efd < 0)
		goto err_free;
	if (shm_arena_get(NULL, sizeof(*scq->notify), SHM_PIECE_NOTIFY, &scq->notify_piece) < 0)
		goto err_close_efd;
	scq->notify = (struct shm_notify *)scq->notify_piece.addr;
	if (ch && to_sch(ch)->single) {
		to_sch(ch)->cq = scq;
	} else if (ch) {
		ev.data.ptr = scq;
		if (epoll_ctl(ch->fd, EPOLL_CTL_ADD, scq->efd, &ev) < 0)
			goto err_unmap;
	}
	ferry_lock_init(&scq->lock);
	scq->cq.context = ctx;
	scq->cq.channel = ch;
	scq->cq.cqe = cqe;
	return &scq->cq;

err_unmap:
	shm_arena_put(&scq->notify_piece, sizeof(*scq->notify));
err_close_efd:
	if (!ch || !to_sch(ch)->single)
		close(scq->efd);
err_free:
	free(scq);
	return NULL;
}

int shm_destroy_cq(struct ferry_cq *cq)
{
	struct shm_cq *scq = to_scq(cq);

	ferry_lock(&scq->lock);
	if (scq->nqps || scq->events != scq->acked) {
		ferry_unlock(&scq->lock);
		return ERR(EBUSY);
	}
	ferry_unlock(&scq->lock);
	/* A detached CQ's channel is an epoll set shared with another
	 * process since fork: removing our socket would remove it there. */
	if (cq->channel && to_sch(cq->channel)->single)
		to_sch(cq->channel)->cq = NULL;	/* the socket is the channel's */
	else if (cq->channel && !scq->detached)
		epoll_ctl(cq->channel->fd, EPOLL_CTL_DEL, scq->efd, NULL);
	if (!scq->detached)
		shm_arena_put(&scq->notify_piece, sizeof(*scq->notify));
	else
		shm_arena_drop(&scq->notify_piece);
	if (!cq->channel || !to_sch(cq->channel)->single)
		close(scq->efd);
	free(scq->ring);
	free(scq->rqps);
	free(scq);
	return 0;
}

void shm_detach_cq(struct ferry_cq *cq)
{
	to_scq(cq)->detached = true;
}

int shm_req_notify_cq(struct ferry_cq *cq, int solicited_only)
{
	struct shm_qp *qp = to_scq(cq)->conn_qp;

	/* The monitor's RNR retries cannot raise such a channel: settle them
	 * before the caller's last look (shm_sq_settle_rnr). */
	if (qp)
		shm_sq_settle_rnr(qp);
	shm_notify_change(to_scq(cq), true, SHM_NOTIFY_MODES,
			  solicited_only ? SHM_NOTIFY_SOLICITED : SHM_NOTIFY_ALL);
	if (atomic_load_explicit(&to_scq(cq)->nud, memory_order_relaxed)) {
		ferry_lock(&to_scq(cq)->lock);
		shm_ud_cq_arm(to_scq(cq));	/* datagrams raise the channel too */
		ferry_unlock(&to_scq(cq)->lock);
	}
	return 0;
}

/* The peer reads the word before it signals: NONE, and it does not. */
void shm_disarm_cq(struct ferry_cq *cq)
{
	shm_notify_change(to_scq(cq), false, SHM_NOTIFY_MODES, 0);
}

/*
 * Futex sleeps (ferry_cq_sleep): for a CQ whose receives come from one
 * connected QP, the peer raises its region's wake_seq and the sleeper
 * waits on it and on the CQ's local_seq at once (futex_waitv, Linux
 * 5.16).  Shared futexes are keyed by the file and offset, so the peer's
 * word counts the same in its read-write mapping and our read-only one.
 */
static atomic_bool shm_no_waitv;	/* the kernel has no futex_waitv */

int shm_cq_sleep_prepare(struct ferry_cq *cq, struct ferry_cq_sleep *t)
{
	struct shm_cq *scq = to_scq(cq);
	struct shm_qp *qp;

	if (atomic_load_explicit(&shm_no_waitv, memory_order_relaxed))
		return ERR(EOPNOTSUPP);
	ferry_lock(&scq->lock);
	qp = scq->nrqps == 1 ? scq->rqps[0] : NULL;
	if (!qp || !qp->conn || !qp->conn->peer_region || qp->conn->dead) {
		ferry_unlock(&scq->lock);
		return ERR(EOPNOTSUPP);
	}
	t->peer_word = &qp->conn->peer_region->wake_seq;
	t->peer_val = atomic_load(&qp->conn->peer_region->wake_seq);
	t->local_val = atomic_load(&scq->local_seq);
	shm_notify_update(scq, ++scq->gen, 0, SHM_NOTIFY_FUTEX);
	ferry_unlock(&scq->lock);
	return 0;
}

void shm_cq_sleep_cancel(struct ferry_cq *cq)
{
	shm_notify_change(to_scq(cq), false, SHM_NOTIFY_FUTEX, 0);
}

int shm_cq_sleep(struct ferry_cq *cq, struct ferry_cq_sleep *t, int timeout_ms)
{
	struct shm_cq *scq = to_scq(cq);
	struct futex_waitv v[2] = {
		{ .val = t->peer_val, .uaddr = (uintptr_t)t->peer_word, .flags = FUTEX_32 },
		{ .val = t->local_val, .uaddr = (uintptr_t)&scq->local_seq,
		  .flags = FUTEX_32 | FUTEX_PRIVATE_FLAG },
	};
	struct timespec ts;
	long r;

	if (timeout_ms >= 0) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += timeout_ms / 1000;
		ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
	}
	r = syscall(SYS_futex_waitv, v, 2u, 0u, timeout_ms >= 0 ? &ts : NULL, CLOCK_MONOTONIC);
	if (r < 0 && errno != EAGAIN && errno != ETIMEDOUT && errno != EINTR) {
		/* ENOSYS (before Linux 5.16), or a futex the kernel refuses:
		 * the channel from now on, rather than a loop that never sleeps. */
		ferry_info("futex_waitv: %m; sleeping on completion channels instead");
		atomic_store(&shm_no_waitv, true);
	}
	shm_cq_sleep_cancel(cq);
	if (r < 0 && errno == EINTR)
		return -1;
	return 0;	/* woken, timed out, or to poll again */
}

void shm_ack_cq_events(struct ferry_cq *cq, unsigned int n)
{
	struct shm_cq *scq = to_scq(cq);

	ferry_lock(&scq->lock);
	scq->acked += n;
	ferry_unlock(&scq->lock);
}

/*
 * shm_cq_signal_local - raise the CQ's event if it is armed for this kind of
 * completion; scq->lock held.  A completion made in this process disarms the
 * CQ at once, so one arm gives one event.
 */
void shm_cq_signal_local(struct shm_cq *scq, bool solicited_or_error)
{
	uint64_t w = atomic_load(&scq->notify->word);
	uint32_t mode = SHM_NOTIFY_MODE(w);
	bool chan = mode == SHM_NOTIFY_ALL || (mode == SHM_NOTIFY_SOLICITED && solicited_or_error);
	bool futex = w & SHM_NOTIFY_FUTEX;

	/*
	 * A channel that is a connection (SHM_NOTIFY_CONN) cannot be raised
	 * from here, so its arm is not spent either: it stays for the peer,
	 * whose next delivery must still wake the thread asleep on it.  What
	 * completes here without the caller looking: a send the monitor
	 * retries after an RNR wait, settled before every arm instead
	 * (shm_sq_settle_rnr), and errors, which shut the socket down
	 * (shm_qp_set_error).
	 */
	if (w & SHM_NOTIFY_CONN)
		chan = false;
	if (!chan && !futex)
		return;
	/* What is signalled is spent. */
	shm_notify_update(scq, scq->gen, (chan ? SHM_NOTIFY_MODES : 0) |
					 (futex ? SHM_NOTIFY_FUTEX : 0), 0);
	if (futex) {
		atomic_fetch_add(&scq->local_seq, 1);
		syscall(SYS_futex, &scq->local_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	}
	if (chan)
		shm_wake(&scq->wake);
}

/* Append a completion made in this process (sends, flushes); scq->lock held. */
void shm_cq_add_local(struct shm_cq *scq, const struct shm_lwc *lwc)
{
	uint32_t tail;

	if (scq->ring_count == scq->ring_cap) {
		uint32_t cap = scq->ring_cap ? 2 * scq->ring_cap : 64;
		struct shm_lwc *nr = malloc(cap * sizeof(*nr));
		uint32_t i;

		if (!nr) {
			/* Cannot grow: keep the oldest, which the user still needs. */
			ferry_err("CQ %p: out of memory for a completion; dropping wr_id %llu",
				  (void *)scq, (unsigned long long)lwc->wc.wr_id);
			return;
		}
		for (i = 0; i < scq->ring_count; i++)
			nr[i] = scq->ring[(scq->ring_head + i) % scq->ring_cap];
		free(scq->ring);
		scq->ring = nr;
		scq->ring_cap = cap;
		scq->ring_head = 0;
	}
	tail = (scq->ring_head + scq->ring_count) % scq->ring_cap;
	scq->ring[tail] = *lwc;
	scq->ring_count++;
	shm_cq_signal_local(scq, lwc->wc.status != FERRY_WC_SUCCESS);
}

void shm_cq_attach_recv(struct shm_cq *scq, struct shm_qp *qp)
{
	ferry_lock(&scq->lock);
	if (scq->nrqps == scq->rqps_cap) {
		uint32_t cap = scq->rqps_cap ? 2 * scq->rqps_cap : 4;
		struct shm_qp **n = realloc(scq->rqps, cap * sizeof(*n));

		if (!n) {
			ferry_unlock(&scq->lock);
			ferry_err("attaching a QP to its receive CQ: out of memory");
			return;
		}
		scq->rqps = n;
		scq->rqps_cap = cap;
	}
	scq->rqps[scq->nrqps++] = qp;
	ferry_unlock(&scq->lock);
}

void shm_cq_detach_recv(struct shm_cq *scq, struct shm_qp *qp)
{
	uint32_t i, j;

	ferry_lock(&scq->lock);
	if (scq->conn_qp == qp)
		scq->conn_qp = NULL;
	for (i = 0; i < scq->nrqps; i++) {
		if (scq->rqps[i] == qp) {
			scq->rqps[i] = scq->rqps[--scq->nrqps];
			break;
		}
	}
	/* Local completions of this QP must not outlive it. */
	for (i = 0, j = 0; i < scq->ring_count; i++) {
		struct shm_lwc *c = &scq->ring[(scq->ring_head + i) % scq->ring_cap];

		if (c->qp != qp)
			scq->ring[(scq->ring_head + j++) % scq->ring_cap] = *c;
	}
	scq->ring_count = j;
	ferry_unlock(&scq->lock);
}

/* The receives of @qp, RC (deliveries of its peer) or UD (datagrams). */
static inline int shm_cq_poll_qp(struct shm_qp *qp, int n, struct ferry_wc *wc)
{
	return qp->ud ? shm_ud_poll_recv(qp, n, wc) : shm_poll_recv(qp, n, wc);
}

/*
 * shm_poll_cq - local completions first (sends, flushes), then deliveries
 * from the peers of the QPs receiving here, starting with a different QP
 * each call so that one busy peer cannot starve the others.
 */
int shm_poll_cq(struct ferry_cq *cq, int n, struct ferry_wc *wc)
{
	struct shm_cq *scq = to_scq(cq);
	uint32_t i, start, nq;
	int got = 0;

	ferry_lock(&scq->lock);
	while (got < n && scq->ring_count) {
		struct shm_lwc *c = &scq->ring[scq->ring_head];

		wc[got++] = c->wc;
		if (c->is_send)
			atomic_store_explicit(&c->qp->sq_retired, c->sq_seq + 1,
					      memory_order_release);
		scq->ring_head = (scq->ring_head + 1) % scq->ring_cap;
		scq->ring_count--;
	}
	nq = scq->nrqps;
	if (nq == 1) {
		got += shm_cq_poll_qp(scq->rqps[0], n - got, wc + got);
	} else if (nq) {
		start = scq->rr_next < nq ? scq->rr_next : 0;
		scq->rr_next = start + 1;
		for (i = 0; i < nq && got < n; i++) {
			uint32_t k = start + i < nq ? start + i : start + i - nq;

			got += shm_cq_poll_qp(scq->rqps[k], n - got, wc + got);
		}
	}
	ferry_unlock(&scq->lock);
	return got;
}
