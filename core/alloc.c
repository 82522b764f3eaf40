/*
 * alloc.c - ferry_alloc(): memory that peers of this host can map.
 *
 * Each allocation is its own memfd, sealed so that nobody can shrink it (a
 * peer mapping a file that shrinks would take SIGBUS).  The block table lets
 * the shm provider find which block an MR lives in.  Blocks are few and
 * large, so a mutex-protected array will do.
 *
 * Peers never get a block's memfd, which would let them map all of it
 * for as long as they like: they get windows (ferry_block_share), files
 * that hold just the pages an MR spans.  A registration that spans the
 * whole block shares the block's own file; any other span is first moved
 * to a file of its own (its pages copied, the new file mapped over them:
 * mremap replaces the old pages in one step).  Taking a window back moves
 * its span once more, to a file nobody else has.  A file given out
 * read-only (a reopening through /proc/self/fd) is made mode 0400 first,
 * so that a process of another user cannot reopen it for writing.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core-export.h"
#include "fdtab.h"

/* A span of a block shared with peers: see ferry_block_share. */
struct ferry_window {
	size_t off, len;	/* the span in its block, page multiples */
	int fd;			/* the file that holds it; -1: dropped */
	bool base;		/* that file is the block's own (a whole-block span) */
	unsigned long ino;
	uint64_t id_rw, id_ro;	/* ids given out for each kind of descriptor; 0: none */
	/* Their previous values, before ferry_block_renew gave new ones: the
	 * other registrations of the span still name it by those. */
	uint64_t old_rw, old_ro;
	int refs;		/* registrations sharing it */
	const void *owner;	/* who registered it (a PD), unless ... */
	bool owners;		/* ... several did: then it is never renewed */
	bool out;		/* a descriptor of it was handed out since it was made */
	bool ro_mode;		/* its file is mode 0400 (ferry_block_window_fd) */
	struct ferry_window *next;
};

static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
FERRY_FORK_SAFE(blocks, blocks_lock)
static struct ferry_block *blocks;	/* sorted by nothing; few entries */
static size_t nblocks, blocks_cap;
static uint64_t next_block_id = 1;

static size_t page_round(size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (size + page - 1) & ~(page - 1);
}

unsigned long ferry_fd_inode(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

int ferry_fd_park_base;

int ferry_fd_dup(int fd)
{
	int nfd = -1;

	/* EINVAL: the limit is below the base now (lowered since). */
	if (ferry_fd_park_base > 0)
		nfd = fcntl(fd, F_DUPFD_CLOEXEC, ferry_fd_park_base);
	if (nfd < 0)
		nfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	return nfd;
}

int ferry_fd_park(int fd)
{
	int high;

	if (fd < 0 || ferry_fd_park_base <= 0 || fd >= ferry_fd_park_base)
		return fd;
	high = fcntl(fd, F_DUPFD_CLOEXEC, ferry_fd_park_base);
	if (high < 0)
		return fd;	/* no room up there: stay */
	close(fd);
	return high;
}

/*
 * Descriptors held by two parts of ferry at once (the CM and the shm
 * provider share a connection's AF_UNIX socket): a count per fd number,
 * 0 for one holder.  Lock-free (fdtab.h makes its pages with a
 * compare-and-swap), so a child of fork() finds it usable whatever the
 * parent's threads were doing.
 */
static struct fdtab fd_refs;	/* _Atomic uint16_t slots (util's fdtab.h) */

static _Atomic uint16_t *fd_ref(int fd, bool make)
{
	if (make)
		return fdtab_slot_make(&fd_refs, fd, sizeof(_Atomic uint16_t));
	return fdtab_slot(&fd_refs, fd, sizeof(_Atomic uint16_t));
}

int ferry_fd_hold(int fd)
{
	_Atomic uint16_t *r = fd_ref(fd, true);
	uint16_t c;

	if (!r)
		return ferry_fd_dup(fd);	/* a copy of its own, then */
	c = atomic_load(r);
	do {
		if (c == UINT16_MAX)
			return ferry_fd_dup(fd);
	} while (!atomic_compare_exchange_weak(r, &c, c ? c + 1 : 2));
	return fd;
}

int ferry_fd_close(int fd)
{
	_Atomic uint16_t *r = fd_ref(fd, false);
	uint16_t c;

	if (fd < 0)
		return ERR(EBADF);
	if (r) {
		c = atomic_load(r);
		while (c) {
			if (atomic_compare_exchange_weak(r, &c, c == 2 ? 0 : c - 1))
				return 0;	/* another holder keeps it */
		}
	}
	return close(fd);
}

int ferry_memfd_create(const char *name, size_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0) {
		ferry_warn("memfd_create(%s): %m", name);
		return -1;
	}
	if (ftruncate(fd, (off_t)page_round(size)) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		int e = errno;

		ferry_warn("sizing memfd %s to %zu bytes: %m", name, size);
		close(fd);
		errno = e;
		return -1;
	}
	return ferry_fd_park(fd);
}

