/*
 * verbs_exchange.c - ferry_qp_exchange for the verbs provider: both ends
 * send each other their QP's address (QPN, PSN, LID, GID, MTU) as one
 * message on an AF_UNIX SOCK_SEQPACKET socket, and each keeps the other's
 * as the peer address vector used when the QP moves to RTR.
 *
 * Both processes must be on one host (the socket is AF_UNIX); their QPs may
 * be on any RDMA devices that reach each other.  On RoCE the GID is the
 * port's RoCE v2 entry of the netdev's IPv4 address, the one rdma_cm would
 * pick for that address.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "verbs-internal.h"

#define VERBS_XCHG_MAGIC	0x46525631u	/* "FRV1" */
#define VERBS_XCHG_VERSION	1u

/*
 * The message.  ferry_qp_connect_sock starts both directions at PSN 0, so
 * that is what is sent; it is carried for the peer's information.
 */
struct verbs_xchg_msg {
	uint32_t magic;
	uint32_t version;
	uint32_t qpn;
	uint32_t psn;
	uint16_t lid;
	uint8_t mtu;		/* enum ibv_mtu: the sender port's active MTU */
	uint8_t link_layer;	/* IBV_LINK_LAYER_* */
	uint8_t gid[16];	/* zero on InfiniBand */
};

/* Is @gid an IPv4-mapped IPv6 address (::ffff:a.b.c.d)? */
static bool verbs_gid_is_ipv4(const union ibv_gid *gid)
{
	static const uint8_t prefix[12] = { [10] = 0xff, [11] = 0xff };

	return memcmp(gid->raw, prefix, sizeof(prefix)) == 0;
}

int verbs_local_gid(struct verbs_device *vdev, union ibv_gid *gid_p)
{
	struct ibv_port_attr port;
	struct ibv_gid_entry entry;
	int best = -1, i;

	if (verbs_ret(ibv_query_port(vdev->ibv, vdev->port, &port)))
		return -1;
	if (port.link_layer != IBV_LINK_LAYER_ETHERNET) {
		memset(gid_p, 0, sizeof(*gid_p));	/* LID routed: no GRH */
		return 0;
	}
	for (i = 0; i < port.gid_tbl_len; i++) {
		if (ibv_query_gid_ex(vdev->ibv, vdev->port, (uint32_t)i, &entry, 0))
			continue;	/* an empty slot */
		if (entry.gid_type != IBV_GID_TYPE_ROCE_V2)
			continue;
		if (verbs_gid_is_ipv4(&entry.gid)) {
			*gid_p = entry.gid;
			return i;
		}
		if (best < 0) {
			*gid_p = entry.gid;
			best = i;
		}
	}
	if (best >= 0)
		return best;
	if (verbs_ret(ibv_query_gid(vdev->ibv, vdev->port, 0, gid_p)))
		return -1;
	return 0;
}

/* Receive one message of exactly @len bytes within the exchange timeout. */
static int verbs_xchg_recv(int sock, struct verbs_xchg_msg *msg)
{
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	ssize_t n;
	int r;

	do {
		r = poll(&pfd, 1, VERBS_EXCHANGE_TIMEOUT_MS);
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -1;
	if (r == 0) {
		ferry_info("verbs: exchange: no message from the peer in %d ms",
			   VERBS_EXCHANGE_TIMEOUT_MS);
		return ERR(ETIMEDOUT);
	}
	do {
		n = recv(sock, msg, sizeof(*msg), MSG_DONTWAIT);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if (n == 0)
		return ERR(ECONNRESET);	/* the peer closed its end */
	if ((size_t)n != sizeof(*msg) || msg->magic != VERBS_XCHG_MAGIC ||
	    msg->version != VERBS_XCHG_VERSION) {
		ferry_info("verbs: exchange: the peer sent a %zd-byte message that is not "
			   "a verbs exchange (another provider?)", n);
		return ERR(EPROTO);
	}
	return 0;
}

int verbs_qp_exchange(struct ferry_qp *fqp, int sock, uint32_t *peer_qpn)
{
	struct verbs_qp *qp = to_vqp(fqp);
	struct verbs_device *vdev = to_vctx(fqp->context)->vdev;
	struct verbs_xchg_msg mine, theirs;
	struct ibv_port_attr port;
	union ibv_gid gid;
	int gid_index;
	ssize_t n;

	if (__atomic_load_n(&fqp->state, __ATOMIC_ACQUIRE) != FERRY_QPS_INIT)
		return ERR(EINVAL);
	if (vdev->iwarp) {
		/* iw_cm alone binds an iWARP QP to its TCP stream: no manual RTR. */
		ferry_info("verbs: QP %u is on iWARP device %s: connect it with the CM",
			   fqp->qp_num, vdev->dev.name);
		return ERR(EOPNOTSUPP);
	}
	if (verbs_ret(ibv_query_port(vdev->ibv, vdev->port, &port)))
		return -1;
	gid_index = verbs_local_gid(vdev, &gid);
	if (gid_index < 0)
		return -1;

	memset(&mine, 0, sizeof(mine));
	mine.magic = VERBS_XCHG_MAGIC;
	mine.version = VERBS_XCHG_VERSION;
	mine.qpn = fqp->qp_num;
	mine.psn = 0;
	mine.lid = port.lid;
	mine.mtu = (uint8_t)port.active_mtu;
	mine.link_layer = port.link_layer;
	memcpy(mine.gid, gid.raw, sizeof(mine.gid));
	do {
		n = send(sock, &mine, sizeof(mine), MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if (verbs_xchg_recv(sock, &theirs))
		return -1;
	if (theirs.mtu < IBV_MTU_256 || theirs.mtu > IBV_MTU_4096 ||
	    (theirs.qpn & ~0xffffffu)) {
		ferry_info("verbs: exchange: peer sent MTU %u, QPN %#x", theirs.mtu, theirs.qpn);
		return ERR(EPROTO);
	}

	pthread_mutex_lock(&qp->lock);
	qp->peer.known = true;
	qp->peer.qpn = theirs.qpn;
	qp->peer.psn = theirs.psn & 0xffffff;
	qp->peer.lid = theirs.lid;
	qp->peer.mtu = theirs.mtu;
	memcpy(qp->peer.gid.raw, theirs.gid, sizeof(theirs.gid));
	qp->peer.sgid_index = gid_index;
	pthread_mutex_unlock(&qp->lock);
	ferry_debug("verbs: QP %u: peer QP %u, LID %u, GID index %d", fqp->qp_num,
		    theirs.qpn, theirs.lid, gid_index);
	*peer_qpn = theirs.qpn;
	return 0;
}

int verbs_qp_exchange_begin(struct ferry_qp *qp, int sock)
{
	return ERR(ENOTSUP);
}

int verbs_qp_exchange_step(struct ferry_qp *qp, uint32_t *peer_qpn)
{
	return ERR(ENOTSUP);
}

void verbs_qp_exchange_abort(struct ferry_qp *qp)
{
}
