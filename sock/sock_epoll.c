/*
 * sock_epoll.c - epoll(7) sets over any mix of ferry sockets and kernel
 * file descriptors: rsocket's repoll_create, repoll_ctl and repoll_wait.
 *
 * A set is a kernel epoll set, whose number the program holds, plus the
 * ferry sockets put in it, kept beside it here: a socket's readiness is
 * its own state (sock_revents), never its fd's.  Kernel fds go into the
 * kernel set itself, so their ET, ONESHOT, EXCLUSIVE and errors are the
 * kernel's.  The sockets get epoll's semantics here:
 *   - level-triggered: reported at every wait while ready;
 *   - EPOLLET: reported when ready and something happened since the last
 *     report -- bytes or credits arrived, the connection changed state or
 *     ended, a listener queued a connection -- or it was found not ready
 *     in between;
 *   - EPOLLONESHOT: disabled after one report until EPOLL_CTL_MOD.
 *
 * A wait looks at every socket and asks the kernel set without sleeping;
 * then spins for FERRY_POLL_US, looking again; then leads and arms every
 * socket (as ferry_sock_poll does), looks once more, and sleeps in poll(2)
 * on the sockets' fds, the kernel set and the set's wake eventfd, which
 * epoll_ctl raises so that a socket added meanwhile is seen.
 *
 * A socket closed while a thread sleeps on a set holding it is taken out,
 * and its close waits until the sleepers that may use it have woken
 * (sock_epoll_forget): closing an fd in an epoll set from another thread
 * is legal with the kernel's epoll, and is here.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "sock-internal.h"

/* Epoll's flags that are not events. */
#define SOCK_EP_FLAGS	(EPOLLET | EPOLLONESHOT | EPOLLWAKEUP | EPOLLEXCLUSIVE)
#define SOCK_EP_STACK	32	/* sockets a sleep tracks without malloc */

/* A socket as an edge-triggered item last reported it. */
struct sock_ep_mark {
	uint64_t rx;		/* r_received */
	uint32_t closed;
	uint32_t arrivals;
	uint16_t credits;	/* sseq_comp */
	int state;
	short rev;
};

struct sock_ep_item {
	int fd;
	struct ferry_sock *s;
	uint32_t events;
	epoll_data_t data;
	bool disabled;		/* ONESHOT, reported: nothing until MOD */
	bool seen;		/* ET: reported, mark holds what it saw */
	bool fd_hup;		/* its fd hung up: a sleep on it would not sleep */
	struct sock_ep_mark mark;
	struct sock_ep_item *next;
};

struct sock_ep {
	int fd;			/* the kernel set: its number names the whole set */
	int wake;		/* eventfd: epoll_ctl raises it for sleepers */
	pthread_mutex_t lock;
	pthread_cond_t slept;	/* a sleep of the old epoch ended */
	struct sock_ep_item *items;
	int nkernel;		/* kernel fds added: 0, none to ask about */
	int sleepers;		/* in poll(2) now: epoll_ctl raises wake */
	unsigned int epoch;	/* sock_epoll_forget: sleeps before it ... */
	int in_epoch[2];	/* ... and after it, still under way */
	struct sock_ep *next;
};

static struct sock_ep *sock_eps;
static pthread_mutex_t sock_eps_lock = PTHREAD_MUTEX_INITIALIZER;
FERRY_FORK_SAFE(sock_eps, sock_eps_lock)

static struct sock_ep *sock_ep_find(int epfd)
{
	struct sock_ep *ep;

	pthread_mutex_lock(&sock_eps_lock);
	for (ep = sock_eps; ep && ep->fd != epfd; ep = ep->next)
		;
	pthread_mutex_unlock(&sock_eps_lock);
	return ep;
}

