/*
 * preload_semantics.c - what a program sees of its sockets under the
 * preload shim: run by tests/check_preload.sh with the shim in LD_PRELOAD.
 *
 * Written with the plain BSD calls only, as any program; each case checks
 * first that the connection is really ferry's (getsockopt SOL_FERRY
 * FERRY_TRANSPORT_OPT answers "shm"), or really the kernel's where the
 * case is about falling back.  Prints one line per case; exit status 0
 * when all passed, 1 otherwise (77 when the shim is not loaded).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SOL_FERRY_ 0x10000
#define FERRY_TRANSPORT_OPT_ 0x100

static int failures;
static const char *current;

static void fail(int line, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "preload_semantics: %s: line %d: ", current, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));
	failures++;
}

#define CHECK(cond, ...) \
	do { if (!(cond)) { fail(__LINE__, __VA_ARGS__); return; } } while (0)

/* "shm", "verbs", or "" for a kernel socket. */
static const char *transport(int fd)
{
	static char buf[16];
	socklen_t len = sizeof(buf);

	memset(buf, 0, sizeof(buf));
	if (getsockopt(fd, SOL_FERRY_, FERRY_TRANSPORT_OPT_, buf, &len) < 0)
		return "";
	return buf;
}

/* A listener on 127.0.0.1, port chosen by the kernel; @kernel_only: made
 * with the raw system call, which the shim does not see. */
static int listener(struct sockaddr_in *sin, bool kernel_only)
{
	socklen_t len = sizeof(*sin);
	int fd, on = 1;

	fd = kernel_only ? (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0) :
			   socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)sin, sizeof(*sin)) < 0 || listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *)sin, &len) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int dial(const struct sockaddr_in *sin, int flags)
{
	int fd = socket(AF_INET, SOCK_STREAM | flags, 0);

	if (fd < 0)
		return -1;
	if (connect(fd, (const struct sockaddr *)sin, sizeof(*sin)) < 0 && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

/* A connected pair: @c the client end, @a the accepted end. */
static bool pair(int *l, int *c, int *a)
{
	struct sockaddr_in sin;

	*l = listener(&sin, false);
	if (*l < 0)
		return false;
	*c = dial(&sin, 0);
	*a = *c < 0 ? -1 : accept(*l, NULL, NULL);
	return *c >= 0 && *a >= 0;
}

static void unpair(int l, int c, int a)
{
	close(a);
	close(c);
	close(l);
}

static int wait_events(int ep, uint32_t *ev, int ms)
{
	struct epoll_event e;
	int n = epoll_wait(ep, &e, 1, ms);

	if (n == 1 && ev)
		*ev = e.events;
	return n;
}

/* --- the cases --- */

static void case_connect(void)
{
	struct sockaddr_in sin, peer, name;
	socklen_t len = sizeof(peer);
	int l, c, a;

	l = listener(&sin, false);
	CHECK(l >= 0, "listener");
	c = dial(&sin, 0);
	CHECK(c >= 0, "connect");
	a = accept(l, NULL, NULL);
	CHECK(a >= 0, "accept");
	CHECK(!strcmp(transport(c), "shm"), "client transport '%s'", transport(c));
	CHECK(!strcmp(transport(a), "shm"), "accepted transport '%s'", transport(a));
	CHECK(getpeername(c, (struct sockaddr *)&peer, &len) == 0, "getpeername");
	CHECK(peer.sin_port == sin.sin_port && peer.sin_addr.s_addr == sin.sin_addr.s_addr,
	      "getpeername: not the listener's address");
	len = sizeof(name);
	CHECK(getsockname(a, (struct sockaddr *)&name, &len) == 0, "getsockname");
	CHECK(name.sin_port == sin.sin_port, "getsockname: port %u, listener %u",
	      ntohs(name.sin_port), ntohs(sin.sin_port));
	unpair(l, c, a);
}

static void case_data(void)
{
	char buf[1000], got[1000];
	int l, c, a, n = -1;

	CHECK(pair(&l, &c, &a), "pair");
	memset(buf, 'x', sizeof(buf));
	CHECK(send(c, buf, sizeof(buf), 0) == (ssize_t)sizeof(buf), "send");
	struct pollfd p = { .fd = a, .events = POLLIN };
	CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLIN), "poll POLLIN");
	CHECK(ioctl(a, FIONREAD, &n) == 0 && n == (int)sizeof(buf), "FIONREAD %d", n);
	CHECK(recv(a, got, 10, MSG_PEEK) == 10, "MSG_PEEK");
	CHECK(recv(a, got, sizeof(got), MSG_WAITALL) == (ssize_t)sizeof(got) &&
	      !memcmp(buf, got, sizeof(got)), "recv");
	CHECK(recv(a, got, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN, "empty: EAGAIN");
	unpair(l, c, a);
}

static void case_epoll_lt(void)
{
	int l, c, a, ep;
	uint32_t ev = 0;
	char b[4];
	struct epoll_event e = { .events = EPOLLIN, .data.u64 = 42 };

	CHECK(pair(&l, &c, &a), "pair");
	ep = epoll_create1(0);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, a, &e) == 0, "EPOLL_CTL_ADD");
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, a, &e) < 0 && errno == EEXIST, "second ADD: EEXIST");
	CHECK(wait_events(ep, NULL, 0) == 0, "nothing yet");
	CHECK(send(c, "abc", 3, 0) == 3, "send");
	CHECK(wait_events(ep, &ev, 5000) == 1 && (ev & EPOLLIN), "EPOLLIN");
	e.data.u64 = 0;
	CHECK(epoll_wait(ep, &e, 1, 0) == 1 && e.data.u64 == 42, "level: again, with its data");
	CHECK(recv(a, b, 3, 0) == 3, "recv");
	CHECK(wait_events(ep, NULL, 0) == 0, "drained: nothing");
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, a, NULL) == 0, "DEL");
	CHECK(send(c, "abc", 3, 0) == 3, "send");
	CHECK(wait_events(ep, NULL, 100) == 0, "deleted: nothing");
	close(ep);
	unpair(l, c, a);
}

