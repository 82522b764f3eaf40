/*
 * shm_peer.c - reaching a peer process's memory that is not shared with us
 * (receives and MRs outside ferry_alloc blocks), without ever reaching
 * another process.
 *
 * process_vm_readv/writev name their target by pid, looked up at each call.
 * A peer that exits leaves its pid to be reused; a connection that a child
 * of the peer still holds would not hang up, and the next RDMA WRITE would
 * go, with addresses the peer chose, into whatever process got the pid --
 * with our privileges, which may be root's.  So the peer's memory is
 * reached through /proc/<pid>/mem instead, opened while the connection is
 * made: that descriptor holds the address space it was opened on, not the
 * pid, and reads and writes through it reach that one process or nothing
 * (0 bytes once it has exited).  Next to it a pidfd tells whether the
 * process behind a cached pair is the one that still has the pid.
 *
 * Rules:
 *   - only toward a peer of our own user: cross-memory access is what a
 *     user may do to its own processes, never what ferry adds toward
 *     another user's (a root server's peers of other users get remote
 *     access errors for memory outside blocks, which is all of what such a
 *     peer could be reached by);
 *   - the pair is opened when the peer's HELLO arrives, its credentials
 *     vouched for by the kernel, and the file's owner must be that uid;
 *   - one pair per peer process, shared by its connections (two
 *     descriptors per peer process, not per connection), kept for a while
 *     after the last of them goes (a process that connects once usually
 *     connects again: up to SHM_PEER_IDLE unused pairs stay), and never
 *     reused for a pid whose process exited;
 *   - a connection to this very process needs neither: our pid is ours
 *     for as long as we run, so process_vm_* reach exactly us (and in a
 *     child of fork, which inherited such a connection, nothing).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shm-internal.h"

#define SHM_PEER_IDLE	16

struct shm_peer_proc {
	pid_t pid;
	uid_t uid;
	int pidfd;		/* -1: this process (no descriptors needed) */
	int memfd;
	int refs;
	uint64_t idle_since;	/* refs 0: when the last user went */
	struct shm_peer_proc *next;
};

static pthread_mutex_t procs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_peer_proc *procs;
static uint64_t procs_clock;
static int procs_idle;

static int shm_pidfd_open(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	errno = ENOSYS;
	return -1;
#endif
}

/* Has the process behind @pidfd exited?  (A pidfd polls readable then.) */
static bool shm_pidfd_exited(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };

	return poll(&p, 1, 0) != 0;
}

static void shm_peer_proc_close(struct shm_peer_proc *pp)
{
	if (pp->memfd >= 0)
		close(pp->memfd);
	if (pp->pidfd >= 0)
		close(pp->pidfd);
	free(pp);
}

/* Open the pair for @pid, which must belong to @uid; NULL + errno. */
static struct shm_peer_proc *shm_peer_proc_open(pid_t pid, uid_t uid)
{
	struct shm_peer_proc *pp = calloc(1, sizeof(*pp));
	char path[32];
	struct stat st;

	if (!pp)
		return NULL;
	pp->pid = pid;
	pp->uid = uid;
	pp->refs = 1;
	pp->memfd = -1;
	pp->pidfd = -1;
	if (pid == ferry_pid())
		return pp;
	pp->pidfd = ferry_fd_park(shm_pidfd_open(pid));
	if (pp->pidfd < 0)
		goto err;
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	pp->memfd = ferry_fd_park(open(path, O_RDWR | O_CLOEXEC));
	if (pp->memfd < 0)
		goto err;
	/* The pidfd came first: if its process is still there, the pid was
	 * still its own when the file was opened.  And the file belongs to
	 * the process's user: a pid taken over by another user fails here. */
	if (shm_pidfd_exited(pp->pidfd) || fstat(pp->memfd, &st) < 0 || st.st_uid != uid) {
		errno = ESRCH;
		goto err;
	}
	return pp;
err:
	{
		int e = errno;

		shm_peer_proc_close(pp);
		errno = e;
	}
	return NULL;
}