int ferry_sock_epoll_create1(int flags)
{
	struct sock_ep *ep;

	/* rsocket's repoll_create takes O_NONBLOCK too (its set is a pipe). */
	if (flags & ~(EPOLL_CLOEXEC | O_NONBLOCK))
		return ERR(EINVAL);
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return ERR(ENOMEM);
	ep->fd = epoll_create1(flags & EPOLL_CLOEXEC);
	if (ep->fd < 0)
		goto err_free;
	ep->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ep->wake < 0)
		goto err_close_fd;
	ep->wake = ferry_fd_park(ep->wake);
	if ((flags & O_NONBLOCK) && fcntl(ep->fd, F_SETFL, O_NONBLOCK) < 0)
		goto err_close_wake;
	pthread_mutex_init(&ep->lock, NULL);
	pthread_cond_init(&ep->slept, NULL);
	pthread_mutex_lock(&sock_eps_lock);
	ep->next = sock_eps;
	sock_eps = ep;
	pthread_mutex_unlock(&sock_eps_lock);
	return ep->fd;

err_close_wake:
	close(ep->wake);
err_close_fd:
	close(ep->fd);
err_free:
	free(ep);
	return -1;
}

/* Is @fd a set of ours?  Then it goes, as ferry_sock_close's. */
int sock_epoll_close(int epfd)
{
	struct sock_ep **pp, *ep;
	struct sock_ep_item *it;

	pthread_mutex_lock(&sock_eps_lock);
	for (pp = &sock_eps; (ep = *pp) && ep->fd != epfd; pp = &ep->next)
		;
	if (ep)
		*pp = ep->next;
	pthread_mutex_unlock(&sock_eps_lock);
	if (!ep)
		return ERR(EBADF);
	while ((it = ep->items)) {
		ep->items = it->next;
		free(it);
	}
	close(ep->wake);
	close(ep->fd);
	pthread_cond_destroy(&ep->slept);
	pthread_mutex_destroy(&ep->lock);
	free(ep);
	return 0;
}

/* A sleeper may have to see what changed (ep->lock held). */
static void sock_ep_raise(struct sock_ep *ep)
{
	uint64_t one = 1;

	if (ep->sleepers && write(ep->wake, &one, sizeof(one)) < 0 && errno != EAGAIN)
		ferry_debug("sock epoll %d: raising its wake fd: %m", ep->fd);
}

static struct sock_ep_item *sock_ep_item_find(struct sock_ep *ep, int fd,
					      struct sock_ep_item ***pp_p)
{
	struct sock_ep_item **pp, *it;

	for (pp = &ep->items; (it = *pp) && it->fd != fd; pp = &it->next)
		;
	if (pp_p)
		*pp_p = pp;
	return it;
}

static void sock_ep_item_set(struct sock_ep_item *it, const struct epoll_event *ev)
{
	it->events = ev->events;
	it->data = ev->data;
	it->disabled = false;
	it->seen = false;
	it->fd_hup = false;
}

/* EPOLL_CTL_* on ferry socket @s, number @fd (ep->lock held). */
static int sock_ep_ctl_sock(struct sock_ep *ep, int op, int fd, struct ferry_sock *s,
			    const struct epoll_event *ev)
{
	struct sock_ep_item *it, **pp;

	it = sock_ep_item_find(ep, fd, &pp);
	switch (op) {
	case EPOLL_CTL_ADD:
		if (it)
			return ERR(EEXIST);
		it = calloc(1, sizeof(*it));
		if (!it)
			return ERR(ENOMEM);
		it->fd = fd;
		it->s = s;
		sock_ep_item_set(it, ev);
		it->next = ep->items;
		ep->items = it;
		break;
	case EPOLL_CTL_MOD:
		if (!it)
			return ERR(ENOENT);
		if (ev->events & EPOLLEXCLUSIVE)
			return ERR(EINVAL);	/* as epoll: ADD only */
		sock_ep_item_set(it, ev);
		break;
	case EPOLL_CTL_DEL:
		if (!it)
			return ERR(ENOENT);
		*pp = it->next;
		free(it);
		return 0;
	default:
		return ERR(EINVAL);
	}
	sock_ep_raise(ep);
	return 0;
}

