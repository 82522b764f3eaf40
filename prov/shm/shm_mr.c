/*
 * shm_mr.c - the shm provider's MRs: registering one takes a slot of its
 * PD's table (shm_pd.c) and, for memory of a ferry_alloc block, shares the
 * block's window with the PD's connected peers; deregistering takes the
 * key away before the window.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <unistd.h>

#include "shm-internal.h"
#include "shm-ops.h"

/*
 * Tell every connected peer of the PD about a window it can now reach, and
 * every peer whose exchange has had our windows already (it takes this one
 * before the exchange completes, or later as established peers do).
 * Announcing happens before ferry_reg_mr returns, so the window's fd is in
 * the peer's socket before the rkey can possibly reach it.
 */
static void shm_pd_announce(struct shm_pd *spd, uint64_t block_id, uint32_t access)
{
	struct shm_conn *conn;
	struct shm_qp *qp;
	int fd = -1;

	for (qp = spd->qps; qp; qp = qp->pd_next) {
		ferry_lock(&qp->sq_lock);
		conn = shm_qp_announce_conn(qp);
		if (conn && !shm_conn_may_map(conn, access))
			conn = NULL;
		if (conn && fd < 0)
			fd = ferry_block_window_fd(block_id);
		if (conn && fd >= 0 && shm_conn_announce_block(conn, block_id, fd) == 0)
			shm_pd_windows_out(spd);
		ferry_unlock(&qp->sq_lock);
	}
	if (fd >= 0)
		close(fd);
}

/*
 * The window peers reach [addr, addr+len) through, if it is ferry_alloc
 * memory they may touch: for one-sided access, or for SENDs into receive
 * buffers (LOCAL_WRITE).  Read-only unless they may write
 * (shm_window_writable).  Memory of no
 * block, or a span that overlaps another MR's window (two files cannot
 * hold the same pages), is reached only as plain memory (shm_peer.c: a
 * peer of our user).  0, or -1 with errno set for a real failure.
 */
static int shm_mr_share(struct shm_pd *spd, struct shm_mr *smr, void *addr, size_t len,
			int access)
{
	bool write = shm_window_writable((uint32_t)access);

	if (!access || !len)
		return 0;
	if (ferry_block_share(addr, len, write, spd, &smr->block_id, &smr->block_offset) == 0)
		return 0;
	smr->block_id = 0;
	if (errno == EINVAL)
		return 0;	/* no ferry_alloc memory */
	if (errno == EBUSY) {
		ferry_info("MR at %p (%zu bytes) shares pages with another MR's: peers of "
			   "another user cannot reach it", addr, len);
		return 0;
	}
	return -1;
}

struct ferry_mr *shm_reg_mr(struct ferry_pd *pd, void *addr, size_t len, int access)
{
	struct shm_pd *spd = to_spd(pd);
	bool remote = access & (FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ |
				FERRY_ACCESS_REMOTE_ATOMIC);
	struct shm_mr_entry *e;
	struct shm_mr *smr;
	uint32_t idx, key;

	if (len > SHM_MAX_MR_SIZE) {
		errno = EINVAL;
		return NULL;
	}
	smr = calloc(1, sizeof(*smr));
	if (!smr)
		return NULL;
	if (shm_mr_share(spd, smr, addr, len, access) < 0)
		goto err_free;

	pthread_mutex_lock(&spd->lock);
	if (remote) {
		idx = shm_pd_free_slot(spd);
		e = idx ? shm_pd_slot(spd, idx) : NULL;
	} else {
		e = shm_pd_free_local(spd, &idx);
		idx |= SHM_KEY_LOCAL;
	}
	if (!e) {
		pthread_mutex_unlock(&spd->lock);
		errno = ENOMEM;
		goto err_free;
	}
	key = SHM_KEY(idx, ++e->gen);	/* idx >= 1: never 0 */
	e->access = (uint32_t)access;
	e->addr = (uintptr_t)addr;
	e->length = len;
	e->block_id = smr->block_id;
	e->block_offset = smr->block_offset;
	atomic_store_explicit(&e->rkey, key, memory_order_release);
	shm_pd_publish(spd, idx);
	if (smr->block_id)
		shm_pd_announce(spd, smr->block_id, (uint32_t)access);
	pthread_mutex_unlock(&spd->lock);

	smr->index = idx;
	smr->mr.context = pd->context;
	smr->mr.pd = pd;
	smr->mr.addr = addr;
	smr->mr.length = len;
	smr->mr.handle = idx;
	smr->mr.lkey = key;
	smr->mr.rkey = key;
	return &smr->mr;

err_free:
	if (smr->block_id)
		ferry_block_unshare(smr->block_id);
	free(smr);
	return NULL;
}

int shm_dereg_mr(struct ferry_mr *mr)
{
	struct shm_mr *smr = to_smr(mr);
	struct shm_pd *spd = to_spd(mr->pd);
	struct shm_mr_entry *e;
	uint64_t window = 0;

	pthread_mutex_lock(&spd->lock);
	e = shm_pd_entry(spd, mr->lkey);
	if (e && (!spd->detached || (smr->index & SHM_KEY_LOCAL))) {
		window = e->block_id;	/* renewed since registration, maybe */
		atomic_store_explicit(&e->rkey, 0, memory_order_release);
		shm_pd_publish(spd, SHM_KEY_INDEX(mr->lkey));
	}
	pthread_mutex_unlock(&spd->lock);
	/* The key is gone from the table first: peers of ours stop using the
	 * window before it is taken from them. */
	if (window)
		ferry_block_unshare(window);
	free(smr);
	return 0;
}

/* Our own table is trusted (peers can only read it). NULL if @lkey is stale. */
const struct shm_mr_entry *shm_mr_lookup_local(struct shm_pd *spd, uint32_t lkey)
{
	const struct shm_mr_entry *e = shm_pd_entry(spd, lkey);

	if (!e || atomic_load_explicit(&e->rkey, memory_order_acquire) != lkey)
		return NULL;
	return e;
}
