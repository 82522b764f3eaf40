/*
 * fork-echo.c - a forking echo server, written the old way with plain BSD
 * sockets, for running under the preload shim (tests/preload/fork.sh).
 *
 *   fork-echo PORT COUNT [late|after]
 *
 * Listens on 127.0.0.1:PORT and accepts COUNT connections.  The parent
 * forks a child for each and closes its own copy of the connection at once;
 * the child echoes every byte back until the client's EOF, closes and
 * exits 0 (1 on any error, having said why).  When the last connection
 * has been accepted the parent waits for its children and exits 0 if every
 * one exited 0.  So a connection a child inherited must keep working after
 * the parent closed it, and must end when the child closes it.
 *
 * With "late" the parent closes its copy only once the child has echoed
 * its first MiB (the child tells it through a pipe): the close then comes,
 * every time, while the child is using the connection, rather than most
 * often before any data flows.  With "after" the parent holds its copy
 * until the child has exited, and only then closes it and accepts the
 * next connection: the parent's close is the last, and ends the
 * connection.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *me = "fork-echo";

/* Write all of @len bytes of @buf to @fd. */
static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Bytes the child echoes before it tells a "late" parent to close. */
#define LATE_AFTER (1024 * 1024)

/* Tell the parent (through @tell, -1: nobody to tell) it may close. */
static void tell_parent(int *tell)
{
	char one = 1;

	if (*tell < 0)
		return;
	if (write(*tell, &one, 1) != 1)
		fprintf(stderr, "%s[%d]: telling the parent: %m\n", me, getpid());
	close(*tell);
	*tell = -1;
}

/* The child: echo @fd until EOF; the exit status. */
static int echo(int fd, int tell)
{
	char buf[65536];
	unsigned long long total = 0;

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n == 0)
			break;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "%s[%d]: read after %llu bytes: %m\n", me, getpid(), total);
			return 1;
		}
		if (write_all(fd, buf, (size_t)n) < 0) {
			fprintf(stderr, "%s[%d]: write after %llu bytes: %m\n", me, getpid(), total);
			return 1;
		}
		total += (unsigned long long)n;
		if (total >= LATE_AFTER)
			tell_parent(&tell);
	}
	tell_parent(&tell);
	if (close(fd) < 0) {
		fprintf(stderr, "%s[%d]: close: %m\n", me, getpid());
		return 1;
	}
	printf("%s[%d]: echoed %llu bytes\n", me, getpid(), total);
	fflush(stdout);		/* the child leaves with _exit() */
	return 0;
}

static int listen_on(int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	int fd, one = 1;

	sin.sin_port = htons((unsigned short)port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0) {
		fprintf(stderr, "%s: socket: %m\n", me);
		return -1;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(fd, 16) < 0) {
		fprintf(stderr, "%s: listen on 127.0.0.1:%d: %m\n", me, port);
		close(fd);
		return -1;
	}
	return fd;
}

/* 0 if a child's wait @status says it exited 0; else says so, 1. */
static int child_status(pid_t pid, int status)
{
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	fprintf(stderr, "%s: child %d ended with status 0x%x\n", me, pid, status);
	return 1;
}

/* Wait for the child @pid; 0 if it exited 0. */
static int reap_child(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			fprintf(stderr, "%s: waitpid %d: %m\n", me, pid);
			return 1;
		}
	}
	return child_status(pid, status);
}

/* Wait for every child; 0 if all exited 0. */
static int reap_children(void)
{
	int status, rc = 0;
	pid_t pid;

	while ((pid = wait(&status)) > 0 || (pid < 0 && errno == EINTR)) {
		if (pid > 0)
			rc |= child_status(pid, status);
	}
	return rc;
}

/* A "late" parent: wait until the child read from @heard says it may
 * close (a byte, or EOF if the child died). */
static void wait_for_child(int heard)
{
	char one;

	while (read(heard, &one, 1) < 0 && errno == EINTR)
		;
	close(heard);
}

int main(int argc, char **argv)
{
	int lfd, port, count, i, rc = 0;
	bool late = argc == 4 && strcmp(argv[3], "late") == 0;
	bool after = argc == 4 && strcmp(argv[3], "after") == 0;

	if ((argc != 3 && !late && !after) || (port = atoi(argv[1])) <= 0 ||
	    port > 65535 || (count = atoi(argv[2])) <= 0) {
		fprintf(stderr, "usage: %s PORT COUNT [late|after]\n", me);
		return 2;
	}
	lfd = listen_on(port);
	if (lfd < 0)
		return 1;
	for (i = 0; i < count; i++) {
		int fd = accept(lfd, NULL, NULL), talk[2] = { -1, -1 };
		pid_t pid;

		if (fd < 0) {
			if (errno == EINTR) {
				i--;
				continue;
			}
			fprintf(stderr, "%s: accept: %m\n", me);
			rc = 1;
			break;
		}
		if (late && pipe(talk) < 0) {
			fprintf(stderr, "%s: pipe: %m\n", me);
			close(fd);
			rc = 1;
			break;
		}
		fflush(stdout);
		pid = fork();
		if (pid < 0) {
			fprintf(stderr, "%s: fork: %m\n", me);
			close(fd);
			rc = 1;
			break;
		}
		if (pid == 0) {
			close(lfd);
			if (late)
				close(talk[0]);
			_exit(echo(fd, talk[1]));
		}
		if (late) {
			close(talk[1]);
			wait_for_child(talk[0]);
		}
		if (after)
			rc |= reap_child(pid);
		if (close(fd) < 0) {
			fprintf(stderr, "%s: close in the parent: %m\n", me);
			rc = 1;
		}
	}
	close(lfd);
	if (reap_children() != 0)
		rc = 1;
	return rc;
}
