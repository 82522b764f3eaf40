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

#define MIX_REGION (4u << 20)		/* each of src, dst, win, rsrc */
#define MIX_RDMA_MAX (256u << 10)	/* largest WRITE / READ */
#define MIX_SEND_MAX (64u << 10)	/* largest SEND = a slot's size */
#define MIX_SLOTS 64			/* server receive slots */
#define MIX_CREDIT_EVERY 16		/* receives per credit message */
#define MIX_CREDIT_RECVS 16		/* client receives for credits, reply */
#define MIX_CTRL_LEN 64			/* a control message's buffer */
#define MIX_SQ_DEPTH 32
#define MIX_CQ_DEPTH 256
#define MIX_IMM_FINAL 0xffffffffu	/* client -> server: the hash follows */
#define MIX_IMM_REPLY 0xfffffffeu	/* server -> client: the verdict */
#define MIX_CM_TIMEOUT_MS 20000
#define MIX_LOST_WAIT_MS 10000		/* DISCONNECTED after a flush, at most */

/* wr_id kinds (the low byte); the rest is a slot or credit index. */
enum mix_wr {
	MIX_WR_WRITE = 1,
	MIX_WR_READ,
	MIX_WR_SEND,
	MIX_WR_CTRL,		/* a credit, final or reply message */
	MIX_WR_RECV_SLOT,
	MIX_WR_RECV_CTRL,
};

/* The server's memory, as the accept's private data describes it. */
struct mix_advert {
	uint64_t addr;		/* win; rsrc follows it */
	uint32_t rkey;
	uint32_t region;
};

/* The final message: what the server's win must hash to. */
struct mix_final {
	uint64_t win_hash;
	uint64_t sends;
	uint64_t send_bytes;
};

struct mix {
	/* options */
	bool server, expect_lost;
	const char *addr;
	uint16_t port;
	uint64_t seed, total;
	/* CM and verbs objects */
	struct ferry_event_channel *channel;
	struct ferry_cm_id *listen_id, *id;
	struct ferry_pd *pd;
	struct ferry_comp_channel *comp;
	struct ferry_cq *cq;
	/* memory: one registered block each side, and its parts */
	uint8_t *mem;
	struct ferry_mr *mr;
	uint8_t *src, *dst, *win, *rsrc, *slots, *ctrl, *check;
	uint8_t *want_src, *want_rsrc;	/* the seed's contents, unregistered */
	uint8_t *model_win, *model_dst;	/* client: what must be there */
	struct mix_advert peer;
	/* progress */
	uint64_t rng, moved, sends, send_bytes, recvs, credits, ctrl_seq;
	unsigned int outstanding;
	bool lost, disconnected, done, reply_ok;
	bool closing;		/* disconnecting: flushes are expected */
	struct mix_final final;
};

