/*
 * shm_ud.c - UD queue pairs of the shm provider as objects: address
 * handles, the QP's socket and name, its states, and how its recv CQ's
 * channel learns of datagrams.  The data path is shm_ud_data.c; the
 * design (one datagram per send, what a receiver trusts) is in shm-ud.h.
 *
 * Locking as for RC QPs (shm_qp.c): sq_lock for state changes and sends,
 * rq_lock for the receive queue and the socket's reads; a CQ's lock
 * before rq_lock.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <poll.h>
#include <unistd.h>

#include "shm-ops.h"
#include "shm-ud.h"

/* Names tried before giving up when others hold the ones our QPNs make. */
#define SHM_UD_BIND_TRIES	64

/* --- address handles --- */

struct ferry_ah *shm_create_ah(struct ferry_pd *pd, struct ferry_ah_attr *attr)
{
	struct shm_ah *sah;

	/* One port; its LIDs are unicast ones; no multicast groups. */
	if (attr->port_num != 1 || attr->dlid == 0 || attr->dlid > SHM_UD_LID_MAX ||
	    (attr->is_global && attr->grh.sgid_index != 0)) {
		ferry_debug("shm: address handle refused: port %u, dlid %u, sgid_index %u",
			    attr->port_num, attr->dlid, attr->grh.sgid_index);
		errno = EINVAL;
		return NULL;
	}
	sah = calloc(1, sizeof(*sah));
	if (!sah)
		return NULL;
	sah->attr = *attr;
	sah->ah.context = pd->context;
	sah->ah.pd = pd;
	sah->ah.handle = attr->dlid;
	return &sah->ah;
}

int shm_destroy_ah(struct ferry_ah *ah)
{
	free(to_sah(ah));
	return 0;
}

/*
 * Bind @fd to the name of a new QPN of ours.  A name already held is
 * someone else's (ours are unique): take the next number, so that a
 * squatter only moves us on and never gets what is sent to our QP.
 */
static int shm_ud_bind(int fd, uint16_t lid, uint32_t *qpn_p)
{
	struct sockaddr_un un;
	uint32_t qpn;
	int i;

	for (i = 0; i < SHM_UD_BIND_TRIES; i++) {
		qpn = shm_qp_num_take();
		if (bind(fd, (struct sockaddr *)&un, shm_ud_name(lid, qpn, &un)) == 0) {
			*qpn_p = qpn;
			return 0;
		}
		if (errno != EADDRINUSE) {
			ferry_warn("shm: binding UD QP %u's socket: %m", qpn);
			return -1;
		}
		ferry_info("shm: UD QP name of LID %u QPN %u is held by another socket; "
			   "taking the next QPN", lid, qpn);
	}
	return ERR(EADDRINUSE);
}

/* The QP's socket: bound, non-blocking, passing its senders' credentials. */
static int shm_ud_socket(struct shm_ud *ud, struct ferry_context *ctx, uint32_t *qpn_p)
{
	struct ferry_port_attr pa;
	int fd, e;

	if (shm_query_port(ctx, 1, &pa) < 0 || shm_query_gid(ctx, 1, 0, &ud->gid) < 0)
		return -1;	/* no LID: said so there */
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &(int){ 1 }, sizeof(int)) < 0 ||
	    shm_ud_bind(fd, pa.lid, qpn_p) < 0)
		goto err_close_fd;
	ud->fd = ferry_fd_park(fd);
	ud->lid = pa.lid;
	return 0;

err_close_fd:
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

/* --- QPs --- */

