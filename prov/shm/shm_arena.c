/*
 * shm_arena.c - the process's shared memory for what peers may only read:
 * copies of MR tables and CQ notify words, and QP regions.
 *
 * Each of those used to be a memfd of its own: created, sized, sealed,
 * mapped, passed, mapped again by the peer, unmapped and closed, for every
 * PD, CQ and QP, and descriptors per connection for as long as it lived, a
 * page of memory each.  Here they are pieces of a few large memfds
 * ("segments", sparse: only touched pages cost memory), mapped once by us
 * and once by the peer, and a piece given back is kept for the next object
 * of its size class.
 *
 * Pools.  A peer maps whole segments, read-only (they are sealed against
 * new writable mappings once ours exists), so whatever shares a segment
 * with its pieces it can read: queue positions, message lengths, immediate
 * data, keys and addresses.  So segments are never shared between peer
 * processes: the arena is a set of pools, one per peer process, keyed by
 * its pid and uid as the kernel vouches for them (the credentials of its
 * HELLO), each with segments and free lists of its own.  A piece given
 * back returns to its pool, so leftover bytes of a recycled piece are only
 * ever seen by the process that could see them before.  A pid reused by
 * another user gets another pool (the uid is in the key); reused by the
 * same user it gets the old one, which is no boundary given up: a process
 * of that user may ptrace ours anyway.  The second connection between two
 * processes finds the pool, and the peer finds its segment mapped: nothing
 * is created or mapped anew.
 *
 * A pool with no piece out and no connection is idle: it waits for the
 * next connection of the same pair, up to SHM_POOL_IDLE of them, and past
 * that the one idle the longest is unmapped and its descriptors closed
 * (a server that 10,000 processes once connected to keeps 8, not 10,000).
 *
 * The private pool holds what no peer may map: the owners' primary copies
 * of MR tables and notify words (shm_pd.c and shm_cq.c publish a copy of
 * each in the pool of every peer process connected through it).  Its segments are anonymous
 * shared memory, with no descriptor to pass at all: still shared with a
 * child after fork, as the tables were, and recycled with their slots' key
 * generations, so an old rkey matches nothing the next PD registers.
 *
 * Size classes are powers of two from 64 bytes, each piece aligned to its
 * size: a notify word gets a cache line, a region or a table whole pages.
 * After fork the child starts with no pools: the ones it inherited are its
 * parent's, never handed out from here (their pieces still in use by what
 * the child inherited are never recycled); once the child has given all of
 * an inherited pool's pieces back, its copy is unmapped and closed.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm-internal.h"

#define SHM_ARENA_MIN_SHIFT	6		/* 64 bytes: one cache line */
#define SHM_ARENA_MAX_SHIFT	24		/* 16 MiB */
#define SHM_ARENA_CLASSES	(SHM_ARENA_MAX_SHIFT - SHM_ARENA_MIN_SHIFT + 1)
/*
 * Pieces smaller than this are cut from slabs of this size, all of one
 * kind and class: bump allocation alone would put each small piece next
 * to a large one of another object (a QP's table, notify word and region
 * come together), and a page per small piece is what idle connections
 * paid for their MR tables.
 */
#define SHM_ARENA_SLAB		4096u
#define SHM_POOL_BUCKETS	256u		/* hash of the peers' pools */

struct shm_free {
	struct shm_free *next;
	struct shm_aseg *seg;
	size_t off;
	bool zero;		/* all of the piece reads 0 */
};

struct shm_pool {
	pid_t peer_pid;			/* whose pool (not the private one) */
	uid_t peer_uid;
	bool private;			/* the owners' primaries: no peer, no fd */
	bool inherited;			/* our parent's (before fork): not ours */
	bool idle;			/* on the idle list */
	struct shm_aseg *segs;		/* newest first */
	struct shm_aseg *cur;		/* bump allocation happens here */
	size_t bump;
	/* Per kind, per class: a piece only ever serves one kind of object,
	 * so none finds another kind's leftovers in its parts never cleared. */
	struct shm_free *free[SHM_PIECE_KINDS][SHM_ARENA_CLASSES];
	size_t pieces;			/* handed out, not back */
	int refs;			/* connections holding it (shm_arena_pool_get) */
	struct shm_pool *hnext;		/* in its hash bucket, or (inherited) in
					 * arena.inherited */
	struct shm_pool *idle_prev, *idle_next;
};

