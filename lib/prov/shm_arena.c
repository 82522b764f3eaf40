/*
 * shm_arena.c - the process's shared memory for what peers may only read:
 * MR tables and CQ notify words.
 *
 * Each of those used to be a memfd of its own: created, sized, sealed,
 * mapped, passed, mapped again by the peer, unmapped and closed, for every
 * PD and CQ (a stream socket has one of each), and two descriptors per
 * connection for as long as it lived, a page of memory each.  Here they are
 * pieces of a few large memfds ("segments", sparse: only touched pages
 * cost memory), mapped once by us and once by each peer process, and a
 * piece given back is kept for the next object of its size class.
 *
 * Peers only read the arena (segments are sealed against new writable
 * mappings once ours exists), so a peer sees every piece, not just its
 * own.  What they hold is routing state (ring positions, keys, arm words),
 * never data; data stays in ferry_alloc blocks, each shared only with the
 * peers of its PD.  A piece handed back may still be read by the peer of
 * the object that had it: a notify word tells it nothing it can misuse,
 * and a table keeps every slot's key generation across owners, so an old
 * rkey matches nothing the next PD registers.
 *
 * QP regions stay memfds of their own: a peer must still find our last
 * deliveries in one after we destroyed the QP, for as long as it likes,
 * so a region is never ours to reuse.
 *
 * Size classes are powers of two from 64 bytes, each piece aligned to its
 * size: a notify word gets a cache line, a region or a table whole pages.
 * After fork the child allocates from segments of its own: the ones it
 * inherited are its parent's, and pieces of them are never recycled here.
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

struct shm_free {
	struct shm_free *next;
	struct shm_aseg *seg;
	size_t off;
	bool zero;		/* all of the piece reads 0 */
};

static struct {
	pthread_mutex_t lock;
	pid_t pid;			/* owner of segs: after fork, start anew */
	struct shm_aseg *segs;		/* ours, newest first */
	struct shm_aseg *cur;		/* bump allocation happens here */
	/* Our ancestors' (before fork): still mapped here, their pieces in use
	 * by what we inherited, never ours to hand out. */
	struct shm_aseg *inherited;
	size_t bump;
	/* Per kind, per class: a piece only ever serves one kind of object,
	 * so none finds another kind's leftovers in its parts never cleared. */
	struct shm_free *free[SHM_PIECE_KINDS][SHM_ARENA_CLASSES];
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

static struct shm_aseg *shm_aseg_create(void)
{
	struct shm_aseg *seg = calloc(1, sizeof(*seg));
	int fd;

