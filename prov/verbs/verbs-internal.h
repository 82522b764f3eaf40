/*
 * verbs-internal.h - the verbs provider: ferry's provider table over
 * libibverbs, with devices taken from librdmacm.
 *
 * Devices.  The ibv_context of every device comes from rdma_get_devices(),
 * so it is the very context librdmacm's ids use: a ferry PD or CQ made on a
 * verbs context can be handed to rdma_create_qp() on an rdma_cm id of the
 * same device.  librdmacm owns those contexts; ferry contexts only wrap them,
 * and closing a ferry context never closes the ibv_context.
 *
 * Objects.  Each ferry object is the first member of a private struct that
 * holds the ibv object behind it (container_of gets back, as rdma-core does).
 * Enum values, flag bits and the SGE layout equal libibverbs', so most
 * translations are plain copies; verbs.c asserts that at compile time.
 *
 * iWARP.  On an RNIC (transport IBV_TRANSPORT_IWARP) the kernel's iw_cm
 * moves a QP to RTS itself when rdma_accept / the connect reply binds it to
 * its TCP stream; user space never makes that step, and an iWARP QP has no
 * RTR of its own.  Linux siw does not even report a QP's state
 * (ibv_query_qp's qp_state is left unset), so on iWARP the state ferry
 * keeps in qp->state is all there is: what ferry_modify_qp set, or what the
 * CM noted with verbs_qp_set_state.  ferry_qp_exchange (a manual RTR)
 * cannot work there and fails with EOPNOTSUPP.
 *
 * Errors.  libibverbs mixes conventions: some calls return an errno value
 * (positive, or negative in some providers), others NULL or -1 with errno
 * set.  Every ibv call of this provider goes through one of the verbs_ret*
 * helpers of verbs-export.h, which turn them into ferry's -1 / NULL +
 * errno (the CM's verbs transport uses them for librdmacm's calls).
 */
#ifndef FERRY_VERBS_INTERNAL_H
#define FERRY_VERBS_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "core-export.h"
#include "verbs-export.h"

/* WRs translated on the stack per ibv_post_* call: longer chains go in batches. */
#define VERBS_WR_BATCH			16
/* Completions translated per ibv_poll_cq call. */
#define VERBS_WC_BATCH			16
/* How long ferry_qp_exchange waits for the peer's message. */
#define VERBS_EXCHANGE_TIMEOUT_MS	10000
/* Hop limit of the GRH on RoCE: the peer is at most a routed hop away. */
#define VERBS_HOP_LIMIT			64

/* --- devices and contexts --- */

struct verbs_ctx;

/* One RDMA device, found once per process, kept until exit. */
struct verbs_device {
	struct ferry_device dev;	/* name "verbs:<ibv device name>" */
	struct ibv_context *ibv;	/* librdmacm's: never closed by ferry */
	uint8_t port;			/* the port ferry uses: first active one */
	bool iwarp;			/* an RNIC: see "iWARP" above */
	pthread_mutex_t lock;		/* the lazily made fields below */
	int max_inline;			/* probed; -1 until known */
	struct verbs_ctx *shared;	/* context handed to the CM, or NULL */
};

struct verbs_ctx {
	struct ferry_context ctx;
	struct verbs_device *vdev;
	int refs;			/* shared context: holders; else 1 */
};

static inline struct verbs_ctx *to_vctx(struct ferry_context *ctx)
{
	return container_of(ctx, struct verbs_ctx, ctx);
}

static inline struct ibv_context *verbs_ibv_context(struct ferry_context *ctx)
{
	return to_vctx(ctx)->vdev->ibv;
}

/* --- PD, MR --- */

struct verbs_pd {
	struct ferry_pd pd;
	struct ibv_pd *ibv;
};

struct verbs_mr {
	struct ferry_mr mr;
	struct ibv_mr *ibv;
};

static inline struct verbs_pd *to_vpd(struct ferry_pd *pd)
{
	return container_of(pd, struct verbs_pd, pd);
}

