/*
 * perf_util.c - ferry-perf's plumbing: fatal errors (which also take the
 * forked peer down), the control-socket messages, the watchdog that keeps a
 * dead or stuck peer from hanging a run, CPU pinning, and names.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perf.h"

const char *perf_role_name = "client";
volatile int perf_child_pid;

static char perf_watchdog_msg[256];	/* written by the SIGALRM handler */

/* Kill and reap the forked server (async-signal-safe). */
static void perf_kill_child(void)
{
	pid_t pid = perf_child_pid;

	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		perf_child_pid = 0;
	}
}

void perf_die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s (%s): ", PERF_PROG, perf_role_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	perf_kill_child();
	exit(1);
}

void perf_die_errno(const char *call)
{
	perf_die("%s: %s", call, strerror(errno));
}

/*
 * A peer that exited closes its end of the control socket; a SEQPACKET
 * socket then polls with POLLHUP.  Busy loops call this now and then so that
 * spinning on memory the dead peer will never write ends.
 */
void perf_peer_check(int ctrl_fd)
{
	/* POLLRDHUP: a TCP control connection (the address form) whose peer
	 * died has only seen a FIN, which is no POLLHUP */
	struct pollfd pfd = { .fd = ctrl_fd, .events = POLLRDHUP };

	if (ctrl_fd < 0)
		return;
	if (poll(&pfd, 1, 0) < 0 && errno != EINTR)
		perf_die_errno("poll (control socket)");
	if (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))
		perf_die("the peer closed the control connection (did it exit?)");
}

void perf_msg_send(int fd, const struct perf_msg *msg, int pass_fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = sizeof(*msg) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;

	if (pass_fd >= 0) {
		memset(cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
	}
	if (sendmsg(fd, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(*msg))
		perf_die_errno("sendmsg (control socket)");
}

void perf_msg_recv(int fd, struct perf_msg *msg, uint32_t type, int *fd_p)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = msg, .iov_len = sizeof(*msg) };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *cm;
	ssize_t n;

	do
		/* WAITALL: over TCP (the address form) a message may come in parts */
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		perf_die_errno("recvmsg (control socket)");
	if (n == 0)
		perf_die("the peer closed the control connection (did it exit?)");
	if (n != (ssize_t)sizeof(*msg) || msg->type != type)
		perf_die("protocol error on the control socket (message %#x, %zd bytes; expected %#x)",
			 msg->type, n, type);
	if (fd_p)
		*fd_p = -1;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			int passed;

			memcpy(&passed, CMSG_DATA(cm), sizeof(int));
			if (fd_p)
				*fd_p = passed;
			else
				close(passed);
		}
	}
}

/* A row travels as a TEST message (to the server, and to the workers). */
void perf_row_to_msg(const struct perf_row *row, struct perf_msg *msg)
{
	memset(msg, 0, sizeof(*msg));
	msg->type = PERF_MSG_TEST;
	msg->test = row->test;
	msg->op = row->op;
	msg->transport = row->transport;
	msg->mode = row->mode;
	msg->size = row->size;
	msg->iters = row->iters;
	msg->value = row->warmup;
	msg->bytes = row->bytes;
	msg->seconds = row->seconds;
}

void perf_msg_to_row(const struct perf_msg *msg, size_t max_size,
		     struct perf_row *row)
{
	if (msg->test >= PERF_TEST_COUNT || msg->op >= PERF_OP_COUNT ||
	    msg->transport >= PERF_TR_COUNT || msg->mode >= PERF_MODE_COUNT ||
	    msg->size == 0 || msg->size > max_size)
		perf_die("protocol error: bad TEST message");
	row->test = msg->test;
	row->op = msg->op;
	row->transport = msg->transport;
	row->mode = msg->mode;
	row->size = msg->size;
	row->iters = msg->iters;
	row->warmup = msg->value;
	row->bytes = msg->bytes;
	row->seconds = msg->seconds;
}

