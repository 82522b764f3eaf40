/*
 * check_sock_fd.c - ferry's stream sockets' descriptors and wake-ups:
 * what an idle connection costs (pages, descriptors), a socket whose
 * descriptor becomes its connection's, accept at EMFILE, and sleepers
 * that must stay armed or be woken.  How the suites pick a transport and
 * skip: socktest.h.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <ferry/socket.h>

#include "check_suites.h"
#include "cmtest.h"
#include "shm-internal.h"
#include "sock-internal.h"
#include "socktest.h"
#include "testutil.h"

/* --- what an idle connection costs --- */

/* Is the page of @s's target SGL (shared memory, after the ring) allocated? */
static bool ts_target_sgl_page_in(struct ferry_sock *s)
{
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t at = (uintptr_t)s->target_sgl & ~(uintptr_t)(page - 1);
	unsigned char in = 0;

	ck_assert_int_eq(mincore((void *)at, (size_t)page, &in), 0);
	return in & 1;
}

/* Pages of @s's QP region (shm) allocated: what its idle connection costs. */
static int ts_region_pages_in(struct ferry_sock *s)
{
	long page = sysconf(_SC_PAGESIZE);
	unsigned char in[64];
	size_t len, i, n;
	void *addr;
	int count = 0;

	ck_assert_int_eq(shm_qp_test_region(s->qp, &addr, &len), 0);
	ck_assert_uint_eq((uintptr_t)addr % (uintptr_t)page, 0);
	n = (len + (size_t)page - 1) / (size_t)page;
	ck_assert_uint_le(n, sizeof(in));
	ck_assert_int_eq(mincore(addr, len, in), 0);
	for (i = 0; i < n; i++)
		count += in[i] & 1;
	return count;
}

struct ts_acceptor {
	int l, fd;
};

static void *ts_accept_one(void *arg)
{
	struct ts_acceptor *a = arg;

	a->fd = ferry_sock_accept(a->l, NULL, NULL);
	return NULL;
}

/*
 * An idle connection sends nothing, not even the update that publishes
 * the second half of a ring (which waits for data into the first): the
 * pages holding the target SGLs stay unallocated at both ends.  Its QP
 * regions (shm) take one page each: head, first receives and the delivery
 * slot the peer polls lie together.  The connect is blocking, as it
 * returns credits once established.
 */
START_TEST(test_idle_leaves_target_sgl_alone)
{
	struct ts_acceptor acc = { .fd = -1 };
	struct ferry_sock *sa, *sb;
	struct sockaddr_in sin;
	uint16_t port;
	pthread_t th;
	char c = 'i';
	int a, i;

	acc.l = ts_listen(&port);
	ck_assert_int_eq(pthread_create(&th, NULL, ts_accept_one, &acc), 0);
	a = ferry_socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(a, 0);
	ts_addr(&sin, port);
	ck_assert_int_eq(ferry_sock_connect(a, (struct sockaddr *)&sin, sizeof(sin)), 0);
	pthread_join(th, NULL);
	ck_assert_int_ge(acc.fd, 0);
	sa = sock_get(a);
	sb = sock_get(acc.fd);
	/* What the keepalive service does to idle sockets, a few times over. */
	for (i = 0; i < 4; i++) {
		sock_progress(sa);
		sock_progress(sb);
	}
	/* (On verbs, registering the ring pins, and so allocates, its pages.) */
	if (!ts_on_verbs()) {
		ck_assert(!ts_target_sgl_page_in(sa));
		ck_assert(!ts_target_sgl_page_in(sb));
	}
	if (tu_on_shm()) {	/* a QP region is shm's */
		ck_assert_int_eq(ts_region_pages_in(sa), 1);
		ck_assert_int_eq(ts_region_pages_in(sb), 1);
	} else if (ts_on_verbs()) {
		printf("SKIP test_idle_leaves_target_sgl_alone (page check) on %s: "
		       "registering memory with the device pins its pages\n", tu_transport());
	}
	/* Data still flows both ways, and past the first half of each ring. */
	ts_move_checked(a, acc.fd, 3 * (size_t)sb->rbuf_size);
	ts_move_checked(acc.fd, a, 3 * (size_t)sa->rbuf_size);
	ck_assert_int_eq(ferry_sock_send(a, &c, 1, 0), 1);
	ts_read_all(acc.fd, &c, 1);
	ck_assert_int_eq(c, 'i');
	ferry_sock_close(a);
	ferry_sock_close(acc.fd);
	ferry_sock_close(acc.l);
}
END_TEST

