/*
 * shm.c - the shm provider's table, and its context, PD, MR, completion
 * channel and CQ objects.  QPs live in shm_qp.c, the data path in
 * shm_data.c, connections and the monitor thread in shm_conn.c.
 *
 * What peers read of a PD (its MR table) and of a CQ (its notify word) is
 * published here: the owner keeps the primary in the arena's private pool,
 * which no peer maps, and a copy ("mirror") in the pool of every peer
 * process it has a connection with through that PD or CQ, made by the
 * first such connection and given back by the last.  Every change is
 * written to the primary and then to each mirror, in the order and with
 * the atomics a reader of one copy relies on; the owner only reads the
 * primary.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shm-internal.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

/* What a peer's file must be sealed with before we map it: a fixed size. */
#define SHM_PEER_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

uint64_t shm_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* --- mappings of peers' files --- */

static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_mapping *maps;
static uint64_t maps_clock;	/* orders the kept mappings' last uses */
static int maps_idle_kept;	/* kept mappings nobody uses now */
FERRY_FORK_SAFE(maps, maps_lock)

struct shm_mapping *shm_map_fd(int fd, size_t min_size, int prot)
{
	struct shm_mapping *m;
	struct stat st;
	int seals;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		goto err_inval;
	if ((uint64_t)st.st_size < min_size || st.st_size == 0) {
		ferry_warn("peer passed a %lld-byte file, %zu needed",
			   (long long)st.st_size, min_size);
		goto err_inval;
	}

	pthread_mutex_lock(&maps_lock);
	for (m = maps; m; m = m->next) {
		if (m->dev == st.st_dev && m->ino == st.st_ino && m->prot == prot) {
			/* Its seals were checked and none ever goes, so the file
			 * cannot have changed size; what counts is still the
			 * mapping we have, not what fstat says now. */
			if (m->size < min_size) {
				pthread_mutex_unlock(&maps_lock);
				ferry_warn("peer named %zu bytes of a file mapped with %zu",
					   min_size, m->size);
				goto err_inval;
			}
			if (m->refs++ == 0)
				maps_idle_kept--;	/* only kept ones stay at zero */
			pthread_mutex_unlock(&maps_lock);
			return m;
		}
	}
	/* Sealed both ways: a file that could grow would have fstat and our
	 * mapping disagree, and one that could shrink would fault under us. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & SHM_PEER_SEALS) != SHM_PEER_SEALS) {
		pthread_mutex_unlock(&maps_lock);
		ferry_warn("peer passed a file that is not a memfd sealed against "
			   "shrinking and growing");
		goto err_inval;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		goto err_unlock;
	m->addr = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
	if (m->addr == MAP_FAILED) {
		ferry_warn("mapping a peer's %lld-byte file: %m", (long long)st.st_size);
		free(m);
		goto err_unlock;
	}
	m->size = (size_t)st.st_size;
	m->dev = st.st_dev;
	m->ino = st.st_ino;
	m->prot = prot;
	m->refs = 1;
	m->prev = NULL;
	m->next = maps;
	if (maps)
		maps->prev = m;
	maps = m;
	pthread_mutex_unlock(&maps_lock);
	return m;

err_unlock:
	pthread_mutex_unlock(&maps_lock);
	errno = ENOMEM;
	return NULL;
err_inval:
	errno = EINVAL;
	return NULL;
}

void shm_map_keep(struct shm_mapping *m)
{
	pthread_mutex_lock(&maps_lock);
	m->keep = true;
	pthread_mutex_unlock(&maps_lock);
}

static void shm_mapping_unlink_locked(struct shm_mapping *m)
{
	if (m->next)
		m->next->prev = m->prev;
	if (m->prev)
		m->prev->next = m->next;
	else
		maps = m->next;
}

void shm_unmap(struct shm_mapping *m)
{
	struct shm_mapping *old = NULL, *v;

	if (!m)
		return;
	pthread_mutex_lock(&maps_lock);
	if (--m->refs > 0) {
		pthread_mutex_unlock(&maps_lock);
		return;
	}
	if (!m->keep) {
		shm_mapping_unlink_locked(m);
		old = m;
	} else if (++maps_idle_kept > SHM_KEEP_IDLE) {
		/* Too many kept: the one unused the longest goes (rare: a peer
		 * process per kept segment, and most of them gone). */
		for (v = maps; v; v = v->next)
			if (v->keep && v->refs == 0 && v != m &&
			    (!old || v->idle_since < old->idle_since))
				old = v;
		if (old) {
			shm_mapping_unlink_locked(old);
			maps_idle_kept--;
		}
	}
	m->idle_since = ++maps_clock;
	pthread_mutex_unlock(&maps_lock);
	if (old) {
		munmap(old->addr, old->size);
		free(old);
	}
}

