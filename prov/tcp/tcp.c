/*
 * tcp.c - the tcp transport's device, context, PD and MRs, and its entry
 * in the provider table.
 *
 * An MR's STag is its lkey and its rkey: an index into the context's MR
 * table with a generation, so that an STag a peer kept after the MR was
 * deregistered finds nothing (or the slot's next MR under another
 * generation, never by accident the same key for 256 reuses).  Peers
 * name memory only through STags checked here (tcp_mr_check): nothing
 * but registered memory, with the rights it was registered with, is
 * ever reached on a peer's behalf.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tcp-internal.h"

#define TCP_MAX_MR		(1 << 20)	/* STag index has 24 bits */
#define TCP_PKEY_DEFAULT	0xffff

/* --- device and context --- */

static struct ferry_device tcp_device = {
	.provider = &ferry_tcp_provider,
	.name = "tcp0",
};

static int tcp_get_devices(struct ferry_device **devs, int max)
{
	if (max < 1)
		return 0;
	devs[0] = &tcp_device;
	return 1;
}

static struct ferry_context *tcp_open_device(struct ferry_device *dev)
{
	struct tcp_context *tc = calloc(1, sizeof(*tc));

	if (!tc)
		return NULL;
	tc->ctx.device = dev;
	tc->ctx.provider = &ferry_tcp_provider;
	pthread_mutex_init(&tc->mr_lock, NULL);
	pthread_mutex_init(&tc->prog_lock, NULL);
	return &tc->ctx;
}

static int tcp_close_device(struct ferry_context *ctx)
{
	struct tcp_context *tc = to_tctx(ctx);

	tcp_progress_stop(tc);
	pthread_mutex_destroy(&tc->mr_lock);
	pthread_mutex_destroy(&tc->prog_lock);
	free(tc->mrs);
	free(tc->gens);
	free(tc);
	return 0;
}

static int tcp_query_device(struct ferry_context *ctx, struct ferry_device_attr *attr)
{
	(void)ctx;
	memset(attr, 0, sizeof(*attr));
	snprintf(attr->fw_ver, sizeof(attr->fw_ver), "ferry %s", PACKAGE_VERSION);
	attr->max_mr_size = TCP_MAX_MR_SIZE;
	attr->page_size_cap = ~((uint64_t)sysconf(_SC_PAGESIZE) - 1);
	attr->max_qp = 1 << 16;
	attr->max_qp_wr = TCP_MAX_QP_WR;
	attr->device_cap_flags = FERRY_DEVICE_RC_RNR_NAK_GEN;
	attr->max_sge = TCP_MAX_SGE;
	attr->max_sge_rd = TCP_MAX_SGE;
	attr->max_cq = 1 << 16;
	attr->max_cqe = TCP_MAX_CQE;
	attr->max_mr = TCP_MAX_MR - 1;
	attr->max_pd = 1 << 16;
	attr->max_qp_rd_atom = TCP_MAX_RD;
	attr->max_res_rd_atom = TCP_MAX_RD << 16;
	attr->max_qp_init_rd_atom = TCP_MAX_RD;
	/* Applied by the progress thread with the CPU's atomic instructions,
	 * but only with peers that speak RFC 7306 (ferry ones). */
	attr->atomic_cap = FERRY_ATOMIC_HCA;
	attr->max_pkeys = 1;
	attr->phys_port_cnt = 1;
	attr->max_inline_data = TCP_MAX_INLINE;
	return 0;
}

static int tcp_query_device_ex(struct ferry_context *ctx, struct ferry_device_attr_ex *attr)
{
	(void)ctx;
	attr->phys_port_cnt_ex = 1;
	return 0;
}

static int tcp_query_port(struct ferry_context *ctx, uint8_t port, struct ferry_port_attr *attr)
{
	(void)ctx;
	if (port != 1)
		return ERR(EINVAL);
	memset(attr, 0, sizeof(*attr));
	attr->state = FERRY_PORT_ACTIVE;
	attr->max_mtu = FERRY_MTU_4096;
	attr->active_mtu = FERRY_MTU_4096;
	attr->gid_tbl_len = 1;
	attr->max_msg_sz = 1u << 31;
	attr->pkey_tbl_len = 1;
	attr->max_vl_num = 1;
	attr->active_width = 1;
	attr->active_speed = 1;
	attr->phys_state = 5;		/* LinkUp */
	/* iWARP: addressed by IP, as an Ethernet port is. */
	attr->link_layer = FERRY_LINK_LAYER_ETHERNET;
	return 0;
}

