/*
 * bench/herd - a HERD-style key-value server on ferry (Kalia, Kaminsky and
 * Andersen, "Using RDMA Efficiently for Key-Value Services", SIGCOMM 2014),
 * beside the same server answering over TCP loopback sockets.  A benchmark
 * that checks every answer: exit status 0 only when each response was
 * right and none was missing.
 *
 *   herd --local [-c CLIENTS (2)] [-w WINDOW (4)] [-n REQUESTS per client
 *        (200000)] [-t TRANSPORT (FERRY_TRANSPORT, else shm)] [-g GID_INDEX]
 *        [-k ferry|tcp|both] [--hostile]
 *
 * --hostile: one request in HERD_HOSTILE_EVERY is malformed (no such op,
 * or a PUT of 200 bytes into 32-byte values); the server must answer it
 * HERD_ST_BAD and leave the table as it was, which the GETs after check.
 *
 * HERD's design, as here:
 *  - Requests go by WRITE over UC into the server's memory: a 64-byte slot
 *    per (client, window position), the sequence byte last, so that the
 *    server learns of a request by polling the slot's last byte (the NIC
 *    and shm write in address order) -- no receive, no completion on the
 *    server's side for a request.  The client signals one WRITE in
 *    HERD_UC_SIGNAL (selective signalling: the completions are only there to
 *    free its send queue), inline when the QP takes 64 bytes inline.
 *  - Responses go by SEND over UD: one server UD QP answers every client,
 *    with an address handle per client, so the server holds one QP per
 *    client for requests (UC; it never sends on them) and one for all
 *    responses; every HERD_UD_SIGNAL-th send is signalled.
 *  - The table is the server's own memory (open addressing, 16-byte keys,
 *    values up to 32 bytes, filled before the run), each request executed
 *    by the one server process.
 * What differs: HERD's server is several processes sharing a MICA cache
 * with keys partitioned among them, its clients many machines; here one
 * server process and the clients fork on one host (--local), the QPs are
 * joined over socketpairs (dest_qp_num + dlid, and the slots' address and
 * rkey) rather than HERD's memcached, and the slots share one MR (a
 * client could write another's slots -- as in HERD -- but every request is
 * checked before it is executed, so it could only spoil that client's
 * answers).  UC and UD may lose: a request unanswered after
 * HERD_RESEND_S is written again with a new sequence byte (counted:
 * "rexmit"; the requests are idempotent).  On shm nothing is lost while
 * the window is at most 10: a UD QP's datagrams wait in its AF_UNIX socket
 * until the client polls, net.unix.max_dgram_qlen (10) of them at most,
 * and more are dropped however many receives are posted (ferry_create_ah(3));
 * a window of 16 loses a few responses (-c 2 -w 16: 10 in 100,000).  With
 * more processes spinning than cores, a poller that found nothing
 * HERD_IDLE_SPINS times yields its CPU.  On shm a UD SEND is a datagram
 * on an AF_UNIX socket (docs/wire.md, section 5): each response costs a
 * sendmsg and a recvmsg, as TCP's cost a send and a recv, while a
 * request is plain stores into the mapped slot -- HERD's point, that the
 * server's inbound side costs no work, holds; its outbound side does not
 * get cheaper than a socket's here.
 *
 * The TCP row (bench/herd_tcp.c) runs the same table code behind poll(2)
 * over one loopback connection per client, the same 64-byte requests and
 * 36-byte responses, the same window.  Every client owns a range of keys so
 * that its model of them is exact: a GET must return what the model holds,
 * a PUT must be acknowledged.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/verbs.h>

#include "herd-ferry.h"

/* --- the device and its queue pairs --- */

