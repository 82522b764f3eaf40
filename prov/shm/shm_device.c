/*
 * shm_device.c - the shm provider's one device ("shm0"), a context on it,
 * and what the device can do.  Its port is shm_port.c's.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm-internal.h"
#include "shm-ops.h"

static struct ferry_device shm_device = {
	.provider = &ferry_shm_provider,
	.name = "shm0",
};

int shm_get_devices(struct ferry_device **devs, int max)
{
	if (max < 1)
		return 0;
	devs[0] = &shm_device;
	return 1;
}

struct ferry_context *shm_open_device(struct ferry_device *dev)
{
	struct shm_context *sc = calloc(1, sizeof(*sc));

	if (!sc)
		return NULL;
	sc->ctx.device = dev;
	sc->ctx.provider = &ferry_shm_provider;
	return &sc->ctx;
}

int shm_close_device(struct ferry_context *ctx)
{
	free(container_of(ctx, struct shm_context, ctx));
	return 0;
}

/* What the soft device can do; memory windows and multicast: none yet. */
int shm_query_device(struct ferry_context *ctx, struct ferry_device_attr *attr)
{
	(void)ctx;
	memset(attr, 0, sizeof(*attr));
	snprintf(attr->fw_ver, sizeof(attr->fw_ver), "ferry %s", PACKAGE_VERSION);
	attr->max_mr_size = SHM_MAX_MR_SIZE;
	attr->page_size_cap = ~((uint64_t)sysconf(_SC_PAGESIZE) - 1);
	attr->max_qp = 1 << 20;
	attr->max_qp_wr = SHM_MAX_QP_WR;
	attr->device_cap_flags = FERRY_DEVICE_RC_RNR_NAK_GEN | FERRY_DEVICE_SRQ_RESIZE;
	attr->max_sge = SHM_MAX_SGE;
	attr->max_sge_rd = SHM_MAX_SGE;
	attr->max_cq = 1 << 20;
	attr->max_cqe = SHM_MAX_CQE;
	attr->max_mr = SHM_MR_TABLE_ENTRIES - 1;
	attr->max_pd = 1 << 20;
	attr->max_ah = 1 << 20;		/* a few bytes of heap each: no table */
	attr->max_qp_rd_atom = 128;
	attr->max_res_rd_atom = 128 << 20;	/* max_qp_rd_atom for every QP */
	attr->max_qp_init_rd_atom = 128;
	/* CPU atomics on shared memory: atomic with the CPU's own as well. */
	attr->atomic_cap = FERRY_ATOMIC_GLOB;
	attr->max_srq = 1 << 20;
	attr->max_srq_wr = SHM_MAX_QP_WR;
	attr->max_srq_sge = SHM_MAX_SGE;
	attr->max_pkeys = 1;
	attr->phys_port_cnt = 1;
	attr->max_inline_data = SHM_MAX_INLINE;
	return 0;
}

int shm_query_device_ex(struct ferry_context *ctx, struct ferry_device_attr_ex *attr)
{
	(void)ctx;
	attr->phys_port_cnt_ex = 1;
	return 0;
}
