/*
 * bench/herd_server.c - bench/herd's server on ferry: the request slots
 * (ferry_alloc'd and registered for remote WRITE: peers store into them),
 * a UC QP per client that only receives those WRITEs, one UD QP with an
 * AH per client for every response, and the key-value table; it polls
 * every slot's sequence byte and answers each new request with one SEND.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "herd-ferry.h"

struct herd_server {
	struct herd_dev dev;
	struct ferry_cq *uc_cq;		/* the UC QPs': nothing completes on it */
	struct ferry_cq *ud_cq;		/* the UD QP's signalled sends */
	struct ferry_qp *ud_qp;
	struct ferry_qp *uc_qp[HERD_CLIENTS_MAX];
	struct ferry_ah *ah[HERD_CLIENTS_MAX];
	uint32_t client_ud_qpn[HERD_CLIENTS_MAX];
	struct herd_req *slots;		/* clients x window, ferry_alloc'd: peers map it */
	struct ferry_mr *slots_mr;
	struct herd_resp *resp;		/* HERD_UD_DEPTH, one per send in flight */
	struct ferry_mr *resp_mr;
	uint8_t last_seq[HERD_CLIENTS_MAX][HERD_WINDOW_MAX];
	uint64_t sent, reaped;		/* responses posted; known completed */
	uint32_t inline_max;
	struct herd_table table;
	int nclients, window;
};

static int herd_server_open(struct herd_server *s, const struct herd_opts *o)
{
	size_t slots_len = sizeof(struct herd_req) * (size_t)o->clients * (size_t)o->window;
	int c;

	s->nclients = o->clients;
	s->window = o->window;
	if (herd_table_init(&s->table, o->clients) || herd_dev_open(&s->dev, o))
		return -1;
	s->slots = ferry_alloc(slots_len);
	s->resp = ferry_alloc(sizeof(struct herd_resp) * HERD_UD_DEPTH);
	s->uc_cq = ferry_create_cq(s->dev.ctx, 4, NULL, NULL, 0);
	s->ud_cq = ferry_create_cq(s->dev.ctx, HERD_UD_DEPTH, NULL, NULL, 0);
	if (!s->slots || !s->resp || !s->uc_cq || !s->ud_cq) {
		perror("herd: server memory or CQs");
		return -1;
	}
	memset(s->slots, 0, slots_len);
	s->slots_mr = ferry_reg_mr(s->dev.pd, s->slots, slots_len,
				   FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE);
	s->resp_mr = ferry_reg_mr(s->dev.pd, s->resp, sizeof(struct herd_resp) * HERD_UD_DEPTH,
				  FERRY_ACCESS_LOCAL_WRITE);
	if (!s->slots_mr || !s->resp_mr) {
		perror("herd: register the slots");
		return -1;
	}
	s->ud_qp = herd_qp_create(&s->dev, FERRY_QPT_UD, s->ud_cq, s->ud_cq, HERD_UD_DEPTH, 1,
				  &s->inline_max);
	if (!s->ud_qp || herd_ud_ready(s->ud_qp, 0))
		return -1;
	for (c = 0; c < o->clients; c++) {
		uint32_t unused;

		s->uc_qp[c] = herd_qp_create(&s->dev, FERRY_QPT_UC, s->uc_cq, s->uc_cq, 1, 1,
					     &unused);
		if (!s->uc_qp[c])
			return -1;
	}
	return 0;
}

static void herd_server_close(struct herd_server *s)
{
	int c;

	for (c = 0; c < s->nclients; c++) {
		if (s->ah[c])
			ferry_destroy_ah(s->ah[c]);
		if (s->uc_qp[c])
			ferry_destroy_qp(s->uc_qp[c]);
	}
	if (s->ud_qp)
		ferry_destroy_qp(s->ud_qp);
	if (s->slots_mr)
		ferry_dereg_mr(s->slots_mr);
	if (s->resp_mr)
		ferry_dereg_mr(s->resp_mr);
	if (s->ud_cq)
		ferry_destroy_cq(s->ud_cq);
	if (s->uc_cq)
		ferry_destroy_cq(s->uc_cq);
	ferry_free(s->slots);
	ferry_free(s->resp);
	herd_dev_close(&s->dev);
	herd_table_fini(&s->table);
}

