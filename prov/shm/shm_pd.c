/*
 * shm_pd.c - the shm provider's PDs and their MR tables: the shared table
 * of keys peers may use (small, and an overflow part made when it fills),
 * the private one of local-only keys, and the copies of the shared table
 * peers read.  Registering and deregistering MRs is shm_mr.c's.
 *
 * What peers read of a PD (its MR table) and of a CQ (its notify word,
 * shm_cq.c) is published this way: the owner keeps the primary in the
 * arena's private pool, which no peer maps, and a copy ("mirror") in the
 * pool of every peer process it has a connection with through that PD or
 * CQ, made by the first such connection and given back by the last.
 * Every change is written to the primary and then to each mirror, in the
 * order and with the atomics a reader of one copy relies on; the owner
 * only reads the primary.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "shm-internal.h"
#include "shm-ops.h"

/* --- PDs, and the tables of their MRs' keys --- */

/* A PD whose table has @entries slots (a power of two). */
static struct ferry_pd *shm_pd_new(struct ferry_context *ctx, uint32_t entries)
{
	size_t size = entries * sizeof(struct shm_mr_entry);
	struct shm_pd *spd = calloc(1, sizeof(*spd));

	if (!spd)
		return NULL;
	if (shm_arena_get(NULL, size, SHM_PIECE_TABLE, &spd->table_piece) < 0)
		goto err_free;
	spd->table = (struct shm_mr_entry *)spd->table_piece.addr;
	spd->table_entries = entries;
	pthread_mutex_init(&spd->lock, NULL);
	pthread_mutex_init(&spd->mirror_lock, NULL);
	atomic_init(&spd->hwm, 1);	/* slot 0 stays unused: key 0 is never valid */
	spd->pd.context = ctx;
	return &spd->pd;

err_free:
	free(spd);
	errno = ENOMEM;
	return NULL;
}

struct ferry_pd *shm_alloc_pd(struct ferry_context *ctx)
{
	return shm_pd_new(ctx, SHM_MR_TABLE_ENTRIES);
}

/*
 * Sized for @max_remote MRs with remote access: a stream socket's PD holds
 * one (its receive ring) and shares a page of the arena with others.
 */
struct ferry_pd *shm_alloc_pd_small(struct ferry_context *ctx, uint32_t max_remote)
{
	uint32_t entries = SHM_MR_TABLE_MIN;

	while (entries < SHM_MR_TABLE_ENTRIES && entries - 1 < max_remote)
		entries <<= 1;
	return shm_pd_new(ctx, entries);
}

/*
 * Slot @i of the PD's private table, or NULL past it (or, unless @make,
 * where its chunk is not made yet).  @make: spd->lock held.
 */
struct shm_mr_entry *shm_local_entry(struct shm_pd *spd, uint32_t i, bool make)
{
	uint32_t q = i / SHM_LOCAL_CHUNK0 + 1;
	int k = 31 - __builtin_clz(q);
	uint32_t first = SHM_LOCAL_CHUNK0 * ((1u << k) - 1);
	struct shm_mr_entry *c;

	if (k >= SHM_LOCAL_CHUNKS)
		return NULL;
	c = atomic_load_explicit(&spd->local[k], memory_order_acquire);
	if (!c && make) {
		c = calloc(SHM_LOCAL_CHUNK0 << k, sizeof(*c));
		if (!c)
			return NULL;
		atomic_store_explicit(&spd->local[k], c, memory_order_release);
	}
	return c ? &c[i - first] : NULL;
}

/* Does any MR of the private table remain?  spd->lock held. */
static bool shm_local_busy(struct shm_pd *spd)
{
	uint32_t i, hwm = atomic_load_explicit(&spd->local_hwm, memory_order_relaxed);

	for (i = 0; i < hwm; i++) {
		const struct shm_mr_entry *e = shm_local_entry(spd, i, false);

		if (e && atomic_load_explicit(&e->rkey, memory_order_relaxed))
			return true;
	}
	return false;
}
/* After fork another process writes this table too: stop writing it. */
void shm_detach_pd(struct ferry_pd *pd)
{
	struct shm_pd *spd = to_spd(pd);

	pthread_mutex_lock(&spd->lock);
	spd->detached = true;
	pthread_mutex_unlock(&spd->lock);
}

