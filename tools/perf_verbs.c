/*
 * perf_verbs.c - the ferry rows: one RC queue pair per session over the shm
 * provider, connected with ferry_qp_connect_sock (or, in the address form,
 * made and connected by the CM on the device it chose: perf_net.c), and
 * the latency and bandwidth loops for each operation.
 *
 * Send queue bookkeeping: every send WR carries its post sequence number as
 * wr_id and only every signal_every-th one (plus those whose result we wait
 * for) is signaled, so a completion with wr_id N retires everything up to N
 * (RC completes in order).  sq_posted - sq_done is what the SQ holds.
 *
 * Waiting is busy (poll in a loop) or blocking (the standard verbs loop:
 * poll; if empty arm with ferry_req_notify_cq and poll again; if still empty
 * sleep in ferry_get_cq_event, ack, and start over).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <ferry/cm.h>
#include <ferry/verbs.h>

#include "perf.h"

#define PF_RQ_DEPTH 256		/* receive WRs kept posted */
#define PF_POLL_BATCH 32
#define PF_IMM_STOP 0xffffffffu	/* bandwidth: the last message */
#define PF_ATOMIC_PAGE 4096
#define PF_ACCESS (FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE | \
		   FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_ATOMIC)
#define PF_QP_ACCESS (FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ | \
		      FERRY_ACCESS_REMOTE_ATOMIC)

/* The ferry side of one session. */
struct perf_ferry {
	struct ferry_context *ctx;
	struct ferry_pd *pd;
	struct ferry_comp_channel *channel;	/* both CQs report here */
	struct ferry_cq *send_cq;
	struct ferry_cq *recv_cq;
	struct ferry_qp *qp;
	char *sbuf;			/* source of WRITE/SEND, READ target */
	char *rbuf;			/* the peer's WRITE target, RECV buffer */
	uint64_t *atom;			/* [0] peer's atomic target, [1] result */
	size_t buf_size;
	struct ferry_mr *smr, *rmr, *amr;
	uint64_t peer_addr;		/* the peer's rbuf */
	uint32_t peer_rkey;
	uint64_t peer_atom;
	uint32_t peer_atom_rkey;
	uint64_t sq_posted;		/* wr_id of the last send WR posted */
	uint64_t sq_done;		/* wr_id of the last one completed */
	int sq_depth;
	int signal_every;
	uint32_t max_inline;
	int rq_posted;
	bool send_armed, recv_armed;	/* req_notify pending on the CQ */
	enum perf_mode mode;		/* of the current row */
	uint64_t cas_expect;		/* what the peer's word should hold */
	int ctrl_fd;			/* to notice a dead peer while spinning */
	struct ferry_cm_id *cm_id;	/* the address form: the QP is its */
};

static void *pf_alloc(size_t size)
{
	void *p = ferry_alloc(size);

	if (!p)
		perf_die_errno("ferry_alloc");
	memset(p, 0, size);
	return p;
}

static struct ferry_mr *pf_reg(struct perf_ferry *pf, void *addr, size_t len)
{
	struct ferry_mr *mr = ferry_reg_mr(pf->pd, addr, len, PF_ACCESS);

	if (!mr)
		perf_die_errno("ferry_reg_mr");
	return mr;
}

static void pf_post_recvs(struct perf_ferry *pf, int count);

/* The QP: on its own (shm, connected by socket), or the CM id's. */
static struct ferry_qp *pf_qp_make(struct perf_ferry *pf, struct ferry_qp_init_attr *attr)
{
	if (!pf->cm_id)
		return ferry_create_qp(pf->pd, attr);
	if (ferry_cm_create_qp(pf->cm_id, pf->pd, attr) < 0)
		return NULL;
	return pf->cm_id->qp;
}

