/*
 * sock_wait.c - waiting on a socket: poll for FERRY_POLL_US (default 10 us,
 * rsocket's), then block on the socket's fd, race-free.
 *
 * Only one thread at a time (the leader) sleeps in poll(2) on the fd and
 * drains the completion and CM channels -- or, connected on shm, sleeps on
 * the CQ's futexes (ferry_cq_sleep), which the peer raises without a
 * datagram and which leave nothing to drain; other threads waiting on the
 * same socket (a sender while a receiver sleeps, say) wait on a condition
 * variable and recheck when the leader wakes.  The leader arms the CQ,
 * then rechecks its condition and whether any completion was taken since:
 * a completion that came before the arm is found by the recheck, one that
 * comes after raises the channel and wakes poll(2).  Whenever the leader
 * took anything it wakes the followers, whose conditions it may have met.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "sock-internal.h"

unsigned int sock_default_poll_us = SOCK_DEF_POLL_US;

unsigned int sock_poll_us(void)
{
	static atomic_int cached = -1;
	int v = atomic_load_explicit(&cached, memory_order_relaxed);

	if (v < 0) {
		const char *env = getenv("FERRY_POLL_US");
		long l = env && *env ? strtol(env, NULL, 10) : (long)sock_default_poll_us;

		v = l < 0 ? 0 : l > 10000000 ? 10000000 : (int)l;
		atomic_store(&cached, v);
	}
	return (unsigned int)v;
}

bool sock_wait_lead(struct ferry_sock *s)
{
	bool lead;

	pthread_mutex_lock(&s->wait_lock);
	lead = !s->wait_leader;
	if (lead)
		s->wait_leader = true;
	pthread_mutex_unlock(&s->wait_lock);
	return lead;
}

void sock_wait_release(struct ferry_sock *s)
{
	pthread_mutex_lock(&s->wait_lock);
	s->wait_leader = false;
	s->wait_gen++;
	pthread_cond_broadcast(&s->wait_cond);
	pthread_mutex_unlock(&s->wait_lock);
}

void sock_wait_wake(struct ferry_sock *s)
{
	pthread_mutex_lock(&s->wait_lock);
	s->wait_gen++;
	pthread_cond_broadcast(&s->wait_cond);
	pthread_mutex_unlock(&s->wait_lock);
}

void sock_wait_arm(struct ferry_sock *s)
{
	if (s->cq && ferry_req_notify_cq(s->cq, 0) < 0)
		ferry_debug("sock %d: arming the CQ: %m", s->fd);
}

void sock_wait_disarm(struct ferry_sock *s)
{
	/* Under wait_lock: a leader sets itself up there before it arms, so
	 * either we see it and leave its arm alone, or it arms after us. */
	pthread_mutex_lock(&s->wait_lock);
	if (!s->wait_leader && s->cq)
		ferry_cq_disarm(s->cq);
	pthread_mutex_unlock(&s->wait_lock);
}

/* Take the events that made the fd readable (leader only). */
void sock_wait_drain(struct ferry_sock *s)
{
	struct ferry_cq *cq;
	void *ctx;

	atomic_fetch_add(&s->drain_gen, 1);
	/* One event: an arm raises one.  Anything more keeps the fd readable
	 * and is taken on the next round, which does not sleep. */
	if (s->cch && ferry_cq_event_poll(s->cch, &cq, &ctx) == 0)
		ferry_ack_cq_events(cq, 1);
	if (s->chan && s->chan_in_epoll && pthread_mutex_trylock(&s->cm_lock) == 0) {
		sock_conn_process(s);
		pthread_mutex_unlock(&s->cm_lock);
	}
}

/* Follower: wait until the leader's round ends (or the deadline). */
static void sock_wait_follow(struct ferry_sock *s, uint64_t deadline_ns)
{
	uint64_t gen;

	pthread_mutex_lock(&s->wait_lock);
	gen = s->wait_gen;
	while (s->wait_leader && gen == s->wait_gen) {
		if (deadline_ns) {
			struct timespec ts;
			uint64_t rt;

			clock_gettime(CLOCK_REALTIME, &ts);
			rt = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec +
			     (deadline_ns > monotime_ns() ? deadline_ns - monotime_ns() : 0);
			ts.tv_sec = (time_t)(rt / 1000000000u);
			ts.tv_nsec = (long)(rt % 1000000000u);
			if (pthread_cond_timedwait(&s->wait_cond, &s->wait_lock, &ts))
				break;
		} else {
			pthread_cond_wait(&s->wait_cond, &s->wait_lock);
		}
	}
	pthread_mutex_unlock(&s->wait_lock);
}

