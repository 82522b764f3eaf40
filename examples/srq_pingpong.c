/*
 * examples/srq_pingpong.c - ping-pong over several RC QPs whose receives
 * all come from one shared receive queue, the way rdma-core's
 * ibv_srq_pingpong does it, with whom it talks in both directions.
 *
 *   server:  srq_pingpong [options]
 *   client:  srq_pingpong [options] SERVER
 *
 * Each side opens a device (the first of ferry_get_device_list, or -d;
 * FERRY_TRANSPORT picks the transport), makes an SRQ of -r receives and -q
 * QPs on it, posts the receives, and trades one (LID, QPN, PSN, GID) per
 * QP with the other over TCP (pingpong.h: 256 of them, as rdma-core's
 * does, those past -q zero); the server joins its QPs before
 * it answers, the client after.  Then the client sends once on every QP,
 * and each side answers on the QP a message came on (the completion's
 * qp_num says which), until both have sent and received -n messages of -s
 * bytes in all.  Exit status 0 when they all completed successfully.
 * Only the public API: ferry/verbs.h.
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

enum { PP_RECV_WRID = 1, PP_SEND_WRID = 2, PP_MAX_QP = 256 };

struct pp_opts {
	const char *server;	/* NULL: we are the server */
	const char *devname;
	int port;
	int ib_port;
	unsigned int size;
	enum ferry_mtu mtu;
	int num_qp;
	unsigned int rx_depth;
	unsigned int iters;
	int sl;
	int gidx;
	bool events;
};

struct pp_ctx {
	struct ferry_context *context;
	struct ferry_comp_channel *channel;
	struct ferry_pd *pd;
	struct ferry_mr *mr;
	struct ferry_cq *cq;
	struct ferry_srq *srq;
	struct ferry_qp *qp[PP_MAX_QP];
	int num_qp;
	char *buf;
	unsigned int size;
	unsigned int send_flags;
	unsigned int rx_depth;
	int pending[PP_MAX_QP];	/* per QP: PP_*_WRID bits still to complete */
	unsigned int cq_events;
	/* Room for every completion the CQ can hold: with -e, what one poll
	 * after an event leaves behind raises no other event. */
	struct ferry_wc *wc;
	int num_wc;
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
	printf("  -q, --num-qp=<num>     number of QPs to use (default 16)\n");
	printf("  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)\n");
	printf("  -n, --iters=<iters>    number of exchanges (default 1000)\n");
	printf("  -l, --sl=<sl>          service level value\n");
	printf("  -e, --events           sleep on CQ events (default poll)\n");
	printf("  -g, --gid-idx=<gid>    local port gid index\n");
}

static const struct option pp_long_options[] = {
	{ "port", required_argument, NULL, 'p' },
	{ "ib-dev", required_argument, NULL, 'd' },
	{ "ib-port", required_argument, NULL, 'i' },
	{ "size", required_argument, NULL, 's' },
	{ "mtu", required_argument, NULL, 'm' },
	{ "num-qp", required_argument, NULL, 'q' },
	{ "rx-depth", required_argument, NULL, 'r' },
	{ "iters", required_argument, NULL, 'n' },
	{ "sl", required_argument, NULL, 'l' },
	{ "events", no_argument, NULL, 'e' },
	{ "gid-idx", required_argument, NULL, 'g' },
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
	case 'q': v = o->num_qp = (int)pp_number("number of QPs", arg, 1, PP_MAX_QP); break;
	case 'r': v = o->rx_depth = (unsigned int)pp_number("rx depth", arg, 1, 1 << 15); break;
	case 'n': v = o->iters = (unsigned int)pp_number("iters", arg, 1, 1 << 30); break;
	case 'l': v = o->sl = (int)pp_number("sl", arg, 0, 15); break;
	case 'e': o->events = true; break;
	case 'g': v = o->gidx = (int)pp_number("gid index", arg, 0, 255); break;
	default: return -1;
	}
	return v < 0 ? -1 : 0;
}

