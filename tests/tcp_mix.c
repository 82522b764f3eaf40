/*
 * tcp_mix.c - a random mix of RDMA WRITE, READ and SEND between two
 * processes over the verbs API and the CM, every byte checked at the end.
 *
 *   tcp_mix -s [-a ADDR] [-p PORT] [-S SEED] [-n BYTES] [-k]
 *   tcp_mix -c ADDR [-p PORT] [-S SEED] [-n BYTES] [-k]
 *
 * Built for tests/tcp-netns-faults.sh, which runs the two roles in two
 * network namespaces (so the CM picks its tcp transport) with loss, delay,
 * reordering and a link down on the veth between them.  The client drives:
 * from the seed it draws each operation, its size and its offsets, and keeps
 * a model of what the server's and its own memory must hold.  Memory is
 * split so that no operation's source is another's target:
 *
 *   client: src (WRITE and SEND sources, never written)  dst (READ targets)
 *   server: win (WRITE targets)  rsrc (READ sources, never written)
 *           slots (receive buffers of the SENDs)
 *
 * src and rsrc are filled from the seed, so the server can check each SEND
 * against the bytes the client must have sent (its immediate names the
 * offset), and the client knows what each READ must bring.  At the end the
 * client READs all of win back and compares it, and its dst, byte by byte
 * with its model; it then SENDs the model's hash of win, which the server
 * compares with its own memory and answers.  Both sides exit 0 only when
 * everything matched.
 *
 * SENDs are flow-controlled (an iWARP SEND that finds no receive posted is
 * fatal): the server returns a credit message every MIX_CREDIT_EVERY
 * receives, and the client keeps at most MIX_SLOTS SENDs unaccounted for.
 *
 * -k: the peer is to be killed mid-run.  Losing it is then the expected
 * end: the survivor waits for DISCONNECTED and for its QP to be in ERR,
 * prints the wall-clock time when both were true ("peer lost at SECONDS",
 * CLOCK_REALTIME, for the script to subtract its kill's time) and exits 0.
 * Without -k a lost peer is a failure.  -n 0 runs until the peer is lost.
 *
 * This file: the command line, the connection through the CM, the runs,
 * a lost peer's report; the data path is tcp_mix_data.c.
 *
 * Exit status: 0 success, 1 failure (a mismatch, an error, a lost peer),
 * 2 usage.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ferry/cm.h>
#include <ferry/verbs.h>

#include "tcp_mix.h"

/* --- a lost peer (-k) --- */

static bool mix_qp_in_err(struct mix *mix)
{
	struct ferry_qp_init_attr init;
	struct ferry_qp_attr attr;

	if (ferry_query_qp(mix->id->qp, &attr, FERRY_QP_STATE, &init)) {
		mix_err("ferry_query_qp: %s", strerror(errno));
		return false;
	}
	return attr.qp_state == FERRY_QPS_ERR;
}

/* Drain the CQ (flushes expected) until DISCONNECTED and the QP in ERR. */
static int mix_lost_report(struct mix *mix)
{
	struct pollfd pfd = { .fd = mix->channel->fd, .events = POLLIN };
	struct ferry_wc wc[32];
	int waited;

	for (waited = 0; waited < MIX_LOST_WAIT_MS; waited += 10) {
		while (ferry_poll_cq(mix->cq, 32, wc) > 0)
			;
		if (!mix->disconnected && poll(&pfd, 1, 0) > 0 && mix_take_cm_event(mix))
			return -1;
		if (mix->disconnected && mix_qp_in_err(mix)) {
			printf("tcp_mix: peer lost at %.6f: DISCONNECTED, qp ERR\n",
			       mix_now_real());
			return 0;
		}
		poll(NULL, 0, 10);
	}
	mix_err("the peer was lost but %s within %d ms", mix->disconnected ?
		"the QP is not in ERR" : "no DISCONNECTED came", MIX_LOST_WAIT_MS);
	return -1;
}

/* --- setup --- */

