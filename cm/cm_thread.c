/*
 * cm_thread.c - the CM thread: one libevent loop per process.
 *
 * Started on first use.  A child of fork() has no CM thread and inherits
 * a loop it must not touch (its state belongs to the parent's thread): the
 * child starts a fresh base and thread on first use, and the parent's ids
 * are not usable there.  The thread blocks every signal, so signals stay
 * the application's.
 *
 * cm_thread_call() hands a function to the loop (event_base_once, which
 * wakes the loop from any thread) and waits for it on a condition variable.
 * cm_id_call() skips that round trip for an id the loop cannot reach.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "cm-internal.h"

/* The state of the CM thread of this process. */
static struct {
	pthread_mutex_t lock;		/* start-up, and every call's done flag */
	pthread_cond_t done;		/* some call finished */
	pid_t pid;			/* process that started the thread */
	pthread_t thread;
	struct event_base *base;
} cm_thr = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL };

static pthread_once_t cm_thread_once = PTHREAD_ONCE_INIT;
static bool cm_thread_threads_ok;

/* A function the loop runs for a caller of cm_thread_call. */
struct cm_call {
	int (*fn)(void *arg);
	void *arg;
	int ret;
	int err;
	bool done;
};

/*
 * In the child, the parent's thread does not exist: forget its base (its
 * memory is the parent's business) and re-make the locks, which a thread
 * of the parent may have held at fork time.
 */
static void cm_thread_atfork_child(void)
{
	pthread_mutex_init(&cm_thr.lock, NULL);
	pthread_cond_init(&cm_thr.done, NULL);
	cm_thr.base = NULL;
	cm_thr.pid = 0;
}

static void cm_thread_init_once(void)
{
	cm_thread_threads_ok = evthread_use_pthreads() == 0;
	if (!cm_thread_threads_ok)
		ferry_err("cm: libevent has no pthreads support");
	pthread_atfork(NULL, NULL, cm_thread_atfork_child);
}

static void *cm_thread_main(void *arg)
{
	struct event_base *base = arg;
	struct sched_param sp = { .sched_priority = 0 };

	ferry_own_thread = true;
	/*
	 * A caller that hands us work keeps its CPU until it waits: woken, we
	 * would otherwise preempt it at once (when the process is pinned to
	 * one CPU, say) and then block on the lock it still holds, two thread
	 * switches wasted per hand-off.  SCHED_BATCH threads do not preempt on
	 * wake-up; they lose nothing else.
	 */
	if (pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp) != 0)
		ferry_debug("cm: the CM thread stays SCHED_OTHER");
	event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
	ferry_err("cm: the event loop ended");
	return NULL;
}

/*
 * Can this process open @n more descriptors?  libevent treats a failed
 * socketpair while it sets a base up as fatal and exits the process; a
 * program out of descriptors must get EMFILE from ferry instead.
 */
static bool cm_thread_fds_free(int n)
{
	int fds[8], i, got = 0;

	for (i = 0; i < n && i < 8; i++) {
		fds[i] = eventfd(0, EFD_CLOEXEC);
		if (fds[i] < 0)
			break;
		got++;
	}
	for (i = 0; i < got; i++)
		close(fds[i]);
	return got == n;
}

/* A base with epoll's EPOLLRDHUP (EV_CLOSED): hang-ups without reading. */
static struct event_base *cm_thread_new_base(void)
{
	struct event_config *cfg;
	struct event_base *base;

	/* epoll set, signal socketpair, notification pipe, and room to work */
	if (!cm_thread_fds_free(6)) {
		ferry_info("cm: no descriptors left to start the CM thread");
		errno = EMFILE;
		return NULL;
	}
	cfg = event_config_new();
	if (!cfg)
		return NULL;
	event_config_require_features(cfg, EV_FEATURE_EARLY_CLOSE);
	base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	if (!base)
		ferry_err("cm: no libevent backend with early-close support");
	return base;
}

