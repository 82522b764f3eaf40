/*
 * epoll.c - epoll sets holding ferry sockets and listeners.
 *
 * A managed fd never goes into the application's epoll set itself: its
 * readiness is not its fd's.  The set's entry in the fd table (FP_EPOLL)
 * keeps the managed items instead, and a hidden epoll set of the shim's
 * own holds their wake fds (data: the item) and the application's set
 * itself (data: NULL), so one sleep waits for both kinds.
 *
 * epoll_wait first looks at the items that may have changed -- those whose
 * wake fd fired, new or modified ones, and level-triggered ones that were
 * ready last time; while spinning (FERRY_POLL_US, small sets) all of them
 * -- then at the kernel's set without sleeping.  Before it sleeps, every
 * item not armed since its last wake-up is armed (its next completion
 * raises its wake fd) and looked at once more, so nothing that happens
 * between the look and the sleep is missed.  An edge-triggered item is
 * reported when it is ready and something happened since its last report
 * (a wake-up, or a look that found it not ready), so new data raises a new
 * edge as in the kernel; ONESHOT items are disabled after one report until
 * EPOLL_CTL_MOD.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"

#define FP_EP_SPIN_ITEMS 64	/* spin over every item only in sets this small */

struct fp_ep_item {
	int fd;
	struct fp_fd *e;
	uint32_t events;
	epoll_data_t data;
	bool pending;			/* may have changed: look at it */
	bool ready;			/* level-triggered and ready at the last look */
	bool et_seen;			/* edge-triggered: reported ready, no edge since */
	bool disabled;			/* ONESHOT item reported */
	bool unwatched;			/* disabled, its wake fds out of the hidden set:
					 * a hung-up socket would wake it for ever */
	bool deleted;			/* EPOLL_CTL_DEL'd: kept, watched, for a re-ADD */
	bool kernel_hint;		/* listener: its kernel half may be readable */
	bool armed;			/* its next change raises its wake fd ... */
	unsigned int gen;		/* ... unless its channel was drained since */
	struct fp_ep_item *next;
};

struct fp_ep {
	int hidden;			/* -1 until the first item */
	pthread_mutex_t lock;
	struct fp_ep_item *items;
	int nitems;
	/* Kernel fds in the application's set, when the shim saw it made:
	 * with none there, waits need not ask the kernel. */
	bool kernel_known;
	int nkernel;
	unsigned int calls;		/* epoll_waits that found ferry events */
	unsigned int waits;		/* epoll_waits */
	struct fp_ep *next;		/* in fp_eps */
};

static struct fp_ep *fp_eps;
static pthread_mutex_t fp_eps_lock = PTHREAD_MUTEX_INITIALIZER;

static struct fp_ep *fp_ep_new(int epfd, bool kernel_known)
{
	struct fp_ep *ep = calloc(1, sizeof(*ep));
	struct fp_fd *e = fp_new(FP_EPOLL, 0);

	if (!ep || !e) {
		free(ep);
		fp_free(e);
		return NULL;
	}
	pthread_mutex_init(&ep->lock, NULL);
	ep->hidden = -1;
	ep->kernel_known = kernel_known;
	e->ep = ep;
	pthread_mutex_lock(&fp_eps_lock);
	ep->next = fp_eps;
	fp_eps = ep;
	pthread_mutex_unlock(&fp_eps_lock);
	fp_free(fp_set(epfd, e));
	return ep;
}

static struct fp_ep *fp_ep_get(int epfd, bool create)
{
	struct fp_fd *e = fp_get(epfd);

	if (e && e->kind == FP_EPOLL)
		return e->ep;
	if (!create || e)
		return NULL;
	return fp_ep_new(epfd, false);
}

/* The hidden set: the application's set (data NULL) and the wake fds. */
static int fp_ep_hidden(struct fp_ep *ep, int epfd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	int h;

	if (ep->hidden >= 0)
		return 0;
	h = fp_real.epoll_create1(EPOLL_CLOEXEC);
	if (h < 0)
		return -1;
	h = fp_hide_fd(h);
	if (fp_real.epoll_ctl(h, EPOLL_CTL_ADD, epfd, &ev) < 0) {
		fp_real.close(h);
		return -1;
	}
	ep->hidden = h;
	return 0;
}

