/*
 * sock-internal.h - ferry's stream sockets: the state of one socket and
 * what the files of sock/ share.
 *
 * A connection is one RC QP set up through the CM (port space TCP), with
 * rsocket's protocol version 1 on top (docs/wire.md, section 1):
 * every message is an RDMA WRITE WITH IMM, receives are posted without SGEs
 * only to take the immediate, and the receive ring is published to the peer
 * half by half through the target SGL the peer writes into.
 *
 * Copies.  On verbs a write is staged in the send ring, which the device
 * reads.  On shm, where the provider executes a WR inside post_send, a
 * write goes straight from the caller's buffer into the peer's ring
 * (ferry_post_send_direct): one copy on each side, as with TCP, instead
 * of two on the sender's.  Only a write the provider would have to queue
 * (an earlier one waits for a receive) is staged.  Large ones store with
 * whichever kind of store the two CPUs' placement favours (sock_copy.c).
 *
 * The fd.  A ferry socket is named by an epoll fd it creates in
 * ferry_socket().  Into it go, as they come to exist, the socket's CM event
 * channel fd (connect, listen) and its completion channel fd.  The epoll fd
 * polls readable exactly when one of those has something, so that blocking
 * is poll(2) on the socket's own number, ferry_sock_poll hands it to poll(2)
 * with the application's other fds, and it exists before the transport (and
 * so the device and completion channel) is known, which only address
 * resolution decides.  Its number is a real kernel fd: lowest-free rule, no
 * collisions.  Once connected on shm, a socket from accept or from a
 * blocking connect has nothing left in the set but its completion channel,
 * and becomes that channel (sock_fd_merge): the CQ's wake socket moves onto
 * the socket's number and the set goes.
 *
 * File descriptors of one shm connection: 1 at each end.  A connected
 * socket from accept or from a blocking connect, whose peer has no iomap,
 * is its connection (sock_fd_on_conn): its number is the AF_UNIX
 * SOCK_SEQPACKET socket to the peer, which is also its completion channel
 * (the peer wakes it with a 1-byte record there instead of a datagram to
 * the CQ's wake socket, which goes), the provider's monitor watches it
 * for the peer's hang-up under that number, and the CM keeps no copy
 * (ferry_cm_let_go; stream sockets' ids are quiet).  A hang-up shows on
 * the number itself; a QP error made here shuts the socket down, which
 * wakes its pollers and tells the peer.  The one completion made here
 * that cannot raise the number is a send the monitor thread retries after
 * an RNR wait: every arm settles such a send first (shm_sq_settle_rnr),
 * and the receive the peer posts for one still waiting wakes the socket.
 * Where the peer has an iomap (its later BLOCK announcements would be
 * taken for wake-ups), the socket's number is its CQ's wake socket
 * instead (sock_fd_merge), and the connection one more descriptor (2).
 * A non-blocking connect keeps its epoll set as well (3): the program may
 * have registered its number while it connected.  A client's own CM
 * event channel goes once it is connected (its id moves to the process's
 * sink channel, sock_conn_park); accepted sockets share the listener's.
 * The ring's ferry_alloc memfd is closed once the connection is up
 * (ferry_block_drop_fd: the peer has mapped it).  The MR table, the
 * notify word and the QP region are pieces of the process's arena, and
 * the peer's monitor is kicked by name, as CQs with wake sockets are
 * woken (prov/shm).  So a process's 20,000 descriptors hold some 19,980
 * idle connections, and two processes 10,000 connections between them.
 *
 * Locks (always taken in this order, each one optional):
 *   slock  - one sender at a time: the send ring, the current target SGE,
 *            the copy tuning;
 *   rlock  - one receiver at a time: consuming the receive ring;
 *   cqlock - polling the CQ and reposting receives (progress);
 *   plock  - posting to the send queue: sequence numbers, SQ slots, the
 *            publication of receive-ring halves.
 *   cm_lock guards the connection state machine and is never held with
 *   the others while waiting.
 * Counters read across those locks are atomics.  The fast path takes
 * slock/rlock, cqlock and plock briefly, and makes no system call.
 */