/* The GID of an iWARP port is its IP address; with no address bound to a
 * port (the CM finds peers by IP itself), it is zero. */
static int tcp_query_gid(struct ferry_context *ctx, uint8_t port, int index,
			 union ferry_gid *gid)
{
	(void)ctx;
	if (port != 1 || index != 0)
		return ERR(EINVAL);
	memset(gid, 0, sizeof(*gid));
	return 0;
}

static int tcp_query_pkey(struct ferry_context *ctx, uint8_t port, int index, uint16_t *pkey)
{
	(void)ctx;
	if (port != 1 || index != 0)
		return ERR(EINVAL);
	*pkey = htons(TCP_PKEY_DEFAULT);
	return 0;
}

/* --- protection domains --- */

static struct ferry_pd *tcp_alloc_pd(struct ferry_context *ctx)
{
	static uint32_t next_handle;
	struct tcp_pd *pd = calloc(1, sizeof(*pd));

	if (!pd)
		return NULL;
	pd->pd.context = ctx;
	pd->pd.handle = __atomic_add_fetch(&next_handle, 1, __ATOMIC_RELAXED);
	return &pd->pd;
}

static int tcp_dealloc_pd(struct ferry_pd *fpd)
{
	struct tcp_context *tc = to_tctx(fpd->context);
	struct tcp_pd *pd = to_tpd(fpd);
	bool busy;

	pthread_mutex_lock(&tc->mr_lock);
	busy = pd->nmrs || pd->nqps;
	pthread_mutex_unlock(&tc->mr_lock);
	if (busy)
		return ERR(EBUSY);
	free(pd);
	return 0;
}

/* --- memory regions --- */

/* A free slot of the table, grown when full; mr_lock held.  0: none. */
static uint32_t tcp_mr_slot(struct tcp_context *tc)
{
	uint32_t i;

	for (i = 1; i < tc->mrs_cap; i++)
		if (!tc->mrs[i])
			return i;
	if (tc->mrs_cap >= TCP_MAX_MR)
		return 0;
	{
		uint32_t cap = tc->mrs_cap ? tc->mrs_cap * 2 : 64;
		struct tcp_mr **mrs = realloc(tc->mrs, cap * sizeof(*mrs));
		uint8_t *gens;

		if (!mrs)
			return 0;
		tc->mrs = mrs;
		gens = realloc(tc->gens, cap);
		if (!gens)
			return 0;
		tc->gens = gens;
		memset(mrs + tc->mrs_cap, 0, (cap - tc->mrs_cap) * sizeof(*mrs));
		memset(gens + tc->mrs_cap, 0, cap - tc->mrs_cap);
		i = tc->mrs_cap ? tc->mrs_cap : 1;
		tc->mrs_cap = cap;
	}
	return i;
}

static struct ferry_mr *tcp_reg_mr(struct ferry_pd *pd, void *addr, size_t len, int access)
{
	struct tcp_context *tc = to_tctx(pd->context);
	struct tcp_mr *mr;
	uint32_t i;