int herd_dev_open(struct herd_dev *d, const struct herd_opts *o)
{
	struct ferry_port_attr pa;

	memset(d, 0, sizeof(*d));
	d->ctx = ferry_open_transport(o->transport);
	if (!d->ctx) {
		fprintf(stderr, "herd: no %s device: %s\n", o->transport, strerror(errno));
		return -1;
	}
	if (ferry_query_port(d->ctx, 1, &pa) ||
	    (o->gid_index >= 0 && ferry_query_gid(d->ctx, 1, o->gid_index, &d->gid))) {
		perror("herd: query port 1");
		return -1;
	}
	d->lid = pa.lid;
	d->pd = ferry_alloc_pd(d->ctx);
	if (!d->pd) {
		perror("herd: alloc PD");
		return -1;
	}
	return 0;
}

void herd_dev_close(struct herd_dev *d)
{
	if (d->pd)
		ferry_dealloc_pd(d->pd);
	if (d->ctx)
		ferry_close_device(d->ctx);
}

struct ferry_ah_attr herd_ah_attr(uint16_t lid, const union ferry_gid *gid,
				  const struct herd_opts *o)
{
	struct ferry_ah_attr a = { .dlid = lid, .port_num = 1 };

	if (gid->global.interface_id) {
		a.is_global = 1;
		a.grh.hop_limit = 1;
		a.grh.dgid = *gid;
		a.grh.sgid_index = (uint8_t)(o->gid_index < 0 ? 0 : o->gid_index);
	}
	return a;
}