/* --- device and context --- */

static struct ferry_device shm_device = {
	.provider = &ferry_shm_provider,
	.name = "shm0",
};

static int shm_get_devices(struct ferry_device **devs, int max)
{
	if (max < 1)
		return 0;
	devs[0] = &shm_device;
	return 1;
}

static struct ferry_context *shm_open_device(struct ferry_device *dev)
{
	struct shm_context *sc = calloc(1, sizeof(*sc));

	if (!sc)
		return NULL;
	sc->ctx.device = dev;
	sc->ctx.provider = &ferry_shm_provider;
	return &sc->ctx;
}

static int shm_close_device(struct ferry_context *ctx)
{
	free(container_of(ctx, struct shm_context, ctx));
	return 0;
}

/* What the soft device can do; SRQs, memory windows and multicast: none yet. */
static int shm_query_device(struct ferry_context *ctx, struct ferry_device_attr *attr)
{
	(void)ctx;
	memset(attr, 0, sizeof(*attr));
	snprintf(attr->fw_ver, sizeof(attr->fw_ver), "ferry %s", PACKAGE_VERSION);
	attr->max_mr_size = SHM_MAX_MR_SIZE;
	attr->page_size_cap = ~((uint64_t)sysconf(_SC_PAGESIZE) - 1);
	attr->max_qp = 1 << 20;
	attr->max_qp_wr = SHM_MAX_QP_WR;
	attr->device_cap_flags = FERRY_DEVICE_RC_RNR_NAK_GEN;
	attr->max_sge = SHM_MAX_SGE;
	attr->max_sge_rd = SHM_MAX_SGE;
	attr->max_cq = 1 << 20;
	attr->max_cqe = SHM_MAX_CQE;
	attr->max_mr = SHM_MR_TABLE_ENTRIES - 1;
	attr->max_pd = 1 << 20;
	attr->max_qp_rd_atom = 128;
	attr->max_res_rd_atom = 128 << 20;	/* max_qp_rd_atom for every QP */
	attr->max_qp_init_rd_atom = 128;
	/* CPU atomics on shared memory: atomic with the CPU's own as well. */
	attr->atomic_cap = FERRY_ATOMIC_GLOB;
	attr->max_pkeys = 1;
	attr->phys_port_cnt = 1;
	attr->max_inline_data = SHM_MAX_INLINE;
	return 0;
}

static int shm_query_device_ex(struct ferry_context *ctx, struct ferry_device_attr_ex *attr)
{
	(void)ctx;
	attr->phys_port_cnt_ex = 1;
	return 0;
}

/* --- protection domains and memory regions --- */

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

static struct ferry_pd *shm_alloc_pd(struct ferry_context *ctx)
{
	return shm_pd_new(ctx, SHM_MR_TABLE_ENTRIES);
}

/*
 * Sized for @max_remote MRs with remote access: a stream socket's PD holds
 * one (its receive ring) and shares a page of the arena with others.
 */
static struct ferry_pd *shm_alloc_pd_small(struct ferry_context *ctx, uint32_t max_remote)
{
	uint32_t entries = SHM_MR_TABLE_MIN;

	while (entries < SHM_MR_TABLE_ENTRIES && entries - 1 < max_remote)
		entries <<= 1;
	return shm_pd_new(ctx, entries);
}

/* Slot @idx of the PD's shared table (small or overflow part), or NULL. */
static struct shm_mr_entry *shm_pd_slot(struct shm_pd *spd, uint32_t idx)
{
	struct shm_mr_entry *x;