static void pf_create_qp(struct perf_ferry *pf, int inline_max)
{
	struct ferry_qp_init_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.send_cq = pf->send_cq;
	attr.recv_cq = pf->recv_cq;
	attr.qp_type = FERRY_QPT_RC;
	attr.sq_sig_all = 0;
	attr.cap.max_send_wr = (uint32_t)pf->sq_depth;
	attr.cap.max_recv_wr = PF_RQ_DEPTH;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = (uint32_t)inline_max;
	pf->qp = pf_qp_make(pf, &attr);
	if (!pf->qp && inline_max > 0 && errno == EINVAL) {
		/* the provider may not do inline data: go without */
		attr.cap.max_inline_data = 0;
		pf->qp = pf_qp_make(pf, &attr);
	}
	if (!pf->qp)
		perf_die_errno(pf->cm_id ? "ferry_cm_create_qp" : "ferry_create_qp");
	pf->max_inline = attr.cap.max_inline_data < (uint32_t)inline_max ?
			 attr.cap.max_inline_data : (uint32_t)inline_max;
}

/* Everything but the context, which @pf has: PD, CQs, buffers, the QP. */
static void pf_open_objects(struct perf_ferry *pf, int inline_max)
{
	pf->pd = ferry_alloc_pd(pf->ctx);
	if (!pf->pd)
		perf_die_errno("ferry_alloc_pd");
	pf->channel = ferry_create_comp_channel(pf->ctx);
	if (!pf->channel)
		perf_die_errno("ferry_create_comp_channel");
	pf->send_cq = ferry_create_cq(pf->ctx, 2 * pf->sq_depth, pf, pf->channel, 0);
	if (!pf->send_cq)
		perf_die_errno("ferry_create_cq (send)");
	pf->recv_cq = ferry_create_cq(pf->ctx, 2 * PF_RQ_DEPTH, pf,
				      pf->channel, 0);
	if (!pf->recv_cq)
		perf_die_errno("ferry_create_cq (recv)");
	pf->sbuf = pf_alloc(pf->buf_size);
	pf->rbuf = pf_alloc(pf->buf_size);
	pf->atom = pf_alloc(PF_ATOMIC_PAGE);
	pf->smr = pf_reg(pf, pf->sbuf, pf->buf_size);
	pf->rmr = pf_reg(pf, pf->rbuf, pf->buf_size);
	pf->amr = pf_reg(pf, pf->atom, PF_ATOMIC_PAGE);
	pf_create_qp(pf, inline_max);
}

static struct perf_ferry *pf_new(size_t buf_size, int sq_depth, int signal_every,
				 int ctrl_fd)
{
	struct perf_ferry *pf = calloc(1, sizeof(*pf));

	if (!pf)
		perf_die("out of memory");
	pf->buf_size = buf_size;
	pf->sq_depth = sq_depth;
	pf->signal_every = signal_every;
	pf->ctrl_fd = ctrl_fd;
	return pf;
}

struct perf_ferry *perf_ferry_open(size_t buf_size, int sq_depth,
				   int signal_every, int inline_max,
				   int ctrl_fd)
{
	struct perf_ferry *pf = pf_new(buf_size, sq_depth, signal_every, ctrl_fd);

	pf->ctx = ferry_open_transport("shm");
	if (!pf->ctx)
		perf_die("ferry_open_transport(\"shm\"): %s", strerror(errno));
	pf_open_objects(pf, inline_max);
	return pf;
}

/*
 * The address form (perf_net.c): the objects on the device the CM chose for
 * @id (resolved, or a connection request), its QP made by the CM; the
 * receives are posted before ferry_connect / ferry_accept, which are the
 * caller's.
 */
struct perf_ferry *perf_ferry_open_cm(struct ferry_cm_id *id, size_t buf_size,
				      int sq_depth, int signal_every, int inline_max,
				      int ctrl_fd)
{
	struct perf_ferry *pf = pf_new(buf_size, sq_depth, signal_every, ctrl_fd);

	pf->cm_id = id;
	pf->ctx = id->verbs;
	pf_open_objects(pf, inline_max);
	pf_post_recvs(pf, PF_RQ_DEPTH);
	return pf;
}