	if (len > TCP_MAX_MR_SIZE || (uintptr_t)addr + len < (uintptr_t)addr) {
		errno = EINVAL;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;
	pthread_mutex_lock(&tc->mr_lock);
	i = tcp_mr_slot(tc);
	if (!i) {
		pthread_mutex_unlock(&tc->mr_lock);
		free(mr);
		errno = ENOMEM;
		return NULL;
	}
	/* Generation 0 is skipped: STag 0 is never valid. */
	tc->gens[i] = (uint8_t)(tc->gens[i] + 1) ? (uint8_t)(tc->gens[i] + 1) : 1;
	mr->mr.context = pd->context;
	mr->mr.pd = pd;
	mr->mr.addr = addr;
	mr->mr.length = len;
	mr->mr.lkey = mr->mr.rkey = mr->mr.handle = TCP_STAG(i, tc->gens[i]);
	mr->access = access;
	tc->mrs[i] = mr;
	to_tpd(pd)->nmrs++;
	pthread_mutex_unlock(&tc->mr_lock);
	return &mr->mr;
}

static int tcp_dereg_mr(struct ferry_mr *fmr)
{
	struct tcp_context *tc = to_tctx(fmr->context);
	uint32_t i = TCP_STAG_INDEX(fmr->lkey);

	/* Under mr_lock: no copy into the region is under way once we have it. */
	pthread_mutex_lock(&tc->mr_lock);
	tc->mrs[i] = NULL;
	to_tpd(fmr->pd)->nmrs--;
	pthread_mutex_unlock(&tc->mr_lock);
	free(container_of(fmr, struct tcp_mr, mr));
	return 0;
}

struct tcp_mr *tcp_mr_check(struct tcp_context *tc, struct ferry_pd *pd, uint32_t stag,
			    uint64_t addr, uint64_t len, int access, uint8_t *why_p)
{
	uint32_t i = TCP_STAG_INDEX(stag);
	struct tcp_mr *mr = i && i < tc->mrs_cap ? tc->mrs[i] : NULL;
	uint64_t start, end;

	if (!mr || mr->mr.rkey != stag || mr->mr.pd != pd) {
		*why_p = TCP_TERM_INVALID_STAG;
		return NULL;
	}
	if ((mr->access & access) != access) {
		*why_p = TCP_TERM_ACCESS;
		return NULL;
	}
	start = (uintptr_t)mr->mr.addr;
	end = start + mr->mr.length;
	if (addr < start || addr > end || len > end - addr) {
		*why_p = TCP_TERM_BOUNDS;
		return NULL;
	}
	return mr;
}

/* --- what tcp does not have --- */

static int tcp_qp_exchange(struct ferry_qp *qp, int sock, uint32_t *peer_qpn)
{
	(void)qp;
	(void)sock;
	(void)peer_qpn;
	/* A tcp QP joins its connection through ferry_tcp_qp_attach. */
	return ERR(ENOTSUP);
}

static int tcp_qp_exchange_begin(struct ferry_qp *qp, int sock)
{
	(void)qp;
	(void)sock;
	return ERR(ENOTSUP);
}

static int tcp_qp_exchange_step(struct ferry_qp *qp, uint32_t *peer_qpn)
{
	(void)qp;
	(void)peer_qpn;
	return ERR(ENOTSUP);
}

static void tcp_qp_exchange_abort(struct ferry_qp *qp)
{
	(void)qp;
}

const struct ferry_provider ferry_tcp_provider = {
	.name = "tcp",
	.get_devices = tcp_get_devices,
	.open_device = tcp_open_device,
	.close_device = tcp_close_device,
	.query_device = tcp_query_device,
	.query_device_ex = tcp_query_device_ex,
	.query_port = tcp_query_port,
	.query_gid = tcp_query_gid,
	.query_pkey = tcp_query_pkey,
	.alloc_pd = tcp_alloc_pd,
	.dealloc_pd = tcp_dealloc_pd,
	.reg_mr = tcp_reg_mr,
	.dereg_mr = tcp_dereg_mr,
	.create_comp_channel = tcp_create_comp_channel,
	.destroy_comp_channel = tcp_destroy_comp_channel,
	.get_cq_event = tcp_get_cq_event,
	.poll_cq_event = tcp_poll_cq_event,
	.create_cq = tcp_create_cq,
	.destroy_cq = tcp_destroy_cq,
	.req_notify_cq = tcp_req_notify_cq,
	.ack_cq_events = tcp_ack_cq_events,
	.poll_cq = tcp_poll_cq,
	.create_qp = tcp_create_qp,
	.modify_qp = tcp_modify_qp,
	.query_qp = tcp_query_qp,
	.destroy_qp = tcp_destroy_qp,
	.post_send = tcp_post_send,
	.post_recv = tcp_post_recv,
	.qp_write_imm_ok = tcp_qp_write_imm_ok,
	/* No SRQs over tcp yet. */
	.create_srq = ferry_srq_unsupported_create,
	.modify_srq = ferry_srq_unsupported_modify,
	.query_srq = ferry_srq_unsupported_query,
	.destroy_srq = ferry_srq_unsupported_destroy,
	.post_srq_recv = ferry_srq_unsupported_post,
	.qp_exchange = tcp_qp_exchange,
	.qp_exchange_begin = tcp_qp_exchange_begin,
	.qp_exchange_step = tcp_qp_exchange_step,
	.qp_exchange_abort = tcp_qp_exchange_abort,
};