	if (!seg)
		return NULL;
	fd = ferry_memfd_create("ferry-shm-arena", SHM_ARENA_SEG_SIZE);
	if (fd < 0)
		goto err_free;
	seg->addr = mmap(NULL, SHM_ARENA_SEG_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (seg->addr == MAP_FAILED) {
		ferry_warn("mapping a %lu-byte arena segment: %m", SHM_ARENA_SEG_SIZE);
		goto err_close;
	}
	/* From now on nobody else can map it writable. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0) {
		ferry_warn("sealing an arena segment: %m");
		munmap(seg->addr, SHM_ARENA_SEG_SIZE);
		goto err_close;
	}
	seg->fd = fd;
	seg->size = SHM_ARENA_SEG_SIZE;
	return seg;

err_close:
	close(fd);
err_free:
	free(seg);
	errno = ENOMEM;
	return NULL;
}

/* A child of fork forgets its parent's free lists (the parent uses them). */
static void shm_arena_adopt_locked(void)
{
	unsigned int c, k;

	if (arena.pid == ferry_pid())
		return;
	arena.pid = ferry_pid();
	/* The parent's: mapped, not ours. */
	if (arena.segs) {
		struct shm_aseg *last = arena.segs;

		while (last->next)
			last = last->next;
		last->next = arena.inherited;
		arena.inherited = arena.segs;
	}
	arena.segs = arena.cur = NULL;
	arena.bump = 0;
	/* The nodes of the parent's free lists become our spare ones. */
	for (k = 0; k < SHM_PIECE_KINDS; k++) {
		for (c = 0; c < SHM_ARENA_CLASSES; c++) {
			while (arena.free[k][c]) {
				struct shm_free *f = arena.free[k][c];

				arena.free[k][c] = f->next;
				f->next = arena.spare;
				arena.spare = f;
			}
		}
	}
}

int shm_arena_get(size_t size, enum shm_piece_kind kind, struct shm_piece *p)
{
	unsigned int c = shm_arena_class(size ? size : 1);
	size_t csize = (size_t)1 << (c + SHM_ARENA_MIN_SHIFT);
	struct shm_free *f;

	if (c >= SHM_ARENA_CLASSES || kind >= SHM_PIECE_KINDS)
		return ERR(EINVAL);
	pthread_mutex_lock(&arena.lock);
	shm_arena_adopt_locked();
	f = arena.free[kind][c];
	if (f) {
		arena.free[kind][c] = f->next;
		p->seg = f->seg;
		p->off = f->off;
		p->zero = f->zero;
		f->next = arena.spare;
		arena.spare = f;
	} else {
		size_t run = csize < SHM_ARENA_SLAB ? SHM_ARENA_SLAB : csize;
		size_t off = (arena.bump + run - 1) & ~(run - 1);

		if (!arena.cur || off + run > arena.cur->size) {
			struct shm_aseg *seg = shm_aseg_create();

			if (!seg) {
				pthread_mutex_unlock(&arena.lock);
				return -1;
			}
			seg->next = arena.segs;
			arena.segs = arena.cur = seg;
			off = 0;
		}
		arena.bump = off + run;
		p->seg = arena.cur;
		p->off = off;
		p->zero = true;		/* never used: a fresh file's pages */
		/* The rest of a slab waits on the free list, lowest first. */
		while (run > csize) {
			struct shm_free *n = arena.spare;

			run -= csize;
			if (n)
				arena.spare = n->next;
			else if (!(n = malloc(sizeof(*n))))
				continue;	/* that piece is lost to use, nothing worse */
			n->seg = p->seg;
			n->off = off + run;
			n->zero = true;
			n->next = arena.free[kind][c];
			arena.free[kind][c] = n;
		}
	}
	pthread_mutex_unlock(&arena.lock);
	p->size = csize;
	p->kind = kind;
	p->addr = p->seg->addr + p->off;
	return 0;
}

static bool shm_arena_owns_locked(const struct shm_aseg *seg)
{
	const struct shm_aseg *s;

	for (s = arena.segs; s; s = s->next)
		if (s == seg)
			return true;
	return false;
}

void shm_arena_put(struct shm_piece *p, size_t dirty)
{
	bool unzeroed = dirty == SHM_PIECE_UNZEROED;
	unsigned int c;
	struct shm_free *f;

	if (!p->seg)
		return;
	if (unzeroed || dirty > p->size)
		dirty = unzeroed ? 0 : p->size;
	pthread_mutex_lock(&arena.lock);
	shm_arena_adopt_locked();
	if (!shm_arena_owns_locked(p->seg)) {
		/* Inherited across fork: the parent's piece, never ours to reuse. */
		pthread_mutex_unlock(&arena.lock);
		p->seg = NULL;
		return;
	}
	pthread_mutex_unlock(&arena.lock);

	/*
	 * Zeroed outside the lock; the piece is nobody's meanwhile.  Written,
	 * not given back: the seal that keeps others from mapping a segment
	 * writable (F_SEAL_FUTURE_WRITE) refuses punching holes in it too
	 * (MADV_REMOVE: EPERM), so its pages stay, to be reused.
	 */
	memset(p->addr, 0, dirty);

	pthread_mutex_lock(&arena.lock);
	f = arena.spare;
	if (f)
		arena.spare = f->next;
	else
		f = malloc(sizeof(*f));
	if (f) {
		c = shm_arena_class(p->size);
		f->seg = p->seg;
		f->off = p->off;
		f->zero = !unzeroed;
		f->next = arena.free[p->kind][c];
		arena.free[p->kind][c] = f;
	}
	/* else: the piece is lost to reuse, nothing worse */
	pthread_mutex_unlock(&arena.lock);
	p->seg = NULL;
	p->addr = NULL;
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
