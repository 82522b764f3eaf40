/*
 * verbs_post.c - the data path of the verbs provider: ferry work-request
 * chains translated into ibverbs ones on the stack.
 *
 * No allocation: a chain is translated VERBS_WR_BATCH WRs at a time into an
 * array on the stack and posted batch by batch (posting in order, a later
 * batch only after the earlier one was accepted, is what one long chain
 * does).  SGE lists are handed over as they are: struct ferry_sge has
 * struct ibv_sge's layout (checked in verbs.c).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "verbs-internal.h"

_Static_assert((int)FERRY_WR_RDMA_WRITE == (int)IBV_WR_RDMA_WRITE &&
	       (int)FERRY_WR_SEND_WITH_IMM == (int)IBV_WR_SEND_WITH_IMM &&
	       (int)FERRY_WR_ATOMIC_FETCH_AND_ADD == (int)IBV_WR_ATOMIC_FETCH_AND_ADD,
	       "WR opcodes differ from ibverbs");
_Static_assert((int)FERRY_SEND_FENCE == (int)IBV_SEND_FENCE && (int)FERRY_SEND_SIGNALED == (int)IBV_SEND_SIGNALED &&
	       (int)FERRY_SEND_SOLICITED == (int)IBV_SEND_SOLICITED && (int)FERRY_SEND_INLINE == (int)IBV_SEND_INLINE,
	       "send flags differ from ibverbs");

static void verbs_send_wr_to_ibv(const struct ferry_qp *qp, const struct ferry_send_wr *in,
				 struct ibv_send_wr *out)
{
	out->wr_id = in->wr_id;
	out->next = NULL;
	out->sg_list = (struct ibv_sge *)in->sg_list;
	out->num_sge = in->num_sge;
	out->opcode = (enum ibv_wr_opcode)in->opcode;
	out->send_flags = in->send_flags;
	out->imm_data = in->imm_data;
	if (qp->qp_type == FERRY_QPT_UD) {
		verbs_ud_wr_to_ibv(in, out);	/* verbs_ah.c */
		return;
	}
	switch (in->opcode) {
	case FERRY_WR_ATOMIC_CMP_AND_SWP:
	case FERRY_WR_ATOMIC_FETCH_AND_ADD:
		out->wr.atomic.remote_addr = in->wr.atomic.remote_addr;
		out->wr.atomic.compare_add = in->wr.atomic.compare_add;
		out->wr.atomic.swap = in->wr.atomic.swap;
		out->wr.atomic.rkey = in->wr.atomic.rkey;
		break;
	default:
		out->wr.rdma.remote_addr = in->wr.rdma.remote_addr;
		out->wr.rdma.rkey = in->wr.rdma.rkey;
		break;
	}
}

/* A UD chain whose every WR has an AH of ours (ibverbs would follow any
 * pointer): checked whole, so that a bad one posts nothing. */
static bool verbs_ud_chain_ok(const struct ferry_qp *qp, const struct ferry_send_wr *wr)
{
	for (; wr; wr = wr->next)
		if (!ferry_ud_wr_ok(qp, wr))
			return false;
	return true;
}

/*
 * Sends are refused before RTS, receives in RESET (ferry_post_send(3)).
 * qp->state is what ferry last set or saw; a QP the device moved to ERR
 * since still takes posts, which ibverbs completes as flushed.
 */
static bool verbs_qp_takes_sends(const struct ferry_qp *qp)
{
	enum ferry_qp_state s = __atomic_load_n(&qp->state, __ATOMIC_ACQUIRE);

	return s != FERRY_QPS_RESET && s != FERRY_QPS_INIT && s != FERRY_QPS_RTR;
}

int verbs_post_send(struct ferry_qp *fqp, struct ferry_send_wr *wr,
		    struct ferry_send_wr **bad)
{
	struct ibv_qp *ibv = to_vqp(fqp)->ibv;
	struct ferry_send_wr *src[VERBS_WR_BATCH];
	struct ibv_send_wr batch[VERBS_WR_BATCH];

	if (!verbs_qp_takes_sends(fqp) ||
	    (fqp->qp_type == FERRY_QPT_UD && !verbs_ud_chain_ok(fqp, wr))) {
		*bad = wr;
		return ERR(EINVAL);
	}
	while (wr) {
		struct ibv_send_wr *ibv_bad = NULL;
		int n = 0, ret, i;

		for (; wr && n < VERBS_WR_BATCH; wr = wr->next, n++) {
			src[n] = wr;
			verbs_send_wr_to_ibv(fqp, wr, &batch[n]);
			if (n > 0)
				batch[n - 1].next = &batch[n];
		}
		ret = ibv_post_send(ibv, batch, &ibv_bad);
		if (unlikely(ret)) {
			*bad = src[0];
			for (i = 0; i < n; i++) {
				if (ibv_bad == &batch[i])
					*bad = src[i];
			}
			ferry_debug("verbs: QP %u: ibv_post_send: %d", fqp->qp_num, ret);
			return verbs_ret(ret);
		}
	}
	return 0;
}

/*
 * A receive posted in ERR must complete as flushed (ferry_post_recv(3), as
 * ibverbs).  Devices whose receive queue lives in user memory with no
 * doorbell (Soft-RoCE: librxe never enters the kernel to post a receive)
 * only flush what is queued when the QP enters ERR, so a receive posted
 * later would wait for ever.  Re-entering ERR (legal, and a no-op on a
 * device that already flushed) makes them flush it.  Only the slow path
 * pays: a QP ferry knows to be in ERR (set by modify, seen by query).
 */
static void verbs_flush_late_recvs(struct ferry_qp *fqp)
{
	struct ibv_qp_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_ERR;
	if (ibv_modify_qp(to_vqp(fqp)->ibv, &attr, IBV_QP_STATE))
		ferry_debug("verbs: QP %u: re-entering ERR to flush receives failed",
			    fqp->qp_num);
}

int verbs_post_recv(struct ferry_qp *fqp, struct ferry_recv_wr *wr,
		    struct ferry_recv_wr **bad)
{
	struct ibv_qp *ibv = to_vqp(fqp)->ibv;
	struct ferry_recv_wr *src[VERBS_WR_BATCH];
	struct ibv_recv_wr batch[VERBS_WR_BATCH];

	if (__atomic_load_n(&fqp->state, __ATOMIC_ACQUIRE) == FERRY_QPS_RESET) {
		*bad = wr;
		return ERR(EINVAL);
	}
	while (wr) {
		struct ibv_recv_wr *ibv_bad = NULL;
		int n = 0, ret, i;

		for (; wr && n < VERBS_WR_BATCH; wr = wr->next, n++) {
			src[n] = wr;
			batch[n].wr_id = wr->wr_id;
			batch[n].next = NULL;
			batch[n].sg_list = (struct ibv_sge *)wr->sg_list;
			batch[n].num_sge = wr->num_sge;
			if (n > 0)
				batch[n - 1].next = &batch[n];
		}
		ret = ibv_post_recv(ibv, batch, &ibv_bad);
		if (unlikely(ret)) {
			*bad = src[0];
			for (i = 0; i < n; i++) {
				if (ibv_bad == &batch[i])
					*bad = src[i];
			}
			ferry_debug("verbs: QP %u: ibv_post_recv: %d", fqp->qp_num, ret);
			return verbs_ret(ret);
		}
	}
	if (unlikely(__atomic_load_n(&fqp->state, __ATOMIC_ACQUIRE) == FERRY_QPS_ERR))
		verbs_flush_late_recvs(fqp);
	return 0;
}
