/*
 * accept.c - the acceptor: ferry connections complete without accept().
 *
 * The kernel completes a TCP handshake into the listener's backlog whether
 * or not the program is in accept(); a client's connect() returns at once.
 * A ferry listener's handshakes progress only when someone takes its CM
 * events, so a client would wait until the server program next looked at
 * its listener -- forever, for a program that connects to itself from the
 * thread that later accepts.  One thread per process (started with the
 * first listener, again in a child after fork) sleeps on every ferry
 * listener's fd and takes their events, which moves new connections into
 * the listener's ready queue, and raises the listener's eventfd; the
 * program's accept(), poll and epoll wait on that eventfd (and the kernel
 * listener), never on the ferry listener's own fd.
 *
 * The eventfd is a hint, not a count: whoever finds the ready queue empty
 * reads it back to zero and looks at the queue once more, so a connection
 * that arrives between the look and the reset is never missed.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "preload.h"

static struct {
	pthread_mutex_t lock;		/* the listener set, and each visit */
	int epfd;
	pid_t pid;			/* process whose thread runs */
} fp_acc = { PTHREAD_MUTEX_INITIALIZER, -1, 0 };

/* Take @e's CM events; raise its eventfd if connections are ready. */
static void fp_acceptor_visit(struct fp_fd *e)
{
	uint64_t one = 1;

	if (sock_shim_listen_visit(e->ferry_fd) && !atomic_exchange(&e->efd_raised, true))
		(void)!fp_real.write(e->ready_efd, &one, sizeof(one));
}

static void *fp_acceptor_main(void *arg)
{
	struct epoll_event ev[32];
	sigset_t all;
	int n, i;

	(void)arg;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	FP_ENTER();	/* everything here is the shim's own */
	for (;;) {
		n = fp_real.epoll_wait(fp_acc.epfd, ev, 32, -1);
		if (n < 0 && errno != EINTR)
			break;
		pthread_mutex_lock(&fp_acc.lock);
		for (i = 0; i < n; i++)
			fp_acceptor_visit(ev[i].data.ptr);
		pthread_mutex_unlock(&fp_acc.lock);
	}
	return NULL;
}

/* The thread of this process, started if needed; fp_acc.lock held. */
static int fp_acceptor_start(void)
{
	pthread_attr_t attr;
	pthread_t t;
	int ret;

	if (fp_acc.pid == getpid())
		return 0;
	/* In a child of fork: the parent's thread is not here, its epoll set
	 * is shared with the parent and must not be used. */
	fp_acc.epfd = fp_hide_fd(fp_real.epoll_create1(EPOLL_CLOEXEC));
	if (fp_acc.epfd < 0)
		return -1;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	ret = pthread_create(&t, &attr, fp_acceptor_main, NULL);
	pthread_attr_destroy(&attr);
	if (ret) {
		fp_real.close(fp_acc.epfd);
		fp_acc.epfd = -1;
		return ERR(ret);
	}
	fp_acc.pid = getpid();
	return 0;
}

/*
 * fork (fork.c): the acceptor visits listeners holding fp_acc.lock, and
 * their cm_lock and sock/'s locks inside, so fork() holds it across:
 * taken before any pthread_atfork handler runs, which keeps the order the
 * acceptor itself takes them in (this lock first).
 */
void fp_acceptor_fork_lock(void)
{
	pthread_mutex_lock(&fp_acc.lock);
}

void fp_acceptor_fork_unlock(void)
{
	pthread_mutex_unlock(&fp_acc.lock);
}

int fp_acceptor_add(struct fp_fd *e)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = e };
	int ret = -1, efd, wfd;

	efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (efd < 0)
		return -1;
	e->ready_efd = fp_hide_fd(efd);
	pthread_mutex_lock(&fp_acc.lock);
	FP_ENTER();
	wfd = sock_shim_wait_fd(e->ferry_fd);
	if (wfd >= 0 && fp_acceptor_start() == 0)
		ret = fp_real.epoll_ctl(fp_acc.epfd, EPOLL_CTL_ADD, wfd, &ev);
	FP_LEAVE();
	pthread_mutex_unlock(&fp_acc.lock);
	if (ret < 0) {
		fp_real.close(e->ready_efd);
		e->ready_efd = -1;
	}
	return ret;
}

void fp_acceptor_del(struct fp_fd *e)
{
	int wfd;

	if (e->ready_efd < 0)
		return;
	pthread_mutex_lock(&fp_acc.lock);
	FP_ENTER();
	wfd = sock_shim_wait_fd(e->ferry_fd);
	if (wfd >= 0 && fp_acc.pid == getpid())
		fp_real.epoll_ctl(fp_acc.epfd, EPOLL_CTL_DEL, wfd, NULL);
	FP_LEAVE();
	pthread_mutex_unlock(&fp_acc.lock);
	fp_real.close(e->ready_efd);
	e->ready_efd = -1;
}

bool fp_acceptor_ready(struct fp_fd *e)
{
	int ready = sock_shim_listen_ready(e->ferry_fd);
	uint64_t v;

	if (ready != 0)
		return ready > 0;
	/* Empty: reset the hint if it was raised, then look again, for a
	 * connection queued since the look raised the hint just reset.  A
	 * hint not raised was not consumed: the look stands. */
	if (!atomic_exchange(&e->efd_raised, false))
		return false;
	(void)!fp_real.read(e->ready_efd, &v, sizeof(v));
	return sock_shim_listen_ready(e->ferry_fd) > 0;
}