#ifndef FERRY_SOCK_INTERNAL_H
#define FERRY_SOCK_INTERNAL_H

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <ferry/cm.h>
#include <ferry/socket.h>
#include <ferry/verbs.h>

#include "cm-export.h"
#include "core-export.h"
#include "sock-export.h"
#include "monotime.h"

/* --- protocol (rsocket v1) --- */

#define RS_VERSION		1
#define RS_CONN_FLAG_NET	(1u << 0)	/* sender is big-endian */
#define RS_CONN_FLAG_IOMAP	(1u << 1)	/* a target iomap follows the SGL */
#define RS_PRIVATE_DATA_LEN	40
#define RS_SGL_SIZE		2		/* entries of a target SGL */
#define RS_MAX_TRANSFER		65536		/* one write at most */
/*
 * Control messages (credit and SGL updates, control) take no receive
 * credit: rsocket counts only data and IOMAP_SGL writes against the credits
 * (its sseq_no), and grants back only the data messages its application
 * consumed.  Data leaves RS_QP_CTRL_SIZE SQ slots and credits to them.
 */
#define RS_QP_CTRL_SIZE		4

/* Message types: the top 3 bits of the immediate. */
#define RS_OP_DATA		(0u << 29)
#define RS_OP_RSVD_DATA_MORE	(1u << 29)
#define RS_OP_WRITE		(2u << 29)	/* local only (iowrite), never sent */
#define RS_OP_SGL		(4u << 29)	/* credit / target SGL update */
#define RS_OP_IOMAP_SGL		(6u << 29)
#define RS_OP_CTRL		(7u << 29)
#define RS_OP_MASK		(7u << 29)
#define RS_VALUE_MASK		((1u << 29) - 1)

#define RS_CTRL_DISCONNECT	0
#define RS_CTRL_KEEPALIVE	1
#define RS_CTRL_SHUTDOWN	2

/* rsocket's struct rs_sge, in the writer's byte order when RDMA-written. */
struct rs_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};

/*
 * One entry of a target iomap (rsocket's struct rs_iomap): the peer's
 * buffer at @offset of its iomap space.  The target iomap follows the
 * target SGL in the memory the connect data names, one entry per slot the
 * receiver offered; the sender writes an entry, then sends an IOMAP_SGL
 * immediate carrying its index.  A zero-length entry unmaps the slot.
 */
struct rs_iomap {
	uint64_t offset;
	struct rs_sge sge;
};

/* A buffer this side mapped with ferry_sock_iomap (slock). */
struct sock_iomap {
	uint8_t *buf;
	size_t len;
	uint64_t offset;
	struct ferry_mr *mr;
	int index;			/* slot of the peer's target iomap; -1: local only */
	struct sock_iomap *next;
};

/* --- defaults (rsocket's) and limits --- */

#define SOCK_DEF_BUF_SIZE	(128u * 1024)
#define SOCK_MIN_BUF_SIZE	(8u * 1024)
#define SOCK_MAX_BUF_SIZE	(256u * 1024 * 1024)
#define SOCK_DEF_QP_SIZE	384
#define SOCK_MIN_QP_SIZE	16
#define SOCK_MAX_QP_SIZE	8192
/*
 * Credits (and receives) a connection starts with; each grant that finds
 * half of them used doubles them, up to rq_size.  An idle connection so
 * posts few receives, and the provider's receive queue stays small (on
 * shm, 24 bytes a receive in a ring that grows by powers of two: these
 * and the RS_QP_CTRL_SIZE receives for control messages make 16, 384
 * bytes; 64 of them cost each idle end 2.2 KiB more, all told, the RQ
 * entries of its region included); a busy one reaches rq_size within five
 * grants.
 */
#define SOCK_FIRST_CREDITS	(16 - RS_QP_CTRL_SIZE)
#define SOCK_DEF_INLINE		64
#define SOCK_DEF_POLL_US	10
#define SOCK_CM_TIMEOUT_MS	5000
/*
 * Iomap entries offered at most: up to 128 the 8-bit target_iomap_size of
 * the connect data holds the value itself, whatever scaling a peer applies
 * to larger ones.
 */
