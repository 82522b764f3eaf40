/*
 * tcp_mix_data.c - tests/tcp_mix's data path: the seeded bytes, each end's
 * memory, the posts of the client's random operations and of the control
 * messages, the completions (each SEND checked by the server as it comes,
 * the credits that keep SENDs within the server's receives), and the wait
 * on the CQ and the CM in one poll(2).  The plan of it all: tcp_mix.c.
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

void mix_err(const char *fmt, ...)
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
uint64_t mix_hash(const uint8_t *buf, size_t len)
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

double mix_now_real(void)
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

int mix_mem_setup(struct mix *mix)
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

int mix_post(struct mix *mix, struct ferry_send_wr *wr, const char *what)
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

int mix_post_recv_slot(struct mix *mix, unsigned int slot)
{
	return mix_post_recv(mix, MIX_WR_RECV_SLOT | (uint64_t)slot << 8,
			     mix->slots + (size_t)slot * MIX_SEND_MAX, MIX_SEND_MAX);
}

int mix_post_recv_ctrl(struct mix *mix, unsigned int i)
{
	return mix_post_recv(mix, MIX_WR_RECV_CTRL | (uint64_t)i << 8,
			     mix->ctrl + (size_t)i * MIX_CTRL_LEN, MIX_CTRL_LEN);
}

/* A control message: @imm, and @len bytes of @data (a copy is kept). */
int mix_post_ctrl(struct mix *mix, uint32_t imm, const void *data, uint32_t len)
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
int mix_client_fill(struct mix *mix)
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
		/* After the verdict the peer may go first: its flushes are no news. */
		if (!mix->expect_lost && !mix->closing && !mix->done)
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

int mix_take_cm_event(struct mix *mix)
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
int mix_wait(struct mix *mix, int timeout_ms)
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
struct ferry_cm_event *mix_expect(struct mix *mix, enum ferry_cm_event_type want)
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

int mix_expect_ack(struct mix *mix, enum ferry_cm_event_type want)
{
	struct ferry_cm_event *event = mix_expect(mix, want);

	if (!event)
		return -1;
	ferry_ack_cm_event(event);
	return 0;
}