static void pf_post_recvs(struct perf_ferry *pf, int count)
{
	struct ferry_recv_wr wrs[PF_POLL_BATCH], *bad;
	struct ferry_sge sge = {
		.addr = (uintptr_t)pf->rbuf,
		.length = (uint32_t)pf->buf_size,
		.lkey = pf->rmr->lkey,
	};
	int i;

	while (count > 0) {
		int n = count < PF_POLL_BATCH ? count : PF_POLL_BATCH;

		for (i = 0; i < n; i++) {
			wrs[i].wr_id = 0;
			wrs[i].sg_list = &sge;
			wrs[i].num_sge = 1;
			wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
		}
		if (ferry_post_recv(pf->qp, wrs, &bad) < 0)
			perf_die_errno("ferry_post_recv");
		pf->rq_posted += n;
		count -= n;
	}
}

void perf_ferry_connect(struct perf_ferry *pf, int sock)
{
	if (ferry_qp_connect_sock(pf->qp, sock, PF_QP_ACCESS) < 0)
		perf_die_errno("ferry_qp_connect_sock");
	pf_post_recvs(pf, PF_RQ_DEPTH);
}

void perf_ferry_local_info(struct perf_ferry *pf, struct perf_msg *msg)
{
	msg->addr = (uintptr_t)pf->rbuf;
	msg->rkey = pf->rmr->rkey;
	msg->atomic_addr = (uintptr_t)&pf->atom[0];
	msg->atomic_rkey = pf->amr->rkey;
}

void perf_ferry_set_peer(struct perf_ferry *pf, const struct perf_msg *msg)
{
	pf->peer_addr = msg->addr;
	pf->peer_rkey = msg->rkey;
	pf->peer_atom = msg->atomic_addr;
	pf->peer_atom_rkey = msg->atomic_rkey;
}

/* The two buffers (for the memcpy yardstick: same memory ferry moves). */
void *perf_ferry_buffers(struct perf_ferry *pf, void **rbuf_p)
{
	*rbuf_p = pf->rbuf;
	return pf->sbuf;
}

static void pf_check_wc(const struct ferry_wc *wc, const char *queue)
{
	if (wc->status == FERRY_WC_SUCCESS)
		return;
	perf_die("%s completion error: %s (status %d, opcode %d, wr_id %llu)%s",
		 queue, ferry_wc_status_str(wc->status), (int)wc->status,
		 (int)wc->opcode, (unsigned long long)wc->wr_id,
		 wc->status == FERRY_WC_WR_FLUSH_ERR ?
		 ": the queue pair went to error (did the peer exit?)" : "");
}

/*
 * Block until @cq may have something: arm it first if it is not armed (the
 * caller polls again before sleeping: completions that raced the arming are
 * found then), else sleep for an event, which may belong to the other CQ.
 */
static void pf_cq_sleep(struct perf_ferry *pf, struct ferry_cq *cq,
			bool *armed)
{
	struct ferry_cq *ev_cq;
	void *ev_ctx;

	if (!*armed) {
		if (ferry_req_notify_cq(cq, 0) < 0)
			perf_die_errno("ferry_req_notify_cq");
		*armed = true;
		return;
	}
	while (ferry_get_cq_event(pf->channel, &ev_cq, &ev_ctx) < 0) {
		if (errno != EINTR)
			perf_die_errno("ferry_get_cq_event");
	}
	ferry_ack_cq_events(ev_cq, 1);
	if (ev_cq == pf->send_cq)
		pf->send_armed = false;
	else if (ev_cq == pf->recv_cq)
		pf->recv_armed = false;
	else
		perf_die("ferry_get_cq_event returned an unknown CQ %p", (void *)ev_cq);
}

/* Nothing to poll this turn: spin or sleep, as the row says. */
static void pf_idle(struct perf_ferry *pf, struct ferry_cq *cq, bool *armed,
		    unsigned long *spins)
{
	if (pf->mode == PERF_MODE_BUSY)
		perf_spin_check(pf->ctrl_fd, spins);
	else
		pf_cq_sleep(pf, cq, armed);
}

static int pf_poll_send(struct perf_ferry *pf)
{
	struct ferry_wc wc[PF_POLL_BATCH];
	int n, i;

	n = ferry_poll_cq(pf->send_cq, PF_POLL_BATCH, wc);
	if (n < 0)
		perf_die_errno("ferry_poll_cq (send)");
	for (i = 0; i < n; i++) {
		pf_check_wc(&wc[i], "send");
		pf->sq_done = wc[i].wr_id;
	}
	return n;
}