static void mix_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void mix_err(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("tcp_mix: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* --- seeded bytes --- */

/* splitmix64: small, fast, and every seed gives a full-period stream. */
static uint64_t mix_rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t mix_rng_below(uint64_t *state, uint64_t bound)
{
	return mix_rng_next(state) % bound;
}

static void mix_fill(uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t state = seed, word;
	size_t i;

	for (i = 0; i < len; i += 8) {
		word = mix_rng_next(&state);
		memcpy(buf + i, &word, len - i < 8 ? len - i : 8);
	}
}

/* FNV-1a over 64-bit words: any changed byte changes it. */
static uint64_t mix_hash(const uint8_t *buf, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull, word;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		memcpy(&word, buf + i, 8);
		h = (h ^ word) * 0x100000001b3ull;
	}
	for (; i < len; i++)
		h = (h ^ buf[i]) * 0x100000001b3ull;
	return h;
}

static double mix_now_real(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --- memory --- */

static size_t mix_mem_size(const struct mix *mix)
{
	/* server: win rsrc slots ctrl; client: src dst check ctrl */
	return 3 * (size_t)MIX_REGION + (mix->server ? MIX_SLOTS * MIX_SEND_MAX : 0) +
		MIX_CREDIT_RECVS * MIX_CTRL_LEN * 2;
}

static void mix_mem_carve(struct mix *mix)
{
	uint8_t *p = mix->mem;

	if (mix->server) {
		mix->win = p;
		mix->rsrc = p + MIX_REGION;
		mix->slots = p + 2 * (size_t)MIX_REGION;
		p = mix->slots + MIX_SLOTS * MIX_SEND_MAX;
	} else {
		mix->src = p;
		mix->dst = p + MIX_REGION;
		mix->check = p + 2 * (size_t)MIX_REGION;
		p = mix->check + MIX_REGION;
	}
	mix->ctrl = p;	/* receives first, then as many sends */
}

static int mix_mem_setup(struct mix *mix)
{
	size_t size = mix_mem_size(mix);

	mix->mem = ferry_alloc(size);
	mix->want_src = malloc(MIX_REGION);
	mix->want_rsrc = malloc(MIX_REGION);
	mix->model_win = calloc(1, MIX_REGION);
	mix->model_dst = calloc(1, MIX_REGION);
	if (!mix->mem || !mix->want_src || !mix->want_rsrc || !mix->model_win ||
	    !mix->model_dst) {
		mix_err("out of memory");
		return -1;
	}
	memset(mix->mem, 0, size);
	mix_mem_carve(mix);
	mix_fill(mix->want_src, MIX_REGION, mix->seed ^ 0x5352431);
	mix_fill(mix->want_rsrc, MIX_REGION, mix->seed ^ 0x5253524);
	if (mix->server)
		memcpy(mix->rsrc, mix->want_rsrc, MIX_REGION);
	else
		memcpy(mix->src, mix->want_src, MIX_REGION);
	mix->mr = ferry_reg_mr(mix->pd, mix->mem, size, FERRY_ACCESS_LOCAL_WRITE |
			       FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ);
	if (!mix->mr) {
		mix_err("ferry_reg_mr(%zu): %s", size, strerror(errno));
		return -1;
	}
	return 0;
}

/* --- posts --- */

static int mix_post(struct mix *mix, struct ferry_send_wr *wr, const char *what)
{
	struct ferry_send_wr *bad;

	wr->send_flags |= FERRY_SEND_SIGNALED;
	if (ferry_post_send(mix->id->qp, wr, &bad)) {
		if (!mix->expect_lost || !mix->lost)
			mix_err("ferry_post_send(%s): %s", what, strerror(errno));
		return -1;
	}
	mix->outstanding++;
	return 0;
}

static int mix_post_recv(struct mix *mix, uint64_t wr_id, void *buf, uint32_t len)
{
	struct ferry_sge sge = {
		.addr = (uintptr_t)buf, .length = len, .lkey = mix->mr->lkey,
	};
	struct ferry_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	struct ferry_recv_wr *bad;

	if (ferry_post_recv(mix->id->qp, &wr, &bad)) {
		mix_err("ferry_post_recv: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static int mix_post_recv_slot(struct mix *mix, unsigned int slot)
{
	return mix_post_recv(mix, MIX_WR_RECV_SLOT | (uint64_t)slot << 8,
			     mix->slots + (size_t)slot * MIX_SEND_MAX, MIX_SEND_MAX);
}

static int mix_post_recv_ctrl(struct mix *mix, unsigned int i)
{
	return mix_post_recv(mix, MIX_WR_RECV_CTRL | (uint64_t)i << 8,
			     mix->ctrl + (size_t)i * MIX_CTRL_LEN, MIX_CTRL_LEN);
}

/* A control message: @imm, and @len bytes of @data (a copy is kept). */
static int mix_post_ctrl(struct mix *mix, uint32_t imm, const void *data, uint32_t len)
{
	uint8_t *buf = mix->ctrl + (MIX_CREDIT_RECVS + mix->ctrl_seq++ % MIX_CREDIT_RECVS) *
		MIX_CTRL_LEN;
	struct ferry_sge sge = { .addr = (uintptr_t)buf, .length = len,
				 .lkey = mix->mr->lkey };
	struct ferry_send_wr wr = {
		.wr_id = MIX_WR_CTRL, .sg_list = &sge, .num_sge = len ? 1 : 0,
		.opcode = FERRY_WR_SEND_WITH_IMM, .imm_data = htonl(imm),
	};

	if (len)
		memcpy(buf, data, len);
	return mix_post(mix, &wr, "control message");
}

/* --- the client's operations --- */

static uint32_t mix_draw_len(struct mix *mix, uint32_t max)
{
	/* A quarter small (headers and CRCs dominate), the rest up to @max. */
	if (mix_rng_below(&mix->rng, 4) == 0)
		return 1 + (uint32_t)mix_rng_below(&mix->rng, 4096);
	return 1 + (uint32_t)mix_rng_below(&mix->rng, max);
}

static int mix_post_rdma(struct mix *mix, bool write)
{
	uint32_t len = mix_draw_len(mix, MIX_RDMA_MAX);
	uint32_t loc = (uint32_t)mix_rng_below(&mix->rng, MIX_REGION - len + 1);
	uint32_t rem = (uint32_t)mix_rng_below(&mix->rng, MIX_REGION - len + 1);
	struct ferry_sge sge = { .length = len, .lkey = mix->mr->lkey };
	struct ferry_send_wr wr = { .sg_list = &sge, .num_sge = 1 };

	if (write) {
		sge.addr = (uintptr_t)(mix->src + loc);
		wr.wr_id = MIX_WR_WRITE;
		wr.opcode = FERRY_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = mix->peer.addr + rem;
		memcpy(mix->model_win + rem, mix->want_src + loc, len);
	} else {
		sge.addr = (uintptr_t)(mix->dst + loc);
		wr.wr_id = MIX_WR_READ;
		wr.opcode = FERRY_WR_RDMA_READ;
		wr.wr.rdma.remote_addr = mix->peer.addr + MIX_REGION + rem;
		memcpy(mix->model_dst + loc, mix->want_rsrc + rem, len);
	}
	wr.wr.rdma.rkey = mix->peer.rkey;
	mix->moved += len;
	return mix_post(mix, &wr, write ? "RDMA WRITE" : "RDMA READ");
}

static int mix_post_send(struct mix *mix)
{
	uint32_t len = mix_draw_len(mix, MIX_SEND_MAX);
	uint32_t loc = (uint32_t)mix_rng_below(&mix->rng, MIX_REGION - len + 1);
	struct ferry_sge sge = { .addr = (uintptr_t)(mix->src + loc), .length = len,
				 .lkey = mix->mr->lkey };
	struct ferry_send_wr wr = {
		.wr_id = MIX_WR_SEND, .sg_list = &sge, .num_sge = 1,
		.opcode = FERRY_WR_SEND_WITH_IMM, .imm_data = htonl(loc),
	};

	mix->moved += len;
	mix->sends++;
	mix->send_bytes += len;
	return mix_post(mix, &wr, "SEND");
}

/* Post operations while the send queue and the server's slots allow. */
static int mix_client_fill(struct mix *mix)
{
	while (mix->outstanding < MIX_SQ_DEPTH - 2 &&
	       (!mix->total || mix->moved < mix->total)) {
		uint64_t op = mix_rng_below(&mix->rng, 3);

		/* -1: the final message needs a slot of its own. */
		if (op == 2 && mix->sends - mix->credits >= MIX_SLOTS - 1)
			op = mix_rng_below(&mix->rng, 2);
		if (op == 2 ? mix_post_send(mix) : mix_post_rdma(mix, op == 0))
			return -1;
	}
	return 0;
}

/* --- completions --- */

static int mix_server_check_send(struct mix *mix, const struct ferry_wc *wc,
				 const uint8_t *buf)
{
	uint32_t loc = ntohl(wc->imm_data);

	if (!(wc->wc_flags & FERRY_WC_WITH_IMM) || wc->byte_len == 0 ||
	    wc->byte_len > MIX_SEND_MAX || loc > MIX_REGION - wc->byte_len) {
		mix_err("SEND %" PRIu64 ": bad immediate %#x or length %u", mix->recvs,
			loc, wc->byte_len);
		return -1;
	}
	if (memcmp(buf, mix->want_src + loc, wc->byte_len)) {
		mix_err("SEND %" PRIu64 " (%u bytes from offset %u): data differ",
			mix->recvs, wc->byte_len, loc);
		return -1;
	}
	mix->send_bytes += wc->byte_len;
	return 0;
}

static int mix_server_final(struct mix *mix, const struct ferry_wc *wc, const uint8_t *buf)
{
	struct mix_final final;
	uint32_t verdict = 1;

	if (wc->byte_len != sizeof(final)) {
		mix_err("final message of %u bytes", wc->byte_len);
		return -1;
	}
	memcpy(&final, buf, sizeof(final));
	if (final.win_hash != mix_hash(mix->win, MIX_REGION))
		mix_err("the WRITE target differs from the client's model");
	else if (final.sends != mix->sends || final.send_bytes != mix->send_bytes)
		mix_err("%" PRIu64 " SENDs of %" PRIu64 " bytes received, the client sent %"
			PRIu64 " of %" PRIu64, mix->sends, mix->send_bytes, final.sends,
			final.send_bytes);
	else
		verdict = 0;
	mix->reply_ok = verdict == 0;
	mix->done = true;
	return mix_post_ctrl(mix, MIX_IMM_REPLY, &verdict, sizeof(verdict));
}

static int mix_server_recv(struct mix *mix, const struct ferry_wc *wc)
{
	unsigned int slot = (unsigned int)(wc->wr_id >> 8);
	const uint8_t *buf = mix->slots + (size_t)slot * MIX_SEND_MAX;

	mix->recvs++;
	if ((wc->wc_flags & FERRY_WC_WITH_IMM) && ntohl(wc->imm_data) == MIX_IMM_FINAL)
		return mix_server_final(mix, wc, buf);
	if (mix_server_check_send(mix, wc, buf))
		return -1;
	mix->sends++;
	if (mix_post_recv_slot(mix, slot))
		return -1;
	if (mix->recvs % MIX_CREDIT_EVERY)
		return 0;
	return mix_post_ctrl(mix, (uint32_t)mix->recvs, NULL, 0);
}

static int mix_client_recv(struct mix *mix, const struct ferry_wc *wc)
{
	unsigned int i = (unsigned int)(wc->wr_id >> 8);
	uint32_t imm = ntohl(wc->imm_data), verdict;

	if (!(wc->wc_flags & FERRY_WC_WITH_IMM)) {
		mix_err("a control message without an immediate");
		return -1;
	}
	if (imm == MIX_IMM_REPLY) {
		if (wc->byte_len != sizeof(verdict)) {
			mix_err("a reply of %u bytes", wc->byte_len);
			return -1;
		}
		memcpy(&verdict, mix->ctrl + (size_t)i * MIX_CTRL_LEN, sizeof(verdict));
		mix->reply_ok = verdict == 0;
		mix->done = true;
		return 0;
	}
	if (imm < mix->credits || imm > mix->sends) {
		mix_err("credit %u, outside [%" PRIu64 ", %" PRIu64 "]", imm,
			mix->credits, mix->sends);
		return -1;
	}
	mix->credits = imm;
	return mix_post_recv_ctrl(mix, i);
}

static int mix_handle_wc(struct mix *mix, const struct ferry_wc *wc)
{
	static const char *const names[] = {
		[MIX_WR_WRITE] = "RDMA WRITE", [MIX_WR_READ] = "RDMA READ",
		[MIX_WR_SEND] = "SEND", [MIX_WR_CTRL] = "control SEND",
		[MIX_WR_RECV_SLOT] = "receive", [MIX_WR_RECV_CTRL] = "receive",
	};
	unsigned int kind = wc->wr_id & 0xff;

	if (kind == 0 || kind > MIX_WR_RECV_CTRL) {
		mix_err("completion of an unknown work request %#" PRIx64, wc->wr_id);
		return -1;
	}
	if (wc->status != FERRY_WC_SUCCESS) {
		if (!mix->expect_lost && !mix->closing)
			mix_err("%s failed: %s", names[kind], ferry_wc_status_str(wc->status));
		mix->lost = true;
		return -1;
	}
	if (kind < MIX_WR_RECV_SLOT) {
		mix->outstanding--;
		return 0;
	}
	return mix->server ? mix_server_recv(mix, wc) : mix_client_recv(mix, wc);
}

static int mix_poll_cq(struct mix *mix)
{
	struct ferry_wc wc[32];
	int n, i, total = 0;

	do {
		n = ferry_poll_cq(mix->cq, 32, wc);
		if (n < 0) {
			mix_err("ferry_poll_cq: %s", strerror(errno));
			return -1;
		}
		for (i = 0; i < n; i++)
			if (mix_handle_wc(mix, &wc[i]))
				return -1;
		total += n;
	} while (n == 32);
	return total;
}

/* --- waiting: the CQ, its channel and the CM's, in one poll(2) --- */

static int mix_take_cm_event(struct mix *mix)
{
	struct ferry_cm_event *event;
	enum ferry_cm_event_type type;

	if (ferry_get_cm_event(mix->channel, &event)) {
		mix_err("ferry_get_cm_event: %s", strerror(errno));
		return -1;
	}
	type = event->event;
	ferry_ack_cm_event(event);
	if (type == FERRY_CM_EVENT_DISCONNECTED) {
		mix->disconnected = true;
		mix->lost = true;
		return 0;
	}
	mix_err("unexpected CM event %s", ferry_event_str(type));
	return -1;
}

static int mix_take_cq_event(struct mix *mix)
{
	struct ferry_cq *cq;
	void *context;

	if (ferry_get_cq_event(mix->comp, &cq, &context)) {
		mix_err("ferry_get_cq_event: %s", strerror(errno));
		return -1;
	}
	ferry_ack_cq_events(cq, 1);
	return 0;
}

/*
 * Handle what is there, or sleep up to @timeout_ms for a completion or a CM
 * event.  Returns the completions handled (0: none came), -1 on an error,
 * a lost peer included (mix->lost tells which).
 */
static int mix_wait(struct mix *mix, int timeout_ms)
{
	struct pollfd pfd[2] = {
		{ .fd = mix->comp->fd, .events = POLLIN },
		{ .fd = mix->channel->fd, .events = POLLIN },
	};
	int n = mix_poll_cq(mix);

	if (n)
		return n;
	if (ferry_req_notify_cq(mix->cq, 0)) {
		mix_err("ferry_req_notify_cq: %s", strerror(errno));
		return -1;
	}
	n = mix_poll_cq(mix);
	if (n)
		return n;
	if (poll(pfd, 2, timeout_ms) < 0 && errno != EINTR) {
		mix_err("poll: %m");
		return -1;
	}
	if ((pfd[0].revents & POLLIN) && mix_take_cq_event(mix))
		return -1;
	if ((pfd[1].revents & POLLIN) && mix_take_cm_event(mix))
		return -1;
	return mix->lost ? -1 : 0;
}

/* Wait for CM event @want on the channel; the event is left to ack. */
static struct ferry_cm_event *mix_expect(struct mix *mix, enum ferry_cm_event_type want)
{
	struct pollfd pfd = { .fd = mix->channel->fd, .events = POLLIN };
	struct ferry_cm_event *event;

	if (poll(&pfd, 1, MIX_CM_TIMEOUT_MS) <= 0) {
		mix_err("no %s within %d ms", ferry_event_str(want), MIX_CM_TIMEOUT_MS);
		return NULL;
	}
	if (ferry_get_cm_event(mix->channel, &event)) {
		mix_err("ferry_get_cm_event: %s", strerror(errno));
		return NULL;
	}
	if (event->event == want && event->status == 0)
		return event;
	mix_err("%s (status %d), expected %s", ferry_event_str(event->event),
		event->status, ferry_event_str(want));
	ferry_ack_cm_event(event);
	return NULL;
}

static int mix_expect_ack(struct mix *mix, enum ferry_cm_event_type want)
{
	struct ferry_cm_event *event = mix_expect(mix, want);

	if (!event)
		return -1;
	ferry_ack_cm_event(event);
	return 0;
}

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
