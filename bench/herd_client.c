/*
 * bench/herd_client.c - a bench/herd client on ferry: a UC QP joined to its
 * own on the server, whose WRITEs (one in HERD_UC_SIGNAL signalled, inline
 * when the QP takes 64 bytes) put each request into its slot, and a UD QP
 * with 2 x window receives posted for the responses.  Every response is
 * checked from the GRH on; a request unanswered for HERD_RESEND_S is
 * written again.
 */
#include <stdio.h>
#include <string.h>

#include "herd-ferry.h"

struct herd_client {
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
	struct herd_window cl;
};

static int herd_client_open(struct herd_client *f, const struct herd_opts *o)
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

static void herd_client_close(struct herd_client *f)
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
	herd_window_fini(&f->cl);
}

static int herd_client_post_recv(struct herd_client *f, uint64_t i)
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
static int herd_client_join(struct herd_client *f, int fd, const struct herd_opts *o)
{
	struct herd_oob_client mine;
	uint64_t i;

	memset(&mine, 0, sizeof(mine));	/* the padding goes out too */
	mine.uc_qpn = f->uc_qp->qp_num;
	mine.ud_qpn = f->ud_qp->qp_num;
	mine.lid = f->dev.lid;
	mine.gid = f->dev.gid;

	for (i = 0; i < 2 * (uint64_t)o->window; i++)
		if (herd_client_post_recv(f, i))
			return -1;
	if (herd_oob_io(fd, &mine, sizeof(mine), true) ||
	    herd_oob_io(fd, &f->srv, sizeof(f->srv), false))
		return -1;
	return herd_uc_join(f->uc_qp, f->srv.lid, &f->srv.gid, f->srv.uc_qpn, f->srv.psn, true, o);
}

/* Wait while the send queue is full; an error completion ends the run. */
static int herd_client_reap(struct herd_client *f)
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
static int herd_client_write(struct herd_client *f, uint8_t slot, const struct herd_req *req)
{
	struct herd_req *src = &f->reqs[slot];
	struct ferry_sge sge = { (uintptr_t)src, sizeof(*src), f->reqs_mr->lkey };
	struct ferry_send_wr wr = { .wr_id = f->writes, .sg_list = &sge, .num_sge = 1,
				    .opcode = FERRY_WR_RDMA_WRITE }, *bad;

	if (herd_client_reap(f))
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
static int herd_client_on_recv(struct herd_client *f, const struct ferry_wc *wc)
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
	if (herd_client_post_recv(f, wc->wr_id))
		return -1;
	r = herd_window_on_resp(&f->cl, &resp);
	if (r)
		return r < 0 ? -1 : 0;
	next = herd_window_issue(&f->cl, resp.slot);
	return next ? herd_client_write(f, resp.slot, next) : 0;
}

/* Requests unanswered for HERD_RESEND_S go again; -1 after HERD_STALL_S of nothing. */
static int herd_client_resend(struct herd_client *f, double now, double last_answer)
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
		    herd_client_write(f, (uint8_t)w, herd_window_reissue(&f->cl, (uint8_t)w)))
			return -1;
	}
	return 0;
}

static int herd_client_loop(struct herd_client *f)
{
	double last_answer = herd_now();
	unsigned int idle = 0, empty = 0;
	struct herd_req *req;
	int w;

	f->cl.res->start = herd_now();
	for (w = 0; w < f->cl.window && (req = herd_window_issue(&f->cl, (uint8_t)w)); w++)
		if (herd_client_write(f, (uint8_t)w, req))
			return -1;
	while (f->cl.res->done < (uint64_t)f->cl.iters) {
		struct ferry_wc wc[HERD_WINDOW_MAX];
		int n = ferry_poll_cq(f->ud_cq, HERD_WINDOW_MAX, wc), i;

		if (n < 0) {
			perror("herd: poll the UD CQ");
			return -1;
		}
		for (i = 0; i < n; i++)
			if (herd_client_on_recv(f, &wc[i]))
				return -1;
		if (n) {
			last_answer = herd_now();
			empty = 0;
			continue;
		}
		if (++empty % 1024 == 0 && herd_client_resend(f, herd_now(), last_answer))
			return -1;
		herd_idle(&idle);
	}
	f->cl.res->end = herd_now();
	return 0;
}

int herd_client_run(const struct herd_opts *o, struct herd_shared *sh, int c, int fd)
{
	struct herd_client f = { 0 };
	int ret = -1;

	if (herd_window_init(&f.cl, o, c, &sh->res[c]) || herd_client_open(&f, o) ||
	    herd_client_join(&f, fd, o))
		goto out_close;
	ret = herd_client_loop(&f);
out_close:
	herd_client_close(&f);
	return ret;
}

