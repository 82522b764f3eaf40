/*
 * verbs.c - the verbs provider's table, its devices and contexts, PDs and
 * MRs.  CQs and channels live in verbs_cq.c, QPs in verbs_qp.c, the data
 * path in verbs_post.c, ferry_qp_exchange in verbs_exchange.c.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs-internal.h"

/*
 * ferry's public enums and structs equal ibverbs' on purpose; the
 * translations in this provider rely on it, so check it where it matters.
 */
_Static_assert((int)FERRY_ACCESS_REMOTE_ATOMIC == (int)IBV_ACCESS_REMOTE_ATOMIC &&
	       (int)FERRY_ACCESS_LOCAL_WRITE == (int)IBV_ACCESS_LOCAL_WRITE &&
	       (int)FERRY_ACCESS_REMOTE_WRITE == (int)IBV_ACCESS_REMOTE_WRITE &&
	       (int)FERRY_ACCESS_REMOTE_READ == (int)IBV_ACCESS_REMOTE_READ,
	       "access flags differ from ibverbs");
_Static_assert(sizeof(struct ferry_sge) == sizeof(struct ibv_sge) &&
	       offsetof(struct ferry_sge, addr) == offsetof(struct ibv_sge, addr) &&
	       offsetof(struct ferry_sge, length) == offsetof(struct ibv_sge, length) &&
	       offsetof(struct ferry_sge, lkey) == offsetof(struct ibv_sge, lkey),
	       "struct ferry_sge is not laid out as struct ibv_sge");

/* The device table: filled once per process from rdma_get_devices(). */
static pthread_once_t verbs_devices_once = PTHREAD_ONCE_INIT;
static struct verbs_device *verbs_devices;
static int verbs_ndevices;

/* The first active port of @ibv, or 1 when none is active yet. */
static uint8_t verbs_pick_port(struct ibv_context *ibv)
{
	struct ibv_device_attr dattr;
	struct ibv_port_attr pattr;
	uint8_t port;

	if (ibv_query_device(ibv, &dattr))
		return 1;
	for (port = 1; port <= dattr.phys_port_cnt; port++) {
		if (ibv_query_port(ibv, port, &pattr) == 0 &&
		    pattr.state == IBV_PORT_ACTIVE)
			return port;
	}
	return 1;
}

static void verbs_devices_init(void)
{
	struct ibv_context **list;
	int n = 0, i;

	/*
	 * librdmacm fails (ENODEV, ENOSYS...) when there is no RDMA device or
	 * no rdma_cm in the kernel: the common case, not worth a warning.
	 */
	list = rdma_get_devices(&n);
	if (!list || n <= 0) {
		ferry_debug("verbs: no RDMA device (rdma_get_devices: %m)");
		if (list)
			rdma_free_devices(list);
		return;
	}
	verbs_devices = calloc((size_t)n, sizeof(*verbs_devices));
	if (!verbs_devices) {
		rdma_free_devices(list);
		return;
	}
	for (i = 0; i < n; i++) {
		struct verbs_device *vdev = &verbs_devices[i];

		vdev->dev.provider = &ferry_verbs_provider;
		snprintf(vdev->dev.name, sizeof(vdev->dev.name), "verbs:%s",
			 ibv_get_device_name(list[i]->device));
		vdev->dev.provider_data = list[i]->device;
		vdev->ibv = list[i];
		vdev->port = verbs_pick_port(list[i]);
		vdev->iwarp = list[i]->device->transport_type == IBV_TRANSPORT_IWARP;
		vdev->max_inline = -1;
		pthread_mutex_init(&vdev->lock, NULL);
	}
	verbs_ndevices = n;
	/* Frees the array only: librdmacm keeps the contexts open. */
	rdma_free_devices(list);
}

static int verbs_get_devices(struct ferry_device **devs, int max)
{
	int i;

	pthread_once(&verbs_devices_once, verbs_devices_init);
	for (i = 0; i < verbs_ndevices && i < max; i++)
		devs[i] = &verbs_devices[i].dev;
	return i;
}

static struct verbs_ctx *verbs_context_new(struct verbs_device *vdev)
{
	struct verbs_ctx *vc = calloc(1, sizeof(*vc));

	if (!vc)
		return NULL;
	vc->ctx.device = &vdev->dev;
	vc->ctx.provider = &ferry_verbs_provider;
	vc->ctx.async_fd = vdev->ibv->async_fd;	/* librdmacm's context's */
	vc->vdev = vdev;
	vc->refs = 1;
	return vc;
}