FP_EXPORT int epoll_create1(int flags)
{
	int epfd;

	fp_real_init();
	epfd = fp_real.epoll_create1(flags);
	if (epfd >= 0 && !fp_inside() && fp_enabled())
		fp_ep_new(epfd, true);
	return epfd;
}

FP_EXPORT int epoll_create(int size)
{
	int epfd;

	fp_real_init();
	epfd = fp_real.epoll_create(size);
	if (epfd >= 0 && !fp_inside() && fp_enabled())
		fp_ep_new(epfd, true);
	return epfd;
}

static int fp_ep_wake_fds(struct fp_ep_item *it, int wfd[FP_WAKE_MAX])
{
	int n = 0, fd;

	FP_ENTER();
	if (it->e->kind == FP_FERRY) {
		fd = sock_shim_wait_fd(it->e->sfd);
		if (fd >= 0)
			wfd[n++] = fd;
	} else {
		wfd[n++] = it->fd;
		wfd[n++] = it->e->ready_efd;
		if (it->e->rdv_fd >= 0)
			wfd[n++] = it->e->rdv_fd;
	}
	FP_LEAVE();
	return n;
}

/*
 * The wake fds go into the hidden set with the item as data; a listener's
 * kernel half (its TCP socket; shared, its rendezvous) with the item's
 * address plus one, to tell the halves apart (items are malloc'd: the low
 * bit is free).  The kernel half keeps the program's EPOLLEXCLUSIVE: of
 * the processes sleeping on a shared listener, one is woken per client,
 * as without the shim; its eventfd is this process's alone.
 */
static void fp_ep_watch(struct fp_ep *ep, struct fp_ep_item *it, bool on)
{
	struct epoll_event ev;
	int wfd[FP_WAKE_MAX], n, i;
	bool kernel_half;

	n = fp_ep_wake_fds(it, wfd);
	for (i = 0; i < n; i++) {
		kernel_half = it->e->kind == FP_LISTEN && wfd[i] != it->e->ready_efd;
		ev.events = EPOLLIN | (kernel_half ? it->events & EPOLLEXCLUSIVE : 0);
		ev.data.u64 = (uintptr_t)it + kernel_half;
		fp_real.epoll_ctl(ep->hidden, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, wfd[i], &ev);
	}
}

/* An item enabled again watches its wake fds again. */
static void fp_ep_rewatch(struct fp_ep *ep, struct fp_ep_item *it)
{
	if (it->unwatched) {
		fp_ep_watch(ep, it, true);
		it->unwatched = false;
	}
}

/* Let go of @it for good: out of the hidden set and the list (*pp). */
static void fp_ep_remove(struct fp_ep *ep, struct fp_ep_item *it, struct fp_ep_item **pp)
{
	fp_ep_watch(ep, it, false);
	*pp = it->next;
	if (!it->deleted)
		ep->nitems--;
	free(it);
}

static struct fp_ep_item *fp_ep_find(struct fp_ep *ep, int fd, struct fp_ep_item ***prev)
{
	struct fp_ep_item **pp, *it;

	for (pp = &ep->items; (it = *pp); pp = &it->next)
		if (it->fd == fd)
			break;
	if (prev)
		*prev = pp;
	return it;
}

