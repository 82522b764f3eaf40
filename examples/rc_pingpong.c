/*
 * examples/rc_pingpong.c - ping-pong over an RC (or, with --uc or as
 * uc_pingpong, a UC) QP joined out of band, the way rdma-core's
 * ibv_rc_pingpong and ibv_uc_pingpong do it, with whom it talks in both
 * directions.
 *
 *   server:  rc_pingpong [options]
 *   client:  rc_pingpong [options] SERVER
 *
 * Each side opens a device (the first ferry_get_device_list gives, or -d;
 * FERRY_TRANSPORT picks the transport), posts its receives, learns its LID
 * (and with -g its GID), and trades (LID, QPN, PSN, GID) with the other
 * over TCP (pingpong.h); the server moves its QP to RTR and RTS before it
 * answers, the client after.  Then the client sends, each side answers
 * every message it receives, until both have sent and received -n
 * messages of -s bytes.  Exit status 0 when they all completed
 * successfully.  Only the public API: ferry/verbs.h.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <ferry/verbs.h>

#include "pingpong.h"

#ifndef PP_DEFAULT_UC
#define PP_DEFAULT_UC 0
#endif

enum { PP_RECV_WRID = 1, PP_SEND_WRID = 2 };

struct pp_opts {
	const char *server;	/* NULL: we are the server */
	const char *devname;
	int port;
	int ib_port;
	unsigned int size;
	enum ferry_mtu mtu;
	unsigned int rx_depth;
	unsigned int iters;
	int sl;
	int gidx;
	bool events;
	bool uc;
};

struct pp_ctx {
	struct ferry_context *context;
	struct ferry_comp_channel *channel;
	struct ferry_pd *pd;
	struct ferry_mr *mr;
	struct ferry_cq *cq;
	struct ferry_qp *qp;
	char *buf;
	unsigned int size;
	unsigned int send_flags;
	unsigned int rx_depth;
	int pending;		/* PP_*_WRID bits still to complete */
	unsigned int cq_events;
};

static void pp_usage(const char *argv0)
{
	printf("Usage:\n");
	printf("  %s            start a server and wait for connection\n", argv0);
	printf("  %s <host>     connect to server at <host>\n\n", argv0);
	printf("Options:\n");
	printf("  -p, --port=<port>      listen on/connect to port <port> (default 18515)\n");
	printf("  -d, --ib-dev=<dev>     use device <dev> (default first device found)\n");
	printf("  -i, --ib-port=<port>   use port <port> of the device (default 1)\n");
	printf("  -s, --size=<size>      size of message to exchange (default 4096)\n");
	printf("  -m, --mtu=<size>       path MTU (default 1024)\n");
	printf("  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)\n");
	printf("  -n, --iters=<iters>    number of exchanges (default 1000)\n");
	printf("  -l, --sl=<sl>          service level value\n");
	printf("  -e, --events           sleep on CQ events (default poll)\n");
	printf("  -g, --gid-idx=<gid>    local port gid index\n");
	printf("  -U, --uc               an unreliable-connection QP (as ibv_uc_pingpong)\n");
}

static const struct option pp_long_options[] = {
	{ "port", required_argument, NULL, 'p' },
	{ "ib-dev", required_argument, NULL, 'd' },
	{ "ib-port", required_argument, NULL, 'i' },
	{ "size", required_argument, NULL, 's' },
	{ "mtu", required_argument, NULL, 'm' },
	{ "rx-depth", required_argument, NULL, 'r' },
	{ "iters", required_argument, NULL, 'n' },
	{ "sl", required_argument, NULL, 'l' },
	{ "events", no_argument, NULL, 'e' },
	{ "gid-idx", required_argument, NULL, 'g' },
	{ "uc", no_argument, NULL, 'U' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 }
};

static int pp_opt_take(struct pp_opts *o, int c, const char *arg)
{
	long v = 0;

	switch (c) {
	case 'p': v = o->port = (int)pp_number("port", arg, 1, 65535); break;
	case 'd': o->devname = arg; break;
	case 'i': v = o->ib_port = (int)pp_number("ib port", arg, 1, 255); break;
	case 's': v = o->size = (unsigned int)pp_number("size", arg, 1, 1 << 30); break;
	case 'm':
		o->mtu = pp_mtu_of(strtol(arg, NULL, 0));
		v = o->mtu ? 0 : -1;
		break;
	case 'r': v = o->rx_depth = (unsigned int)pp_number("rx depth", arg, 1, 1 << 15); break;
	case 'n': v = o->iters = (unsigned int)pp_number("iters", arg, 1, 1 << 30); break;
	case 'l': v = o->sl = (int)pp_number("sl", arg, 0, 15); break;
	case 'e': o->events = true; break;
	case 'g': v = o->gidx = (int)pp_number("gid index", arg, 0, 255); break;
	case 'U': o->uc = true; break;
	default: return -1;
	}
	return v < 0 ? -1 : 0;
}