static int sock_timeout_ms(uint64_t deadline_ns)
{
	uint64_t now;

	if (!deadline_ns)
		return -1;
	now = monotime_ns();
	return now >= deadline_ns ? 0 : (int)((deadline_ns - now + 999999) / 1000000);
}

/* The keepalive service wakes sleepers on its own; cap sleeps for it. */
static int sock_sleep_ms(struct ferry_sock *s, uint64_t deadline_ns)
{
	int ms = sock_timeout_ms(deadline_ns);

	if (s->keepalive && (ms < 0 || ms > 1000))
		ms = 1000;
	return ms;
}

/* Handshake steps one sleeper may take from the CM thread at a time. */
#define SOCK_WAIT_HOLDS	8

/*
 * Sleep until the socket's fd is readable; for a socket in a handshake
 * (its connect's, or those of connections it accepted), also until the
 * handshake's socket is (sock_conn_hold): what comes there then wakes this
 * thread alone, not the CM thread and from it this one.
 */
static int sock_wait_sleep(struct ferry_sock *s, const struct pollfd *pfd,
			   uint64_t deadline_ns, bool hold)
{
	struct pollfd fds[1 + SOCK_WAIT_HOLDS];
	int ms = sock_sleep_ms(s, deadline_ns), held = 0, n, e;

	fds[0] = *pfd;
	if (hold)
		held = sock_conn_hold(s, fds + 1, SOCK_WAIT_HOLDS, &ms);
	n = poll(fds, (nfds_t)(1 + held), ms);
	e = errno;
	if (held)
		sock_conn_release(s);
	errno = e;
	return n;
}

static int sock_wait_do(struct ferry_sock *s, bool (*ready)(struct ferry_sock *s),
			uint64_t deadline_ns, bool hold)
{
	uint64_t spin_end = monotime_ns() + (uint64_t)sock_poll_us() * 1000u;
	struct pollfd pfd = { .fd = s->fd, .events = POLLIN };
	struct ferry_cq_sleep tok;
	unsigned int spins = 0;
	bool futex;
	int slept;

	/* Reading the clock costs more than a poll of the CQ: read it seldom.
	 * Now and then the CPU goes to whoever else wants it: a peer on the
	 * same CPU is what we wait for. */
	do {
		if (ready(s))
			return 0;
		if (!(++spins & 1023))
			sched_yield();
	} while ((spins & 63) || monotime_ns() < spin_end);

	for (;;) {
		if (deadline_ns && monotime_ns() >= deadline_ns)
			return ERR(ETIMEDOUT);
		if (!sock_wait_lead(s)) {
			sock_wait_follow(s, deadline_ns);
			if (ready(s))
				return 0;
			continue;
		}
		/* Connected, with nothing but the CQ to wait for: on its futexes
		 * where the provider has them, else on the fd. */
		futex = !s->chan_in_epoll && s->cq && sock_is_connected(s) &&
			ferry_cq_sleep_prepare(s->cq, &tok) == 0;
		if (!futex)
			sock_wait_arm(s);
		if (sock_progress(s) > 0 || ready(s)) {
			if (futex)
				ferry_cq_sleep_cancel(s->cq);
			sock_wait_release(s);
			if (ready(s))
				return 0;
			continue;
		}
		if (futex)
			slept = ferry_cq_sleep(s->cq, &tok, sock_sleep_ms(s, deadline_ns));
		else if ((slept = sock_wait_sleep(s, &pfd, deadline_ns, hold)) >= 0)
			sock_wait_drain(s);
		if (slept < 0 && errno == EINTR) {
			sock_wait_release(s);
			return ERR(EINTR);
		}
		sock_wait_release(s);
		if (ready(s))
			return 0;
	}
}

int sock_wait(struct ferry_sock *s, bool (*ready)(struct ferry_sock *s), uint64_t deadline_ns)
{
	return sock_wait_do(s, ready, deadline_ns, false);
}

int sock_wait_handshake(struct ferry_sock *s, bool (*ready)(struct ferry_sock *s),
			uint64_t deadline_ns)
{
	return sock_wait_do(s, ready, deadline_ns, true);
}