#define SOCK_MAX_IOMAP		128
#define SOCK_SMALL_MAX		256	/* inline payload staged on the stack */
/* A direct write shorter than what was asked for must carry this much. */
#define SOCK_DIRECT_MIN		4096
/* Writes from this size on may store past our caches (sock_copy.c). */
#define SOCK_COPY_LARGE		(16u << 10)
/*
 * The send backlog (sock_backlog.c) is kept in pieces of this size, each
 * mapped when the first byte goes in and unmapped once the peer has it.
 */
#define SOCK_BACKLOG_CHUNK	(256u << 10)
/*
 * A blocking writer queues in the backlog only once the peer's ring has
 * stayed full this long without an update from the peer (a reader that is
 * reading sends one within microseconds): against a reader that keeps up,
 * waiting keeps each byte to one copy on this side.
 */
#define SOCK_STALL_NS		(10ull * 1000000)
/* The backlog's bound when tcp_wmem cannot be read: Linux's default. */
#define SOCK_BACKLOG_DEF_MAX	(4u << 20)

/* --- the socket --- */

/* How large direct writes store, and what each kind achieved (sock_copy.c). */
struct sock_copy {
	uint64_t bytes, ns;		/* the window being measured */
	uint64_t last_ns;		/* when the last large send ended */
	uint64_t rate[2];		/* bytes/us of plain [0], non-temporal [1]; 0: never */
	uint32_t windows;		/* windows measured */
	uint8_t nocache;		/* this window's kind */
};

enum sock_state {
	SOCK_INIT,		/* fresh or bound */
	SOCK_LISTENING,
	SOCK_CONNECTING,	/* resolving, or waiting for ESTABLISHED */
	SOCK_ACCEPTING,		/* accepted id, waiting for ESTABLISHED */
	SOCK_CONNECTED,
	SOCK_FAILED,		/* connect failed (so_error) */
};

/* Why a connection ended: bits of ferry_sock.closed. */
#define SOCK_PEER_SHUT_WR	(1u << 0)	/* SHUTDOWN or DISCONNECT: reads see EOF */
#define SOCK_PEER_GONE		(1u << 1)	/* DISCONNECT: writes get EPIPE */
#define SOCK_RESET		(1u << 2)	/* QP error: ECONNRESET */
#define SOCK_SHUT_RD		(1u << 3)	/* local shutdown(SHUT_RD) */
#define SOCK_SHUT_WR		(1u << 4)	/* local shutdown(SHUT_WR): SHUTDOWN sent */
#define SOCK_DISC_SENT		(1u << 5)	/* DISCONNECT sent */
#define SOCK_TIMEDOUT		(1u << 6)	/* keepalive gave up: ETIMEDOUT */

/* An address of the socket's families: 28 bytes, not sockaddr_storage's 128. */
union sock_addr {
	struct sockaddr sa;
	struct sockaddr_in in;
	struct sockaddr_in6 in6;
};

/* A CM event channel shared by a listener and the ids it accepted. */
struct sock_chan {
	struct ferry_event_channel *ch;
	atomic_int refs;
};

struct ferry_sock {
	int fd;				/* the epoll fd that names it, or its
					 * completion channel (fd_is_cch) */
	bool fd_is_cch;			/* sock_fd_merge: no epoll set */
	int domain;
	atomic_int nonblock;		/* O_NONBLOCK */

	pthread_mutex_t cm_lock;
	enum sock_state state;
	int so_error;			/* pending error (SO_ERROR) */
	union sock_addr bound;		/* bind() address, family 0 if none */
	struct sock_chan *chan;		/* CM channel: own, or the listener's */
	bool chan_in_epoll;
	bool chan_park;			/* ESTABLISHED: move the id to the sink */
	struct ferry_cm_id *id;