static int pp_parse(int argc, char **argv, struct pp_opts *o)
{
	int c;

	*o = (struct pp_opts){ .port = 18515, .ib_port = 1, .size = 4096,
			       .mtu = FERRY_MTU_1024, .rx_depth = 500, .iters = 1000,
			       .gidx = -1, .uc = PP_DEFAULT_UC };
	while ((c = getopt_long(argc, argv, "p:d:i:s:m:r:n:l:eg:Uh", pp_long_options,
				NULL)) != -1) {
		if (c == 'h' || pp_opt_take(o, c, optarg) < 0) {
			pp_usage(argv[0]);
			return -1;
		}
	}
	if (optind == argc - 1)
		o->server = argv[optind];
	else if (optind < argc) {
		pp_usage(argv[0]);
		return -1;
	}
	return 0;
}

/* RESET -> INIT; receives may be posted from here. */
static int pp_qp_init(struct pp_ctx *ctx, const struct pp_opts *o)
{
	struct ferry_qp_init_attr init = {
		.send_cq = ctx->cq, .recv_cq = ctx->cq,
		.cap = { .max_send_wr = 1, .max_recv_wr = o->rx_depth,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = o->uc ? FERRY_QPT_UC : FERRY_QPT_RC,
	};
	struct ferry_qp_attr attr = { .qp_state = FERRY_QPS_INIT, .port_num = (uint8_t)o->ib_port };
	struct ferry_qp_init_attr got;

	ctx->qp = ferry_create_qp(ctx->pd, &init);
	if (!ctx->qp) {
		perror("Couldn't create QP");
		return -1;
	}
	/* Inline when the QP takes it, as rdma-core's does. */
	if (ferry_query_qp(ctx->qp, &attr, FERRY_QP_CAP, &got) == 0 &&
	    got.cap.max_inline_data >= ctx->size)
		ctx->send_flags |= FERRY_SEND_INLINE;
	attr = (struct ferry_qp_attr){ .qp_state = FERRY_QPS_INIT, .port_num = (uint8_t)o->ib_port,
				       .qp_access_flags = 0 };
	if (ferry_modify_qp(ctx->qp, &attr, FERRY_QP_STATE | FERRY_QP_PKEY_INDEX |
			    FERRY_QP_PORT | FERRY_QP_ACCESS_FLAGS) < 0) {
		perror("Failed to modify QP to INIT");
		return -1;
	}
	return 0;
}

static int pp_ctx_open(struct pp_ctx *ctx, const struct pp_opts *o)
{
	memset(ctx, 0, sizeof(*ctx));
	ctx->size = o->size;
	ctx->rx_depth = o->rx_depth;
	ctx->send_flags = FERRY_SEND_SIGNALED;
	ctx->buf = ferry_alloc(o->size);
	ctx->context = pp_open_device(o->devname);
	if (!ctx->buf || !ctx->context)
		return -1;
	memset(ctx->buf, 0x7b, o->size);
	if (o->events && !(ctx->channel = ferry_create_comp_channel(ctx->context))) {
		perror("Couldn't create completion channel");
		return -1;
	}
	ctx->pd = ferry_alloc_pd(ctx->context);
	ctx->mr = ctx->pd ? ferry_reg_mr(ctx->pd, ctx->buf, o->size,
					 FERRY_ACCESS_LOCAL_WRITE) : NULL;
	ctx->cq = ctx->mr ? ferry_create_cq(ctx->context, (int)o->rx_depth + 1, NULL,
					    ctx->channel, 0) : NULL;
	if (!ctx->cq) {
		perror("Couldn't allocate PD, MR or CQ");
		return -1;
	}
	return pp_qp_init(ctx, o);
}

static void pp_ctx_close(struct pp_ctx *ctx)
{
	if (ctx->qp)
		ferry_destroy_qp(ctx->qp);
	if (ctx->cq) {
		if (ctx->cq_events)
			ferry_ack_cq_events(ctx->cq, ctx->cq_events);
		ferry_destroy_cq(ctx->cq);
	}
	if (ctx->mr)
		ferry_dereg_mr(ctx->mr);
	if (ctx->pd)
		ferry_dealloc_pd(ctx->pd);
	if (ctx->channel)
		ferry_destroy_comp_channel(ctx->channel);
	if (ctx->context)
		ferry_close_device(ctx->context);
	ferry_free(ctx->buf);
}

/* INIT -> RTR -> RTS towards @dest, with the attributes the QP's type takes. */
static int pp_connect(struct pp_ctx *ctx, const struct pp_opts *o, uint32_t my_psn,
		      const struct pp_dest *dest)
{
	bool rc = !o->uc;
	struct ferry_qp_attr attr = {
		.qp_state = FERRY_QPS_RTR, .path_mtu = o->mtu,
		.dest_qp_num = dest->qpn, .rq_psn = dest->psn,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .dlid = dest->lid, .sl = (uint8_t)o->sl,
			     .port_num = (uint8_t)o->ib_port },
	};
	int mask = FERRY_QP_STATE | FERRY_QP_AV | FERRY_QP_PATH_MTU | FERRY_QP_DEST_QPN |
		   FERRY_QP_RQ_PSN;

	if (dest->gid.global.interface_id) {
		attr.ah_attr.is_global = 1;
		attr.ah_attr.grh.hop_limit = 1;
		attr.ah_attr.grh.dgid = dest->gid;
		attr.ah_attr.grh.sgid_index = (uint8_t)(o->gidx < 0 ? 0 : o->gidx);
	}
	if (rc)
		mask |= FERRY_QP_MAX_DEST_RD_ATOMIC | FERRY_QP_MIN_RNR_TIMER;
	if (ferry_modify_qp(ctx->qp, &attr, mask) < 0) {
		perror("Failed to modify QP to RTR");
		return -1;
	}
	attr.qp_state = FERRY_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.sq_psn = my_psn;
	attr.max_rd_atomic = 1;
	mask = FERRY_QP_STATE | FERRY_QP_SQ_PSN;
	if (rc)
		mask |= FERRY_QP_TIMEOUT | FERRY_QP_RETRY_CNT | FERRY_QP_RNR_RETRY |
			FERRY_QP_MAX_QP_RD_ATOMIC;
	if (ferry_modify_qp(ctx->qp, &attr, mask) < 0) {
		perror("Failed to modify QP to RTS");
		return -1;
	}
	return 0;
}

