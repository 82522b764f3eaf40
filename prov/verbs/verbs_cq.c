/*
 * verbs_cq.c - completion channels and completion queues of the verbs
 * provider.
 *
 * Each ibv_cq's cq_context points at its struct verbs_cq, so an event read
 * from the ibv channel leads straight back to the ferry CQ (the user's
 * cq_context is kept by the core in cq->cq_context).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "verbs-internal.h"

_Static_assert((int)FERRY_WC_GENERAL_ERR == (int)IBV_WC_GENERAL_ERR &&
	       (int)FERRY_WC_RNR_RETRY_EXC_ERR == (int)IBV_WC_RNR_RETRY_EXC_ERR &&
	       (int)FERRY_WC_WR_FLUSH_ERR == (int)IBV_WC_WR_FLUSH_ERR,
	       "completion statuses differ from ibverbs");
_Static_assert((int)FERRY_WC_FETCH_ADD == (int)IBV_WC_FETCH_ADD &&
	       (int)FERRY_WC_RECV == (int)IBV_WC_RECV &&
	       (int)FERRY_WC_RECV_RDMA_WITH_IMM == (int)IBV_WC_RECV_RDMA_WITH_IMM,
	       "completion opcodes differ from ibverbs");
_Static_assert((int)FERRY_WC_WITH_IMM == (int)IBV_WC_WITH_IMM, "wc flags differ from ibverbs");

/* --- completion channels --- */

struct ferry_comp_channel *verbs_create_comp_channel(struct ferry_context *ctx)
{
	struct verbs_channel *vch = calloc(1, sizeof(*vch));

	if (!vch)
		return NULL;
	errno = 0;
	vch->ibv = verbs_ptr(ibv_create_comp_channel(verbs_ibv_context(ctx)), ENOMEM);
	if (!vch->ibv) {
		ferry_debug("verbs: ibv_create_comp_channel: %m");
		free(vch);
		return NULL;
	}
	vch->ch.context = ctx;
	vch->ch.fd = vch->ibv->fd;
	return &vch->ch;
}

int verbs_destroy_comp_channel(struct ferry_comp_channel *ch)
{
	struct verbs_channel *vch = to_vch(ch);

	if (verbs_ret(ibv_destroy_comp_channel(vch->ibv)))
		return -1;
	free(vch);
	return 0;
}

/*
 * Blocks unless the user made ch->fd non-blocking; then EAGAIN, as
 * ibv_get_cq_event has it.
 */
int verbs_get_cq_event(struct ferry_comp_channel *ch, struct ferry_cq **cq_p)
{
	struct ibv_cq *ibv_cq;
	void *cq_context;

	errno = 0;
	if (verbs_ret_errno(ibv_get_cq_event(to_vch(ch)->ibv, &ibv_cq, &cq_context)))
		return -1;
	*cq_p = &((struct verbs_cq *)cq_context)->cq;
	return 0;
}

void verbs_ack_cq_events(struct ferry_cq *cq, unsigned int n)
{
	ibv_ack_cq_events(to_vcq(cq)->ibv, n);
}

/* --- completion queues --- */

struct ferry_cq *verbs_create_cq(struct ferry_context *ctx, int cqe,
				 struct ferry_comp_channel *ch)
{
	struct verbs_cq *vcq = calloc(1, sizeof(*vcq));

	if (!vcq)
		return NULL;
	errno = 0;
	vcq->ibv = verbs_ptr(ibv_create_cq(verbs_ibv_context(ctx), cqe, vcq,
					   ch ? to_vch(ch)->ibv : NULL, 0), EINVAL);
	if (!vcq->ibv) {
		ferry_debug("verbs: ibv_create_cq(%d): %m", cqe);
		free(vcq);
		return NULL;
	}
	vcq->cq.context = ctx;
	vcq->cq.cqe = vcq->ibv->cqe;
	return &vcq->cq;
}

int verbs_destroy_cq(struct ferry_cq *cq)
{
	struct verbs_cq *vcq = to_vcq(cq);

	/* EBUSY while QPs use it; waits for unacknowledged events, as ibverbs. */
	if (verbs_ret(ibv_destroy_cq(vcq->ibv)))
		return -1;
	free(vcq);
	return 0;
}

int verbs_req_notify_cq(struct ferry_cq *cq, int solicited_only)
{
	return verbs_ret(ibv_req_notify_cq(to_vcq(cq)->ibv, solicited_only));
}

/*
 * Copy one ibverbs completion.  Only WITH_IMM of the flags is kept: GRH is
 * meaningless for RC and ferry documents it as never set.
 */
static void verbs_wc_from_ibv(struct ferry_wc *out, const struct ibv_wc *in)
{
	out->wr_id = in->wr_id;
	out->status = (enum ferry_wc_status)in->status;
	out->opcode = (enum ferry_wc_opcode)in->opcode;
	out->vendor_err = in->vendor_err;
	out->byte_len = in->byte_len;
	out->imm_data = (in->wc_flags & IBV_WC_WITH_IMM) ? in->imm_data : 0;
	out->qp_num = in->qp_num;
	out->src_qp = in->src_qp;
	out->wc_flags = in->wc_flags & (IBV_WC_WITH_IMM | IBV_WC_GRH);
	out->pkey_index = in->pkey_index;
	out->slid = in->slid;
	out->sl = in->sl;
	out->dlid_path_bits = in->dlid_path_bits;
}

int verbs_poll_cq(struct ferry_cq *cq, int n, struct ferry_wc *wc)
{
	struct ibv_cq *ibv = to_vcq(cq)->ibv;
	struct ibv_wc batch[VERBS_WC_BATCH];
	int total = 0;

	while (total < n) {
		int want = n - total < VERBS_WC_BATCH ? n - total : VERBS_WC_BATCH;
		int got = ibv_poll_cq(ibv, want, batch);
		int i;

		if (unlikely(got < 0)) {
			if (total > 0)
				break;	/* report what we have; the error recurs */
			ferry_debug("verbs: ibv_poll_cq: %d", got);
			return ERR(got == -1 ? EIO : -got);
		}
		for (i = 0; i < got; i++)
			verbs_wc_from_ibv(&wc[total + i], &batch[i]);
		total += got;
		if (got < want)
			break;
	}
	return total;
}
