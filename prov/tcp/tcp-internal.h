/*
 * tcp-internal.h - the tcp transport: RC verbs over a connected kernel
 * TCP socket in iWARP's wire format (tcp_wire.h is the codec).
 *
 *   tcp.c           device, context, PD, MR (STag = lkey = rkey), the
 *                   provider table
 *   tcp_cq.c        CQs and completion channels, request-notify
 *   tcp_qp.c        QP objects, the state machine, posting, attach
 *   tcp_mpa.c       the MPA Request/Reply exchange on a blocking socket
 *   tcp_tx.c        send engine: SQ and responses -> FPDUs
 *   tcp_rx.c        receive engine: FPDUs -> placement, completions
 *   tcp_progress.c  the progress thread ("software NIC"): epoll over
 *                   the QPs' sockets and an eventfd
 *
 * Execution.  Every QP is driven under its own lock, by whichever thread
 * holds it: the poster (post_send writes what the socket takes at once)
 * or the context's progress thread, which owns the socket's readiness.
 * Incoming WRITEs, READ requests and atomics are applied by the progress
 * thread while the application computes.
 *
 * Completions.  A SEND or WRITE is complete when its peer has placed it,
 * not when TCP took it: after a signaled one the QP sends a zero-length
 * READ Request (a "fence", legal iWARP, siw sends the same as its RTR);
 * its Response, which the peer sends only after processing everything
 * before it, completes every WR before it.  So a bad STag or an RNR on
 * the peer's side reaches the WR that caused it (REM_ACCESS_ERR,
 * RNR_RETRY_EXC_ERR) through the peer's Terminate, as on InfiniBand.
 *
 * RNR.  iWARP has no RNR NAK.  A SEND that finds no posted receive stops
 * the receiver's stream (nothing behind it is read) until a receive is
 * posted, or until min_rnr_timer * (the sender's rnr_retry + 1) passed
 * (rnr_retry 7: forever), when it Terminates with "no buffer", which the
 * sender reports as RNR_RETRY_EXC_ERR.  The sender's rnr_retry comes in
 * ferry's MPA private data (struct tcp_attach).
 *
 * Locks, in order: qp->lock, then ctx->mr_lock or a CQ's lock (never both
 * at once), then a channel's lock.  The progress thread's own mutex is
 * a leaf.
 */
#ifndef FERRY_TCP_INTERNAL_H
#define FERRY_TCP_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core-export.h"
#include "monotime.h"
#include "tcp_wire.h"

#define TCP_MAX_QP_WR		4096u
#define TCP_MAX_SGE		16u
#define TCP_MAX_INLINE		1024u
#define TCP_MAX_CQE		(1 << 20)
#define TCP_MAX_MR_SIZE		(1ull << 40)
#define TCP_MAX_RD		16u	/* IRD and ORD we offer */
#define TCP_RDBUF_SIZE		65536	/* one read(2) from a socket */
/* A partial FPDU that makes no progress for this long ends the stream
 * (a peer stalling mid-FPDU would hold the QP forever).  ms; the
 * environment's FERRY_TCP_STALL_MS overrides it. */
#define TCP_STALL_MS_DEFAULT	10000u

/* STag layout: index into the context's MR table, and an 8-bit generation,
 * so that a stale STag of a freed slot finds nothing. */
#define TCP_STAG_INDEX(k)	((k) >> 8)
#define TCP_STAG(i, gen)	(((uint32_t)(i) << 8) | ((gen) & 0xffu))

/* Terminate codes ferry sends beyond the codec's (RFC 5040 s4.8, RFC 5041 s7). */
#define TCP_TERM_RDMAP_PROT		1	/* RDMAP etype: remote protection */
#define TCP_TERM_RDMAP_OP		2	/* RDMAP etype: remote operation */
#define TCP_TERM_INVALID_STAG		0x00
#define TCP_TERM_BOUNDS			0x01
#define TCP_TERM_ACCESS			0x02
#define TCP_TERM_UNEXPECTED_OP		0x06
#define TCP_TERM_CATASTROPHIC		0x07
#define TCP_TERM_DDP_TAGGED		1	/* DDP etype: tagged buffer */
#define TCP_TERM_DDP_UNTAGGED		2	/* DDP etype: untagged buffer */
#define TCP_TERM_NO_BUFFER		0x02	/* untagged: invalid MSN, no buffer */
#define TCP_TERM_TOO_LONG		0x05	/* untagged: message too long */

