/*
 * examples/ud_pingpong.c - a UD ping-pong in the style of rdma-core's
 * ibv_ud_pingpong, on ferry: the same options, the same (LID, QPN, PSN,
 * GID) exchange over TCP (pingpong.h), the same Q_Key (0x11111111) and
 * the same message layout -- a receive of size + 40 bytes, its first 40
 * the GRH, a send of size bytes -- so that it talks to Debian's
 * ibv_ud_pingpong in both directions, and to itself on shm.
 *
 *   server:  ud_pingpong [options]
 *   client:  ud_pingpong [options] HOST
 *
 * -p PORT (18515)  -s SIZE (2048)  -r RX_DEPTH (500)  -n ITERS (1000)
 * -l SL (0)  -g GID_INDEX (-1: none; RoCE needs one)  -t TRANSPORT (shm,
 * verbs; default: FERRY_TRANSPORT, else the first device)  -c: check
 * every message's payload.  Exit status 0 when every ping came back.
 *
 * Each side keeps its receive queue topped up and sends its next ping
 * only when both its last send has completed and a ping from the peer
 * has come in; the client sends first.  UD is unreliable: a lost
 * datagram stalls the run (as rdma-core's does), so a watchdog ends it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <ferry/verbs.h>

#include "pingpong.h"

#define UDPP_QKEY	0x11111111u
#define UDPP_RECV_WRID	1
#define UDPP_SEND_WRID	2
#define UDPP_STALL_S	20	/* no completion for this long: a datagram was lost */

struct udpp_opts {
	int port, size, rx_depth, iters, sl, gid_index, check;
	const char *transport, *server;
};

struct udpp {
	struct ferry_context *ctx;
	struct ferry_pd *pd;
	struct ferry_cq *cq;
	struct ferry_qp *qp;
	struct ferry_ah *ah;
	struct ferry_mr *mr;
	char *buf;		/* GRH room + size bytes */
	int size, rx_depth, pending;
	struct pp_dest mine, peer;
};

static int udpp_qp_ready(struct udpp *u)
{
	struct ferry_qp_attr a = { .qp_state = FERRY_QPS_INIT, .port_num = 1,
				   .qkey = UDPP_QKEY };

	if (ferry_modify_qp(u->qp, &a, FERRY_QP_STATE | FERRY_QP_PKEY_INDEX |
			    FERRY_QP_PORT | FERRY_QP_QKEY)) {
		perror("ud_pingpong: modify QP to INIT");
		return -1;
	}
	a.qp_state = FERRY_QPS_RTR;
	if (ferry_modify_qp(u->qp, &a, FERRY_QP_STATE)) {
		perror("ud_pingpong: modify QP to RTR");
		return -1;
	}
	a.qp_state = FERRY_QPS_RTS;
	a.sq_psn = u->mine.psn;
	if (ferry_modify_qp(u->qp, &a, FERRY_QP_STATE | FERRY_QP_SQ_PSN)) {
		perror("ud_pingpong: modify QP to RTS");
		return -1;
	}
	return 0;
}