/* Wait until the send WR with wr_id @seq (and all before it) completed. */
static void pf_wait_send(struct perf_ferry *pf, uint64_t seq)
{
	unsigned long spins = 0;

	while (pf->sq_done < seq)
		if (pf_poll_send(pf) == 0)
			pf_idle(pf, pf->send_cq, &pf->send_armed, &spins);
}

/* Wait for at least one receive completion; returns how many (<= max). */
static int pf_wait_recv(struct perf_ferry *pf, struct ferry_wc *wc, int max)
{
	unsigned long spins = 0;
	int n, i;

	for (;;) {
		n = ferry_poll_cq(pf->recv_cq, max, wc);
		if (n < 0)
			perf_die_errno("ferry_poll_cq (recv)");
		if (n > 0)
			break;
		pf_idle(pf, pf->recv_cq, &pf->recv_armed, &spins);
	}
	for (i = 0; i < n; i++)
		pf_check_wc(&wc[i], "recv");
	pf->rq_posted -= n;
	return n;
}

/* Room in the send queue: retire signaled completions when it is full. */
static void pf_sq_room(struct perf_ferry *pf)
{
	unsigned long spins = 0;

	while (pf->sq_posted - pf->sq_done >= (uint64_t)pf->sq_depth)
		if (pf_poll_send(pf) == 0)
			pf_idle(pf, pf->send_cq, &pf->send_armed, &spins);
}

static void pf_post(struct perf_ferry *pf, enum ferry_wr_opcode opcode,
		    size_t len, uint32_t imm_be, bool signal)
{
	struct ferry_send_wr wr, *bad;
	struct ferry_sge sge = {
		.addr = (uintptr_t)pf->sbuf,
		.length = (uint32_t)len,
		.lkey = pf->smr->lkey,
	};

	pf_sq_room(pf);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = ++pf->sq_posted;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = opcode;
	wr.imm_data = imm_be;
	if (signal || wr.wr_id % (uint64_t)pf->signal_every == 0)
		wr.send_flags |= FERRY_SEND_SIGNALED;
	switch (opcode) {
	case FERRY_WR_ATOMIC_FETCH_AND_ADD:
	case FERRY_WR_ATOMIC_CMP_AND_SWP:
		sge.addr = (uintptr_t)&pf->atom[1];
		sge.length = sizeof(uint64_t);
		sge.lkey = pf->amr->lkey;
		wr.wr.atomic.remote_addr = pf->peer_atom;
		wr.wr.atomic.rkey = pf->peer_atom_rkey;
		wr.wr.atomic.compare_add = opcode == FERRY_WR_ATOMIC_FETCH_AND_ADD ?
					   1 : pf->cas_expect;
		wr.wr.atomic.swap = pf->cas_expect + 1;
		break;
	case FERRY_WR_RDMA_READ:
		wr.wr.rdma.remote_addr = pf->peer_addr;
		wr.wr.rdma.rkey = pf->peer_rkey;
		break;
	case FERRY_WR_RDMA_WRITE:
	case FERRY_WR_RDMA_WRITE_WITH_IMM:
		wr.wr.rdma.remote_addr = pf->peer_addr;
		wr.wr.rdma.rkey = pf->peer_rkey;
		/* fall through */
	default:
		if (len <= pf->max_inline)
			wr.send_flags |= FERRY_SEND_INLINE;
		break;
	}
	if (ferry_post_send(pf->qp, &wr, &bad) < 0)
		perf_die_errno("ferry_post_send");
}

static enum ferry_wr_opcode pf_opcode(enum perf_op op)
{
	switch (op) {
	case PERF_OP_WRITE: return FERRY_WR_RDMA_WRITE;
	case PERF_OP_WRITE_IMM: return FERRY_WR_RDMA_WRITE_WITH_IMM;
	case PERF_OP_READ: return FERRY_WR_RDMA_READ;
	case PERF_OP_FADD: return FERRY_WR_ATOMIC_FETCH_AND_ADD;
	case PERF_OP_CAS: return FERRY_WR_ATOMIC_CMP_AND_SWP;
	default: return FERRY_WR_SEND;
	}
}