struct shm_peer_proc *shm_peer_proc_get(pid_t pid, uid_t uid)
{
	struct shm_peer_proc *pp, **pprev, *stale = NULL;

	if (uid != geteuid() || uid != getuid()) {
		errno = EPERM;
		return NULL;
	}
	pthread_mutex_lock(&procs_lock);
	for (pprev = &procs; (pp = *pprev); pprev = &pp->next) {
		if (pp->pid != pid)
			continue;
		if (pp->uid == uid && (pp->pidfd < 0 || !shm_pidfd_exited(pp->pidfd))) {
			if (pp->refs++ == 0)
				procs_idle--;
			pthread_mutex_unlock(&procs_lock);
			return pp;
		}
		/* Its process is gone and the pid is someone else's now: its
		 * connections keep the old pair (it reaches nothing), new ones
		 * get a pair of their own. */
		*pprev = pp->next;
		pp->next = NULL;
		if (pp->refs == 0) {
			procs_idle--;
			stale = pp;
		}
		pp->refs = -pp->refs;	/* unlisted: the last put closes it */
		break;
	}
	pthread_mutex_unlock(&procs_lock);
	if (stale)
		shm_peer_proc_close(stale);
	pp = shm_peer_proc_open(pid, uid);
	if (!pp)
		return NULL;
	pthread_mutex_lock(&procs_lock);
	pp->next = procs;
	procs = pp;
	pthread_mutex_unlock(&procs_lock);
	return pp;
}

static void shm_peer_proc_unlink_locked(struct shm_peer_proc *pp)
{
	struct shm_peer_proc **pprev;

	for (pprev = &procs; *pprev; pprev = &(*pprev)->next) {
		if (*pprev == pp) {
			*pprev = pp->next;
			return;
		}
	}
}

void shm_peer_proc_put(struct shm_peer_proc *pp)
{
	struct shm_peer_proc *old = NULL, *v;

	if (!pp)
		return;
	pthread_mutex_lock(&procs_lock);
	if (pp->refs < 0) {	/* unlisted (its process exited): counts up */
		if (++pp->refs == 0)
			old = pp;
		pthread_mutex_unlock(&procs_lock);
		if (old)
			shm_peer_proc_close(old);
		return;
	}
	if (--pp->refs > 0) {
		pthread_mutex_unlock(&procs_lock);
		return;
	}
	pp->idle_since = ++procs_clock;
	if (++procs_idle > SHM_PEER_IDLE) {
		for (v = procs; v; v = v->next)
			if (v->refs == 0 && (!old || v->idle_since < old->idle_since))
				old = v;
		shm_peer_proc_unlink_locked(old);
		procs_idle--;
	}
	pthread_mutex_unlock(&procs_lock);
	if (old)
		shm_peer_proc_close(old);
}

ssize_t shm_peer_proc_rw(struct shm_peer_proc *pp, bool write, const struct iovec *iov,
			 int n, uint64_t addr)
{
	ssize_t r;

	if (!pp) {
		errno = EPERM;
		return -1;
	}
	if (addr > (uint64_t)INT64_MAX) {
		errno = EFAULT;
		return -1;
	}
	if (pp->pidfd < 0) {
		struct iovec remote = { (void *)(uintptr_t)addr, 0 };
		int i;

		if (pp->pid != ferry_pid()) {
			errno = ESRCH;	/* a child of fork: that was its parent */
			return -1;
		}
		for (i = 0; i < n; i++)
			remote.iov_len += iov[i].iov_len;
		return write ? process_vm_writev(pp->pid, iov, (unsigned long)n, &remote, 1, 0)
			     : process_vm_readv(pp->pid, iov, (unsigned long)n, &remote, 1, 0);
	}
	do
		r = write ? pwritev(pp->memfd, iov, n, (off_t)addr)
			  : preadv(pp->memfd, iov, n, (off_t)addr);
	while (r < 0 && errno == EINTR);
	if (r == 0 && n > 0 && iov[0].iov_len > 0) {
		errno = ESRCH;	/* its address space is gone: it exited */
		return -1;
	}
	return r;
}
