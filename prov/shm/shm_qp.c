/*
 * shm_qp.c - queue pair objects of the shm provider and their state machine.
 *
 * Locking: sq_lock guards the send queue, the connection and every state
 * change; rq_lock guards the receive queue.  Order: a CQ's lock before
 * rq_lock (poll), sq_lock before a CQ's lock (send completions), and never
 * rq_lock before a CQ's lock.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shm-internal.h"
#include "shm-ud.h"

static pthread_mutex_t qpn_lock = PTHREAD_MUTEX_INITIALIZER;
FERRY_FORK_SAFE(qpn, qpn_lock)
static uint32_t next_qpn = 0x11;

uint32_t shm_qp_num_take(void)
{
	uint32_t qpn;

	pthread_mutex_lock(&qpn_lock);
	qpn = next_qpn++ & 0xffffff;
	pthread_mutex_unlock(&qpn_lock);
	return qpn;
}

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

/*
 * A QP's two big arrays (SQ slots, receives awaiting the region) share one
 * anonymous mapping: the kernel hands out zero pages lazily, so
 * an idle QP costs no memory for its queues, where calloc would reuse (and
 * clear) dirty heap memory; and one mapping is one mmap/munmap per QP (an
 * munmap in a threaded process costs TLB shootdowns).
 */