static void case_epoll_et_oneshot(void)
{
	int l, c, a, ep;
	uint32_t ev = 0;
	struct epoll_event e = { .events = EPOLLIN | EPOLLET };

	CHECK(pair(&l, &c, &a), "pair");
	ep = epoll_create1(0);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, a, &e) == 0, "ADD ET");
	CHECK(send(c, "a", 1, 0) == 1, "send");
	CHECK(wait_events(ep, &ev, 5000) == 1, "edge");
	CHECK(wait_events(ep, NULL, 0) == 0, "no new edge without new data");
	CHECK(send(c, "b", 1, 0) == 1, "send");
	CHECK(wait_events(ep, &ev, 5000) == 1, "new data: new edge");
	e.events = EPOLLIN | EPOLLONESHOT;
	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, a, &e) == 0, "MOD ONESHOT");
	CHECK(wait_events(ep, &ev, 5000) == 1, "oneshot: once");
	CHECK(send(c, "c", 1, 0) == 1, "send");
	CHECK(wait_events(ep, NULL, 100) == 0, "oneshot: disabled");
	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, a, &e) == 0, "MOD re-arms");
	CHECK(wait_events(ep, &ev, 5000) == 1, "oneshot: again after MOD");
	close(ep);
	unpair(l, c, a);
}

static long thread_cpu_ms(void)
{
	struct rusage r;

	getrusage(RUSAGE_THREAD, &r);
	return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000 +
	       (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1000;
}

/*
 * A ferry socket's number is its connection's socket, which polls ready
 * for good once the peer hangs up: a ONESHOT item disabled meanwhile must
 * not wake the shim's hidden set over and over (a wait that spins instead
 * of sleeping), and MOD must still report the hang-up.
 */
static void case_oneshot_hangup(void)
{
	int l, c, a, ep;
	uint32_t ev = 0;
	long cpu;
	struct epoll_event e = { .events = EPOLLIN | EPOLLONESHOT };

	CHECK(pair(&l, &c, &a), "pair");
	ep = epoll_create1(0);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, a, &e) == 0, "ADD ONESHOT");
	CHECK(send(c, "h", 1, 0) == 1, "send");
	CHECK(wait_events(ep, &ev, 5000) == 1, "oneshot: once");
	close(c);	/* the peer hangs up while the item is disabled */
	cpu = thread_cpu_ms();
	CHECK(wait_events(ep, NULL, 500) == 0, "disabled: nothing to report");
	cpu = thread_cpu_ms() - cpu;
	CHECK(cpu < 250, "the wait slept, not spun: %ld ms of CPU in 500 ms", cpu);
	e.events = EPOLLIN | EPOLLRDHUP;
	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, a, &e) == 0, "MOD");
	CHECK(wait_events(ep, &ev, 5000) == 1 && (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)),
	      "the hang-up after MOD (%#x)", ev);
	close(ep);
	close(a);
	close(l);
}

