/*
 * cm_watch.c - sockets the CM thread watches for the ids, armed and
 * stopped from any thread without waking the CM thread.
 *
 * libevent wakes its loop (a write to its notification fd, a thread
 * switch) whenever another thread adds or deletes an event, though epoll
 * needs nothing of the kind: the connections' arm and disarm happen in the
 * application's threads (connect, accept, close), and each such wake-up
 * cost a context switch on a CPU the application shares with the CM
 * thread.  So the watched sockets live in an epoll set of our own, changed
 * directly with epoll_ctl by whichever thread arms or stops a watch; the
 * loop polls that set as one more descriptor, and takes each ready watch
 * under cm_watches.lock (so that a thread stopping it either finds it
 * still armed or waits for its callback, as event_del does).
 *
 * Deadlines are checked by a timer that runs every CM_WATCH_SWEEP_MS while
 * some watch has one: a timeout ends up to that much late.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "cm-internal.h"

/* How often deadlines are checked, while any watch has one. */
#define CM_WATCH_SWEEP_MS	100
/* Callbacks run per wake-up of the loop, to stay fair to other events. */
#define CM_WATCH_BATCH		64

/* The watch set of this process. */
static struct {
	pthread_mutex_t lock;		/* watches' states, the set, the timed list */
	pthread_cond_t fired;		/* a callback ended */
	pid_t pid;			/* process whose set this is, 0: none yet */
	int epfd;
	struct event *ready_ev;		/* epfd readable */
	struct event *sweep_ev;		/* deadlines (persistent timer) */
	bool sweeping;			/* sweep_ev added */
	struct cm_watch *timed;		/* armed watches with a deadline */
} cm_watches = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, -1, NULL, NULL,
		 false, NULL };

static pthread_once_t cm_watch_once = PTHREAD_ONCE_INIT;

/* The parent's set (and its watches) is the parent's: begin anew. */
static void cm_watch_atfork_child(void)
{
	pthread_mutex_init(&cm_watches.lock, NULL);
	pthread_cond_init(&cm_watches.fired, NULL);
	if (cm_watches.epfd >= 0)
		close(cm_watches.epfd);
	cm_watches.epfd = -1;
	cm_watches.pid = 0;
	cm_watches.ready_ev = cm_watches.sweep_ev = NULL;
	cm_watches.sweeping = false;
	cm_watches.timed = NULL;
}

static void cm_watch_init_once(void)
{
	pthread_atfork(NULL, NULL, cm_watch_atfork_child);
}

/* Take @w for its callback (lock held): it is no longer in the set. */
static void cm_watch_claim_locked(struct cm_watch *w)
{
	w->state = CM_WATCH_FIRING;
	epoll_ctl(cm_watches.epfd, EPOLL_CTL_DEL, w->fd, NULL);
	if (w->pprev) {
		*w->pprev = w->next;
		if (w->next)
			w->next->pprev = w->pprev;
		w->pprev = NULL;
		w->next = NULL;
	}
}

/* Run the callback of @w, claimed; lock held on entry and on return. */
static void cm_watch_fire_locked(struct cm_watch *w, short what)
{
	w->in_callback = true;
	pthread_mutex_unlock(&cm_watches.lock);
	w->cb(w->fd, what, w->arg);
	pthread_mutex_lock(&cm_watches.lock);
	w->in_callback = false;
	if (w->state == CM_WATCH_FIRING)	/* not armed again by its callback */
		w->state = CM_WATCH_IDLE;
	pthread_cond_broadcast(&cm_watches.fired);
}

/*
 * The set is readable: run the ready watches, one at a time.  Each is
 * fetched under the lock, so a thread that stopped it meanwhile (and may
 * have freed it) has also taken it out of the set.
 */
static void cm_watch_on_ready(evutil_socket_t fd, short what, void *arg)
{
	struct epoll_event ev;
	int i;

	pthread_mutex_lock(&cm_watches.lock);
	for (i = 0; i < CM_WATCH_BATCH; i++) {
		struct cm_watch *w;
		short ready;

		if (epoll_wait(cm_watches.epfd, &ev, 1, 0) != 1)
			break;
		w = ev.data.ptr;
		if (w->state != CM_WATCH_ARMED)
			continue;
		ready = (ev.events & EPOLLIN ? EV_READ : 0) |
			(ev.events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR) ? EV_CLOSED : 0);
		cm_watch_claim_locked(w);
		cm_watch_fire_locked(w, ready);
	}
	pthread_mutex_unlock(&cm_watches.lock);
}

/* Every CM_WATCH_SWEEP_MS while some watch has a deadline. */
static void cm_watch_on_sweep(evutil_socket_t fd, short what, void *arg)
{
	struct cm_watch *w;
	uint64_t now = monotime_ms();

	pthread_mutex_lock(&cm_watches.lock);
	for (w = cm_watches.timed; w;) {
		if (w->deadline_ms > now) {
			w = w->next;
			continue;
		}
		cm_watch_claim_locked(w);
		cm_watch_fire_locked(w, EV_TIMEOUT);
		w = cm_watches.timed;	/* the list may have changed */
	}
	if (!cm_watches.timed && cm_watches.sweeping) {
		event_del(cm_watches.sweep_ev);	/* the loop's own: no wake-up */
		cm_watches.sweeping = false;
	}
	pthread_mutex_unlock(&cm_watches.lock);
}