/* The value the write ping-pong puts in the last byte: never 0, never the
 * previous one. */
static uint8_t pf_tag(uint64_t i)
{
	return (uint8_t)(i % 255 + 1);
}

static void pf_spin_byte(struct perf_ferry *pf, size_t off, uint8_t want)
{
	unsigned long spins = 0;
	uint8_t *p = (uint8_t *)pf->rbuf + off;

	while (__atomic_load_n(p, __ATOMIC_ACQUIRE) != want)
		perf_spin_check(pf->ctrl_fd, &spins);
}

/* Both sides, before a row: a clean flag byte and the row's wait mode. */
void perf_ferry_prepare(struct perf_ferry *pf, const struct perf_row *row)
{
	pf->mode = row->mode;
	if (row->size <= pf->buf_size)
		__atomic_store_n((uint8_t *)pf->rbuf + row->size - 1, 0,
				 __ATOMIC_RELEASE);
}

/* One round trip of the client; the caller times it. */
static void pf_lat_once(struct perf_ferry *pf, const struct perf_row *row,
			uint64_t i)
{
	struct ferry_wc wc;
	uint64_t old;

	switch (row->op) {
	case PERF_OP_WRITE:
		pf->sbuf[row->size - 1] = (char)pf_tag(i);
		pf_post(pf, FERRY_WR_RDMA_WRITE, row->size, 0, false);
		pf_spin_byte(pf, row->size - 1, pf_tag(i));
		break;
	case PERF_OP_WRITE_IMM:
	case PERF_OP_SEND:
		pf_post(pf, pf_opcode(row->op), row->size, htonl((uint32_t)i),
			false);
		pf_wait_recv(pf, &wc, 1);
		break;
	case PERF_OP_READ:
	case PERF_OP_FADD:
	case PERF_OP_CAS:
		pf_post(pf, pf_opcode(row->op), row->size, 0, true);
		pf_wait_send(pf, pf->sq_posted);
		if (row->op == PERF_OP_CAS) {
			old = __atomic_load_n(&pf->atom[1], __ATOMIC_ACQUIRE);
			pf->cas_expect = old == pf->cas_expect ? old + 1 : old;
		}
		break;
	default:
		perf_die("op %s is not a ferry op", perf_op_name(row->op));
	}
}

static void pf_lat_client(struct perf_ferry *pf, const struct perf_row *row,
			  struct perf_result *res)
{
	uint64_t total = row->warmup + row->iters, i;
	uint64_t *ns = malloc(row->iters * sizeof(*ns));
	bool uses_recv = row->op == PERF_OP_WRITE_IMM || row->op == PERF_OP_SEND;

	if (!ns)
		perf_die("out of memory");
	for (i = 0; i < total; i++) {
		uint64_t t0 = monotime_ns();

		pf_lat_once(pf, row, i);
		if (i >= row->warmup)
			ns[i - row->warmup] = monotime_ns() - t0;
		if (uses_recv)
			pf_post_recvs(pf, 1);	/* off the clock */
	}
	perf_lat_stats(ns, row->iters, res);
	free(ns);
}

/*
 * Stream row->size messages until the byte or time budget is spent, keeping
 * up to sq_depth WRs in flight.  The last one is signaled (and, for SEND and
 * WRITE_WITH_IMM, carries PF_IMM_STOP so the receiver knows it is the last);
 * the clock stops at its completion.
 */
static void pf_bw_client(struct perf_ferry *pf, const struct perf_row *row,
			 struct perf_result *res)
{
	uint64_t limit_ns = (uint64_t)(row->seconds * 1e9);
	uint64_t msgs = row->bytes / row->size, posted = 0, t0;
	enum ferry_wr_opcode opcode = pf_opcode(row->op);

