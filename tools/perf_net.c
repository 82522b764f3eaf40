/*
 * perf_net.c - ferry-perf's address form, -s/-c -a ADDR [-P PORT]: a server
 * and a client on two hosts (or two network namespaces).
 *
 * The abstract AF_UNIX name of the local form cannot cross hosts, and
 * neither can ferry_qp_connect_sock's exchange of the shm provider, so
 * here the control connection is kernel TCP to ADDR port PORT+1 and the
 * ferry connection goes through the CM to ADDR port PORT: the CM picks the
 * transport (tcp for another host; shm when ADDR is this host's own), and
 * the QP and its objects live on the device it chose.  The tcp rows run
 * to ADDR too, so that both go the same path in the same run.
 *
 * The server listens on the CM before it listens for the control
 * connection: a client that got its control connection finds the CM's
 * listener there.  Both CM ids are synchronous (each call blocks until its
 * event), one connection per process: the state is this file's.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ferry/cm.h>

#include "perf.h"

#define PERF_NET_CM_TIMEOUT_MS 10000
#define PERF_NET_CONNECT_TRIES 500	/* 10 ms apart: 5 s for the server */

/* The CM side of this process's one session. */
static struct {
	struct ferry_cm_id *listen_id;	/* server */
	struct ferry_cm_id *id;		/* the connection */
} net;

uint64_t perf_cpu_ns(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) < 0)
		perf_die_errno("getrusage");
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

/* ADDR and @port as a sockaddr_in (the address form is IPv4, as its tcp rows). */
static void perf_net_sin(const struct perf_opts *o, uint16_t port, struct sockaddr_in *sin)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	if (inet_pton(AF_INET, o->addr, &sin->sin_addr) != 1)
		perf_die("-a: '%s' is not an IPv4 address", o->addr);
}

static void perf_net_nodelay(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		perf_die_errno("setsockopt (TCP_NODELAY)");
}

static void perf_net_cm_listen(const struct perf_opts *o)
{
	struct sockaddr_in sin;

	perf_net_sin(o, o->port, &sin);
	if (ferry_create_id(NULL, &net.listen_id, NULL, FERRY_PS_TCP) < 0)
		perf_die_errno("ferry_create_id");
	if (ferry_bind_addr(net.listen_id, (struct sockaddr *)&sin) < 0)
		perf_die("ferry_bind_addr (%s port %u): %s", o->addr, o->port,
			 strerror(errno));
	if (ferry_listen(net.listen_id, 1) < 0)
		perf_die_errno("ferry_listen");
}

int perf_net_server_start(const struct perf_opts *o)
{
	struct sockaddr_in sin;
	int one = 1, lfd, fd;

	perf_net_cm_listen(o);
	perf_net_sin(o, (uint16_t)(o->port + 1), &sin);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		perf_die_errno("socket (control)");
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		perf_die("bind (control, %s port %u): %s", o->addr, o->port + 1,
			 strerror(errno));
	if (listen(lfd, 1) < 0)
		perf_die_errno("listen (control)");
	fprintf(stderr, "%s: waiting for a client on %s port %u (ferry) and %u (control)\n",
		PERF_PROG, o->addr, o->port, o->port + 1);
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		perf_die_errno("accept (control)");
	close(lfd);
	perf_net_nodelay(fd);
	return fd;
}

int perf_net_client_start(const struct perf_opts *o)
{
	struct sockaddr_in sin;
	int fd, tries;

	perf_net_sin(o, (uint16_t)(o->port + 1), &sin);
	for (tries = 0;; tries++) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			perf_die_errno("socket (control)");
		if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0)
			break;
		if (errno != ECONNREFUSED || tries >= PERF_NET_CONNECT_TRIES)
			perf_die("connect (control, %s port %u): %s (is 'ferry-perf -s -a %s"
				 " -P %u' running?)", o->addr, o->port + 1, strerror(errno),
				 o->addr, o->port);
		close(fd);
		usleep(10000);
	}
	perf_net_nodelay(fd);
	return fd;
}

static void perf_net_conn_param(struct ferry_conn_param *param)
{
	memset(param, 0, sizeof(*param));
	/* READs and atomics in flight: as many as the window may hold */
	param->responder_resources = 16;
	param->initiator_depth = 16;
	param->retry_count = 7;
	param->rnr_retry_count = 7;
}

static struct perf_ferry *perf_net_accept(const struct perf_opts *o,
					  const struct perf_msg *hello, int ctrl_fd)
{
	struct ferry_conn_param param;
	struct perf_ferry *pf;

	if (ferry_get_request(net.listen_id, &net.id) < 0)
		perf_die_errno("ferry_get_request");
	pf = perf_ferry_open_cm(net.id, hello->size, (int)hello->sq_depth,
				(int)hello->signal_every, (int)hello->inline_max, ctrl_fd);
	perf_net_conn_param(&param);
	if (ferry_accept(net.id, &param) < 0)
		perf_die("ferry_accept (%s port %u): %s", o->addr, o->port, strerror(errno));
	return pf;
}

static struct perf_ferry *perf_net_connect(const struct perf_opts *o,
					   const struct perf_msg *hello, int ctrl_fd)
{
	struct ferry_conn_param param;
	struct perf_ferry *pf;
	struct sockaddr_in sin;

	perf_net_sin(o, o->port, &sin);
	if (ferry_create_id(NULL, &net.id, NULL, FERRY_PS_TCP) < 0)
		perf_die_errno("ferry_create_id");
	if (ferry_resolve_addr(net.id, NULL, (struct sockaddr *)&sin,
			       PERF_NET_CM_TIMEOUT_MS) < 0 ||
	    ferry_resolve_route(net.id, PERF_NET_CM_TIMEOUT_MS) < 0)
		perf_die("resolving %s port %u: %s", o->addr, o->port, strerror(errno));
	pf = perf_ferry_open_cm(net.id, hello->size, (int)hello->sq_depth,
				(int)hello->signal_every, (int)hello->inline_max, ctrl_fd);
	perf_net_conn_param(&param);
	if (ferry_connect(net.id, &param) < 0)
		perf_die("ferry_connect (%s port %u): %s", o->addr, o->port, strerror(errno));
	return pf;
}

struct perf_ferry *perf_net_ferry_open(const struct perf_opts *o,
				       const struct perf_msg *hello, int ctrl_fd)
{
	if (o->role == PERF_ROLE_SERVER)
		return perf_net_accept(o, hello, ctrl_fd);
	return perf_net_connect(o, hello, ctrl_fd);
}

void perf_net_disconnect(void)
{
	/* Either side may find the connection gone already: no error here. */
	if (net.id)
		ferry_disconnect(net.id);
}

void perf_net_close(void)
{
	if (net.id) {
		if (ferry_destroy_id(net.id) < 0)
			perf_die_errno("ferry_destroy_id");
		net.id = NULL;
	}
	if (net.listen_id) {
		if (ferry_destroy_id(net.listen_id) < 0)
			perf_die_errno("ferry_destroy_id (listener)");
		net.listen_id = NULL;
	}
}