	/* Listener: accepted sockets waiting for ESTABLISHED, and ready. */
	struct ferry_sock *pending, *ready, *ready_tail;
	/* Listener: buffers made ahead for the next request (on req_ctx, the
	 * device of the last one), while accept had nothing to return. */
	struct ferry_sock *spare;
	pid_t spare_pid;		/* the process that made it (fork) */
	struct ferry_context *req_ctx;
	struct ferry_sock *next;	/* in a listener's list */
	int backlog, nready;
	/* Listener: connections ever queued ready, for EPOLLET (sock_epoll.c). */
	unsigned int arrivals;
	/* Listener: its port is held by a kernel TCP listener beside it (the
	 * shim's), so a client it refuses goes over TCP; it refuses rather
	 * than take the descriptors the program needs (sock_fds_short). */
	bool tcp_beside;
	/* A refused request's socket or id, freed once its event is acked. */
	struct ferry_sock *reap;
	struct ferry_cm_id *reap_id;

	/* Options, fixed when the connection is set up. */
	uint32_t sbuf_size, rbuf_size;	/* SO_SNDBUF / SO_RCVBUF */
	bool sbuf_fixed;		/* the program set SO_SNDBUF: no backlog */
	uint32_t sq_size, rq_size, inline_size;
	int keepalive, keepidle, keepintvl, keepcnt;
	int linger_on, linger_s;
	int nodelay, reuseaddr;
	unsigned int connect_ms;	/* sock_connect_bound; 0: the CM's default */

	/* Verbs resources. */
	struct ferry_context *ctx;
	struct ferry_pd *pd;		/* the socket's own (see sock_conn_resources) */
	struct ferry_comp_channel *cch;
	struct ferry_cq *cq;		/* send and receive completions */
	struct ferry_qp *qp;
	bool verbs_transport;		/* send completions are the peer's acks */
	bool shm_transport;		/* WRs run at post; the channel can be renumbered */
	bool direct;			/* writes try ferry_post_send_direct */
	/* rsocket's iWARP mode (sock_msg.c): receives carry a 4-byte slot
	 * (set with the buffers), and messages go as SENDs (when connected). */
	bool recv_slots, msg_send;
	uint32_t *msg_slot;		/* sock_msg_slot_count words after sbuf */
	atomic_uint msg_slot_next;	/* the next receive's slot (mod the count) */

	/* Receive ring and the target SGL the peer writes, one ferry_alloc block. */
	uint8_t *rbuf;
	struct rs_sge *target_sgl;	/* RS_SGL_SIZE entries after the ring */
	struct ferry_mr *rmr;
	/* Send ring: local memory the writes come from. */
	uint8_t *sbuf;
	struct ferry_mr *smr;

	/* Direct placement (sock_iomap.c). */
	uint32_t target_iomap_size;	/* slots offered to the peer (FERRY_IOMAPSIZE) */
	struct rs_iomap *target_iomap;	/* those slots, after target_sgl; peer-written */
	struct rs_iomap *peer_iomap;	/* checked copies taken on IOMAP_SGL (cqlock) */
	struct rs_sge remote_iomap;	/* the peer's slots (addr, key, entries) */
	struct sock_iomap *iomaps;	/* our mapped buffers (slock) */

	/* Peer. */
	struct rs_sge remote_sgl;	/* the peer's target SGL (addr, key, entries) */
	/* The buffer the peer's connect data gave: entry 0 of target_sgl for
	 * the first lap, held here so that a connection that sends nothing
	 * never writes the page of shared memory target_sgl lives in. */
	struct rs_sge first_target;
	bool peer_swap;			/* peer's byte order differs */

	/* Send side (slock). */
	pthread_mutex_t slock;
	uint32_t sbuf_head;		/* offset of the next byte into sbuf */
	struct sock_copy copy;
	int target_idx;			/* current entry of target_sgl; -1: first_target */
	/* Bytes written while the peer's ring was full (sock_backlog.c). */
	struct sock_backlog_chunk *bl_head, *bl_tail;
	_Atomic size_t bl_bytes;	/* queued: read without slock as a hint */
	size_t bl_limit;		/* most it may hold; 0: no backlog */
	atomic_int bl_ctrl;		/* SHUTDOWN/DISCONNECT to send once empty; -1 */
	_Atomic uint64_t full_since_ns;	/* a blocking send found the ring full, and
					 * no update came since; 0: none */

