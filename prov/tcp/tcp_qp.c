/*
 * tcp_qp.c - the tcp transport's QPs: creation, the ibverbs state
 * machine, posting, and joining a connected socket (attach).
 *
 * A QP joins its connection in INIT (ferry_tcp_qp_attach, after the MPA
 * exchange); RTR starts the receive side (the socket enters the progress
 * thread's epoll set), RTS the send side.  ERR flushes everything posted
 * and ends the stream: a Terminate first if the QP found the peer at
 * fault, then a FIN; what still arrives is read and dropped until EOF,
 * so that the peer's kernel never answers our close with a reset that
 * could destroy the Terminate in flight.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp-internal.h"
#include "tcp-export.h"

#define TCP_KEEPALIVE_IDLE_S	60

static uint32_t tcp_pow2(uint32_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

static bool tcp_cap_ok(const struct ferry_qp_cap *cap)
{
	return cap->max_send_wr <= TCP_MAX_QP_WR && cap->max_recv_wr <= TCP_MAX_QP_WR &&
	       cap->max_send_sge <= TCP_MAX_SGE && cap->max_recv_sge <= TCP_MAX_SGE &&
	       cap->max_inline_data <= TCP_MAX_INLINE;
}

static void tcp_cq_ref(struct ferry_cq *cq, int delta)
{
	struct tcp_cq *tcq = to_tcq(cq);

	pthread_mutex_lock(&tcq->lock);
	tcq->nqps += delta;
	pthread_mutex_unlock(&tcq->lock);
}

struct ferry_qp *tcp_create_qp(struct ferry_pd *pd, struct ferry_qp_init_attr *attr)
{
	static uint32_t next_qpn;
	struct tcp_context *tc = to_tctx(pd->context);
	struct tcp_qp *qp;

	if (!tcp_cap_ok(&attr->cap)) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	qp->cap = attr->cap;
	if (!qp->cap.max_send_sge)
		qp->cap.max_send_sge = 1;
	if (!qp->cap.max_recv_sge)
		qp->cap.max_recv_sge = 1;
	qp->sq_size = tcp_pow2(attr->cap.max_send_wr ? attr->cap.max_send_wr : 1);
	qp->rq_size = tcp_pow2(attr->cap.max_recv_wr ? attr->cap.max_recv_wr : 1);
	qp->sq = calloc(qp->sq_size, sizeof(*qp->sq));
	qp->rq = calloc(qp->rq_size, sizeof(*qp->rq));
	if (!qp->sq || !qp->rq)
		goto err_free;
	pthread_mutex_init(&qp->lock, NULL);
	qp->fd = -1;
	qp->sq_sig_all = attr->sq_sig_all;
	qp->qp.qp_num = (__atomic_add_fetch(&next_qpn, 1, __ATOMIC_RELAXED)) & 0xffffff;
	qp->qp.context = pd->context;
	qp->qp.qp_context = attr->qp_context;
	qp->qp.pd = pd;
	qp->qp.send_cq = attr->send_cq;
	qp->qp.recv_cq = attr->recv_cq;
	qp->qp.handle = qp->qp.qp_num;
	qp->qp.state = FERRY_QPS_RESET;
	qp->qp.qp_type = FERRY_QPT_RC;
	tcp_cq_ref(attr->send_cq, 1);
	tcp_cq_ref(attr->recv_cq, 1);
	pthread_mutex_lock(&tc->mr_lock);
	to_tpd(pd)->nqps++;
	pthread_mutex_unlock(&tc->mr_lock);
	return &qp->qp;

err_free:
	free(qp->sq);
	free(qp->rq);
	free(qp);
	errno = ENOMEM;
	return NULL;
}

void tcp_sq_retire(struct tcp_qp *qp)
{
	while (qp->sq_done != qp->sq_head) {
		struct tcp_swqe *w = &qp->sq[qp->sq_done & (qp->sq_size - 1)];
		struct ferry_wc wc = { 0 };

		if (w->state != TCP_WQE_DONE)
			break;
		if ((w->flags & FERRY_SEND_SIGNALED) || qp->sq_sig_all ||
		    w->status != FERRY_WC_SUCCESS) {
			wc.wr_id = w->wr_id;
			wc.status = w->status;
			wc.opcode = ferry_wc_opcode_of(w->opcode);
			wc.qp_num = qp->qp.qp_num;
			if (w->status == FERRY_WC_SUCCESS)
				wc.byte_len = w->len;
			tcp_cq_push(to_tcq(qp->qp.send_cq), &wc, false);
		}
		free(w->inline_data);
		w->inline_data = NULL;
		qp->sq_done++;
	}
}

static void tcp_rq_flush(struct tcp_qp *qp)
{
	while (qp->rq_cons != qp->rq_prod) {
		struct tcp_rwqe *r = &qp->rq[qp->rq_cons & (qp->rq_size - 1)];
		struct ferry_wc wc = {
			.wr_id = r->wr_id,
			.status = FERRY_WC_WR_FLUSH_ERR,
			.opcode = FERRY_WC_RECV,
			.qp_num = qp->qp.qp_num,
		};

		tcp_cq_push(to_tcq(qp->qp.recv_cq), &wc, false);
		qp->rq_cons++;
	}
	qp->recv_active = false;
}

void tcp_qp_set_error(struct tcp_qp *qp, const char *why)
{
	bool was_err = qp->qp.state == FERRY_QPS_ERR;
	uint32_t i;

	if (!was_err && why)
		ferry_debug("tcp QP %u: to ERR: %s", qp->qp.qp_num, why);
	__atomic_store_n(&qp->qp.state, FERRY_QPS_ERR, __ATOMIC_RELEASE);
	for (i = qp->sq_done; i != qp->sq_head; i++) {
		struct tcp_swqe *w = &qp->sq[i & (qp->sq_size - 1)];

		if (w->state != TCP_WQE_DONE) {
			w->state = TCP_WQE_DONE;
			w->status = FERRY_WC_WR_FLUSH_ERR;
		}
	}
	qp->sq_tx = qp->sq_head;
	qp->seg_active = qp->seg_tagged = qp->fence_wanted = qp->imm_after = false;
	qp->orq_tail = qp->orq_head;
	qp->irq_tail = qp->irq_head;
	qp->rx_held = false;
	__atomic_store_n(&qp->deadline_ns, 0, __ATOMIC_RELAXED);
	tcp_sq_retire(qp);
	tcp_rq_flush(qp);
	/* End our half of the stream; a pending Terminate goes first. */
	if (qp->fd >= 0 && !qp->term_pending && !qp->tx_shut) {
		shutdown(qp->fd, SHUT_WR);
		qp->tx_shut = true;
	}
	if (!was_err && qp->down_cb)
		qp->down_cb(qp->down_arg);	/* the CM: DISCONNECTED */
}