	if (msgs == 0)
		msgs = 1;
	t0 = monotime_ns();
	while (posted < msgs) {
		bool last = posted + 1 == msgs;
		uint32_t imm = htonl((uint32_t)(posted & 0x7fffffff));

		if (last && row->op == PERF_OP_SEND)
			opcode = FERRY_WR_SEND_WITH_IMM;
		if (last)
			imm = PF_IMM_STOP;
		pf_post(pf, opcode, row->size, imm, last);
		posted++;
		if ((posted & 63) == 0 && monotime_ns() - t0 >= limit_ns)
			msgs = posted + 1;
	}
	pf_wait_send(pf, pf->sq_posted);
	perf_bw_result(res, posted * row->size, posted, monotime_ns() - t0);
}

void perf_ferry_client(struct perf_ferry *pf, const struct perf_row *row,
		       int ctrl_fd, struct perf_result *res)
{
	(void)ctrl_fd;
	if (row->test == PERF_TEST_LAT)
		pf_lat_client(pf, row, res);
	else
		pf_bw_client(pf, row, res);
}

/* Server side of the ping-pongs that need the server's CPU. */
static uint64_t pf_lat_server(struct perf_ferry *pf, const struct perf_row *row)
{
	uint64_t total = row->warmup + row->iters, i;
	struct ferry_wc wc;

	for (i = 0; i < total; i++) {
		if (row->op == PERF_OP_WRITE) {
			pf_spin_byte(pf, row->size - 1, pf_tag(i));
			pf->sbuf[row->size - 1] = (char)pf_tag(i);
			pf_post(pf, FERRY_WR_RDMA_WRITE, row->size, 0, false);
		} else {
			pf_wait_recv(pf, &wc, 1);
			pf_post(pf, pf_opcode(row->op), row->size,
				htonl((uint32_t)i), false);
			pf_post_recvs(pf, 1);
		}
	}
	return total;
}

/* Receiver of a SEND / WRITE_WITH_IMM stream; returns the messages seen. */
static uint64_t pf_bw_server(struct perf_ferry *pf)
{
	struct ferry_wc wc[PF_POLL_BATCH];
	uint64_t msgs = 0;
	bool stop = false;
	int n, i;

	while (!stop) {
		n = pf_wait_recv(pf, wc, PF_POLL_BATCH);
		for (i = 0; i < n; i++)
			if ((wc[i].wc_flags & FERRY_WC_WITH_IMM) &&
			    wc[i].imm_data == PF_IMM_STOP)
				stop = true;
		msgs += (uint64_t)n;
		pf_post_recvs(pf, n);
	}
	return msgs;
}

/*
 * The server's part of a row; returns messages handled.  READ, atomics and
 * the WRITE stream are one-sided: the server has nothing to do.
 */
uint64_t perf_ferry_server(struct perf_ferry *pf, const struct perf_row *row)
{
	bool two_sided = row->op == PERF_OP_SEND || row->op == PERF_OP_WRITE_IMM;

	if (row->test == PERF_TEST_LAT &&
	    (two_sided || row->op == PERF_OP_WRITE))
		return pf_lat_server(pf, row);
	if (row->test == PERF_TEST_BW && two_sided)
		return pf_bw_server(pf);
	return 0;
}

void perf_ferry_close(struct perf_ferry *pf)
{
	if (pf->cm_id)
		ferry_cm_destroy_qp(pf->cm_id);
	else if (ferry_destroy_qp(pf->qp) < 0)
		perf_die_errno("ferry_destroy_qp");
	if (ferry_dereg_mr(pf->amr) < 0 || ferry_dereg_mr(pf->rmr) < 0 ||
	    ferry_dereg_mr(pf->smr) < 0)
		perf_die_errno("ferry_dereg_mr");
	ferry_free(pf->atom);
	ferry_free(pf->rbuf);
	ferry_free(pf->sbuf);
	if (ferry_destroy_cq(pf->recv_cq) < 0 || ferry_destroy_cq(pf->send_cq) < 0)
		perf_die_errno("ferry_destroy_cq");
	if (ferry_destroy_comp_channel(pf->channel) < 0)
		perf_die_errno("ferry_destroy_comp_channel");
	if (ferry_dealloc_pd(pf->pd) < 0)
		perf_die_errno("ferry_dealloc_pd");
	/* the CM's device is the CM's */
	if (!pf->cm_id && ferry_close_device(pf->ctx) < 0)
		perf_die_errno("ferry_close_device");
	free(pf);
}