static inline struct verbs_mr *to_vmr(struct ferry_mr *mr)
{
	return container_of(mr, struct verbs_mr, mr);
}

/* --- completion channels and CQs (verbs_cq.c) --- */

struct verbs_channel {
	struct ferry_comp_channel ch;	/* ch.fd is the ibv channel's fd */
	struct ibv_comp_channel *ibv;
};

struct verbs_cq {
	struct ferry_cq cq;
	struct ibv_cq *ibv;		/* its cq_context points back here */
};

static inline struct verbs_channel *to_vch(struct ferry_comp_channel *ch)
{
	return container_of(ch, struct verbs_channel, ch);
}

static inline struct verbs_cq *to_vcq(struct ferry_cq *cq)
{
	return container_of(cq, struct verbs_cq, cq);
}

struct ferry_comp_channel *verbs_create_comp_channel(struct ferry_context *ctx);
int verbs_destroy_comp_channel(struct ferry_comp_channel *ch);
int verbs_get_cq_event(struct ferry_comp_channel *ch, struct ferry_cq **cq_p);
struct ferry_cq *verbs_create_cq(struct ferry_context *ctx, int cqe,
				 struct ferry_comp_channel *ch);
int verbs_destroy_cq(struct ferry_cq *cq);
int verbs_req_notify_cq(struct ferry_cq *cq, int solicited_only);
void verbs_ack_cq_events(struct ferry_cq *cq, unsigned int n);
int verbs_poll_cq(struct ferry_cq *cq, int n, struct ferry_wc *wc);

/* --- QPs (verbs_qp.c, verbs_post.c, verbs_exchange.c) --- */

/* What ferry_qp_exchange learnt of the peer: its address vector. */
struct verbs_peer {
	bool known;
	uint32_t qpn;
	uint32_t psn;
	uint16_t lid;
	uint8_t mtu;			/* enum ibv_mtu: the peer port's active MTU */
	union ibv_gid gid;		/* zero on InfiniBand without GRH */
	int sgid_index;			/* our GID entry that reaches it, -1: none */
};

struct verbs_qp {
	struct ferry_qp qp;
	struct ibv_qp *ibv;
	pthread_mutex_t lock;		/* state changes and the peer info */
	bool cm_owned;			/* made by rdma_create_qp: the CM destroys it */
	struct verbs_peer peer;
};

static inline struct verbs_qp *to_vqp(struct ferry_qp *qp)
{
	return container_of(qp, struct verbs_qp, qp);
}

struct ferry_qp *verbs_create_qp(struct ferry_pd *pd, struct ferry_qp_init_attr *attr);
int verbs_modify_qp(struct ferry_qp *qp, struct ferry_qp_attr *attr, int mask);
int verbs_query_qp(struct ferry_qp *qp, struct ferry_qp_attr *attr,
		   struct ferry_qp_init_attr *init_attr);
int verbs_destroy_qp(struct ferry_qp *qp);
/* An RNIC has no RDMA WRITE WITH IMMEDIATE (ferry_qp_write_imm_ok). */
bool verbs_qp_write_imm_ok(struct ferry_qp *qp);
int verbs_post_send(struct ferry_qp *qp, struct ferry_send_wr *wr,
		    struct ferry_send_wr **bad);
int verbs_post_recv(struct ferry_qp *qp, struct ferry_recv_wr *wr,
		    struct ferry_recv_wr **bad);
int verbs_qp_exchange(struct ferry_qp *qp, int sock, uint32_t *peer_qpn);
/* Not split in steps: the verbs exchange is one message each way. */
int verbs_qp_exchange_begin(struct ferry_qp *qp, int sock);
int verbs_qp_exchange_step(struct ferry_qp *qp, uint32_t *peer_qpn);
void verbs_qp_exchange_abort(struct ferry_qp *qp);

