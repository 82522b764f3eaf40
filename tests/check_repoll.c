/*
 * check_repoll.c - epoll sets over ferry sockets and kernel fds
 * (ferry_sock_epoll_*, rsocket's repoll_*): epoll's errors, level and
 * edge triggering, ONESHOT, the data returned, wake-ups from other
 * threads, a socket closed while a thread waits, fairness under a small
 * maxevents.  Bounded waits only; nothing is timed.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <ferry/socket.h>

#include "check_suites.h"
#include "cmtest.h"
#include "testutil.h"

#define RP_TIMEOUT_MS TU_WAIT_MS

static int rp_listen(uint16_t *port_p)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int l = ferry_socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(l, 0);
	cmt_addr(&ss, AF_INET, 0);
	ck_assert_int_eq(ferry_sock_bind(l, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)), 0);
	ck_assert_int_eq(ferry_sock_listen(l, 16), 0);
	ck_assert_int_eq(ferry_sock_getsockname(l, (struct sockaddr *)&ss, &len), 0);
	*port_p = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return l;
}

/* A client connecting to @port, without waiting. */
static int rp_connect_start(uint16_t port)
{
	struct sockaddr_storage ss;
	int c = ferry_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), r;

	ck_assert_int_ge(c, 0);
	cmt_addr(&ss, AF_INET, port);
	r = ferry_sock_connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in));
	ck_assert(r == 0 || errno == EINPROGRESS);
	return c;
}

static void rp_connect_finish(int c)
{
	struct pollfd p = { .fd = c, .events = POLLOUT };

	ck_assert_int_eq(ferry_sock_poll(&p, 1, RP_TIMEOUT_MS), 1);
	ck_assert_int_eq(ferry_sock_fcntl(c, F_SETFL, 0), 0);
}

/* A connected pair: *a the client, *b the accepted end. */
static void rp_pair(int *a, int *b)
{
	struct pollfd p;
	uint16_t port;
	int l = rp_listen(&port);

	*a = rp_connect_start(port);
	p = (struct pollfd){ .fd = l, .events = POLLIN };
	ck_assert_int_eq(ferry_sock_poll(&p, 1, RP_TIMEOUT_MS), 1);
	*b = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(*b, 0);
	rp_connect_finish(*a);
	ck_assert_int_eq(ferry_sock_close(l), 0);
}

static void rp_add(int ep, int fd, uint32_t events, uint64_t cookie)
{
	struct epoll_event ev = { .events = events, .data.u64 = cookie };

	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
}

static void rp_send(int fd, const char *what)
{
	ck_assert_int_eq(ferry_sock_send(fd, what, strlen(what), 0), (ssize_t)strlen(what));
}

/* One wait of at most @ms: the number of events, the first in *ev. */
static int rp_wait1(int ep, struct epoll_event *ev, int ms)
{
	memset(ev, 0, sizeof(*ev));
	return ferry_sock_epoll_wait(ep, ev, 1, ms);
}

START_TEST(test_create_close)
{
	int ep = ferry_sock_epoll_create1(EPOLL_CLOEXEC), ep2;

	ck_assert_int_ge(ep, 0);
	ck_assert_int_eq(fcntl(ep, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	ep2 = ferry_sock_epoll_create1(O_NONBLOCK);	/* rsocket takes it */
	ck_assert_int_ge(ep2, 0);
	ck_assert_int_eq(ferry_sock_close(ep2), 0);
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_create1(0x40000000), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_sock_close(ep), 0);
	errno = 0;
	ck_assert_int_eq(ferry_sock_close(ep), -1);	/* gone */
	ck_assert_int_eq(errno, EBADF);
}
END_TEST

/* EPOLL_CTL_* fail as epoll's do, for sockets and kernel fds alike. */
START_TEST(test_ctl_errors)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int ep = ferry_sock_epoll_create1(0), kep = epoll_create1(0), p[2], a, b;

	ck_assert_int_ge(ep, 0);
	ck_assert_int_eq(pipe(p), 0);
	rp_pair(&a, &b);
	rp_add(ep, a, EPOLLIN, 1);
	rp_add(ep, p[0], EPOLLIN, 2);
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev), -1);
	ck_assert_int_eq(errno, EEXIST);
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev), -1);
	ck_assert_int_eq(errno, EEXIST);
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_MOD, b, &ev), -1);
	ck_assert_int_eq(errno, ENOENT);
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_DEL, p[1], NULL), -1);
	ck_assert_int_eq(errno, ENOENT);
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_ADD, 100000, &ev), -1);
	ck_assert_int_eq(errno, EBADF);
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_ADD, b, NULL), -1);
	ck_assert_int_eq(errno, EFAULT);
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, 42, a, &ev), -1);
	ck_assert_int_eq(errno, EINVAL);
	ev.events = EPOLLIN | EPOLLEXCLUSIVE;
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_MOD, a, &ev), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* A kernel set cannot hold a ferry socket: its fd is not its state. */
	ev.events = EPOLLIN;
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_ctl(kep, EPOLL_CTL_ADD, a, &ev), -1);
	ck_assert_int_eq(errno, EINVAL);
	/* ... but the calls pass kernel fds to the kernel's own set. */
	ck_assert_int_eq(ferry_sock_epoll_ctl(kep, EPOLL_CTL_ADD, p[0], &ev), 0);
	/* A socket's number names its own epoll set: not the program's. */
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_ctl(a, EPOLL_CTL_ADD, p[1], &ev), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_wait(a, &ev, 1, 0), -1);	/* no set */
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_sock_epoll_wait(ep, &ev, 0, 0), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_DEL, a, NULL), 0);
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL), 0);
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_DEL, a, NULL), -1);
	close(kep);
	close(p[0]);
	close(p[1]);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	ck_assert_int_eq(ferry_sock_close(ep), 0);
}
END_TEST

