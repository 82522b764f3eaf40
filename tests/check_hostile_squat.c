/*
 * check_hostile_squat.c - a user who binds the rendezvous names of a port
 * it does not own (issue 13: "hijack ports it could never bind").
 *
 * Abstract AF_UNIX names have no owner, so a squatter of another uid
 * (a forked child that became nobody) can bind any of them.  A ferry
 * client must only ever reach the process owning the TCP port:
 *
 *  - squat_first: the squatter binds every name the rendezvous scheme of
 *    ferry 1 derived from address and port, then a real ferry listener
 *    (root) takes the port: it must still get a ferry listener, and a
 *    client's bytes must reach it and come back;
 *  - tcp_owner: the port's owner is a plain kernel TCP listener: a ferry
 *    connect is refused (there the preload shim goes TCP);
 *  - privileged: names for port 81, where nothing listens: a connect is
 *    refused, and the squatter's own ferry listener there fails as its
 *    TCP bind would (EACCES);
 *  - guessed: the squatter holds the exact rendezvous name of root's
 *    listening TCP socket (as if it had guessed it): the client checks
 *    the listener's uid, and is refused.
 *
 * Each time the squatter must have received no request: not one byte.
 * Run as root only (the squatter needs another uid); a skip otherwise.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <ferry/socket.h>

#include "check_suites.h"
#include "cm_shm.h"
#include "cmtest.h"
#include "testutil.h"

#define SQ_NOBODY	65534
#define SQ_MAX_NAMES	8
#define SQ_MAX_CONNS	16
#define SQ_PRIV_PORT	81

/* Say why a test does not run here, and leave it (Check has no skip). */
#define SQ_SKIP(why) do { \
	printf("SKIP %s: %s\n", __func__, why); \
	fflush(stdout); \
	return; \
	} while (0)

/* What the squatter saw, told to the test at the end. */
struct sq_report {
	int bound;		/* names it holds */
	int conns;		/* connections it accepted */
	long bytes;		/* bytes they brought: a request, if any */
	int listen_errno;	/* its own ferry listener on a privileged port */
};

/* The squatter: its process, and the socket to it. */
struct sq_child {
	pid_t pid;
	int ctl;
};

/* --- names --- */

static void sq_name_add(struct sockaddr_un *names, socklen_t *lens, int *n,
			const char *fmt, const char *family, const char *addr,
			unsigned int port)
{
	struct sockaddr_un *un = &names[*n];
	int len;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	len = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, fmt, family, addr, port);
	lens[(*n)++] = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
}

/* Every name ferry 1 would look for at 127.0.0.1 @port, and the same
 * names under a v2 prefix, in case a scheme derived them again. */
static int sq_port_names(uint16_t port, struct sockaddr_un *names, socklen_t *lens)
{
	static const char *const fmts[] = { "ferry/cm/v1/%s/%s/%u", "ferry/cm/v2/%s/%s/%u" };
	size_t i;
	int n = 0;

	for (i = 0; i < FERRY_ARRAY_SIZE(fmts); i++) {
		sq_name_add(names, lens, &n, fmts[i], "inet", "127.0.0.1", port);
		sq_name_add(names, lens, &n, fmts[i], "inet", "0.0.0.0", port);
		sq_name_add(names, lens, &n, fmts[i], "inet6", "::", port);
	}
	return n;
}

/* --- the squatter (a forked child, nobody) --- */

static bool sq_become_nobody(void)
{
	return setgroups(0, NULL) == 0 && setresgid(SQ_NOBODY, SQ_NOBODY, SQ_NOBODY) == 0 &&
	       setresuid(SQ_NOBODY, SQ_NOBODY, SQ_NOBODY) == 0;
}

/* A ferry listener of its own on the privileged port: the errno it gets. */
static int sq_try_privileged(void)
{
	struct sockaddr_storage ss;
	int l = ferry_socket(AF_INET, SOCK_STREAM, 0), e = 0;

	cmt_addr(&ss, AF_INET, SQ_PRIV_PORT);
	if (l < 0)
		return errno;
	if (ferry_sock_bind(l, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)) < 0 ||
	    ferry_sock_listen(l, 4) < 0)
		e = errno;
	ferry_sock_close(l);
	return e;
}