static void case_rdhup_eof(void)
{
	int l, c, a, ep;
	uint32_t ev = 0;
	char b;
	struct epoll_event e = { .events = EPOLLIN | EPOLLRDHUP };

	CHECK(pair(&l, &c, &a), "pair");
	ep = epoll_create1(0);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, a, &e) == 0, "ADD");
	CHECK(send(c, "z", 1, 0) == 1 && shutdown(c, SHUT_WR) == 0, "send, SHUT_WR");
	CHECK(recv(a, &b, 1, MSG_WAITALL) == 1 && b == 'z', "data before the shutdown first");
	CHECK(wait_events(ep, &ev, 5000) == 1 && (ev & EPOLLRDHUP), "EPOLLRDHUP (%#x)", ev);
	CHECK(recv(a, &b, 1, 0) == 0, "EOF");
	CHECK(send(a, "y", 1, 0) == 1, "the other direction still open");
	CHECK(recv(c, &b, 1, 0) == 1 && b == 'y', "half-close: reply read");
	close(ep);
	unpair(l, c, a);
}

struct drainer {
	int fd;
	size_t bytes;
};

static void *drain_some(void *arg)
{
	struct drainer *d = arg;
	char buf[65536];
	size_t got = 0;
	ssize_t n;

	while (got < d->bytes && (n = recv(d->fd, buf, sizeof(buf), 0)) > 0)
		got += (size_t)n;
	return NULL;
}

static void case_epollout_full(void)
{
	static char buf[65536];
	struct drainer d;
	pthread_t t;
	size_t sent = 0;
	ssize_t n;
	int l, c, a, ep;
	uint32_t ev = 0;
	struct epoll_event e = { .events = EPOLLOUT };

	CHECK(pair(&l, &c, &a), "pair");
	CHECK(fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
	CHECK(fcntl(c, F_GETFL) & O_NONBLOCK, "F_GETFL shows O_NONBLOCK");
	while ((n = send(c, buf, sizeof(buf), 0)) > 0)
		sent += (size_t)n;
	CHECK(n < 0 && errno == EAGAIN && sent > 0, "fill until EAGAIN (sent %zu)", sent);
	ep = epoll_create1(0);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &e) == 0, "ADD EPOLLOUT");
	CHECK(wait_events(ep, NULL, 0) == 0, "full ring: no EPOLLOUT");
	d.fd = a;
	d.bytes = sent;
	CHECK(pthread_create(&t, NULL, drain_some, &d) == 0, "reader thread");
	CHECK(wait_events(ep, &ev, 10000) == 1 && (ev & EPOLLOUT), "woken when space frees");
	pthread_join(t, NULL);
	close(ep);
	unpair(l, c, a);
}

static void case_poll_select_mixed(void)
{
	int l, c, a, pfd[2];
	fd_set r;
	struct timeval tv = { 5, 0 };

	CHECK(pair(&l, &c, &a), "pair");
	CHECK(pipe(pfd) == 0, "pipe");
	struct pollfd p[2] = { { .fd = pfd[0], .events = POLLIN }, { .fd = a, .events = POLLIN } };
	CHECK(write(pfd[1], "p", 1) == 1, "pipe write");
	CHECK(poll(p, 2, 5000) == 1 && p[0].revents == POLLIN && !p[1].revents,
	      "poll: the pipe only");
	CHECK(send(c, "s", 1, 0) == 1, "send");
	CHECK(poll(p, 2, 5000) == 2 && (p[1].revents & POLLIN), "poll: both");
	FD_ZERO(&r);
	FD_SET(pfd[0], &r);
	FD_SET(a, &r);
	CHECK(select((a > pfd[0] ? a : pfd[0]) + 1, &r, NULL, NULL, &tv) == 2 &&
	      FD_ISSET(a, &r) && FD_ISSET(pfd[0], &r), "select: both");
	close(pfd[0]);
	close(pfd[1]);
	unpair(l, c, a);
}

static void case_nonblocking_connect(void)
{
	struct sockaddr_in sin;
	int l, c, a, err = -1;
	socklen_t len = sizeof(err);

	l = listener(&sin, false);
	CHECK(l >= 0, "listener");
	c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	CHECK(connect(c, (struct sockaddr *)&sin, sizeof(sin)) < 0 && errno == EINPROGRESS,
	      "EINPROGRESS");
	struct pollfd p = { .fd = c, .events = POLLOUT };
	CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLOUT), "writable");
	CHECK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0, "SO_ERROR 0");
	CHECK(connect(c, (struct sockaddr *)&sin, sizeof(sin)) < 0 && errno == EISCONN,
	      "connect again: EISCONN");
	CHECK(!strcmp(transport(c), "shm"), "transport '%s'", transport(c));
	a = accept(l, NULL, NULL);
	CHECK(a >= 0, "accept");
	unpair(l, c, a);
}

