/*
 * fdtab.c - the fds the shim manages (see preload.h).
 *
 * The table is util's fdtab.h (the socket layer's and core's too): a
 * lookup (fp_get, inline in preload.h) is two loads, no lock and no
 * system call, which matters since every read() and write() of the
 * program asks.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "preload.h"

struct fdtab fp_table;

struct fp_fd *fp_set(int fd, struct fp_fd *e)
{
	void *old = NULL;

	fdtab_put(&fp_table, fd, e, &old);	/* failed: NULL, as before */
	return old;
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

/* fp_for_each's callback and its argument, through fdtab_for_each. */
struct fp_each {
	void (*fn)(int fd, struct fp_fd *e, void *arg);
	void *arg;
};

static void fp_each_call(int fd, void *ptr, void *arg)
{
	struct fp_each *each = arg;

	each->fn(fd, ptr, each->arg);
}

void fp_for_each(void (*fn)(int fd, struct fp_fd *e, void *arg), void *arg)
{
	struct fp_each each = { fn, arg };

	fdtab_for_each(&fp_table, fp_each_call, &each);
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
	base = (int)(rl.rlim_cur > FDTAB_MAX ? FDTAB_MAX : rl.rlim_cur) - 1024;
	nfd = fp_real.fcntl(fd, F_DUPFD_CLOEXEC, base);
	if (nfd < 0)
		return fd;
	fp_real.close(fd);
	return nfd;
}