/*
 * Descriptors an idle connection costs its two ends, in one process (on
 * shm; see the list atop sock-internal.h): the ring's memfd is not among
 * them once the connection is up, the peer has mapped it.
 */
#define TS_IDLE_PAIR_FDS	4	/* client's (non-blocking: 3) and accepted end's (1) */
#define TS_IDLE_PAIRS		8

START_TEST(test_idle_descriptors)
{
	int fds[2 * (TS_IDLE_PAIRS + 2)], l, i, before = 0, per_pair;
	struct ferry_block blk;
	struct ferry_sock *s;
	uint16_t port;

	l = ts_listen(&port);
	/* Two first: the process-wide pieces (CM and monitor threads, arena,
	 * spares) come with them. */
	for (i = 0; i < TS_IDLE_PAIRS + 2; i++) {
		if (i == 2)
			before = cmt_count_fds();
		fds[2 * i] = ts_connect_start(port);
		ck_assert(ts_poll(l, POLLIN, TS_TIMEOUT_MS) & POLLIN);
		fds[2 * i + 1] = ferry_sock_accept(l, NULL, NULL);
		ck_assert_int_ge(fds[2 * i + 1], 0);
		ts_connect_finish(fds[2 * i]);
	}
	per_pair = (cmt_count_fds() - before) / TS_IDLE_PAIRS;
	printf("test_idle_descriptors: %d descriptors per connection (both ends)\n", per_pair);
	for (i = 0; i < 2 * (TS_IDLE_PAIRS + 2); i++) {
		s = sock_get(fds[i]);
		ck_assert_ptr_nonnull(s);
		ck_assert(ferry_block_find(s->rbuf, 1, &blk));
		ck_assert_int_eq(blk.fd, -1);
	}
	if (tu_on_shm())
		ck_assert_int_le(per_pair, TS_IDLE_PAIR_FDS);
	/* Data still flows both ways through rings whose memfds are gone. */
	ts_move_checked(fds[0], fds[1], 3 * (size_t)sock_get(fds[1])->rbuf_size);
	ts_move_checked(fds[1], fds[0], 3 * (size_t)sock_get(fds[0])->rbuf_size);
	for (i = 0; i < 2 * (TS_IDLE_PAIRS + 2); i++)
		ck_assert_int_eq(ferry_sock_close(fds[i]), 0);
	ferry_sock_close(l);
}
END_TEST

/* Is @fd a socket of @type (a CQ's wake socket: SOCK_DGRAM; the
 * connection's own: SOCK_SEQPACKET), not an epoll set? */
static bool ts_fd_is(int fd, int want)
{
	int type = 0;
	socklen_t len = sizeof(type);

	return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == want;
}

static bool ts_fd_is_dgram(int fd)
{
	return ts_fd_is(fd, SOCK_DGRAM);
}

static bool ts_fd_is_conn(int fd)
{
	return ts_fd_is(fd, SOCK_SEQPACKET);
}

/*
 * sock_fd_merge: once connected, a socket from accept or a blocking
 * connect is its completion channel itself (on shm).  The number stays
 * the same; data flows and blocking reads wake up on it, across a
 * renumbering too (the preload shim's); closing gives every descriptor
 * back.  A non-blocking connect keeps its epoll set.
 */