	/* Posting (plock). */
	pthread_mutex_t plock;
	uint16_t sseq_no;		/* messages sent */
	_Atomic uint16_t sseq_comp;	/* credit limit granted by the peer */
	atomic_int sqe_avail;		/* free SQ slots */
	atomic_uint sbuf_free;		/* bytes of sbuf not in flight */
	uint16_t rseq_comp;		/* credit limit we granted */
	uint32_t credit_window;		/* credits a grant gives: up to rq_size */
	uint64_t r_published;		/* ring bytes published (absolute) */
	int remote_idx;			/* next entry of the peer's SGL to write */
	uint32_t unsignaled;		/* sends posted since the last signaled one */
	uint32_t unsignaled_bytes;

	/* Receive side (rlock); counters written under cqlock. */
	pthread_mutex_t rlock;
	pthread_mutex_t cqlock;
	_Atomic uint64_t r_received;	/* ring bytes arrived (absolute) */
	_Atomic uint64_t r_consumed;	/* ring bytes read by the application */
	_Atomic uint16_t rseq_no;	/* data and IOMAP_SGL messages taken */
	uint32_t recv_repost;		/* receives to post again (cqlock) */
	atomic_uint closed;		/* SOCK_* end bits */
	_Atomic uint64_t last_rx_ns;	/* last message from the peer */

	/* Waiting: one thread sleeps on the fd, others on the condvar. */
	pthread_mutex_t wait_lock;
	pthread_cond_t wait_cond;
	bool wait_leader;
	uint64_t wait_gen;
	atomic_uint drain_gen;		/* channel drains: an arm before one is spent */
	bool detached;			/* sock_forget: the epoll set is shared */
	bool freeing;			/* sock_free: the epoll set goes with it */

	/* Keepalive (service thread). */
	uint64_t ka_next_ns;
	int ka_unanswered;
	uint64_t ka_probe_rx_ns;	/* last_rx_ns when the probe went out */
	bool ka_probe_acked;
	struct ferry_sock *ka_next;	/* in the service list */
	bool in_ka_list;

	/* Its slot of the statistics segment (sock_stat.c); never NULL. */
	struct sock_stat_slot *stat;
};

/* --- sock.c: the fd table (what the shim may call: sock-export.h) --- */
struct ferry_sock *sock_get(int fd);	/* NULL + EBADF / ENOTSOCK */
int sock_table_set(int fd, struct ferry_sock *s);
void sock_table_clear(int fd);
/*
 * sock_new - a socket named by a fresh epoll set, or @bare: by nothing
 * yet (fd -1), for one that will be shm-connected before anyone sees it
 * (accepted, spares): accept gives it its channel's number then.
 */
struct ferry_sock *sock_new(int domain, bool nonblock, bool cloexec, bool bare);
void sock_free(struct ferry_sock *s);
int sock_epoll_add(struct ferry_sock *s, int fd);
/*
 * sock_listen_held - ferry_sock_listen on a port that @tcp_fd, the
 * caller's kernel TCP socket bound to it, holds and will listen on (the
 * preload shim: the program's socket; ferry_cm_hold_port).  -1: the
 * listener reserves the port itself, as ferry_sock_listen does.
 */
int sock_listen_held(int fd, int backlog, int tcp_fd);
void sock_epoll_del(struct ferry_sock *s, int fd);
/*
 * sock_pid - this process's id without a system call (ferry_pid): the
 * spare buffers and the keepalive service ask it per connection.
 */
static inline pid_t sock_pid(void)
{
	return ferry_pid();
}

/* --- sock_conn.c: CM setup --- */
int sock_conn_connect(struct ferry_sock *s, const struct sockaddr *addr, socklen_t len);
/* @tcp_fd: sock_listen_held's, or -1; @rdv_fd: sock_listen_adopt's
 * (taken, closed on failure), or -1. */
int sock_conn_listen(struct ferry_sock *s, int backlog, int tcp_fd, int rdv_fd);
/* sock_conn_data.c: the connect data we send, and the peer's taken
 * (-1 + EPROTO when it is not rsocket v1 or offers nothing). */