void *ferry_alloc(size_t size)
{
	struct ferry_block blk;
	void *addr;

	if (size == 0 || size > (1ull << 40)) {
		errno = EINVAL;
		return NULL;
	}
	blk.size = page_round(size);
	blk.fd = ferry_memfd_create("ferry-alloc", blk.size);
	if (blk.fd < 0)
		return NULL;
	addr = mmap(NULL, blk.size, PROT_READ | PROT_WRITE, MAP_SHARED, blk.fd, 0);
	if (addr == MAP_FAILED)
		goto err_close;
	blk.addr = addr;
	blk.ino = ferry_fd_inode(blk.fd);
	blk.owner = ferry_pid();
	blk.windows = NULL;
	blk.patched = false;

	pthread_mutex_lock(&blocks_lock);
	if (nblocks == blocks_cap) {
		size_t cap = blocks_cap ? 2 * blocks_cap : 16;
		struct ferry_block *nb = realloc(blocks, cap * sizeof(*nb));

		if (!nb) {
			pthread_mutex_unlock(&blocks_lock);
			goto err_unmap;
		}
		blocks = nb;
		blocks_cap = cap;
	}
	blk.id = next_block_id++;
	blocks[nblocks++] = blk;
	pthread_mutex_unlock(&blocks_lock);
	return addr;

err_unmap:
	munmap(addr, blk.size);
	errno = ENOMEM;
err_close:
	{
		int e = errno;

		close(blk.fd);
		errno = e;
	}
	return NULL;
}

void ferry_free(void *addr)
{
	struct ferry_block blk = { 0 };
	size_t i;

	if (!addr)
		return;
	pthread_mutex_lock(&blocks_lock);
	for (i = 0; i < nblocks; i++) {
		if (blocks[i].addr == addr) {
			blk = blocks[i];
			blocks[i] = blocks[--nblocks];
			break;
		}
	}
	pthread_mutex_unlock(&blocks_lock);
	if (!blk.addr) {
		ferry_err("ferry_free(%p): not memory from ferry_alloc", addr);
		return;
	}
	munmap(blk.addr, blk.size);
	if (blk.fd >= 0)
		close(blk.fd);
	/* Peers keep what they mapped of its windows: pages nobody here uses. */
	while (blk.windows) {
		struct ferry_window *w = blk.windows;

		blk.windows = w->next;
		if (!w->base && w->fd >= 0)
			close(w->fd);
		free(w);
	}
}

int ferry_block_drop_fd(const void *addr)
{
	int fd = -1;
	size_t i;

	pthread_mutex_lock(&blocks_lock);
	for (i = 0; i < nblocks; i++) {
		if (blocks[i].addr == addr) {
			struct ferry_window *w;

			fd = blocks[i].fd;
			blocks[i].fd = -1;
			for (w = blocks[i].windows; w; w = w->next) {
				if (!w->base && w->fd >= 0)
					close(w->fd);
				w->fd = -1;
			}
			break;
		}
	}
	pthread_mutex_unlock(&blocks_lock);
	if (i == nblocks)
		return ERR(EINVAL);
	if (fd >= 0)
		close(fd);
	return 0;
}