static int udpp_open(struct udpp *u, const struct udpp_opts *o)
{
	struct ferry_qp_init_attr ia = { .qp_type = FERRY_QPT_UD,
					 .cap = { .max_send_wr = 1, .max_recv_wr = o->rx_depth,
						  .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ferry_port_attr pa;

	u->size = o->size;
	u->rx_depth = o->rx_depth;
	u->ctx = ferry_open_transport(o->transport);
	if (!u->ctx) {
		perror("ud_pingpong: no device");
		return -1;
	}
	if (ferry_query_port(u->ctx, 1, &pa)) {
		perror("ud_pingpong: query port 1");
		return -1;
	}
	if (o->size > (128 << pa.active_mtu)) {
		fprintf(stderr, "ud_pingpong: size %d is larger than the port's MTU (%d)\n",
			o->size, 128 << pa.active_mtu);
		return -1;
	}
	u->buf = calloc(1, (size_t)o->size + FERRY_GRH_BYTES);
	u->pd = ferry_alloc_pd(u->ctx);
	u->cq = ferry_create_cq(u->ctx, o->rx_depth + 1, NULL, NULL, 0);
	if (!u->buf || !u->pd || !u->cq)
		goto err_say;
	u->mr = ferry_reg_mr(u->pd, u->buf, (size_t)o->size + FERRY_GRH_BYTES,
			     FERRY_ACCESS_LOCAL_WRITE);
	ia.send_cq = ia.recv_cq = u->cq;
	u->qp = u->mr ? ferry_create_qp(u->pd, &ia) : NULL;
	if (!u->qp)
		goto err_say;
	u->mine.lid = pa.lid;
	u->mine.qpn = u->qp->qp_num;
	u->mine.psn = (uint32_t)lrand48() & 0xffffff;
	if (o->gid_index >= 0 && ferry_query_gid(u->ctx, 1, o->gid_index, &u->mine.gid)) {
		perror("ud_pingpong: query GID");
		return -1;
	}
	return udpp_qp_ready(u);

err_say:
	perror("ud_pingpong: making the PD, CQ, MR or QP");
	return -1;
}

/* The AH to the peer: with a GRH when it sent a GID (as rdma-core does). */
static int udpp_ah_make(struct udpp *u, const struct udpp_opts *o)
{
	struct ferry_ah_attr a = { .dlid = u->peer.lid, .sl = (uint8_t)o->sl, .port_num = 1 };

	if (u->peer.gid.global.interface_id) {
		a.is_global = 1;
		a.grh.hop_limit = 1;
		a.grh.dgid = u->peer.gid;
		a.grh.sgid_index = (uint8_t)(o->gid_index < 0 ? 0 : o->gid_index);
	}
	u->ah = ferry_create_ah(u->pd, &a);
	if (!u->ah) {
		perror("ud_pingpong: create AH");
		return -1;
	}
	return 0;
}

static int udpp_post_recvs(struct udpp *u, int n)
{
	struct ferry_sge sge = { (uintptr_t)u->buf, (uint32_t)u->size + FERRY_GRH_BYTES,
				 u->mr->lkey };
	struct ferry_recv_wr wr = { .wr_id = UDPP_RECV_WRID, .sg_list = &sge, .num_sge = 1 },
			     *bad;
	int i;

	for (i = 0; i < n; i++)
		if (ferry_post_recv(u->qp, &wr, &bad))
			break;
	return i;
}

static int udpp_post_send(struct udpp *u)
{
	struct ferry_sge sge = { (uintptr_t)(u->buf + FERRY_GRH_BYTES), (uint32_t)u->size,
				 u->mr->lkey };
	struct ferry_send_wr wr = { .wr_id = UDPP_SEND_WRID, .sg_list = &sge, .num_sge = 1,
				    .opcode = FERRY_WR_SEND, .send_flags = FERRY_SEND_SIGNALED },
			     *bad;

	wr.wr.ud.ah = u->ah;
	wr.wr.ud.remote_qpn = u->peer.qpn;
	wr.wr.ud.remote_qkey = UDPP_QKEY;
	if (ferry_post_send(u->qp, &wr, &bad)) {
		perror("ud_pingpong: post send");
		return -1;
	}
	return 0;
}

/* The exchange: the server joins (makes its AH) before it answers. */
static int udpp_exchange(struct udpp *u, const struct udpp_opts *o)
{
	int fd;

	if (o->server) {
		if (pp_exchange_client(o->server, o->port, &u->mine, &u->peer))
			return -1;
		return udpp_ah_make(u, o);
	}
	fd = pp_server_accept(o->port, &u->peer);
	if (fd < 0)
		return -1;
	if (udpp_ah_make(u, o)) {
		close(fd);
		return -1;
	}
	return pp_server_reply(fd, &u->mine);
}

/* A receive's completion: the payload checked (-c), receives topped up. */
static int udpp_on_recv(struct udpp *u, const struct ferry_wc *wc, const struct udpp_opts *o,
			int *routs, int rcnt)
{
	uint8_t want = (uint8_t)rcnt;	/* the peer's send number rcnt */

	if (wc->byte_len != (uint32_t)u->size + FERRY_GRH_BYTES) {
		fprintf(stderr, "ud_pingpong: received %u bytes, not %d\n", wc->byte_len,
			u->size + FERRY_GRH_BYTES);
		return -1;
	}
	if (wc->src_qp != u->peer.qpn) {
		fprintf(stderr, "ud_pingpong: a message from QP %#x, not the peer's %#x\n",
			wc->src_qp, u->peer.qpn);
		return -1;
	}
	if (o->check && (uint8_t)u->buf[FERRY_GRH_BYTES + u->size - 1] != want) {
		fprintf(stderr, "ud_pingpong: payload %#x, not %#x\n",
			(uint8_t)u->buf[FERRY_GRH_BYTES + u->size - 1], want);
		return -1;
	}
	if (--*routs <= 1)
		*routs += udpp_post_recvs(u, u->rx_depth - *routs);
	return 0;
}

/* One completion; after it, the next send if nothing is outstanding. */
static int udpp_on_wc(struct udpp *u, const struct ferry_wc *wc, const struct udpp_opts *o,
		      int *routs, int *scnt, int *rcnt)
{
	if (wc->status != FERRY_WC_SUCCESS) {
		fprintf(stderr, "ud_pingpong: completion %s for wr_id %llu\n",
			ferry_wc_status_str(wc->status), (unsigned long long)wc->wr_id);
		return -1;
	}
	if (wc->wr_id == UDPP_SEND_WRID) {
		++*scnt;
	} else if (wc->wr_id == UDPP_RECV_WRID) {
		if (udpp_on_recv(u, wc, o, routs, *rcnt))
			return -1;
		++*rcnt;
	} else {
		fprintf(stderr, "ud_pingpong: a completion for wr_id %llu\n",
			(unsigned long long)wc->wr_id);
		return -1;
	}
	u->pending &= ~(int)wc->wr_id;
	if (*scnt < o->iters && !u->pending) {
		/* Every earlier send has completed: this is send number scnt. */
		memset(u->buf + FERRY_GRH_BYTES, (uint8_t)*scnt, (size_t)u->size);
		if (udpp_post_send(u))
			return -1;
		u->pending = UDPP_RECV_WRID | UDPP_SEND_WRID;
	}
	return 0;
}

static double udpp_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int udpp_run(struct udpp *u, const struct udpp_opts *o, int routs)
{
	int scnt = 0, rcnt = 0;
	double start = udpp_now(), last = start, now;

	u->pending = UDPP_RECV_WRID;
	if (o->server) {
		memset(u->buf + FERRY_GRH_BYTES, 0, (size_t)u->size);
		if (udpp_post_send(u))
			return -1;
		u->pending |= UDPP_SEND_WRID;
	}
	while (rcnt < o->iters || scnt < o->iters) {
		struct ferry_wc wc[2];
		int n = ferry_poll_cq(u->cq, 2, wc), i;

		if (n < 0) {
			perror("ud_pingpong: poll CQ");
			return -1;
		}
		now = udpp_now();
		if (n)
			last = now;
		else if (now - last > UDPP_STALL_S) {
			fprintf(stderr, "ud_pingpong: nothing for %d s after %d sent, %d received: "
				"a datagram was lost\n", UDPP_STALL_S, scnt, rcnt);
			return -1;
		}
		for (i = 0; i < n; i++)
			if (udpp_on_wc(u, &wc[i], o, &routs, &scnt, &rcnt))
				return -1;
	}
	now = udpp_now() - start;
	printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n",
	       (long long)o->size * o->iters * 2, now, o->size * o->iters * 2 * 8 / now / 1e6);
	printf("%d iters in %.2f seconds = %.2f usec/iter\n", o->iters, now,
	       now * 1e6 / o->iters);
	return 0;
}

static void udpp_close(struct udpp *u)
{
	if (u->ah)
		ferry_destroy_ah(u->ah);
	if (u->qp)
		ferry_destroy_qp(u->qp);
	if (u->mr)
		ferry_dereg_mr(u->mr);
	if (u->cq)
		ferry_destroy_cq(u->cq);
	if (u->pd)
		ferry_dealloc_pd(u->pd);
	if (u->ctx)
		ferry_close_device(u->ctx);
	free(u->buf);
}

static int udpp_usage(void)
{
	fprintf(stderr, "usage: ud_pingpong [-p port] [-s size] [-r rx_depth] [-n iters] "
		"[-l sl] [-g gid_index] [-t shm|verbs] [-c] [host]\n");
	return 2;
}

static int udpp_args(int argc, char **argv, struct udpp_opts *o)
{
	int c;

	*o = (struct udpp_opts){ .port = 18515, .size = 2048, .rx_depth = 500,
				 .iters = 1000, .gid_index = -1 };
	while ((c = getopt(argc, argv, "p:s:r:n:l:g:t:c")) != -1) {
		switch (c) {
		case 'p': o->port = atoi(optarg); break;
		case 's': o->size = atoi(optarg); break;
		case 'r': o->rx_depth = atoi(optarg); break;
		case 'n': o->iters = atoi(optarg); break;
		case 'l': o->sl = atoi(optarg); break;
		case 'g': o->gid_index = atoi(optarg); break;
		case 't': o->transport = optarg; break;
		case 'c': o->check = 1; break;
		default: return -1;
		}
	}
	if (optind < argc - 1 || o->port <= 0 || o->port > 65535 || o->size < 1 ||
	    o->rx_depth < 2 || o->iters < 1 || o->sl < 0 || o->sl > 15)
		return -1;
	o->server = optind == argc - 1 ? argv[optind] : NULL;
	return 0;
}

int main(int argc, char **argv)
{
	struct udpp_opts o;
	struct udpp u = { 0 };
	char gid[PP_GID_STRLEN];
	int routs, ret = 1;

	if (udpp_args(argc, argv, &o))
		return udpp_usage();
	srand48(getpid() * time(NULL));
	if (udpp_open(&u, &o))
		goto out;
	routs = udpp_post_recvs(&u, o.rx_depth);
	if (routs < o.rx_depth) {
		fprintf(stderr, "ud_pingpong: could post only %d receives\n", routs);
		goto out;
	}
	pp_gid_str(&u.mine.gid, gid);
	printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x: GID %s\n",
	       u.mine.lid, u.mine.qpn, u.mine.psn, gid);
	if (udpp_exchange(&u, &o))
		goto out;
	pp_gid_str(&u.peer.gid, gid);
	printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
	       u.peer.lid, u.peer.qpn, u.peer.psn, gid);
	ret = udpp_run(&u, &o, routs) ? 1 : 0;
out:
	udpp_close(&u);
	return ret;
}