int shm_dealloc_pd(struct ferry_pd *pd)
{
	struct shm_pd *spd = to_spd(pd);
	uint32_t i;

	pthread_mutex_lock(&spd->lock);
	for (i = 1; !spd->detached && i < atomic_load_explicit(&spd->hwm, memory_order_relaxed);
	     i++) {
		const struct shm_mr_entry *e = shm_pd_slot(spd, i);

		if (e && atomic_load_explicit(&e->rkey, memory_order_relaxed)) {
			pthread_mutex_unlock(&spd->lock);
			return ERR(EBUSY);
		}
	}
	if (spd->qps || (!spd->detached && shm_local_busy(spd))) {
		pthread_mutex_unlock(&spd->lock);
		return ERR(EBUSY);
	}
	pthread_mutex_unlock(&spd->lock);
	for (i = 0; i < SHM_LOCAL_CHUNKS; i++)
		free(atomic_load_explicit(&spd->local[i], memory_order_relaxed));
	/* Every slot is free (rkey 0) and keeps its generation: the next PD
	 * to get this table hands out keys no holder of an old one can use.
	 * A detached table is also another process's: not ours to reuse.
	 * (No mirror is left: every QP, and so every connection, is gone.) */
	if (!spd->detached) {
		shm_arena_put(&spd->table_piece, 0);
		shm_arena_put(&spd->xtable_piece, 0);
	} else {
		shm_arena_drop(&spd->table_piece);
		shm_arena_drop(&spd->xtable_piece);
	}
	pthread_mutex_destroy(&spd->mirror_lock);
	pthread_mutex_destroy(&spd->lock);
	free(spd);
	return 0;
}

void shm_pd_add_qp(struct shm_pd *spd, struct shm_qp *qp)
{
	pthread_mutex_lock(&spd->lock);
	qp->pd_next = spd->qps;
	spd->qps = qp;
	pthread_mutex_unlock(&spd->lock);
}

/*
 * The PD's last QP is gone: no peer may keep the windows its connections
 * were given (ferry_block_renew moves their pages; new peers get the new
 * files).  A window was given out only if some connection of the PD got
 * as far as our windows; one that nobody got costs nothing here.
 * spd->lock held.
 */
static void shm_pd_renew_windows(struct shm_pd *spd)
{
	uint32_t i, hwm = atomic_load_explicit(&spd->hwm, memory_order_relaxed);
	uint32_t lhwm = atomic_load_explicit(&spd->local_hwm, memory_order_relaxed);

	for (i = 0; i < hwm + lhwm; i++) {
		struct shm_mr_entry *e = i < hwm ? shm_pd_slot(spd, i) :
					 shm_local_entry(spd, i - hwm, false);
		uint64_t id;

		if (!e || !atomic_load_explicit(&e->rkey, memory_order_relaxed) || !e->block_id)
			continue;
		if (ferry_block_renew(e->block_id, spd, &id) == 0 && id && id != e->block_id) {
			e->block_id = id;	/* no peer reads it: none is connected */
			if (i < hwm)
				shm_pd_publish(spd, i);	/* for the next peers' copies */
		}
	}
}

void shm_pd_remove_qp(struct shm_pd *spd, struct shm_qp *qp)
{
	struct shm_qp **pp;

	pthread_mutex_lock(&spd->lock);
	for (pp = &spd->qps; *pp; pp = &(*pp)->pd_next) {
		if (*pp == qp) {
			*pp = qp->pd_next;
			break;
		}
	}
	if (!spd->qps && !spd->detached && atomic_exchange(&spd->windows_out, false))
		shm_pd_renew_windows(spd);
	pthread_mutex_unlock(&spd->lock);
}

/*
 * The overflow table's copy in each mirror, or none (all given back);
 * mirror_lock held.  The primary is published after them, under the same
 * lock, so that a mirror made later finds it and makes its own copy.
 */
static int shm_pd_grow_mirrors(struct shm_pd *spd)
{
	size_t size = SHM_MR_TABLE_ENTRIES * sizeof(struct shm_mr_entry);
	struct shm_mirror *m, *undo;

	for (m = spd->mirrors; m; m = m->next)
		if (shm_arena_get(m->pool, size, SHM_PIECE_TABLE, &m->xpiece) < 0)
			goto err_undo;
	atomic_store_explicit(&spd->xtable, (struct shm_mr_entry *)spd->xtable_piece.addr,
			      memory_order_release);
	return 0;

err_undo:
	for (undo = spd->mirrors; undo != m; undo = undo->next)
		shm_arena_put(&undo->xpiece, 0);
	return -1;
}

/*
 * The small table is full: make the overflow table and tell the connected
 * peers where their copy of it is before any key of it exists (as blocks
 * are announced).  spd->lock held.  A detached PD's table is another
 * process's too: no.
 */
