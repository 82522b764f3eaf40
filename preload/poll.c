/*
 * poll.c - readiness of the shim's fds, and poll, ppoll, select, pselect
 * over any mix of them and kernel fds.
 *
 * A ferry socket's readiness comes from its ring state (sock/'s
 * sock_revents, after taking its completions), never from its fd: the fd
 * only wakes a sleeper.  A listener's is the union of its kernel queue and
 * its ferry listener.  To sleep, fp_poll arms every ferry socket (its next
 * completion raises its fd), checks again, and hands the kernel fds and
 * the wake fds to one ppoll(2): no spinning beyond FERRY_POLL_US, no
 * periodic timer.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "preload.h"

#define FP_POLL_STACK 32

/*
 * While spinning, let another task of this CPU run now and then: when the
 * peer shares the CPU, a spin that never yields only delays the very
 * answer it waits for (and ferry's rates fall to a fraction).  With the
 * CPU to itself, sched_yield returns at once.
 */
void fp_spin_yield(unsigned int turn)
{
	if (!(turn & 15))
		sched_yield();
}

short fp_kernel_revents(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };

	return fp_real.poll(&p, 1, 0) > 0 ? p.revents : 0;
}

/* One system call for both: a shared listener's clients wait in either. */
short fp_listen_kernel_revents(int fd, struct fp_fd *e, short events)
{
	struct pollfd p[2] = {
		{ .fd = fd, .events = events },
		{ .fd = e->rdv_fd, .events = POLLIN },
	};

	if (e->rdv_fd < 0)
		return fp_kernel_revents(fd, events);
	if (fp_real.poll(p, 2, 0) <= 0)
		return 0;
	return p[0].revents | (p[1].revents & POLLIN & events);
}

short fp_revents(int fd, struct fp_fd *e, short events)
{
	return fp_revents_ex(fd, e, events, true);
}

short fp_revents_ex(int fd, struct fp_fd *e, short events, bool kernel_too)
{
	short rev = 0;

	FP_ENTER();
	switch (e->kind) {
	case FP_FERRY:
		rev = sock_revents_fd(e->sfd, events);
		break;
	case FP_LISTEN:
		rev = kernel_too ? fp_listen_kernel_revents(fd, e, events) : 0;
		if ((events & POLLIN) && fp_acceptor_ready(e))
			rev |= POLLIN;
		break;
	default:
		rev = fp_kernel_revents(fd, events);
		break;
	}
	FP_LEAVE();
	return rev;
}

int fp_sleep_prepare(int fd, struct fp_fd *e, int wfd[FP_WAKE_MAX], bool *led)
{
	int n = 0, sfd;

	*led = false;
	FP_ENTER();
	switch (e->kind) {
	case FP_FERRY:
		sfd = sock_shim_sleep_prepare(e->sfd, led);
		if (sfd >= 0)
			wfd[n++] = sfd;
		break;
	case FP_LISTEN:
		wfd[n++] = fd;
		wfd[n++] = e->ready_efd;
		if (e->rdv_fd >= 0)
			wfd[n++] = e->rdv_fd;
		break;
	default:
		wfd[n++] = fd;
		break;
	}
	FP_LEAVE();
	return n;
}

void fp_sleep_done(int fd, struct fp_fd *e, bool led)
{
	(void)fd;
	if (!led || e->kind != FP_FERRY)
		return;
	FP_ENTER();
	sock_shim_sleep_done(e->sfd);
	FP_LEAVE();
}

struct fp_pollset {
	struct pollfd *fds;
	nfds_t nfds;
	struct fp_fd **ent;		/* per fds[i]: managed entry or NULL */
	struct pollfd *k;		/* kernel fds, for a look without sleeping */
	struct pollfd *w;		/* kernel fds and wake fds, to sleep on */
	bool *led;			/* per fds[i]: leads its socket's sleep */
};

/*
 * One look; returns how many entries have events.  The kernel's side (its
 * fds, and the kernel half of listeners) costs a system call: with
 * @kernel_too false, only ferry's side is looked at (spinning).
 */
static int fp_poll_scan(struct fp_pollset *ps, bool kernel_too)
{
	int ready = 0, n = 0, j = 0;
	nfds_t i;

	for (i = 0; i < ps->nfds; i++) {
		struct pollfd *p = &ps->fds[i];
		struct fp_fd *e = ps->ent[i];

		p->revents = 0;
		if (e && e->kind == FP_FERRY) {
			p->revents = fp_revents(p->fd, e, p->events) &
				     (p->events | POLLERR | POLLHUP | POLLNVAL);
		} else if (e && e->kind == FP_LISTEN && (p->events & POLLIN)) {
			FP_ENTER();
			if (fp_acceptor_ready(e) ||
			    (kernel_too && e->rdv_fd >= 0 && fp_kernel_revents(e->rdv_fd, POLLIN)))
				p->revents = POLLIN;
			FP_LEAVE();
		}
		if (!(e && e->kind == FP_FERRY) && p->fd >= 0 && kernel_too) {
			ps->k[n].fd = p->fd;
			ps->k[n].events = p->events;
			ps->k[n++].revents = 0;
		}
	}
	if (n && fp_real.poll(ps->k, (nfds_t)n, 0) > 0) {
		for (i = 0; i < ps->nfds; i++) {
			struct fp_fd *e = ps->ent[i];

			if ((e && e->kind == FP_FERRY) || ps->fds[i].fd < 0)
				continue;
			ps->fds[i].revents |= ps->k[j++].revents;
		}
	}
	for (i = 0; i < ps->nfds; i++)
		ready += ps->fds[i].revents != 0;
	return ready;
}