	if (idx < spd->table_entries)
		return idx ? &spd->table[idx] : NULL;
	x = atomic_load_explicit(&spd->xtable, memory_order_acquire);
	return x && idx < SHM_MR_TABLE_ENTRIES ? &x[idx] : NULL;
}

/*
 * Slot @i of the PD's private table, or NULL past it (or, unless @make,
 * where its chunk is not made yet).  @make: spd->lock held.
 */
static struct shm_mr_entry *shm_local_entry(struct shm_pd *spd, uint32_t i, bool make)
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

static void shm_detach_cq(struct ferry_cq *cq)
{
	to_scq(cq)->detached = true;
}

/* After fork another process writes this table too: stop writing it. */
static void shm_detach_pd(struct ferry_pd *pd)
{
	struct shm_pd *spd = to_spd(pd);

	pthread_mutex_lock(&spd->lock);
	spd->detached = true;
	pthread_mutex_unlock(&spd->lock);
}

static int shm_dealloc_pd(struct ferry_pd *pd)
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
static void shm_pd_publish(struct shm_pd *spd, uint32_t idx);

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
static uint32_t shm_pd_free_slot(struct shm_pd *spd)
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
static struct shm_mr_entry *shm_pd_free_local(struct shm_pd *spd, uint32_t *i_p)
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

/* The slot a key of @spd names (local or shared), or NULL. */
static struct shm_mr_entry *shm_pd_entry(struct shm_pd *spd, uint32_t key)
{
	uint32_t idx = SHM_KEY_INDEX(key);

	if (idx & SHM_KEY_LOCAL)
		return shm_local_entry(spd, idx & ~SHM_KEY_LOCAL, false);
	return shm_pd_slot(spd, idx);
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
static void shm_pd_publish(struct shm_pd *spd, uint32_t idx)
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

/*
 * Tell every connected peer of the PD about a window it can now reach, and
 * every peer whose exchange has had our windows already (it takes this one
 * before the exchange completes, or later as established peers do).
 * Announcing happens before ferry_reg_mr returns, so the window's fd is in
 * the peer's socket before the rkey can possibly reach it.
 */
static void shm_pd_announce(struct shm_pd *spd, uint64_t block_id, uint32_t access)
{
	struct shm_conn *conn;
	struct shm_qp *qp;
	int fd = -1;

	for (qp = spd->qps; qp; qp = qp->pd_next) {
		ferry_lock(&qp->sq_lock);
		conn = shm_qp_announce_conn(qp);
		if (conn && !shm_conn_may_map(conn, access))
			conn = NULL;
		if (conn && fd < 0)
			fd = ferry_block_window_fd(block_id);
		if (conn && fd >= 0 && shm_conn_announce_block(conn, block_id, fd) == 0)
			shm_pd_windows_out(spd);
		ferry_unlock(&qp->sq_lock);
	}
	if (fd >= 0)
		close(fd);
}

/*
 * The window peers reach [addr, addr+len) through, if it is ferry_alloc
 * memory they may touch: for one-sided access, or for SENDs into receive
 * buffers (LOCAL_WRITE).  Read-only unless they may write
 * (shm_window_writable).  Memory of no
 * block, or a span that overlaps another MR's window (two files cannot
 * hold the same pages), is reached only as plain memory (shm_peer.c: a
 * peer of our user).  0, or -1 with errno set for a real failure.
 */
static int shm_mr_share(struct shm_pd *spd, struct shm_mr *smr, void *addr, size_t len,
			int access)
{
	bool write = shm_window_writable((uint32_t)access);

	if (!access || !len)
		return 0;
	if (ferry_block_share(addr, len, write, spd, &smr->block_id, &smr->block_offset) == 0)
		return 0;
	smr->block_id = 0;
	if (errno == EINVAL)
		return 0;	/* no ferry_alloc memory */
	if (errno == EBUSY) {
		ferry_info("MR at %p (%zu bytes) shares pages with another MR's: peers of "
			   "another user cannot reach it", addr, len);
		return 0;
	}
	return -1;
}

static struct ferry_mr *shm_reg_mr(struct ferry_pd *pd, void *addr, size_t len, int access)
{
	struct shm_pd *spd = to_spd(pd);
	bool remote = access & (FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ |
				FERRY_ACCESS_REMOTE_ATOMIC);
	struct shm_mr_entry *e;
	struct shm_mr *smr;
	uint32_t idx, key;