bool ferry_block_find(const void *addr, size_t len, struct ferry_block *blk_p)
{
	uintptr_t a = (uintptr_t)addr;
	bool found = false;
	size_t i;

	pthread_mutex_lock(&blocks_lock);
	for (i = 0; i < nblocks; i++) {
		uintptr_t start = (uintptr_t)blocks[i].addr;

		if (a >= start && a - start <= blocks[i].size &&
		    len <= blocks[i].size - (a - start)) {
			*blk_p = blocks[i];
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&blocks_lock);
	return found;
}

bool ferry_block_is_own_inode(unsigned long ino)
{
	pid_t self = ferry_pid();
	bool found = false;
	size_t i;

	pthread_mutex_lock(&blocks_lock);

	for (i = 0; i < nblocks && !found; i++) {
		const struct ferry_window *w;

		if (blocks[i].owner != self)
			continue;
		found = blocks[i].ino == ino;
		for (w = blocks[i].windows; w && !found; w = w->next)
			found = w->ino == ino;
	}
	pthread_mutex_unlock(&blocks_lock);
	return found;
}

/* --- windows --- */

/* The block holding [addr, addr+len); blocks_lock held. */
static struct ferry_block *block_at_locked(const void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;
	size_t i;

	for (i = 0; i < nblocks; i++) {
		uintptr_t start = (uintptr_t)blocks[i].addr;

		if (a >= start && a - start <= blocks[i].size &&
		    len <= blocks[i].size - (a - start))
			return &blocks[i];
	}
	return NULL;
}

/* The window with id @id, and its block in *blk_p; blocks_lock held. */
static struct ferry_window *window_find_locked(uint64_t id, struct ferry_block **blk_p)
{
	struct ferry_window *w;
	size_t i;

	for (i = 0; id && i < nblocks; i++) {
		for (w = blocks[i].windows; w; w = w->next) {
			if (w->id_rw == id || w->id_ro == id || w->old_rw == id ||
			    w->old_ro == id) {
				*blk_p = &blocks[i];
				return w;
			}
		}
	}
	return NULL;
}

/* Copy the pages of [src, src+len) that hold data (per @fd at @off, the
 * file behind them, if known: holes stay holes) to @dst. */
static void window_copy(uint8_t *dst, const uint8_t *src, size_t len, int fd, off_t off)
{
	off_t pos = off, end = off + (off_t)len, hole;

	if (fd < 0) {
		memcpy(dst, src, len);
		return;
	}
	while (pos < end) {
		pos = lseek(fd, pos, SEEK_DATA);
		if (pos < 0 || pos >= end)
			return;		/* ENXIO: no data past pos */
		hole = lseek(fd, pos, SEEK_HOLE);
		if (hole < 0 || hole > end)
			hole = end;
		memcpy(dst + (pos - off), src + (pos - off), (size_t)(hole - pos));
		pos = hole;
	}
}

/*
 * window_move - put the @len bytes at @addr (backed by @fd at @off, or
 * -1 if unknown) on the pages of a new file, the same bytes at the same
 * address: mapped elsewhere, filled, then moved over the old pages by
 * mremap, which swaps them in one step.  Returns the new file's
 * descriptor, or -1 with the old pages left in place.
 */
static int window_move(uint8_t *addr, size_t len, int fd, off_t off)
{
	int nfd = ferry_memfd_create("ferry-alloc", len);
	void *tmp;

	if (nfd < 0)
		return -1;
	tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, nfd, 0);
	if (tmp == MAP_FAILED)
		goto err_close;
	window_copy(tmp, addr, len, fd, off);
	if (mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, addr) == MAP_FAILED) {
		munmap(tmp, len);
		goto err_close;
	}
	return nfd;

err_close:
	ferry_warn("moving %zu bytes of a ferry_alloc block to a file of their own: %m", len);
	close(nfd);
	return -1;
}