/*
 * ferry's MPA private data, the last 8 bytes of a frame's (after the
 * ULP's: rdma_cm on iWARP hands the MPA private data to the ULP as it is,
 * so a siw peer's ULP finds its own layout first and ours as trailing
 * bytes, which rdma_cm ULPs ignore): version, capabilities, rnr_retry,
 * 0, then the magic.
 */
#define TCP_PD_MAGIC		0x66727931u	/* "fry1" */
#define TCP_PD_LEN		8
#define TCP_CAP_RFC7306		0x01	/* takes Immediate Data and atomics */

/* What a QP runs with once the MPA exchange is over. */
struct tcp_attach {
	struct tcpw_mpa_params mpa;
	bool initiator;			/* we sent the Request */
	bool rfc7306;			/* the peer takes opcodes 8-11 */
	bool fence_reads;		/* zero-length READs may confirm WRs (a
					 * ferry peer: see tcp_tx_wqe_written) */
	uint8_t peer_rnr_retry;		/* 0..7 (7 forever); 7 when unknown */
};

/* --- objects --- */

struct tcp_progress;

struct tcp_context {
	struct ferry_context ctx;
	pthread_mutex_t mr_lock;	/* the MR table, and every copy into or
					 * out of registered memory */
	struct tcp_mr **mrs;		/* by STag index; [0] never used */
	uint32_t nmrs, mrs_cap;
	uint8_t *gens;			/* last generation of each slot */
	pthread_mutex_t prog_lock;	/* starting the progress thread */
	struct tcp_progress *prog;
};

struct tcp_pd {
	struct ferry_pd pd;
	int nmrs, nqps;			/* under ctx->mr_lock */
};

struct tcp_mr {
	struct ferry_mr mr;
	int access;
};

struct tcp_channel {
	struct ferry_comp_channel ch;
	int wfd;			/* write end of the pipe whose read end is ch.fd */
	pthread_mutex_t lock;		/* cqs; taken before a CQ's lock */
	struct tcp_cq *cqs;		/* the live CQs it serves */
};

enum tcp_arm {
	TCP_ARM_NONE,
	TCP_ARM_ALL,
	TCP_ARM_SOLICITED,
};

struct tcp_cq {
	struct ferry_cq cq;
	pthread_mutex_t lock;
	struct ferry_wc *ring;
	uint32_t size, head, count;	/* count entries from head */
	bool overrun;			/* a completion found the ring full */
	enum tcp_arm arm;
	unsigned int got, acked;	/* channel events read, acknowledged */
	uint64_t id;			/* unique in the process: a record's check */
	struct tcp_cq *ch_next;		/* in its channel's cqs */
	int nqps;
};

static inline struct tcp_context *to_tctx(struct ferry_context *c)
{
	return container_of(c, struct tcp_context, ctx);
}

static inline struct tcp_pd *to_tpd(struct ferry_pd *p)
{
	return container_of(p, struct tcp_pd, pd);
}

static inline struct tcp_cq *to_tcq(struct ferry_cq *c)
{
	return container_of(c, struct tcp_cq, cq);
}

/* One posted send WR, copied. */
enum tcp_wqe_state {
	TCP_WQE_POSTED,			/* not yet (fully) transmitted */
	TCP_WQE_SENT,			/* on the wire, waiting for a response or fence */
	TCP_WQE_DONE,			/* status final */
};

struct tcp_swqe {
	uint64_t wr_id;
	enum ferry_wr_opcode opcode;
	unsigned int flags;
	uint32_t imm;
	uint64_t remote_addr;
	uint32_t rkey;
	uint64_t compare_add, swap;
	uint32_t len;			/* payload bytes */
	int num_sge;
	struct ferry_sge sge[TCP_MAX_SGE];
	uint8_t *inline_data;		/* INLINE: the copy (malloc'd), else NULL */
	enum tcp_wqe_state state;
	enum ferry_wc_status status;
};

