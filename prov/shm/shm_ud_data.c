/*
 * shm_ud_data.c - the data path of shm UD QPs: a send is one datagram,
 * sent and completed in ferry_post_send; receives are taken off the
 * QP's socket, checked and placed when the application polls the CQ or
 * posts a receive.  The format and what a receiver trusts: shm-ud.h.
 *
 * Decisions where ibverbs leaves a provider room:
 *  - a payload larger than the MTU (4096) is refused at post time with
 *    EINVAL (rxe does the same), as is a chain's WR of another opcode
 *    than SEND / SEND_WITH_IMM, or an AH of another context;
 *  - an SGE outside the registered memory its lkey names completes the
 *    WR with FERRY_WC_LOC_PROT_ERR (nothing is sent);
 *  - a receive shorter than 40 bytes of GRH plus the payload completes
 *    with FERRY_WC_LOC_LEN_ERR and takes the datagram; the QP stays as
 *    it was (a datagram is lost, not the QP);
 *  - a datagram for which no receive is posted, whose Q_Key is not the
 *    QP's, that came before the QP reached RTR, or that fails a check,
 *    is dropped without a trace but a debug line -- as a NIC drops it.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "shm-ud.h"

/* A Q_Key with this bit set in a send WR: use the sending QP's (ibverbs). */
#define SHM_UD_QKEY_OWN		0x80000000u
/* Datagrams one poll or post takes off the socket at most: a flood from
 * a hostile sender costs each call a bounded time. */
#define SHM_UD_ABSORB_MAX	256
/* The GRH's next header on InfiniBand (IBA 8.3.1: "IB transport"). */
#define SHM_UD_GRH_NEXT_HDR	0x1b

static inline struct shm_ud_recv *shm_ud_recv_at(struct shm_ud *ud, uint64_t seq)
{
	return (struct shm_ud_recv *)(ud->rq + (seq & (ud->rq_size - 1)) * ud->rq_stride);
}

static inline struct ferry_sge *shm_ud_recv_sge(struct shm_ud_recv *r)
{
	return (struct ferry_sge *)(r + 1);
}

/* --- sends --- */

/* Is every SGE inside the registered memory its lkey names? */
static bool shm_ud_sges_ok(struct shm_qp *qp, const struct ferry_sge *sg_list, int num_sge,
			   bool write)
{
	struct shm_pd *spd = to_spd(qp->qp.pd);
	int i;

	for (i = 0; i < num_sge; i++) {
		const struct ferry_sge *g = &sg_list[i];
		const struct shm_mr_entry *e;

		if (g->length == 0)
			continue;
		e = shm_mr_lookup_local(spd, g->lkey);
		if (!e || g->addr < e->addr || g->addr - e->addr > e->length ||
		    g->length > e->length - (g->addr - e->addr) ||
		    (write && !(e->access & FERRY_ACCESS_LOCAL_WRITE)))
			return false;
	}
	return true;
}

/* What a WR must be before it is posted at all (EINVAL otherwise). */
static int shm_ud_send_check(struct shm_qp *qp, const struct ferry_send_wr *wr,
			     uint64_t *len_p)
{
	uint64_t len = 0;
	int i;

	if (!ferry_ud_wr_ok(&qp->qp, wr) || (uint32_t)wr->num_sge > qp->cap.max_send_sge)
		return EINVAL;
	for (i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len > SHM_UD_MTU) {
		ferry_info("QP %u: a UD message of %llu bytes, over the MTU (%u)",
			   qp->qp.qp_num, (unsigned long long)len, SHM_UD_MTU);
		return EINVAL;
	}
	if ((wr->send_flags & FERRY_SEND_INLINE) && len > qp->cap.max_inline_data)
		return EINVAL;
	*len_p = len;
	return 0;
}

static void shm_ud_hdr_fill(struct shm_qp *qp, const struct ferry_send_wr *wr, uint64_t len,
			    struct shm_ud_hdr *h)
{
	const struct ferry_ah_attr *av = &to_sah(wr->wr.ud.ah)->attr;
	uint32_t qkey = wr->wr.ud.remote_qkey;