static struct ferry_context *verbs_open_device(struct ferry_device *dev)
{
	struct verbs_ctx *vc;

	vc = verbs_context_new(container_of(dev, struct verbs_device, dev));
	return vc ? &vc->ctx : NULL;
}

static int verbs_close_device(struct ferry_context *ctx)
{
	struct verbs_ctx *vc = to_vctx(ctx);

	if (vc == vc->vdev->shared) {
		/* The CM's: held by its ids, dropped with verbs_context_put. */
		verbs_context_put(ctx);
		return 0;
	}
	free(vc);
	return 0;
}

/*
 * ferry's device, port and GID structs are libibverbs' member for member
 * (ferry_device_attr up to phys_port_cnt, then ferry's own): the queries
 * copy them whole.
 */
_Static_assert(offsetof(struct ferry_device_attr, phys_port_cnt) ==
	       offsetof(struct ibv_device_attr, phys_port_cnt) &&
	       offsetof(struct ferry_device_attr, max_srq) ==
	       offsetof(struct ibv_device_attr, max_srq) &&
	       offsetof(struct ferry_device_attr, atomic_cap) ==
	       offsetof(struct ibv_device_attr, atomic_cap),
	       "struct ferry_device_attr is not laid out as struct ibv_device_attr");
_Static_assert(sizeof(struct ferry_port_attr) == sizeof(struct ibv_port_attr) &&
	       offsetof(struct ferry_port_attr, lid) == offsetof(struct ibv_port_attr, lid) &&
	       offsetof(struct ferry_port_attr, link_layer) ==
	       offsetof(struct ibv_port_attr, link_layer) &&
	       offsetof(struct ferry_port_attr, port_cap_flags2) ==
	       offsetof(struct ibv_port_attr, port_cap_flags2),
	       "struct ferry_port_attr is not laid out as struct ibv_port_attr");
_Static_assert(sizeof(union ferry_gid) == sizeof(union ibv_gid),
	       "union ferry_gid is not union ibv_gid");
_Static_assert((int)FERRY_LINK_LAYER_ETHERNET == (int)IBV_LINK_LAYER_ETHERNET &&
	       (int)FERRY_PORT_ACTIVE == (int)IBV_PORT_ACTIVE &&
	       (int)FERRY_ATOMIC_GLOB == (int)IBV_ATOMIC_GLOB &&
	       (int)FERRY_DEVICE_RC_RNR_NAK_GEN == (int)IBV_DEVICE_RC_RNR_NAK_GEN &&
	       (int)FERRY_DEVICE_MEM_MGT_EXTENSIONS == (int)IBV_DEVICE_MEM_MGT_EXTENSIONS,
	       "port and atomic enums differ from ibverbs");

/* The device's own attributes, with ferry's max_inline_data. */
static int verbs_query_device(struct ferry_context *ctx, struct ferry_device_attr *attr)
{
	struct verbs_device *vdev = to_vctx(ctx)->vdev;
	struct ibv_device_attr d;

	if (verbs_ret(ibv_query_device(vdev->ibv, &d)))
		return -1;
	memset(attr, 0, sizeof(*attr));
	memcpy(attr, &d, offsetof(struct ibv_device_attr, phys_port_cnt) + sizeof(d.phys_port_cnt));
	attr->max_inline_data = verbs_device_max_inline(vdev);
	return 0;
}

static int verbs_query_device_ex(struct ferry_context *ctx, struct ferry_device_attr_ex *attr)
{
	struct verbs_device *vdev = to_vctx(ctx)->vdev;
	struct ibv_device_attr_ex d;

	memset(&d, 0, sizeof(d));
	if (verbs_ret(ibv_query_device_ex(vdev->ibv, NULL, &d)))
		return -1;
	attr->comp_mask = d.comp_mask;
	attr->odp_caps.general_caps = d.odp_caps.general_caps;
	attr->odp_caps.per_transport_caps.rc_odp_caps = d.odp_caps.per_transport_caps.rc_odp_caps;
	attr->odp_caps.per_transport_caps.uc_odp_caps = d.odp_caps.per_transport_caps.uc_odp_caps;
	attr->odp_caps.per_transport_caps.ud_odp_caps = d.odp_caps.per_transport_caps.ud_odp_caps;
	attr->completion_timestamp_mask = d.completion_timestamp_mask;
	attr->hca_core_clock = d.hca_core_clock;
	attr->device_cap_flags_ex = d.device_cap_flags_ex;
	attr->xrc_odp_caps = d.xrc_odp_caps;
	attr->phys_port_cnt_ex = d.phys_port_cnt_ex;
	return 0;
}