void ferry_tcp_qp_on_down(struct ferry_qp *fqp, void (*cb)(void *arg), void *arg)
{
	struct tcp_qp *qp = to_tqp(fqp);

	pthread_mutex_lock(&qp->lock);
	qp->down_cb = cb;
	qp->down_arg = arg;
	pthread_mutex_unlock(&qp->lock);
}

static void tcp_qp_apply_attr(struct tcp_qp *qp, const struct ferry_qp_attr *a, int mask)
{
	if (mask & FERRY_QP_ACCESS_FLAGS)
		qp->access = a->qp_access_flags;
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
	if (mask & FERRY_QP_MIN_RNR_TIMER)
		qp->min_rnr_timer = a->min_rnr_timer;
}

/* Back to RESET: drop the connection and everything posted, no completions. */
static void tcp_qp_reset(struct tcp_qp *qp)
{
	uint32_t i;

	for (i = qp->sq_done; i != qp->sq_head; i++)
		free(qp->sq[i & (qp->sq_size - 1)].inline_data);
	memset(qp->sq, 0, qp->sq_size * sizeof(*qp->sq));
	qp->sq_head = qp->sq_tx = qp->sq_done = 0;
	qp->rq_prod = qp->rq_cons = 0;
	if (qp->fd >= 0)
		close(qp->fd);
	qp->fd = -1;
	free(qp->txbuf);
	free(qp->rxbuf);
	free(qp->rdbuf);
	qp->txbuf = qp->rxbuf = qp->rdbuf = NULL;
	qp->tx_len = qp->tx_off = qp->rd_len = qp->rd_off = 0;
	qp->rx_eof = qp->tx_shut = qp->hold_tx = qp->rtr_pending = false;
	qp->seg_active = qp->seg_tagged = qp->fence_wanted = qp->term_pending = false;
	qp->rx_held = qp->recv_active = qp->imm_pending = qp->imm_after = false;
	qp->tx_wqe_pending = qp->tx_after_term = false;
	qp->orq_head = qp->orq_tail = qp->irq_head = qp->irq_tail = 0;
	memset(qp->msn, 0, sizeof(qp->msn));
	__atomic_store_n(&qp->deadline_ns, 0, __ATOMIC_RELAXED);
	qp->partial_since_ns = 0;
}