/* A kernel fd: the kernel's set takes it, and says what epoll says. */
static int sock_ep_ctl_kernel(struct sock_ep *ep, int op, int fd, struct epoll_event *ev)
{
	if (epoll_ctl(ep->fd, op, fd, ev) < 0)
		return -1;
	pthread_mutex_lock(&ep->lock);
	if (op == EPOLL_CTL_ADD)
		ep->nkernel++;
	else if (op == EPOLL_CTL_DEL && ep->nkernel > 0)
		ep->nkernel--;
	pthread_mutex_unlock(&ep->lock);
	return 0;
}

int ferry_sock_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	struct sock_ep *ep = sock_ep_find(epfd);
	struct ferry_sock *s;
	int e = errno, ret;

	s = sock_get(fd);
	errno = e;
	if (!ep) {
		/* The kernel's own set (or none): it takes kernel fds only.  A
		 * socket's number is its private epoll set: never the program's. */
		if (s || ferry_sock_is_ferry(epfd))
			return ERR(EINVAL);
		return epoll_ctl(epfd, op, fd, event);
	}
	if (!s)
		return sock_ep_ctl_kernel(ep, op, fd, event);
	if (fd == epfd)
		return ERR(EINVAL);
	if (op != EPOLL_CTL_DEL && !event)
		return ERR(EFAULT);
	pthread_mutex_lock(&ep->lock);
	ret = sock_ep_ctl_sock(ep, op, fd, s, event);
	pthread_mutex_unlock(&ep->lock);
	return ret;
}

static void sock_ep_mark_take(struct ferry_sock *s, short rev, struct sock_ep_mark *m)
{
	memset(m, 0, sizeof(*m));
	m->rx = atomic_load(&s->r_received);
	m->closed = atomic_load(&s->closed);
	m->arrivals = __atomic_load_n(&s->arrivals, __ATOMIC_RELAXED);
	m->credits = atomic_load(&s->sseq_comp);
	m->state = (int)__atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
	m->rev = rev;
}

/* Is @it to be reported with @rev now?  Updates its ET and ONESHOT state. */
static bool sock_ep_item_report(struct sock_ep_item *it, short rev)
{
	struct sock_ep_mark now;

	if (!rev) {
		it->seen = false;	/* not ready: the next readiness is an edge */
		return false;
	}
	if (it->events & EPOLLET) {
		sock_ep_mark_take(it->s, rev, &now);
		if (it->seen && memcmp(&now, &it->mark, sizeof(now)) == 0)
			return false;
		it->mark = now;
		it->seen = true;
	}
	if (it->events & EPOLLONESHOT)
		it->disabled = true;
	return true;
}

/*
 * Fill @out with the sockets to report (ep->lock held).  A full @out
 * leaves the list to start after the last one reported, so that a small
 * maxevents does not starve the sockets behind.
 */
static int sock_ep_collect(struct sock_ep *ep, struct epoll_event *out, int max)
{
	struct sock_ep_item *it, *last = NULL, *tail;
	short rev;
	int n = 0;

	for (it = ep->items; it && n < max; it = it->next) {
		if (it->disabled)
			continue;
		rev = sock_revents(it->s, (short)(it->events & ~SOCK_EP_FLAGS));
		rev &= (short)((it->events & ~SOCK_EP_FLAGS) | EPOLLERR | EPOLLHUP);
		if (!sock_ep_item_report(it, rev))
			continue;
		out[n].events = (uint32_t)(unsigned short)rev;
		out[n++].data = it->data;
		last = it;
	}
	if (n == max && last && last->next) {
		for (tail = last->next; tail->next; tail = tail->next)
			;
		tail->next = ep->items;
		ep->items = last->next;
		last->next = NULL;
	}
	return n;
}

