/*
 * shm-ops.h - the shm provider's operations, each defined in the file of
 * its object and gathered in shm.c's table (ferry_shm_provider), and what
 * those files use of each other's.  What the rest of the provider uses of
 * PDs, MRs and CQs is in shm-internal.h.
 */
#ifndef FERRY_SHM_OPS_H
#define FERRY_SHM_OPS_H

#include "shm-internal.h"

/* shm_device.c: the device and a context on it */
int shm_get_devices(struct ferry_device **devs, int max);
struct ferry_context *shm_open_device(struct ferry_device *dev);
int shm_close_device(struct ferry_context *ctx);
int shm_query_device(struct ferry_context *ctx, struct ferry_device_attr *attr);
int shm_query_device_ex(struct ferry_context *ctx, struct ferry_device_attr_ex *attr);
/* shm_srq.c: shared receive queues */
struct ferry_srq *shm_create_srq(struct ferry_pd *pd, struct ferry_srq_init_attr *init);
int shm_modify_srq(struct ferry_srq *srq, struct ferry_srq_attr *attr, int mask);
int shm_query_srq(struct ferry_srq *srq, struct ferry_srq_attr *attr);
int shm_destroy_srq(struct ferry_srq *srq);
int shm_post_srq_recv(struct ferry_srq *srq, struct ferry_recv_wr *wr, struct ferry_recv_wr **bad);
/* shm_pd.c: PDs and their MR tables */
struct ferry_pd *shm_alloc_pd(struct ferry_context *ctx);
struct ferry_pd *shm_alloc_pd_small(struct ferry_context *ctx, uint32_t max_remote);
int shm_dealloc_pd(struct ferry_pd *pd);
void shm_detach_pd(struct ferry_pd *pd);
/* Slot @i of the private table; @make: spd->lock held (see shm_pd.c). */
struct shm_mr_entry *shm_local_entry(struct shm_pd *spd, uint32_t i, bool make);
/* A free slot, shared or private (0 or NULL: none); spd->lock held. */
uint32_t shm_pd_free_slot(struct shm_pd *spd);
struct shm_mr_entry *shm_pd_free_local(struct shm_pd *spd, uint32_t *i_p);
/* Slot @idx of the primary, just written, into every copy; spd->lock held. */
void shm_pd_publish(struct shm_pd *spd, uint32_t idx);
/* Slot @idx of the PD's shared table (small or overflow part), or NULL. */
static inline struct shm_mr_entry *shm_pd_slot(struct shm_pd *spd, uint32_t idx)
{
	struct shm_mr_entry *x;

	if (idx < spd->table_entries)
		return idx ? &spd->table[idx] : NULL;
	x = atomic_load_explicit(&spd->xtable, memory_order_acquire);
	return x && idx < SHM_MR_TABLE_ENTRIES ? &x[idx] : NULL;
}

/* The slot a key of @spd names (local or shared), or NULL. */
static inline struct shm_mr_entry *shm_pd_entry(struct shm_pd *spd, uint32_t key)
{
	uint32_t idx = SHM_KEY_INDEX(key);

	if (idx & SHM_KEY_LOCAL)
		return shm_local_entry(spd, idx & ~SHM_KEY_LOCAL, false);
	return shm_pd_slot(spd, idx);
}

/* shm_mr.c: MRs */
struct ferry_mr *shm_reg_mr(struct ferry_pd *pd, void *addr, size_t len, int access);
int shm_dereg_mr(struct ferry_mr *mr);
/* shm_cq.c: CQs */
struct ferry_cq *shm_create_cq(struct ferry_context *ctx, int cqe, struct ferry_comp_channel *ch);
int shm_destroy_cq(struct ferry_cq *cq);
void shm_detach_cq(struct ferry_cq *cq);
int shm_req_notify_cq(struct ferry_cq *cq, int solicited_only);
void shm_disarm_cq(struct ferry_cq *cq);
int shm_cq_sleep_prepare(struct ferry_cq *cq, struct ferry_cq_sleep *t);
int shm_cq_sleep(struct ferry_cq *cq, struct ferry_cq_sleep *t, int timeout_ms);
void shm_cq_sleep_cancel(struct ferry_cq *cq);
void shm_ack_cq_events(struct ferry_cq *cq, unsigned int n);
int shm_poll_cq(struct ferry_cq *cq, int n, struct ferry_wc *wc);
/*
 * The CQ's arm word: generation @gen, bits @clear off, @set on; scq->lock
 * held.  Hidden: it was static, called by shm_cq_signal_local on every
 * local completion, and a function the compiler must take as interposable
 * makes that caller save registers around each call.
 */
__attribute__((visibility("hidden")))
void shm_notify_update(struct shm_cq *scq, uint64_t gen, uint32_t clear, uint32_t set);
/* shm_channel.c: completion channels */
struct ferry_comp_channel *shm_create_comp_channel(struct ferry_context *ctx);
struct ferry_comp_channel *shm_create_comp_channel_single(struct ferry_context *ctx);
int shm_destroy_comp_channel(struct ferry_comp_channel *ch);
int shm_renumber_comp_channel(struct ferry_comp_channel *ch, int fd);
int shm_comp_channel_on_conn(struct ferry_comp_channel *ch, struct ferry_qp *fqp, int fd,
			     bool cloexec);
int shm_get_cq_event(struct ferry_comp_channel *ch, struct ferry_cq **cq_p);
int shm_poll_cq_event(struct ferry_comp_channel *ch, struct ferry_cq **cq_p);
static inline struct shm_channel *to_sch(struct ferry_comp_channel *ch)
{
	return container_of(ch, struct shm_channel, ch);
}

#endif /* FERRY_SHM_OPS_H */