struct tcp_rwqe {
	uint64_t wr_id;
	int num_sge;
	uint32_t len;
	struct ferry_sge sge[TCP_MAX_SGE];
};

/* An outbound READ Request or Atomic Request waiting for its response. */
enum tcp_orq_kind {
	TCP_ORQ_READ,
	TCP_ORQ_ATOMIC,
	TCP_ORQ_FENCE,			/* zero-length READ: confirms what went before */
	TCP_ORQ_RTR,			/* READ RTR: its response is dropped */
};

struct tcp_orq {
	enum tcp_orq_kind kind;
	uint32_t wqe;			/* SQ index of the READ/atomic */
	uint32_t sq_pos;		/* every WQE before it was on the wire */
	uint32_t sink_stag, size;	/* READ */
	uint32_t req_id;		/* atomic */
	uint32_t got;			/* READ response bytes so far */
};

/* An inbound READ Request or atomic being answered. */
struct tcp_irq {
	bool atomic;
	struct tcpw_read_req rreq;
	struct tcpw_atomic_resp aresp;
	uint32_t sent;			/* READ response bytes cut */
	bool started;
};

/* Per-QP counters a test reads. */
struct tcp_qp_stats {
	uint64_t fpdus_sent, fpdus_recv;
	uint32_t max_fpdu_sent;		/* longest FPDU written, bytes */
	uint32_t terms_sent, terms_recv;
	struct tcpw_term_code last_term_recv, last_term_sent;
};

struct tcp_qp {
	struct ferry_qp qp;
	pthread_mutex_t lock;
	struct ferry_qp_cap cap;
	int sq_sig_all;
	unsigned int access;
	uint8_t min_rnr_timer, rnr_retry, max_rd_atomic, max_dest_rd_atomic;
	uint8_t timeout, retry_cnt, port_num;
	uint16_t pkey_index;
	enum ferry_mtu path_mtu;
	uint32_t dest_qp_num, rq_psn, sq_psn;
	struct ferry_ah_attr ah_attr;

	/* send queue: [sq_done, sq_tx) on the wire, [sq_tx, sq_head) waiting */
	struct tcp_swqe *sq;
	uint32_t sq_size, sq_head, sq_tx, sq_done;
	/* receive queue: [rq_cons, rq_prod) */
	struct tcp_rwqe *rq;
	uint32_t rq_size, rq_prod, rq_cons;

	/* the connection (fd -1: none) */
	int fd;
	/* ferry_tcp_qp_on_down: told once when the QP goes to ERR */
	void (*down_cb)(void *arg);
	void *down_arg;
	struct tcp_attach conn;
	size_t mulpdu;
	bool in_epoll_list;		/* the progress thread knows it */
	bool in_epoll, want_out;	/* in the epoll set; EPOLLOUT wanted */
	bool rx_eof;			/* nothing more comes from the socket */
	bool tx_shut;			/* Terminate sent (or fatal): we write no more */
	bool hold_tx;			/* Responder: until the first FPDU arrives */
	bool rtr_pending;		/* Initiator: the RTR goes first */

	/* send engine */
	uint8_t *txbuf;			/* one FPDU being written */
	size_t tx_len, tx_off;
	uint32_t tx_wqe;		/* the WQE whose last FPDU txbuf holds... */
	bool tx_wqe_pending;		/* ...if set */
	bool tx_after_term;		/* txbuf holds the Terminate: FIN after it */
	bool imm_after;			/* WRITE_WITH_IMM: its Immediate Data is due */
	struct tcpw_segmenter seg;	/* the SQ message being cut */
	bool seg_active;
	bool seg_tagged;		/* it is a WRITE: no READ Response may cut in */
	uint32_t msn[4];		/* last MSN sent per queue */
	bool fence_wanted;
	uint32_t resp_run;		/* Response FPDUs sent in a row */
	struct tcp_orq orq[TCP_MAX_RD];
	uint32_t orq_head, orq_tail;	/* [tail, head) outstanding */
	uint32_t next_req_id;
	struct tcp_irq irq[TCP_MAX_RD];
	uint32_t irq_head, irq_tail;
	bool term_pending;
	struct tcpw_term term;