	if (qkey & SHM_UD_QKEY_OWN)
		qkey = __atomic_load_n(&qp->ud->qkey, __ATOMIC_ACQUIRE);
	memset(h, 0, sizeof(*h));
	h->magic = SHM_UD_MAGIC;
	h->version = SHM_UD_VERSION;
	h->qkey = qkey;
	h->payload_len = (uint32_t)len;
	h->sl = av->sl;
	if (wr->opcode == FERRY_WR_SEND_WITH_IMM) {
		h->flags |= SHM_UD_F_IMM;
		h->imm_data = wr->imm_data;
	}
	if (wr->send_flags & FERRY_SEND_SOLICITED)
		h->flags |= SHM_UD_F_SOLICITED;
	if (av->is_global) {
		h->flags |= SHM_UD_F_GRH;
		h->flow_label = av->grh.flow_label & 0xfffff;
		h->traffic_class = av->grh.traffic_class;
		h->hop_limit = av->grh.hop_limit;
		memcpy(h->dgid, av->grh.dgid.raw, sizeof(h->dgid));
	}
}

/*
 * Send @wr as one datagram.  What the kernel refuses -- no such name
 * (ECONNREFUSED: no QP there), a full queue at the receiver (EAGAIN) --
 * is a datagram lost, which UD allows: the WR still succeeds.
 */
