/*
 * fork.c - ferry sockets shared between processes by fork().
 *
 * After fork both processes hold each connection, as they would hold a
 * TCP socket; the connection must end only when the last of them closes
 * it (or exits).  Each ferry socket has a reference count in memory shared
 * by all the processes descended from the one that made it: fork() adds
 * one to every socket's count, close() takes one, and only the close that
 * takes the last one ends the connection in order; the others let go of
 * their own copy (sock/'s sock_forget).  A process that exits without
 * closing ends its connections the same way from a destructor.
 *
 * Listeners.  A ferry listener's CM state belongs to the process that made
 * it and cannot follow a child (the CM thread is per process), but its
 * rendezvous -- the listening AF_UNIX socket clients dial -- is a
 * descriptor, inherited like the kernel's listening socket.  So it is
 * shared the same way: before the fork the listener stops taking
 * connections on its own (the acceptor thread would take them into a
 * process that may never accept: nginx's master), and after it each
 * process takes one only in the program's accept(), from the rendezvous's
 * backlog, which all of them share as they share the TCP one; poll and
 * epoll see the rendezvous beside the TCP socket.  The child makes a
 * ferry listener of its own on the inherited rendezvous (fp_listen_adopt).
 * A process that exits loses only what it took; what waits in the
 * backlog is there for the others.  Where that cannot be done (no shm
 * rendezvous: verbs only), the old way: the parent keeps its listener if
 * it has accepted from it, else gives it up, and the child keeps TCP.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "preload.h"

/* Pages of counts, shared (MAP_SHARED): a slot is free when it reads 0. */
#define FP_REF_PAGE_SLOTS	1024
#define FP_REF_PAGES		64

static _Atomic int *fp_ref_pages[FP_REF_PAGES];
static pthread_mutex_t fp_ref_lock = PTHREAD_MUTEX_INITIALIZER;

_Atomic int *fp_ref_new(void)
{
	int p, i, zero;

	pthread_mutex_lock(&fp_ref_lock);
	for (p = 0; p < FP_REF_PAGES; p++) {
		if (!fp_ref_pages[p]) {
			void *m = mmap(NULL, FP_REF_PAGE_SLOTS * sizeof(int),
				       PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

			if (m == MAP_FAILED)
				break;
			fp_ref_pages[p] = m;
		}
		for (i = 0; i < FP_REF_PAGE_SLOTS; i++) {
			zero = 0;
			if (atomic_compare_exchange_strong(&fp_ref_pages[p][i], &zero, 1)) {
				pthread_mutex_unlock(&fp_ref_lock);
				return &fp_ref_pages[p][i];
			}
		}
	}
	pthread_mutex_unlock(&fp_ref_lock);
	errno = ENOMEM;
	return NULL;
}

/* Set in the count once a process ended the connection for all of them. */
#define FP_REF_ENDED	(1 << 30)

bool fp_ref_put(_Atomic int *ref)
{
	return !ref || (atomic_fetch_sub(ref, 1) & ~FP_REF_ENDED) == 1;
}

/*
 * The state a connection's holders share is the rings and queues; the
 * counts and positions that drive them (messages sent and taken, credits,
 * ring offsets) are each process's copy, good only in the process that
 * used the connection since the fork.  So the orderly end -- DISCONNECT
 * after the data -- is sent by the last holder if nobody drove the
 * connection elsewhere, else by the one that drove it, when it closes,
 * even if another still holds it (a parent waiting for its child to exit
 * before it closes its own copy): its peer sees the end of the stream
 * then, not at the last close.  The others only let go of their copies.
 */
bool fp_close_ends(struct fp_fd *e)
{
	bool drove, last;
	int old;

	drove = e->forked && sock_shim_fork_drove(e->sfd, &e->fork_mark);
	if (!e->refs)
		return true;
	old = atomic_fetch_sub(e->refs, 1);
	last = (old & ~FP_REF_ENDED) == 1;
	if (old & FP_REF_ENDED)
		return false;	/* ended already, by the process that drove it */
	if (drove && !last) {
		atomic_fetch_or(e->refs, FP_REF_ENDED);
		return true;
	}
	return last;
}

void fp_listen_downgrade(int fd, struct fp_fd *e, bool in_child)
{
	if (e->kind != FP_LISTEN)
		return;	/* an entry with several names: done at the first */
	if (in_child) {
		/* The listener's CM state lives in the parent's CM thread, whose
		 * event loop this process shares no thread with but whose epoll
		 * set it does: any release here would reach into it.  Only the
		 * acceptor's eventfd goes; the rest stays, unused, until exit. */
		fp_real.close(e->ready_efd);
		e->ready_efd = -1;
	} else {
		fp_acceptor_del(e);
		FP_ENTER();
		ferry_sock_close(e->ferry_fd);
		FP_LEAVE();
	}
	e->ferry_fd = -1;
	e->rdv_fd = -1;
	e->kind = FP_PLAIN;
}

/*
 * Are listeners shared by fork (FERRY_SHARE_LISTENERS=1)?  Not by default
 * yet: a ferry connection takes longer to set up than a TCP one, so a
 * pre-forked server whose clients open a connection per request (nginx
 * behind wrk -H 'Connection: close': 0.14x) would be slower under the shim
 * than over TCP, which is what such servers got before.  Where clients
 * keep their connections (2.2x for nginx's keep-alive), set it.  Read at
 * each fork: no lock, no allocation.
 */
static bool fp_share_listeners(void)
{
	const char *v = getenv("FERRY_SHARE_LISTENERS");

	return v && (!strcmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "on") ||
		     !strcasecmp(v, "true"));
}