/* Level-triggered: reported at every wait while data is there. */
START_TEST(test_level_triggered)
{
	struct epoll_event ev;
	int ep = ferry_sock_epoll_create1(0), a, b;
	char buf[16];

	rp_pair(&a, &b);
	rp_add(ep, b, EPOLLIN, 0x1234567890abcdefull);
	ck_assert_int_eq(rp_wait1(ep, &ev, 0), 0);
	rp_send(a, "hello");
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);
	ck_assert_uint_eq(ev.data.u64, 0x1234567890abcdefull);
	ck_assert_uint_eq(ev.events, EPOLLIN);
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);	/* still there */
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), 0), 5);
	ck_assert_int_eq(rp_wait1(ep, &ev, 0), 0);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	ck_assert_int_eq(ferry_sock_close(ep), 0);
}
END_TEST

/* EPOLLET: once per arrival, however long the data stays. */
START_TEST(test_edge_triggered)
{
	struct epoll_event ev;
	int ep = ferry_sock_epoll_create1(0), a, b;
	char buf[16];

	rp_pair(&a, &b);
	rp_add(ep, b, EPOLLIN | EPOLLET, 7);
	rp_send(a, "one");
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);
	ck_assert_uint_eq(ev.data.u64, 7);
	ck_assert_int_eq(rp_wait1(ep, &ev, 0), 0);	/* no new edge */
	rp_send(a, "two");
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);	/* a new one */
	ck_assert_int_eq(rp_wait1(ep, &ev, 0), 0);
	ck_assert_int_eq(ferry_sock_recv(b, buf, sizeof(buf), 0), 6);
	/* MOD re-arms it, as epoll's does. */
	rp_send(a, "x");
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);
	ev = (struct epoll_event){ .events = EPOLLIN | EPOLLET, .data.u64 = 8 };
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_MOD, b, &ev), 0);
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);
	ck_assert_uint_eq(ev.data.u64, 8);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	ck_assert_int_eq(ferry_sock_close(ep), 0);
}
END_TEST

/* EPOLLONESHOT: one report, then nothing until EPOLL_CTL_MOD. */
START_TEST(test_oneshot)
{
	struct epoll_event ev;
	int ep = ferry_sock_epoll_create1(0), a, b;

	rp_pair(&a, &b);
	rp_add(ep, b, EPOLLIN | EPOLLONESHOT, 3);
	rp_send(a, "one");
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);
	rp_send(a, "two");
	ck_assert_int_eq(rp_wait1(ep, &ev, 0), 0);
	ck_assert_int_eq(rp_wait1(ep, &ev, 50), 0);	/* sleeps, wakes for nothing */
	ev = (struct epoll_event){ .events = EPOLLIN | EPOLLONESHOT, .data.u64 = 4 };
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_MOD, b, &ev), 0);
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);
	ck_assert_uint_eq(ev.data.u64, 4);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	ck_assert_int_eq(ferry_sock_close(ep), 0);
}
END_TEST