/* The device's port, GID and P_Key tables, as the kernel reports them. */
static int verbs_query_port(struct ferry_context *ctx, uint8_t port, struct ferry_port_attr *attr)
{
	struct ibv_port_attr p;

	if (verbs_ret(ibv_query_port(to_vctx(ctx)->vdev->ibv, port, &p)))
		return -1;
	memcpy(attr, &p, sizeof(*attr));
	return 0;
}

static int verbs_query_gid(struct ferry_context *ctx, uint8_t port, int index,
			   union ferry_gid *gid)
{
	union ibv_gid g;

	errno = 0;
	if (verbs_ret_errno(ibv_query_gid(to_vctx(ctx)->vdev->ibv, port, index, &g)))
		return -1;
	memcpy(gid, &g, sizeof(*gid));
	return 0;
}

static int verbs_query_pkey(struct ferry_context *ctx, uint8_t port, int index, uint16_t *pkey)
{
	__be16 p;

	errno = 0;
	if (verbs_ret_errno(ibv_query_pkey(to_vctx(ctx)->vdev->ibv, port, index, &p)))
		return -1;
	*pkey = (uint16_t)p;
	return 0;
}

/* --- probing what ibv_device_attr does not say --- */

/* Does the device accept an RC QP with @max_inline bytes of inline data? */
static bool verbs_inline_ok(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t max_inline)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = max_inline },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);

	if (!qp)
		return false;
	ibv_destroy_qp(qp);
	return true;
}

uint32_t verbs_device_max_inline(struct verbs_device *vdev)
{
	/* Candidates, largest first; devices accept a prefix of sizes. */
	static const uint32_t sizes[] = { 1024, 512, 256, 128, 64, 32, 0 };
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	size_t i;
	int found = 0;

	pthread_mutex_lock(&vdev->lock);
	if (vdev->max_inline >= 0)
		goto out;
	pd = ibv_alloc_pd(vdev->ibv);
	cq = ibv_create_cq(vdev->ibv, 1, NULL, NULL, 0);
	if (pd && cq) {
		for (i = 0; i < FERRY_ARRAY_SIZE(sizes); i++) {
			if (verbs_inline_ok(pd, cq, sizes[i])) {
				found = (int)sizes[i];
				break;
			}
		}
	}
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	vdev->max_inline = found;
	ferry_debug("verbs: %s accepts %d bytes of inline data", vdev->dev.name, found);
out:
	found = vdev->max_inline;
	pthread_mutex_unlock(&vdev->lock);
	return (uint32_t)found;
}

/* --- protection domains and memory regions --- */

static struct ferry_pd *verbs_alloc_pd(struct ferry_context *ctx)
{
	struct verbs_pd *vpd = calloc(1, sizeof(*vpd));

	if (!vpd)
		return NULL;
	errno = 0;
	vpd->ibv = verbs_ptr(ibv_alloc_pd(verbs_ibv_context(ctx)), ENOMEM);
	if (!vpd->ibv) {
		ferry_debug("verbs: ibv_alloc_pd: %m");
		free(vpd);
		return NULL;
	}
	vpd->pd.context = ctx;
	vpd->pd.handle = vpd->ibv->handle;
	return &vpd->pd;
}

static int verbs_dealloc_pd(struct ferry_pd *pd)
{
	struct verbs_pd *vpd = to_vpd(pd);

	/* EBUSY while MRs or QPs use it, as in ibverbs. */
	if (verbs_ret(ibv_dealloc_pd(vpd->ibv)))
		return -1;
	free(vpd);
	return 0;
}

