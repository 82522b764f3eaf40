/*
 * check_sock_shim.c - the socket layer's door for the preload shim
 * (sock/export/sock-export.h), seen as the shim sees it: through that
 * header alone, on sockets' numbers.
 *
 * Each call the shim makes instead of reading a socket itself must answer
 * what the read answered: a number that is no socket fails cleanly
 * (EBADF, ENOTSOCK, POLLNVAL, false) and never crashes; a sleep prepared
 * on a socket wakes when its peer writes; an arm is spent by a drain; a
 * listener's ready look follows its queue; the fork mark tells whether
 * this process moved the connection since.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>

#include <ferry/socket.h>

#include "check_suites.h"
#include "cmtest.h"
#include "sock-export.h"
#include "testutil.h"

/* A listener on the test address; its port in *@port_p. */
static int tss_listen(uint16_t *port_p)
{
	struct sockaddr_storage ss;
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	int l = ferry_socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(l, 0);
	cmt_addr(&ss, AF_INET, 0);
	ck_assert_int_eq(ferry_sock_bind(l, (struct sockaddr *)&ss, sizeof(sin)), 0);
	ck_assert_int_eq(ferry_sock_listen(l, 4), 0);
	ck_assert_int_eq(ferry_sock_getsockname(l, (struct sockaddr *)&sin, &len), 0);
	*port_p = ntohs(sin.sin_port);
	return l;
}

/* A non-blocking connect to @port under way. */
static int tss_connect(uint16_t port)
{
	struct sockaddr_storage ss;
	int c = ferry_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int r;

	ck_assert_int_ge(c, 0);
	cmt_addr(&ss, AF_INET, port);
	r = ferry_sock_connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in));
	ck_assert(r == 0 || errno == EINPROGRESS);
	return c;
}

/* Wait (bounded) until socket @fd has @events, through the shim's look. */
static bool tss_wait_revents(int fd, short events)
{
	struct pollfd p = { .events = POLLIN };
	int waited;

	for (waited = 0; waited < TU_WAIT_MS; waited += 10) {
		if (sock_revents_fd(fd, events) & events)
			return true;
		p.fd = sock_shim_wait_fd(fd);
		poll(&p, 1, 10);
	}
	return false;
}

/* A connected pair: *@a the client, *@b the accepted end. */
static void tss_pair(int *a, int *b)
{
	uint16_t port;
	int l = tss_listen(&port);

	*a = tss_connect(port);
	ck_assert(tss_wait_revents(l, POLLIN));
	*b = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(*b, 0);
	ck_assert(tss_wait_revents(*a, POLLOUT));
	ck_assert_int_eq(ferry_sock_fcntl(*a, F_SETFL, 0), 0);
	ck_assert_int_eq(ferry_sock_close(l), 0);
}

/* Every call on @fd, no socket: the failure the shim relies on. */
static void tss_expect_none(int fd, int err)
{
	struct sock_fork_mark mark = { 0, 0 };
	struct sock_shim_tcp view;
	unsigned int gen = 7;
	bool led = true;
	int bytes;

	ck_assert_int_eq(sock_revents_fd(fd, POLLIN | POLLOUT), POLLNVAL);
	errno = 0;
	ck_assert_int_eq(sock_shim_wait_fd(fd), -1);
	ck_assert_int_eq(errno, err);
	ck_assert_int_eq(sock_shim_sleep_prepare(fd, &led), -1);
	ck_assert(!led);
	ck_assert_int_eq(sock_shim_arm(fd, &gen), -1);
	ck_assert_uint_eq(gen, 7);
	ck_assert(!sock_shim_armed_since(fd, gen));
	sock_shim_sleep_done(fd);
	sock_shim_drain(fd);
	sock_shim_disarm(fd);
	ck_assert(!sock_shim_listen_visit(fd));
	ck_assert_int_eq(sock_shim_listen_ready(fd), -1);
	ck_assert_int_eq(sock_shim_outq(fd, &bytes), -1);
	ck_assert_int_eq(errno, EBADF);
	errno = 0;
	ck_assert_int_eq(sock_shim_tcp_view(fd, &view), -1);
	ck_assert_int_eq(errno, err);
	ck_assert_int_eq(sock_shim_fork_quiet(fd, &mark), -1);
	ck_assert(!sock_shim_fork_drove(fd, &mark));
}

START_TEST(test_shim_no_socket)
{
	int p[2];

	tss_expect_none(-1, EBADF);
	tss_expect_none(1 << 28, EBADF);
	ck_assert_int_eq(pipe(p), 0);
	tss_expect_none(p[0], ENOTSOCK);
	close(p[0]);
	close(p[1]);
	tss_expect_none(p[0], EBADF);
}
END_TEST

