/*
 * fdtab.c - the fds the shim manages (see preload.h).
 *
 * Two levels of atomic pointers indexed by fd, as sock/'s own table:
 * a lookup is two loads, no lock and no system call, which matters since
 * every read() and write() of the program asks.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "preload.h"

#define FP_PAGE		1024
#define FP_PAGES	1024		/* fds below 1 Mi */

static _Atomic(struct fp_fd *) *fp_table[FP_PAGES];
static pthread_mutex_t fp_table_lock = PTHREAD_MUTEX_INITIALIZER;

struct fp_fd *fp_get(int fd)
{
	_Atomic(struct fp_fd *) *page;

	if ((unsigned int)fd >= FP_PAGE * FP_PAGES)
		return NULL;
	page = __atomic_load_n(&fp_table[fd / FP_PAGE], __ATOMIC_ACQUIRE);
	return page ? atomic_load_explicit(&page[fd % FP_PAGE], memory_order_acquire) : NULL;
}

struct fp_fd *fp_set(int fd, struct fp_fd *e)
{
	_Atomic(struct fp_fd *) *page;

	if ((unsigned int)fd >= FP_PAGE * FP_PAGES)
		return NULL;
	page = __atomic_load_n(&fp_table[fd / FP_PAGE], __ATOMIC_ACQUIRE);
	if (!page) {
		if (!e)
			return NULL;
		pthread_mutex_lock(&fp_table_lock);
		page = fp_table[fd / FP_PAGE];
		if (!page) {
			page = calloc(FP_PAGE, sizeof(*page));
			if (page)
				__atomic_store_n(&fp_table[fd / FP_PAGE], page, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&fp_table_lock);
		if (!page)
			return NULL;
	}
	return atomic_exchange(&page[fd % FP_PAGE], e);
}

struct fp_fd *fp_new(enum fp_kind kind, int domain)
{
	struct fp_fd *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->kind = kind;
	e->domain = domain;
	e->ferry_fd = -1;
	e->ready_efd = -1;
	e->rdv_fd = -1;
	e->sfd = -1;
	atomic_init(&e->nref, 1);
	return e;
}

void fp_free(struct fp_fd *e)
{
	free(e);
}

void fp_for_each(void (*fn)(int fd, struct fp_fd *e, void *arg), void *arg)
{
	struct fp_fd *e;
	int i, j;

	for (i = 0; i < FP_PAGES; i++) {
		_Atomic(struct fp_fd *) *page = __atomic_load_n(&fp_table[i], __ATOMIC_ACQUIRE);

		if (!page)
			continue;
		for (j = 0; j < FP_PAGE; j++) {
			e = atomic_load(&page[j]);
			if (e)
				fn(i * FP_PAGE + j, e, arg);
		}
	}
}

/*
 * Move @fd to a number near the top of the fd limit, where the lowest-free
 * rule does not reach it, so the application's own numbering is not
 * disturbed by the shim's hidden fds.  Keeps @fd where it is if no such
 * number is free.
 */
int fp_hide_fd(int fd)
{
	struct rlimit rl;
	int base, nfd;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < 2048)
		return fd;
	base = (int)(rl.rlim_cur > FP_PAGE * FP_PAGES ? FP_PAGE * FP_PAGES : rl.rlim_cur) - 1024;
	nfd = fp_real.fcntl(fd, F_DUPFD_CLOEXEC, base);
	if (nfd < 0)
		return fd;
	fp_real.close(fd);
	return nfd;
}
