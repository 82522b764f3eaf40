/*
 * sock_poll.c - poll(2) and select(2) over any mix of ferry sockets and
 * kernel file descriptors.
 *
 * Readiness of a ferry socket comes from its own state (after taking its
 * completions), never from its fd alone.  To sleep, the caller leads every
 * ferry socket it can (see sock_wait.c), arms their CQs, rechecks, and
 * hands their fds with the kernel ones to one poll(2).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "sock-internal.h"

#define SOCK_POLL_STACK 64

/*
 * The look at one socket, inlined into both of its callers: sock_revents
 * (sock/'s own poll and epoll) and sock_revents_fd (the shim's, one call
 * on a number where it used to make two).
 */
static inline short sock_revents_now(struct ferry_sock *s, short events)
{
	short rev = 0;
	unsigned int closed;

	switch (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE)) {
	case SOCK_LISTENING:
		if (pthread_mutex_trylock(&s->cm_lock) == 0) {
			sock_conn_process(s);
			pthread_mutex_unlock(&s->cm_lock);
		}
		if (s->ready)
			rev |= POLLIN;
		break;
	case SOCK_CONNECTING:
		if (pthread_mutex_trylock(&s->cm_lock) == 0) {
			sock_conn_process(s);
			pthread_mutex_unlock(&s->cm_lock);
		}
		if (s->state == SOCK_CONNECTED)
			rev |= POLLOUT;
		else if (s->state == SOCK_FAILED)
			rev |= POLLOUT | POLLERR | POLLHUP;
		break;
	case SOCK_CONNECTED:
		sock_progress(s);
		closed = atomic_load(&s->closed);
		if (sock_readable_bytes(s) || (closed & (SOCK_PEER_SHUT_WR | SOCK_RESET |
							 SOCK_SHUT_RD)))
			rev |= POLLIN;
		if (closed & SOCK_PEER_SHUT_WR)
			rev |= POLLRDHUP;
		if (sock_writable(s))
			rev |= POLLOUT;
		if (closed & SOCK_RESET)
			rev |= POLLERR | POLLHUP;
		else if ((closed & SOCK_PEER_SHUT_WR) && (closed & SOCK_SHUT_WR))
			rev |= POLLHUP;
		break;
	case SOCK_FAILED:
		rev |= POLLOUT | POLLERR | POLLHUP;
		break;
	default:
		rev |= POLLOUT | POLLHUP;
		break;
	}
	return rev & (events | POLLERR | POLLHUP);
}

short sock_revents(struct ferry_sock *s, short events)
{
	return sock_revents_now(s, events);
}

short sock_revents_fd(int fd, short events)
{
	struct ferry_sock *s = sock_get(fd);

	return s ? sock_revents_now(s, events) : POLLNVAL;
}

/* One pass over @fds: ferry readiness, and the kernel fds with poll(0). */
static int sock_poll_scan(struct pollfd *fds, nfds_t nfds, struct ferry_sock **socks,
			  bool kernel_too)
{
	int ready = 0, k;
	nfds_t i;

	for (i = 0; i < nfds; i++) {
		if (!socks[i])
			continue;
		fds[i].revents = sock_revents(socks[i], fds[i].events);
		ready += fds[i].revents != 0;
	}
	if (!kernel_too)
		return ready;
	for (i = 0; i < nfds; i++) {
		if (socks[i] || fds[i].fd < 0)
			continue;
		k = poll(&fds[i], 1, 0);
		if (k < 0)
			return -1;
		ready += k;
	}
	return ready;
}

static int sock_poll_sleep(struct pollfd *fds, nfds_t nfds, struct ferry_sock **socks,
			   struct pollfd *kfds, bool *led, int timeout)
{
	int ready, ret;
	nfds_t i;

	for (i = 0; i < nfds; i++) {
		led[i] = socks[i] && sock_wait_lead(socks[i]);
		if (led[i])
			sock_wait_arm(socks[i]);
		kfds[i].fd = socks[i] ? socks[i]->fd : fds[i].fd;
		kfds[i].events = socks[i] ? POLLIN : fds[i].events;
		kfds[i].revents = 0;
	}
	ready = sock_poll_scan(fds, nfds, socks, true);
	ret = ready ? 0 : poll(kfds, nfds, timeout);
	for (i = 0; i < nfds; i++) {
		if (!led[i])
			continue;
		sock_wait_drain(socks[i]);
		sock_wait_release(socks[i]);
	}
	return ret < 0 ? -1 : ready;
}