static struct ferry_mr *verbs_reg_mr(struct ferry_pd *pd, void *addr, size_t len,
				     int access)
{
	struct verbs_mr *vmr = calloc(1, sizeof(*vmr));

	if (!vmr)
		return NULL;
	errno = 0;
	vmr->ibv = verbs_ptr(ibv_reg_mr(to_vpd(pd)->ibv, addr, len, access), EINVAL);
	if (!vmr->ibv) {
		ferry_debug("verbs: ibv_reg_mr(%p, %zu): %m", addr, len);
		free(vmr);
		return NULL;
	}
	vmr->mr.context = pd->context;
	vmr->mr.pd = pd;
	vmr->mr.addr = addr;
	vmr->mr.length = len;
	vmr->mr.handle = vmr->ibv->handle;
	vmr->mr.lkey = vmr->ibv->lkey;
	vmr->mr.rkey = vmr->ibv->rkey;
	return &vmr->mr;
}

static int verbs_dereg_mr(struct ferry_mr *mr)
{
	struct verbs_mr *vmr = to_vmr(mr);

	if (verbs_ret(ibv_dereg_mr(vmr->ibv)))
		return -1;
	free(vmr);
	return 0;
}

/* --- for the CM --- */

struct ferry_context *verbs_context_get(struct ibv_context *ibv)
{
	struct verbs_device *vdev = NULL;
	struct verbs_ctx *vc;
	int i;

	pthread_once(&verbs_devices_once, verbs_devices_init);
	for (i = 0; i < verbs_ndevices; i++) {
		if (verbs_devices[i].ibv == ibv)
			vdev = &verbs_devices[i];
	}
	if (!vdev) {
		errno = ENODEV;
		return NULL;
	}
	pthread_mutex_lock(&vdev->lock);
	vc = vdev->shared;
	if (vc) {
		vc->refs++;
	} else {
		vc = verbs_context_new(vdev);
		vdev->shared = vc;
	}
	pthread_mutex_unlock(&vdev->lock);
	return vc ? &vc->ctx : NULL;
}

void verbs_context_put(struct ferry_context *ctx)
{
	struct verbs_ctx *vc = to_vctx(ctx);
	struct verbs_device *vdev = vc->vdev;
	bool last;

	pthread_mutex_lock(&vdev->lock);
	last = --vc->refs == 0;
	if (last)
		vdev->shared = NULL;
	pthread_mutex_unlock(&vdev->lock);
	if (last)
		free(vc);
}

bool verbs_is_context(const struct ferry_context *ctx)
{
	return ctx && ctx->provider == &ferry_verbs_provider;
}

const struct ferry_provider ferry_verbs_provider = {
	.name = "verbs",
	.qp_types = 1u << FERRY_QPT_UC | 1u << FERRY_QPT_UD,
	.get_devices = verbs_get_devices,
	.open_device = verbs_open_device,
	.close_device = verbs_close_device,
	.query_device = verbs_query_device,
	.query_device_ex = verbs_query_device_ex,
	.query_port = verbs_query_port,
	.query_gid = verbs_query_gid,
	.query_pkey = verbs_query_pkey,
	.alloc_pd = verbs_alloc_pd,
	.dealloc_pd = verbs_dealloc_pd,
	.reg_mr = verbs_reg_mr,
	.dereg_mr = verbs_dereg_mr,
	.create_comp_channel = verbs_create_comp_channel,
	.destroy_comp_channel = verbs_destroy_comp_channel,
	.get_cq_event = verbs_get_cq_event,
	.create_cq = verbs_create_cq,
	.destroy_cq = verbs_destroy_cq,
	.req_notify_cq = verbs_req_notify_cq,
	.ack_cq_events = verbs_ack_cq_events,
	.poll_cq = verbs_poll_cq,
	.create_ah = verbs_create_ah,
	.destroy_ah = verbs_destroy_ah,
	.create_qp = verbs_create_qp,
	.modify_qp = verbs_modify_qp,
	.query_qp = verbs_query_qp,
	.destroy_qp = verbs_destroy_qp,
	.post_send = verbs_post_send,
	.post_recv = verbs_post_recv,
	.qp_write_imm_ok = verbs_qp_write_imm_ok,
	.create_srq = verbs_create_srq,
	.modify_srq = verbs_modify_srq,
	.query_srq = verbs_query_srq,
	.destroy_srq = verbs_destroy_srq,
	.post_srq_recv = verbs_post_srq_recv,
	.get_async_event = verbs_get_async_event,
	.qp_exchange = verbs_qp_exchange,
	.qp_exchange_begin = verbs_qp_exchange_begin,
	.qp_exchange_step = verbs_qp_exchange_step,
	.qp_exchange_abort = verbs_qp_exchange_abort,
};