/* Kernel fds and sockets in one set; writability; the peer's close. */
START_TEST(test_mixed_out_hup)
{
	struct epoll_event evs[4];
	int ep = ferry_sock_epoll_create1(0), a, b, p[2], n, i;
	bool pipe_seen = false, sock_seen = false;

	ck_assert_int_eq(pipe(p), 0);
	rp_pair(&a, &b);
	rp_add(ep, p[0], EPOLLIN, 100);
	rp_add(ep, a, EPOLLOUT, 200);
	ck_assert_int_eq(write(p[1], "k", 1), 1);
	n = ferry_sock_epoll_wait(ep, evs, 4, RP_TIMEOUT_MS);
	ck_assert_int_eq(n, 2);
	for (i = 0; i < n; i++) {
		pipe_seen |= evs[i].data.u64 == 100 && evs[i].events == EPOLLIN;
		sock_seen |= evs[i].data.u64 == 200 && evs[i].events == EPOLLOUT;
	}
	ck_assert(pipe_seen && sock_seen);
	/* The peer goes: RDHUP and IN for whoever asked. */
	{
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = 200 };

		ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_MOD, a, &ev), 0);
	}
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	n = ferry_sock_epoll_wait(ep, evs, 4, RP_TIMEOUT_MS);
	ck_assert_int_eq(n, 1);
	ck_assert_uint_eq(evs[0].data.u64, 200);
	ck_assert_uint_ne(evs[0].events & EPOLLRDHUP, 0);
	ck_assert_uint_ne(evs[0].events & EPOLLIN, 0);
	close(p[0]);
	close(p[1]);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(ep), 0);
}
END_TEST

/* --- other threads --- */

struct rp_job {
	int ep, fd;
	int delay_ms;
	uint64_t cookie;
};

static void *rp_later_send(void *arg)
{
	struct rp_job *j = arg;

	usleep((useconds_t)j->delay_ms * 1000);
	ferry_sock_send(j->fd, "late", 4, 0);
	return NULL;
}

static void *rp_later_add(void *arg)
{
	struct rp_job *j = arg;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = j->cookie };

	usleep((useconds_t)j->delay_ms * 1000);
	ferry_sock_epoll_ctl(j->ep, EPOLL_CTL_ADD, j->fd, &ev);
	return NULL;
}

static void *rp_later_close(void *arg)
{
	struct rp_job *j = arg;

	usleep((useconds_t)j->delay_ms * 1000);
	ferry_sock_close(j->fd);
	return NULL;
}

/* A sleeping wait wakes for data that comes later. */
START_TEST(test_wakes_for_data)
{
	struct epoll_event ev;
	int ep = ferry_sock_epoll_create1(0), a, b;
	struct rp_job j;
	pthread_t t;

	rp_pair(&a, &b);
	rp_add(ep, b, EPOLLIN, 9);
	j = (struct rp_job){ .fd = a, .delay_ms = 100 };
	ck_assert_int_eq(pthread_create(&t, NULL, rp_later_send, &j), 0);
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);
	ck_assert_uint_eq(ev.data.u64, 9);
	pthread_join(t, NULL);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	ck_assert_int_eq(ferry_sock_close(ep), 0);
}
END_TEST

/* A socket added while a thread sleeps on the set is seen by that sleep. */
START_TEST(test_wakes_for_add)
{
	struct epoll_event ev;
	int ep = ferry_sock_epoll_create1(0), a, b;
	struct rp_job j;
	pthread_t t;

	rp_pair(&a, &b);
	rp_send(a, "ready");
	j = (struct rp_job){ .ep = ep, .fd = b, .delay_ms = 100, .cookie = 11 };
	ck_assert_int_eq(pthread_create(&t, NULL, rp_later_add, &j), 0);
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);
	ck_assert_uint_eq(ev.data.u64, 11);
	pthread_join(t, NULL);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	ck_assert_int_eq(ferry_sock_close(ep), 0);
}
END_TEST

/* Closing a socket while a thread sleeps on it: taken out, nothing breaks. */
START_TEST(test_close_while_waiting)
{
	struct epoll_event ev;
	int ep = ferry_sock_epoll_create1(0), a, b, p[2];
	struct rp_job j;
	pthread_t t;

	ck_assert_int_eq(pipe(p), 0);
	rp_pair(&a, &b);
	rp_add(ep, b, EPOLLIN, 1);
	rp_add(ep, p[0], EPOLLIN, 2);
	j = (struct rp_job){ .fd = b, .delay_ms = 100 };
	ck_assert_int_eq(pthread_create(&t, NULL, rp_later_close, &j), 0);
	pthread_join(t, NULL);	/* b closed; whether the wait below began first or not */
	ck_assert_int_eq(write(p[1], "k", 1), 1);
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);
	ck_assert_uint_eq(ev.data.u64, 2);
	/* b is no longer in the set: its number may be anyone's now. */
	ck_assert_int_eq(ferry_sock_epoll_ctl(ep, EPOLL_CTL_DEL, b, NULL), -1);
	close(p[0]);
	close(p[1]);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(ep), 0);
}
END_TEST