	if (len > SHM_MAX_MR_SIZE) {
		errno = EINVAL;
		return NULL;
	}
	smr = calloc(1, sizeof(*smr));
	if (!smr)
		return NULL;
	if (shm_mr_share(spd, smr, addr, len, access) < 0)
		goto err_free;

	pthread_mutex_lock(&spd->lock);
	if (remote) {
		idx = shm_pd_free_slot(spd);
		e = idx ? shm_pd_slot(spd, idx) : NULL;
	} else {
		e = shm_pd_free_local(spd, &idx);
		idx |= SHM_KEY_LOCAL;
	}
	if (!e) {
		pthread_mutex_unlock(&spd->lock);
		errno = ENOMEM;
		goto err_free;
	}
	key = SHM_KEY(idx, ++e->gen);	/* idx >= 1: never 0 */
	e->access = (uint32_t)access;
	e->addr = (uintptr_t)addr;
	e->length = len;
	e->block_id = smr->block_id;
	e->block_offset = smr->block_offset;
	atomic_store_explicit(&e->rkey, key, memory_order_release);
	shm_pd_publish(spd, idx);
	if (smr->block_id)
		shm_pd_announce(spd, smr->block_id, (uint32_t)access);
	pthread_mutex_unlock(&spd->lock);

	smr->index = idx;
	smr->mr.context = pd->context;
	smr->mr.pd = pd;
	smr->mr.addr = addr;
	smr->mr.length = len;
	smr->mr.handle = idx;
	smr->mr.lkey = key;
	smr->mr.rkey = key;
	return &smr->mr;

err_free:
	if (smr->block_id)
		ferry_block_unshare(smr->block_id);
	free(smr);
	return NULL;
}

static int shm_dereg_mr(struct ferry_mr *mr)
{
	struct shm_mr *smr = to_smr(mr);
	struct shm_pd *spd = to_spd(mr->pd);
	struct shm_mr_entry *e;
	uint64_t window = 0;

	pthread_mutex_lock(&spd->lock);
	e = shm_pd_entry(spd, mr->lkey);
	if (e && (!spd->detached || (smr->index & SHM_KEY_LOCAL))) {
		window = e->block_id;	/* renewed since registration, maybe */
		atomic_store_explicit(&e->rkey, 0, memory_order_release);
		shm_pd_publish(spd, SHM_KEY_INDEX(mr->lkey));
	}
	pthread_mutex_unlock(&spd->lock);
	/* The key is gone from the table first: peers of ours stop using the
	 * window before it is taken from them. */
	if (window)
		ferry_block_unshare(window);
	free(smr);
	return 0;
}

/* Our own table is trusted (peers can only read it). NULL if @lkey is stale. */
const struct shm_mr_entry *shm_mr_lookup_local(struct shm_pd *spd, uint32_t lkey)
{
	const struct shm_mr_entry *e = shm_pd_entry(spd, lkey);

	if (!e || atomic_load_explicit(&e->rkey, memory_order_acquire) != lkey)
		return NULL;
	return e;
}

/* --- completion channels --- */

static struct ferry_comp_channel *shm_create_comp_channel(struct ferry_context *ctx)
{
	struct shm_channel *sch = calloc(1, sizeof(*sch));

	if (!sch)
		return NULL;
	sch->ch.fd = ferry_fd_park(epoll_create1(EPOLL_CLOEXEC));
	if (sch->ch.fd < 0) {
		free(sch);
		return NULL;
	}
	sch->ch.context = ctx;
	return &sch->ch;
}

static struct ferry_comp_channel *shm_create_comp_channel_single(struct ferry_context *ctx)
{
	struct shm_channel *sch = calloc(1, sizeof(*sch));