static enum ferry_wc_status shm_ud_send_one(struct shm_qp *qp, const struct ferry_send_wr *wr,
					    uint64_t len)
{
	struct iovec iov[1 + SHM_MAX_SGE];
	struct sockaddr_un un;
	struct shm_ud_hdr h;
	struct msghdr msg = { .msg_name = &un, .msg_iov = iov };
	int i;

	if (!(wr->send_flags & FERRY_SEND_INLINE) && !shm_ud_sges_ok(qp, wr->sg_list, wr->num_sge, false))
		return FERRY_WC_LOC_PROT_ERR;
	shm_ud_hdr_fill(qp, wr, len, &h);
	iov[0] = (struct iovec){ &h, sizeof(h) };
	msg.msg_iovlen = 1;
	for (i = 0; i < wr->num_sge; i++)
		if (wr->sg_list[i].length)
			iov[msg.msg_iovlen++] = (struct iovec){
				(void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length };
	msg.msg_namelen = shm_ud_name(to_sah(wr->wr.ud.ah)->attr.dlid,
				      wr->wr.ud.remote_qpn & SHM_UD_QPN_MAX, &un);
	if (sendmsg(qp->ud->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		if (errno == EFAULT)
			return FERRY_WC_LOC_PROT_ERR;
		ferry_debug("QP %u: UD datagram to LID %u QPN %u lost: %m", qp->qp.qp_num,
			    to_sah(wr->wr.ud.ah)->attr.dlid, wr->wr.ud.remote_qpn);
	}
	return FERRY_WC_SUCCESS;
}

/* A send's completion, on the send CQ; sq_lock held. */
static void shm_ud_send_complete(struct shm_qp *qp, const struct ferry_send_wr *wr,
				 enum ferry_wc_status status, uint64_t len)
{
	struct shm_cq *scq = to_scq(qp->qp.send_cq);
	struct shm_lwc c = { .qp = qp };

	if (status == FERRY_WC_SUCCESS && !qp->sq_sig_all &&
	    !(wr->send_flags & FERRY_SEND_SIGNALED))
		return;
	c.wc.wr_id = wr->wr_id;
	c.wc.status = status;
	c.wc.opcode = FERRY_WC_SEND;
	c.wc.byte_len = status == FERRY_WC_SUCCESS ? (uint32_t)len : 0;
	c.wc.qp_num = qp->qp.qp_num;
	ferry_lock(&scq->lock);
	shm_cq_add_local(scq, &c);
	ferry_unlock(&scq->lock);
}

int shm_ud_post_send(struct shm_qp *qp, struct ferry_send_wr *wr, struct ferry_send_wr **bad)
{
	enum ferry_qp_state state;
	uint64_t len = 0;
	int err = 0;

	ferry_lock(&qp->sq_lock);
	state = qp->qp.state;
	for (; wr; wr = wr->next) {
		if (state == FERRY_QPS_ERR) {
			shm_ud_send_complete(qp, wr, FERRY_WC_WR_FLUSH_ERR, 0);
			continue;
		}
		if (state != FERRY_QPS_RTS) {
			err = EINVAL;
			break;
		}
		err = shm_ud_send_check(qp, wr, &len);
		if (err)
			break;
		shm_ud_send_complete(qp, wr, shm_ud_send_one(qp, wr, len), len);
	}
	ferry_unlock(&qp->sq_lock);
	if (err) {
		*bad = wr;
		return ERR(err);
	}
	return 0;
}

/* --- receives --- */

static void shm_ud_done_push(struct shm_ud *ud, const struct ferry_wc *wc)
{
	/* Never full: every entry took a receive, and at most rq_size are posted. */
	ud->done[(ud->done_head + ud->done_count) % ud->rq_size] = *wc;
	ud->done_count++;
}

void shm_ud_flush_recvs(struct shm_qp *qp)
{
	struct shm_ud *ud = qp->ud;

	for (; ud->rq_cons < ud->rq_prod; ud->rq_cons++) {
		struct ferry_wc wc = { .wr_id = shm_ud_recv_at(ud, ud->rq_cons)->wr_id,
				       .status = FERRY_WC_WR_FLUSH_ERR,
				       .opcode = FERRY_WC_RECV,
				       .qp_num = qp->qp.qp_num };

		shm_ud_done_push(ud, &wc);
	}
}

void shm_ud_discard(struct shm_qp *qp, bool recvs)
{
	struct shm_ud *ud = qp->ud;
	int i;

	for (i = 0; i < SHM_UD_ABSORB_MAX * 4; i++)
		if (recv(ud->fd, ud->buf, 1, MSG_DONTWAIT | MSG_TRUNC) < 0)
			break;
	if (recvs) {
		ud->rq_cons = ud->rq_prod;
		ud->done_count = 0;
	}
}

/* Copy @len bytes to offset @off of receive @r's buffers (they hold it all). */
static void shm_ud_scatter(struct shm_ud_recv *r, uint64_t off, const void *src, size_t len)
{
	const uint8_t *p = src;
	uint32_t i;

	for (i = 0; i < r->num_sge && len; i++) {
		const struct ferry_sge *g = &shm_ud_recv_sge(r)[i];
		size_t n;

		if (off >= g->length) {
			off -= g->length;
			continue;
		}
		n = g->length - off < len ? g->length - off : len;
		memcpy((uint8_t *)(uintptr_t)g->addr + off, p, n);
		p += n;
		len -= n;
		off = 0;
	}
}

/* The GRH a datagram with SHM_UD_F_GRH gets: its SGID is the sender's
 * LID in our namespace (the only one its name could be bound in). */
static void shm_ud_grh_make(const struct shm_ud *ud, const struct shm_ud_hdr *h, uint16_t slid,
			    struct ferry_grh *grh)
{
	memset(grh, 0, sizeof(*grh));
	grh->version_tclass_flow = htonl(6u << 28 | (uint32_t)h->traffic_class << 20 |
					 (h->flow_label & 0xfffff));
	grh->paylen = htons((uint16_t)h->payload_len);
	grh->next_hdr = SHM_UD_GRH_NEXT_HDR;
	grh->hop_limit = h->hop_limit;
	grh->sgid = ud->gid;
	grh->sgid.raw[14] = (uint8_t)(slid >> 8);
	grh->sgid.raw[15] = (uint8_t)slid;
	grh->dgid = ud->gid;
}

/* The credentials the kernel attached (SO_PASSCRED), for the log. */
static pid_t shm_ud_sender_pid(struct msghdr *msg)
{
	struct cmsghdr *c;

	for (c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
		    c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
			struct ucred cr;

			memcpy(&cr, CMSG_DATA(c), sizeof(cr));
			return cr.pid;
		}
	}
	return 0;
}

/* Is the datagram for this QP as it is now?  Drops are silent, as a NIC's. */
static bool shm_ud_accepts(struct shm_qp *qp, const struct shm_ud_hdr *h)
{
	enum ferry_qp_state st = __atomic_load_n(&qp->qp.state, __ATOMIC_ACQUIRE);
	struct shm_ud *ud = qp->ud;

	if (st != FERRY_QPS_RTR && st != FERRY_QPS_RTS && st != FERRY_QPS_SQD &&
	    st != FERRY_QPS_SQE)
		return false;
	if (h->qkey != __atomic_load_n(&ud->qkey, __ATOMIC_ACQUIRE)) {
		ferry_debug("QP %u: UD datagram with Q_Key %#x dropped (ours: %#x)",
			    qp->qp.qp_num, h->qkey, ud->qkey);
		return false;
	}
	if ((h->flags & SHM_UD_F_GRH) && memcmp(h->dgid, ud->gid.raw, sizeof(h->dgid)) != 0)
		return false;	/* for another GID: not ours to take */
	return ud->rq_cons != ud->rq_prod;
}

/* Place the checked datagram (@h, payload in ud->buf) into the next receive. */
static void shm_ud_place(struct shm_qp *qp, const struct shm_ud_hdr *h, uint16_t slid,
			 uint32_t sqpn)
{
	struct shm_ud *ud = qp->ud;
	struct shm_ud_recv *r = shm_ud_recv_at(ud, ud->rq_cons++);
	struct ferry_wc wc = { .wr_id = r->wr_id, .opcode = FERRY_WC_RECV,
			       .qp_num = qp->qp.qp_num, .src_qp = sqpn, .slid = slid,
			       .sl = h->sl & 0xf };

	if (r->total_len < FERRY_GRH_BYTES + (uint64_t)h->payload_len) {
		wc.status = FERRY_WC_LOC_LEN_ERR;
		shm_ud_done_push(ud, &wc);
		return;
	}
	if (h->flags & SHM_UD_F_GRH) {
		struct ferry_grh grh;

		shm_ud_grh_make(ud, h, slid, &grh);
		shm_ud_scatter(r, 0, &grh, sizeof(grh));
		wc.wc_flags |= FERRY_WC_GRH;
	}
	shm_ud_scatter(r, FERRY_GRH_BYTES, ud->buf + sizeof(*h), h->payload_len);
	if (h->flags & SHM_UD_F_IMM) {
		wc.wc_flags |= FERRY_WC_WITH_IMM;
		wc.imm_data = h->imm_data;
	}
	wc.status = FERRY_WC_SUCCESS;
	wc.byte_len = FERRY_GRH_BYTES + h->payload_len;
	shm_ud_done_push(ud, &wc);
}

/* Take one datagram off the socket: 1, or 0 when none is there; rq_lock held. */
static int shm_ud_absorb_one(struct shm_qp *qp)
{
	struct shm_ud *ud = qp->ud;
	union { struct cmsghdr align; char buf[CMSG_SPACE(sizeof(struct ucred))]; } cm;
	struct iovec iov = { ud->buf, sizeof(struct shm_ud_hdr) + SHM_UD_MTU + 1 };
	struct sockaddr_un un;
	struct msghdr msg = { .msg_name = &un, .msg_namelen = sizeof(un), .msg_iov = &iov,
			      .msg_iovlen = 1, .msg_control = cm.buf,
			      .msg_controllen = sizeof(cm.buf) };
	struct shm_ud_hdr h;
	const char *why;
	uint32_t sqpn;
	uint16_t slid;
	ssize_t len;

	len = recvmsg(ud->fd, &msg, MSG_DONTWAIT);
	if (len < 0)
		return 0;
	memset(&h, 0, sizeof(h));
	memcpy(&h, ud->buf, (size_t)len < sizeof(h) ? (size_t)len : sizeof(h));
	why = shm_ud_hdr_check(&h, (size_t)len, msg.msg_flags & MSG_TRUNC);
	if (!why && !shm_ud_name_parse(&un, msg.msg_namelen, &slid, &sqpn))
		why = "from a socket that is no UD QP";
	if (why) {
		ferry_info("QP %u: dropped a datagram of %zd bytes from pid %d: %s",
			   qp->qp.qp_num, len, (int)shm_ud_sender_pid(&msg), why);
		return 1;
	}
	if (shm_ud_accepts(qp, &h))
		shm_ud_place(qp, &h, slid, sqpn);
	return 1;
}

/* Take what the socket holds (up to a bound); receives completed; rq_lock held. */
static uint32_t shm_ud_absorb(struct shm_qp *qp)
{
	uint32_t before = qp->ud->done_count;
	int i;

	for (i = 0; i < SHM_UD_ABSORB_MAX; i++)
		if (!shm_ud_absorb_one(qp))
			break;
	return qp->ud->done_count - before;
}

static int shm_ud_recv_put(struct shm_qp *qp, const struct ferry_recv_wr *wr)
{
	struct shm_ud *ud = qp->ud;
	struct shm_ud_recv *r;
	uint64_t total = 0;
	int i;

	if (ud->rq_prod - ud->rq_cons + ud->done_count >= qp->cap.max_recv_wr ||
	    ud->rq_prod - ud->rq_cons + ud->done_count >= ud->rq_size)
		return ENOMEM;
	if ((uint32_t)wr->num_sge > qp->cap.max_recv_sge ||
	    !shm_ud_sges_ok(qp, wr->sg_list, wr->num_sge, true))
		return EINVAL;
	r = shm_ud_recv_at(ud, ud->rq_prod);
	for (i = 0; i < wr->num_sge; i++) {
		shm_ud_recv_sge(r)[i] = wr->sg_list[i];
		total += wr->sg_list[i].length;
	}
	r->wr_id = wr->wr_id;
	r->num_sge = (uint32_t)wr->num_sge;
	r->total_len = total;
	ud->rq_prod++;
	return 0;
}

int shm_ud_post_recv(struct shm_qp *qp, struct ferry_recv_wr *wr, struct ferry_recv_wr **bad)
{
	enum ferry_qp_state state;
	uint32_t made;
	int err = 0;

	ferry_lock(&qp->rq_lock);
	state = __atomic_load_n(&qp->qp.state, __ATOMIC_ACQUIRE);
	/* What came before this receive belongs to the ones posted then. */
	made = state == FERRY_QPS_RESET ? 0 : shm_ud_absorb(qp);
	for (; wr && state != FERRY_QPS_RESET; wr = wr->next) {
		err = shm_ud_recv_put(qp, wr);
		if (err)
			break;
	}
	if (state == FERRY_QPS_RESET)
		err = EINVAL;
	if (state == FERRY_QPS_ERR) {
		shm_ud_flush_recvs(qp);
		made++;
	}
	ferry_unlock(&qp->rq_lock);
	if (made) {
		struct shm_cq *rcq = to_scq(qp->qp.recv_cq);

		/* Completions the channel's socket watch will not see. */
		ferry_lock(&rcq->lock);
		shm_cq_signal_local(rcq, state == FERRY_QPS_ERR);
		ferry_unlock(&rcq->lock);
	}
	if (err) {
		*bad = wr;
		return ERR(err);
	}
	return 0;
}

int shm_ud_poll_recv(struct shm_qp *qp, int n, struct ferry_wc *wc)
{
	struct shm_ud *ud = qp->ud;
	int got = 0;

	ferry_lock(&qp->rq_lock);
	if (__atomic_load_n(&qp->qp.state, __ATOMIC_ACQUIRE) == FERRY_QPS_ERR)
		shm_ud_flush_recvs(qp);
	else if ((uint32_t)n > ud->done_count)
		shm_ud_absorb(qp);
	while (got < n && ud->done_count) {
		wc[got++] = ud->done[ud->done_head];
		ud->done_head = (ud->done_head + 1) % ud->rq_size;
		ud->done_count--;
	}
	ferry_unlock(&qp->rq_lock);
	return got;
}