void sock_conn_data_build(struct ferry_sock *s, uint8_t pd[RS_PRIVATE_DATA_LEN]);
int sock_conn_data_take(struct ferry_sock *s, const void *data, uint8_t len);
/* Process queued CM events of @s (cm_lock held). */
void sock_conn_process(struct ferry_sock *s);
/*
 * sock_conn_hold - a thread about to sleep on @s takes the handshake steps
 * it waits for from the CM thread (ferry_cm_hold): the connect's, or those
 * of the connections a listener accepted; their sockets go in @fds (room
 * for @max), *@ms_p is lowered to their deadlines; their count.
 * sock_conn_release after the sleep, whatever woke it: the steps that
 * can run run here, the rest go back.  Both take cm_lock.
 */
int sock_conn_hold(struct ferry_sock *s, struct pollfd *fds, int max, int *ms_p);
void sock_conn_release(struct ferry_sock *s);
/* Take in this thread the handshake steps whose messages have come
 * (cm_lock held): were there any?  And should a caller that found nothing
 * to do give its CPU to the CM thread?  (sock_step.c, as the two above.) */
bool sock_conn_progress(struct ferry_sock *s);
bool sock_conn_yields(const struct ferry_sock *s);
/* Take a ready accepted socket; NULL if none. cm_lock held. */
struct ferry_sock *sock_conn_take_ready(struct ferry_sock *listener);
void sock_conn_put_back(struct ferry_sock *listener, struct ferry_sock *s);
/*
 * sock_conn_spare_prepare - a listener's accept found nothing: make the
 * buffers of the next accepted socket now, while waiting, rather than on
 * the client's time when its request comes.  cm_lock held.
 */
void sock_conn_spare_prepare(struct ferry_sock *listener);
void sock_conn_teardown(struct ferry_sock *s);
struct sock_chan *sock_chan_new(void);
void sock_chan_put(struct sock_chan *c);

/* --- sock_data.c: the data path --- */
ssize_t sock_data_send(struct ferry_sock *s, const struct iovec *iov, int iovcnt, int flags);
ssize_t sock_data_recv(struct ferry_sock *s, const struct iovec *iov, int iovcnt, int flags);
/* Poll the CQ and act on what it held; returns completions taken. */
int sock_progress(struct ferry_sock *s);
/* Send control message @ctrl, waiting up to @timeout_ms for an SQ slot
 * (0: not at all, EAGAIN). */
int sock_send_ctrl(struct ferry_sock *s, uint32_t ctrl, int timeout_ms);
void sock_give_credits(struct ferry_sock *s, bool force);
int sock_post_initial_recvs(struct ferry_sock *s);
/* Receives posted at most: a WQE for every credit granted, and for each
 * control message the peer may have in flight, so that neither meets RNR. */
static inline uint32_t sock_recv_depth(const struct ferry_sock *s)
{
	return s->rq_size + RS_QP_CTRL_SIZE;
}
uint64_t sock_readable_bytes(struct ferry_sock *s);
bool sock_writable(struct ferry_sock *s);
/* sock_copy.c */
unsigned int sock_copy_how(struct ferry_sock *s, uint32_t len);
void sock_copy_account(struct ferry_sock *s, uint64_t bytes, uint64_t start_ns,
		       uint64_t end_ns);

/* wr_id of receives: this bit, and the slot (sock_msg.c) in the low bits. */
#define SOCK_WR_RECV		(1ull << 63)
#define SOCK_POLL_BATCH		32

/* Post one write (plock held).  Only a WRITE_WITH_IMM of data or
 * IOMAP_SGL takes a credit. */
int sock_post_wr(struct ferry_sock *s, enum ferry_wr_opcode op, struct ferry_sge *sge,
		 int nsge, unsigned int flags, uint64_t raddr, uint32_t rkey, uint32_t imm,
		 uint32_t sbuf_bytes, bool force_signal);
uint32_t sock_stage(struct ferry_sock *s, uint32_t len, const struct iovec **iov_p,
		    size_t *off_p, uint8_t small[SOCK_SMALL_MAX], struct ferry_sge sge[2],
		    int *nsge_p, unsigned int *flags_p);
