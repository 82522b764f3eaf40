/*
 * core-export.h - what the core objects and the providers share.
 *
 * The public objects (struct ferry_pd, ferry_cq, ...) are embedded as the
 * first member of each provider's private struct; container_of gets back.
 * A provider is one `const struct ferry_provider` (libevent's eventop is the
 * model): a name, a device lister, and one function per verb.  The core
 * (core.c) checks arguments that do not depend on the provider and
 * dispatches; providers never see NULL objects or out-of-range enums.
 */
#ifndef FERRY_INTERNAL_H
#define FERRY_INTERNAL_H

#include <stdarg.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <errno.h>

#include <ferry/verbs.h>

#ifndef container_of
#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#endif

/*
 * --- what the preload shim uses of core ---
 * The shim's one door into ferry is the socket layer: it cannot see this
 * header, so sock/export/sock-export.h declares the same, word for word,
 * between the same guard, and whichever of the two comes first in a file
 * declares them (tests/check_layers.sh checks that the copies agree).
 */
#ifndef FERRY_CORE_SHIM_DECLS
#define FERRY_CORE_SHIM_DECLS

#define FERRY_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Set errno and return -1: the socket-style error convention. */
#define ERR(e) (errno = (e), -1)

/* log.c */

enum ferry_log_level {
	FERRY_LOG_ERROR,
	FERRY_LOG_WARN,
	FERRY_LOG_INFO,
	FERRY_LOG_DEBUG,
};