/* One look at everything, sleeping nowhere: the sockets, then the kernel. */
static int sock_ep_look(struct sock_ep *ep, struct epoll_event *out, int max)
{
	int n, k = 0;
	bool kernel;

	pthread_mutex_lock(&ep->lock);
	n = sock_ep_collect(ep, out, max);
	kernel = ep->nkernel > 0;
	pthread_mutex_unlock(&ep->lock);
	if (n < max && kernel)
		k = epoll_wait(ep->fd, out + n, max - n, 0);
	if (k < 0)
		return n ? n : -1;
	return n + k;
}

/* What a sleep watches: the sockets it leads, and where it sleeps. */
struct sock_ep_sleep {
	struct ferry_sock **socks, *stack_socks[SOCK_EP_STACK];
	struct pollfd *pfds, stack_pfds[SOCK_EP_STACK + 2];
	bool *led, stack_led[SOCK_EP_STACK];
	int nsocks;
	unsigned int epoch;
};

/*
 * Does a sleep watch @it's fd?  Not when nothing is to come of it: a
 * disabled item, or a reported edge-triggered one whose fd hung up (it
 * would wake every sleep at once, for nothing new).
 */
static bool sock_ep_item_sleeps(const struct sock_ep_item *it)
{
	return !it->disabled && !(it->seen && it->fd_hup);
}

/* Sockets whose fd @z's poll found hung up (ep->lock held). */
static void sock_ep_note_hup(struct sock_ep *ep, const struct sock_ep_sleep *z)
{
	struct sock_ep_item *it;
	int i;

	for (i = 0; i < z->nsocks; i++) {
		if (!(z->pfds[i].revents & (POLLHUP | POLLERR | POLLNVAL)))
			continue;
		for (it = ep->items; it; it = it->next)
			if (it->s == z->socks[i])
				it->fd_hup = true;
	}
}

