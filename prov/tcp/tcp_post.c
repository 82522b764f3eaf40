/*
 * tcp_post.c - posting to a tcp QP: work requests are checked and
 * copied (inline payloads too) into the QP's queues; the send engine is
 * then run at once in the poster's thread, so a small message leaves
 * without waiting for the progress thread.  In ERR, posts complete at once
 * as flushed, as ibverbs has it.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tcp-internal.h"

static bool tcp_wr_needs_rfc7306(enum ferry_wr_opcode op)
{
	return op == FERRY_WR_SEND_WITH_IMM || op == FERRY_WR_RDMA_WRITE_WITH_IMM ||
	       op == FERRY_WR_ATOMIC_CMP_AND_SWP || op == FERRY_WR_ATOMIC_FETCH_AND_ADD;
}

/* 0 or the errno that refuses @wr on @qp. */
static int tcp_send_wr_check(const struct tcp_qp *qp, const struct ferry_send_wr *wr,
			     uint64_t *len_p)
{
	uint64_t len = 0;
	int i;

	if ((uint32_t)wr->num_sge > qp->cap.max_send_sge)
		return EINVAL;
	for (i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len > (1u << 31))
		return EINVAL;
	if ((wr->send_flags & FERRY_SEND_INLINE) && len > qp->cap.max_inline_data &&
	    wr->opcode != FERRY_WR_RDMA_READ)
		return EINVAL;
	/* Only a peer that said so takes opcodes 8-11 (siw would Terminate). */
	if (tcp_wr_needs_rfc7306(wr->opcode) && !qp->conn.rfc7306)
		return EOPNOTSUPP;
	if ((wr->opcode == FERRY_WR_ATOMIC_CMP_AND_SWP ||
	     wr->opcode == FERRY_WR_ATOMIC_FETCH_AND_ADD) &&
	    (wr->num_sge != 1 || len != 8 || (wr->wr.atomic.remote_addr & 7)))
		return EINVAL;
	*len_p = len;
	return 0;
}

static int tcp_send_wr_copy(struct tcp_qp *qp, const struct ferry_send_wr *wr, uint32_t len)
{
	struct tcp_swqe *w = &qp->sq[qp->sq_head & (qp->sq_size - 1)];
	int i;

	memset(w, 0, sizeof(*w));
	w->wr_id = wr->wr_id;
	w->opcode = wr->opcode;
	w->flags = wr->send_flags;
	if (qp->sq_sig_all)
		w->flags |= FERRY_SEND_SIGNALED;
	w->imm = wr->imm_data;
	w->len = len;
	if (wr->opcode == FERRY_WR_ATOMIC_CMP_AND_SWP ||
	    wr->opcode == FERRY_WR_ATOMIC_FETCH_AND_ADD) {
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->compare_add = wr->wr.atomic.compare_add;
		w->swap = wr->wr.atomic.swap;
	} else {
		w->remote_addr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
	}
	w->num_sge = wr->num_sge;
	if (wr->num_sge)	/* a zero-length WR may have no sg_list at all */
		memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*w->sge));
	if ((wr->send_flags & FERRY_SEND_INLINE) && wr->opcode != FERRY_WR_RDMA_READ && len) {
		uint32_t off = 0;

		w->inline_data = malloc(len);
		if (!w->inline_data)
			return ENOMEM;
		for (i = 0; i < wr->num_sge; i++) {
			memcpy(w->inline_data + off, (void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			off += wr->sg_list[i].length;
		}
	}
	w->state = TCP_WQE_POSTED;
	w->status = FERRY_WC_SUCCESS;
	qp->sq_head++;
	return 0;
}

/* In ERR: every WR completes flushed, signaled or not. */
static void tcp_send_flush_now(struct tcp_qp *qp, struct ferry_send_wr *wr)
{
	for (; wr; wr = wr->next) {
		struct ferry_wc wc = {
			.wr_id = wr->wr_id,
			.status = FERRY_WC_WR_FLUSH_ERR,
			.qp_num = qp->qp.qp_num,
		};

		tcp_cq_push(to_tcq(qp->qp.send_cq), &wc, false);
	}
}

int tcp_post_send(struct ferry_qp *fqp, struct ferry_send_wr *wr, struct ferry_send_wr **bad)
{
	struct tcp_qp *qp = to_tqp(fqp);
	int err = 0;

	pthread_mutex_lock(&qp->lock);
	if (qp->qp.state == FERRY_QPS_ERR) {
		tcp_send_flush_now(qp, wr);
		pthread_mutex_unlock(&qp->lock);
		return 0;
	}
	if (qp->qp.state != FERRY_QPS_RTS && qp->qp.state != FERRY_QPS_SQD) {
		err = EINVAL;
		goto out;
	}
	for (; wr; wr = wr->next) {
		uint64_t len;

		if (qp->sq_head - qp->sq_done == qp->sq_size) {
			err = ENOMEM;
			break;
		}
		err = tcp_send_wr_check(qp, wr, &len);
		if (!err)
			err = tcp_send_wr_copy(qp, wr, (uint32_t)len);
		if (err)
			break;
	}
	tcp_tx_progress(qp);
out:
	pthread_mutex_unlock(&qp->lock);
	if (err) {
		*bad = wr;
		return ERR(err);
	}
	return 0;
}

int tcp_post_recv(struct ferry_qp *fqp, struct ferry_recv_wr *wr, struct ferry_recv_wr **bad)
{
	struct tcp_qp *qp = to_tqp(fqp);
	bool kick;
	int err = 0;

	pthread_mutex_lock(&qp->lock);
	if (qp->qp.state == FERRY_QPS_RESET) {
		err = EINVAL;
		goto out;
	}
	for (; wr; wr = wr->next) {
		struct tcp_rwqe *r = &qp->rq[qp->rq_prod & (qp->rq_size - 1)];
		uint64_t len = 0;
		int i;

		if (qp->rq_prod - qp->rq_cons == qp->rq_size) {
			err = ENOMEM;
			break;
		}
		if ((uint32_t)wr->num_sge > qp->cap.max_recv_sge) {
			err = EINVAL;
			break;
		}
		for (i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		r->wr_id = wr->wr_id;
		r->num_sge = wr->num_sge;
		r->len = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
		memcpy(r->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(*r->sge));
		qp->rq_prod++;
	}
	if (qp->qp.state == FERRY_QPS_ERR)
		tcp_qp_set_error(qp, NULL);	/* flushes what was just posted */
out:
	/* A SEND waits for this receive (RNR): the progress thread takes it up. */
	kick = qp->rx_held;
	pthread_mutex_unlock(&qp->lock);
	if (kick)
		tcp_progress_kick(qp);
	if (err) {
		*bad = wr;
		return ERR(err);
	}
	return 0;
}