struct ts_reader {
	int fd;
	ssize_t got;
	char c;
};

static void *ts_read_one(void *arg)
{
	struct ts_reader *r = arg;

	r->got = ferry_sock_recv(r->fd, &r->c, 1, 0);
	return NULL;
}

/*
 * A thread blocked in a read sleeps on the CQ's futexes (shm); arming the
 * CQ for its channel meanwhile, as the preload's epoll does for a socket
 * in a set, must not take the sleeper's arm away: the data wakes it.
 */
START_TEST(test_arm_keeps_sleeper)
{
	struct ts_reader r = { .got = -2 };
	struct timespec nap = { 0, 50 * 1000 * 1000 }, deadline;
	pthread_t th;
	int a;

	ts_pair(&a, &r.fd);
	ck_assert_int_eq(pthread_create(&th, NULL, ts_read_one, &r), 0);
	nanosleep(&nap, NULL);			/* let it fall asleep */
	sock_wait_arm(sock_get(r.fd));		/* what an epoll set does */
	nanosleep(&nap, NULL);
	ck_assert_int_eq(ferry_sock_send(a, "z", 1, 0), 1);
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += TS_TIMEOUT_MS / 1000 + 1;
	ck_assert_msg(pthread_timedjoin_np(th, NULL, &deadline) == 0,
		      "the reader was not woken by the data");
	ck_assert_int_eq(r.got, 1);
	ck_assert_int_eq(r.c, 'z');
	ferry_sock_close(a);
	ferry_sock_close(r.fd);
}
END_TEST

/* A blocking connect to listener @l (port @port), accepted by a thread. */
static void ts_pair_blocking(int l, uint16_t port, int *a, int *b)
{
	struct ts_acceptor acc = { .fd = -1, .l = l };
	struct sockaddr_in sin;
	pthread_t th;

	ck_assert_int_eq(pthread_create(&th, NULL, ts_accept_one, &acc), 0);
	*a = ferry_socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(*a, 0);
	ts_addr(&sin, port);
	ck_assert_int_eq(ferry_sock_connect(*a, (struct sockaddr *)&sin, sizeof(sin)), 0);
	pthread_join(th, NULL);
	*b = acc.fd;
	ck_assert_int_ge(*b, 0);
}

/*
 * Accept with no descriptor number left (EMFILE) fails, and the connection
 * stays queued, as a TCP listener keeps it in its backlog: the next accept
 * gets it, and it works.  (On shm an accepted socket gets its number only
 * in accept; on verbs it has one from the start.)
 */