	if (!sch)
		return NULL;
	sch->ch.fd = shm_wake_socket(&sch->wake);
	if (sch->ch.fd < 0) {
		free(sch);
		return NULL;
	}
	sch->single = true;
	sch->ch.context = ctx;
	return &sch->ch;
}

static inline struct shm_channel *to_sch(struct ferry_comp_channel *ch)
{
	return container_of(ch, struct shm_channel, ch);
}

/*
 * shm_notify_update - the CQ's arm word becomes generation @gen with its
 * bits @clear taken off and @set put on; scq->lock held.  A channel's
 * arm (the mode) and a futex sleeper's (SHM_NOTIFY_FUTEX) come and go
 * apart: neither may take the other's away.  seq_cst: an arm pairs with
 * the fence a sender runs between publishing a delivery and reading this
 * word (see shm_data.c).
 */
static void shm_notify_update(struct shm_cq *scq, uint64_t gen, uint32_t clear, uint32_t set)
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

/* A single-CQ channel's event: its wake socket had something. */
static int shm_cq_event_single(struct shm_channel *sch, struct shm_cq **scq_p, bool nowait)
{
	struct pollfd pfd = { .fd = sch->ch.fd, .events = POLLIN };

	for (;;) {
		int got = shm_wake_drain(sch->ch.fd);

		if (got > 0)
			break;
		if (got < 0)
			return -1;
		/* O_NONBLOCK unless the application took it off */
		if (nowait || (fcntl(sch->ch.fd, F_GETFL) & O_NONBLOCK))
			return ERR(EAGAIN);
		if (poll(&pfd, 1, -1) < 0)
			return -1;
	}
	/* A count with no CQ: one gone since (its events were acked). */
	if (!sch->cq)
		return ERR(EAGAIN);
	*scq_p = sch->cq;
	return 0;
}

static int shm_destroy_comp_channel(struct ferry_comp_channel *ch)
{
	struct shm_channel *sch = container_of(ch, struct shm_channel, ch);

	if (!sch->fd_given)
		close(ch->fd);	/* the core refuses while CQs still use it */
	free(sch);
	return 0;
}

/*
 * A single channel's socket now has number @fd, which the caller made
 * (dup3) and keeps: it closes the old number, and @fd when it is done.
 * The CQ is woken by name, so no one else holds the number.
 */
static int shm_renumber_comp_channel(struct ferry_comp_channel *ch, int fd)
{
	struct shm_channel *sch = container_of(ch, struct shm_channel, ch);

	if (!sch->single)
		return ERR(EOPNOTSUPP);
	if (sch->on_conn && sch->cq) {
		/* Its QP, while there (conn_qp), holds the number too and has
		 * its monitor watch it. */
		int flags = fcntl(fd, F_GETFD), moved = fd;
		struct shm_qp *qp;

		ferry_lock(&sch->cq->lock);
		qp = sch->cq->conn_qp;
		ferry_unlock(&sch->cq->lock);
		if (qp) {
			ferry_lock(&qp->sq_lock);
			if (qp->conn)
				moved = shm_conn_move(qp, fd, flags > 0 && (flags & FD_CLOEXEC));
			ferry_unlock(&qp->sq_lock);
		}
		if (moved < 0)
			return -1;
	}
	if (sch->cq) {
		ferry_lock(&sch->cq->lock);
		sch->cq->efd = fd;
		ferry_unlock(&sch->cq->lock);
	}
	ch->fd = fd;
	sch->fd_given = true;
	return 0;
}

/*
 * The single channel @ch, whose CQ takes the receives of connected @fqp
 * alone, becomes the QP's connection: the AF_UNIX socket to the peer,
 * moved to number @fd (or the lowest free one), is the channel's
 * descriptor, the CQ's wake socket goes, and the peer wakes the CQ with a
 * record on its end of the connection (SHM_NOTIFY_CONN).  Nobody may be
 * waiting on the channel meanwhile: a peer that read the arm word before
 * the change sends its wake-up to the socket that goes.
 */
static int shm_comp_channel_on_conn(struct ferry_comp_channel *ch, struct ferry_qp *fqp,
				    int fd, bool cloexec)
{
	struct shm_channel *sch = to_sch(ch);
	struct shm_cq *scq = sch->cq;
	struct shm_qp *qp = to_sqp(fqp);
	int old = ch->fd, to = -1;

	if (!sch->single || sch->on_conn || !scq || fqp->recv_cq != &scq->cq)
		return ERR(EINVAL);
	ferry_lock(&qp->sq_lock);
	ferry_lock(&scq->lock);
	if (scq->nrqps != 1 || scq->rqps[0] != qp || !qp->conn || qp->conn->dead ||
	    qp->qp.state != FERRY_QPS_RTS || to_spd(fqp->pd)->detached)
		errno = EOPNOTSUPP;
	else
		to = 0;
	ferry_unlock(&scq->lock);
	if (to == 0)
		to = shm_conn_move(qp, fd, cloexec);
	if (to >= 0)
		qp->conn->on_channel = true;
	ferry_unlock(&qp->sq_lock);
	if (to < 0)
		return -1;

	ferry_lock(&scq->lock);
	scq->efd = to;
	scq->wake.len = 0;
	scq->conn_qp = qp;
	shm_notify_update(scq, scq->gen, 0, SHM_NOTIFY_CONN);
	ferry_unlock(&scq->lock);
	if (old != to && !sch->fd_given)
		close(old);
	ch->fd = to;
	sch->wake.len = 0;
	sch->fd_given = true;
	sch->on_conn = true;
	return to;
}

static int shm_cq_event(struct ferry_comp_channel *ch, struct ferry_cq **cq_p, bool nowait)
{
	struct epoll_event ev;
	struct shm_cq *scq;
	int n, timeout = 0;

	if (to_sch(ch)->single) {
		if (shm_cq_event_single(to_sch(ch), &scq, nowait) < 0)
			return -1;
		goto got;
	}
	for (;;) {
		/* An event there is taken without asking whether the channel
		 * may block: that costs a system call (the flag is the fd's,
		 * set by the application with fcntl, as on ibverbs). */
		n = epoll_wait(ch->fd, &ev, 1, timeout);
		if (n < 0)
			return -1;	/* EINTR goes to the caller, as ibverbs */
		if (n == 0 && timeout == 0 && !nowait && !(fcntl(ch->fd, F_GETFL) & O_NONBLOCK)) {
			timeout = -1;
			continue;
		}
		if (n == 0)
			return ERR(EAGAIN);
		scq = ev.data.ptr;
		if (shm_wake_drain(scq->efd) > 0)
			break;
		/* Another thread took this event: wait for the next one. */
	}
got:
	ferry_lock(&scq->lock);
	/* The channel's arm is spent; a futex sleeper's stays. */
	shm_notify_update(scq, scq->gen, SHM_NOTIFY_MODES, 0);
	scq->events++;
	ferry_unlock(&scq->lock);
	*cq_p = &scq->cq;
	return 0;
}

static int shm_get_cq_event(struct ferry_comp_channel *ch, struct ferry_cq **cq_p)
{
	return shm_cq_event(ch, cq_p, false);
}

static int shm_poll_cq_event(struct ferry_comp_channel *ch, struct ferry_cq **cq_p)
{
	return shm_cq_event(ch, cq_p, true);
}

/* --- completion queues --- */

static struct ferry_cq *shm_create_cq(struct ferry_context *ctx, int cqe,
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

static int shm_destroy_cq(struct ferry_cq *cq)
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

static int shm_req_notify_cq(struct ferry_cq *cq, int solicited_only)
{
	struct shm_qp *qp = to_scq(cq)->conn_qp;

	/* The monitor's RNR retries cannot raise such a channel: settle them
	 * before the caller's last look (shm_sq_settle_rnr). */
	if (qp)
		shm_sq_settle_rnr(qp);
	shm_notify_change(to_scq(cq), true, SHM_NOTIFY_MODES,
			  solicited_only ? SHM_NOTIFY_SOLICITED : SHM_NOTIFY_ALL);
	return 0;
}

/* The peer reads the word before it signals: NONE, and it does not. */
static void shm_disarm_cq(struct ferry_cq *cq)
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

static int shm_cq_sleep_prepare(struct ferry_cq *cq, struct ferry_cq_sleep *t)
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

static void shm_cq_sleep_cancel(struct ferry_cq *cq)
{
	shm_notify_change(to_scq(cq), false, SHM_NOTIFY_FUTEX, 0);
}

static int shm_cq_sleep(struct ferry_cq *cq, struct ferry_cq_sleep *t, int timeout_ms)
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

static void shm_ack_cq_events(struct ferry_cq *cq, unsigned int n)
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

/*
 * shm_poll_cq - local completions first (sends, flushes), then deliveries
 * from the peers of the QPs receiving here, starting with a different QP
 * each call so that one busy peer cannot starve the others.
 */
static int shm_poll_cq(struct ferry_cq *cq, int n, struct ferry_wc *wc)
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
		got += shm_poll_recv(scq->rqps[0], n - got, wc + got);
	} else if (nq) {
		start = scq->rr_next < nq ? scq->rr_next : 0;
		scq->rr_next = start + 1;
		for (i = 0; i < nq && got < n; i++) {
			uint32_t k = start + i < nq ? start + i : start + i - nq;

			got += shm_poll_recv(scq->rqps[k], n - got, wc + got);
		}
	}
	ferry_unlock(&scq->lock);
	return got;
}