static int mix_verbs_setup(struct mix *mix)
{
	struct ferry_qp_init_attr attr = {
		.cap = { .max_send_wr = MIX_SQ_DEPTH, .max_recv_wr = MIX_SLOTS + 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = FERRY_QPT_RC,
	};

	mix->pd = ferry_alloc_pd(mix->id->verbs);
	mix->comp = mix->pd ? ferry_create_comp_channel(mix->id->verbs) : NULL;
	mix->cq = mix->comp ? ferry_create_cq(mix->id->verbs, MIX_CQ_DEPTH, mix,
					      mix->comp, 0) : NULL;
	if (!mix->cq) {
		mix_err("a PD, completion channel or CQ: %s", strerror(errno));
		return -1;
	}
	attr.send_cq = mix->cq;
	attr.recv_cq = mix->cq;
	if (ferry_cm_create_qp(mix->id, mix->pd, &attr)) {
		mix_err("ferry_cm_create_qp: %s", strerror(errno));
		return -1;
	}
	return mix_mem_setup(mix);
}

static void mix_conn_param_init(struct ferry_conn_param *param)
{
	memset(param, 0, sizeof(*param));
	param->responder_resources = 16;
	param->initiator_depth = 16;
	param->retry_count = 7;
	param->rnr_retry_count = 7;
}

static int mix_addr_parse(const char *text, uint16_t port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, text, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		return 0;
	}
	if (inet_pton(AF_INET6, text, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		return 0;
	}
	mix_err("not a numeric address: %s", text);
	return -1;
}

static int mix_server_accept(struct mix *mix)
{
	struct ferry_conn_param param;
	struct mix_advert advert;
	unsigned int i;

	if (mix_verbs_setup(mix))
		return -1;
	for (i = 0; i < MIX_SLOTS; i++)
		if (mix_post_recv_slot(mix, i))
			return -1;
	advert.addr = htobe64((uintptr_t)mix->win);
	advert.rkey = htonl(mix->mr->rkey);
	advert.region = htonl(MIX_REGION);
	mix_conn_param_init(&param);
	param.private_data = &advert;
	param.private_data_len = sizeof(advert);
	if (ferry_accept(mix->id, &param)) {
		mix_err("ferry_accept: %s", strerror(errno));
		return -1;
	}
	return mix_expect_ack(mix, FERRY_CM_EVENT_ESTABLISHED);
}

static int mix_server_connect(struct mix *mix)
{
	struct sockaddr_storage ss;
	struct ferry_cm_event *event;

	if (mix_addr_parse(mix->addr ? mix->addr : "0.0.0.0", mix->port, &ss))
		return -1;
	if (ferry_create_id(mix->channel, &mix->listen_id, NULL, FERRY_PS_TCP) ||
	    ferry_bind_addr(mix->listen_id, (struct sockaddr *)&ss) ||
	    ferry_listen(mix->listen_id, 1)) {
		mix_err("listening on %s port %u: %s", mix->addr ? mix->addr : "*",
			mix->port, strerror(errno));
		return -1;
	}
	printf("tcp_mix: listening on port %u\n", mix->port);
	fflush(stdout);
	event = mix_expect(mix, FERRY_CM_EVENT_CONNECT_REQUEST);
	if (!event)
		return -1;
	mix->id = event->id;
	ferry_ack_cm_event(event);
	return mix_server_accept(mix);
}

static int mix_client_take_advert(struct mix *mix, const struct ferry_cm_event *event)
{
	struct mix_advert advert;

	if (event->param.conn.private_data_len < sizeof(advert)) {
		mix_err("the server's private data is %u bytes, not an advertisement",
			event->param.conn.private_data_len);
		return -1;
	}
	memcpy(&advert, event->param.conn.private_data, sizeof(advert));
	mix->peer.addr = be64toh(advert.addr);
	mix->peer.rkey = ntohl(advert.rkey);
	if (ntohl(advert.region) != MIX_REGION) {
		mix_err("the server's regions are %u bytes, ours %u", ntohl(advert.region),
			MIX_REGION);
		return -1;
	}
	return 0;
}

static int mix_client_connect(struct mix *mix)
{
	struct ferry_conn_param param;
	struct sockaddr_storage ss;
	struct ferry_cm_event *event;
	unsigned int i;
	int rc;

	if (mix_addr_parse(mix->addr, mix->port, &ss))
		return -1;
	if (ferry_create_id(mix->channel, &mix->id, NULL, FERRY_PS_TCP) ||
	    ferry_resolve_addr(mix->id, NULL, (struct sockaddr *)&ss, MIX_CM_TIMEOUT_MS) ||
	    mix_expect_ack(mix, FERRY_CM_EVENT_ADDR_RESOLVED) ||
	    ferry_resolve_route(mix->id, MIX_CM_TIMEOUT_MS) ||
	    mix_expect_ack(mix, FERRY_CM_EVENT_ROUTE_RESOLVED)) {
		mix_err("resolving %s port %u: %s", mix->addr, mix->port, strerror(errno));
		return -1;
	}
	if (mix_verbs_setup(mix))
		return -1;
	for (i = 0; i < MIX_CREDIT_RECVS; i++)
		if (mix_post_recv_ctrl(mix, i))
			return -1;
	mix_conn_param_init(&param);
	if (ferry_connect(mix->id, &param)) {
		mix_err("ferry_connect: %s", strerror(errno));
		return -1;
	}
	event = mix_expect(mix, FERRY_CM_EVENT_ESTABLISHED);
	if (!event)
		return -1;
	rc = mix_client_take_advert(mix, event);
	ferry_ack_cm_event(event);
	return rc;
}

/* --- the runs --- */

/* Wait until nothing is outstanding (and @until, when given, is true). */
static int mix_drain(struct mix *mix, const bool *until)
{
	while (mix->outstanding || (until && !*until))
		if (mix_wait(mix, 1000) < 0)
			return -1;
	return 0;
}

/* A byte-by-byte compare, naming the first difference. */
static int mix_compare(const char *what, const uint8_t *got, const uint8_t *want)
{
	size_t i;

	if (!memcmp(got, want, MIX_REGION))
		return 0;
	for (i = 0; got[i] == want[i]; i++)
		;
	mix_err("%s: byte %zu is %#04x, expected %#04x", what, i, got[i], want[i]);
	return -1;
}

/* READ all of the server's WRITE target back, compare both sides' memory. */
static int mix_client_verify(struct mix *mix)
{
	struct ferry_sge sge = { .addr = (uintptr_t)mix->check, .length = MIX_REGION,
				 .lkey = mix->mr->lkey };
	struct ferry_send_wr wr = {
		.wr_id = MIX_WR_READ, .sg_list = &sge, .num_sge = 1,
		.opcode = FERRY_WR_RDMA_READ,
		.wr.rdma = { .remote_addr = mix->peer.addr, .rkey = mix->peer.rkey },
	};
	int rc;

	if (mix_post(mix, &wr, "RDMA READ of the WRITE target") || mix_drain(mix, NULL))
		return -1;
	rc = mix_compare("the server's WRITE target", mix->check, mix->model_win);
	if (mix_compare("the client's READ target", mix->dst, mix->model_dst))
		rc = -1;
	return rc;
}

static int mix_client_run(struct mix *mix)
{
	while (!mix->total || mix->moved < mix->total) {
		if (mix_client_fill(mix) || mix_wait(mix, 1000) < 0)
			return -1;
	}
	if (mix_drain(mix, NULL) || mix_client_verify(mix))
		return -1;
	mix->final.win_hash = mix_hash(mix->model_win, MIX_REGION);
	mix->final.sends = mix->sends;
	mix->final.send_bytes = mix->send_bytes;
	if (mix_post_ctrl(mix, MIX_IMM_FINAL, &mix->final, sizeof(mix->final)) ||
	    mix_drain(mix, &mix->done))
		return -1;
	if (!mix->reply_ok) {
		mix_err("the server found its memory differs from the model");
		return -1;
	}
	printf("tcp_mix: %" PRIu64 " bytes moved (%" PRIu64 " SENDs), every byte as expected\n",
	       mix->moved, mix->sends);
	return 0;
}

static int mix_server_run(struct mix *mix)
{
	/*
	 * Once the verdict is made the client may disconnect before our last
	 * credit or the reply itself completes here: that is no failure.
	 */
	if (mix_drain(mix, &mix->done) && !mix->done)
		return -1;
	if (!mix->reply_ok)
		return -1;
	printf("tcp_mix: served %" PRIu64 " SENDs of %" PRIu64 " bytes, memory as the"
	       " client's model\n", mix->sends, mix->send_bytes);
	return 0;
}

/* After a good run: the client disconnects, the server sees it. */
static void mix_disconnect(struct mix *mix)
{
	mix->closing = true;
	if (!mix->server)
		ferry_disconnect(mix->id);
	while (!mix->disconnected)
		if (mix_wait(mix, MIX_LOST_WAIT_MS) <= 0 && !mix->disconnected)
			break;
}

static void mix_teardown(struct mix *mix)
{
	if (mix->mr)
		ferry_dereg_mr(mix->mr);
	if (mix->id && mix->id->qp)
		ferry_cm_destroy_qp(mix->id);
	if (mix->cq)
		ferry_destroy_cq(mix->cq);
	if (mix->comp)
		ferry_destroy_comp_channel(mix->comp);
	if (mix->pd)
		ferry_dealloc_pd(mix->pd);
	if (mix->id)
		ferry_destroy_id(mix->id);
	if (mix->listen_id)
		ferry_destroy_id(mix->listen_id);
	ferry_destroy_event_channel(mix->channel);
	ferry_free(mix->mem);
	free(mix->want_src);
	free(mix->want_rsrc);
	free(mix->model_win);
	free(mix->model_dst);
}

/* --- main --- */

static void mix_usage(void)
{
	fprintf(stderr, "usage: tcp_mix -s [-a ADDR] [-p PORT] [-S SEED] [-n BYTES] [-k]\n"
		"       tcp_mix -c ADDR [-p PORT] [-S SEED] [-n BYTES] [-k]\n");
	exit(2);
}

static void mix_parse(struct mix *mix, int argc, char **argv)
{
	int opt;

	mix->port = 7471;
	mix->seed = 1;
	mix->total = 256ull << 20;
	while ((opt = getopt(argc, argv, "sc:a:p:S:n:k")) != -1) {
		switch (opt) {
		case 's': mix->server = true; break;
		case 'c': mix->addr = optarg; break;
		case 'a': mix->addr = optarg; break;
		case 'p': mix->port = (uint16_t)strtoul(optarg, NULL, 0); break;
		case 'S': mix->seed = strtoull(optarg, NULL, 0); break;
		case 'n': mix->total = strtoull(optarg, NULL, 0); break;
		case 'k': mix->expect_lost = true; break;
		default: mix_usage();
		}
	}
	if (optind != argc || (!mix->server && !mix->addr) || !mix->port)
		mix_usage();
	mix->rng = mix->seed;
}

int main(int argc, char **argv)
{
	struct mix mix;
	int rc;

	memset(&mix, 0, sizeof(mix));
	mix_parse(&mix, argc, argv);
	mix.channel = ferry_create_event_channel();
	if (!mix.channel) {
		mix_err("ferry_create_event_channel: %s", strerror(errno));
		return 1;
	}
	rc = mix.server ? mix_server_connect(&mix) : mix_client_connect(&mix);
	if (rc == 0) {
		/* For the scripts: faults are to come once the transfer is on. */
		printf("tcp_mix: connected\n");
		fflush(stdout);
	}
	if (rc == 0)
		rc = mix.server ? mix_server_run(&mix) : mix_client_run(&mix);
	if (rc && mix.lost && mix.expect_lost)
		rc = mix_lost_report(&mix);
	else if (rc == 0)
		mix_disconnect(&mix);
	mix_teardown(&mix);
	return rc ? 1 : 0;
}