static uint32_t shm_ud_pow2(uint32_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

static struct shm_ud *shm_ud_alloc(const struct ferry_qp_cap *cap)
{
	struct shm_ud *ud = calloc(1, sizeof(*ud));

	if (!ud)
		return NULL;
	ud->fd = -1;
	ud->rq_size = shm_ud_pow2(cap->max_recv_wr ? cap->max_recv_wr : 1);
	ud->rq_stride = sizeof(struct shm_ud_recv) + cap->max_recv_sge * sizeof(struct ferry_sge);
	ud->rq = calloc(ud->rq_size, ud->rq_stride);
	ud->done = calloc(ud->rq_size, sizeof(*ud->done));
	ud->buf = malloc(sizeof(struct shm_ud_hdr) + SHM_UD_MTU + 1);
	if (!ud->rq || !ud->done || !ud->buf) {
		free(ud->rq);
		free(ud->done);
		free(ud->buf);
		free(ud);
		errno = ENOMEM;
		return NULL;
	}
	return ud;
}

static void shm_ud_free(struct shm_ud *ud)
{
	if (ud->fd >= 0)
		close(ud->fd);
	free(ud->rq);
	free(ud->done);
	free(ud->buf);
	free(ud);
}

static bool shm_ud_cap_ok(const struct ferry_qp_cap *cap)
{
	return cap->max_send_wr <= SHM_MAX_QP_WR && cap->max_recv_wr <= SHM_MAX_QP_WR &&
	       cap->max_send_sge <= SHM_MAX_SGE && cap->max_recv_sge <= SHM_MAX_SGE &&
	       cap->max_inline_data <= SHM_UD_MTU;
}

/* Count the QP on its CQs, and have its receives polled on the recv CQ. */
static void shm_ud_cq_join(struct shm_qp *qp)
{
	struct shm_cq *scq = to_scq(qp->qp.send_cq), *rcq = to_scq(qp->qp.recv_cq);

	ferry_lock(&scq->lock);
	scq->nqps++;
	ferry_unlock(&scq->lock);
	ferry_lock(&rcq->lock);
	rcq->nqps++;
	atomic_fetch_add(&rcq->nud, 1);
	ferry_unlock(&rcq->lock);
	shm_cq_attach_recv(rcq, qp);
}

struct ferry_qp *shm_ud_create_qp(struct ferry_pd *pd, struct ferry_qp_init_attr *attr)
{
	struct shm_qp *qp;
	uint32_t qpn;

	if (!shm_ud_cap_ok(&attr->cap)) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->srq) {		/* UD on an SRQ: not on shm yet */
		errno = EOPNOTSUPP;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	qp->cap = attr->cap;
	if (qp->cap.max_send_sge == 0)
		qp->cap.max_send_sge = 1;
	if (qp->cap.max_recv_sge == 0)
		qp->cap.max_recv_sge = 1;
	qp->ud = shm_ud_alloc(&qp->cap);
	if (!qp->ud)
		goto err_free_qp;
	if (shm_ud_socket(qp->ud, pd->context, &qpn) < 0)
		goto err_free_ud;
	ferry_lock_init(&qp->sq_lock);
	ferry_lock_init(&qp->rq_lock);
	qp->sq_sig_all = attr->sq_sig_all;
	qp->port_num = 1;
	qp->path_mtu = FERRY_MTU_4096;
	qp->qp.qp_num = qpn;
	qp->qp.handle = qpn;
	qp->qp.context = pd->context;
	qp->qp.qp_context = attr->qp_context;
	qp->qp.pd = pd;
	qp->qp.send_cq = attr->send_cq;
	qp->qp.recv_cq = attr->recv_cq;
	qp->qp.state = FERRY_QPS_RESET;
	qp->qp.qp_type = FERRY_QPT_UD;
	shm_ud_cq_join(qp);
	return &qp->qp;

err_free_ud:
	shm_ud_free(qp->ud);
err_free_qp:
	free(qp);
	return NULL;
}

static int shm_ud_check_attr(const struct ferry_qp_attr *a, int mask)
{
	if ((mask & FERRY_QP_PORT) && a->port_num != 1)
		return EINVAL;
	if ((mask & FERRY_QP_PKEY_INDEX) && a->pkey_index != 0)
		return EINVAL;	/* one P_Key in the table */
	return 0;
}

/* The state's consequences for what is queued; sq_lock held. */
static void shm_ud_enter(struct shm_qp *qp, enum ferry_qp_state cur, enum ferry_qp_state next)
{
	struct shm_cq *rcq = to_scq(qp->qp.recv_cq);

	ferry_lock(&rcq->lock);
	ferry_lock(&qp->rq_lock);
	if (next == FERRY_QPS_RESET)
		shm_ud_discard(qp, true);
	else if (next == FERRY_QPS_RTR && cur == FERRY_QPS_INIT)
		shm_ud_discard(qp, false);	/* came while the QP took none */
	__atomic_store_n(&qp->qp.state, next, __ATOMIC_RELEASE);
	if (next == FERRY_QPS_ERR) {
		shm_ud_flush_recvs(qp);
		shm_cq_signal_local(rcq, true);
	}
	ferry_unlock(&qp->rq_lock);
	ferry_unlock(&rcq->lock);
}

int shm_ud_modify_qp(struct shm_qp *qp, struct ferry_qp_attr *attr, int mask)
{
	enum ferry_qp_state cur, next;
	int err;

	ferry_lock(&qp->sq_lock);
	cur = qp->qp.state;
	if (!ferry_qp_next_state(cur, attr, mask, &next) ||
	    !ferry_ud_transition_ok(cur, next, mask)) {
		ferry_unlock(&qp->sq_lock);
		return ERR(EINVAL);
	}
	err = shm_ud_check_attr(attr, mask);
	if (err) {
		ferry_unlock(&qp->sq_lock);
		return ERR(err);
	}
	if (mask & FERRY_QP_QKEY)
		__atomic_store_n(&qp->ud->qkey, attr->qkey, __ATOMIC_RELEASE);
	if (mask & FERRY_QP_SQ_PSN)
		qp->sq_psn = attr->sq_psn & 0xffffff;
	if (next != cur)
		shm_ud_enter(qp, cur, next);
	ferry_unlock(&qp->sq_lock);
	return 0;
}

int shm_ud_query_qp(struct shm_qp *qp, struct ferry_qp_attr *a, struct ferry_qp_init_attr *init)
{
	memset(a, 0, sizeof(*a));
	ferry_lock(&qp->sq_lock);
	a->qp_state = a->cur_qp_state = qp->qp.state;
	a->path_mtu = qp->path_mtu;
	a->qkey = __atomic_load_n(&qp->ud->qkey, __ATOMIC_ACQUIRE);
	a->sq_psn = qp->sq_psn;
	a->cap = qp->cap;
	a->port_num = qp->port_num;
	ferry_unlock(&qp->sq_lock);
	memset(init, 0, sizeof(*init));
	init->qp_context = qp->qp.qp_context;
	init->send_cq = qp->qp.send_cq;
	init->recv_cq = qp->qp.recv_cq;
	init->cap = qp->cap;
	init->qp_type = FERRY_QPT_UD;
	init->sq_sig_all = qp->sq_sig_all;
	return 0;
}

int shm_ud_destroy_qp(struct shm_qp *qp)
{
	struct shm_cq *scq = to_scq(qp->qp.send_cq), *rcq = to_scq(qp->qp.recv_cq);
	struct ferry_comp_channel *ch = rcq->cq.channel;

	shm_cq_detach_recv(rcq, qp);
	if (scq != rcq)
		shm_cq_detach_recv(scq, qp);	/* drops its send completions */
	ferry_lock(&rcq->lock);
	if (qp->ud->in_epoll && !rcq->detached)
		epoll_ctl(ch->fd, EPOLL_CTL_DEL, qp->ud->fd, NULL);
	rcq->nqps--;
	atomic_fetch_sub(&rcq->nud, 1);
	ferry_unlock(&rcq->lock);
	ferry_lock(&scq->lock);
	scq->nqps--;
	ferry_unlock(&scq->lock);
	shm_ud_free(qp->ud);
	free(qp);
	return 0;
}

/* --- the recv CQ's channel --- */

/*
 * Nothing of a sender's reaches our CQ's arm word (no shared memory), so
 * the channel watches the sockets themselves: ferry_req_notify_cq puts
 * each UD QP's socket in the channel's epoll set for one event
 * (EPOLLONESHOT), pointing at the CQ as its wake socket does; the event
 * is spent when it fires, as an arm is.  A single channel (the socket
 * layer's) is one socket already and cannot watch others: UD QPs on such
 * a CQ are polled, never waited for.  scq->lock held by the caller.
 */
void shm_ud_cq_arm(struct shm_cq *scq)
{
	struct ferry_comp_channel *ch = scq->cq.channel;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = scq };
	uint32_t i;

	if (!ch || to_sch(ch)->single || scq->detached)
		return;
	for (i = 0; i < scq->nrqps; i++) {
		struct shm_ud *ud = scq->rqps[i]->ud;

		if (!ud)
			continue;
		if (epoll_ctl(ch->fd, ud->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, ud->fd,
			      &ev) == 0)
			ud->in_epoll = true;
		else
			ferry_warn("shm: watching UD QP %u for its CQ's channel: %m",
				   scq->rqps[i]->qp.qp_num);
	}
}

bool shm_ud_cq_ready(struct shm_cq *scq)
{
	bool ready = false;
	uint32_t i;

	if (!atomic_load_explicit(&scq->nud, memory_order_relaxed))
		return false;	/* an RC CQ's spurious wake-up: no look */
	ferry_lock(&scq->lock);
	for (i = 0; i < scq->nrqps && !ready; i++) {
		struct shm_qp *qp = scq->rqps[i];
		struct pollfd pfd = { .events = POLLIN };

		if (!qp->ud)
			continue;
		pfd.fd = qp->ud->fd;
		ferry_lock(&qp->rq_lock);
		ready = qp->ud->done_count != 0;
		ferry_unlock(&qp->rq_lock);
		ready = ready || (poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN));
	}
	ferry_unlock(&scq->lock);
	return ready;
}