static struct {
	pthread_mutex_t lock;
	pid_t pid;			/* owner of the pools: after fork, start anew */
	struct shm_pool *private_pool;	/* made at first use */
	struct shm_pool *inherited;	/* our parent's, still in use here */
	struct shm_pool *buckets[SHM_POOL_BUCKETS];
	unsigned int npools;		/* peers' pools, idle ones included */
	/* Idle pools, the one idle the longest first. */
	struct shm_pool *idle_head, *idle_tail;
	unsigned int nidle;
	struct shm_free *spare;		/* unused list nodes */
} arena = { .lock = PTHREAD_MUTEX_INITIALIZER };
FERRY_FORK_SAFE(arena, arena.lock)

static unsigned int shm_arena_class(size_t size)
{
	unsigned int shift = SHM_ARENA_MIN_SHIFT;

	while (((size_t)1 << shift) < size)
		shift++;
	return shift - SHM_ARENA_MIN_SHIFT;
}

/* A segment of the private pool: shared with a child after fork, never passed. */
static int shm_aseg_map_private(struct shm_aseg *seg)
{
	seg->addr = mmap(NULL, SHM_ARENA_SEG_SIZE, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (seg->addr == MAP_FAILED) {
		ferry_warn("mapping a %lu-byte private arena segment: %m", SHM_ARENA_SEG_SIZE);
		return -1;
	}
	seg->fd = -1;
	return 0;
}

/* A segment of a peer's pool: a memfd the peer can only map read-only. */
static int shm_aseg_map_shared(struct shm_aseg *seg)
{
	int fd = ferry_memfd_create("ferry-shm-pool", SHM_ARENA_SEG_SIZE);

	if (fd < 0)
		return -1;
	seg->addr = mmap(NULL, SHM_ARENA_SEG_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (seg->addr == MAP_FAILED) {
		ferry_warn("mapping a %lu-byte arena segment: %m", SHM_ARENA_SEG_SIZE);
		close(fd);
		return -1;
	}
	/* From now on nobody else can map it writable. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0) {
		ferry_warn("sealing an arena segment: %m");
		munmap(seg->addr, SHM_ARENA_SEG_SIZE);
		close(fd);
		return -1;
	}
	seg->fd = fd;
	return 0;
}

static struct shm_aseg *shm_aseg_create(struct shm_pool *pool)
{
	struct shm_aseg *seg = calloc(1, sizeof(*seg));

	if (!seg)
		return NULL;
	if ((pool->private ? shm_aseg_map_private(seg) : shm_aseg_map_shared(seg)) < 0) {
		free(seg);
		errno = ENOMEM;
		return NULL;
	}
	seg->size = SHM_ARENA_SEG_SIZE;
	seg->pool = pool;
	return seg;
}

/* The free-list nodes of @pool become spare ones; arena.lock held. */
static void shm_pool_forget_free_locked(struct shm_pool *pool)
{
	unsigned int c, k;

	for (k = 0; k < SHM_PIECE_KINDS; k++) {
		for (c = 0; c < SHM_ARENA_CLASSES; c++) {
			while (pool->free[k][c]) {
				struct shm_free *f = pool->free[k][c];

				pool->free[k][c] = f->next;
				f->next = arena.spare;
				arena.spare = f;
			}
		}
	}
}

/* Unmap and close @pool's segments (our copies: a child's or a peer's
 * mappings stay theirs) and free it; arena.lock held. */
static void shm_pool_destroy_locked(struct shm_pool *pool)
{
	struct shm_aseg *seg;

	shm_pool_forget_free_locked(pool);
	while ((seg = pool->segs)) {
		pool->segs = seg->next;
		munmap(seg->addr, seg->size);
		if (seg->fd >= 0)
			close(seg->fd);
		free(seg);
	}
	free(pool);
}

static unsigned int shm_pool_bucket(pid_t pid, uid_t uid)
{
	return (((uint32_t)pid * 2654435761u) ^ (uint32_t)uid) % SHM_POOL_BUCKETS;
}

static void shm_pool_unhash_locked(struct shm_pool *pool)
{
	struct shm_pool **pp = &arena.buckets[shm_pool_bucket(pool->peer_pid, pool->peer_uid)];

	while (*pp != pool)
		pp = &(*pp)->hnext;
	*pp = pool->hnext;
	arena.npools--;
}

static void shm_pool_unidle_locked(struct shm_pool *pool)
{
	if (!pool->idle)
		return;
	if (pool->idle_prev)
		pool->idle_prev->idle_next = pool->idle_next;
	else
		arena.idle_head = pool->idle_next;
	if (pool->idle_next)
		pool->idle_next->idle_prev = pool->idle_prev;
	else
		arena.idle_tail = pool->idle_prev;
	pool->idle_prev = pool->idle_next = NULL;
	pool->idle = false;
	arena.nidle--;
}

/*
 * @pool's pieces or connections changed; arena.lock held.  Unused, a
 * peer's pool joins the idle ones, and the one idle the longest goes when
 * there are too many; an inherited one goes at once.  Returns the pool to
 * destroy (after the lock is let go: system calls), or NULL.
 */
static struct shm_pool *shm_pool_settle_locked(struct shm_pool *pool)
{
	struct shm_pool *old;

	if (pool->pieces || pool->refs) {
		shm_pool_unidle_locked(pool);
		return NULL;
	}
	if (pool->inherited) {
		struct shm_pool **pp = &arena.inherited;

		while (*pp != pool)
			pp = &(*pp)->hnext;
		*pp = pool->hnext;
		return pool;
	}
	if (pool->private || pool->idle)
		return NULL;
	pool->idle = true;
	pool->idle_prev = arena.idle_tail;
	if (arena.idle_tail)
		arena.idle_tail->idle_next = pool;
	else
		arena.idle_head = pool;
	arena.idle_tail = pool;
	if (++arena.nidle <= SHM_POOL_IDLE)
		return NULL;
	old = arena.idle_head;
	shm_pool_unidle_locked(old);
	shm_pool_unhash_locked(old);
	return old;
}

static void shm_pool_destroy(struct shm_pool *pool)
{
	if (!pool)
		return;
	pthread_mutex_lock(&arena.lock);
	shm_pool_destroy_locked(pool);
	pthread_mutex_unlock(&arena.lock);
}

/* A pool the child inherited: unused, its copy goes now; else later. */
static void shm_pool_inherit_locked(struct shm_pool *pool)
{
	pool->idle = false;
	pool->idle_prev = pool->idle_next = NULL;
	if (!pool->pieces && !pool->refs) {
		shm_pool_destroy_locked(pool);
		return;
	}
	pool->inherited = true;
	shm_pool_forget_free_locked(pool);	/* never ours to hand out */
	pool->hnext = arena.inherited;
	arena.inherited = pool;
}

/* A child of fork starts with no pools (its parent uses them); those
 * its grandparent left it stay inherited. */
static void shm_arena_adopt_locked(void)
{
	unsigned int b;

	if (arena.pid == ferry_pid())
		return;
	arena.pid = ferry_pid();
	for (b = 0; b < SHM_POOL_BUCKETS; b++) {
		while (arena.buckets[b]) {
			struct shm_pool *pool = arena.buckets[b];

			arena.buckets[b] = pool->hnext;
			shm_pool_inherit_locked(pool);
		}
	}
	if (arena.private_pool)
		shm_pool_inherit_locked(arena.private_pool);
	arena.private_pool = NULL;
	arena.idle_head = arena.idle_tail = NULL;
	arena.npools = arena.nidle = 0;
}

struct shm_pool *shm_arena_pool_get(pid_t pid, uid_t uid)
{
	struct shm_pool *pool, **bucket;

	pthread_mutex_lock(&arena.lock);
	shm_arena_adopt_locked();
	bucket = &arena.buckets[shm_pool_bucket(pid, uid)];
	for (pool = *bucket; pool; pool = pool->hnext)
		if (pool->peer_pid == pid && pool->peer_uid == uid)
			break;
	if (!pool) {
		pool = calloc(1, sizeof(*pool));
		if (!pool) {
			pthread_mutex_unlock(&arena.lock);
			return NULL;
		}
		pool->peer_pid = pid;
		pool->peer_uid = uid;
		pool->hnext = *bucket;
		*bucket = pool;
		arena.npools++;
	}
	pool->refs++;
	shm_pool_unidle_locked(pool);
	pthread_mutex_unlock(&arena.lock);
	return pool;
}

void shm_arena_pool_put(struct shm_pool *pool)
{
	struct shm_pool *old;

	if (!pool)
		return;
	pthread_mutex_lock(&arena.lock);
	shm_arena_adopt_locked();
	pool->refs--;
	old = shm_pool_settle_locked(pool);
	pthread_mutex_unlock(&arena.lock);
	shm_pool_destroy(old);
}

int shm_arena_test_pools(unsigned int *idle_p)
{
	int n;

	pthread_mutex_lock(&arena.lock);
	shm_arena_adopt_locked();
	n = (int)arena.npools;
	if (idle_p)
		*idle_p = arena.nidle;
	pthread_mutex_unlock(&arena.lock);
	return n;
}

/* The private pool, made if need be; arena.lock held. */
static struct shm_pool *shm_arena_private_locked(void)
{
	if (!arena.private_pool) {
		arena.private_pool = calloc(1, sizeof(*arena.private_pool));
		if (arena.private_pool)
			arena.private_pool->private = true;
	}
	return arena.private_pool;
}

/* A node for a free list: a spare one, or a new one (NULL: none). */
static struct shm_free *shm_free_node_locked(void)
{
	struct shm_free *f = arena.spare;

	if (f)
		arena.spare = f->next;
	else
		f = malloc(sizeof(*f));
	return f;
}

/* A piece of size class @c, @csize bytes, never used: bumped off the pool's
 * current segment (the rest of a slab waits on the free list); arena.lock held. */
static int shm_pool_bump_locked(struct shm_pool *pool, enum shm_piece_kind kind, unsigned int c,
				size_t csize, struct shm_piece *p)
{
	size_t run = csize < SHM_ARENA_SLAB ? SHM_ARENA_SLAB : csize;
	size_t off = (pool->bump + run - 1) & ~(run - 1);

	if (!pool->cur || off + run > pool->cur->size) {
		struct shm_aseg *seg = shm_aseg_create(pool);

		if (!seg)
			return -1;
		seg->next = pool->segs;
		pool->segs = pool->cur = seg;
		off = 0;
	}
	pool->bump = off + run;
	p->seg = pool->cur;
	p->off = off;
	p->zero = true;		/* never used: a fresh file's pages */
	/* The rest of a slab waits on the free list, lowest first. */
	while (run > csize) {
		struct shm_free *n = shm_free_node_locked();

		run -= csize;
		if (!n)
			continue;	/* that piece is lost to use, nothing worse */
		n->seg = p->seg;
		n->off = off + run;
		n->zero = true;
		n->next = pool->free[kind][c];
		pool->free[kind][c] = n;
	}
	return 0;
}

int shm_arena_get(struct shm_pool *pool, size_t size, enum shm_piece_kind kind,
		  struct shm_piece *p)
{
	unsigned int c = shm_arena_class(size ? size : 1);
	size_t csize = (size_t)1 << (c + SHM_ARENA_MIN_SHIFT);
	struct shm_free *f;

	if (c >= SHM_ARENA_CLASSES || kind >= SHM_PIECE_KINDS)
		return ERR(EINVAL);
	pthread_mutex_lock(&arena.lock);
	shm_arena_adopt_locked();
	if (!pool)
		pool = shm_arena_private_locked();
	if (!pool || pool->inherited) {
		/* An inherited pool is the parent's to hand out from. */
		pthread_mutex_unlock(&arena.lock);
		return ERR(pool ? EINVAL : ENOMEM);
	}
	f = pool->free[kind][c];
	if (f) {
		pool->free[kind][c] = f->next;
		p->seg = f->seg;
		p->off = f->off;
		p->zero = f->zero;
		f->next = arena.spare;
		arena.spare = f;
	} else if (shm_pool_bump_locked(pool, kind, c, csize, p) < 0) {
		pthread_mutex_unlock(&arena.lock);
		return -1;
	}
	pool->pieces++;
	shm_pool_unidle_locked(pool);
	pthread_mutex_unlock(&arena.lock);
	p->size = csize;
	p->kind = kind;
	p->addr = p->seg->addr + p->off;
	return 0;
}

/* @p no longer counts in its pool; arena.lock held.  The pool to destroy. */
static struct shm_pool *shm_arena_uncount_locked(struct shm_piece *p)
{
	struct shm_pool *pool = p->seg->pool;

	pool->pieces--;
	p->seg = NULL;
	p->addr = NULL;
	return shm_pool_settle_locked(pool);
}

void shm_arena_drop(struct shm_piece *p)
{
	struct shm_pool *old;

	if (!p->seg)
		return;
	pthread_mutex_lock(&arena.lock);
	shm_arena_adopt_locked();
	old = shm_arena_uncount_locked(p);
	pthread_mutex_unlock(&arena.lock);
	shm_pool_destroy(old);
}

void shm_arena_put(struct shm_piece *p, size_t dirty)
{
	bool unzeroed = dirty == SHM_PIECE_UNZEROED;
	struct shm_pool *pool, *old;
	struct shm_free *f;

	if (!p->seg)
		return;
	if (unzeroed || dirty > p->size)
		dirty = unzeroed ? 0 : p->size;
	pthread_mutex_lock(&arena.lock);
	shm_arena_adopt_locked();
	pool = p->seg->pool;
	pthread_mutex_unlock(&arena.lock);

	/*
	 * Zeroed outside the lock; the piece is nobody's meanwhile.  Written,
	 * not given back: the seal that keeps others from mapping a segment
	 * writable (F_SEAL_FUTURE_WRITE) refuses punching holes in it too
	 * (MADV_REMOVE: EPERM), so its pages stay, to be reused.  (Not for an
	 * inherited piece: the parent's, perhaps in use there.)
	 */
	if (!pool->inherited)
		memset(p->addr, 0, dirty);

	pthread_mutex_lock(&arena.lock);
	shm_arena_adopt_locked();	/* a fork meanwhile makes the pool inherited */
	f = pool->inherited ? NULL : shm_free_node_locked();
	if (f) {
		f->seg = p->seg;
		f->off = p->off;
		f->zero = !unzeroed;
		f->next = pool->free[p->kind][shm_arena_class(p->size)];
		pool->free[p->kind][shm_arena_class(p->size)] = f;
	}
	/* else: inherited, never ours to reuse; or lost to reuse, nothing worse */
	old = shm_arena_uncount_locked(p);
	pthread_mutex_unlock(&arena.lock);
	shm_pool_destroy(old);
}

/*
 * shm_arena_map_peer - map the peer's segment @fd read-only and find the
 * piece [@off, @off + @size) in it: it must lie inside the file.
 */
struct shm_mapping *shm_arena_map_peer(int fd, uint64_t off, uint64_t size, const void **addr_p)
{
	struct shm_mapping *m;

	if (!shm_piece_ok(off, size, 1)) {
		ferry_warn("peer named a piece [%llu, +%llu) outside any arena segment",
			   (unsigned long long)off, (unsigned long long)size);
		errno = EPROTO;
		return NULL;
	}
	m = shm_map_fd(fd, (size_t)(off + size), PROT_READ);
	if (!m)
		return NULL;
	shm_map_keep(m);
	*addr_p = (const uint8_t *)m->addr + off;
	return m;
}

struct shm_mapping *shm_arena_map_again(struct shm_mapping *m, uint64_t off, uint64_t size,
					const void **addr_p)
{
	if (!shm_piece_ok(off, size, 1)) {
		ferry_warn("peer named a piece [%llu, +%llu) outside any arena segment",
			   (unsigned long long)off, (unsigned long long)size);
		errno = EPROTO;
		return NULL;
	}
	if (!shm_map_ref(m, (size_t)(off + size)))
		return NULL;
	*addr_p = (const uint8_t *)m->addr + off;
	return m;
}