/* The same, with the close racing a wait that is asleep. */
START_TEST(test_close_during_sleep)
{
	struct epoll_event ev;
	int ep = ferry_sock_epoll_create1(0), a, b;
	struct rp_job j;
	pthread_t t;

	rp_pair(&a, &b);
	rp_add(ep, b, EPOLLIN, 1);
	j = (struct rp_job){ .fd = b, .delay_ms = 100 };
	ck_assert_int_eq(pthread_create(&t, NULL, rp_later_close, &j), 0);
	/* Asleep when b goes: the close waits for this sleep to let go of b. */
	ck_assert_int_eq(rp_wait1(ep, &ev, 400), 0);
	pthread_join(t, NULL);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(ep), 0);
}
END_TEST

/* --- listeners, fairness --- */

/* A listener is readable with a connection to accept; ET sees each one. */
START_TEST(test_listener_edges)
{
	struct epoll_event ev;
	uint16_t port;
	int ep = ferry_sock_epoll_create1(0), l = rp_listen(&port), c1, c2, s1, s2;

	ck_assert_int_eq(ferry_sock_fcntl(l, F_SETFL, O_NONBLOCK), 0);
	rp_add(ep, l, EPOLLIN | EPOLLET, 5);
	c1 = rp_connect_start(port);
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);
	ck_assert_uint_eq(ev.data.u64, 5);
	s1 = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(s1, 0);
	ck_assert_int_eq(ferry_sock_accept(l, NULL, NULL), -1);
	ck_assert_int_eq(errno, EAGAIN);
	c2 = rp_connect_start(port);
	ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);	/* the second edge */
	s2 = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(s2, 0);
	rp_connect_finish(c1);
	rp_connect_finish(c2);
	ck_assert_int_eq(ferry_sock_close(c1), 0);
	ck_assert_int_eq(ferry_sock_close(c2), 0);
	ck_assert_int_eq(ferry_sock_close(s1), 0);
	ck_assert_int_eq(ferry_sock_close(s2), 0);
	ck_assert_int_eq(ferry_sock_close(l), 0);
	ck_assert_int_eq(ferry_sock_close(ep), 0);
}
END_TEST

/* maxevents 1 over three ready sockets: each has its turn. */
START_TEST(test_small_maxevents_fair)
{
	struct epoll_event ev;
	int ep = ferry_sock_epoll_create1(0), a[3], b[3], i;
	unsigned int seen = 0;

	for (i = 0; i < 3; i++) {
		rp_pair(&a[i], &b[i]);
		rp_send(a[i], "x");
		rp_add(ep, b[i], EPOLLIN, (uint64_t)1 << i);
	}
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(rp_wait1(ep, &ev, RP_TIMEOUT_MS), 1);
		seen |= (unsigned int)ev.data.u64;
	}
	ck_assert_uint_eq(seen, 7);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(ferry_sock_close(a[i]), 0);
		ck_assert_int_eq(ferry_sock_close(b[i]), 0);
	}
	ck_assert_int_eq(ferry_sock_close(ep), 0);
}
END_TEST

Suite *repoll_suite(void)
{
	Suite *s = suite_create("repoll");
	TCase *tc = tcase_create("semantics");

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_create_close);
	tcase_add_test(tc, test_ctl_errors);
	tcase_add_test(tc, test_level_triggered);
	tcase_add_test(tc, test_edge_triggered);
	tcase_add_test(tc, test_oneshot);
	tcase_add_test(tc, test_mixed_out_hup);
	tcase_add_test(tc, test_listener_edges);
	tcase_add_test(tc, test_small_maxevents_fair);
	suite_add_tcase(s, tc);

	tc = tcase_create("threads");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_wakes_for_data);
	tcase_add_test(tc, test_wakes_for_add);
	tcase_add_test(tc, test_close_while_waiting);
	tcase_add_test(tc, test_close_during_sleep);
	suite_add_tcase(s, tc);
	return s;
}