FP_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct fp_ep_item *it, **pp;
	struct fp_fd *e;
	struct fp_ep *ep;
	int ret = 0;

	fp_real_init();
	e = fp_inside() ? NULL : fp_get(fd);
	if (!fp_is_managed(e)) {
		ret = fp_real.epoll_ctl(epfd, op, fd, ev);
		ep = ret == 0 && !fp_inside() ? fp_ep_get(epfd, false) : NULL;
		if (ep && (op == EPOLL_CTL_ADD || op == EPOLL_CTL_DEL))
			atomic_fetch_add((atomic_int *)&ep->nkernel, op == EPOLL_CTL_ADD ? 1 : -1);
		return ret;
	}
	if (op != EPOLL_CTL_DEL && !ev)
		return ERR(EFAULT);
	if (epfd == fd)
		return ERR(EINVAL);
	ep = fp_ep_get(epfd, false);
	if (!ep) {
		/* A set the shim has not seen made: is it one at all? */
		if (fp_real.fcntl(epfd, F_GETFD) < 0)
			return -1;
		ep = fp_ep_get(epfd, op == EPOLL_CTL_ADD);
		if (!ep)
			return ERR(op == EPOLL_CTL_ADD ? ENOMEM : ENOENT);
	}
	pthread_mutex_lock(&ep->lock);
	it = fp_ep_find(ep, fd, &pp);
	if (it && it->deleted && (op != EPOLL_CTL_ADD || it->e != e)) {
		/* A deleted item stands for nothing but a possible re-ADD of
		 * the same socket: not for MOD or DEL, nor for another socket
		 * that now has the number. */
		fp_ep_remove(ep, it, pp);
		it = NULL;
	}
	switch (op) {
	case EPOLL_CTL_ADD:
		if (it && it->deleted) {
			/* Programs that DEL and ADD per request (redis-benchmark)
			 * get back their item without system calls. */
			it->deleted = false;
			it->events = ev->events;
			it->data = ev->data;
			it->disabled = it->et_seen = it->ready = false;
			it->pending = it->kernel_hint = true;
			fp_ep_rewatch(ep, it);
			ep->nitems++;
			break;
		}
		if (it) {
			ret = ERR(EEXIST);
			break;
		}
		if (fp_ep_hidden(ep, epfd) < 0) {
			ret = -1;
			break;
		}
		it = calloc(1, sizeof(*it));
		if (!it) {
			ret = ERR(ENOMEM);
			break;
		}
		it->fd = fd;
		it->e = e;
		it->events = ev->events;
		it->data = ev->data;
		it->pending = it->kernel_hint = true;
		it->next = ep->items;
		ep->items = it;
		ep->nitems++;
		fp_ep_watch(ep, it, true);
		break;
	case EPOLL_CTL_MOD:
		if (!it) {
			ret = ERR(ENOENT);
			break;
		}
		if (ev->events & EPOLLEXCLUSIVE) {
			ret = ERR(EINVAL);
			break;
		}
		it->events = ev->events;
		it->data = ev->data;
		it->disabled = false;
		it->et_seen = false;
		it->pending = it->kernel_hint = true;
		fp_ep_rewatch(ep, it);
		break;
	case EPOLL_CTL_DEL:
		if (!it) {
			ret = ERR(ENOENT);
			break;
		}
		/* Kept, still watched, for a re-ADD; reported no more. */
		it->deleted = true;
		it->armed = false;
		ep->nitems--;
		break;
	default:
		ret = ERR(EINVAL);
	}
	pthread_mutex_unlock(&ep->lock);
	return ret;
}

/* Arm @it so that its next change raises its wake fd. */
static void fp_ep_arm(struct fp_ep_item *it)
{
	it->armed = true;
	if (it->e->kind != FP_FERRY)
		return;	/* a listener's fds are raised without arming */
	FP_ENTER();
	sock_shim_arm(it->e->sfd, &it->gen);
	FP_LEAVE();
}

/* Is @it still armed?  A thread of the program blocked in a call on the
 * same socket may have drained the event the arm was waiting for. */
static bool fp_ep_still_armed(struct fp_ep_item *it)
{
	bool armed = it->armed;

	if (armed && it->e->kind == FP_FERRY) {
		FP_ENTER();
		armed = sock_shim_armed_since(it->e->sfd, it->gen);
		FP_LEAVE();
	}
	return armed;
}

/*
 * Before sleeping: arm every item not armed since its last wake-up, and
 * mark it to be looked at again, since a change between the last look and
 * the arm raised nothing.  Returns how many were armed now.  Arming only
 * here, not at every look, keeps a busy connection off the system calls
 * a wake-up costs its peer.  ep->lock held.
 */
static int fp_ep_arm_all(struct fp_ep *ep)
{
	struct fp_ep_item *it;
	int n = 0;

	for (it = ep->items; it; it = it->next) {
		if (it->deleted || it->disabled || fp_ep_still_armed(it))
			continue;
		fp_ep_arm(it);
		it->pending = true;
		n++;
	}
	return n;
}

/*
 * Look at the items (every one if @all, else those that may have changed)
 * and fill @out with those to report; ep->lock held.
 */