static size_t shm_qp_align(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

static size_t shm_qp_sq_bytes(const struct shm_qp *qp)
{
	return shm_qp_align((size_t)qp->sq_size * qp->sq_stride);
}

static size_t shm_qp_rq_slots(const struct shm_qp *qp)
{
	return (size_t)qp->rq_size * qp->cap.max_recv_sge;
}

/* SQ slots, then the receives' published SGEs, then their own: pages of
 * anonymous memory, touched only as far as the queues are used. */
static size_t shm_qp_arrays_bytes(const struct shm_qp *qp)
{
	return shm_qp_sq_bytes(qp) + shm_qp_rq_slots(qp) * sizeof(*qp->rq_pending) +
	       shm_qp_rq_slots(qp) * sizeof(*qp->rq_local);
}

static int shm_qp_arrays_alloc(struct shm_qp *qp)
{
	uint8_t *p = mmap(NULL, shm_qp_arrays_bytes(qp), PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return -1;
	qp->sq = p;
	qp->rq_pending = (struct shm_rsge *)(p + shm_qp_sq_bytes(qp));
	qp->rq_local = (struct shm_lsge *)(qp->rq_pending + shm_qp_rq_slots(qp));
	return 0;
}

static void shm_qp_arrays_free(struct shm_qp *qp)
{
	if (qp->sq)
		munmap(qp->sq, shm_qp_arrays_bytes(qp));
	free(qp->rq);
}

static bool shm_cap_ok(const struct ferry_qp_cap *cap)
{
	return cap->max_send_wr <= SHM_MAX_QP_WR && cap->max_recv_wr <= SHM_MAX_QP_WR &&
	       cap->max_send_sge <= SHM_MAX_SGE && cap->max_recv_sge <= SHM_MAX_SGE &&
	       cap->max_inline_data <= SHM_MAX_INLINE;
}

struct ferry_qp *shm_create_qp(struct ferry_pd *pd, struct ferry_qp_init_attr *attr)
{
	struct shm_qp *qp;

	if (attr->qp_type == FERRY_QPT_UD)
		return shm_ud_create_qp(pd, attr);	/* shm_ud.c */
	if (!shm_cap_ok(&attr->cap)) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	qp->cap = attr->cap;
	if (attr->srq && shm_srq_qp_caps(to_ssrq(attr->srq), pd, &qp->cap)) {
		free(qp);
		errno = EINVAL;
		return NULL;
	}
	if (qp->cap.max_send_sge == 0)
		qp->cap.max_send_sge = 1;
	if (qp->cap.max_recv_sge == 0)
		qp->cap.max_recv_sge = 1;
	qp->sq_sig_all = attr->sq_sig_all;
	qp->sq_size = pow2_at_least(attr->cap.max_send_wr ? attr->cap.max_send_wr : 1);
	qp->rq_size = pow2_at_least(qp->cap.max_recv_wr ? qp->cap.max_recv_wr : 1);
	qp->sq_stride = sizeof(struct shm_swqe) +
			qp->cap.max_send_sge * sizeof(struct ferry_sge) +
			((qp->cap.max_inline_data + 7) & ~7u);
	qp->sq_stride = (qp->sq_stride + 63) & ~(size_t)63;
	if (shm_qp_arrays_alloc(qp) < 0)
		goto err_free;
	ferry_lock_init(&qp->sq_lock);
	ferry_lock_init(&qp->rq_lock);

	qp->qp.qp_num = shm_qp_num_take();
	qp->qp.context = pd->context;
	qp->qp.qp_context = attr->qp_context;
	qp->qp.pd = pd;
	qp->qp.send_cq = attr->send_cq;
	qp->qp.recv_cq = attr->recv_cq;
	qp->qp.handle = qp->qp.qp_num;
	qp->qp.state = FERRY_QPS_RESET;
	qp->qp.qp_type = attr->qp_type;
	if (attr->srq && shm_srq_attach(to_ssrq(attr->srq), qp))
		goto err_free;

	ferry_lock(&to_scq(attr->send_cq)->lock);
	to_scq(attr->send_cq)->nqps++;
	ferry_unlock(&to_scq(attr->send_cq)->lock);
	ferry_lock(&to_scq(attr->recv_cq)->lock);
	to_scq(attr->recv_cq)->nqps++;
	ferry_unlock(&to_scq(attr->recv_cq)->lock);
	shm_cq_attach_recv(to_scq(attr->recv_cq), qp);
	shm_pd_add_qp(to_spd(pd), qp);
	return &qp->qp;

err_free:
	shm_qp_arrays_free(qp);
	free(qp);
	errno = ENOMEM;
	return NULL;
}

/* Flush every WR posted but not executed; sq_lock held, QP in ERR. */
void shm_qp_flush_sq(struct shm_qp *qp)
{
	while (qp->sq_exec < qp->sq_head) {
		shm_sq_complete(qp, qp->sq_exec, shm_sq_slot(qp, qp->sq_exec),
				FERRY_WC_WR_FLUSH_ERR, 0);
		qp->sq_exec++;
	}
	qp->rnr_pending = false;
}

/*
 * shm_qp_set_error - move to ERR: flush the send queue now; the receive
 * queue is flushed by the poller (shm_poll_recv), so wake it if it sleeps.
 * sq_lock held.
 */
void shm_qp_set_error(struct shm_qp *qp, const char *why)
{
	struct shm_cq *rcq = to_scq(qp->qp.recv_cq);

	if (qp->qp.state == FERRY_QPS_ERR) {
		shm_qp_flush_sq(qp);
		return;
	}
	if (why)
		ferry_debug("QP %u: to ERR: %s", qp->qp.qp_num, why);
	__atomic_store_n(&qp->qp.state, FERRY_QPS_ERR, __ATOMIC_RELEASE);
	if (qp->region)
		atomic_store(&qp->region->in_error, 1);
	if (qp->srq)
		shm_srq_qp_error(qp);	/* its window back to the SRQ, LAST_WQE */
	shm_qp_flush_sq(qp);
	ferry_lock(&rcq->lock);
	shm_cq_signal_local(rcq, true);
	ferry_unlock(&rcq->lock);
	/* A channel that is the connection is not woken from here but by
	 * its socket: shut down, it polls ready (and the peer's QP follows
	 * ours, as on a hang-up). */
	if (qp->conn && qp->conn->on_channel && !to_spd(qp->qp.pd)->detached)
		shutdown(qp->conn->sock, SHUT_RDWR);
}

static void shm_qp_apply_attr(struct shm_qp *qp, const struct ferry_qp_attr *a, int mask)
{
	if (mask & FERRY_QP_ACCESS_FLAGS) {
		qp->access = a->qp_access_flags;
		if (qp->region)
			atomic_store(&qp->region->qp_access, qp->access);
	}
	if (mask & FERRY_QP_PKEY_INDEX)
		qp->pkey_index = a->pkey_index;
	if (mask & FERRY_QP_PORT)
		qp->port_num = a->port_num;
	if (mask & FERRY_QP_PATH_MTU)
		qp->path_mtu = a->path_mtu;
	if (mask & FERRY_QP_DEST_QPN)
		qp->dest_qp_num = a->dest_qp_num;
	if (mask & FERRY_QP_AV)
		qp->ah_attr = a->ah_attr;
	if (mask & FERRY_QP_RQ_PSN)
		qp->rq_psn = a->rq_psn;
	if (mask & FERRY_QP_SQ_PSN)
		qp->sq_psn = a->sq_psn;
	if (mask & FERRY_QP_MAX_DEST_RD_ATOMIC)
		qp->max_dest_rd_atomic = a->max_dest_rd_atomic;
	if (mask & FERRY_QP_MAX_QP_RD_ATOMIC)
		qp->max_rd_atomic = a->max_rd_atomic;
	if (mask & FERRY_QP_TIMEOUT)
		qp->timeout = a->timeout;
	if (mask & FERRY_QP_RETRY_CNT)
		qp->retry_cnt = a->retry_cnt;
	if (mask & FERRY_QP_RNR_RETRY)
		qp->rnr_retry = a->rnr_retry;
	if (mask & FERRY_QP_MIN_RNR_TIMER) {
		qp->min_rnr_timer = a->min_rnr_timer & 31;
		if (qp->region)
			atomic_store(&qp->region->min_rnr_timer, qp->min_rnr_timer);
	}
}

/*
 * The LID an address vector names: its GID's when global (one of ours:
 * shm_port.c), else its dlid.  0 when it names nobody we can reach: the
 * modify succeeds, and sends find no peer, as on a device.
 */
static uint16_t shm_qp_av_lid(const struct ferry_ah_attr *ah)
{
	uint16_t lid;

	if (ah->is_global)
		return shm_port_gid_lid(&ah->grh.dgid, &lid) == 0 ? lid : 0;
	return ah->dlid <= 0xbfff ? ah->dlid : 0;
}

/*
 * Check attribute values the state machine table cannot.  *@join_p: RTR
 * with no exchange behind it, to be joined out of band (shm_join.c).
 */
static int shm_qp_check_attr(struct shm_qp *qp, const struct ferry_qp_attr *a, int mask,
			     enum ferry_qp_state next, bool *join_p)
{
	*join_p = false;
	if ((mask & FERRY_QP_PORT) && a->port_num != 1)
		return EINVAL;
	if ((mask & FERRY_QP_CAP) && !shm_cap_ok(&a->cap))
		return EINVAL;
	if (next == FERRY_QPS_RTR && qp->qp.state == FERRY_QPS_INIT) {
		if (a->dest_qp_num > 0xffffff)
			return EINVAL;
		if (!qp->conn && qp->xconn) {
			ferry_info("QP %u: RTR before its exchange is over", qp->qp.qp_num);
			return ENOTCONN;
		}
		if (!qp->conn) {
			*join_p = true;
			return 0;
		}
		if (a->dest_qp_num != qp->conn->peer_qpn) {
			ferry_info("QP %u: dest_qp_num %u, but the peer is QP %u",
				   qp->qp.qp_num, a->dest_qp_num, qp->conn->peer_qpn);
			return EINVAL;
		}
	}
	return 0;
}

/*
 * Back to RESET: forget everything posted and drop the connection.  sq_lock
 * held; the caller has already called shm_monitor_forget (without the lock).
 */
static void shm_qp_reset(struct shm_qp *qp)
{
	ferry_lock(&qp->rq_lock);
	if (qp->srq)
		shm_srq_qp_reset(qp);	/* its window back to the SRQ */
	qp->rq_prod = qp->rq_cons = 0;
	ferry_unlock(&qp->rq_lock);
	qp->sq_head = qp->sq_exec = 0;
	qp->dq_seq = qp->peer_rq_known = 0;
	atomic_store(&qp->sq_retired, 0);
	atomic_store(&qp->async_error, false);
	qp->rnr_pending = false;
	qp->hangup_pending = false;
	if (qp->xconn)
		shm_qp_exchange_drop(qp);
	if (qp->conn) {
		struct shm_cq *rcq = to_scq(qp->qp.recv_cq);
		struct shm_conn *conn = qp->conn;

		/* shm_poll_recv reads qp->conn under the CQ's lock alone. */
		ferry_lock(&rcq->lock);
		ferry_lock(&qp->rq_lock);
		qp->conn = NULL;
		ferry_unlock(&qp->rq_lock);
		ferry_unlock(&rcq->lock);
		shm_region_release(qp, conn);
		shm_conn_destroy(qp, conn);
	}
	shm_region_release(qp, NULL);
}

int shm_modify_qp(struct ferry_qp *fqp, struct ferry_qp_attr *attr, int mask)
{
	struct shm_qp *qp = to_sqp(fqp);
	enum ferry_qp_state cur, next;
	bool join = false;
	int err;

	if (qp->ud)
		return shm_ud_modify_qp(qp, attr, mask);
	if ((mask & FERRY_QP_STATE) && attr->qp_state == FERRY_QPS_RESET) {
		shm_monitor_forget(qp);	/* may wait for the monitor: no lock held */
		shm_join_forget(qp);	/* and for the join thread */
	}
	ferry_lock(&qp->sq_lock);
	cur = qp->qp.state;
	if (!ferry_qp_next_state(cur, attr, mask, &next) ||
	    !ferry_qp_type_transition_ok(qp->qp.qp_type, cur, next, mask)) {
		ferry_unlock(&qp->sq_lock);
		return ERR(EINVAL);
	}
	err = shm_qp_check_attr(qp, attr, mask, next, &join);
	if (!err && join &&
	    shm_join_prepare(qp, shm_qp_av_lid(&attr->ah_attr), attr->dest_qp_num,
			     attr->rq_psn) < 0)
		err = errno;
	if (err) {
		ferry_unlock(&qp->sq_lock);
		return ERR(err);
	}
	shm_qp_apply_attr(qp, attr, mask);
	if (next == FERRY_QPS_ERR) {
		shm_qp_set_error(qp, NULL);
	} else if (next == FERRY_QPS_RESET) {
		if (cur != FERRY_QPS_RESET && qp->sq_exec < qp->sq_head)
			qp->sq_exec = qp->sq_head;	/* RESET drops, no completions */
		shm_qp_reset(qp);
		__atomic_store_n(&qp->qp.state, next, __ATOMIC_RELEASE);
	} else {
		if (next == FERRY_QPS_RTS && cur != FERRY_QPS_RTS)
			qp->rnr_left = qp->rnr_retry;
		__atomic_store_n(&qp->qp.state, next, __ATOMIC_RELEASE);
		if (next == FERRY_QPS_RTS && qp->hangup_pending) {
			qp->hangup_pending = false;
			shm_qp_set_error(qp, "peer hung up before RTS");
		} else if (next == FERRY_QPS_RTS) {
			shm_sq_progress(qp);	/* SQD -> RTS resumes */
		}
		if (qp->srq)
			shm_srq_fill(qp);	/* receives may be posted from INIT on */
	}
	ferry_unlock(&qp->sq_lock);
	if (join)
		shm_join_register(qp);	/* the thread finds the peer */
	return 0;
}

int shm_query_qp(struct ferry_qp *fqp, struct ferry_qp_attr *a,
		 struct ferry_qp_init_attr *init)
{
	struct shm_qp *qp = to_sqp(fqp);

	if (qp->ud)
		return shm_ud_query_qp(qp, a, init);
	memset(a, 0, sizeof(*a));
	ferry_lock(&qp->sq_lock);
	a->qp_state = a->cur_qp_state = qp->qp.state;
	a->path_mtu = qp->path_mtu;
	a->rq_psn = qp->rq_psn;
	a->sq_psn = qp->sq_psn;
	a->dest_qp_num = qp->dest_qp_num;
	a->qp_access_flags = qp->access;
	a->cap = qp->cap;
	a->pkey_index = qp->pkey_index;
	a->sq_draining = 0;	/* execution is synchronous: SQD is drained at once */
	a->max_rd_atomic = qp->max_rd_atomic;
	a->max_dest_rd_atomic = qp->max_dest_rd_atomic;
	a->min_rnr_timer = qp->min_rnr_timer;
	a->port_num = qp->port_num;
	a->ah_attr = qp->ah_attr;
	if (!a->ah_attr.port_num)
		a->ah_attr.port_num = qp->port_num;
	a->timeout = qp->timeout;
	a->retry_cnt = qp->retry_cnt;
	a->rnr_retry = qp->rnr_retry;
	ferry_unlock(&qp->sq_lock);

	memset(init, 0, sizeof(*init));
	init->qp_context = fqp->qp_context;
	init->send_cq = fqp->send_cq;
	init->recv_cq = fqp->recv_cq;
	init->srq = fqp->srq;
	init->cap = qp->cap;
	init->qp_type = fqp->qp_type;
	init->sq_sig_all = qp->sq_sig_all;
	return 0;
}

int shm_destroy_qp(struct ferry_qp *fqp)
{
	struct shm_qp *qp = to_sqp(fqp);
	struct shm_cq *scq = to_scq(fqp->send_cq), *rcq = to_scq(fqp->recv_cq);

	if (qp->ud)
		return shm_ud_destroy_qp(qp);
	shm_monitor_forget(qp);
	shm_join_forget(qp);
	if (qp->srq)
		shm_srq_detach(qp);	/* no more top-ups; reset gives its window back */
	shm_pd_remove_qp(to_spd(fqp->pd), qp);
	shm_cq_detach_recv(rcq, qp);
	if (scq != rcq)
		shm_cq_detach_recv(scq, qp);	/* drops its local completions */
	ferry_lock(&qp->sq_lock);
	shm_qp_reset(qp);
	ferry_unlock(&qp->sq_lock);

	ferry_lock(&scq->lock);
	scq->nqps--;
	ferry_unlock(&scq->lock);
	ferry_lock(&rcq->lock);
	rcq->nqps--;
	ferry_unlock(&rcq->lock);

	shm_qp_arrays_free(qp);
	free(qp);
	return 0;
}

int shm_qp_test_region(struct ferry_qp *fqp, void **addr_p, size_t *len_p)
{
	struct shm_qp *qp = to_sqp(fqp);

	if (!qp->region)
		return ERR(ENOTCONN);
	*addr_p = (uint8_t *)qp->region - qp->region_head_off;
	*len_p = qp->region_size;
	return 0;
}