/* Post exactly @wr, signalled now and then; the SQ slot it takes (plock). */
int sock_post_one(struct ferry_sock *s, struct ferry_send_wr *wr, uint32_t sbuf_bytes,
		  bool force_signal);
uint16_t sock_credits(struct ferry_sock *s);
bool sock_ctrl_avail(struct ferry_sock *s);
int sock_send_error(struct ferry_sock *s);
/* Wait until all sent data has completed (linger); false on timeout. */
bool sock_drain_sends(struct ferry_sock *s, int timeout_ms);

/* Copy @len bytes from the iovec cursor into @dst, moving it on. */
void sock_gather(uint8_t *dst, size_t len, const struct iovec **iov_p, size_t *off_p);
/* What the backlog does not hold may go now: bytes, 0 if none (slock). */
uint32_t sock_send_space(struct ferry_sock *s);
/* Write at most @len bytes from the cursor into the peer's ring (slock). */
ssize_t sock_write_data(struct ferry_sock *s, uint32_t len, const struct iovec **iov_p,
			size_t *off_p);

/* --- sock_msg.c: messages as immediate data, or rsocket's iWARP mode --- */
/* Tests: force iWARP mode on (1) or leave it to the QP (0). */
void sock_msg_force(int on);
uint32_t sock_msg_slot_count(const struct ferry_sock *s);
/* Bytes after the send ring for the receive slots. */
size_t sock_msg_area_size(const struct ferry_sock *s);
/* The send ring is mapped: place the slots; decide whether receives need them. */
void sock_msg_buffers(struct ferry_sock *s);
/* The QP sends @max_inline bytes inline: enough for the mode?  -1 + ENOTSUP. */
int sock_msg_qp_check(struct ferry_sock *s, uint32_t max_inline);
/* The connection is up: which form its messages take. */
void sock_msg_setup(struct ferry_sock *s);
void sock_msg_recv_wr(struct ferry_sock *s, struct ferry_recv_wr *wr, struct ferry_sge *sge);
bool sock_msg_of_wc(struct ferry_sock *s, const struct ferry_wc *wc, uint32_t *msg_p);
int sock_msg_post(struct ferry_sock *s, struct ferry_send_wr *wr, uint32_t sbuf_bytes,
		  bool force_signal);
/* SQ slots one message with a payload takes: the WRITE and, in iWARP mode,
 * the SEND. */
static inline uint32_t sock_msg_wrs(const struct ferry_sock *s)
{
	return s->msg_send ? 2 : 1;
}

/* The send ring's mapping: the ring and the receive slots after it. */
static inline size_t sock_sbuf_map_size(const struct ferry_sock *s)
{
	return s->sbuf_size + sock_msg_area_size(s);
}

/* --- sock_backlog.c: the send buffer beyond the ring --- */
/* Set the bound of a connection's backlog when it comes up. */
void sock_backlog_setup(struct ferry_sock *s);
/* Queue up to @len bytes from the cursor; returns how many (slock held). */
size_t sock_backlog_put(struct ferry_sock *s, size_t len, const struct iovec **iov_p,
			size_t *off_p);
/*
 * sock_backlog_flush - write what the peer's ring takes now, oldest first,
 * then a shutdown's control message left waiting for it.  slock held;
 * -1 when the connection failed.
 */
int sock_backlog_flush(struct ferry_sock *s);
/* sock_backlog_flush from where slock may be taken by others (trylock). */
void sock_backlog_kick(struct ferry_sock *s);
/* A blocking writer found the ring full: note when, unless noted already;
 * returns the deadline of its wait for the peer (SOCK_STALL_NS on). */
uint64_t sock_backlog_full(struct ferry_sock *s);
/* Has the ring stayed full for SOCK_STALL_NS with no update since? */
bool sock_backlog_stalled(struct ferry_sock *s);
/* Send control message @ctrl after the backlog, now if it is empty (slock). */
void sock_backlog_ctrl(struct ferry_sock *s, int ctrl);
/* Wait up to @timeout_ms for the peer to take the backlog (slock held). */
bool sock_backlog_drain(struct ferry_sock *s, int timeout_ms);
void sock_backlog_free(struct ferry_sock *s);