/* A new window for [off, off+len) of @blk; blocks_lock held. */
static struct ferry_window *window_new_locked(struct ferry_block *blk, size_t off, size_t len)
{
	struct ferry_window *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->off = off;
	w->len = len;
	if (off == 0 && len == blk->size && !blk->patched && blk->fd >= 0) {
		w->fd = blk->fd;	/* the whole block: its own file will do */
		w->base = true;
	} else {
		w->fd = window_move((uint8_t *)blk->addr + off, len,
				    blk->patched ? -1 : blk->fd, (off_t)off);
		if (w->fd < 0) {
			free(w);
			return NULL;
		}
		blk->patched = true;
	}
	w->ino = w->base ? blk->ino : ferry_fd_inode(w->fd);
	w->next = blk->windows;
	blk->windows = w;
	return w;
}

int ferry_block_share(const void *addr, size_t len, bool writable, const void *owner,
		      uint64_t *id_p, uint64_t *off_p)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), start, end;
	struct ferry_window *w, *same = NULL;
	struct ferry_block *blk;
	uint64_t *id;

	pthread_mutex_lock(&blocks_lock);
	blk = len ? block_at_locked(addr, len) : NULL;
	if (!blk) {
		pthread_mutex_unlock(&blocks_lock);
		return ERR(EINVAL);
	}
	start = ((uintptr_t)addr - (uintptr_t)blk->addr) & ~(page - 1);
	end = page_round((uintptr_t)addr - (uintptr_t)blk->addr + len);
	for (w = blk->windows; w; w = w->next) {
		if (w->off == start && w->len == end - start)
			same = w;
		else if (w->off < end && start < w->off + w->len)
			break;		/* overlaps another span */
	}
	if (w || (!same && !(same = window_new_locked(blk, start, end - start)))) {
		pthread_mutex_unlock(&blocks_lock);
		return ERR(w ? EBUSY : ENOMEM);
	}
	id = writable ? &same->id_rw : &same->id_ro;
	if (!*id)
		*id = next_block_id++;
	if (same->refs++ == 0)
		same->owner = owner;
	else if (same->owner != owner)
		same->owners = true;
	*id_p = *id;
	*off_p = (uintptr_t)addr - (uintptr_t)blk->addr - start;
	pthread_mutex_unlock(&blocks_lock);
	return 0;
}

/* Take window @w of @blk back from every peer; blocks_lock held. */
static void window_revoke_locked(struct ferry_block *blk, struct ferry_window *w)
{
	struct ferry_window **pp;
	int nfd = -1;

	if (!w->out) {
		/* Nobody has it: its pages stay where they are. */
		if (!w->base && w->fd >= 0)
			close(w->fd);	/* our mapping keeps the file */
		goto unlink;
	}
	nfd = window_move((uint8_t *)blk->addr + w->off, w->len, w->fd, 0);
	if (nfd < 0)
		ferry_err("a peer keeps access to %zu bytes at %p it was given: %m", w->len,
			  (void *)((uint8_t *)blk->addr + w->off));
	if (w->base && blk->fd >= 0 && nfd >= 0) {
		/* The whole block on one new file: that is the block's now. */
		close(blk->fd);
		blk->fd = nfd;
		blk->ino = ferry_fd_inode(nfd);
	} else {
		if (nfd >= 0)
			close(nfd);	/* the mapping keeps the file */
		if (!w->base && w->fd >= 0)
			close(w->fd);
		blk->patched = true;
	}
unlink:
	for (pp = &blk->windows; *pp != w; pp = &(*pp)->next)
		;
	*pp = w->next;
	free(w);
}

void ferry_block_unshare(uint64_t id)
{
	struct ferry_block *blk;
	struct ferry_window *w;

	pthread_mutex_lock(&blocks_lock);
	w = window_find_locked(id, &blk);
	if (w && --w->refs == 0)
		window_revoke_locked(blk, w);
	pthread_mutex_unlock(&blocks_lock);
}