START_TEST(test_shim_tcp_view_and_outq)
{
	struct sock_shim_tcp view;
	int a, b, bytes = -1;

	tss_pair(&a, &b);
	ck_assert_int_eq(sock_shim_tcp_view(a, &view), 0);
	ck_assert(view.connected);
	ck_assert_uint_gt(view.rbuf_size, 0);
	ck_assert_uint_gt(view.sq_size, 0);
	ck_assert_int_eq(sock_shim_outq(a, &bytes), 0);
	ck_assert_int_ge(bytes, 0);
	ck_assert_int_eq(sock_shim_outq(a, NULL), -1);
	ck_assert_int_eq(errno, EFAULT);
	ck_assert_int_eq(sock_revents_fd(b, POLLIN), 0);
	ck_assert(sock_revents_fd(a, POLLOUT) & POLLOUT);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
}
END_TEST

/* The poll(2) path: lead and arm, sleep on the descriptor, be woken. */
START_TEST(test_shim_sleep_wakes_on_data)
{
	struct pollfd p = { .events = POLLIN };
	bool led = false;
	char c = 'x';
	int a, b;

	tss_pair(&a, &b);
	p.fd = sock_shim_sleep_prepare(b, &led);
	ck_assert_int_ge(p.fd, 0);
	ck_assert(led);
	ck_assert_int_eq(poll(&p, 1, 0), 0);	/* nothing yet: the send wakes it */
	ck_assert_int_eq(ferry_sock_send(a, &c, 1, 0), 1);
	ck_assert_int_eq(poll(&p, 1, TU_WAIT_MS), 1);
	sock_shim_sleep_done(b);
	ck_assert(sock_revents_fd(b, POLLIN) & POLLIN);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
}
END_TEST

/* The epoll_wait path: an arm stays good until a drain spends it. */
START_TEST(test_shim_arm_spent_by_drain)
{
	struct pollfd p = { .events = POLLIN };
	unsigned int gen = 0;
	char c = 'x';
	int a, b;

	tss_pair(&a, &b);
	ck_assert_int_eq(sock_shim_arm(b, &gen), 0);
	ck_assert(sock_shim_armed_since(b, gen));
	p.fd = sock_shim_wait_fd(b);
	ck_assert_int_ge(p.fd, 0);
	ck_assert_int_eq(poll(&p, 1, 0), 0);	/* nothing yet: the send raises it */
	ck_assert_int_eq(ferry_sock_send(a, &c, 1, 0), 1);
	ck_assert_int_eq(poll(&p, 1, TU_WAIT_MS), 1);
	ck_assert(sock_shim_armed_since(b, gen));
	sock_shim_drain(b);
	ck_assert(!sock_shim_armed_since(b, gen));
	sock_shim_disarm(b);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
}
END_TEST

START_TEST(test_shim_listener_ready)
{
	struct pollfd p = { .events = POLLIN };
	uint16_t port;
	int l = tss_listen(&port), c, s, waited;

	ck_assert_int_eq(sock_shim_listen_ready(l), 0);
	ck_assert(!sock_shim_listen_visit(l));
	c = tss_connect(port);
	p.fd = sock_shim_wait_fd(l);
	ck_assert_int_ge(p.fd, 0);
	for (waited = 0; waited < TU_WAIT_MS && !sock_shim_listen_visit(l); waited += 10)
		poll(&p, 1, 10);
	ck_assert_int_eq(sock_shim_listen_ready(l), 1);
	s = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(s, 0);
	ck_assert_int_eq(sock_shim_listen_ready(l), 0);
	ck_assert_int_eq(ferry_sock_close(c), 0);
	ck_assert_int_eq(ferry_sock_close(s), 0);
	ck_assert_int_eq(ferry_sock_close(l), 0);
}
END_TEST

/* fork.c's question at close: did this process move the connection? */
START_TEST(test_shim_fork_mark)
{
	struct sock_fork_mark ma, mb;
	char c = 'x';
	int a, b;

	tss_pair(&a, &b);
	ck_assert_int_eq(sock_shim_fork_quiet(a, &ma), 0);
	ck_assert_int_eq(sock_shim_fork_quiet(b, &mb), 0);
	ck_assert(!sock_shim_fork_drove(a, &ma));
	ck_assert(!sock_shim_fork_drove(b, &mb));
	ck_assert_int_eq(ferry_sock_send(a, &c, 1, 0), 1);
	ck_assert(sock_shim_fork_drove(a, &ma));
	ck_assert_int_eq(ferry_sock_recv(b, &c, 1, 0), 1);
	ck_assert(sock_shim_fork_drove(b, &mb));
	ck_assert_int_eq(ferry_sock_close(a), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
}
END_TEST

/* A kernel TCP listener on the test address; its port in *@port_p. */
static int tss_kernel_listen(uint16_t *port_p)
{
	struct sockaddr_storage ss;
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	int k = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), on = 1;

	ck_assert_int_ge(k, 0);
	ck_assert_int_eq(setsockopt(k, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)), 0);
	cmt_addr(&ss, AF_INET, 0);
	ck_assert_int_eq(bind(k, (struct sockaddr *)&ss, sizeof(sin)), 0);
	ck_assert_int_eq(listen(k, 4), 0);
	ck_assert_int_eq(getsockname(k, (struct sockaddr *)&sin, &len), 0);
	*port_p = ntohs(sin.sin_port);
	return k;
}

