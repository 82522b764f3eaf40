/*
 * shm_region.c - a QP's region: made in the peer process's pool of the
 * arena once the peer's HELLO says how deep its receive queue is
 * (shm_region_create), and let go when the QP is done with it
 * (shm_region_release): a piece the peer may still read is retired until
 * the peer lets go of it too, never recycled under its eyes.  The
 * exchange that announces it is shm_conn.c's.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm-internal.h"

int shm_region_create(struct shm_qp *qp, struct shm_conn *conn)
{
	uint32_t peer_rq_size = conn->peer_rq_size;
	bool bounce = shm_conn_bounces(conn);
	struct shm_region_layout l = shm_region_layout(qp->rq_size,
						       shm_rq_stride(qp->cap.max_recv_sge),
						       peer_rq_size, bounce);
	struct shm_region *r;

	if (shm_arena_get(conn->pool, l.size, SHM_PIECE_REGION, &qp->region_piece) < 0) {
		ferry_warn("QP %u: no room for a %zu-byte region: %m", qp->qp.qp_num, l.size);
		return ERR(ENOMEM);
	}
	if (!qp->region_piece.zero) {
		/*
		 * Recycled: its last owner's bytes (a connection to the same
		 * process: pools are per peer), perhaps in another layout.
		 * The head and this layout's delivery ring must read 0 (a stale
		 * slot could pass for a delivery); the receive ring is written
		 * whole, first lap included (shm_rq_write_entry).
		 */
		size_t dq = (size_t)peer_rq_size * sizeof(struct shm_delivery);

		if (dq > l.head_off)
			dq = l.head_off;
		memset(qp->region_piece.addr + l.head_off - dq, 0, dq);
		memset(qp->region_piece.addr + l.head_off, 0, shm_region_head_size());
	}
	r = (struct shm_region *)(qp->region_piece.addr + l.head_off);
	r->magic = SHM_MAGIC;
	r->version = SHM_VERSION;
	r->qp_num = qp->qp.qp_num;
	r->rq_size = qp->rq_size;
	r->rq_sge = qp->cap.max_recv_sge;
	r->dq_size = peer_rq_size;
	atomic_store(&r->min_rnr_timer, qp->min_rnr_timer);
	atomic_store(&r->qp_access, qp->access);
	qp->region = r;
	qp->region_size = l.size;
	qp->region_head_off = l.head_off;
	qp->rq_stride = shm_rq_stride(qp->cap.max_recv_sge);
	/* A recycled region's ring holds old records: the counters say none
	 * are new (both start at 0, ours and the peer's of ours). */
	qp->bounce = bounce;
	qp->bounce_ring = bounce ? qp->region_piece.addr + l.bounce_off : NULL;
	qp->bounce_prod = qp->bounce_cons = qp->bounce_done = qp->bounce_retry_ns = 0;
	atomic_store(&r->bounce_prod, 0);
	atomic_store(&r->bounce_cons, 0);
	return 0;
}

/* A region waiting for its peer to let go of it. */
struct shm_retired {
	struct shm_piece piece;
	struct shm_mapping *peer_map;	/* keeps the peer's region readable */
	const struct shm_region *peer;
	uint32_t peer_qpn;
	pid_t peer_pid;
	uint64_t next_pid_check_ns;
	struct shm_retired *next;
};

static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_retired *retired;
static pid_t retired_pid;
FERRY_FORK_SAFE(retired, retired_lock)

#define SHM_PID_CHECK_NS	1000000000ull	/* is a silent peer dead? once a second */

/* Has the peer let go of our region?  It says so in its own, or gave its
 * own back (its QP number is gone from it), or is dead. */
static bool shm_peer_let_go(const struct shm_region *peer, uint32_t peer_qpn, pid_t pid,
			    uint64_t *next_check_ns)
{
	uint64_t now;

	if (atomic_load_explicit(&peer->released, memory_order_acquire) ||
	    __atomic_load_n(&peer->qp_num, __ATOMIC_RELAXED) != peer_qpn)
		return true;
	if (!next_check_ns)
		return false;
	now = shm_now_ns();
	if (now < *next_check_ns)
		return false;
	*next_check_ns = now + SHM_PID_CHECK_NS;	/* a system call: seldom */
	return kill(pid, 0) < 0 && errno == ESRCH;
}

/* Its next owner clears what its own layout needs (shm_region_create). */
static void shm_region_recycle(struct shm_piece *piece)
{
	shm_arena_put(piece, SHM_PIECE_UNZEROED);
}

/* After fork: the parent's records, not ours to act on; retired_lock held. */
static void shm_retired_adopt_locked(void)
{
	if (retired_pid != ferry_pid()) {
		retired = NULL;
		retired_pid = ferry_pid();
	}
}

/* Reuse the retired regions whose peers have let go since. */
static void shm_retired_reap(void)
{
	struct shm_retired **pp, *r, *done = NULL;

	pthread_mutex_lock(&retired_lock);
	shm_retired_adopt_locked();
	for (pp = &retired; (r = *pp);) {
		if (shm_peer_let_go(r->peer, r->peer_qpn, r->peer_pid, &r->next_pid_check_ns)) {
			*pp = r->next;
			r->next = done;
			done = r;
			continue;
		}
		pp = &r->next;
	}
	pthread_mutex_unlock(&retired_lock);
	while ((r = done)) {
		done = r->next;
		shm_region_recycle(&r->piece);
		shm_unmap(r->peer_map);
		free(r);
	}
}

void shm_region_release(struct shm_qp *qp, struct shm_conn *conn)
{
	struct shm_region *region = qp->region;
	struct shm_retired *r;

	if (!region)
		return;
	qp->region = NULL;
	/* Detached: another process drives the QP since fork. */
	if (to_spd(qp->qp.pd)->detached) {
		shm_arena_drop(&qp->region_piece);
		return;
	}
	/* Done with the peer: it may reuse its region once it is done with ours. */
	atomic_store_explicit(&region->released, 1, memory_order_release);
	if (!conn || !conn->peer_region ||
	    shm_peer_let_go(conn->peer_region, conn->peer_qpn, conn->peer_pid, NULL)) {
		shm_region_recycle(&qp->region_piece);
		shm_retired_reap();
		return;
	}
	/* The peer may still take deliveries we made from it, for as long as
	 * it likes: the region waits, and the peer's stays mapped to tell. */
	r = malloc(sizeof(*r));
	if (!r) {
		shm_arena_drop(&qp->region_piece);	/* never reused: lost, not shared */
		return;
	}
	r->piece = qp->region_piece;
	r->peer_map = conn->peer_region_map;
	r->peer = conn->peer_region;
	r->peer_qpn = conn->peer_qpn;
	r->peer_pid = conn->peer_pid;
	r->next_pid_check_ns = shm_now_ns() + SHM_PID_CHECK_NS;
	conn->peer_region_map = NULL;
	conn->peer_region = NULL;
	qp->region_piece.seg = NULL;
	pthread_mutex_lock(&retired_lock);
	shm_retired_adopt_locked();
	r->next = retired;
	retired = r;
	pthread_mutex_unlock(&retired_lock);
	shm_retired_reap();
}