static inline size_t sock_backlog_bytes(const struct ferry_sock *s)
{
	return atomic_load_explicit(&s->bl_bytes, memory_order_relaxed);
}

/* --- sock_iomap.c --- */
/* Bytes of the rbuf block after the ring: target SGL and target iomap. */
size_t sock_iomap_tail_size(uint32_t entries);
/* An IOMAP_SGL immediate for slot @index arrived (cqlock held). */
void sock_iomap_take(struct ferry_sock *s, uint32_t index);
void sock_iomap_free_all(struct ferry_sock *s);

/* --- sock_poll.c --- */
/* What of @events (POLLIN, POLLOUT, ...) @s has now, after taking its
 * completions and CM events. */
short sock_revents(struct ferry_sock *s, short events);

/* --- sock_epoll.c --- */
/* ferry_sock_close on an epoll set of ours; -1 + EBADF if @fd is none. */
int sock_epoll_close(int fd);
/* Socket @s is closing: out of every epoll set, and of every sleep. */
void sock_epoll_forget(struct ferry_sock *s);

/* --- sock_wait.c --- */
/* sock_poll_us, sock_default_poll_us: sock-export.h. */
/*
 * sock_wait - wait until @ready(@s) is true, or the deadline (absolute ns,
 * 0 = none) passes (ETIMEDOUT).  Polls for FERRY_POLL_US, then arms the CQ
 * and sleeps on the socket's fd.  @ready must take the locks it needs;
 * the caller holds none the sleeper's peers need (rlock, cqlock, plock).
 */
int sock_wait(struct ferry_sock *s, bool (*ready)(struct ferry_sock *s),
	      uint64_t deadline_ns);
/*
 * sock_wait_handshake - sock_wait for a connect or an accept, whose caller
 * holds no lock of @s: a sleep also takes the handshake steps it waits for
 * from the CM thread (sock_conn_hold), which needs cm_lock.
 */
int sock_wait_handshake(struct ferry_sock *s, bool (*ready)(struct ferry_sock *s),
			uint64_t deadline_ns);
/* Become the sleeper of @s (true) or not, for ferry_sock_poll. */
bool sock_wait_lead(struct ferry_sock *s);
void sock_wait_arm(struct ferry_sock *s);
/* Take back an arm that has not fired, unless a sleeper of @s relies on it. */
void sock_wait_disarm(struct ferry_sock *s);
void sock_wait_drain(struct ferry_sock *s);
void sock_wait_release(struct ferry_sock *s);
void sock_wait_wake(struct ferry_sock *s);

/* --- sock_opt.c --- */
void sock_opt_defaults(struct ferry_sock *s);

/* --- keepalive service (sock_opt.c) --- */
void sock_ka_update(struct ferry_sock *s);
void sock_ka_forget(struct ferry_sock *s);

/* --- sock_stat.c: the statistics segment ferry-stat reads --- */
/* Take a slot for a new socket (a sink when there is none). */
void sock_stat_attach(struct ferry_sock *s);
void sock_stat_detach(struct ferry_sock *s);
/* Publish state, addresses, transport and ring sizes: after a change. */
void sock_stat_update(struct ferry_sock *s);
/* Publish a new s->fd only (sock_renumber). */
void sock_stat_set_fd(struct ferry_sock *s);
/* The segment's descriptor in this process, -1 before the first socket. */
int sock_stat_fd(void);

/* Publish new end bits of the connection (closed); cheap when none. */
static inline void sock_stat_flags(struct ferry_sock *s)
{
	unsigned int closed = atomic_load_explicit(&s->closed, memory_order_relaxed);

	if ((__atomic_load_n(&s->stat->flags, __ATOMIC_RELAXED) & closed) != closed)
		__atomic_fetch_or(&s->stat->flags, closed, __ATOMIC_RELAXED);
}

static inline bool sock_is_connected(struct ferry_sock *s)
{
	return __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == SOCK_CONNECTED;
}

#endif /* FERRY_SOCK_INTERNAL_H */