/* Start the thread in this process; cm_thr.lock held. */
static int cm_thread_start_locked(void)
{
	struct event_base *base;
	sigset_t all, old;
	int err;

	base = cm_thread_new_base();
	if (!base)
		return ERR(errno == EMFILE ? EMFILE : ENOMEM);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);	/* the thread inherits it */
	err = pthread_create(&cm_thr.thread, NULL, cm_thread_main, base);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		event_base_free(base);
		errno = err;
		ferry_err("cm: starting the CM thread: %m");
		return -1;
	}
	pthread_detach(cm_thr.thread);
	cm_thr.base = base;
	cm_thr.pid = ferry_pid();
	return 0;
}

struct event_base *cm_thread_base(void)
{
	struct event_base *base = NULL;

	pthread_once(&cm_thread_once, cm_thread_init_once);
	if (!cm_thread_threads_ok) {
		errno = ENOSYS;
		return NULL;
	}
	pthread_mutex_lock(&cm_thr.lock);
	if (cm_thr.pid == ferry_pid() || cm_thread_start_locked() == 0)
		base = cm_thr.base;
	pthread_mutex_unlock(&cm_thr.lock);
	return base;
}

bool cm_thread_is_self(void)
{
	return cm_thr.pid == ferry_pid() && cm_thr.base &&
	       pthread_equal(pthread_self(), cm_thr.thread);
}

static void cm_thread_run_call(evutil_socket_t fd, short what, void *arg)
{
	struct cm_call *call = arg;
	int ret, err;

	errno = 0;
	ret = call->fn(call->arg);
	err = errno;
	pthread_mutex_lock(&cm_thr.lock);
	call->ret = ret;
	call->err = err;
	call->done = true;
	pthread_cond_broadcast(&cm_thr.done);
	pthread_mutex_unlock(&cm_thr.lock);
}

int cm_thread_call(int (*fn)(void *arg), void *arg)
{
	struct cm_call call = { .fn = fn, .arg = arg };
	const struct timeval now = { 0, 0 };
	struct event_base *base;

	if (cm_thread_is_self())
		return fn(arg);
	base = cm_thread_base();
	if (!base)
		return -1;
	if (event_base_once(base, -1, EV_TIMEOUT, cm_thread_run_call, &call, &now) < 0) {
		ferry_err("cm: cannot schedule work in the CM thread");
		return ERR(ENOMEM);
	}
	pthread_mutex_lock(&cm_thr.lock);
	while (!call.done)
		pthread_cond_wait(&cm_thr.done, &cm_thr.lock);
	pthread_mutex_unlock(&cm_thr.lock);
	errno = call.err;
	return call.ret;
}

/* Can a call on @id through @tp (NULL: any transport) run right here? */
static bool cm_id_call_inline(const struct cm_id_priv *id, const struct cm_transport *tp)
{
	size_t i;

	if (id->in_loop)
		return false;
	for (i = 0; i < ferry_transports_count; i++)
		if (cm_transport_at(i) && (!tp || id->tp_data[i]) &&
		    !cm_transport_at(i)->calls_inline)
			return false;
	return !tp || tp->calls_inline;
}

int cm_id_call(struct cm_id_priv *id, const struct cm_transport *tp,
	       int (*fn)(void *arg), void *arg)
{
	if (cm_id_call_inline(id, tp))
		return fn(arg);
	return cm_thread_call(fn, arg);
}

int cm_id_call_taking(struct cm_id_priv *id, const struct cm_transport *tp,
		      int (*fn)(void *arg), void *arg)
{
	bool taken = id->in_loop && tp && tp->calls_inline && !cm_thread_is_self() &&
		     tp->unloop(id) == 0;
	int ret = cm_id_call(id, tp, fn, arg);

	/* A call refused (the wrong state, say) must not cost the id its
	 * watch: one that failed after taking it made its own arrangements
	 * (a closed socket leaves nothing to watch). */
	if (ret < 0 && taken && !id->in_loop) {
		int e = errno;

		tp->reloop(id);
		errno = e;
	}
	return ret;
}