/* Take the sockets to sleep on and join the sleepers (ep->lock held). */
static int sock_ep_sleep_begin(struct sock_ep *ep, struct sock_ep_sleep *z)
{
	struct sock_ep_item *it;
	int n = 0, i = 0;
	uint64_t v;

	for (it = ep->items; it; it = it->next)
		n += sock_ep_item_sleeps(it);
	z->socks = z->stack_socks;
	z->pfds = z->stack_pfds;
	z->led = z->stack_led;
	if (n > SOCK_EP_STACK) {
		z->socks = malloc((size_t)n * sizeof(*z->socks));
		z->pfds = malloc((size_t)(n + 2) * sizeof(*z->pfds));
		z->led = malloc((size_t)n * sizeof(*z->led));
		if (!z->socks || !z->pfds || !z->led) {
			free(z->socks);
			free(z->pfds);
			free(z->led);
			return ERR(ENOMEM);
		}
	}
	for (it = ep->items; it; it = it->next)
		if (sock_ep_item_sleeps(it))
			z->socks[i++] = it->s;
	z->nsocks = i;
	/* The last sleeper to come takes back what woke the earlier ones:
	 * with others asleep it would take their wake-up (they recheck). */
	if (ep->sleepers++ == 0 && read(ep->wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
		ferry_debug("sock epoll %d: draining its wake fd: %m", ep->fd);
	z->epoch = ep->epoch;
	ep->in_epoch[z->epoch & 1]++;
	return 0;
}

static void sock_ep_sleep_end(struct sock_ep *ep, struct sock_ep_sleep *z)
{
	pthread_mutex_lock(&ep->lock);
	sock_ep_note_hup(ep, z);	/* revents 0 where poll did not run */
	ep->sleepers--;
	if (--ep->in_epoch[z->epoch & 1] == 0)
		pthread_cond_broadcast(&ep->slept);
	pthread_mutex_unlock(&ep->lock);
	if (z->socks != z->stack_socks) {
		free(z->socks);
		free(z->pfds);
		free(z->led);
	}
}

/*
 * Arm every socket, look once more (what came before the arm), and sleep
 * until one of them, the kernel set or an epoll_ctl raises its fd.
 */
static int sock_ep_sleep(struct sock_ep *ep, struct epoll_event *out, int max, int ms)
{
	struct sock_ep_sleep z;
	int i, n, ret;

	pthread_mutex_lock(&ep->lock);
	ret = sock_ep_sleep_begin(ep, &z);
	pthread_mutex_unlock(&ep->lock);
	if (ret < 0)
		return -1;
	for (i = 0; i < z.nsocks; i++) {
		z.led[i] = sock_wait_lead(z.socks[i]);
		if (z.led[i])
			sock_wait_arm(z.socks[i]);
		z.pfds[i] = (struct pollfd){ .fd = z.socks[i]->fd, .events = POLLIN };
	}

	z.pfds[i++] = (struct pollfd){ .fd = ep->wake, .events = POLLIN };
	z.pfds[i++] = (struct pollfd){ .fd = ep->fd, .events = POLLIN };
	n = sock_ep_look(ep, out, max);
	if (n == 0 && poll(z.pfds, (nfds_t)i, ms) < 0)
		n = -1;
	for (i = 0; i < z.nsocks; i++) {
		if (!z.led[i])
			continue;
		sock_wait_drain(z.socks[i]);
		sock_wait_release(z.socks[i]);
	}
	sock_ep_sleep_end(ep, &z);
	return n;
}

int ferry_sock_epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	struct sock_ep *ep = sock_ep_find(epfd);
	uint64_t start = monotime_ns(), spin_end, deadline = 0;
	unsigned int turn = 0;
	int n, ms;

	if (!ep)
		return ferry_sock_is_ferry(epfd) ? ERR(EINVAL) :
		       epoll_wait(epfd, events, maxevents, timeout);
	if (maxevents <= 0)
		return ERR(EINVAL);
	if (!events)
		return ERR(EFAULT);
	if (timeout > 0)
		deadline = start + (uint64_t)timeout * 1000000u;
	spin_end = start + (uint64_t)sock_poll_us() * 1000u;
	for (;;) {
		n = sock_ep_look(ep, events, maxevents);
		if (n != 0 || timeout == 0)
			return n;
		if (monotime_ns() < spin_end) {
			if (!(++turn & 63))
				sched_yield();	/* a peer on this CPU is what we wait for */
			continue;
		}
		ms = -1;
		if (deadline) {
			uint64_t now = monotime_ns();

			if (now >= deadline)
				return 0;
			ms = (int)((deadline - now + 999999) / 1000000);
		}
		n = sock_ep_sleep(ep, events, maxevents, ms);
		if (n != 0)
			return n;
	}
}

/*
 * Socket @s is closing: out of every set, and once this returns no sleep
 * uses it.  The sleeps that took it before are woken and waited for (a
 * sleep's epoch is the one it began in; later ones cannot have it).
 */
void sock_epoll_forget(struct ferry_sock *s)
{
	struct sock_ep_item **pp, *it;
	struct sock_ep *ep;
	unsigned int old;
	bool had;

	pthread_mutex_lock(&sock_eps_lock);
	for (ep = sock_eps; ep; ep = ep->next) {
		pthread_mutex_lock(&ep->lock);
		had = false;
		for (pp = &ep->items; (it = *pp);) {
			if (it->s != s) {
				pp = &it->next;
				continue;
			}
			*pp = it->next;
			free(it);
			had = true;
		}
		if (had && ep->sleepers) {
			old = ep->epoch++;
			sock_ep_raise(ep);
			while (ep->in_epoch[old & 1] > 0)
				pthread_cond_wait(&ep->slept, &ep->lock);
		}
		pthread_mutex_unlock(&ep->lock);
	}
	pthread_mutex_unlock(&sock_eps_lock);
}