static int shm_pd_grow(struct shm_pd *spd)
{
	size_t size = SHM_MR_TABLE_ENTRIES * sizeof(struct shm_mr_entry);
	struct shm_qp *qp;
	int r;

	if (spd->detached || shm_arena_get(NULL, size, SHM_PIECE_TABLE, &spd->xtable_piece) < 0)
		return -1;
	pthread_mutex_lock(&spd->mirror_lock);
	r = shm_pd_grow_mirrors(spd);
	pthread_mutex_unlock(&spd->mirror_lock);
	if (r < 0) {
		shm_arena_put(&spd->xtable_piece, 0);
		return -1;
	}
	for (qp = spd->qps; qp; qp = qp->pd_next) {
		struct shm_conn *conn;

		ferry_lock(&qp->sq_lock);
		conn = shm_qp_announce_conn(qp);
		if (conn)
			shm_conn_announce_table(conn, &conn->table_mirror->xpiece);
		ferry_unlock(&qp->sq_lock);
	}
	return 0;
}

/*
 * Find a free MR slot; spd->lock held.  The lowest free one, so that the
 * used part of the table (and the memory it occupies) stays small.
 */
uint32_t shm_pd_free_slot(struct shm_pd *spd)
{
	uint32_t i, hwm = atomic_load_explicit(&spd->hwm, memory_order_relaxed);

	for (i = 1; i < hwm; i++)
		if (!atomic_load_explicit(&shm_pd_slot(spd, i)->rkey, memory_order_relaxed))
			return i;
	if (hwm == SHM_MR_TABLE_ENTRIES || (!shm_pd_slot(spd, hwm) && shm_pd_grow(spd) < 0))
		return 0;
	/* Published before the slot's key: a scan that sees the key sees it. */
	atomic_store_explicit(&spd->hwm, hwm + 1, memory_order_release);
	return hwm;
}

/* A free slot of the private table, as shm_pd_free_slot; NULL if none. */
struct shm_mr_entry *shm_pd_free_local(struct shm_pd *spd, uint32_t *i_p)
{
	uint32_t i, hwm = atomic_load_explicit(&spd->local_hwm, memory_order_relaxed);
	struct shm_mr_entry *e;

	for (i = 0; i < hwm; i++) {
		e = shm_local_entry(spd, i, false);
		if (e && !atomic_load_explicit(&e->rkey, memory_order_relaxed)) {
			*i_p = i;
			return e;
		}
	}
	e = shm_local_entry(spd, hwm, true);
	if (!e)
		return NULL;
	atomic_store_explicit(&spd->local_hwm, hwm + 1, memory_order_release);
	*i_p = hwm;
	return e;
}

/* --- the copies of MR tables peers read --- */

/* Slot @idx of @m, the copy of @spd's table, or NULL. */
static struct shm_mr_entry *shm_mirror_slot(const struct shm_pd *spd, const struct shm_mirror *m,
					    uint32_t idx)
{
	if (idx < spd->table_entries)
		return idx ? &((struct shm_mr_entry *)m->piece.addr)[idx] : NULL;
	if (!m->xpiece.seg || idx >= SHM_MR_TABLE_ENTRIES)
		return NULL;
	return &((struct shm_mr_entry *)m->xpiece.addr)[idx];
}

/*
 * Make @dst, a slot a peer reads, what @src is.  A reader checks the key,
 * reads the rest, and checks the key again (shm_remote_resolve): so a key
 * that goes is taken away first, the rest is written after a fence, and
 * a key that comes is stored last.  Every field is copied, whatever the
 * entry holds: a copy never lags its primary by a field.
 */
static void shm_mr_entry_copy(struct shm_mr_entry *dst, const struct shm_mr_entry *src)
{
	uint32_t key = atomic_load_explicit(&src->rkey, memory_order_acquire);
	uint32_t had = atomic_load_explicit(&dst->rkey, memory_order_relaxed);

	if (had == key)
		return;		/* one key names one registration: nothing changed */
	if (had) {
		atomic_store_explicit(&dst->rkey, 0, memory_order_release);
		atomic_thread_fence(memory_order_release);
	}
	if (!key)
		return;
	memcpy(&dst->access, &src->access, sizeof(*dst) - offsetof(struct shm_mr_entry, access));
	atomic_store_explicit(&dst->rkey, key, memory_order_release);
}

/*
 * The slots used so far into @m, a new copy (zero).  Without the PD's lock:
 * a slot that reg_mr or dereg_mr is changing meanwhile is copied again by
 * its shm_pd_publish, which waits for mirror_lock; until then no peer has
 * been told where @m is.  mirror_lock held.
 */
static void shm_pd_mirror_fill(struct shm_pd *spd, struct shm_mirror *m)
{
	uint32_t i, hwm = atomic_load_explicit(&spd->hwm, memory_order_acquire);

	for (i = 1; i < hwm; i++) {
		const struct shm_mr_entry *src = shm_pd_slot(spd, i);
		struct shm_mr_entry *dst = shm_mirror_slot(spd, m, i);

		if (src && dst)
			shm_mr_entry_copy(dst, src);
	}
}