int ferry_sock_poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	struct ferry_sock *stack_socks[SOCK_POLL_STACK], **socks = stack_socks;
	struct pollfd stack_kfds[SOCK_POLL_STACK], *kfds = stack_kfds;
	bool stack_led[SOCK_POLL_STACK], *led = stack_led;
	uint64_t deadline = timeout > 0 ? monotime_ns() + (uint64_t)timeout * 1000000u : 0;
	uint64_t spin_end;
	int ready = -1, e;
	bool any_ferry = false;
	nfds_t i;

	if (nfds > SOCK_POLL_STACK) {
		socks = calloc(nfds, sizeof(*socks));
		kfds = calloc(nfds, sizeof(*kfds));
		led = calloc(nfds, sizeof(*led));
		if (!socks || !kfds || !led) {
			ready = ERR(ENOMEM);
			goto out;
		}
	}
	e = errno;
	for (i = 0; i < nfds; i++) {
		socks[i] = fds[i].fd >= 0 ? sock_get(fds[i].fd) : NULL;
		any_ferry |= socks[i] != NULL;
		fds[i].revents = 0;
	}
	errno = e;
	if (!any_ferry) {
		ready = poll(fds, nfds, timeout);
		goto out;
	}
	ready = sock_poll_scan(fds, nfds, socks, true);
	spin_end = monotime_ns() + (uint64_t)sock_poll_us() * 1000u;
	while (ready == 0 && timeout != 0 && monotime_ns() < spin_end)
		ready = sock_poll_scan(fds, nfds, socks, false);
	while (ready == 0 && timeout != 0) {
		int ms = -1;

		if (deadline) {
			uint64_t now = monotime_ns();

			if (now >= deadline)
				break;
			ms = (int)((deadline - now + 999999) / 1000000);
		}
		ready = sock_poll_sleep(fds, nfds, socks, kfds, led, ms);
		if (ready == 0)
			ready = sock_poll_scan(fds, nfds, socks, true);
	}
out:
	if (socks != stack_socks) {
		free(socks);
		free(kfds);
		free(led);
	}
	return ready;
}

int ferry_sock_select(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
		      struct timeval *timeout)
{
	struct pollfd *pfds;
	int i, n = 0, ready, ms;

	if (nfds < 0 || nfds > FD_SETSIZE)
		return ERR(EINVAL);
	pfds = calloc((size_t)nfds + 1, sizeof(*pfds));
	if (!pfds)
		return ERR(ENOMEM);
	for (i = 0; i < nfds; i++) {
		short ev = 0;

		if (readfds && FD_ISSET(i, readfds))
			ev |= POLLIN;
		if (writefds && FD_ISSET(i, writefds))
			ev |= POLLOUT;
		if (exceptfds && FD_ISSET(i, exceptfds))
			ev |= POLLPRI;
		if (ev) {
			pfds[n].fd = i;
			pfds[n++].events = ev;
		}
	}
	ms = timeout ? (int)(timeout->tv_sec * 1000 + (timeout->tv_usec + 999) / 1000) : -1;
	ready = ferry_sock_poll(pfds, (nfds_t)n, ms);
	if (ready < 0) {
		free(pfds);
		return -1;
	}
	if (readfds)
		FD_ZERO(readfds);
	if (writefds)
		FD_ZERO(writefds);
	if (exceptfds)
		FD_ZERO(exceptfds);
	ready = 0;
	for (i = 0; i < n; i++) {
		short r = pfds[i].revents;

		if (readfds && (pfds[i].events & POLLIN) && (r & (POLLIN | POLLHUP | POLLERR))) {
			FD_SET(pfds[i].fd, readfds);
			ready++;
		}
		if (writefds && (pfds[i].events & POLLOUT) && (r & (POLLOUT | POLLERR))) {
			FD_SET(pfds[i].fd, writefds);
			ready++;
		}
		if (exceptfds && (pfds[i].events & POLLPRI) && (r & POLLPRI)) {
			FD_SET(pfds[i].fd, exceptfds);
			ready++;
		}
	}
	free(pfds);
	return ready;
}