static int sq_bind_names(const struct sockaddr_un *names, const socklen_t *lens, int n,
			 int *fds)
{
	int i, bound = 0;

	for (i = 0; i < n; i++) {
		fds[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0);
		if (fds[i] >= 0 && bind(fds[i], (const struct sockaddr *)&names[i], lens[i]) == 0 &&
		    listen(fds[i], 16) == 0)
			bound++;
	}
	return bound;
}

/* Accept what waits on @fds (non-blocking), keeping it for the count. */
static void sq_take(const int *fds, int n, int *conns, struct sq_report *r)
{
	int i, c;

	for (i = 0; i < n; i++)
		while (r->conns < SQ_MAX_CONNS && (c = accept(fds[i], NULL, NULL)) >= 0)
			conns[r->conns++] = c;
}

/* Take every connection until the test says stop; count what came. */
static void sq_serve(int ctl, const int *fds, int n, struct sq_report *r)
{
	struct pollfd p[SQ_MAX_NAMES + 1];
	int conns[SQ_MAX_CONNS], i;
	char buf[4096];

	for (;;) {
		for (i = 0; i < n; i++)
			p[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
		p[n] = (struct pollfd){ .fd = ctl, .events = POLLIN };
		i = poll(p, (nfds_t)n + 1, TU_WAIT_MS * 3);
		sq_take(fds, n, conns, r);
		if (i <= 0 || p[n].revents)
			break;
	}
	for (i = 0; i < r->conns; i++) {
		ssize_t got;

		while ((got = recv(conns[i], buf, sizeof(buf), MSG_DONTWAIT)) > 0)
			r->bytes += got;
	}
}

static void sq_child_main(int ctl, const struct sockaddr_un *names, const socklen_t *lens,
			  int n, bool privileged)
{
	struct sq_report r = { 0 };
	int fds[SQ_MAX_NAMES];

	if (!sq_become_nobody())
		_exit(2);
	if (privileged)
		r.listen_errno = sq_try_privileged();
	r.bound = sq_bind_names(names, lens, n, fds);
	if (write(ctl, &r, sizeof(r)) != sizeof(r))	/* ready */
		_exit(3);
	sq_serve(ctl, fds, n, &r);
	if (write(ctl, &r, sizeof(r)) != sizeof(r))
		_exit(3);
	_exit(0);
}

/*
 * Fork the squatter on @names; returns once it holds them all.  Before
 * the test process uses ferry: the child may use it (privileged) then.
 */
static void sq_start(struct sq_child *sq, const struct sockaddr_un *names,
		     const socklen_t *lens, int n, bool privileged, struct sq_report *r)
{
	struct pollfd p;
	int sv[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	sq->pid = fork();
	ck_assert_int_ge(sq->pid, 0);
	if (sq->pid == 0) {
		close(sv[0]);
		sq_child_main(sv[1], names, lens, n, privileged);
	}
	close(sv[1]);
	sq->ctl = sv[0];
	p = (struct pollfd){ .fd = sq->ctl, .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, TU_WAIT_MS), 1);
	ck_assert_int_eq(read(sq->ctl, r, sizeof(*r)), sizeof(*r));
	ck_assert_int_eq(r->bound, n);
}

/* Stop the squatter: what it saw. */
static void sq_stop(struct sq_child *sq, struct sq_report *r)
{
	struct pollfd p = { .fd = sq->ctl, .events = POLLIN };
	int status;

	ck_assert_int_eq(write(sq->ctl, "q", 1), 1);
	ck_assert_int_eq(poll(&p, 1, TU_WAIT_MS), 1);
	ck_assert_int_eq(read(sq->ctl, r, sizeof(*r)), sizeof(*r));
	close(sq->ctl);
	ck_assert_int_eq(waitpid(sq->pid, &status, 0), sq->pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* --- the test process --- */

/* A port no TCP socket holds now (the kernel's pick), on the test address. */
static uint16_t sq_free_port(void)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	uint16_t port;

	ck_assert_int_ge(fd, 0);
	cmt_addr(&ss, AF_INET, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
	port = cm_addr_port((struct sockaddr *)&ss);
	close(fd);	/* never listened: no TIME_WAIT, free at once */
	return port;
}

/* A non-blocking ferry connect to the test address, @port. */
static int sq_connect_start(uint16_t port)
{
	struct sockaddr_storage ss;
	int c = ferry_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), r;

	ck_assert_int_ge(c, 0);
	cmt_addr(&ss, AF_INET, port);
	r = ferry_sock_connect(c, (struct sockaddr *)&ss, sizeof(struct sockaddr_in));
	ck_assert(r == 0 || errno == EINPROGRESS);
	return c;
}

/* How the connect of @c ended (bounded wait): 0 or its errno. */
static int sq_connect_result(int c)
{
	struct pollfd p = { .fd = c, .events = POLLOUT };
	socklen_t len = sizeof(int);
	int err = -1;

	ck_assert_int_eq(ferry_sock_poll(&p, 1, TU_WAIT_MS), 1);
	ck_assert_int_eq(ferry_sock_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	return err;
}

static void sq_expect_refused(uint16_t port)
{
	int c = sq_connect_start(port);

	ck_assert_int_eq(sq_connect_result(c), ECONNREFUSED);
	ck_assert_int_eq(ferry_sock_close(c), 0);
}

static bool sq_runnable(void)
{
	return geteuid() == 0 && tu_on_shm() && !getenv("FERRY_TEST_ADDR");
}

#define SQ_NEEDS_ROOT() do { \
	if (!sq_runnable()) \
		SQ_SKIP("needs root (a squatter of another uid) and shm on loopback"); \
	} while (0)

/* Connect to listener @l: one round trip, the accepted end then closed. */
static void sq_exchange(uint16_t port, int l)
{
	char buf[16] = { 0 };
	struct pollfd p = { .fd = l, .events = POLLIN };
	int c = sq_connect_start(port), s;

	ck_assert_msg(ferry_sock_poll(&p, 1, TU_WAIT_MS) == 1, "no connection reached root");
	s = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(s, 0);
	ck_assert_int_eq(sq_connect_result(c), 0);
	ck_assert_int_eq(ferry_sock_fcntl(c, F_SETFL, 0), 0);
	ck_assert_int_eq(ferry_sock_send(c, "to root", 8, 0), 8);
	ck_assert_int_eq(ferry_sock_recv(s, buf, 8, MSG_WAITALL), 8);
	ck_assert_str_eq(buf, "to root");
	ck_assert_int_eq(ferry_sock_send(s, "from root", 10, 0), 10);
	ck_assert_int_eq(ferry_sock_recv(c, buf, 10, MSG_WAITALL), 10);
	ck_assert_str_eq(buf, "from root");
	ck_assert_int_eq(ferry_sock_close(s), 0);
	ck_assert_int_eq(ferry_sock_close(c), 0);
}

START_TEST(test_squat_first)
{
	struct sockaddr_un names[SQ_MAX_NAMES];
	socklen_t lens[SQ_MAX_NAMES];
	struct sockaddr_storage ss;
	struct sq_report r;
	struct sq_child sq;
	uint16_t port;
	int l;

	SQ_NEEDS_ROOT();
	port = sq_free_port();
	sq_start(&sq, names, lens, sq_port_names(port, names, lens), false, &r);
	l = ferry_socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(l, 0);
	cmt_addr(&ss, AF_INET, port);
	ck_assert_int_eq(ferry_sock_bind(l, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)), 0);
	ck_assert_msg(ferry_sock_listen(l, 4) == 0, "listen after a squatter: %s",
		      strerror(errno));
	sq_exchange(port, l);
	ck_assert_int_eq(ferry_sock_close(l), 0);
	sq_stop(&sq, &r);
	ck_assert_int_eq(r.conns, 0);
	ck_assert_int_eq(r.bytes, 0);
}
END_TEST

START_TEST(test_squat_tcp_owner)
{
	struct sockaddr_un names[SQ_MAX_NAMES];
	socklen_t lens[SQ_MAX_NAMES];
	struct sockaddr_storage ss;
	struct sq_report r;
	struct sq_child sq;
	uint16_t port;
	int t;

	SQ_NEEDS_ROOT();
	port = sq_free_port();
	sq_start(&sq, names, lens, sq_port_names(port, names, lens), false, &r);
	t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(t, 0);
	cmt_addr(&ss, AF_INET, port);
	ck_assert_int_eq(bind(t, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)), 0);
	ck_assert_int_eq(listen(t, 4), 0);
	sq_expect_refused(port);
	close(t);
	sq_stop(&sq, &r);
	ck_assert_int_eq(r.conns, 0);
	ck_assert_int_eq(r.bytes, 0);
}
END_TEST