START_TEST(test_accept_emfile_keeps_connection)
{
	struct rlimit old, low;
	uint16_t port;
	int l, c, b, probe, r, e;
	char ch = 'e';

	if (!tu_on_shm()) {
		printf("SKIP test_accept_emfile_keeps_connection on %s: an accepted "
		       "socket has its number before accept\n", tu_transport());
		return;
	}
	l = ts_listen(&port);
	c = ts_connect_start(port);
	ck_assert(ts_poll(l, POLLIN, TS_TIMEOUT_MS) & POLLIN);
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	probe = dup(0);		/* the lowest free number: none below it is */
	ck_assert_int_ge(probe, 0);
	close(probe);
	low = old;
	low.rlim_cur = (rlim_t)probe;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	r = ferry_sock_accept(l, NULL, NULL);
	e = errno;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
	ck_assert_int_eq(r, -1);
	ck_assert_int_eq(e, EMFILE);
	ck_assert(ts_poll(l, POLLIN, 0) & POLLIN);	/* still queued */
	b = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(b, 0);
	ts_connect_finish(c);
	ck_assert_int_eq(ferry_sock_send(c, &ch, 1, 0), 1);
	ts_read_all(b, &ch, 1);
	ck_assert_int_eq(ferry_sock_send(b, &ch, 1, 0), 1);
	ts_read_all(c, &ch, 1);
	ck_assert_int_eq(ch, 'e');
	ck_assert_int_eq(ferry_sock_close(c), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	ck_assert_int_eq(ferry_sock_close(l), 0);
}
END_TEST

START_TEST(test_fd_merge)
{
	uint16_t port;
	int l, a, a0, b, c, d, to, fds_before;
	char ch = 'm';

	l = ts_listen(&port);
	/* The process-wide pieces first (spares, the sink channel, threads). */
	ts_pair_blocking(l, port, &a, &b);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	fds_before = cmt_count_fds();
	ts_pair_blocking(l, port, &a, &b);
	a0 = a;
	if (!tu_on_shm()) {
		printf("SKIP test_fd_merge on %s: only shm renumbers a completion channel\n",
		       tu_transport());
		ck_assert(!ts_fd_is_conn(a) && !ts_fd_is_conn(b));
	} else {
		/* Each end is its connection's socket: one descriptor. */
		ck_assert(ts_fd_is_conn(a));
		ck_assert(ts_fd_is_conn(b));
		ck_assert(sock_get(a)->fd_is_cch && sock_get(b)->fd_is_cch);
		ck_assert_int_eq(sock_get(a)->cch->fd, a);
		ck_assert_int_eq(cmt_count_fds(), fds_before + 2);
	}
	ts_move_checked(a, b, 3 * (size_t)sock_get(b)->rbuf_size);
	ts_move_checked(b, a, 3 * (size_t)sock_get(a)->rbuf_size);
	/* Renumbered, as the preload shim does: the channel follows. */
	to = dup(a);
	ck_assert_int_ge(to, 0);
	ck_assert_int_eq(sock_renumber(a, to), 0);
	a = to;
	ck_assert_int_ne(a, a0);
	if (tu_on_shm())
		ck_assert_int_eq(sock_get(a)->cch->fd, a);
	ts_move_checked(b, a, 3 * (size_t)sock_get(a)->rbuf_size);
	ck_assert_int_eq(ferry_sock_send(a, &ch, 1, 0), 1);
	ts_read_all(b, &ch, 1);
	ck_assert_int_eq(ch, 'm');
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	ck_assert_int_eq(cmt_count_fds(), fds_before);
	/* A non-blocking connect keeps its set. */
	ts_pair(&c, &d);
	ck_assert(!ts_fd_is_dgram(c) && !ts_fd_is_conn(c));
	ck_assert(!sock_get(c)->fd_is_cch);
	ck_assert_int_eq(ferry_sock_close(c), 0);
	ck_assert_int_eq(ferry_sock_close(d), 0);
	ferry_sock_close(l);
}
END_TEST

/*
 * A peer with an iomap announces memory on the connection later: its
 * client keeps the CQ's wake socket as its number (2 descriptors), while
 * the accepted end, whose peer has none, is its connection.  Both work.
 */
START_TEST(test_fd_on_conn_iomap_peer)
{
	int l, a, b, iomap = 2;
	uint16_t port;
	char ch = 'i';

	l = ts_listen(&port);
	ck_assert_int_eq(ferry_sock_setsockopt(l, SOL_FERRY, FERRY_IOMAPSIZE, &iomap,
					       sizeof(iomap)), 0);
	ts_pair_blocking(l, port, &a, &b);
	if (tu_on_shm()) {
		ck_assert(ts_fd_is_dgram(a));
		ck_assert(ts_fd_is_conn(b));
	}
	ts_move_checked(a, b, 3 * (size_t)sock_get(b)->rbuf_size);
	ts_move_checked(b, a, 3 * (size_t)sock_get(a)->rbuf_size);
	ck_assert_int_eq(ferry_sock_send(b, &ch, 1, 0), 1);
	ts_read_all(a, &ch, 1);
	ck_assert_int_eq(ch, 'i');
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	ferry_sock_close(l);
}
END_TEST

struct ts_poller {
	int fd;
	short revents;
};

static void *ts_poll_long(void *arg)
{
	struct ts_poller *p = arg;

	p->revents = ts_poll(p->fd, POLLIN, -1);
	return NULL;
}

/*
 * A socket that is its connection's socket is not woken by datagrams: a
 * QP error made here (not by the peer) must still reach a thread asleep
 * in poll with no timeout, which the provider does by shutting the
 * socket down.
 */
/* Join the poller, or fail if it is still asleep after a generous bound
 * (a hang detector, not a timing). */
static void ts_poller_join(pthread_t th, const char *what)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += TS_TIMEOUT_MS / 1000;
	if (pthread_timedjoin_np(th, NULL, &ts) != 0) {
		pthread_cancel(th);
		pthread_join(th, NULL);
		ck_abort_msg("a poller of the socket slept through %s", what);
	}
}