	/* receive engine */
	struct tcpw_fpdu_parser parser;
	uint8_t *rxbuf;			/* the parser's */
	uint8_t *rdbuf;			/* what read(2) gave, not yet fed */
	size_t rd_len, rd_off;
	struct tcpw_fpdu held;		/* an FPDU waiting for a receive (RNR) */
	bool rx_held;
	struct tcpw_reasm reasm_tagged, reasm_q[4];
	bool recv_active;		/* a SEND is being placed into rq[rq_cons] */
	bool imm_pending;		/* an Immediate Data announced the next SEND's */
	uint32_t imm_for_send;
	uint64_t deadline_ns;		/* RNR or stall timer; 0 none (atomic) */
	uint64_t partial_since_ns;

	struct tcp_qp_stats stats;
	bool dying;			/* being destroyed or reset: hands off */
	bool kicked;			/* look again (atomic) */
	uint32_t events;		/* the epoll mask it is registered with */
	struct tcp_qp *prog_next;	/* in the progress thread's list */
};

static inline struct tcp_qp *to_tqp(struct ferry_qp *q)
{
	return container_of(q, struct tcp_qp, qp);
}

/* --- tcp.c --- */

extern const struct ferry_provider ferry_tcp_provider;
/*
 * Under ctx->mr_lock: the MR @stag names in @pd if it grants @access and
 * covers [addr, addr + len); else NULL and *why_p the Terminate code
 * (TCP_TERM_INVALID_STAG, _BOUNDS, _ACCESS).
 */
struct tcp_mr *tcp_mr_check(struct tcp_context *ctx, struct ferry_pd *pd, uint32_t stag,
			    uint64_t addr, uint64_t len, int access, uint8_t *why_p);

/* --- tcp_cq.c --- */

struct ferry_comp_channel *tcp_create_comp_channel(struct ferry_context *ctx);
int tcp_destroy_comp_channel(struct ferry_comp_channel *ch);
int tcp_get_cq_event(struct ferry_comp_channel *ch, struct ferry_cq **cq_p);
int tcp_poll_cq_event(struct ferry_comp_channel *ch, struct ferry_cq **cq_p);
struct ferry_cq *tcp_create_cq(struct ferry_context *ctx, int cqe, struct ferry_comp_channel *ch);
int tcp_destroy_cq(struct ferry_cq *cq);
int tcp_req_notify_cq(struct ferry_cq *cq, int solicited_only);
void tcp_ack_cq_events(struct ferry_cq *cq, unsigned int n);
int tcp_poll_cq(struct ferry_cq *cq, int n, struct ferry_wc *wc);
/* Add @wc to @cq (QP lock may be held); @solicited: raises a SOLICITED arm. */
void tcp_cq_push(struct tcp_cq *cq, const struct ferry_wc *wc, bool solicited);

/* --- tcp_qp.c --- */

struct ferry_qp *tcp_create_qp(struct ferry_pd *pd, struct ferry_qp_init_attr *attr);
int tcp_modify_qp(struct ferry_qp *qp, struct ferry_qp_attr *attr, int mask);
int tcp_query_qp(struct ferry_qp *qp, struct ferry_qp_attr *attr,
		 struct ferry_qp_init_attr *init);
int tcp_destroy_qp(struct ferry_qp *qp);
/* Did the MPA exchange find a peer that takes Immediate Data (RFC 7306)? */
bool tcp_qp_write_imm_ok(struct ferry_qp *qp);
int tcp_post_send(struct ferry_qp *qp, struct ferry_send_wr *wr, struct ferry_send_wr **bad);
int tcp_post_recv(struct ferry_qp *qp, struct ferry_recv_wr *wr, struct ferry_recv_wr **bad);
/*
 * ferry_tcp_qp_attach - join @qp (in INIT) to @fd, a connected TCP socket
 * whose MPA exchange is over (tcp_mpa.c), with what it negotiated.  The
 * QP owns @fd from then on, also on failure.  0 or -1 with errno.
 */