/* verbs_ah.c: address handles, and the UD half of a send WR. */
struct ferry_ah *verbs_create_ah(struct ferry_pd *pd, struct ferry_ah_attr *attr);
int verbs_destroy_ah(struct ferry_ah *ah);
void verbs_ud_wr_to_ibv(const struct ferry_send_wr *in, struct ibv_send_wr *out);
/* Address vectors to and from libibverbs' struct (AHs, QPs joined out of band). */
void verbs_ah_to_ibv(struct ibv_ah_attr *out, const struct ferry_ah_attr *in,
		     uint8_t default_port);
void verbs_ah_from_ibv(struct ferry_ah_attr *out, const struct ibv_ah_attr *in);

/* --- SRQs and asynchronous events (verbs_srq.c) --- */

struct ferry_srq *verbs_create_srq(struct ferry_pd *pd, struct ferry_srq_init_attr *init);
int verbs_modify_srq(struct ferry_srq *srq, struct ferry_srq_attr *attr, int mask);
int verbs_query_srq(struct ferry_srq *srq, struct ferry_srq_attr *attr);
int verbs_destroy_srq(struct ferry_srq *srq);
int verbs_post_srq_recv(struct ferry_srq *srq, struct ferry_recv_wr *wr,
			struct ferry_recv_wr **bad);
/* The ibv_srq behind @srq (NULL for none). */
struct ibv_srq *verbs_srq_ibv(struct ferry_srq *srq);
int verbs_get_async_event(struct ferry_context *ctx, struct ferry_async_event *ev);

/*
 * verbs_device_max_inline - the largest max_inline_data the device accepts
 * on an RC QP, probed once with throw-away QPs.
 */
uint32_t verbs_device_max_inline(struct verbs_device *vdev);

/*
 * verbs_local_gid - the GID entry of @vdev's port that peers should use:
 * on RoCE the RoCE v2 entry of the netdev's IPv4 address (else any RoCE v2,
 * else index 0); on InfiniBand index 0.  Fills *@gid_p and returns the
 * index, or -1 with errno set.
 */
int verbs_local_gid(struct verbs_device *vdev, union ibv_gid *gid_p);

/*
 * --- librdmacm's objects as ferry's ---
 * For a CM that would make its QPs with rdma_create_qp.  The CM's verbs
 * transport makes them with ferry_create_qp and uses none of these (what
 * it uses is in verbs-export.h), so they stay this provider's.
 */

/*
 * verbs_context_get - a ferry context wrapping @ibv, an ibv_context of
 * librdmacm (an rdma_cm id's id->verbs).  The same context is returned for
 * every caller of one device; each call takes a reference that
 * verbs_context_put drops.  NULL with errno ENODEV when @ibv is no device
 * ferry listed.
 */
struct ferry_context *verbs_context_get(struct ibv_context *ibv);
void verbs_context_put(struct ferry_context *ctx);

/* verbs_is_context (verbs-export.h) true: these are valid. */
static inline struct ibv_pd *verbs_ibv_pd(struct ferry_pd *pd)
{
	return to_vpd(pd)->ibv;
}

static inline struct ibv_cq *verbs_ibv_cq(struct ferry_cq *cq)
{
	return to_vcq(cq)->ibv;
}

/*
 * verbs_qp_wrap - a ferry QP around @ibv, a QP rdma_create_qp made on @pd's
 * ibv_pd with @attr's CQs.  ferry_destroy_qp on it fails with EBUSY: the CM
 * releases it with verbs_qp_unwrap, then rdma_destroy_qp.  NULL + errno.
 */
struct ferry_qp *verbs_qp_wrap(struct ferry_pd *pd, struct ibv_qp *ibv,
			       const struct ferry_qp_init_attr *attr);
void verbs_qp_unwrap(struct ferry_qp *qp);

/* Translate a ferry QP init attr into ibverbs' (the CQs must be verbs CQs). */
void verbs_qp_init_attr_to_ibv(const struct ferry_qp_init_attr *in,
			       struct ibv_qp_init_attr *out);

#endif /* FERRY_VERBS_INTERNAL_H */