static bool sq_port_privileged(uint16_t port)
{
	FILE *f = fopen("/proc/sys/net/ipv4/ip_unprivileged_port_start", "r");
	unsigned int start = 1024;

	if (f) {
		if (fscanf(f, "%u", &start) != 1)
			start = 1024;
		fclose(f);
	}
	return port < start;
}

START_TEST(test_squat_privileged)
{
	struct sockaddr_un names[SQ_MAX_NAMES];
	socklen_t lens[SQ_MAX_NAMES];
	struct sq_report r;
	struct sq_child sq;

	SQ_NEEDS_ROOT();
	if (!sq_port_privileged(SQ_PRIV_PORT))
		SQ_SKIP("port 81 is not privileged here (ip_unprivileged_port_start)");
	sq_start(&sq, names, lens, sq_port_names(SQ_PRIV_PORT, names, lens), true, &r);
	ck_assert_int_eq(r.listen_errno, EACCES);
	sq_expect_refused(SQ_PRIV_PORT);
	sq_stop(&sq, &r);
	ck_assert_int_eq(r.conns, 0);
	ck_assert_int_eq(r.bytes, 0);
}
END_TEST

/* ferry's log (stderr) caught in a file for a while. */
struct sq_log {
	FILE *file;
	int saved;
};

static void sq_log_begin(struct sq_log *l)
{
	fflush(stderr);
	l->file = tmpfile();
	ck_assert_ptr_nonnull(l->file);
	l->saved = dup(STDERR_FILENO);
	ck_assert_int_ge(l->saved, 0);
	ck_assert_int_ge(dup2(fileno(l->file), STDERR_FILENO), 0);
}

