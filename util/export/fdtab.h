/*
 * fdtab.h - a table indexed by file descriptor, read without a lock.
 *
 * Several parts of ferry keep something per fd number: the socket layer
 * its sockets, the preload shim the fds it manages, core the count of
 * holders of a shared descriptor.  This is the one table they all use
 * (rdma-core's indexer.h is the model).  Two levels: a fixed array of
 * page pointers and pages of FDTAB_PAGE slots, a page made the first time
 * an fd of its range needs a slot and kept for the life of the process
 * (fd numbers are reused; a page is 8 KiB of pointers at most).
 *
 * A lookup is two acquire loads, no lock, no call and no system call: the
 * shim asks on every read() and write() of the program.  Everything is
 * static inline for that reason; the slot size is an argument that is a
 * constant at every call, so the compiler folds it into the address.
 *
 * What a slot holds, and how it is read and written, is the user's: it
 * comes zeroed (calloc) and the user accesses it atomically.  The
 * pointer helpers (fdtab_get, fdtab_put) cover the common case.  Pages are
 * made with a compare-and-swap, never under a lock, so a child of fork()
 * can use a table whatever the parent's other threads were doing with it.
 */
#ifndef FERRY_UTIL_FDTAB_H
#define FERRY_UTIL_FDTAB_H

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

#define FDTAB_PAGE	1024			/* slots per page */
#define FDTAB_PAGES	1024			/* pages */
#define FDTAB_MAX	(FDTAB_PAGE * FDTAB_PAGES)	/* fds below 1 Mi */

/* A table: static storage (all zero) is an empty one. */
struct fdtab {
	_Atomic(void *) pages[FDTAB_PAGES];
};

/*
 * fdtab_slot - the slot of @fd in @tab (slots of @size bytes), or NULL
 * when @fd is out of range or no slot of its page was ever made.
 */
static inline void *fdtab_slot(struct fdtab *tab, int fd, size_t size)
{
	unsigned int n = (unsigned int)fd;
	char *page;

	if (n >= FDTAB_MAX)
		return NULL;
	page = atomic_load_explicit(&tab->pages[n / FDTAB_PAGE], memory_order_acquire);
	return page ? page + (size_t)(n % FDTAB_PAGE) * size : NULL;
}

/*
 * fdtab_slot_make - the slot of @fd, its page made if need be; NULL and
 * errno EMFILE when @fd is out of range (negative or 1 Mi and above),
 * ENOMEM when no page could be made.  Of two threads making the same page
 * at once one keeps its page, the other frees its own.
 */
static inline void *fdtab_slot_make(struct fdtab *tab, int fd, size_t size)
{
	unsigned int n = (unsigned int)fd;
	char *slot = fdtab_slot(tab, fd, size);
	void *page, *none = NULL;

	if (slot)
		return slot;
	if (n >= FDTAB_MAX) {
		errno = EMFILE;
		return NULL;
	}
	page = calloc(FDTAB_PAGE, size);
	if (!page)
		return NULL;
	if (!atomic_compare_exchange_strong_explicit(&tab->pages[n / FDTAB_PAGE], &none, page,
						     memory_order_acq_rel,
						     memory_order_acquire)) {
		free(page);
		page = none;	/* another thread's, made meanwhile */
	}
	return (char *)page + (size_t)(n % FDTAB_PAGE) * size;
}

/* --- a table of pointers --- */

/* fdtab_get - the pointer @fd holds in @tab, NULL if none. */
static inline void *fdtab_get(struct fdtab *tab, int fd)
{
	_Atomic(void *) *slot = fdtab_slot(tab, fd, sizeof(*slot));

	return slot ? atomic_load_explicit(slot, memory_order_acquire) : NULL;
}

/*
 * fdtab_put - make @fd hold @ptr (NULL: nothing), the pointer it held
 * before in *@old_p (unless @old_p is NULL).  0, or -1 with errno as
 * fdtab_slot_make's; putting NULL never makes a page, and never fails.
 */
static inline int fdtab_put(struct fdtab *tab, int fd, void *ptr, void **old_p)
{
	_Atomic(void *) *slot = ptr ? fdtab_slot_make(tab, fd, sizeof(*slot)) :
				      fdtab_slot(tab, fd, sizeof(*slot));
	void *old = NULL;

	if (slot)
		old = atomic_exchange_explicit(slot, ptr, memory_order_acq_rel);
	else if (ptr)
		return -1;
	if (old_p)
		*old_p = old;
	return 0;
}

/*
 * fdtab_for_each - call @fn(fd, ptr, arg) for every fd of @tab that holds
 * a pointer, in fd order.  Entries put or cleared meanwhile may or may
 * not be seen.
 */
static inline void fdtab_for_each(struct fdtab *tab, void (*fn)(int fd, void *ptr, void *arg),
				  void *arg)
{
	int i, j;

	for (i = 0; i < FDTAB_PAGES; i++) {
		_Atomic(void *) *page = atomic_load_explicit(&tab->pages[i], memory_order_acquire);
		void *ptr;

		for (j = 0; page && j < FDTAB_PAGE; j++) {
			ptr = atomic_load_explicit(&page[j], memory_order_acquire);
			if (ptr)
				fn(i * FDTAB_PAGE + j, ptr, arg);
		}
	}
}

#endif /* FERRY_UTIL_FDTAB_H */