int ferry_block_window_fd(uint64_t id)
{
	struct ferry_block *blk;
	struct ferry_window *w;
	char path[32];
	int fd = -1;

	pthread_mutex_lock(&blocks_lock);
	w = window_find_locked(id, &blk);
	if (!w || w->fd < 0) {
		errno = EBADF;	/* freed, or its descriptor dropped */
	} else if (id != w->id_rw && id != w->id_ro) {
		errno = ESTALE;		/* renewed since: the registration's id is newer */
	} else if (id == w->id_rw) {
		fd = ferry_fd_dup(w->fd);
	} else if (!w->ro_mode && fchmod(w->fd, 0400) < 0) {
		ferry_warn("making a window's file mode 0400: %m");
	} else {
		/* A description of its own, opened for reading only; the file
		 * is mode 0400 first, so that no process of another user can
		 * reopen it for writing through it. */
		w->ro_mode = true;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", w->fd);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			ferry_warn("reopening a window read-only (%s): %m", path);
		else
			fd = ferry_fd_park(fd);
	}
	if (fd >= 0)
		w->out = true;
	pthread_mutex_unlock(&blocks_lock);
	return fd;
}

int ferry_block_window_send(uint64_t id, int (*send_fd)(int fd, void *arg), void *arg)
{
	struct ferry_window *w;
	struct ferry_block *blk;
	int fd, r;

	pthread_mutex_lock(&blocks_lock);
	w = window_find_locked(id, &blk);
	if (w && w->fd >= 0 && id == w->id_rw) {
		/* Its own descriptor, passed while the lock keeps it open: a
		 * copy made to be closed after one sendmsg was two calls more. */
		w->out = true;	/* as ferry_block_window_fd: handed out */
		r = send_fd(w->fd, arg);
		pthread_mutex_unlock(&blocks_lock);
		return r;
	}
	pthread_mutex_unlock(&blocks_lock);
	fd = ferry_block_window_fd(id);	/* read-only: a description of its own */
	if (fd < 0)
		return -1;
	r = send_fd(fd, arg);
	close(fd);
	return r;
}

/*
 * Move window @w of @blk to a new file, the peers that had it left with
 * the old one, and give it new ids; blocks_lock held.  The base window
 * (a whole block) makes the new file the block's.
 */
static int window_renew_locked(struct ferry_block *blk, struct ferry_window *w)
{
	int nfd = window_move((uint8_t *)blk->addr + w->off, w->len, w->fd, 0);

	if (nfd < 0)
		return -1;
	if (w->base && blk->fd >= 0) {
		close(blk->fd);
		blk->fd = nfd;
		blk->ino = ferry_fd_inode(nfd);
	} else if (w->base) {
		w->base = false;	/* the block's file was dropped: a file of its own */
		blk->patched = true;
	} else if (w->fd >= 0) {
		close(w->fd);
	}
	w->fd = nfd;
	w->ino = ferry_fd_inode(nfd);
	w->ro_mode = false;
	w->old_rw = w->id_rw;
	w->old_ro = w->id_ro;
	w->id_rw = w->id_rw ? next_block_id++ : 0;
	w->id_ro = w->id_ro ? next_block_id++ : 0;
	w->out = false;
	return 0;
}

int ferry_block_renew(uint64_t id, const void *owner, uint64_t *id_p)
{
	struct ferry_block *blk;
	struct ferry_window *w;
	bool rw;
	int r = 0;

	pthread_mutex_lock(&blocks_lock);
	w = window_find_locked(id, &blk);
	if (!w) {
		pthread_mutex_unlock(&blocks_lock);
		return ERR(ENOENT);
	}
	rw = id == w->id_rw || id == w->old_rw;
	/* Shared by another owner's registrations: its peers still need it. */
	if (w->out && !w->owners && w->owner == owner)
		r = window_renew_locked(blk, w);
	if (r < 0)
		ferry_err("a peer keeps access to %zu bytes at %p it was given: %m", w->len,
			  (void *)((uint8_t *)blk->addr + w->off));
	*id_p = rw ? w->id_rw : w->id_ro;
	pthread_mutex_unlock(&blocks_lock);
	return r;
}