int ferry_tcp_qp_attach(struct ferry_qp *qp, int fd, const struct tcp_attach *conn);
/* qp->lock held: to ERR, flushing everything posted; @why for the log. */
void tcp_qp_set_error(struct tcp_qp *qp, const char *why);
/* qp->lock held: complete, in order, every WQE from sq_done that is DONE. */
void tcp_sq_retire(struct tcp_qp *qp);
void tcp_qp_stats(struct ferry_qp *qp, struct tcp_qp_stats *stats_p);

/* --- tcp_mpa.c: the exchange on a blocking socket, for tests and the CM --- */

/* Initiator: send the Request (@local, ferry's private data). */
int ferry_tcp_mpa_request(int fd, const struct tcpw_mpa_local *local, uint8_t rnr_retry);
/* Responder: read the Request, answer it; *conn_p on success. */
int ferry_tcp_mpa_respond(int fd, const struct tcpw_mpa_local *local, uint8_t rnr_retry,
			  struct tcp_attach *conn_p);
/* Initiator: read and check the Reply; *conn_p on success. */
int ferry_tcp_mpa_finish(int fd, const struct tcpw_mpa_local *local, uint8_t rnr_retry,
			 struct tcp_attach *conn_p);
/* ferry's 8 bytes of private data, for the end of a frame's. */
void tcp_mpa_pd_put(uint8_t out[TCP_PD_LEN], uint8_t rnr_retry);
/* A frame's private data @pd: its ULP's length (less ferry's 8 bytes, when
 * there), with what they say in @conn (nothing of ferry's: a stranger). */
size_t tcp_mpa_pd_peer(const uint8_t *pd, size_t len, struct tcp_attach *conn);
/* ferry's defaults: CRC, IRD/ORD TCP_MAX_RD, peer-to-peer with WRITE and READ RTR. */
void ferry_tcp_mpa_local_default(struct tcpw_mpa_local *local_p);

/* --- tcp_tx.c --- */

/* qp->lock held: write what the socket takes; arms EPOLLOUT if more waits. */
void tcp_tx_progress(struct tcp_qp *qp);
/* qp->lock held: send a Terminate for @code next, then nothing more. */
void tcp_tx_terminate(struct tcp_qp *qp, const struct tcpw_term_code *code,
		      const uint8_t *ulpdu, size_t ulpdu_len);
/* Gather @len payload bytes at @off of @w into @dst (mr_lock held). */
int tcp_wqe_gather(struct tcp_qp *qp, const struct tcp_swqe *w, uint32_t off, uint32_t len,
		   uint8_t *dst);

/* --- tcp_rx.c --- */

/* qp->lock held: read and process what arrived; false when the QP is done
 * with its socket (EOF after ERR). */
void tcp_rx_progress(struct tcp_qp *qp);
/* qp->lock held: timers (RNR, stall) that are due. */
void tcp_rx_timers(struct tcp_qp *qp, uint64_t now);
/* Scatter @len bytes into local SGEs at @off (LOCAL_WRITE checked). */
int tcp_sge_scatter(struct tcp_qp *qp, const struct ferry_sge *sge, int num_sge,
		    uint32_t off, const uint8_t *src, uint32_t len);

/* --- tcp_progress.c --- */

int tcp_progress_add(struct tcp_qp *qp);
void tcp_progress_remove(struct tcp_qp *qp);
/* Ask for EPOLLOUT (or not) on @qp's socket. */
void tcp_progress_want_out(struct tcp_qp *qp, bool on);
/* Wake the thread: it looks at @qp's timers and held FPDU again. */
void tcp_progress_kick(struct tcp_qp *qp);
void tcp_progress_stop(struct tcp_context *ctx);
/* For tests: turns the thread has made; stop it between turns, or not. */
uint64_t tcp_progress_turns(struct ferry_context *ctx);
void tcp_progress_pause(struct ferry_context *ctx, bool pause);
unsigned int tcp_stall_ms(void);

#endif /* FERRY_TCP_INTERNAL_H */
