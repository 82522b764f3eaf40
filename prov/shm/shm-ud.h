/*
 * shm-ud.h - unreliable-datagram QPs of the shm provider and their
 * address handles (shm_ud.c: objects and states; shm_ud_data.c: sends,
 * receives, polls; shm_ud_wire.c: names and the header's checks).
 *
 * Each UD QP is an AF_UNIX SOCK_DGRAM socket bound to the abstract name
 * "\0ferry/shm/ud/v1/<lid>/<qpn>" (decimal, no leading zeros): LID is the
 * process's (shm_port.c), QPN the QP's.  A send is one sendmsg from that
 * socket to the destination's name -- a header (struct shm_ud_hdr) and
 * the payload in one datagram -- and completes at once: UD is unreliable,
 * so a missing destination, a full queue or a receiver with no receive
 * posted lose the datagram, and nothing waits for the receiver.  The
 * receiver takes datagrams off its socket when the application polls the
 * CQ (or posts a receive), never in a thread of its own.
 *
 * What a receiver trusts: the kernel's word on the source -- the name the
 * sending socket is bound to, which gives src_qp and slid (and the GRH's
 * SGID), and its credentials (SCM_CREDENTIALS, for the log) -- and
 * nothing else of the datagram before it has checked it: the header's
 * magic, version, flags, its length against the datagram's, the payload
 * against the MTU.  No name can be bound twice at once, so no process
 * receives what is sent to a live QP of another, and a process that
 * finds its next QP's name taken (squatted) takes another QPN.  What
 * cannot be checked, as with UDP: a name nobody holds may be bound by
 * anyone, so a datagram from (LID L, QPN Q) may come from a process that
 * is not L's holder when L's holder has no QP Q.
 */
#ifndef FERRY_SHM_UD_H
#define FERRY_SHM_UD_H

#include <sys/un.h>

#include "shm-internal.h"

#define SHM_UD_MAGIC	0x46525544u	/* "FRUD" */
#define SHM_UD_VERSION	1u
#define SHM_UD_MTU	4096u		/* the port's active MTU (FERRY_MTU_4096) */
#define SHM_UD_LID_MAX	0xbfffu
#define SHM_UD_QPN_MAX	0xffffffu

/* The head of every UD datagram (the wire format: docs/wire.md, "UD"). */
struct shm_ud_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t flags;		/* SHM_UD_F_* */
	uint32_t qkey;		/* the Q_Key the sender used */
	uint32_t imm_data;	/* as posted (network order), with SHM_UD_F_IMM */
	uint32_t payload_len;	/* bytes after the header: the datagram's rest */
	uint32_t flow_label;	/* SHM_UD_F_GRH: the AH's GRH fields */
	uint8_t traffic_class;
	uint8_t hop_limit;
	uint8_t sl;
	uint8_t pad;
	uint8_t dgid[16];	/* SHM_UD_F_GRH: the GID the sender aimed at */
};
#define SHM_UD_F_IMM		(1u << 0)
#define SHM_UD_F_SOLICITED	(1u << 1)
#define SHM_UD_F_GRH		(1u << 2)
#define SHM_UD_F_ALL		(SHM_UD_F_IMM | SHM_UD_F_SOLICITED | SHM_UD_F_GRH)

/* An address handle: the attributes, checked. */
struct shm_ah {
	struct ferry_ah ah;
	struct ferry_ah_attr attr;
};

static inline struct shm_ah *to_sah(struct ferry_ah *ah)
{
	return container_of(ah, struct shm_ah, ah);
}

/* A posted receive: followed by its SGEs (max_recv_sge of them). */
struct shm_ud_recv {
	uint64_t wr_id;
	uint64_t total_len;
	uint32_t num_sge;
	uint32_t pad;
};

/* What a UD QP has besides struct shm_qp (qp->ud). */
struct shm_ud {
	int fd;				/* bound to the QP's name */
	uint16_t lid;			/* the LID in that name */
	uint32_t qkey;
	/* The recv CQ's channel watches fd (EPOLLONESHOT, armed by
	 * ferry_req_notify_cq: shm_ud_cq_arm). */
	bool in_epoll;
	/* Receive queue, under rq_lock: [rq_cons, rq_prod) posted. */
	uint8_t *rq;
	size_t rq_stride;
	uint32_t rq_size;		/* a power of two */
	uint64_t rq_prod, rq_cons;
	/* Receives completed (placed, or flushed) but not polled yet:
	 * at most rq_size, since each took a receive.  rq_lock. */
	struct ferry_wc *done;
	uint32_t done_head, done_count;
	uint8_t *buf;			/* one datagram, and a byte to see truncation */
	union ferry_gid gid;		/* ours: the GRH's DGID */
};

/* shm_ud_wire.c */
/* The abstract name of UD QP @qpn of LID @lid; its length. */
socklen_t shm_ud_name(uint16_t lid, uint32_t qpn, struct sockaddr_un *un);
/* Back to @qpn and @lid from a name a datagram came from; false: not one of ours. */
bool shm_ud_name_parse(const struct sockaddr_un *un, socklen_t len, uint16_t *lid_p,
		       uint32_t *qpn_p);
/*
 * Why a datagram of @len bytes (@truncated: longer than the buffer it was
 * read into), whose first bytes are @h (zero past @len), is no UD message
 * of ours; NULL when it is one: then h->payload_len == len - sizeof(*h),
 * at most the MTU.
 */
const char *shm_ud_hdr_check(const struct shm_ud_hdr *h, size_t len, bool truncated);

/* shm_ud.c */
struct ferry_ah *shm_create_ah(struct ferry_pd *pd, struct ferry_ah_attr *attr);
int shm_destroy_ah(struct ferry_ah *ah);
struct ferry_qp *shm_ud_create_qp(struct ferry_pd *pd, struct ferry_qp_init_attr *attr);
int shm_ud_modify_qp(struct shm_qp *qp, struct ferry_qp_attr *attr, int mask);
int shm_ud_query_qp(struct shm_qp *qp, struct ferry_qp_attr *attr,
		    struct ferry_qp_init_attr *init);
int shm_ud_destroy_qp(struct shm_qp *qp);
/* ferry_req_notify_cq on @scq: its UD QPs' sockets raise the channel once. */
void shm_ud_cq_arm(struct shm_cq *scq);
/* Does one of @scq's UD QPs have a datagram waiting?  (A channel's event.) */
bool shm_ud_cq_ready(struct shm_cq *scq);

/* shm_ud_data.c */
int shm_ud_post_send(struct shm_qp *qp, struct ferry_send_wr *wr, struct ferry_send_wr **bad);
int shm_ud_post_recv(struct shm_qp *qp, struct ferry_recv_wr *wr, struct ferry_recv_wr **bad);
/* Completions of @qp's receives, up to @n; the recv CQ's lock held. */
int shm_ud_poll_recv(struct shm_qp *qp, int n, struct ferry_wc *wc);
/* Drop what the socket holds, and (@recvs) every posted receive; rq_lock held. */
void shm_ud_discard(struct shm_qp *qp, bool recvs);
/* Complete every posted receive with FERRY_WC_WR_FLUSH_ERR; rq_lock held. */
void shm_ud_flush_recvs(struct shm_qp *qp);

#endif /* FERRY_SHM_UD_H */