static int tcp_qp_check_attr(struct tcp_qp *qp, const struct ferry_qp_attr *a, int mask,
			     enum ferry_qp_state next)
{
	if ((mask & FERRY_QP_PORT) && a->port_num != 1)
		return EINVAL;
	if ((mask & FERRY_QP_CAP) && !tcp_cap_ok(&a->cap))
		return EINVAL;
	if (next == FERRY_QPS_RTR && qp->qp.state == FERRY_QPS_INIT && qp->fd < 0) {
		ferry_info("tcp QP %u: RTR needs a connection: ferry_tcp_qp_attach first",
			   qp->qp.qp_num);
		return ENOTCONN;
	}
	return 0;
}

int tcp_modify_qp(struct ferry_qp *fqp, struct ferry_qp_attr *attr, int mask)
{
	struct tcp_qp *qp = to_tqp(fqp);
	enum ferry_qp_state cur, next;
	int err;

	pthread_mutex_lock(&qp->lock);
	cur = qp->qp.state;
	if (!ferry_qp_next_state(cur, attr, mask, &next) ||
	    !ferry_qp_transition_ok(cur, next, mask)) {
		pthread_mutex_unlock(&qp->lock);
		return ERR(EINVAL);
	}
	err = tcp_qp_check_attr(qp, attr, mask, next);
	if (err) {
		pthread_mutex_unlock(&qp->lock);
		return ERR(err);
	}
	tcp_qp_apply_attr(qp, attr, mask);
	if (next == FERRY_QPS_RESET && cur != FERRY_QPS_RESET) {
		pthread_mutex_unlock(&qp->lock);
		tcp_progress_remove(qp);	/* waits for the thread: no lock held */
		pthread_mutex_lock(&qp->lock);
		tcp_qp_reset(qp);
	}
	if (next == FERRY_QPS_ERR) {
		tcp_qp_set_error(qp, "modified to ERR");
	} else {
		__atomic_store_n(&qp->qp.state, next, __ATOMIC_RELEASE);
		if (next == FERRY_QPS_RTR && cur == FERRY_QPS_INIT)
			err = tcp_progress_add(qp);
	}
	if (!err && qp->fd >= 0)
		tcp_tx_progress(qp);
	pthread_mutex_unlock(&qp->lock);
	return err ? ERR(err) : 0;
}

int tcp_query_qp(struct ferry_qp *fqp, struct ferry_qp_attr *a, struct ferry_qp_init_attr *init)
{
	struct tcp_qp *qp = to_tqp(fqp);

	memset(a, 0, sizeof(*a));
	pthread_mutex_lock(&qp->lock);
	a->qp_state = a->cur_qp_state = qp->qp.state;
	a->path_mtu = qp->path_mtu;
	a->rq_psn = qp->rq_psn;
	a->sq_psn = qp->sq_psn;
	a->dest_qp_num = qp->dest_qp_num;
	a->qp_access_flags = qp->access;
	a->cap = qp->cap;
	a->pkey_index = qp->pkey_index;
	a->max_rd_atomic = qp->max_rd_atomic;
	a->max_dest_rd_atomic = qp->max_dest_rd_atomic;
	a->min_rnr_timer = qp->min_rnr_timer;
	a->port_num = qp->port_num;
	a->ah_attr = qp->ah_attr;
	a->timeout = qp->timeout;
	a->retry_cnt = qp->retry_cnt;
	a->rnr_retry = qp->rnr_retry;
	pthread_mutex_unlock(&qp->lock);

	memset(init, 0, sizeof(*init));
	init->qp_context = fqp->qp_context;
	init->send_cq = fqp->send_cq;
	init->recv_cq = fqp->recv_cq;
	init->cap = qp->cap;
	init->qp_type = FERRY_QPT_RC;
	init->sq_sig_all = qp->sq_sig_all;
	return 0;
}

bool tcp_qp_write_imm_ok(struct ferry_qp *fqp)
{
	struct tcp_qp *qp = to_tqp(fqp);
	bool ok;

	pthread_mutex_lock(&qp->lock);
	ok = qp->fd >= 0 && qp->conn.rfc7306;
	pthread_mutex_unlock(&qp->lock);
	return ok;
}