static void case_fallback(void)
{
	struct sockaddr_in sin;
	int l, c, a;
	char b;

	l = listener(&sin, true);
	CHECK(l >= 0, "kernel-only listener");
	c = dial(&sin, 0);
	CHECK(c >= 0, "connect falls back");
	a = accept(l, NULL, NULL);
	CHECK(a >= 0, "accept");
	CHECK(!strcmp(transport(c), ""), "client is kernel TCP, not '%s'", transport(c));
	CHECK(send(c, "k", 1, 0) == 1 && recv(a, &b, 1, 0) == 1 && b == 'k', "data over TCP");
	unpair(l, c, a);
}

static void case_dup(void)
{
	int l, c, a, d;
	char b;

	CHECK(pair(&l, &c, &a), "pair");
	d = dup(c);
	CHECK(d >= 0, "dup");
	CHECK(close(c) == 0, "close the original");
	CHECK(!strcmp(transport(d), "shm"), "the dup is the ferry socket");
	CHECK(send(d, "d", 1, 0) == 1 && recv(a, &b, 1, 0) == 1 && b == 'd', "through the dup");
	CHECK(dup2(d, c) == c, "dup2 back onto the old number");
	CHECK(close(d) == 0, "close the dup");
	CHECK(send(c, "e", 1, 0) == 1 && recv(a, &b, 1, 0) == 1 && b == 'e', "through dup2's");
	CHECK(close(c) == 0, "close the last name");
	CHECK(recv(a, &b, 1, 0) == 0, "the peer sees EOF");
	close(a);
	close(l);
}

static void case_fork(void)
{
	char buf[8] = { 0 };
	int l, c, a, status;
	pid_t pid;

	CHECK(pair(&l, &c, &a), "pair");
	CHECK(send(a, "1234", 4, 0) == 4, "send before fork");
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		/* The child reads what the parent did not and answers. */
		close(a);
		close(l);
		if (recv(c, buf, 4, MSG_WAITALL) != 4 || memcmp(buf, "1234", 4))
			_exit(2);
		if (send(c, "ok", 2, 0) != 2)
			_exit(3);
		close(c);
		_exit(0);
	}
	close(c);	/* the parent's copy: the child's connection lives on */
	CHECK(recv(a, buf, 2, MSG_WAITALL) == 2 && !memcmp(buf, "ok", 2), "child's answer");
	CHECK(recv(a, buf, 1, 0) == 0, "EOF once the child closed");
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && !WEXITSTATUS(status),
	      "child status %#x", status);
	close(a);
	close(l);
}

static volatile sig_atomic_t sigpipes;

static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
}

static void case_epipe(void)
{
	int l, c, a, i, pipes;
	ssize_t n = 0;

	CHECK(pair(&l, &c, &a), "pair");
	signal(SIGPIPE, on_sigpipe);
	/* Our own shutdown: EPIPE, and SIGPIPE unless MSG_NOSIGNAL. */
	CHECK(shutdown(c, SHUT_WR) == 0, "SHUT_WR");
	CHECK(send(c, "x", 1, MSG_NOSIGNAL) < 0 && errno == EPIPE && sigpipes == 0,
	      "after SHUT_WR: EPIPE, no signal with MSG_NOSIGNAL");
	CHECK(write(c, "x", 1) < 0 && errno == EPIPE && sigpipes == 1,
	      "after SHUT_WR: write gets EPIPE and SIGPIPE");
	unpair(l, c, a);
	/* The peer closed: EPIPE (with SIGPIPE) or, as TCP may answer when
	 * data was in flight, ECONNRESET (without). */
	CHECK(pair(&l, &c, &a), "pair");
	close(a);
	for (i = 0; i < 1000 && (n = send(c, "x", 1, MSG_NOSIGNAL)) == 1; i++)
		usleep(1000);
	CHECK(n < 0 && (errno == EPIPE || errno == ECONNRESET), "an error once the peer closed");
	CHECK(sigpipes == 1, "no SIGPIPE with MSG_NOSIGNAL");
	pipes = sigpipes;
	n = write(c, "x", 1);
	CHECK(n < 0 && (errno == EPIPE || errno == ECONNRESET), "write: an error");
	CHECK(errno == EPIPE ? sigpipes == pipes + 1 : sigpipes == pipes,
	      "SIGPIPE exactly with EPIPE");
	signal(SIGPIPE, SIG_DFL);
	close(c);
	close(l);
}