/* Post up to @n receives of the whole buffer; how many went. */
static unsigned int pp_post_recv(struct pp_ctx *ctx, unsigned int n)
{
	struct ferry_sge sge = { (uintptr_t)ctx->buf, ctx->size, ctx->mr->lkey };
	struct ferry_recv_wr wr = { .wr_id = PP_RECV_WRID, .sg_list = &sge, .num_sge = 1 };
	struct ferry_recv_wr *bad;
	unsigned int i;

	for (i = 0; i < n; i++)
		if (ferry_post_recv(ctx->qp, &wr, &bad) < 0)
			break;
	return i;
}

static int pp_post_send(struct pp_ctx *ctx)
{
	struct ferry_sge sge = { (uintptr_t)ctx->buf, ctx->size, ctx->mr->lkey };
	struct ferry_send_wr wr = { .wr_id = PP_SEND_WRID, .sg_list = &sge, .num_sge = 1,
				    .opcode = FERRY_WR_SEND, .send_flags = ctx->send_flags };
	struct ferry_send_wr *bad;

	return ferry_post_send(ctx->qp, &wr, &bad);
}

/* The counts of the ping-pong. */
struct pp_run {
	unsigned int scnt, rcnt, routs, iters;
};

/* One completion: count it, refill receives, send the next ping. */
static int pp_on_wc(struct pp_ctx *ctx, struct pp_run *r, const struct ferry_wc *wc)
{
	if (wc->status != FERRY_WC_SUCCESS) {
		fprintf(stderr, "Failed status %s (%d) for wr_id %d\n",
			ferry_wc_status_str(wc->status), wc->status, (int)wc->wr_id);
		return -1;
	}
	switch ((int)wc->wr_id) {
	case PP_SEND_WRID:
		r->scnt++;
		break;
	case PP_RECV_WRID:
		if (--r->routs <= 1) {
			r->routs += pp_post_recv(ctx, ctx->rx_depth - r->routs);
			if (r->routs < ctx->rx_depth) {
				fprintf(stderr, "Couldn't post receive (%u)\n", r->routs);
				return -1;
			}
		}
		r->rcnt++;
		break;
	default:
		fprintf(stderr, "Completion for unknown wr_id %d\n", (int)wc->wr_id);
		return -1;
	}
	ctx->pending &= ~(int)wc->wr_id;
	if (r->scnt < r->iters && !ctx->pending) {
		if (pp_post_send(ctx) < 0) {
			perror("Couldn't post send");
			return -1;
		}
		ctx->pending = PP_RECV_WRID | PP_SEND_WRID;
	}
	return 0;
}

