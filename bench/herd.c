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
 * "rexmit"; the requests are idempotent); on shm nothing is lost.  With
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

#include "herd.h"

#define HERD_QKEY	0x48455244u	/* "HERD" */
#define HERD_UD_DEPTH	128		/* the server's UD send queue */
#define HERD_UD_SIGNAL	32		/* one response in this many is signalled */
#define HERD_UC_DEPTH	64		/* a client's UC send queue */
#define HERD_UC_SIGNAL	16
#define HERD_RECV_STRIDE 128		/* a client's receive buffer: GRH + response */
#define HERD_RESEND_S	0.5
#define HERD_STALL_S	20.0		/* nothing answered for this long: give up */
#define HERD_IDLE_SPINS	1		/* empty polls before a yield: see herd_idle */

/* What each side tells the other over its socketpair. */
struct herd_oob_client {
	uint32_t uc_qpn, ud_qpn;
	uint16_t lid;
	union ferry_gid gid;
};
struct herd_oob_server {
	uint64_t slots_addr;		/* this client's window of slots */
	uint32_t rkey, uc_qpn, ud_qpn, psn;
	uint16_t lid;
	union ferry_gid gid;
};

/* One device with what both sides open on it. */
struct herd_dev {
	struct ferry_context *ctx;
	struct ferry_pd *pd;
	uint16_t lid;
	union ferry_gid gid;
};

static int herd_dev_open(struct herd_dev *d, const struct herd_opts *o)
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

static void herd_dev_close(struct herd_dev *d)
{
	if (d->pd)
		ferry_dealloc_pd(d->pd);
	if (d->ctx)
		ferry_close_device(d->ctx);
}

