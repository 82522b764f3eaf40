/*
 * bench/herd_tcp.c - bench/herd's TCP row: the same table code and the same
 * request and response bytes as the UC/UD server, over one loopback TCP
 * connection per client with the same window.  The server sleeps in
 * poll(2) (the way a TCP server waits), reads whole 64-byte requests,
 * answers each with its 36 bytes; a client keeps its window full and
 * checks every answer as the ferry clients do.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "herd.h"

/* A connection's partial request. */
struct herd_tcp_conn {
	uint8_t buf[sizeof(struct herd_req)];
	size_t have;
};

static int herd_tcp_io(int fd, void *buf, size_t len, bool out)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "herd: tcp: %s\n", n ? strerror(errno) : "closed");
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void herd_tcp_nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/*
 * What one connection has ready: every whole request executed and answered
 * in one send.  0, or -1 when it closed or failed (the server drops it).
 */
static int herd_tcp_serve(int fd, struct herd_tcp_conn *cn, struct herd_table *t, int window)
{
	uint8_t in[sizeof(struct herd_req) * HERD_WINDOW_MAX];
	struct herd_resp out[HERD_WINDOW_MAX + 1];	/* a partial one finishes first */
	struct herd_req req;
	size_t nout = 0, off = 0;
	ssize_t n = recv(fd, in, sizeof(in), MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0)
		return -1;
	while (off < (size_t)n) {
		size_t take = sizeof(cn->buf) - cn->have;

		if (take > (size_t)n - off)
			take = (size_t)n - off;
		memcpy(cn->buf + cn->have, in + off, take);
		cn->have += take;
		off += take;
		if (cn->have < sizeof(cn->buf))
			break;
		cn->have = 0;
		memcpy(&req, cn->buf, sizeof(req));
		herd_table_execute(t, &req, &out[nout]);
		if (req.slot >= window)	/* a peer's slot number: not ours to trust */
			out[nout].status = HERD_ST_BAD;
		nout++;
	}
	return nout ? herd_tcp_io(fd, out, nout * sizeof(out[0]), true) : 0;
}

static int herd_tcp_server(int lfd, const struct herd_opts *o)
{
	struct pollfd pfd[HERD_CLIENTS_MAX];
	struct herd_tcp_conn conn[HERD_CLIENTS_MAX] = { 0 };
	struct herd_table t;
	int c, open = o->clients;

	if (herd_table_init(&t, o->clients))
		return -1;
	for (c = 0; c < o->clients; c++) {
		pfd[c].fd = accept(lfd, NULL, NULL);
		pfd[c].events = POLLIN;
		if (pfd[c].fd < 0) {
			perror("herd: tcp accept");
			return -1;
		}
		herd_tcp_nodelay(pfd[c].fd);
	}
	while (open > 0) {
		if (poll(pfd, (nfds_t)o->clients, -1) < 0 && errno != EINTR) {
			perror("herd: poll");
			break;
		}
		for (c = 0; c < o->clients; c++) {
			if (pfd[c].fd < 0 || !(pfd[c].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (herd_tcp_serve(pfd[c].fd, &conn[c], &t, o->window)) {
				close(pfd[c].fd);
				pfd[c].fd = -1;		/* poll skips it */
				open--;
			}
		}
	}
	herd_table_fini(&t);
	return 0;
}

static int herd_tcp_client_loop(int fd, struct herd_window *cl)
{
	struct herd_req *req;
	struct herd_resp resp;
	int w, r;

	cl->res->start = herd_now();
	for (w = 0; w < cl->window && (req = herd_window_issue(cl, (uint8_t)w)); w++)
		if (herd_tcp_io(fd, req, sizeof(*req), true))
			return -1;
	while (cl->res->done < (uint64_t)cl->iters) {
		if (herd_tcp_io(fd, &resp, sizeof(resp), false))
			return -1;
		r = herd_window_on_resp(cl, &resp);
		if (r)	/* TCP neither loses nor repeats: a stale answer is wrong too */
			return -1;
		req = herd_window_issue(cl, resp.slot);
		if (req && herd_tcp_io(fd, req, sizeof(*req), true))
			return -1;
	}
	cl->res->end = herd_now();
	return 0;
}

static int herd_tcp_client(const struct herd_opts *o, struct herd_shared *sh, int c,
			   const struct sockaddr_in *sa)
{
	struct herd_window cl;
	int fd = socket(AF_INET, SOCK_STREAM, 0), ret = -1;

	if (fd < 0 || connect(fd, (const struct sockaddr *)sa, sizeof(*sa))) {
		perror("herd: tcp connect");
		goto out_close;
	}
	herd_tcp_nodelay(fd);
	if (herd_window_init(&cl, o, c, &sh->res[c]))
		goto out_close;
	ret = herd_tcp_client_loop(fd, &cl);
	herd_window_fini(&cl);
out_close:
	if (fd >= 0)
		close(fd);
	return ret;
}

static int herd_tcp_listen(struct sockaddr_in *sa)
{
	socklen_t len = sizeof(*sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)sa, sizeof(*sa)) || listen(fd, 64) ||
	    getsockname(fd, (struct sockaddr *)sa, &len)) {
		perror("herd: tcp listen on 127.0.0.1");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int herd_tcp_wait(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int herd_tcp_run(const struct herd_opts *o, struct herd_shared *sh)
{
	struct sockaddr_in sa;
	pid_t server, client[HERD_CLIENTS_MAX];
	int lfd = herd_tcp_listen(&sa), c, ret = 0;

	if (lfd < 0)
		return -1;
	fflush(stdout);
	server = fork();
	if (server == 0)
		_exit(herd_tcp_server(lfd, o) ? 1 : 0);
	close(lfd);
	for (c = 0; c < o->clients; c++) {
		client[c] = server < 0 ? -1 : fork();
		if (client[c] == 0) {
			int r = herd_tcp_client(o, sh, c, &sa);

			sh->res[c].failed = r != 0;
			_exit(r ? 1 : 0);
		}
	}
	for (c = 0; c < o->clients; c++)
		if (client[c] < 0 || herd_tcp_wait(client[c]))
			ret = -1, sh->res[c].failed = 1;
	if (server < 0 || herd_tcp_wait(server))
		ret = -1;
	return ret;
}
