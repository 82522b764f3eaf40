/*
 * rsocket_repoll.c - a program written to rdma-core's current
 * <rdma/rsocket.h> (repoll_*, riomap with PROT_*), built against
 * <ferry/rsocket.h> by changing nothing but the include.  It relies on
 * the header, as such a program may, for <errno.h>, <poll.h>,
 * <sys/epoll.h> and <sys/mman.h>.
 *
 * A parent serves one client, a forked child, from one repoll set that
 * holds the listener, then the connection and a pipe (an ordinary
 * descriptor): the child writes into the parent's iomapped buffer with
 * riowrite, says so with one byte, tells the pipe, and hangs up.  Return
 * checks test for nonzero, which holds with librdmacm's convention
 * (some calls return an errno value) and ferry's (-1 with errno).
 *
 * Exit status 0 when everything came as it should, 1 otherwise.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef RSOCKET_REPOLL_RDMACM
#include <rdma/rsocket.h>
#else
#include <ferry/rsocket.h>
#endif

#define MAP_LEN 4096
#define WAIT_MS 10000

enum { ID_LISTENER = 1, ID_CONN, ID_PIPE };

static int fail(const char *what)
{
	fprintf(stderr, "rsocket_repoll: %s: %s\n", what, strerror(errno));
	return 1;
}

static int listen_any(struct sockaddr_in *sin)
{
	socklen_t len = sizeof(*sin);
	int one = 1, l = rsocket(AF_INET, SOCK_STREAM, 0);

	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (l < 0 || rsetsockopt(l, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one)) ||
	    rbind(l, (struct sockaddr *)sin, sizeof(*sin)) || rlisten(l, 4) ||
	    rgetsockname(l, (struct sockaddr *)sin, &len))
		return -1;
	return l;
}

/* The child: connect, wait for the mapping, riowrite into it, hang up. */
static int client(const struct sockaddr_in *sin, int pipe_w)
{
	int one = 1, c = rsocket(AF_INET, SOCK_STREAM, 0);
	char mapped;

	if (c < 0 || rsetsockopt(c, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one)) ||
	    rconnect(c, (const struct sockaddr *)sin, sizeof(*sin)))
		return fail("client connect");
	if (rrecv(c, &mapped, 1, 0) != 1)
		return fail("client waiting for the mapping");
	if (riowrite(c, "ferry", 5, 0, 0) != 5 || rsend(c, "!", 1, 0) != 1)
		return fail("client riowrite");
	if (write(pipe_w, "p", 1) != 1)
		return fail("client pipe");
	return rclose(c) ? fail("client close") : 0;
}

static int add(int ep, int fd, uint32_t events, uint32_t id)
{
	struct epoll_event ev = { .events = events, .data.u32 = id };

	return repoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

/* Wait for the listener, accept, map a buffer and tell the client. */
static int accept_and_map(int ep, int l, char *buf)
{
	struct epoll_event ev;
	int s;

	if (add(ep, l, EPOLLIN, ID_LISTENER))
		return -1;
	if (repoll_wait(ep, &ev, 1, WAIT_MS) != 1 || ev.data.u32 != ID_LISTENER ||
	    !(ev.events & EPOLLIN))
		return -1;
	s = raccept(l, NULL, NULL);
	if (s < 0 || repoll_ctl(ep, EPOLL_CTL_DEL, l, NULL))
		return -1;
	/* epoll's errors: a second ADD of the same socket is refused. */
	if (add(ep, s, EPOLLIN, ID_CONN) || !add(ep, s, EPOLLIN, ID_CONN))
		return -1;
	if (riomap(s, buf, MAP_LEN, PROT_WRITE, 0, 0) != 0 || rsend(s, "m", 1, 0) != 1)
		return -1;
	return s;
}

/* Serve until the byte after the riowrite and the pipe's word both came. */
static int serve(int ep, int s, int pipe_r, const char *buf)
{
	struct epoll_event evs[4];
	int n, i, seen = 0;
	char c;

	if (add(ep, pipe_r, EPOLLIN, ID_PIPE))
		return fail("adding the pipe");
	while (seen != 3) {
		n = repoll_wait(ep, evs, 4, WAIT_MS);
		if (n <= 0)
			return fail("repoll_wait");
		for (i = 0; i < n; i++) {
			if (evs[i].data.u32 == ID_PIPE && read(pipe_r, &c, 1) == 1) {
				seen |= 2;
				repoll_ctl(ep, EPOLL_CTL_DEL, pipe_r, NULL);
			} else if (evs[i].data.u32 == ID_CONN && !(seen & 1)) {
				if (rrecv(s, &c, 1, 0) != 1 || c != '!')
					return fail("reading the client's byte");
				if (memcmp(buf, "ferry", 5) != 0)
					return fail("the riowrite's bytes");
				seen |= 1;
			}
		}
	}
	return 0;
}

int main(void)
{
	static char buf[MAP_LEN] __attribute__((aligned(MAP_LEN)));
	struct sockaddr_in sin;
	int l, s, ep, p[2], status, ret;
	pid_t pid;

	l = listen_any(&sin);
	if (l < 0 || pipe(p))
		return fail("listen");
	pid = fork();
	if (pid < 0)
		return fail("fork");
	if (pid == 0) {
		close(p[0]);
		_exit(client(&sin, p[1]));
	}
	close(p[1]);
	ep = repoll_create(0);
	if (ep < 0)
		return fail("repoll_create");
	s = accept_and_map(ep, l, buf);
	if (s < 0)
		return fail("accept and map");
	ret = serve(ep, s, p[0], buf);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		ret = fail("the client");
	riounmap(s, buf, MAP_LEN);
	if (rclose(s) || rclose(l) || rclose(ep))
		ret = fail("close");
	if (ret == 0)
		printf("rsocket_repoll: repoll_*, riomap and riowrite as rsocket has them\n");
	return ret;
}