static int fp_ep_collect(struct fp_ep *ep, struct epoll_event *out, int max, bool all,
			 bool kernel_too)
{
	struct fp_ep_item *it;
	short rev;
	int n = 0;

	for (it = ep->items; it && n < max; it = it->next) {
		bool et = it->events & EPOLLET;

		if (it->deleted || it->disabled || (!all && !it->pending && !it->ready))
			continue;
		if (it->e->kind == FP_LISTEN) {
			/* The kernel half costs a system call: only when its fd
			 * fired (or the item is new) since a look found nothing. */
			rev = fp_revents_ex(it->fd, it->e, (short)(it->events & 0xffff), false);
			if (kernel_too && it->kernel_hint) {
				short k = fp_listen_kernel_revents(it->fd, it->e,
								   (short)(it->events & 0xffff));

				it->kernel_hint = k != 0;
				rev |= k;
			}
		} else {
			rev = fp_revents_ex(it->fd, it->e, (short)(it->events & 0xffff), kernel_too);
		}
		rev &= (short)(it->events | EPOLLERR | EPOLLHUP);
		if (!rev) {
			/* A listener whose kernel half was not asked this time
			 * stays to be looked at. */
			it->pending = it->e->kind == FP_LISTEN && it->kernel_hint && !kernel_too;
			it->ready = it->et_seen = false;
			continue;
		}
		if (et && it->et_seen && !it->pending)
			continue;	/* no new edge */
		out[n].events = (uint32_t)(unsigned short)rev;
		out[n++].data = it->data;
		it->pending = false;
		it->ready = !et;
		it->et_seen = et;
		if (it->events & EPOLLONESHOT)
			it->disabled = true;
	}
	return n;
}

/*
 * Awake: take back the arms of the items that did not fire, so that their
 * peers stop paying a system call per notification while this process is
 * up and looking anyway (fp_ep_arm_all arms them again before a sleep).
 * ep->lock held.
 */
static void fp_ep_disarm_all(struct fp_ep *ep)
{
	struct fp_ep_item *it;

	FP_ENTER();
	for (it = ep->items; it; it = it->next) {
		if (!it->armed || it->deleted || it->e->kind != FP_FERRY)
			continue;
		it->armed = false;
		sock_shim_disarm(it->e->sfd);
	}
	FP_LEAVE();
}

/* The hidden set fired: drain the wake fds and mark their items. */
static void fp_ep_woken(struct fp_ep *ep, struct epoll_event *hev, int n)
{
	int i;

	pthread_mutex_lock(&ep->lock);
	for (i = 0; i < n; i++) {
		struct fp_ep_item *it = (void *)(uintptr_t)(hev[i].data.u64 & ~(uint64_t)1), *x;
		struct fp_ep_item **pp;

		if (!it)
			continue;
		for (pp = &ep->items; (x = *pp) && x != it; pp = &x->next)
			;
		if (!x)
			continue;	/* removed meanwhile */
		if (it->deleted) {
			/* Only a cache for a re-ADD: not worth a wake-up. */
			fp_ep_remove(ep, it, pp);
			continue;
		}
		if (it->disabled) {
			/* Nothing to report until EPOLL_CTL_MOD, which looks at
			 * it anyway: a socket whose peer hung up must not keep
			 * waking the set meanwhile. */
			fp_ep_watch(ep, it, false);
			it->unwatched = true;
			continue;
		}
		if (hev[i].data.u64 & 1) {
			it->kernel_hint = it->pending = true;
			continue;
		}
		it->pending = true;
		it->armed = false;
		if (it->e->kind != FP_FERRY)
			continue;
		FP_ENTER();
		sock_shim_drain(it->e->sfd);
		FP_LEAVE();
		/* Several items of one socket (dup'd fds): all of them. */
		for (x = ep->items; x; x = x->next)
			if (x != it && x->e == it->e) {
				x->pending = true;
				x->armed = false;
			}
	}
	fp_ep_disarm_all(ep);
	pthread_mutex_unlock(&ep->lock);
}