struct ferry_qp *herd_qp_create(struct herd_dev *d, enum ferry_qp_type type,
				struct ferry_cq *scq, struct ferry_cq *rcq,
				int send_depth, int recv_depth, uint32_t *inline_p)
{
	struct ferry_qp_init_attr ia = { .qp_type = type, .send_cq = scq, .recv_cq = rcq,
					 .cap = { .max_send_wr = (uint32_t)send_depth,
						  .max_recv_wr = (uint32_t)recv_depth,
						  .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ferry_qp_init_attr got;
	struct ferry_qp_attr a;
	struct ferry_qp *qp;

	/* Ask for a request's (or a response's) bytes inline: shm gives what
	 * is asked for, no more; a device that has less refuses, and then the
	 * QP is made without. */
	ia.cap.max_inline_data = send_depth > 1 ? sizeof(struct herd_req) : 0;
	qp = ferry_create_qp(d->pd, &ia);
	if (!qp && ia.cap.max_inline_data) {
		ia.cap.max_inline_data = 0;
		qp = ferry_create_qp(d->pd, &ia);
	}
	if (!qp) {
		perror("herd: create QP");
		return NULL;
	}
	*inline_p = 0;
	if (ferry_query_qp(qp, &a, FERRY_QP_CAP, &got) == 0)
		*inline_p = got.cap.max_inline_data;
	return qp;
}

/* A UD QP to RTS (the client's only receives on it; RTS does no harm). */
int herd_ud_ready(struct ferry_qp *qp, uint32_t psn)
{
	struct ferry_qp_attr a = { .qp_state = FERRY_QPS_INIT, .port_num = 1,
				   .qkey = HERD_QKEY };

	if (ferry_modify_qp(qp, &a, FERRY_QP_STATE | FERRY_QP_PKEY_INDEX | FERRY_QP_PORT |
			    FERRY_QP_QKEY))
		goto err_say;
	a.qp_state = FERRY_QPS_RTR;
	if (ferry_modify_qp(qp, &a, FERRY_QP_STATE))
		goto err_say;
	a.qp_state = FERRY_QPS_RTS;
	a.sq_psn = psn;
	if (ferry_modify_qp(qp, &a, FERRY_QP_STATE | FERRY_QP_SQ_PSN))
		goto err_say;
	return 0;

err_say:
	perror("herd: UD QP to INIT, RTR or RTS");
	return -1;
}

/* A UC QP joined to (lid, qpn): INIT, RTR, and RTS when it sends. */
int herd_uc_join(struct ferry_qp *qp, uint16_t lid, const union ferry_gid *gid,
		 uint32_t qpn, uint32_t psn, bool sends, const struct herd_opts *o)
{
	struct ferry_qp_attr a = { .qp_state = FERRY_QPS_INIT, .port_num = 1,
				   .qp_access_flags = FERRY_ACCESS_REMOTE_WRITE };

	if (ferry_modify_qp(qp, &a, FERRY_QP_STATE | FERRY_QP_PKEY_INDEX | FERRY_QP_PORT |
			    FERRY_QP_ACCESS_FLAGS))
		goto err_say;
	a = (struct ferry_qp_attr){ .qp_state = FERRY_QPS_RTR, .path_mtu = FERRY_MTU_1024,
				    .dest_qp_num = qpn, .rq_psn = psn,
				    .ah_attr = herd_ah_attr(lid, gid, o) };
	if (ferry_modify_qp(qp, &a, FERRY_QP_STATE | FERRY_QP_AV | FERRY_QP_PATH_MTU |
			    FERRY_QP_DEST_QPN | FERRY_QP_RQ_PSN))
		goto err_say;
	if (!sends)
		return 0;
	a.qp_state = FERRY_QPS_RTS;
	a.sq_psn = psn;
	if (ferry_modify_qp(qp, &a, FERRY_QP_STATE | FERRY_QP_SQ_PSN))
		goto err_say;
	return 0;

err_say:
	perror("herd: UC QP to INIT, RTR or RTS");
	return -1;
}

/* Exactly @len bytes over a socketpair, either way. */
int herd_oob_io(int fd, void *buf, size_t len, bool out)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "herd: the exchange: %s\n", n ? strerror(errno) : "closed");
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Spin, then yield: more pollers than cores must still take turns.  On the
 * loaded 2-core host one empty poll before the yield did best (1 client:
 * 0.22 Mreq/s at 1, 0.14 at 8, 0.03 at 256): a client's empty poll is
 * already a recvmsg on shm (UD is a datagram socket there), and the CPU
 * it gives up is the one the server needs to answer it.
 */
void herd_idle(unsigned int *idle)
{
	if (++*idle >= HERD_IDLE_SPINS) {
		*idle = 0;
		sched_yield();
	}
}

/* --- the run --- */

/* Wait for @pid; its exit status as ours would be (0 only for a clean exit 0). */
static int herd_wait(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* The ferry run: a server and the clients forked, joined over socketpairs. */
static int herd_ferry_run(const struct herd_opts *o, struct herd_shared *sh)
{
	int sv[HERD_CLIENTS_MAX][2], server_fds[HERD_CLIENTS_MAX], c, ret = 0;
	pid_t server, client[HERD_CLIENTS_MAX];

	for (c = 0; c < o->clients; c++) {
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv[c])) {
			perror("herd: socketpair");
			return -1;
		}
		server_fds[c] = sv[c][0];
	}
	fflush(stdout);
	server = fork();
	if (server == 0)
		_exit(herd_server_run(o, sh, server_fds) ? 1 : 0);
	for (c = 0; c < o->clients; c++) {
		client[c] = server < 0 ? -1 : fork();
		if (client[c] == 0) {
			int r = herd_client_run(o, sh, c, sv[c][1]);

			sh->res[c].failed = r != 0;
			_exit(r ? 1 : 0);
		}
	}
	for (c = 0; c < o->clients; c++) {
		close(sv[c][0]);
		close(sv[c][1]);
	}
	for (c = 0; c < o->clients; c++)
		if (client[c] < 0 || herd_wait(client[c]))
			ret = -1, sh->res[c].failed = 1;
	atomic_store(&sh->stop, 1);
	if (server < 0 || herd_wait(server))
		ret = -1;
	if (server < 0)
		perror("herd: fork");
	return ret;
}