/* Sleep until something may have changed, or the deadline (0: none). */
static int fp_poll_sleep(struct fp_pollset *ps, uint64_t deadline, const sigset_t *mask)
{
	struct timespec ts, *tsp = NULL;
	int n = 0, ret = 0, w, nw, wfd[FP_WAKE_MAX];
	nfds_t i;

	for (i = 0; i < ps->nfds; i++) {
		struct pollfd *p = &ps->fds[i];

		ps->led[i] = false;
		if (ps->ent[i]) {
			nw = fp_sleep_prepare(p->fd, ps->ent[i], wfd, &ps->led[i]);
			for (w = 0; w < nw; w++) {
				ps->w[n].fd = wfd[w];
				ps->w[n].events = POLLIN;
				ps->w[n++].revents = 0;
			}
		} else if (p->fd >= 0) {
			ps->w[n].fd = p->fd;
			ps->w[n].events = p->events;
			ps->w[n++].revents = 0;
		}
	}
	/* Armed: a change from now on raises a wake fd; one before shows here. */
	if (!fp_poll_scan(ps, true)) {
		if (deadline) {
			uint64_t now = fp_now_ns(), left = deadline > now ? deadline - now : 0;

			ts.tv_sec = (time_t)(left / 1000000000u);
			ts.tv_nsec = (long)(left % 1000000000u);
			tsp = &ts;
		}
		ret = fp_real.ppoll(ps->w, (nfds_t)n, tsp, mask) < 0 ? -1 : 0;
	}
	for (i = 0; i < ps->nfds; i++)
		if (ps->ent[i])
			fp_sleep_done(ps->fds[i].fd, ps->ent[i], ps->led[i]);
	return ret;
}

int fp_poll(struct pollfd *fds, nfds_t nfds, int64_t timeout_ns, const sigset_t *mask)
{
	struct fp_fd *s_ent[FP_POLL_STACK];
	struct pollfd s_k[FP_POLL_STACK], s_w[FP_WAKE_MAX * FP_POLL_STACK];
	bool s_led[FP_POLL_STACK];
	struct fp_pollset ps = { fds, nfds, s_ent, s_k, s_w, s_led };
	uint64_t start = fp_now_ns(), deadline, spin_end;
	unsigned int turn;
	int ready = -1, err;
	nfds_t i;

	if (nfds > FP_POLL_STACK) {
		ps.ent = calloc(nfds, sizeof(*ps.ent));
		ps.k = calloc(nfds, sizeof(*ps.k));
		ps.w = calloc(FP_WAKE_MAX * nfds, sizeof(*ps.w));
		ps.led = calloc(nfds, sizeof(*ps.led));
		if (!ps.ent || !ps.k || !ps.w || !ps.led) {
			errno = ENOMEM;
			goto out;
		}
	}
	for (i = 0; i < nfds; i++) {
		struct fp_fd *e = fds[i].fd >= 0 ? fp_get(fds[i].fd) : NULL;

		ps.ent[i] = fp_is_managed(e) ? e : NULL;
	}
	deadline = timeout_ns < 0 ? 0 : start + (uint64_t)timeout_ns;
	spin_end = start + (uint64_t)sock_poll_us() * 1000u;
	for (turn = 0;; turn++) {
		/* Spinning, the kernel's fds are asked every 16th turn only. */
		ready = fp_poll_scan(&ps, !(turn & 15));
		if (ready || timeout_ns == 0)
			break;
		if (fp_now_ns() < spin_end && (!deadline || fp_now_ns() < deadline)) {
			fp_spin_yield(turn);
			continue;
		}
		if (deadline && fp_now_ns() >= deadline)
			break;
		if (fp_poll_sleep(&ps, deadline, mask) < 0) {
			ready = -1;
			break;
		}
	}
out:
	err = errno;
	if (ps.ent != s_ent) {
		free(ps.ent);
		free(ps.k);
		free(ps.w);
		free(ps.led);
	}
	errno = err;
	return ready;
}

/* Does @fds hold an fd the shim must answer for? */
static bool fp_poll_managed(const struct pollfd *fds, nfds_t nfds)
{
	nfds_t i;

	if (fp_inside())
		return false;
	for (i = 0; i < nfds; i++) {
		struct fp_fd *e = fds[i].fd >= 0 ? fp_get(fds[i].fd) : NULL;

		if (fp_is_managed(e))
			return true;
	}
	return false;
}

FP_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	fp_real_init();
	if (!fp_poll_managed(fds, nfds))
		return fp_real.poll(fds, nfds, timeout);
	return fp_poll(fds, nfds, timeout < 0 ? -1 : (int64_t)timeout * 1000000, NULL);
}