static int pp_parse(int argc, char **argv, struct pp_opts *o)
{
	int c;

	*o = (struct pp_opts){ .port = 18515, .ib_port = 1, .size = 4096,
			       .mtu = FERRY_MTU_1024, .num_qp = 16, .rx_depth = 500,
			       .iters = 1000, .gidx = -1 };
	while ((c = getopt_long(argc, argv, "p:d:i:s:m:q:r:n:l:eg:h", pp_long_options,
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
	if ((unsigned int)o->num_qp > o->rx_depth) {
		fprintf(stderr, "rx_depth %u is too small for %d QPs -- "
			"must have at least one receive per QP.\n", o->rx_depth, o->num_qp);
		return -1;
	}
	return 0;
}

/* QP @i on the SRQ, moved to INIT. */
static int pp_qp_init(struct pp_ctx *ctx, const struct pp_opts *o, int i)
{
	struct ferry_qp_init_attr init = {
		.send_cq = ctx->cq, .recv_cq = ctx->cq, .srq = ctx->srq,
		.cap = { .max_send_wr = 1, .max_send_sge = 1 },
		.qp_type = FERRY_QPT_RC,
	};
	struct ferry_qp_attr attr = { .qp_state = FERRY_QPS_INIT, .port_num = (uint8_t)o->ib_port };
	struct ferry_qp_init_attr got;

	ctx->qp[i] = ferry_create_qp(ctx->pd, &init);
	if (!ctx->qp[i]) {
		perror("Couldn't create QP");
		return -1;
	}
	ctx->num_qp = i + 1;
	/* Inline when the QP takes it, as rdma-core's does. */
	if (i == 0 && ferry_query_qp(ctx->qp[i], &attr, FERRY_QP_CAP, &got) == 0 &&
	    got.cap.max_inline_data >= ctx->size)
		ctx->send_flags |= FERRY_SEND_INLINE;
	attr = (struct ferry_qp_attr){ .qp_state = FERRY_QPS_INIT, .port_num = (uint8_t)o->ib_port };
	if (ferry_modify_qp(ctx->qp[i], &attr, FERRY_QP_STATE | FERRY_QP_PKEY_INDEX |
			    FERRY_QP_PORT | FERRY_QP_ACCESS_FLAGS) < 0) {
		perror("Failed to modify QP to INIT");
		return -1;
	}
	return 0;
}

/* The device's objects: buffer, PD, MR, one CQ, the SRQ. */
static int pp_objects_open(struct pp_ctx *ctx, const struct pp_opts *o)
{
	struct ferry_srq_init_attr sia = { .attr = { .max_wr = o->rx_depth, .max_sge = 1 } };

	if (o->events && !(ctx->channel = ferry_create_comp_channel(ctx->context))) {
		perror("Couldn't create completion channel");
		return -1;
	}
	ctx->pd = ferry_alloc_pd(ctx->context);
	ctx->mr = ctx->pd ? ferry_reg_mr(ctx->pd, ctx->buf, o->size,
					 FERRY_ACCESS_LOCAL_WRITE) : NULL;
	ctx->cq = ctx->mr ? ferry_create_cq(ctx->context, (int)o->rx_depth + o->num_qp, NULL,
					    ctx->channel, 0) : NULL;
	if (!ctx->cq) {
		perror("Couldn't allocate PD, MR or CQ");
		return -1;
	}
	ctx->srq = ferry_create_srq(ctx->pd, &sia);
	if (!ctx->srq) {
		perror("Couldn't create SRQ");
		return -1;
	}
	return 0;
}

static int pp_ctx_open(struct pp_ctx *ctx, const struct pp_opts *o)
{
	int i;

	memset(ctx, 0, sizeof(*ctx));
	ctx->size = o->size;
	ctx->rx_depth = o->rx_depth;
	ctx->send_flags = FERRY_SEND_SIGNALED;
	ctx->buf = ferry_alloc(o->size);
	ctx->context = pp_open_device(o->devname);
	if (!ctx->buf || !ctx->context)
		return -1;
	memset(ctx->buf, 0x7b, o->size);
	ctx->num_wc = o->num_qp + (int)o->rx_depth;
	ctx->wc = calloc((size_t)ctx->num_wc, sizeof(*ctx->wc));
	if (!ctx->wc) {
		perror("Couldn't allocate the completions");
		return -1;
	}
	if (pp_objects_open(ctx, o) < 0)
		return -1;
	for (i = 0; i < o->num_qp; i++)
		if (pp_qp_init(ctx, o, i) < 0)
			return -1;
	return 0;
}

static void pp_ctx_close(struct pp_ctx *ctx)
{
	int i;

	for (i = 0; i < ctx->num_qp; i++)
		ferry_destroy_qp(ctx->qp[i]);
	if (ctx->srq)
		ferry_destroy_srq(ctx->srq);
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
	free(ctx->wc);
}

/* QP @qp: INIT -> RTR -> RTS towards @dest. */
static int pp_connect_qp(struct ferry_qp *qp, const struct pp_opts *o, uint32_t my_psn,
			 const struct pp_dest *dest)
{
	struct ferry_qp_attr attr = {
		.qp_state = FERRY_QPS_RTR, .path_mtu = o->mtu,
		.dest_qp_num = dest->qpn, .rq_psn = dest->psn,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .dlid = dest->lid, .sl = (uint8_t)o->sl,
			     .port_num = (uint8_t)o->ib_port },
	};

	if (dest->gid.global.interface_id) {
		attr.ah_attr.is_global = 1;
		attr.ah_attr.grh.hop_limit = 1;
		attr.ah_attr.grh.dgid = dest->gid;
		attr.ah_attr.grh.sgid_index = (uint8_t)(o->gidx < 0 ? 0 : o->gidx);
	}
	if (ferry_modify_qp(qp, &attr, FERRY_QP_STATE | FERRY_QP_AV | FERRY_QP_PATH_MTU |
			    FERRY_QP_DEST_QPN | FERRY_QP_RQ_PSN | FERRY_QP_MAX_DEST_RD_ATOMIC |
			    FERRY_QP_MIN_RNR_TIMER) < 0) {
		perror("Failed to modify QP to RTR");
		return -1;
	}
	attr.qp_state = FERRY_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.sq_psn = my_psn;
	attr.max_rd_atomic = 1;
	if (ferry_modify_qp(qp, &attr, FERRY_QP_STATE | FERRY_QP_SQ_PSN | FERRY_QP_TIMEOUT |
			    FERRY_QP_RETRY_CNT | FERRY_QP_RNR_RETRY |
			    FERRY_QP_MAX_QP_RD_ATOMIC) < 0) {
		perror("Failed to modify QP to RTS");
		return -1;
	}
	return 0;
}

static int pp_connect(struct pp_ctx *ctx, const struct pp_opts *o, const struct pp_dest *mine,
		      const struct pp_dest *peer)
{
	int i;

	for (i = 0; i < ctx->num_qp; i++)
		if (pp_connect_qp(ctx->qp[i], o, mine[i].psn, &peer[i]) < 0)
			return -1;
	return 0;
}

/* Post up to @n receives of the whole buffer to the SRQ; how many went. */
static unsigned int pp_post_recv(struct pp_ctx *ctx, unsigned int n)
{
	struct ferry_sge sge = { (uintptr_t)ctx->buf, ctx->size, ctx->mr->lkey };
	struct ferry_recv_wr wr = { .wr_id = PP_RECV_WRID, .sg_list = &sge, .num_sge = 1 };
	struct ferry_recv_wr *bad;
	unsigned int i;

	for (i = 0; i < n; i++)
		if (ferry_post_srq_recv(ctx->srq, &wr, &bad) < 0)
			break;
	return i;
}

static int pp_post_send(struct pp_ctx *ctx, int qp_index)
{
	struct ferry_sge sge = { (uintptr_t)ctx->buf, ctx->size, ctx->mr->lkey };
	struct ferry_send_wr wr = { .wr_id = PP_SEND_WRID, .sg_list = &sge, .num_sge = 1,
				    .opcode = FERRY_WR_SEND, .send_flags = ctx->send_flags };
	struct ferry_send_wr *bad;

	return ferry_post_send(ctx->qp[qp_index], &wr, &bad);
}

/* Which of our QPs a completion names, -1 if none. */
static int pp_find_qp(const struct pp_ctx *ctx, uint32_t qp_num)
{
	int i;

	for (i = 0; i < ctx->num_qp; i++)
		if (ctx->qp[i]->qp_num == qp_num)
			return i;
	return -1;
}

/* The counts of the ping-pong. */
struct pp_run {
	unsigned int scnt, rcnt, routs, iters;
};

/* A receive completed: count it, and refill the SRQ when it runs low. */
static int pp_on_recv(struct pp_ctx *ctx, struct pp_run *r)
{
	if (--r->routs <= (unsigned int)ctx->num_qp) {
		r->routs += pp_post_recv(ctx, ctx->rx_depth - r->routs);
		if (r->routs < ctx->rx_depth) {
			fprintf(stderr, "Couldn't post receive (%u)\n", r->routs);
			return -1;
		}
	}
	r->rcnt++;
	return 0;
}

/* One completion: count it, and send the next ping on its QP. */
static int pp_on_wc(struct pp_ctx *ctx, struct pp_run *r, const struct ferry_wc *wc)
{
	int qi;

	if (wc->status != FERRY_WC_SUCCESS) {
		fprintf(stderr, "Failed status %s (%d) for wr_id %d\n",
			ferry_wc_status_str(wc->status), wc->status, (int)wc->wr_id);
		return -1;
	}
	qi = pp_find_qp(ctx, wc->qp_num);
	if (qi < 0) {
		fprintf(stderr, "Couldn't find QPN %06x\n", wc->qp_num);
		return -1;
	}
	if (wc->wr_id == PP_SEND_WRID) {
		r->scnt++;
	} else if (wc->wr_id == PP_RECV_WRID) {
		if (pp_on_recv(ctx, r) < 0)
			return -1;
	} else {
		fprintf(stderr, "Completion for unknown wr_id %d\n", (int)wc->wr_id);
		return -1;
	}
	ctx->pending[qi] &= ~(int)wc->wr_id;
	if (r->scnt < r->iters && !ctx->pending[qi]) {
		if (pp_post_send(ctx, qi) < 0) {
			perror("Couldn't post send");
			return -1;
		}
		ctx->pending[qi] = PP_RECV_WRID | PP_SEND_WRID;
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
	int i, n;

	while (r->rcnt < r->iters || r->scnt < r->iters) {
		if (o->events && pp_wait_event(ctx) < 0)
			return -1;
		do {
			n = ferry_poll_cq(ctx->cq, ctx->num_wc, ctx->wc);
			if (n < 0) {
				perror("poll CQ failed");
				return -1;
			}
		} while (!o->events && n < 1);
		/* Done at the last completion counted: a peer that is done too
		 * may be gone, and shm flushes the receives still posted. */
		for (i = 0; i < n && (r->rcnt < r->iters || r->scnt < r->iters); i++)
			if (pp_on_wc(ctx, r, &ctx->wc[i]) < 0)
				return -1;
	}
	return 0;
}

/* Our addresses: the LID (and with -g the GID), each QP's QPN, random PSNs. */
static int pp_my_dests(struct pp_ctx *ctx, const struct pp_opts *o, struct pp_dest *d)
{
	struct ferry_port_attr port;
	union ferry_gid gid = { .raw = { 0 } };
	char gid_text[PP_GID_STRLEN];
	int i;

	if (ferry_query_port(ctx->context, (uint8_t)o->ib_port, &port) < 0) {
		fprintf(stderr, "Couldn't get port info\n");
		return -1;
	}
	if (port.link_layer != FERRY_LINK_LAYER_ETHERNET && !port.lid) {
		fprintf(stderr, "Couldn't get local LID\n");
		return -1;
	}
	if (o->gidx >= 0 && ferry_query_gid(ctx->context, (uint8_t)o->ib_port, o->gidx,
					    &gid) < 0) {
		fprintf(stderr, "Could not get local gid for gid index %d\n", o->gidx);
		return -1;
	}
	pp_gid_str(&gid, gid_text);
	for (i = 0; i < ctx->num_qp; i++) {
		d[i] = (struct pp_dest){ .lid = port.lid, .qpn = ctx->qp[i]->qp_num,
					 .psn = (uint32_t)lrand48() & 0xffffff, .gid = gid };
		printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
		       d[i].lid, d[i].qpn, d[i].psn, gid_text);
	}
	return 0;
}

/*
 * Trade addresses; the server joins its QPs before it answers.  Both send
 * PP_MAX_QP of them, as rdma-core's does whatever -q says (the ones past
 * our QPs all zero): that is its conversation.
 */
static int pp_trade(struct pp_ctx *ctx, const struct pp_opts *o, const struct pp_dest *mine,
		    struct pp_dest *peer)
{
	char gid[PP_GID_STRLEN];
	int fd, i;

	if (o->server) {
		if (pp_exchange_client_n(o->server, o->port, mine, peer, PP_MAX_QP) < 0)
			return -1;
	} else {
		fd = pp_server_accept_n(o->port, peer, PP_MAX_QP);
		if (fd < 0)
			return -1;
		if (pp_connect(ctx, o, mine, peer) < 0) {
			close(fd);
			return -1;
		}
		if (pp_server_reply_n(fd, mine, PP_MAX_QP) < 0)
			return -1;
	}
	for (i = 0; i < ctx->num_qp; i++) {
		pp_gid_str(&peer[i].gid, gid);
		printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
		       peer[i].lid, peer[i].qpn, peer[i].psn, gid);
	}
	return o->server ? pp_connect(ctx, o, mine, peer) : 0;
}

/* The client opens with one message on every QP; then both answer. */
static int pp_start(struct pp_ctx *ctx, const struct pp_opts *o)
{
	int i;

	for (i = 0; i < ctx->num_qp; i++) {
		ctx->pending[i] = PP_RECV_WRID;
		if (!o->server)
			continue;
		if (pp_post_send(ctx, i) < 0) {
			perror("Couldn't post send");
			return -1;
		}
		ctx->pending[i] |= PP_SEND_WRID;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct pp_dest mine[PP_MAX_QP], peer[PP_MAX_QP];
	struct pp_run r = { 0 };
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
	if (pp_my_dests(&ctx, &o, mine) < 0 || pp_trade(&ctx, &o, mine, peer) < 0 ||
	    pp_start(&ctx, &o) < 0)
		goto out;
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