/* With -e: sleep until the CQ has an event, and ask for the next. */
static int pp_wait_event(struct pp_ctx *ctx)
{
	return pp_wait_cq_event(ctx->channel, ctx->cq, &ctx->cq_events);
}

static int pp_loop(struct pp_ctx *ctx, const struct pp_opts *o, struct pp_run *r)
{
	struct ferry_wc wc[2];
	int i, n;

	while (r->rcnt < r->iters || r->scnt < r->iters) {
		if (o->events && pp_wait_event(ctx) < 0)
			return -1;
		do {
			n = ferry_poll_cq(ctx->cq, 2, wc);
			if (n < 0) {
				perror("poll CQ failed");
				return -1;
			}
		} while (!o->events && n < 1);
		/* Nothing after the last: shm flushes our spare receives as soon
		 * as a finished peer exits, in the same poll as our last one. */
		for (i = 0; i < n && (r->rcnt < r->iters || r->scnt < r->iters); i++)
			if (pp_on_wc(ctx, r, &wc[i]) < 0)
				return -1;
	}
	return 0;
}

/* Our address: LID, QPN, a random PSN, and with -g the GID. */
static int pp_my_dest(struct pp_ctx *ctx, const struct pp_opts *o, struct pp_dest *d)
{
	struct ferry_port_attr port;
	char gid[PP_GID_STRLEN];

	memset(d, 0, sizeof(*d));
	if (ferry_query_port(ctx->context, (uint8_t)o->ib_port, &port) < 0) {
		fprintf(stderr, "Couldn't get port info\n");
		return -1;
	}
	d->lid = port.lid;
	if (port.link_layer != FERRY_LINK_LAYER_ETHERNET && !d->lid) {
		fprintf(stderr, "Couldn't get local LID\n");
		return -1;
	}
	if (o->gidx >= 0 && ferry_query_gid(ctx->context, (uint8_t)o->ib_port, o->gidx,
					    &d->gid) < 0) {
		fprintf(stderr, "can't read sgid of index %d\n", o->gidx);
		return -1;
	}
	d->qpn = ctx->qp->qp_num;
	d->psn = (uint32_t)lrand48() & 0xffffff;
	pp_gid_str(&d->gid, gid);
	printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
	       d->lid, d->qpn, d->psn, gid);
	return 0;
}

/* Trade addresses; the server joins its QP before it answers. */
static int pp_trade(struct pp_ctx *ctx, const struct pp_opts *o, const struct pp_dest *mine,
		    struct pp_dest *peer)
{
	char gid[PP_GID_STRLEN];
	int fd;

	if (o->server) {
		if (pp_exchange_client(o->server, o->port, mine, peer) < 0)
			return -1;
	} else {
		fd = pp_server_accept(o->port, peer);
		if (fd < 0)
			return -1;
		if (pp_connect(ctx, o, mine->psn, peer) < 0) {
			close(fd);
			return -1;
		}
		if (pp_server_reply(fd, mine) < 0)
			return -1;
	}
	pp_gid_str(&peer->gid, gid);
	printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
	       peer->lid, peer->qpn, peer->psn, gid);
	return o->server ? pp_connect(ctx, o, mine->psn, peer) : 0;
}

int main(int argc, char **argv)
{
	struct pp_run r = { 0 };
	struct pp_dest mine, peer;
	struct timeval start, end;
	struct pp_opts o;
	struct pp_ctx ctx;
	int ret = 1;

	if (pp_parse(argc, argv, &o) < 0)
		return 1;
	srand48(getpid() * time(NULL));
	if (pp_ctx_open(&ctx, &o) < 0)
		goto out;
	r.iters = o.iters;
	r.routs = pp_post_recv(&ctx, ctx.rx_depth);
	if (r.routs < ctx.rx_depth) {
		fprintf(stderr, "Couldn't post receive (%u)\n", r.routs);
		goto out;
	}
	if (o.events && ferry_req_notify_cq(ctx.cq, 0) < 0) {
		perror("Couldn't request CQ notification");
		goto out;
	}
	if (pp_my_dest(&ctx, &o, &mine) < 0 || pp_trade(&ctx, &o, &mine, &peer) < 0)
		goto out;
	ctx.pending = PP_RECV_WRID;
	if (o.server) {
		if (pp_post_send(&ctx) < 0) {
			perror("Couldn't post send");
			goto out;
		}
		ctx.pending |= PP_SEND_WRID;
	}
	gettimeofday(&start, NULL);
	if (pp_loop(&ctx, &o, &r) < 0)
		goto out;
	gettimeofday(&end, NULL);
	pp_report(o.size, o.iters, &start, &end);
	ret = 0;
out:
	pp_ctx_close(&ctx);
	return ret;
}
