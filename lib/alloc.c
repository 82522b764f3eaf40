/*
 * alloc.c - ferry_alloc(): memory that peers of this host can map.
 *
 * Each allocation is its own memfd, sealed so that nobody can shrink it (a
 * peer mapping a file that shrinks would take SIGBUS).  The block table lets
 * the shm provider find which block an MR lives in and hand the block's fd
 * to peers.  Blocks are few and large, so a mutex-protected array will do.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry-internal.h"

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
 * 0 for one holder.  Lock-free, so a child of fork() finds it usable
 * whatever the parent's threads were doing: pages of counts are made
 * with a compare-and-swap.
 */
#define FD_REF_PAGE	1024
#define FD_REF_PAGES	1024		/* fds below 1 Mi */
static _Atomic(_Atomic uint16_t *) fd_refs[FD_REF_PAGES];

static _Atomic uint16_t *fd_ref(int fd, bool make)
{
	_Atomic uint16_t *page, *none = NULL;
	int i = fd / FD_REF_PAGE;

	if (fd < 0 || i >= FD_REF_PAGES)
		return NULL;
	page = atomic_load_explicit(&fd_refs[i], memory_order_acquire);
	if (!page && make) {
		page = calloc(FD_REF_PAGE, sizeof(*page));
		if (page && !atomic_compare_exchange_strong(&fd_refs[i], &none, page)) {
			free(page);
			page = none;
		}
	}
	return page ? &page[fd % FD_REF_PAGE] : NULL;
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
}

int ferry_block_drop_fd(const void *addr)
{
	int fd = -1;
	size_t i;

	pthread_mutex_lock(&blocks_lock);
	for (i = 0; i < nblocks; i++) {
		if (blocks[i].addr == addr) {
			fd = blocks[i].fd;
			blocks[i].fd = -1;
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

	for (i = 0; i < nblocks && !found; i++)
		found = blocks[i].ino == ino && blocks[i].owner == self;
	pthread_mutex_unlock(&blocks_lock);
	return found;
}

int ferry_block_dup_fd(uint64_t id)
{
	int fd = -1;
	size_t i;

	pthread_mutex_lock(&blocks_lock);
	for (i = 0; i < nblocks; i++) {
		if (blocks[i].id == id) {
			if (blocks[i].fd >= 0)
				fd = ferry_fd_dup(blocks[i].fd);
			else
				errno = EBADF;	/* ferry_block_drop_fd */
			break;
		}
	}
	pthread_mutex_unlock(&blocks_lock);
	return fd;
}