/* Parent, before fork: make @e's listener shared (the header), if that is
 * asked for.  Once per entry (with several names, the first does it). */
static void fp_fork_prepare_listener(int fd, struct fp_fd *e, void *arg)
{
	int rdv = -1;

	(void)arg;
	if (e->kind != FP_LISTEN || e->rdv_fd >= 0)
		return;
	FP_ENTER();
	if (fp_share_listeners() && sock_listen_share(e->ferry_fd) == 0)
		rdv = sock_listen_rendezvous(e->ferry_fd);
	FP_LEAVE();
	if (rdv >= 0) {
		e->rdv_fd = rdv;
		fp_info("fd %d: a listener shared by fork: ferry clients go to "
			"whichever process accepts", fd);
	} else if (!e->accepted) {
		fp_info("fd %d: a listener that never accepted is shared by fork: "
			"TCP only from now on", fd);
		fp_listen_downgrade(fd, e, false);
	}
}

/* Child: a ferry listener of its own on what the parent shared. */
static void fp_fork_child_listener(int fd, struct fp_fd *e, void *arg)
{
	(void)arg;
	if (e->kind != FP_LISTEN || e->ferry_pid == getpid())
		return;
	if (e->rdv_fd >= 0 && fp_listen_adopt(fd, e) == 0) {
		e->ferry_pid = getpid();
		return;
	}
	if (e->rdv_fd >= 0)
		fp_info("fd %d: no ferry listener of this process's (%m): TCP only", fd);
	if (e->kind == FP_LISTEN)
		fp_listen_downgrade(fd, e, true);
}

/*
 * A connection both processes hold is driven by whichever uses it; its
 * state beyond the shared rings is each process's own copy, so two
 * processes must not both drive it.  The keepalive service of sock/
 * would, unasked (it takes completions for idle sockets): the socket
 * leaves its list before the fork, in both processes.
 */
static void fp_fork_quiet(int fd, struct fp_fd *e, void *arg)
{
	(void)arg;
	if (e->kind != FP_FERRY || fd != e->sfd)
		return;
	FP_ENTER();
	if (sock_shim_fork_quiet(e->sfd, &e->fork_mark) == 0)
		e->forked = true;
	FP_LEAVE();
}

static void fp_fork_ref(int fd, struct fp_fd *e, void *arg)
{
	int delta = *(int *)arg;

	(void)fd;
	/* Each entry once, however many names it has: its first name. */
	if (e->kind == FP_FERRY && e->refs && fd == e->sfd)
		atomic_fetch_add(e->refs, delta);
}

FP_EXPORT pid_t fork(void)
{
	int up = 1, down = -1;
	pid_t pid;

	fp_real_init();
	if (fp_inside())
		return fp_real.fork();
	fp_for_each(fp_fork_prepare_listener, NULL);
	fp_for_each(fp_fork_quiet, NULL);
	fp_for_each(fp_fork_ref, &up);
	fp_acceptor_fork_lock();
	pid = fp_real.fork();
	fp_acceptor_fork_unlock();
	if (pid < 0) {
		int err = errno;

		fp_for_each(fp_fork_ref, &down);
		errno = err;
	} else if (pid == 0) {
		/* The connections inherited are watched here too (peer death). */
		FP_ENTER();
		ferry_fork_child();
		FP_LEAVE();
		fp_for_each(fp_fork_child_listener, NULL);
	}
	return pid;
}

/* At exit: what the process still holds ends as close() would end it. */
static void fp_exit_close(int fd, struct fp_fd *e, void *arg)
{
	(void)arg;
	if (e->kind == FP_FERRY && fd == e->sfd)
		close(fd);
}

__attribute__((destructor)) static void fp_fork_exit(void)
{
	if (fp_real.close && !fp_inside())
		fp_for_each(fp_exit_close, NULL);
}