static void case_cross_process_wake(void)
{
	struct sockaddr_in sin;
	int l, a, ep, status, pfd[2];
	uint32_t ev = 0;
	pid_t pid;
	struct epoll_event e = { .events = EPOLLIN };

	/* Fork first: a listener shared by fork before it accepted is the
	 * children's, and TCP's (case fork_listener). */
	CHECK(pipe(pfd) == 0, "pipe");
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		int c;
		char b;

		close(pfd[1]);
		if (read(pfd[0], &sin, sizeof(sin)) != (ssize_t)sizeof(sin))
			_exit(4);
		c = dial(&sin, 0);
		if (c < 0 || recv(c, &b, 1, 0) != 1)
			_exit(2);
		usleep(100000);	/* let the parent fall asleep */
		_exit(send(c, "w", 1, 0) == 1 && recv(c, &b, 1, 0) == 0 ? 0 : 3);
	}
	close(pfd[0]);
	l = listener(&sin, false);
	CHECK(l >= 0, "listener");
	CHECK(write(pfd[1], &sin, sizeof(sin)) == (ssize_t)sizeof(sin), "port to the child");
	close(pfd[1]);
	a = accept(l, NULL, NULL);
	CHECK(a >= 0, "accept");
	CHECK(!strcmp(transport(a), "shm"), "transport '%s'", transport(a));
	ep = epoll_create1(0);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, a, &e) == 0, "ADD");
	CHECK(send(a, "g", 1, 0) == 1, "go");
	CHECK(wait_events(ep, &ev, 20000) == 1 && (ev & EPOLLIN), "woken by the other process");
	close(a);
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && !WEXITSTATUS(status),
	      "child status %#x", status);
	close(ep);
	close(l);
}

/*
 * A listener shared by fork before it ever accepted: the child accepts
 * (nginx's workers).  With FERRY_SHARE_LISTENERS=1 its clients get ferry
 * there, served by the child; without (the default for now), TCP, which
 * every process can serve.  The parent, which holds the listener but
 * never accepts, takes none either way.
 */
static void fork_listener(bool shared)
{
	const char *want = shared ? "shm" : "";	/* "": kernel TCP */
	struct sockaddr_in sin;
	int l, c, a, status;
	pid_t pid;
	char b;

	if (shared)
		setenv("FERRY_SHARE_LISTENERS", "1", 1);
	else
		unsetenv("FERRY_SHARE_LISTENERS");
	l = listener(&sin, false);
	CHECK(l >= 0, "listener");
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		a = accept(l, NULL, NULL);
		_exit(a >= 0 && send(a, "w", 1, 0) == 1 && !strcmp(transport(a), want) ? 0 : 2);
	}
	c = dial(&sin, 0);
	CHECK(c >= 0, "connect");
	CHECK(!strcmp(transport(c), want), "%s, not '%s'", want, transport(c));
	CHECK(recv(c, &b, 1, 0) == 1 && b == 'w', "the child accepted and answered");
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && !WEXITSTATUS(status),
	      "child status %#x", status);
	close(c);
	close(l);
	unsetenv("FERRY_SHARE_LISTENERS");
}

static void case_fork_listener(void)
{
	fork_listener(true);
}

static void case_fork_listener_default(void)
{
	fork_listener(false);
}

/* Descriptors open in this process now. */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3;	/* ".", ".." and the DIR's own */
}

/*
 * Clients that run out of descriptors part-way through ferry's handshake
 * (their fd limit a little above what they hold) fall back to TCP, and
 * the listener, which saw a request whose client vanished, is not stuck:
 * it accepts every one of them.
 */
#define EMFILE_CLIENTS 14