/* The address of a peer: with a GRH when it sent a GID (RoCE needs one). */
static struct ferry_ah_attr herd_ah_attr(uint16_t lid, const union ferry_gid *gid,
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

static struct ferry_qp *herd_qp_create(struct herd_dev *d, enum ferry_qp_type type,
				       struct ferry_cq *scq, struct ferry_cq *rcq,
				       int send_depth, int recv_depth, uint32_t *inline_p)
{
	struct ferry_qp_init_attr ia = { .qp_type = type, .send_cq = scq, .recv_cq = rcq,
					 .cap = { .max_send_wr = (uint32_t)send_depth,
						  .max_recv_wr = (uint32_t)recv_depth,
						  .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ferry_qp_init_attr got;
	struct ferry_qp_attr a;
	struct ferry_qp *qp = ferry_create_qp(d->pd, &ia);

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
static int herd_ud_ready(struct ferry_qp *qp, uint32_t psn)
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
static int herd_uc_join(struct ferry_qp *qp, uint16_t lid, const union ferry_gid *gid,
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
static int herd_oob_io(int fd, void *buf, size_t len, bool out)
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
static void herd_idle(unsigned int *idle)
{
	if (++*idle >= HERD_IDLE_SPINS) {
		*idle = 0;
		sched_yield();
	}
}

/* --- the server --- */

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

static int herd_server_run(const struct herd_opts *o, struct herd_shared *sh, const int *fds)
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

/* --- a client --- */

struct herd_ferry_client {
	struct herd_dev dev;
	struct ferry_cq *uc_cq, *ud_cq;
	struct ferry_qp *uc_qp, *ud_qp;
	struct herd_req *reqs;		/* window: the WRITEs' source */
	struct ferry_mr *reqs_mr;
	uint8_t *recv;			/* 2 x window receive buffers */
	struct ferry_mr *recv_mr;
	struct herd_oob_server srv;
	uint64_t writes;		/* posted: one in HERD_UC_SIGNAL signalled */
	uint64_t write_done;
	uint32_t inline_max;
	struct herd_client cl;
};

static int herd_fc_open(struct herd_ferry_client *f, const struct herd_opts *o)
{
	size_t recv_len = HERD_RECV_STRIDE * 2 * (size_t)o->window;
	uint32_t unused;

	if (herd_dev_open(&f->dev, o))
		return -1;
	f->reqs = ferry_alloc(sizeof(struct herd_req) * HERD_WINDOW_MAX);
	f->recv = ferry_alloc(recv_len);
	f->uc_cq = ferry_create_cq(f->dev.ctx, HERD_UC_DEPTH, NULL, NULL, 0);
	f->ud_cq = ferry_create_cq(f->dev.ctx, 2 * o->window, NULL, NULL, 0);
	if (!f->reqs || !f->recv || !f->uc_cq || !f->ud_cq) {
		perror("herd: client memory or CQs");
		return -1;
	}
	f->reqs_mr = ferry_reg_mr(f->dev.pd, f->reqs, sizeof(struct herd_req) * HERD_WINDOW_MAX,
				  FERRY_ACCESS_LOCAL_WRITE);
	f->recv_mr = ferry_reg_mr(f->dev.pd, f->recv, recv_len, FERRY_ACCESS_LOCAL_WRITE);
	if (!f->reqs_mr || !f->recv_mr) {
		perror("herd: register the client's buffers");
		return -1;
	}
	f->uc_qp = herd_qp_create(&f->dev, FERRY_QPT_UC, f->uc_cq, f->uc_cq, HERD_UC_DEPTH, 1,
				  &f->inline_max);
	f->ud_qp = f->uc_qp ? herd_qp_create(&f->dev, FERRY_QPT_UD, f->ud_cq, f->ud_cq, 1,
					     2 * o->window, &unused) : NULL;
	if (!f->ud_qp)
		return -1;
	return herd_ud_ready(f->ud_qp, 0);
}

static void herd_fc_close(struct herd_ferry_client *f)
{
	if (f->ud_qp)
		ferry_destroy_qp(f->ud_qp);
	if (f->uc_qp)
		ferry_destroy_qp(f->uc_qp);
	if (f->reqs_mr)
		ferry_dereg_mr(f->reqs_mr);
	if (f->recv_mr)
		ferry_dereg_mr(f->recv_mr);
	if (f->ud_cq)
		ferry_destroy_cq(f->ud_cq);
	if (f->uc_cq)
		ferry_destroy_cq(f->uc_cq);
	ferry_free(f->reqs);
	ferry_free(f->recv);
	herd_dev_close(&f->dev);
	herd_client_fini(&f->cl);
}

static int herd_fc_post_recv(struct herd_ferry_client *f, uint64_t i)
{
	struct ferry_sge sge = { (uintptr_t)(f->recv + i * HERD_RECV_STRIDE),
				 FERRY_GRH_BYTES + sizeof(struct herd_resp), f->recv_mr->lkey };
	struct ferry_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ferry_post_recv(f->ud_qp, &wr, &bad)) {
		perror("herd: post a receive");
		return -1;
	}
	return 0;
}

/* Receives posted before our address goes out: no response finds none. */
static int herd_fc_join(struct herd_ferry_client *f, int fd, const struct herd_opts *o)
{
	struct herd_oob_client mine;
	uint64_t i;

	memset(&mine, 0, sizeof(mine));	/* the padding goes out too */
	mine.uc_qpn = f->uc_qp->qp_num;
	mine.ud_qpn = f->ud_qp->qp_num;
	mine.lid = f->dev.lid;
	mine.gid = f->dev.gid;

	for (i = 0; i < 2 * (uint64_t)o->window; i++)
		if (herd_fc_post_recv(f, i))
			return -1;
	if (herd_oob_io(fd, &mine, sizeof(mine), true) ||
	    herd_oob_io(fd, &f->srv, sizeof(f->srv), false))
		return -1;
	return herd_uc_join(f->uc_qp, f->srv.lid, &f->srv.gid, f->srv.uc_qpn, f->srv.psn, true, o);
}

/* Wait while the send queue is full; an error completion ends the run. */
static int herd_fc_reap(struct herd_ferry_client *f)
{
	unsigned int idle = 0;

	for (;;) {
		struct ferry_wc wc[4];
		int n = ferry_poll_cq(f->uc_cq, 4, wc), i;

		if (n < 0) {
			perror("herd: poll the UC CQ");
			return -1;
		}
		for (i = 0; i < n; i++) {
			if (wc[i].status != FERRY_WC_SUCCESS) {
				fprintf(stderr, "herd: a request's WRITE: %s\n",
					ferry_wc_status_str(wc[i].status));
				return -1;
			}
			f->write_done = wc[i].wr_id + 1;
		}
		if (f->writes - f->write_done < HERD_UC_DEPTH)
			return 0;
		herd_idle(&idle);
	}
}

/* WRITE slot @slot's request into the server's slot. */
static int herd_fc_write(struct herd_ferry_client *f, uint8_t slot, const struct herd_req *req)
{
	struct herd_req *src = &f->reqs[slot];
	struct ferry_sge sge = { (uintptr_t)src, sizeof(*src), f->reqs_mr->lkey };
	struct ferry_send_wr wr = { .wr_id = f->writes, .sg_list = &sge, .num_sge = 1,
				    .opcode = FERRY_WR_RDMA_WRITE }, *bad;

	if (herd_fc_reap(f))
		return -1;
	*src = *req;
	if (f->writes % HERD_UC_SIGNAL == HERD_UC_SIGNAL - 1)
		wr.send_flags |= FERRY_SEND_SIGNALED;
	if (f->inline_max >= sizeof(*src))
		wr.send_flags |= FERRY_SEND_INLINE;
	wr.wr.rdma.remote_addr = f->srv.slots_addr + (uint64_t)slot * sizeof(*src);
	wr.wr.rdma.rkey = f->srv.rkey;
	if (ferry_post_send(f->uc_qp, &wr, &bad)) {
		perror("herd: post a WRITE");
		return -1;
	}
	f->writes++;
	return 0;
}

/* One response: checked from the GRH on, the next request into its slot. */
static int herd_fc_on_recv(struct herd_ferry_client *f, const struct ferry_wc *wc)
{
	struct herd_resp resp;
	struct herd_req *next;
	int r;

	if (wc->status != FERRY_WC_SUCCESS || wc->wr_id >= 2 * (uint64_t)f->cl.window ||
	    wc->byte_len != FERRY_GRH_BYTES + sizeof(resp) || wc->src_qp != f->srv.ud_qpn) {
		fprintf(stderr, "herd: a receive: %s, %u bytes from QP %#x\n",
			ferry_wc_status_str(wc->status), wc->byte_len, wc->src_qp);
		return -1;
	}
	memcpy(&resp, f->recv + wc->wr_id * HERD_RECV_STRIDE + FERRY_GRH_BYTES, sizeof(resp));
	if (herd_fc_post_recv(f, wc->wr_id))
		return -1;
	r = herd_client_on_resp(&f->cl, &resp);
	if (r)
		return r < 0 ? -1 : 0;
	next = herd_client_issue(&f->cl, resp.slot);
	return next ? herd_fc_write(f, resp.slot, next) : 0;
}

/* Requests unanswered for HERD_RESEND_S go again; -1 after HERD_STALL_S of nothing. */
static int herd_fc_resend(struct herd_ferry_client *f, double now, double last_answer)
{
	int w;

	if (now - last_answer > HERD_STALL_S) {
		fprintf(stderr, "herd: nothing answered for %.0f s: %llu of %ld done\n",
			HERD_STALL_S, (unsigned long long)f->cl.res->done, f->cl.iters);
		return -1;
	}
	for (w = 0; w < f->cl.window; w++) {
		struct herd_pending *p = &f->cl.pend[w];

		if (p->busy && now - p->resent > HERD_RESEND_S &&
		    herd_fc_write(f, (uint8_t)w, herd_client_reissue(&f->cl, (uint8_t)w)))
			return -1;
	}
	return 0;
}

static int herd_fc_loop(struct herd_ferry_client *f)
{
	double last_answer = herd_now();
	unsigned int idle = 0, empty = 0;
	struct herd_req *req;
	int w;

	f->cl.res->start = herd_now();
	for (w = 0; w < f->cl.window && (req = herd_client_issue(&f->cl, (uint8_t)w)); w++)
		if (herd_fc_write(f, (uint8_t)w, req))
			return -1;
	while (f->cl.res->done < (uint64_t)f->cl.iters) {
		struct ferry_wc wc[HERD_WINDOW_MAX];
		int n = ferry_poll_cq(f->ud_cq, HERD_WINDOW_MAX, wc), i;

		if (n < 0) {
			perror("herd: poll the UD CQ");
			return -1;
		}
		for (i = 0; i < n; i++)
			if (herd_fc_on_recv(f, &wc[i]))
				return -1;
		if (n) {
			last_answer = herd_now();
			empty = 0;
			continue;
		}
		if (++empty % 1024 == 0 && herd_fc_resend(f, herd_now(), last_answer))
			return -1;
		herd_idle(&idle);
	}
	f->cl.res->end = herd_now();
	return 0;
}

static int herd_client_run(const struct herd_opts *o, struct herd_shared *sh, int c, int fd)
{
	struct herd_ferry_client f = { 0 };
	int ret = -1;

	if (herd_client_init(&f.cl, o, c, &sh->res[c]) || herd_fc_open(&f, o) ||
	    herd_fc_join(&f, fd, o))
		goto out_close;
	ret = herd_fc_loop(&f);
out_close:
	herd_fc_close(&f);
	return ret;
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