/* Client @c's half of the exchange: its UC QP joined, its AH made, then ours sent. */
static int herd_server_join(struct herd_server *s, int c, int fd, const struct herd_opts *o)
{
	struct herd_oob_client peer;
	struct herd_oob_server mine;
	struct ferry_ah_attr aa;

	memset(&mine, 0, sizeof(mine));	/* the padding goes out too */
	mine.slots_addr = (uintptr_t)(s->slots + (size_t)c * (size_t)s->window);
	mine.rkey = s->slots_mr->rkey;
	mine.uc_qpn = s->uc_qp[c]->qp_num;
	mine.ud_qpn = s->ud_qp->qp_num;
	mine.psn = (uint32_t)c * 4096;
	mine.lid = s->dev.lid;
	mine.gid = s->dev.gid;

	if (herd_oob_io(fd, &peer, sizeof(peer), false))
		return -1;
	if (herd_uc_join(s->uc_qp[c], peer.lid, &peer.gid, peer.uc_qpn, mine.psn, false, o))
		return -1;
	aa = herd_ah_attr(peer.lid, &peer.gid, o);
	s->ah[c] = ferry_create_ah(s->dev.pd, &aa);
	if (!s->ah[c]) {
		perror("herd: create AH");
		return -1;
	}
	s->client_ud_qpn[c] = peer.ud_qpn;
	return herd_oob_io(fd, &mine, sizeof(mine), true);
}

/* Wait for signalled sends until fewer than the queue's depth are in flight. */
static int herd_server_reap(struct herd_server *s, bool must)
{
	struct ferry_wc wc[4];
	unsigned int idle = 0;

	do {
		int n = ferry_poll_cq(s->ud_cq, 4, wc), i;

		if (n < 0) {
			perror("herd: poll the UD CQ");
			return -1;
		}
		for (i = 0; i < n; i++) {
			if (wc[i].status != FERRY_WC_SUCCESS) {
				fprintf(stderr, "herd: a response: %s\n",
					ferry_wc_status_str(wc[i].status));
				return -1;
			}
			s->reaped = wc[i].wr_id + 1;	/* covers the unsignalled before it */
		}
		if (!n && must)
			herd_idle(&idle);
	} while (must && s->sent - s->reaped >= HERD_UD_DEPTH);
	return 0;
}

static int herd_server_answer(struct herd_server *s, int c, const struct herd_req *req)
{
	struct herd_resp *r = &s->resp[s->sent % HERD_UD_DEPTH];
	struct ferry_sge sge = { (uintptr_t)r, sizeof(*r), s->resp_mr->lkey };
	struct ferry_send_wr wr = { .wr_id = s->sent, .sg_list = &sge, .num_sge = 1,
				    .opcode = FERRY_WR_SEND }, *bad;

	if (s->sent - s->reaped >= HERD_UD_DEPTH && herd_server_reap(s, true))
		return -1;
	herd_table_execute(&s->table, req, r);
	if (s->sent % HERD_UD_SIGNAL == HERD_UD_SIGNAL - 1)
		wr.send_flags |= FERRY_SEND_SIGNALED;
	if (s->inline_max >= sizeof(*r))
		wr.send_flags |= FERRY_SEND_INLINE;
	wr.wr.ud.ah = s->ah[c];
	wr.wr.ud.remote_qpn = s->client_ud_qpn[c];
	wr.wr.ud.remote_qkey = HERD_QKEY;
	if (ferry_post_send(s->ud_qp, &wr, &bad)) {
		perror("herd: post a response");
		return -1;
	}
	s->sent++;
	return (wr.send_flags & FERRY_SEND_SIGNALED) ? herd_server_reap(s, false) : 0;
}

/* One pass over every slot: how many new requests it answered, or -1. */
static int herd_server_pass(struct herd_server *s)
{
	int c, w, found = 0;

	for (c = 0; c < s->nclients; c++) {
		for (w = 0; w < s->window; w++) {
			struct herd_req *slot = &s->slots[c * s->window + w], req;
			uint8_t seq = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);

			if (seq == s->last_seq[c][w])
				continue;
			memcpy(&req, slot, sizeof(req));
			req.seq = seq;
			req.slot = (uint8_t)w;	/* the slot is where it landed, not what it says */
			s->last_seq[c][w] = seq;
			if (herd_server_answer(s, c, &req))
				return -1;
			found++;
		}
	}
	return found;
}

int herd_server_run(const struct herd_opts *o, struct herd_shared *sh, const int *fds)
{
	struct herd_server s = { 0 };
	unsigned int idle = 0;
	int c, ret = -1;

	if (herd_server_open(&s, o))
		goto out_close;
	for (c = 0; c < o->clients; c++)
		if (herd_server_join(&s, c, fds[c], o))
			goto out_close;
	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		int n = herd_server_pass(&s);

		if (n < 0)
			goto out_close;
		if (!n)
			herd_idle(&idle);
	}
	ret = 0;
out_close:
	herd_server_close(&s);
	return ret;
}