/* Level from FERRY_LOG (error|warn|info|debug), read once; default warn. */
enum ferry_log_level ferry_log_level(void);
void ferry_log(enum ferry_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define ferry_err(...)   ferry_log(FERRY_LOG_ERROR, __VA_ARGS__)
#define ferry_warn(...)  ferry_log(FERRY_LOG_WARN, __VA_ARGS__)
#define ferry_info(...)  ferry_log(FERRY_LOG_INFO, __VA_ARGS__)
#define ferry_debug(...) \
	do { if (ferry_log_level() >= FERRY_LOG_DEBUG) \
		ferry_log(FERRY_LOG_DEBUG, __VA_ARGS__); } while (0)

/*
 * ferry_own_thread - true in ferry's own threads (the CM's, the shm
 * monitor, keepalives).  The preload shim passes their system calls to
 * the kernel untouched, even on a descriptor the program knows: a stream
 * socket whose number is its connection's socket
 * (ferry_comp_channel_on_conn) is shut down, watched and written to by
 * them, never as the program's socket.
 */
extern __thread bool ferry_own_thread;

/*
 * ferry_fork_child - call in a child of fork() that goes on using
 * connections it inherited (the preload shim does): the providers restart
 * what watched them in the parent (shm: hang-up of the peers).
 */
void ferry_fork_child(void);

/* The floor of the descriptors ferry keeps for itself (ferry_fd_park). */
extern int ferry_fd_park_base;

#endif /* FERRY_CORE_SHIM_DECLS */

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

struct ferry_provider;

struct ferry_device {
	const struct ferry_provider *provider;
	char name[64];
	void *provider_data;	/* e.g. the struct ibv_device * of prov/verbs */
};

/* struct ferry_context is public (verbs.h): it carries async_fd. */

/*
 * The provider table.  Every entry is mandatory; an operation a provider
 * cannot do points at a function that fails with ENOTSUP.
 */
struct ferry_cq_sleep;

struct ferry_provider {
	const char *name;	/* "shm", "verbs" */
	/* QP types besides RC it makes: bit (1 << FERRY_QPT_UC) ...  */
	unsigned int qp_types;

	/* Append up to @max devices to @devs; return how many, or -1. */
	int (*get_devices)(struct ferry_device **devs, int max);

	struct ferry_context *(*open_device)(struct ferry_device *dev);
	int (*close_device)(struct ferry_context *ctx);
	int (*query_device)(struct ferry_context *ctx, struct ferry_device_attr *attr);
	/* The members of @attr after orig_attr (the core fills orig_attr and
	 * zeroes the rest first). */
	int (*query_device_ex)(struct ferry_context *ctx, struct ferry_device_attr_ex *attr);
	/* Ports, GIDs, P_Keys: the core has checked @port != 0, @index >= 0. */
	int (*query_port)(struct ferry_context *ctx, uint8_t port, struct ferry_port_attr *attr);
	int (*query_gid)(struct ferry_context *ctx, uint8_t port, int index, union ferry_gid *gid);
	int (*query_pkey)(struct ferry_context *ctx, uint8_t port, int index, uint16_t *pkey);

	struct ferry_pd *(*alloc_pd)(struct ferry_context *ctx);
	/* Optional: a PD that will hold at most @max_remote MRs with remote
	 * access (ferry_alloc_pd_small). */
	struct ferry_pd *(*alloc_pd_small)(struct ferry_context *ctx, uint32_t max_remote);
	int (*dealloc_pd)(struct ferry_pd *pd);
	/* Optional: from now on releasing @pd and its MRs must not touch what
	 * other processes share (see ferry_pd_detach). */
	void (*detach_pd)(struct ferry_pd *pd);
	void (*detach_cq)(struct ferry_cq *cq);
	/* Optional: undo a ferry_req_notify_cq that has not fired yet. */
	void (*disarm_cq)(struct ferry_cq *cq);
	/* Optional: ferry_cq_sleep_prepare, ferry_cq_sleep, ferry_cq_sleep_cancel. */
	int (*cq_sleep_prepare)(struct ferry_cq *cq, struct ferry_cq_sleep *t);
	int (*cq_sleep)(struct ferry_cq *cq, struct ferry_cq_sleep *t, int timeout_ms);
	void (*cq_sleep_cancel)(struct ferry_cq *cq);
	/* Optional: in a child of fork, take up what the parent's threads did. */
	void (*fork_child)(void);
	struct ferry_mr *(*reg_mr)(struct ferry_pd *pd, void *addr, size_t len, int access);
	int (*dereg_mr)(struct ferry_mr *mr);

	struct ferry_comp_channel *(*create_comp_channel)(struct ferry_context *ctx);
	/* Optional: a channel for one CQ ever (ferry_create_comp_channel_single). */
	struct ferry_comp_channel *(*create_comp_channel_single)(struct ferry_context *ctx);
	int (*destroy_comp_channel)(struct ferry_comp_channel *ch);
	/* Optional: ferry_comp_channel_renumber, ferry_comp_channel_on_conn. */
	int (*renumber_comp_channel)(struct ferry_comp_channel *ch, int fd);
	int (*comp_channel_on_conn)(struct ferry_comp_channel *ch, struct ferry_qp *qp, int fd,
				    bool cloexec);
	int (*get_cq_event)(struct ferry_comp_channel *ch, struct ferry_cq **cq_p);
	/* Optional: get_cq_event that never blocks nor asks the fd whether
	 * it may (ferry_cq_event_poll). */
	int (*poll_cq_event)(struct ferry_comp_channel *ch, struct ferry_cq **cq_p);
	struct ferry_cq *(*create_cq)(struct ferry_context *ctx, int cqe,
				      struct ferry_comp_channel *ch);
	int (*destroy_cq)(struct ferry_cq *cq);
	int (*req_notify_cq)(struct ferry_cq *cq, int solicited_only);
	void (*ack_cq_events)(struct ferry_cq *cq, unsigned int n);
	int (*poll_cq)(struct ferry_cq *cq, int n, struct ferry_wc *wc);

	/*
	 * Optional: address handles, and with them UD QPs.  NULL: the
	 * transport has no UD (tcp: iWARP defines none), and the core
	 * refuses FERRY_QPT_UD with EOPNOTSUPP before create_qp sees it.
	 * The core has checked @pd and @attr (ah.c).
	 */
	struct ferry_ah *(*create_ah)(struct ferry_pd *pd, struct ferry_ah_attr *attr);
	int (*destroy_ah)(struct ferry_ah *ah);

	struct ferry_qp *(*create_qp)(struct ferry_pd *pd, struct ferry_qp_init_attr *attr);
	/*
	 * The provider takes its QP lock, reads the current state (which it may
	 * change asynchronously, e.g. to ERR when the peer dies), checks the
	 * transition with ferry_qp_transition_ok, applies it and sets qp->state.
	 */
	int (*modify_qp)(struct ferry_qp *qp, struct ferry_qp_attr *attr, int mask);
	int (*query_qp)(struct ferry_qp *qp, struct ferry_qp_attr *attr,
			struct ferry_qp_init_attr *init_attr);
	int (*destroy_qp)(struct ferry_qp *qp);
	int (*post_send)(struct ferry_qp *qp, struct ferry_send_wr *wr,
			 struct ferry_send_wr **bad);
	int (*post_recv)(struct ferry_qp *qp, struct ferry_recv_wr *wr,
			 struct ferry_recv_wr **bad);
	/* Optional: ferry_post_send_direct. */
	int (*post_send_direct)(struct ferry_qp *qp, struct ferry_send_wr *wr, unsigned int how);
	/* Optional: ferry_qp_write_imm_ok (absent: every connection does). */
	bool (*qp_write_imm_ok)(struct ferry_qp *qp);
	/*
	 * Shared receive queues (core.c checks the arguments, keeps
	 * srq_context and the count of QPs on it).  create_qp gets an SRQ of
	 * the same context in attr->srq.  A provider without them points
	 * these at the ferry_srq_unsupported_* stubs (EOPNOTSUPP).
	 */
	struct ferry_srq *(*create_srq)(struct ferry_pd *pd, struct ferry_srq_init_attr *attr);
	int (*modify_srq)(struct ferry_srq *srq, struct ferry_srq_attr *attr, int mask);
	int (*query_srq)(struct ferry_srq *srq, struct ferry_srq_attr *attr);
	int (*destroy_srq)(struct ferry_srq *srq);
	int (*post_srq_recv)(struct ferry_srq *srq, struct ferry_recv_wr *wr,
			     struct ferry_recv_wr **bad);
	/*
	 * Optional: asynchronous events of the provider's own (verbs: the
	 * device's); open_device then sets ctx->async_fd.  Without it the core
	 * keeps a queue per context (core/async.c) that the provider fills
	 * with ferry_async_post.
	 */
	int (*get_async_event)(struct ferry_context *ctx, struct ferry_async_event *ev);
	int (*qp_exchange)(struct ferry_qp *qp, int sock, uint32_t *peer_qpn);
	/*
	 * qp_exchange in steps, for a caller that sends our first word early
	 * (the CM's shm transport, right behind its request) and must never
	 * wait for the peer (the CM thread): qp_exchange_begin sends what
	 * needs nothing from the peer; qp_exchange_step takes what the peer
	 * sent so far and answers it, never blocking: 0 once the exchange is
	 * complete, -1 + EAGAIN while more must come (call it again when
	 * @sock is readable), any other errno: it failed and is over.
	 * qp_exchange_abort drops an exchange under way (a deadline passed).
	 * ENOTSUP where there is no such split.  The provider may hold @sock
	 * itself (ferry_fd_hold) instead of a copy: the caller then closes it
	 * with ferry_fd_close.  @sock is the CM's own AF_UNIX SOCK_SEQPACKET
	 * socket: its kind is not checked.
	 */
	int (*qp_exchange_begin)(struct ferry_qp *qp, int sock);
	int (*qp_exchange_step)(struct ferry_qp *qp, uint32_t *peer_qpn);
	void (*qp_exchange_abort)(struct ferry_qp *qp);
};

/* The providers, and which transport each serves: transport.h. */
#include "transport.h"

/* The completion opcode of a send-queue work request (every provider's). */
static inline enum ferry_wc_opcode ferry_wc_opcode_of(enum ferry_wr_opcode op)
{
	switch (op) {
	case FERRY_WR_RDMA_WRITE:
	case FERRY_WR_RDMA_WRITE_WITH_IMM:
		return FERRY_WC_RDMA_WRITE;
	case FERRY_WR_RDMA_READ:
		return FERRY_WC_RDMA_READ;
	case FERRY_WR_ATOMIC_CMP_AND_SWP:
		return FERRY_WC_COMP_SWAP;
	case FERRY_WR_ATOMIC_FETCH_AND_ADD:
		return FERRY_WC_FETCH_ADD;
	default:
		return FERRY_WC_SEND;
	}
}

/* --- qp_state.c: the RC state machine of ibverbs --- */

/*
 * ferry_qp_transition_ok - is @cur -> @next legal with @mask for an RC QP?
 * Checks required and allowed attribute bits as ibverbs does.
 */
bool ferry_qp_transition_ok(enum ferry_qp_state cur, enum ferry_qp_state next,
			    int mask);
/* The same for a QP of @type (RC or UC: the kernel's columns of each). */
bool ferry_qp_type_transition_ok(enum ferry_qp_type type, enum ferry_qp_state cur,
				 enum ferry_qp_state next, int mask);

/*
 * ferry_ud_transition_ok - the same for a UD QP (qp_state_ud.c): the
 * kernel's IB_QPT_UD column (RESET -> INIT with P_Key index, port and
 * Q_Key; INIT -> RTR with nothing; RTR -> RTS with sq_psn).
 */
bool ferry_ud_transition_ok(enum ferry_qp_state cur, enum ferry_qp_state next, int mask);

/*
 * ferry_ud_wr_ok - is @wr a send WR a UD QP of @qp's context can post: a
 * SEND (with or without immediate) whose AH is of that context?  ah.c.
 */
bool ferry_ud_wr_ok(const struct ferry_qp *qp, const struct ferry_send_wr *wr);

/*
 * ferry_qp_next_state - the target state of a modify: attr->qp_state when
 * FERRY_QP_STATE is in @mask, else @cur.  Returns false (EINVAL) when
 * FERRY_QP_CUR_STATE is given and differs from @cur.
 */
bool ferry_qp_next_state(enum ferry_qp_state cur, const struct ferry_qp_attr *attr,
			 int mask, enum ferry_qp_state *next_p);

/* --- alloc.c: ferry_alloc blocks (memfd-backed, shareable) --- */

/* One ferry_alloc allocation: a sealed memfd mapped shared at addr. */
struct ferry_window;
struct ferry_block {
	void *addr;
	size_t size;		/* mapped size, page multiple */
	int fd;			/* memfd, F_SEAL_SHRINK|F_SEAL_GROW; -1: dropped */
	uint64_t id;		/* process-unique, never reused */
	unsigned long ino;	/* inode of the memfd: refuse it from peers */
	pid_t owner;		/* process that allocated it (a forked child shares it) */
	/* Page spans shared with peers (alloc.c), each a file of its own. */
	struct ferry_window *windows;
	/* Some span was moved to a file of its own: fd no longer backs all
	 * of the block, so it is never shared whole again. */
	bool patched;
};

/*
 * ferry_block_find - the block containing [addr, addr+len), or NULL.
 * Fills *blk_p with a copy (blocks may be freed concurrently; the copy's
 * fd is only valid while the caller keeps a registration on it).
 */
bool ferry_block_find(const void *addr, size_t len, struct ferry_block *blk_p);
/*
 * Windows: what a peer may map of a block.  A peer never gets a block's
 * memfd; it gets a *window*, a file that holds exactly the pages of the
 * span it may reach (the MR's, rounded out to pages), read-only or
 * read-write.  ferry_block_share makes one for [addr, addr+len) (or
 * takes another reference on the window of that same span) and says its
 * id and where addr lies in it; the descriptor to pass comes from
 * ferry_block_window_fd(id).  When the last reference goes
 * (ferry_block_unshare), the span moves to fresh pages of a new file,
 * its contents copied: whoever mapped the window keeps a mapping of pages
 * that are no longer ours.  -1 + EBUSY: the span overlaps a window of
 * another span (two files cannot share pages); EINVAL: not in a block.
 */
int ferry_block_share(const void *addr, size_t len, bool writable, const void *owner,
		      uint64_t *id_p, uint64_t *off_p);
void ferry_block_unshare(uint64_t id);
/*
 * ferry_block_renew - take window @id back from every peer that has it,
 * keeping it for new ones: its span moves to a new file, and it gets new
 * ids, the one for @id's kind in *id_p (unchanged if nothing was handed
 * out, or if registrations of another @owner share the window: its peers
 * still use it).  The owner's other registrations of the span find the
 * new id with their old one, until the next renewal.
 */
int ferry_block_renew(uint64_t id, const void *owner, uint64_t *id_p);
/* A new descriptor of window @id (read-only for a read-only one), -1 if
 * it is gone (or its block's descriptor was dropped; ESTALE: renewed). */
int ferry_block_window_fd(uint64_t id);
/*
 * ferry_block_window_send - @send_fd(a descriptor of window @id, @arg),
 * its result; -1 with ferry_block_window_fd's errno when there is none.
 * The descriptor is the caller's only during the call, which must not
 * block nor call into this file (a read-write window's own, under its
 * lock): nothing dup'ed and closed for one sendmsg.
 */
int ferry_block_window_send(uint64_t id, int (*send_fd)(int fd, void *arg), void *arg);
/*
 * ferry_block_drop_fd - close the memfds of the block mapped at @addr and
 * of its windows, keeping the block (mapped here, and wherever peers
 * mapped it): a block that no new peer will need costs no descriptor.
 * From then on its windows cannot be passed on (ferry_block_window_fd
 * fails, announcements skip them), so only for memory whose every peer
 * already has it -- a stream socket's ring, once its one connection's
 * exchange is over.  -1 + EINVAL if @addr is no block's start.
 */
int ferry_block_drop_fd(const void *addr);
/* Is @ino a block or window this very process made (not one inherited by fork)? */
bool ferry_block_is_own_inode(unsigned long ino);
/* Create a sealed memfd of @size bytes (rounded up to pages). -1 + errno. */
int ferry_memfd_create(const char *name, size_t size);
unsigned long ferry_fd_inode(int fd);

/* --- srq.c: the stubs of a provider without SRQs (EOPNOTSUPP) --- */

struct ferry_srq *ferry_srq_unsupported_create(struct ferry_pd *pd,
					       struct ferry_srq_init_attr *attr);
int ferry_srq_unsupported_modify(struct ferry_srq *srq, struct ferry_srq_attr *attr, int mask);
int ferry_srq_unsupported_query(struct ferry_srq *srq, struct ferry_srq_attr *attr);
int ferry_srq_unsupported_destroy(struct ferry_srq *srq);
int ferry_srq_unsupported_post(struct ferry_srq *srq, struct ferry_recv_wr *wr,
			       struct ferry_recv_wr **bad);

/*
 * --- async.c: the per-context queue of asynchronous events ---
 * For providers that raise events themselves (shm).  ctx->async_fd is an
 * eventfd that reads 1 exactly while the queue holds an event, so it polls
 * readable then and only then, whatever mode the caller set on it.
 * ferry_async_post - queue event @type about @element (a QP, SRQ or CQ of
 * @ctx), any thread, any lock held (the queue's lock is a leaf); 0, or -1
 * + ENOMEM (the event is lost and logged) or ENOBUFS (1,024 wait unread:
 * dropped).  ferry_async_forget - drop the
 * queued events about @element, which is being destroyed.
 */
int ferry_async_open(struct ferry_context *ctx);
/* The queue of a context closed (it is gone: only its queue is left). */
void ferry_async_close(struct ferry_async_queue *q);
int ferry_async_post(struct ferry_context *ctx, enum ferry_event_type type, void *element);
void ferry_async_forget(struct ferry_context *ctx, const void *element);
int ferry_async_get(struct ferry_context *ctx, struct ferry_async_event *ev);

/* --- core.c: ferry_qp_exchange in steps (see qp_exchange_begin) --- */

int ferry_qp_exchange_begin(struct ferry_qp *qp, int sock);
int ferry_qp_exchange_step(struct ferry_qp *qp, uint32_t *peer_qp_num_p);
void ferry_qp_exchange_abort(struct ferry_qp *qp);

/*
 * ferry_pd_detach, ferry_cq_detach - this process lets go of objects
 * another process holds too (after fork): from now on, releasing @pd (its
 * MRs) or @cq closes and unmaps this process's copies only, and changes
 * nothing the other process or the peer sees -- no MR slot cleared in the
 * shared table.  The CM's ferry_cm_detach (cm/export/cm-export.h) does
 * the same for a connection.
 */
void ferry_pd_detach(struct ferry_pd *pd);
void ferry_cq_detach(struct ferry_cq *cq);
/*
 * ferry_cq_event_poll - ferry_get_cq_event for a caller that never wants
 * to wait (the socket layer, whose channels are non-blocking): -1 with
 * EAGAIN when no event is there, and no system call to find that out
 * where the provider can help it.
 */
int ferry_cq_event_poll(struct ferry_comp_channel *channel, struct ferry_cq **cq_p,
			void **cq_context_p);
/*
 * ferry_cq_disarm - take back an arm (ferry_req_notify_cq) that has not
 * fired: a waiter that is awake anyway spares its peers the system call a
 * notification costs them.  Where the provider cannot, nothing happens
 * (the arm fires once, as armed).
 */
void ferry_cq_disarm(struct ferry_cq *cq);
/*
 * Sleeping on a CQ without its channel's descriptor, for a thread of
 * ferry's own (a stream socket's blocking call): ferry_cq_sleep_prepare
 * arms the CQ for this kind of sleep and notes where the wake-ups will
 * come; the caller then looks for completions once more, and sleeps with
 * ferry_cq_sleep (timeout -1: none; 0 as well when woken, interrupted
 * (EINTR) or timed out) or, having found some, takes the arm back with
 * ferry_cq_sleep_cancel.  On shm, for a CQ of one connected QP: a futex
 * the peer's QP raises in its region, and one of the CQ's for what
 * happens in this process -- no system call on the peer's side but the
 * wake itself, nothing to read on ours.  EOPNOTSUPP elsewhere: sleep on
 * the channel.
 */
struct ferry_cq_sleep {
	const void *peer_word;		/* provider's */
	uint32_t peer_val, local_val;
};
int ferry_cq_sleep_prepare(struct ferry_cq *cq, struct ferry_cq_sleep *t);
int ferry_cq_sleep(struct ferry_cq *cq, struct ferry_cq_sleep *t, int timeout_ms);
void ferry_cq_sleep_cancel(struct ferry_cq *cq);
/*
 * ferry_create_comp_channel_single - a completion channel that will carry
 * the events of one CQ only, for a caller that watches its fd itself (a
 * stream socket): where the provider can, its fd is the CQ's own wake-up
 * (shm: the CQ's wake socket, not an epoll set of them), one descriptor
 * less.  A second CQ on it fails (EBUSY).  Non-blocking (O_NONBLOCK) on
 * shm.  Elsewhere, an ordinary channel.
 */
struct ferry_comp_channel *ferry_create_comp_channel_single(struct ferry_context *context);
/*
 * ferry_comp_channel_renumber - the caller has put a copy of @channel's
 * fd at number @fd (dup3) and will close the old number: the channel
 * uses @fd from now, and leaves closing it to the caller.  Only where
 * nobody else holds the old number (shm single channels: CQs are woken by
 * name); EOPNOTSUPP elsewhere.  So a stream socket's own fd can be its
 * completion channel once it is connected.
 */
int ferry_comp_channel_renumber(struct ferry_comp_channel *channel, int fd);
/*
 * ferry_comp_channel_on_conn - @channel (single, renumbered or not), whose
 * CQ takes the receives of @qp alone, connected through the CM, becomes
 * the QP's connection to its peer: its fd is the connection's AF_UNIX
 * socket, put on number @fd (dup3, closing what was there; -1: the lowest
 * free number, close-on-exec if @cloexec), and the peer wakes the CQ with
 * a record on that socket.  The CQ's own wake socket goes: one descriptor
 * for the connection and its channel.  The caller then holds the number
 * as it holds a renumbered channel's, closing it with ferry_fd_close; the
 * peer's hang-up shows on it as on any socket.  Nobody may be waiting on
 * the channel meanwhile, and the peer must announce no memory blocks
 * later (BLOCK messages would be read as wake-ups).  Returns the number,
 * or -1: EOPNOTSUPP where the provider has no such connection (verbs, a
 * QP connected some other way, or not connected).
 */
int ferry_comp_channel_on_conn(struct ferry_comp_channel *channel, struct ferry_qp *qp, int fd,
			       bool cloexec);
/*
 * ferry_post_send_direct - post the single send or write @wr only if the
 * provider carries it out before returning, reading its payload during
 * the call from wherever its SGEs point: memory of ours, registered or
 * not (their lkeys are not looked at), which the caller may reuse at
 * once, as after an INLINE post of any size.  Its completion comes as
 * for any WR.  Returns 0 when done; -1 with EAGAIN when it would have to
 * wait (the SQ holds earlier work, the peer has no receive for it, the
 * QP is not in RTS), with nothing posted: post it with ferry_post_send
 * from registered memory instead.  EOPNOTSUPP where the provider never
 * executes at post time (verbs: the device reads the payload later),
 * EINVAL for a chain, an opcode that carries no payload of ours, or a
 * flag beyond SIGNALED and SOLICITED (INLINE is implied).
 * So a stream socket on shm copies a write once, into the peer's ring,
 * instead of first into its own send ring.
 *
 * @how: FERRY_DIRECT_NOCACHE stores the payload past this CPU's caches
 * (non-temporal stores, on x86-64), for a reader on another CPU: a plain
 * store must first take each line back from the reader's cache, which
 * costs a round trip between the two CPUs, and when they sit far apart
 * (other core complexes, other sockets) that makes plain stores several
 * times slower than these; when they sit close, plain stores win.  0:
 * plain stores.
 */
enum ferry_direct_how {
	FERRY_DIRECT_NOCACHE = 1 << 0,
};
int ferry_post_send_direct(struct ferry_qp *qp, struct ferry_send_wr *wr, unsigned int how);

/*
 * ferry_qp_write_imm_ok - does @qp's connection carry RDMA WRITE WITH
 * IMMEDIATE?  iWARP has none (RFC 5040): an RNIC (siw) never does, and the
 * tcp provider only where the MPA exchange found a peer that takes RFC
 * 7306's Immediate Data (ferry's own).  Known once the connection is up
 * (the CM's ESTABLISHED); false before where it depends on the peer.  The
 * stream sockets speak rsocket's iWARP mode where it is false.
 */
bool ferry_qp_write_imm_ok(struct ferry_qp *qp);
/*
 * ferry_alloc_pd_small - a PD whose caller will register at most
 * @max_remote MRs with remote access (any number without): where the
 * provider keeps a table of them that peers read (shm), it is sized for
 * that many, not for the device's max_mr, so an idle connection's PD costs
 * a few hundred bytes instead of a page.  A further remote-access MR fails
 * with ENOMEM.  Elsewhere, an ordinary PD.
 */
struct ferry_pd *ferry_alloc_pd_small(struct ferry_context *context, uint32_t max_remote);
/* getpid() without a system call (kept right across fork). */
pid_t ferry_pid(void);
/*
 * FERRY_FORK_SAFE(name, mutex) - hold @mutex, a process-wide leaf lock
 * (never held while taking another), across fork(): the child of a
 * program that forks while another thread of ferry's (the CM thread,
 * the acceptor, the monitor) holds it would inherit it held, by no
 * thread, and hang at its first use -- a forked server's child closing a
 * connection did.  @name makes the handlers' names unique.
 */
#define FERRY_FORK_SAFE(name, mutex)						\
	static void name##_fork_prepare(void) { pthread_mutex_lock(&(mutex)); }	\
	static void name##_fork_after(void) { pthread_mutex_unlock(&(mutex)); }	\
	__attribute__((constructor)) static void name##_fork_register(void)	\
	{									\
		pthread_atfork(name##_fork_prepare, name##_fork_after,		\
			       name##_fork_after);				\
	}
/*
 * ferry_fd_park - move @fd, one ferry keeps for itself, up to
 * ferry_fd_park_base or above (close-on-exec), when that is set; returns
 * the fd to use (@fd itself when unset, negative or no room).  The preload
 * shim sets the base, so that the descriptors behind each connection do
 * not take the low numbers a program expects its own files to get (and
 * select(2) can reach).  ferry_fd_dup: a close-on-exec duplicate of @fd,
 * parked the same way when there is room.
 */
/* ferry_fd_park_base: with the declarations the shim uses, above. */
int ferry_fd_park(int fd);
int ferry_fd_dup(int fd);
/*
 * ferry_fd_hold - a second (third, ...) part of ferry holds @fd: returns
 * @fd, or a duplicate where it cannot count (-1: none).  ferry_fd_close -
 * one holder lets go: the fd is closed when the last one does.  Every
 * holder of such an fd closes it with ferry_fd_close, never close(2).
 * So the CM and the shm provider share one descriptor of a connection.
 */
int ferry_fd_hold(int fd);
int ferry_fd_close(int fd);

#endif /* FERRY_INTERNAL_H */