/* A new copy of @spd's table in @pool; mirror_lock held. */
static struct shm_mirror *shm_pd_mirror_make(struct shm_pd *spd, struct shm_pool *pool)
{
	size_t size = spd->table_entries * sizeof(struct shm_mr_entry);
	struct shm_mirror *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	if (shm_arena_get(pool, size, SHM_PIECE_TABLE, &m->piece) < 0)
		goto err_free;
	/* spd->xtable is published under mirror_lock (shm_pd_grow_mirrors). */
	if (atomic_load_explicit(&spd->xtable, memory_order_relaxed) &&
	    shm_arena_get(pool, SHM_MR_TABLE_ENTRIES * sizeof(struct shm_mr_entry),
			  SHM_PIECE_TABLE, &m->xpiece) < 0)
		goto err_put;
	m->pool = pool;
	m->refs = 1;
	shm_pd_mirror_fill(spd, m);
	m->next = spd->mirrors;
	spd->mirrors = m;
	return m;

err_put:
	shm_arena_put(&m->piece, 0);
err_free:
	free(m);
	errno = ENOMEM;
	return NULL;
}

struct shm_mirror *shm_pd_mirror_get(struct shm_pd *spd, struct shm_pool *pool)
{
	struct shm_mirror *m;

	pthread_mutex_lock(&spd->mirror_lock);
	for (m = spd->mirrors; m; m = m->next)
		if (m->pool == pool)
			break;
	if (m)
		m->refs++;
	else
		m = shm_pd_mirror_make(spd, pool);
	pthread_mutex_unlock(&spd->mirror_lock);
	return m;
}

void shm_pd_mirror_put(struct shm_pd *spd, struct shm_mirror *m)
{
	struct shm_mirror **pp;
	size_t dirty;

	if (!m)
		return;
	pthread_mutex_lock(&spd->mirror_lock);
	if (--m->refs > 0) {
		pthread_mutex_unlock(&spd->mirror_lock);
		return;
	}
	for (pp = &spd->mirrors; *pp != m; pp = &(*pp)->next)
		;
	*pp = m->next;
	pthread_mutex_unlock(&spd->mirror_lock);
	/* It holds copies of slots [0, hwm) at most: zeroed for the pool's
	 * next table, which must show no key of this one.  A detached PD's
	 * copy is read by the other process's connections too: kept. */
	dirty = atomic_load_explicit(&spd->hwm, memory_order_acquire) *
		sizeof(struct shm_mr_entry);
	if (spd->detached) {
		shm_arena_drop(&m->piece);
		shm_arena_drop(&m->xpiece);
	} else {
		shm_arena_put(&m->piece, dirty);
		shm_arena_put(&m->xpiece, dirty);
	}
	free(m);
}

/*
 * shm_pd_publish - slot @idx of the primary, just written (spd->lock
 * held), into every copy.  The private table's slots (SHM_KEY_LOCAL) have
 * none; nor has a detached PD, whose slots stay as the other process
 * left them.
 */
void shm_pd_publish(struct shm_pd *spd, uint32_t idx)
{
	const struct shm_mr_entry *src = shm_pd_slot(spd, idx);
	struct shm_mirror *m;

	if ((idx & SHM_KEY_LOCAL) || !src || spd->detached)
		return;
	pthread_mutex_lock(&spd->mirror_lock);
	for (m = spd->mirrors; m; m = m->next) {
		struct shm_mr_entry *dst = shm_mirror_slot(spd, m, idx);

		if (dst)
			shm_mr_entry_copy(dst, src);
	}
	pthread_mutex_unlock(&spd->mirror_lock);
}

/*
 * For shm_conn_announce_existing: the MR entries of @spd with some access
 * (the peer may write into them), shared table then private; *pos starts
 * at 0.  NULL at the end.  The entries are read without the PD lock.
 */
const struct shm_mr_entry *shm_pd_next_entry(struct shm_pd *spd, uint32_t *pos)
{
	uint32_t hwm = atomic_load_explicit(&spd->hwm, memory_order_acquire);

	while (*pos < hwm || *pos - hwm < atomic_load_explicit(&spd->local_hwm,
							       memory_order_acquire)) {
		uint32_t i = (*pos)++;
		const struct shm_mr_entry *e = i < hwm ? shm_pd_slot(spd, i) :
						  shm_local_entry(spd, i - hwm, false);

		if (e && atomic_load_explicit(&e->rkey, memory_order_acquire) && e->access)
			return e;
	}
	return NULL;
}