/* This process's set, made on first use; lock held. */
static int cm_watch_set_locked(void)
{
	struct event_base *base;

	if (cm_watches.pid == ferry_pid())
		return 0;
	base = cm_thread_base();
	if (!base)
		return -1;
	cm_watches.epfd = ferry_fd_park(epoll_create1(EPOLL_CLOEXEC));
	if (cm_watches.epfd < 0) {
		ferry_warn("cm: creating the watch set: %m");
		return -1;
	}
	cm_watches.ready_ev = event_new(base, cm_watches.epfd, EV_READ | EV_PERSIST,
					cm_watch_on_ready, NULL);
	cm_watches.sweep_ev = event_new(base, -1, EV_PERSIST, cm_watch_on_sweep, NULL);
	if (!cm_watches.ready_ev || !cm_watches.sweep_ev ||
	    event_add(cm_watches.ready_ev, NULL) < 0) {
		if (cm_watches.ready_ev)
			event_free(cm_watches.ready_ev);
		if (cm_watches.sweep_ev)
			event_free(cm_watches.sweep_ev);
		cm_watches.ready_ev = cm_watches.sweep_ev = NULL;
		close(cm_watches.epfd);
		cm_watches.epfd = -1;
		return ERR(ENOMEM);
	}
	cm_watches.pid = ferry_pid();
	return 0;
}

/* Put @w, armed, in the set (and the timed list); lock held. */
static int cm_watch_insert_locked(struct cm_watch *w)
{
	struct epoll_event ev = { .data.ptr = w };

	ev.events = (w->what & EV_READ ? EPOLLIN : 0) | (w->what & EV_CLOSED ? EPOLLRDHUP : 0);
	if (epoll_ctl(cm_watches.epfd, EPOLL_CTL_ADD, w->fd, &ev) < 0)
		return -1;
	if (w->deadline_ms) {
		if (!cm_watches.sweeping) {
			const struct timeval tv = { 0, CM_WATCH_SWEEP_MS * 1000 };

			if (event_add(cm_watches.sweep_ev, &tv) < 0) {
				epoll_ctl(cm_watches.epfd, EPOLL_CTL_DEL, w->fd, NULL);
				return ERR(ENOMEM);
			}
			cm_watches.sweeping = true;
		}
		w->next = cm_watches.timed;
		if (w->next)
			w->next->pprev = &w->next;
		w->pprev = &cm_watches.timed;
		cm_watches.timed = w;
	}
	w->state = CM_WATCH_ARMED;
	w->pid = ferry_pid();
	return 0;
}

int cm_watch_add(struct cm_watch *w, int fd, short what, event_callback_fn cb, void *arg,
		 uint64_t deadline_ms)
{
	int ret;

	pthread_once(&cm_watch_once, cm_watch_init_once);
	pthread_mutex_lock(&cm_watches.lock);
	w->fd = fd;
	w->what = what;
	w->cb = cb;
	w->arg = arg;
	w->deadline_ms = deadline_ms;
	w->next = NULL;
	w->pprev = NULL;
	ret = cm_watch_set_locked();
	if (ret == 0)
		ret = cm_watch_insert_locked(w);
	pthread_mutex_unlock(&cm_watches.lock);
	return ret;
}

int cm_watch_readd(struct cm_watch *w)
{
	return cm_watch_add(w, w->fd, w->what, w->cb, w->arg, w->deadline_ms);
}

bool cm_watch_del(struct cm_watch *w)
{
	bool armed;

	pthread_once(&cm_watch_once, cm_watch_init_once);
	pthread_mutex_lock(&cm_watches.lock);
	/* Armed by the parent before fork: neither its set nor its list are
	 * ours to change. */
	if (w->state != CM_WATCH_IDLE && w->pid != ferry_pid()) {
		w->state = CM_WATCH_IDLE;
		w->in_callback = false;
		w->pprev = NULL;
		w->next = NULL;
		pthread_mutex_unlock(&cm_watches.lock);
		return true;
	}
	/*
	 * Its callback runs (in the CM thread, unless that is us): wait, even
	 * if the callback armed it again (a client's reply callback arms the
	 * hang-up watch, then reports ESTABLISHED; the application may close
	 * and free the watch before the callback has returned).
	 */
	while (w->in_callback && !cm_thread_is_self())
		pthread_cond_wait(&cm_watches.fired, &cm_watches.lock);
	armed = w->state == CM_WATCH_ARMED;
	if (armed) {
		cm_watch_claim_locked(w);
		w->state = CM_WATCH_IDLE;
	}
	pthread_mutex_unlock(&cm_watches.lock);
	return armed;
}