int tcp_destroy_qp(struct ferry_qp *fqp)
{
	struct tcp_context *tc = to_tctx(fqp->context);
	struct tcp_qp *qp = to_tqp(fqp);

	tcp_progress_remove(qp);
	pthread_mutex_lock(&qp->lock);
	tcp_qp_reset(qp);
	pthread_mutex_unlock(&qp->lock);
	tcp_cq_ref(fqp->send_cq, -1);
	tcp_cq_ref(fqp->recv_cq, -1);
	pthread_mutex_lock(&tc->mr_lock);
	to_tpd(fqp->pd)->nqps--;
	pthread_mutex_unlock(&tc->mr_lock);
	pthread_mutex_destroy(&qp->lock);
	free(qp->sq);
	free(qp->rq);
	free(qp);
	return 0;
}

void tcp_qp_stats(struct ferry_qp *fqp, struct tcp_qp_stats *stats_p)
{
	struct tcp_qp *qp = to_tqp(fqp);

	pthread_mutex_lock(&qp->lock);
	*stats_p = qp->stats;
	pthread_mutex_unlock(&qp->lock);
}

/* --- attach --- */

/*
 * A peer whose host vanished sends no FIN: the kernel's keepalive finds
 * it (about a minute of silence, then 6 probes 5 s apart) and the reset
 * takes the QP to ERR, at no cost to us while the peer answers.
 */
static void tcp_attach_keepalive(int fd)
{
	int one = 1, idle = TCP_KEEPALIVE_IDLE_S, intvl = 5, cnt = 6;

	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* The socket's MSS, after checking it is a connected TCP stream. */
static int tcp_attach_mss(int fd, uint32_t *mss_p)
{
	int type = 0, mss = 0, one = 1;
	socklen_t len = sizeof(type);

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
		return -1;
	len = sizeof(mss);
	if (type != SOCK_STREAM || getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) < 0)
		return ERR(ENOTSOCK);
	/* FPDUs are whole messages of ours: no reason to let Nagle hold one. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	tcp_attach_keepalive(fd);
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
		return -1;
	*mss_p = mss > 0 ? (uint32_t)mss : 536;
	return 0;
}

static int tcp_attach_buffers(struct tcp_qp *qp, const struct tcp_attach *conn)
{
	size_t rxcap = tcpw_fpdu_len(TCPW_ULPDU_MAX);

	qp->txbuf = malloc(tcpw_fpdu_len(qp->mulpdu));
	qp->rxbuf = malloc(rxcap);
	qp->rdbuf = malloc(TCP_RDBUF_SIZE);
	if (!qp->txbuf || !qp->rxbuf || !qp->rdbuf)
		return ENOMEM;
	if (tcpw_fpdu_parser_init(&qp->parser, qp->rxbuf, rxcap, TCPW_ULPDU_MAX,
				  conn->mpa.crc) < 0)
		return EINVAL;
	return 0;
}

int ferry_tcp_qp_attach(struct ferry_qp *fqp, int fd, const struct tcp_attach *conn)
{
	struct tcp_qp *qp = to_tqp(fqp);
	uint32_t mss;
	int i, err;

	if (fqp->context->provider != &ferry_tcp_provider || !conn) {
		close(fd);
		return ERR(EINVAL);
	}
	if (tcp_attach_mss(fd, &mss) < 0) {
		err = errno;
		close(fd);
		return ERR(err);
	}
	pthread_mutex_lock(&qp->lock);
	if (qp->qp.state != FERRY_QPS_INIT || qp->fd >= 0) {
		pthread_mutex_unlock(&qp->lock);
		close(fd);
		return ERR(EINVAL);
	}
	qp->fd = fd;
	qp->conn = *conn;
	/* Cut FPDUs to the MSS (RFC 5044 s6.1); at least a small one fits. */
	qp->mulpdu = tcpw_mulpdu(mss, false);
	if (qp->mulpdu < 64)
		qp->mulpdu = 64;
	err = tcp_attach_buffers(qp, conn);
	if (err) {
		tcp_qp_reset(qp);
		pthread_mutex_unlock(&qp->lock);
		return ERR(err);
	}
	tcpw_reasm_init(&qp->reasm_tagged);
	for (i = 0; i < 4; i++)
		tcpw_reasm_init(&qp->reasm_q[i]);
	/* RFC 5044: the Responder sends nothing before the first FPDU
	 * arrives; the Initiator's first FPDU is the RTR when one was agreed. */
	qp->hold_tx = !conn->initiator;
	qp->rtr_pending = conn->initiator && conn->mpa.rtr;
	pthread_mutex_unlock(&qp->lock);
	return 0;
}