static void case_client_emfile(void)
{
	struct sockaddr_in sin;
	int l, a, i, status, pfd[2];
	pid_t pid;
	char b;

	/* Fork first: a listener shared by fork serves TCP only. */
	CHECK(pipe(pfd) == 0, "pipe");
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		int bad = 0;

		close(pfd[1]);
		if (read(pfd[0], &sin, sizeof(sin)) != (ssize_t)sizeof(sin))
			_exit(4);

		for (i = 0; i < EMFILE_CLIENTS; i++) {
			struct rlimit rl;
			int c;

			getrlimit(RLIMIT_NOFILE, &rl);
			rl.rlim_cur = (rlim_t)open_fds() + 1 + (rlim_t)i;
			setrlimit(RLIMIT_NOFILE, &rl);
			c = dial(&sin, 0);
			rl.rlim_cur = 1024;
			setrlimit(RLIMIT_NOFILE, &rl);
			if (c < 0 || send(c, "e", 1, 0) != 1 || recv(c, &b, 1, 0) != 1)
				bad++;
			close(c);
		}
		_exit(bad ? 2 : 0);
	}
	close(pfd[0]);
	l = listener(&sin, false);
	CHECK(l >= 0, "listener");
	CHECK(write(pfd[1], &sin, sizeof(sin)) == (ssize_t)sizeof(sin), "port to the child");
	close(pfd[1]);
	for (i = 0; i < EMFILE_CLIENTS; i++) {
		a = accept(l, NULL, NULL);
		CHECK(a >= 0, "accept %d", i);
		CHECK(recv(a, &b, 1, 0) == 1 && send(a, &b, 1, 0) == 1, "echo %d", i);
		close(a);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && !WEXITSTATUS(status),
	      "child status %#x", status);
	close(l);
}

/*
 * A control header the program got wrong is the kernel's to refuse
 * (EINVAL), never read past by the shim: a header that claims more
 * descriptors than its buffer holds (a ferry connection's number lies
 * just past it, which the shim would have refused with EOPNOTSUPP), and
 * one shorter than a header.
 */
static void case_rights_malformed(void)
{
	struct {
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} ctl;
		int past[8];
	} m;
	struct msghdr msg = { 0 };
	struct iovec iov;
	struct cmsghdr *h;
	int l, c, a, sv[2], i;
	char b = 'x';

	CHECK(pair(&l, &c, &a), "pair");
	CHECK(!strcmp(transport(c), "shm"), "client transport '%s'", transport(c));
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	memset(&m, 0, sizeof(m));
	for (i = 0; i < 8; i++)
		m.past[i] = c;
	iov.iov_base = &b;
	iov.iov_len = 1;
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = m.ctl.buf;
	msg.msg_controllen = sizeof(m.ctl.buf);
	h = CMSG_FIRSTHDR(&msg);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(9 * sizeof(int));
	memcpy(CMSG_DATA(h), &sv[1], sizeof(int));
	errno = 0;
	CHECK(sendmsg(sv[0], &msg, 0) < 0 && errno == EINVAL,
	      "a header past its buffer: not EINVAL");
	h->cmsg_len = sizeof(int);
	errno = 0;
	CHECK(sendmsg(sv[0], &msg, 0) < 0 && errno == EINVAL,
	      "a header shorter than a header: not EINVAL");
	close(sv[0]);
	close(sv[1]);
	unpair(l, c, a);
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{ "connect", case_connect },
	{ "data", case_data },
	{ "epoll_lt", case_epoll_lt },
	{ "epoll_et_oneshot", case_epoll_et_oneshot },
	{ "oneshot_hangup", case_oneshot_hangup },
	{ "rdhup_eof", case_rdhup_eof },
	{ "epollout_full", case_epollout_full },
	{ "poll_select_mixed", case_poll_select_mixed },
	{ "nonblocking_connect", case_nonblocking_connect },
	{ "fallback", case_fallback },
	{ "dup", case_dup },
	{ "fork", case_fork },
	{ "epipe", case_epipe },
	{ "cross_process_wake", case_cross_process_wake },
	{ "fork_listener", case_fork_listener },
	{ "fork_listener_default", case_fork_listener_default },
	{ "client_emfile", case_client_emfile },
	{ "rights_malformed", case_rights_malformed },
};

int main(int argc, char **argv)
{
	size_t i;
	int before;

	if (!getenv("LD_PRELOAD") || !strstr(getenv("LD_PRELOAD"), "libferry-preload")) {
		fprintf(stderr, "preload_semantics: the shim is not in LD_PRELOAD\n");
		return 77;
	}
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (argc > 1 && strcmp(argv[1], cases[i].name))
			continue;
		current = cases[i].name;
		before = failures;
		cases[i].fn();
		printf("%s %s\n", failures == before ? "ok  " : "FAIL", cases[i].name);
		fflush(stdout);
	}
	return failures ? 1 : 0;
}