/* Stop catching; what was logged, in @buf. */
static void sq_log_end(struct sq_log *l, char *buf, size_t len)
{
	size_t n;

	ck_assert_int_ge(dup2(l->saved, STDERR_FILENO), 0);
	close(l->saved);
	rewind(l->file);
	n = fread(buf, 1, len - 1, l->file);
	buf[n] = '\0';
	fclose(l->file);
}

START_TEST(test_squat_guessed)
{
	struct sockaddr_un name;
	struct sockaddr_storage ss;
	struct shm_cm_owner owner;
	struct sq_report r;
	struct sq_child sq;
	char warned[2048], want[64];
	struct sq_log log;
	socklen_t len;
	int t;

	SQ_NEEDS_ROOT();
	t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(t, 0);
	cmt_addr(&ss, AF_INET, 0);
	ck_assert_int_eq(bind(t, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)), 0);
	ck_assert_int_eq(shm_cm_owner_of_fd(t, &owner), 0);
	shm_cm_name(&owner, &name, &len);
	sq_start(&sq, &name, &len, 1, false, &r);
	ck_assert_int_eq(listen(t, 4), 0);
	sq_log_begin(&log);
	sq_expect_refused(owner.port);
	sq_log_end(&log, warned, sizeof(warned));
	close(t);
	sq_stop(&sq, &r);
	snprintf(want, sizeof(want), "held by uid %d pid %d", SQ_NOBODY, (int)sq.pid);
	ck_assert_msg(strstr(warned, "warn: ") && strstr(warned, want),
		      "no warning naming the squatter (%s) in: %s", want, warned);
	/* It saw the client look at it, and leave before saying anything. */
	ck_assert_int_eq(r.conns, 1);
	ck_assert_int_eq(r.bytes, 0);
}
END_TEST

Suite *hostile_squat_suite(void)
{
	Suite *s = suite_create("hostile_squat");
	TCase *tc = tcase_create("squatter");

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_squat_first);
	tcase_add_test(tc, test_squat_tcp_owner);
	tcase_add_test(tc, test_squat_privileged);
	tcase_add_test(tc, test_squat_guessed);
	suite_add_tcase(s, tc);
	return s;
}