FP_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *tmo,
		    const sigset_t *mask)
{
	fp_real_init();
	if (!fp_poll_managed(fds, nfds))
		return fp_real.ppoll(fds, nfds, tmo, mask);
	if (tmo && (tmo->tv_sec < 0 || tmo->tv_nsec < 0 || tmo->tv_nsec >= 1000000000))
		return ERR(EINVAL);
	return fp_poll(fds, nfds, tmo ? tmo->tv_sec * 1000000000ll + tmo->tv_nsec : -1, mask);
}

/*
 * select and pselect: the sets become a pollfd array when a managed fd is
 * in them; the kernel's mapping back (readable: POLLIN, POLLHUP or
 * POLLERR; writable: POLLOUT or POLLERR; exceptional: POLLPRI).
 */
static int fp_select(int nfds, fd_set *r, fd_set *w, fd_set *x, int64_t timeout_ns,
		     const sigset_t *mask, bool *handled)
{
	struct pollfd stack[64], *pfds = stack;
	int i, n = 0, ready, count = 0;
	bool managed = false;

	*handled = false;
	if (fp_inside() || nfds <= 0)
		return 0;
	if (nfds > FD_SETSIZE)
		nfds = FD_SETSIZE;
	for (i = 0; i < nfds && !managed; i++) {
		struct fp_fd *e;

		if (!((r && FD_ISSET(i, r)) || (w && FD_ISSET(i, w)) || (x && FD_ISSET(i, x))))
			continue;
		e = fp_get(i);
		managed = fp_is_managed(e);
	}
	if (!managed)
		return 0;
	*handled = true;
	if (nfds > (int)(sizeof(stack) / sizeof(stack[0]))) {
		pfds = calloc((size_t)nfds, sizeof(*pfds));
		if (!pfds)
			return ERR(ENOMEM);
	}
	for (i = 0; i < nfds; i++) {
		short ev = 0;

		if (r && FD_ISSET(i, r))
			ev |= POLLIN;
		if (w && FD_ISSET(i, w))
			ev |= POLLOUT;
		if (x && FD_ISSET(i, x))
			ev |= POLLPRI;
		if (ev) {
			pfds[n].fd = i;
			pfds[n++].events = ev;
		}
	}
	ready = fp_poll(pfds, (nfds_t)n, timeout_ns, mask);
	if (ready >= 0) {
		for (i = 0; i < n; i++) {
			if (pfds[i].revents & POLLNVAL) {
				ready = ERR(EBADF);
				break;
			}
		}
	}
	if (ready >= 0) {
		if (r)
			FD_ZERO(r);
		if (w)
			FD_ZERO(w);
		if (x)
			FD_ZERO(x);
		for (i = 0; i < n; i++) {
			short ev = pfds[i].events, rev = pfds[i].revents;

			if ((ev & POLLIN) && (rev & (POLLIN | POLLHUP | POLLERR))) {
				FD_SET(pfds[i].fd, r);
				count++;
			}
			if ((ev & POLLOUT) && (rev & (POLLOUT | POLLERR))) {
				FD_SET(pfds[i].fd, w);
				count++;
			}
			if ((ev & POLLPRI) && (rev & POLLPRI)) {
				FD_SET(pfds[i].fd, x);
				count++;
			}
		}
		ready = count;
	}
	if (pfds != stack) {
		int err = errno;

		free(pfds);
		errno = err;
	}
	return ready;
}

FP_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *x, struct timeval *tv)
{
	uint64_t start = fp_now_ns();
	int64_t tmo;
	bool handled;
	int ret;

	fp_real_init();
	if (tv && (tv->tv_sec < 0 || tv->tv_usec < 0))
		return fp_real.select(nfds, r, w, x, tv);
	tmo = tv ? tv->tv_sec * 1000000000ll + tv->tv_usec * 1000ll : -1;
	ret = fp_select(nfds, r, w, x, tmo, NULL, &handled);
	if (!handled)
		return fp_real.select(nfds, r, w, x, tv);
	if (tv) {
		/* Linux's select leaves the time not slept in *tv. */
		uint64_t spent = fp_now_ns() - start;
		int64_t left = tmo > (int64_t)spent ? tmo - (int64_t)spent : 0;

		tv->tv_sec = (time_t)(left / 1000000000);
		tv->tv_usec = (suseconds_t)(left % 1000000000 / 1000);
	}
	return ret;
}

FP_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *x, const struct timespec *ts,
		      const sigset_t *mask)
{
	bool handled;
	int ret;

	fp_real_init();
	if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000))
		return fp_real.pselect(nfds, r, w, x, ts, mask);
	ret = fp_select(nfds, r, w, x, ts ? ts->tv_sec * 1000000000ll + ts->tv_nsec : -1, mask,
			&handled);
	if (!handled)
		return fp_real.pselect(nfds, r, w, x, ts, mask);
	return ret;
}

/* accept() on a blocking listener: sleep until either queue has one. */
int fp_accept_wait(int fd, struct fp_fd *e)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	(void)e;
	return fp_poll(&p, 1, -1, NULL) < 0 ? -1 : 0;
}