/* A plain TCP client of @port that has sent @len bytes of @msg. */
static int tss_kernel_client(uint16_t port, const char *msg, size_t len)
{
	struct sockaddr_storage ss;
	int p = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(p, 0);
	cmt_addr(&ss, AF_INET, port);
	ck_assert_int_eq(connect(p, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)), 0);
	ck_assert_int_eq(write(p, msg, len), (ssize_t)len);
	return p;
}

/* @a's next @len bytes are @msg: an offer that let go read nothing. */
static void tss_expect_unread(int a, const char *msg, size_t len)
{
	char buf[64];

	ck_assert_uint_le(len, sizeof(buf));
	ck_assert_int_eq(recv(a, buf, len, MSG_WAITALL), (ssize_t)len);
	ck_assert_mem_eq(buf, msg, len);
}

/*
 * FERRY_TRANSPORT=tcp: a ferry listener on a port the program's kernel
 * socket holds (as the shim makes it) is offered what that socket
 * accepts.  A plain client (an HTTP request) and one that stalls inside
 * the MPA key stay the caller's, unread; a ferry client is taken and
 * comes to the listener's queue, and carries data.
 */
START_TEST(test_shim_offer_tcp)
{
	static const char get[] = "GET / HTTP/1.0\r\n\r\n", stall[] = "MPA ID Req";
	struct sockaddr_storage ss;
	uint16_t port;
	int k, l, p, a, c, b;
	char buf[8];

	setenv("FERRY_TRANSPORT", "tcp", 1);
	k = tss_kernel_listen(&port);
	l = ferry_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	ck_assert_int_ge(l, 0);
	cmt_addr(&ss, AF_INET, port);
	ck_assert_int_eq(ferry_sock_bind(l, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)), 0);
	ck_assert_int_eq(sock_listen_adopt(l, 4, k, -1), 0);

	p = tss_kernel_client(port, get, sizeof(get) - 1);
	a = accept(k, NULL, NULL);
	ck_assert_int_ge(a, 0);
	ck_assert_int_eq(sock_listen_offer(l, a), 0);
	tss_expect_unread(a, get, sizeof(get) - 1);
	close(a);
	close(p);

	p = tss_kernel_client(port, stall, sizeof(stall) - 1);
	a = accept(k, NULL, NULL);
	ck_assert_int_ge(a, 0);
	ck_assert_int_eq(sock_listen_offer(l, a), 0);	/* after the offer's wait */
	tss_expect_unread(a, stall, sizeof(stall) - 1);
	close(a);
	close(p);

	c = tss_connect(port);
	a = accept(k, NULL, NULL);
	ck_assert_int_ge(a, 0);
	ck_assert_int_eq(sock_listen_offer(l, a), 1);
	ck_assert(tss_wait_revents(l, POLLIN));
	b = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(b, 0);
	ck_assert(tss_wait_revents(c, POLLOUT));
	ck_assert_int_eq(ferry_sock_fcntl(c, F_SETFL, 0), 0);
	ck_assert_int_eq(ferry_sock_write(c, "ferry", 5), 5);
	ck_assert_int_eq(ferry_sock_recv(b, buf, 5, MSG_WAITALL), 5);
	ck_assert_mem_eq(buf, "ferry", 5);

	ck_assert_int_eq(ferry_sock_close(c), 0);
	ck_assert_int_eq(ferry_sock_close(b), 0);
	ck_assert_int_eq(ferry_sock_close(l), 0);
	close(k);
	unsetenv("FERRY_TRANSPORT");
}
END_TEST

/* Unforced, nothing is offered: the client stays the caller's at once. */
START_TEST(test_shim_offer_unforced)
{
	static const char hello[] = "MPA ID Req Frame";
	uint16_t port;
	int k, l, p, a;

	unsetenv("FERRY_TRANSPORT");
	l = tss_listen(&port);
	k = tss_kernel_listen(&port);
	p = tss_kernel_client(port, hello, sizeof(hello) - 1);
	a = accept(k, NULL, NULL);
	ck_assert_int_ge(a, 0);
	ck_assert_int_eq(sock_listen_offer(l, a), 0);
	tss_expect_unread(a, hello, sizeof(hello) - 1);
	errno = 0;
	ck_assert_int_eq(sock_listen_offer(-1, a), -1);
	close(a);
	close(p);
	close(k);
	ck_assert_int_eq(ferry_sock_close(l), 0);
}
END_TEST

Suite *sock_shim_suite(void)
{
	Suite *s = suite_create("sock_shim");
	TCase *tc = tcase_create("door");

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_shim_no_socket);
	tcase_add_test(tc, test_shim_tcp_view_and_outq);
	tcase_add_test(tc, test_shim_sleep_wakes_on_data);
	tcase_add_test(tc, test_shim_arm_spent_by_drain);
	tcase_add_test(tc, test_shim_listener_ready);
	tcase_add_test(tc, test_shim_fork_mark);
	tcase_add_test(tc, test_shim_offer_tcp);
	tcase_add_test(tc, test_shim_offer_unforced);
	suite_add_tcase(s, tc);
	return s;
}