static int fp_epoll_wait(int epfd, struct epoll_event *events, int max, int64_t timeout_ns,
			 const sigset_t *mask)
{
	struct fp_ep *ep = fp_inside() ? NULL : fp_ep_get(epfd, false);
	uint64_t start, deadline, spin_end;
	struct epoll_event hev[64];
	unsigned int turn = 0;
	int n, k, ms;
	bool spinning, armed;

	if (!ep || !ep->nitems) {
		ms = timeout_ns < 0 ? -1 : (int)((timeout_ns + 999999) / 1000000);
		return fp_real.epoll_pwait(epfd, events, max, ms, mask);
	}
	if (max <= 0 || !events)
		return ERR(EINVAL);
	start = fp_now_ns();
	deadline = timeout_ns < 0 ? 0 : start + (uint64_t)timeout_ns;
	spin_end = start + (uint64_t)sock_poll_us() * 1000u;
	/* A program kept busy by ready items never sleeps, and only a sleep
	 * asks the hidden set: every so often it is asked without one, so
	 * that what it holds (a listener's kernel half, wake-ups) is not
	 * starved. */
	if (!(++ep->waits & 15)) {
		k = fp_real.epoll_wait(ep->hidden, hev, 64, 0);
		if (k > 0)
			fp_ep_woken(ep, hev, k);
	}
	for (;;) {
		spinning = ep->nitems <= FP_EP_SPIN_ITEMS && fp_now_ns() < spin_end;
		armed = false;
		pthread_mutex_lock(&ep->lock);
		n = fp_ep_collect(ep, events, max, spinning, !spinning || !(turn & 7));
		if (!n && !spinning && timeout_ns != 0 && fp_ep_arm_all(ep)) {
			n = fp_ep_collect(ep, events, max, false, true);
			armed = true;
		}
		pthread_mutex_unlock(&ep->lock);
		/* The kernel's fds: every turn unless known to be none, and
		 * while spinning only every eighth. */
		/* With ferry events in hand, the kernel's set is asked every
		 * fourth time only (one system call a look). */
		if (n < max && (!ep->kernel_known || atomic_load((atomic_int *)&ep->nkernel) > 0) &&
		    (!spinning || !(turn & 7)) && (!n || !(ep->calls++ & 3))) {
			k = fp_real.epoll_wait(epfd, events + n, max - n, 0);
			if (k < 0 && !n)
				return -1;
			n += k > 0 ? k : 0;
		}
		turn++;
		if (n || timeout_ns == 0)
			return n;
		if (armed)
			continue;
		if (spinning) {
			fp_spin_yield(turn);
			continue;
		}
		ms = -1;
		if (deadline) {
			uint64_t now = fp_now_ns();

			if (now >= deadline)
				return 0;
			ms = (int)((deadline - now + 999999) / 1000000);
		}
		k = fp_real.epoll_pwait(ep->hidden, hev, 64, ms, mask);
		if (k < 0)
			return -1;
		fp_ep_woken(ep, hev, k);
	}
}

FP_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int max, int timeout)
{
	fp_real_init();
	return fp_epoll_wait(epfd, events, max, timeout < 0 ? -1 : (int64_t)timeout * 1000000,
			     NULL);
}

FP_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int max, int timeout,
			  const sigset_t *mask)
{
	fp_real_init();
	return fp_epoll_wait(epfd, events, max, timeout < 0 ? -1 : (int64_t)timeout * 1000000,
			     mask);
}

FP_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int max,
			   const struct timespec *tmo, const sigset_t *mask)
{
	fp_real_init();
	if (!fp_real.epoll_pwait2)
		return ERR(ENOSYS);
	if (fp_inside() || !fp_ep_get(epfd, false))
		return fp_real.epoll_pwait2(epfd, events, max, tmo, mask);
	return fp_epoll_wait(epfd, events, max,
			     tmo ? tmo->tv_sec * 1000000000ll + tmo->tv_nsec : -1, mask);
}

/* @e's last name is closing: no set reports it any more. */
void fp_epoll_forget(struct fp_fd *e)
{
	struct fp_ep_item *it, **pp;
	struct fp_ep *ep;

	pthread_mutex_lock(&fp_eps_lock);
	for (ep = fp_eps; ep; ep = ep->next) {
		pthread_mutex_lock(&ep->lock);
		for (pp = &ep->items; (it = *pp);) {
			if (it->e != e) {
				pp = &it->next;
				continue;
			}
			fp_ep_remove(ep, it, pp);
		}
		pthread_mutex_unlock(&ep->lock);
	}
	pthread_mutex_unlock(&fp_eps_lock);
}

/* The application closed epoll set @ep (its last name). */
void fp_epoll_free(struct fp_ep *ep)
{
	struct fp_ep **pp, *it;
	struct fp_ep_item *item;

	pthread_mutex_lock(&fp_eps_lock);
	for (pp = &fp_eps; (it = *pp); pp = &it->next) {
		if (it == ep) {
			*pp = ep->next;
			break;
		}
	}
	pthread_mutex_unlock(&fp_eps_lock);
	while ((item = ep->items)) {
		ep->items = item->next;
		free(item);
	}
	if (ep->hidden >= 0)
		fp_real.close(ep->hidden);
	pthread_mutex_destroy(&ep->lock);
	free(ep);
}