/*
 * A completion made here (a signalled send of our own) cannot raise a
 * socket that is its connection: it must not spend the arm of the thread
 * asleep on it either, or the peer's next message finds the CQ unarmed
 * and wakes nobody.
 */
START_TEST(test_fd_on_conn_local_completion_keeps_arm)
{
	struct ts_poller p = { .fd = -1 };
	int l, a, b;
	uint16_t port;
	pthread_t th;
	size_t len;
	char *buf;

	l = ts_listen(&port);
	ts_pair_blocking(l, port, &a, &b);
	len = sock_get(b)->sbuf_size / 4;	/* signalled (sock_want_signal) */
	buf = calloc(1, len);
	ck_assert_ptr_nonnull(buf);
	p.fd = b;
	ck_assert_int_eq(pthread_create(&th, NULL, ts_poll_long, &p), 0);
	usleep(100000);		/* past FERRY_POLL_US: asleep in poll(2) */
	ck_assert_int_eq(ferry_sock_send(b, buf, len, 0), (ssize_t)len);
	ck_assert_int_eq(ferry_sock_send(a, "w", 1, 0), 1);
	ts_poller_join(th, "its peer's message");
	ck_assert(p.revents & POLLIN);
	ts_read_all(a, buf, len);
	free(buf);
	ferry_sock_close(a);
	ferry_sock_close(b);
	ferry_sock_close(l);
}
END_TEST

START_TEST(test_fd_on_conn_local_error_wakes_poller)
{
	struct ts_poller p = { .fd = -1 };
	struct ferry_qp_attr attr = { .qp_state = FERRY_QPS_ERR };
	int l, a, b;
	uint16_t port;
	pthread_t th;

	l = ts_listen(&port);
	ts_pair_blocking(l, port, &a, &b);
	p.fd = a;
	ck_assert_int_eq(pthread_create(&th, NULL, ts_poll_long, &p), 0);
	usleep(100000);		/* past FERRY_POLL_US: asleep in poll(2) */
	ck_assert_int_eq(ferry_modify_qp(sock_get(a)->qp, &attr, FERRY_QP_STATE), 0);
	ts_poller_join(th, "its QP's error");
	ck_assert(p.revents & (POLLERR | POLLHUP));
	ferry_sock_close(a);
	ferry_sock_close(b);
	ferry_sock_close(l);
}
END_TEST

Suite *sock_fd_suite(void)
{
	Suite *s = suite_create("sock");
	TCase *tc;

	tc = tcase_create("stream");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_idle_leaves_target_sgl_alone);
	tcase_add_test(tc, test_idle_descriptors);
	tcase_add_test(tc, test_fd_merge);
	tcase_add_test(tc, test_fd_on_conn_iomap_peer);
	tcase_add_test(tc, test_fd_on_conn_local_completion_keeps_arm);
	tcase_add_test(tc, test_fd_on_conn_local_error_wakes_poller);
	tcase_add_test(tc, test_accept_emfile_keeps_connection);
	tcase_add_test(tc, test_arm_keeps_sleeper);
	suite_add_tcase(s, tc);
	return s;
}