static int shm_qp_exchange_op(struct ferry_qp *qp, int sock, uint32_t *peer_qpn)
{
	return shm_qp_exchange(qp, sock, peer_qpn);
}

static int shm_qp_exchange_begin_op(struct ferry_qp *qp, int sock)
{
	return shm_qp_exchange_begin(qp, sock);
}

static int shm_qp_exchange_step_op(struct ferry_qp *qp, uint32_t *peer_qpn)
{
	return shm_qp_exchange_step(qp, peer_qpn);
}

const struct ferry_provider ferry_shm_provider = {
	.name = "shm",
	.get_devices = shm_get_devices,
	.open_device = shm_open_device,
	.close_device = shm_close_device,
	.query_device = shm_query_device,
	.query_device_ex = shm_query_device_ex,
	.query_port = shm_query_port,
	.query_gid = shm_query_gid,
	.query_pkey = shm_query_pkey,
	.alloc_pd = shm_alloc_pd,
	.alloc_pd_small = shm_alloc_pd_small,
	.dealloc_pd = shm_dealloc_pd,
	.detach_pd = shm_detach_pd,
	.detach_cq = shm_detach_cq,
	.disarm_cq = shm_disarm_cq,
	.fork_child = shm_monitor_fork_child,
	.reg_mr = shm_reg_mr,
	.dereg_mr = shm_dereg_mr,
	.create_comp_channel = shm_create_comp_channel,
	.create_comp_channel_single = shm_create_comp_channel_single,
	.destroy_comp_channel = shm_destroy_comp_channel,
	.renumber_comp_channel = shm_renumber_comp_channel,
	.comp_channel_on_conn = shm_comp_channel_on_conn,
	.cq_sleep_prepare = shm_cq_sleep_prepare,
	.cq_sleep = shm_cq_sleep,
	.cq_sleep_cancel = shm_cq_sleep_cancel,
	.get_cq_event = shm_get_cq_event,
	.poll_cq_event = shm_poll_cq_event,
	.create_cq = shm_create_cq,
	.destroy_cq = shm_destroy_cq,
	.req_notify_cq = shm_req_notify_cq,
	.ack_cq_events = shm_ack_cq_events,
	.poll_cq = shm_poll_cq,
	.create_qp = shm_create_qp,
	.modify_qp = shm_modify_qp,
	.query_qp = shm_query_qp,
	.destroy_qp = shm_destroy_qp,
	.post_send = shm_post_send,
	.post_send_direct = shm_post_send_direct,
	.post_recv = shm_post_recv,
	.qp_exchange = shm_qp_exchange_op,
	.qp_exchange_begin = shm_qp_exchange_begin_op,
	.qp_exchange_step = shm_qp_exchange_step_op,
	.qp_exchange_abort = shm_qp_exchange_abort,
};