static void herd_usage(void)
{
	fprintf(stderr, "usage: herd --local [-c clients (2, at most %d)] [-w window (4, at "
		"most %d)] [-n requests per client] [-t transport] [-g gid_index] "
		"[-k ferry|tcp|both] [--hostile]\n", HERD_CLIENTS_MAX, HERD_WINDOW_MAX);
}

static int herd_args(int argc, char **argv, struct herd_opts *o, const char **kind_p)
{
	static const struct option longs[] = { { "local", no_argument, NULL, 'L' },
					       { "hostile", no_argument, NULL, 'H' },
					       { "help", no_argument, NULL, 'h' },
					       { NULL, 0, NULL, 0 } };
	int ch;

	*o = (struct herd_opts){ .clients = 2, .window = 4, .iters = 200000, .gid_index = -1,
				 .transport = getenv("FERRY_TRANSPORT") };
	if (!o->transport || !*o->transport)
		o->transport = "shm";
	*kind_p = "both";
	while ((ch = getopt_long(argc, argv, "c:w:n:t:g:k:", longs, NULL)) != -1) {
		switch (ch) {
		case 'L': o->local = true; break;
		case 'H': o->hostile = true; break;
		case 'c': o->clients = atoi(optarg); break;
		case 'w': o->window = atoi(optarg); break;
		case 'n': o->iters = atol(optarg); break;
		case 't': o->transport = optarg; break;
		case 'g': o->gid_index = atoi(optarg); break;
		case 'k': *kind_p = optarg; break;
		default: return -1;
		}
	}
	if (optind != argc || !o->local || o->clients < 1 || o->clients > HERD_CLIENTS_MAX ||
	    o->window < 1 || o->window > HERD_WINDOW_MAX || o->iters < 1 ||
	    o->iters > 100000000 || (strcmp(*kind_p, "ferry") && strcmp(*kind_p, "tcp") &&
				     strcmp(*kind_p, "both")))
		return -1;
	return 0;
}

/* One kind's run in a fresh shared block: its row, its Mreq/s. */
static int herd_run_kind(const struct herd_opts *o, bool ferry, double *mreq_p)
{
	struct herd_shared *sh = herd_shared_make(o);
	int ret;

	if (!sh)
		return -1;
	ret = ferry ? herd_ferry_run(o, sh) : herd_tcp_run(o, sh);
	if (herd_report_row(sh, o, ferry ? "uc-write" : "tcp-rr", ferry ? o->transport : "tcp",
			    mreq_p))
		ret = -1;
	herd_shared_free(sh, o);
	return ret;
}

int main(int argc, char **argv)
{
	struct herd_opts o;
	const char *kind;
	double ferry_mreq = 0, tcp_mreq = 0;
	int ret = 0;

	if (herd_args(argc, argv, &o, &kind)) {
		herd_usage();
		return 2;
	}
	printf("# herd: %d client(s) x window %d, %ld requests each; 95%% GET / 5%% PUT, "
	       "uniform over %d keys per client (fixed seed); 16 B keys, <= 32 B values; "
	       "64 B requests, 36 B responses\n", o.clients, o.window, o.iters,
	       HERD_KEYS_PER_CLIENT);
	printf("%-6s %-10s %-9s %7s %6s %8s %9s %9s %9s %8s %6s\n", "test", "op", "transport",
	       "clients", "window", "requests", "Mreq/s", "p50(us)", "p99(us)", "rexmit", "stale");
	if (strcmp(kind, "tcp") && herd_run_kind(&o, true, &ferry_mreq))
		ret = 1;
	if (strcmp(kind, "ferry") && herd_run_kind(&o, false, &tcp_mreq))
		ret = 1;
	if (!strcmp(kind, "both") && tcp_mreq > 0)
		printf("\nratio (this run): herd %s uc-write / tcp-rr requests/s  %.2f\n",
		       o.transport, ferry_mreq / tcp_mreq);
	if (ret)
		fprintf(stderr, "herd: FAILED: a wrong, lost or missing response (above)\n");
	return ret;
}