static void perf_watchdog_fire(int sig)
{
	ssize_t unused;

	(void)sig;
	/* one write: the two processes may time out together */
	unused = write(STDERR_FILENO, perf_watchdog_msg, strlen(perf_watchdog_msg));
	(void)unused;
	perf_kill_child();
	_exit(1);
}

/* Abort the run if the current row takes longer than @seconds. */
void perf_watchdog_arm(int seconds, const char *what)
{
	static bool installed;

	if (!installed) {
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = perf_watchdog_fire;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGALRM, &sa, NULL);
		installed = true;
	}
	snprintf(perf_watchdog_msg, sizeof(perf_watchdog_msg),
		 "%s (%s): no progress for %d s in '%s' (peer stuck or dead?)\n",
		 PERF_PROG, perf_role_name, seconds, what);
	alarm(seconds > 0 ? (unsigned int)seconds : 0);
}

void perf_watchdog_disarm(void)
{
	alarm(0);
}

/* The CPUs this process may run on, in order; returns how many. */
int perf_cpus_allowed(int *cpus, int max)
{
	cpu_set_t set;
	int cpu, n = 0;

	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return 0;
	for (cpu = 0; cpu < CPU_SETSIZE && n < max; cpu++)
		if (CPU_ISSET(cpu, &set))
			cpus[n++] = cpu;
	return n;
}

void perf_pin_self(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		perf_die("sched_setaffinity (cpu %d): %s", cpu, strerror(errno));
}

const char *perf_test_name(enum perf_test test)
{
	static const char *const names[PERF_TEST_COUNT] = {
		[PERF_TEST_LAT] = "lat",
		[PERF_TEST_BW] = "bw",
		[PERF_TEST_RATE] = "rate",
		[PERF_TEST_CONNECT] = "connect",
	};

	return (unsigned int)test < PERF_TEST_COUNT ? names[test] : "?";
}

const char *perf_op_name(enum perf_op op)
{
	static const char *const names[PERF_OP_COUNT] = {
		[PERF_OP_WRITE] = "write",
		[PERF_OP_WRITE_IMM] = "write_imm",
		[PERF_OP_READ] = "read",
		[PERF_OP_SEND] = "send",
		[PERF_OP_FADD] = "fadd",
		[PERF_OP_CAS] = "cas",
		[PERF_OP_COPY] = "copy",
		[PERF_OP_STREAM] = "stream",
	};

	return (unsigned int)op < PERF_OP_COUNT ? names[op] : "?";
}

/* The address form's name for the ferry rows (ferry through the CM). */
static const char *perf_ferry_name;

void perf_transport_rename_ferry(const char *name)
{
	perf_ferry_name = name;
}

const char *perf_transport_name(enum perf_transport tr)
{
	if (tr == PERF_TR_FERRY && perf_ferry_name)
		return perf_ferry_name;
	static const char *const names[PERF_TR_COUNT] = {
		[PERF_TR_FERRY] = "ferry-shm",
		[PERF_TR_TCP] = "tcp",
		[PERF_TR_BARE] = "shm-bare",
		[PERF_TR_MEMCPY] = "memcpy",
		[PERF_TR_VERBS] = "ferry-verbs",
		[PERF_TR_PRELOAD] = "tcp+preload",
	};

	return (unsigned int)tr < PERF_TR_COUNT ? names[tr] : "?";
}

const char *perf_mode_name(enum perf_mode mode)
{
	return mode == PERF_MODE_BLOCK ? "block" : "busy";
}

/* 64 -> "64", 65536 -> "64K", 4194304 -> "4M"; other sizes in bytes. */
void perf_format_size(char *buf, size_t len, size_t size)
{
	if (size >= (1u << 20) && size % (1u << 20) == 0)
		snprintf(buf, len, "%zuM", size >> 20);
	else if (size >= 1024 && size % 1024 == 0)
		snprintf(buf, len, "%zuK", size >> 10);
	else
		snprintf(buf, len, "%zu", size);
}
