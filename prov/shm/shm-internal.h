/*
 * shm-internal.h - the same-host soft transport: RDMA reliable-connection
 * semantics between processes through shared memory.
 *
 * Memory model.  Every piece of shared state has exactly one writer:
 *
 *   - a QP's *region* (struct shm_region + its two rings) is written by the
 *     QP's owner and read by the peer: the owner's posted receives (RQ ring)
 *     and the deliveries the owner made into the peer's receives (DQ ring);
 *   - a PD's *MR table* is written by its owner and read by peers, who look
 *     up rkeys there;
 *   - a CQ's *notify word* is written by its owner (arm / disarm) and read by
 *     peers that decide whether to wake the CQ (a datagram to its wake
 *     socket's name, shm_wake.c).
 *
 * Isolation.  A peer sees only memory of connections with its own process.
 * Regions, and the copies ("mirrors") of MR tables and notify words that
 * peers read, are pieces of the arena's pool of that peer process
 * (shm_arena.c: a few large memfds per pool, mapped once by the peer).
 * The owner keeps the primary copy of a PD's table and of a CQ's word in
 * memory no peer maps (the arena's private pool), writes every change
 * there and then to the mirror in the pool of each peer process it has a
 * connection with through that PD or CQ (shm_pd.c), and reads only the
 * primary.  A PD or CQ shared by connections to several processes thus
 * shows each of them that PD's MR table (an rkey is valid on any QP of its
 * PD, as in ibverbs), and nothing of any other PD, CQ or QP.  Pool
 * segments are sealed against shrinking and, after the owner has mapped
 * them, against any new writable mapping (F_SEAL_FUTURE_WRITE): a peer can
 * only map them read-only, so it can never corrupt what it reads.
 * Memory from ferry_alloc() is a memfd the peer maps read-write: that is what
 * makes WRITE, READ and atomics one-sided.  Everything read from a peer's
 * memory is copied once, then validated, then used.
 *
 * Execution.  The initiator does all the work in ferry_post_send(): checks
 * the rkey against the peer's MR table, copies the data (memcpy into a mapped
 * block, or through /proc/<pid>/mem for other memory: shm_peer.c), consumes one of the peer's
 * posted receives when the opcode needs it, and writes a delivery into its
 * own DQ ring.  The receiver turns deliveries into completions in
 * ferry_poll_cq().  A send that finds no posted receive waits per the RNR
 * rules: the monitor thread retries it after the peer's RNR timer, or at once
 * when the peer posts a receive and kicks the monitor (a datagram to its
 * socket's name).
 *
 * The monitor thread (one per process, started lazily) also watches every
 * connection's AF_UNIX socket for hang-up: a dead peer moves its QPs to ERR
 * within milliseconds.
 */
#ifndef FERRY_SHM_INTERNAL_H
#define FERRY_SHM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core-export.h"
#include "lock.h"
#include "monotime.h"

#define SHM_MAGIC		0x46525931u	/* "FRY1" */
#define SHM_VERSION		8u	/* 8: HELLO passes no memory, REGION the peer's pool */

#define SHM_MAX_QP_WR		(1u << 15)	/* queue depth limit */
#define SHM_MAX_SGE		16u
#define SHM_MAX_INLINE		1024u
#define SHM_MAX_CQE		(1 << 22)
#define SHM_MR_TABLE_ENTRIES	(1u << 14)	/* MRs with remote access per PD */
#define SHM_MR_TABLE_MIN	2u		/* slot 0 (never used) and one MR */
#define SHM_MAX_MR_SIZE		(1ull << 40)
/* How long the blocking ferry_qp_exchange waits for the peer (the CM's
 * exchanges have deadlines of their own: cm/cm_shm.h). */
#define SHM_EXCHANGE_TIMEOUT_MS	10000

/* rkey / lkey layout: index into the PD's MR table, and an 8-bit generation. */
#define SHM_KEY_INDEX(key)	((key) >> 8)
#define SHM_KEY(index, gen)	(((uint32_t)(index) << 8) | ((gen) & 0xffu))
/*
 * MRs without remote access are kept in a table of the PD's own, in private
 * memory that peers never see: their keys carry SHM_KEY_LOCAL in the index,
 * past the end of any table a peer maps, so used as an rkey one finds
 * nothing.  That table grows by chunks that never move (lookups take no
 * lock): chunk k holds SHM_LOCAL_CHUNK0 << k entries.
 */
#define SHM_KEY_LOCAL		(1u << 23)
#define SHM_LOCAL_CHUNK0	8u
#define SHM_LOCAL_CHUNKS	11	/* 8 * (2^11 - 1) = 16376 MRs */

/* --- shared structures (layout is the wire format between processes) --- */

/* One MR in a PD's published table.  rkey 0 marks a free slot. */
struct shm_mr_entry {
	_Atomic uint32_t rkey;
	uint32_t access;	/* enum ferry_access_flags */
	uint64_t addr;		/* virtual address in the owner */
	uint64_t length;
	uint64_t block_id;	/* window of it (ferry_block_share), 0 if none */
	uint64_t block_offset;	/* addr - the window's start */
	uint32_t gen;		/* owner's: generation of the slot's last key */
	uint32_t pad;
};

/*
 * A CQ's arm state, read by peers: (generation << 4) | bits -- a mode for
 * its channel (a datagram to its wake socket) and SHM_NOTIFY_FUTEX for a
 * thread asleep on the futexes (ferry_cq_sleep: the peer raises its
 * region's wake_seq), each signalled once per generation.  SHM_NOTIFY_CONN
 * is no arm but how the channel is woken, for good once set: its
 * descriptor is the connection's own socket (ferry_comp_channel_on_conn),
 * so the peer sends a record on its end of it instead of a datagram to
 * the CQ's name.
 */
#define SHM_NOTIFY_NONE		0u
#define SHM_NOTIFY_ALL		1u
#define SHM_NOTIFY_SOLICITED	2u
#define SHM_NOTIFY_FUTEX	4u
#define SHM_NOTIFY_CONN		8u
#define SHM_NOTIFY_MODES	3u	/* the mode's bits */
#define SHM_NOTIFY_ARMS		(SHM_NOTIFY_MODES | SHM_NOTIFY_FUTEX)
#define SHM_NOTIFY_BITS		(SHM_NOTIFY_ARMS | SHM_NOTIFY_CONN)
#define SHM_NOTIFY_MODE(w)	((uint32_t)((w) & SHM_NOTIFY_MODES))
#define SHM_NOTIFY_GEN(w)	((w) >> 4)
#define SHM_NOTIFY_WORD(gen, bits)	((uint64_t)(gen) << 4 | (bits))

struct shm_notify {
	_Atomic uint64_t word;
};

/* A scatter element of a published receive. */
struct shm_rsge {
	uint64_t block_id;	/* 0: plain process memory, reached through shm_peer.c */
	uint64_t addr;		/* block offset if block_id, else virtual address */
	uint64_t length;
};

/*
 * A delivery: the initiator consumed the peer's receive number seq - 1.
 * seq is stored last (release): the receiver polls the slot it expects
 * next and needs no separate producer counter, one cache line less per
 * message.
 */
struct shm_delivery {
	_Atomic uint64_t seq;
	uint32_t opcode;	/* FERRY_WC_RECV or FERRY_WC_RECV_RDMA_WITH_IMM */
	uint32_t status;	/* FERRY_WC_SUCCESS or FERRY_WC_LOC_LEN_ERR */
	uint32_t byte_len;
	uint32_t imm_data;
	uint32_t flags;		/* SHM_DELIVERY_* */
	uint32_t pad;
};
#define SHM_DELIVERY_IMM	(1u << 0)
#define SHM_DELIVERY_SOLICITED	(1u << 1)
#define SHM_DELIVERY_BOUNCE	(1u << 2)	/* the data came through the sender's staging */

/*
 * Bounced SENDs (shm_bounce.c).  A peer of another user is never given
 * the pages of our receive buffers unless they are registered for remote
 * writes: what it SENDs into one of our receives it stages in a ring of
 * its own region instead, in records, and we copy them in when we poll.
 * A receive published with SHM_RQ_BOUNCE in its count names lengths only,
 * no addresses.  Records never wrap: each is a header and up to the end
 * of the ring, 16-byte aligned.
 */
#define SHM_BOUNCE_SIZE		(64u << 10)	/* a region's staging ring */
#define SHM_RQ_BOUNCE		(1u << 31)	/* in an RQ entry's count */
struct shm_bounce_rec {
	uint64_t recv;		/* the receive (delivery number) it is for */
	uint32_t off;		/* where in that receive's message */
	uint32_t len;		/* bytes after the header */
};

/*
 * The head of a QP's region.  Counters are free-running 64-bit sequence
 * numbers; ring slots are seq & (size - 1).  Followed by the RQ ring
 * (rq_size entries of rq_stride bytes: a uint32 count, pad, then rq_sge
 * struct shm_rsge) and preceded by the DQ ring (peer's rq_size struct
 * shm_delivery), whose slots run backwards from the head: slot 0 is the
 * one right before it.  So what an idle connection touches -- the head,
 * the first receives it posted, the first delivery slot its peer polls --
 * lies in the one page around the head (shm_region_layout), not in three.
 */
struct shm_region {
	uint32_t magic;
	uint32_t version;
	uint32_t qp_num;
	uint32_t rq_size;
	uint32_t rq_sge;
	uint32_t dq_size;
	/* Written on every post_recv: alone on its cache line. */
	_Alignas(64) _Atomic uint64_t rq_prod;	/* receives posted by the owner */
	/* Rarely written, read on every operation by the peer. */
	_Alignas(64) _Atomic uint32_t min_rnr_timer;	/* owner's RTR attribute */
	_Atomic uint32_t in_error;	/* owner's QP is in ERR: stop sending */
	_Atomic uint32_t qp_access;	/* owner QP's remote access flags */
	_Atomic uint32_t rnr_wait;	/* owner waits for a receive: kick it */
	/* The owner has let go of its peer: it reads the peer's region and
	 * writes the peer's memory no more.  Until the peer says so in its
	 * region, ours is not ours to reuse (shm_region_retire). */
	_Atomic uint32_t released;
	/* The owner's QP takes its receives from an SRQ and tops this ring up
	 * from it when asked: a sender that finds the ring empty (rnr_wait)
	 * kicks the owner's monitor too (shm_srq.c). */
	_Atomic uint32_t srq_kick;
	/* Raised (and futex-woken) by the owner when the peer's CQ is armed
	 * with SHM_NOTIFY_FUTEX: a thread of the peer sleeps on it. */
	_Alignas(64) _Atomic uint32_t wake_seq;
	/* Bounced SENDs: bytes the owner has staged in its ring, and bytes
	 * of the peer's ring it has taken in (a region has a ring only on a
	 * connection between two users: shm_conn_bounces). */
	_Alignas(64) _Atomic uint64_t bounce_prod;
	_Alignas(64) _Atomic uint64_t bounce_cons;
};

/*
 * The abstract name of a CQ's wake socket (shm_wake.c): sun_path's bytes,
 * the first one '\0'.  The kernel's autobind names take 6.
 */
#define SHM_WAKE_NAME_MAX	16
struct shm_wake_name {
	uint32_t len;
	char bytes[SHM_WAKE_NAME_MAX];
};

/* --- out-of-band messages on the AF_UNIX SOCK_SEQPACKET socket --- */

enum shm_msg_type {
	SHM_MSG_HELLO = 1,	/* no fds: the QP, its queue, its wake sockets */
	SHM_MSG_REGION = 2,	/* fds: the segments of the region and of the copies
				 * of the MR table and the recv CQ's notify word,
				 * each once (usually one segment for all three) */
	SHM_MSG_BLOCK = 3,	/* fds: one ferry_alloc block */
	SHM_MSG_TABLE = 4,	/* fds: segment of the copy of the PD's overflow MR table */
	SHM_MSG_READY = 5,	/* no fds: the sender holds all the peer sent */
};

/* The pieces a REGION names, in off[] and fdi[]. */
enum shm_region_piece {
	SHM_RP_REGION,		/* the QP's region */
	SHM_RP_TABLE,		/* the PD's MR table */
	SHM_RP_NOTIFY,		/* the recv CQ's notify word */
	SHM_RP_PIECES
};
#define SHM_MSG_FDS		SHM_RP_PIECES	/* the most a message carries */

struct shm_msg {
	uint32_t magic;
	uint32_t version;
	uint32_t type;
	uint32_t qp_num;	/* HELLO */
	uint32_t psn;		/* HELLO */
	uint32_t rq_size;	/* HELLO */
	uint32_t rq_sge;	/* HELLO */
	uint32_t table_entries;	/* REGION: slots of the MR table */
	struct shm_wake_name wake;	/* HELLO: the recv CQ's wake socket */
	struct shm_wake_name kick;	/* HELLO: the monitor's, for RNR */
	uint64_t value;		/* REGION: region size; BLOCK: block id */
	/* Where pieces lie in the segments passed with the message: REGION:
	 * off[SHM_RP_*] in its descriptor number fdi[SHM_RP_*]; TABLE: off[0]. */
	uint64_t off[SHM_RP_PIECES];
	uint32_t fdi[SHM_RP_PIECES];
	uint32_t pad;
};

#define SHM_MSG_BIT(type) (1u << (type))

/*
 * shm_msg.c: what a message must be before it is used.  shm_msg_nfds: the
 * descriptors a message of @type carries (REGION: at least; up to
 * SHM_MSG_FDS).  shm_msg_shape_ok: @len bytes, our magic and version, one
 * of @types (SHM_MSG_BIT mask), with as many descriptors (@nfds) as its
 * type carries.  shm_piece_ok: [@off, +@size) nonempty, @align-aligned,
 * inside an arena segment.  The value checks of HELLO (depths, wake
 * names), TABLE (a full-size table) and REGION (the region the size @want
 * says, the MR table's size, its three pieces aligned, inside a segment,
 * each in one of the @nfds descriptors, and every descriptor naming one).
 */
#define SHM_ARENA_SEG_SIZE	(256ul << 20)	/* sparse: address space only */
int shm_msg_nfds(uint32_t type);
bool shm_msg_shape_ok(const struct shm_msg *m, size_t len, int nfds, uint32_t types);
bool shm_piece_ok(uint64_t off, uint64_t size, uint64_t align);
bool shm_hello_ok(const struct shm_msg *m);
bool shm_table_msg_ok(uint64_t off);	/* TABLE: off[0], the overflow table */
struct shm_region_layout;
bool shm_region_msg_ok(const struct shm_msg *m, int nfds, const struct shm_region_layout *want);

/* --- mappings of peers' files, shared by every connection to them (shm_map.c) --- */

struct shm_mapping {
	void *addr;
	size_t size;
	dev_t dev;
	ino_t ino;
	int prot;
	int refs;
	bool keep;		/* a peer's arena segment: stays mapped unused */
	uint64_t idle_since;	/* (kept ones) when the last user went */
	struct shm_mapping *next, *prev;
};

/*
 * shm_map_fd - map a peer's memfd (after checking it is a shmem file sealed
 * against shrinking and growing, of at least @min_size bytes), sharing the
 * mapping with earlier maps of the same file; a shared mapping must also
 * cover @min_size.  Every access is then within a mapping of a file whose
 * size cannot change: a fault on it is impossible.  Returns NULL with
 * errno set (EINVAL: not such a file, or too small).
 */
struct shm_mapping *shm_map_fd(int fd, size_t min_size, int prot);
/* shm_map_fd for a caller that has fstat(@fd) already (@st). */
struct stat;
struct shm_mapping *shm_map_fd_stat(int fd, const struct stat *st, size_t min_size, int prot);
/*
 * One more reference to @m, which the caller holds, for a use that needs
 * @min_size bytes of it (checked against the mapping itself, not the
 * file): the same file named twice in one message is checked once.
 */
struct shm_mapping *shm_map_ref(struct shm_mapping *m, size_t min_size);
void shm_unmap(struct shm_mapping *m);
/*
 * A peer's arena segment is mapped again by its every next connection:
 * once unused it stays mapped, up to SHM_KEEP_IDLE of them (the oldest
 * go first).
 */
#define SHM_KEEP_IDLE	16
void shm_map_keep(struct shm_mapping *m);

/* --- the arena: shared memory peers only read (shm_arena.c) --- */

/* The pieces of one peer process (or, private, of none). */
struct shm_pool;

struct shm_aseg {
	uint8_t *addr;			/* our read-write mapping */
	size_t size;
	int fd;				/* what the pool's peer maps, read-only;
					 * -1 in the private pool */
	struct shm_pool *pool;
	struct shm_aseg *next;
};

enum shm_piece_kind {
	SHM_PIECE_TABLE,		/* a PD's MR table */
	SHM_PIECE_NOTIFY,		/* a CQ's notify word */
	SHM_PIECE_REGION,		/* a QP's region */
	SHM_PIECE_KINDS
};

/* A piece of a segment: addr = seg->addr + off, size its class's. */
struct shm_piece {
	struct shm_aseg *seg;		/* NULL: none */
	enum shm_piece_kind kind;
	size_t off;
	size_t size;
	uint8_t *addr;
	bool zero;			/* from shm_arena_get: all of it reads 0 */
};

/*
 * shm_arena_pool_get - the pool of the peer process @pid of user @uid (as
 * the kernel vouches for them), made if need be, held by the caller (a
 * connection) until shm_arena_pool_put.  NULL + errno.  Unused pools stay
 * for the next connection of the pair, up to SHM_POOL_IDLE of them.
 */
#define SHM_POOL_IDLE	8
struct shm_pool *shm_arena_pool_get(pid_t pid, uid_t uid);
void shm_arena_pool_put(struct shm_pool *pool);
/* Test hook: the peers' pools this process has; *idle_p: idle among them. */
int shm_arena_test_pools(unsigned int *idle_p);

/* A piece of @pool (NULL: the private pool, which no peer maps); -1 + errno. */
int shm_arena_get(struct shm_pool *pool, size_t size, enum shm_piece_kind kind,
		  struct shm_piece *p);
/*
 * Give a piece back for reuse; its first @dirty bytes may be nonzero and
 * are zeroed here -- unless @dirty is SHM_PIECE_UNZEROED: then it is given
 * back as it is, and its next owner (p->zero false) clears what it needs.
 */
#define SHM_PIECE_UNZEROED	((size_t)-1)
void shm_arena_put(struct shm_piece *p, size_t dirty);
/* Give a piece up without reuse: another process uses it too (fork). */
void shm_arena_drop(struct shm_piece *p);
struct shm_mapping *shm_arena_map_peer(int fd, uint64_t off, uint64_t size, const void **addr_p);
/* The piece [@off, @off + @size) of a segment @m mapped already (another
 * piece of the same message): a reference of its own. */
struct shm_mapping *shm_arena_map_again(struct shm_mapping *m, uint64_t off, uint64_t size,
					const void **addr_p);

/*
 * A PD's MR table or a CQ's notify word as one peer process sees it: a
 * copy in that process's pool, made by the first connection between them
 * through the PD or CQ, given back when the last one ends (shm_pd.c).
 */
struct shm_mirror {
	struct shm_pool *pool;
	struct shm_piece piece;		/* the table, or the word */
	struct shm_piece xpiece;	/* PD: the overflow table, once there is one */
	int refs;			/* connections through it */
	struct shm_mirror *next;
};

/* --- private objects --- */

struct shm_context {
	struct ferry_context ctx;
};

struct shm_pd {
	struct ferry_pd pd;
	pthread_mutex_t lock;		/* MR slots, QP list */
	struct shm_piece table_piece;	/* the MR table: the primary, private */
	struct shm_mr_entry *table;	/* MRs with remote access: peers read copies */
	uint32_t table_entries;		/* its slots, a power of two */
	/* Past those, slots [table_entries, SHM_MR_TABLE_ENTRIES) are in a
	 * full-size table made when the first one is needed, and announced
	 * to connected peers (SHM_MSG_TABLE) as blocks are. */
	struct shm_piece xtable_piece;
	struct shm_mr_entry *_Atomic xtable;
	/* Slots [1, hwm) have been used.  Scans stop there: a read of a
	 * shared-memory page allocates it, so a scan of the whole table would
	 * cost its full size in memory. */
	_Atomic uint32_t hwm;
	/* MRs without remote access (SHM_KEY_LOCAL): slots [0, local_hwm)
	 * have been used. */
	struct shm_mr_entry *_Atomic local[SHM_LOCAL_CHUNKS];
	_Atomic uint32_t local_hwm;
	struct shm_qp *qps;		/* connected QPs, for block announcements */
	/* The copies peers read, one per peer process (shm_pd_mirror_get);
	 * mirror_lock, taken inside lock and inside a QP's sq_lock, guards
	 * the list and the copying. */
	pthread_mutex_t mirror_lock;
	struct shm_mirror *mirrors;
	bool detached;			/* ferry_pd_detach: the table is not ours alone */
	/* A connection got some of our windows: when the last QP goes, they
	 * are taken back (shm_pd_renew_windows).  Set under a QP's sq_lock
	 * (shm_pd_windows_out), which the PD lock may not be taken under. */
	_Atomic bool windows_out;
};

struct shm_mr {
	struct ferry_mr mr;
	uint32_t index;
	uint64_t block_id;		/* the window peers reach it through, 0: none */
	uint64_t block_offset;		/* addr's offset in that window */
};

/*
 * A completion channel: ch.fd is an epoll set of its CQs' wake sockets,
 * or, for a single-CQ channel, the wake socket itself, which its one CQ
 * adopts.
 */
struct shm_channel {
	struct ferry_comp_channel ch;
	bool single;			/* ch.fd is the wake socket of one CQ */
	bool fd_given;			/* ch.fd is the caller's now (renumbered) */
	bool on_conn;			/* ch.fd is the CQ's QP's connection */
	struct shm_wake_name wake;	/* single: ch.fd's name */
	struct shm_cq *cq;		/* single: the CQ using it, if any */
};

/* A completion kept in the CQ's local ring: sends, and flushes. */
struct shm_lwc {
	struct ferry_wc wc;
	struct shm_qp *qp;
	uint64_t sq_seq;	/* SQ slot it retires (sends only) */
	int is_send;
};

struct shm_cq {
	struct ferry_cq cq;
	ferry_lock_t lock;		/* local ring, recv QP list, arm state */
	struct shm_lwc *ring;		/* local completions, grows as needed */
	uint32_t ring_cap, ring_head, ring_count;
	struct shm_qp **rqps;		/* QPs whose receives complete here */
	uint32_t nrqps, rqps_cap, rr_next;
	int nqps;			/* QPs using this CQ at all */
	_Atomic uint32_t nud;		/* UD QPs among rqps (written under lock) */
	int efd;			/* wake socket: the channel's epoll watches it,
					 * or it is the channel's (single channel) */
	struct shm_wake_name wake;	/* efd's name: peers wake us there */
	/* The QP whose connection is this CQ's channel (on_conn), else NULL. */
	struct shm_qp *conn_qp;
	bool detached;			/* ferry_cq_detach: the channel is shared */
	struct shm_piece notify_piece;	/* the notify word: the primary, private */
	struct shm_notify *notify;
	struct shm_mirror *mirrors;	/* the copies peers read (lock) */
	uint64_t gen;
	unsigned int events, acked;
	/* Raised (and futex-woken) for a sleeper (SHM_NOTIFY_FUTEX) by what
	 * completes in this process: flushes, the monitor's retries. */
	_Atomic uint32_t local_seq;
};

/*
 * A shared receive queue: a pool of receives in private memory (no peer
 * sees it), translated at post time as a QP's are.  Each QP on it has an
 * RQ of its own in its region (SHM_SRQ_RING at most, or the SRQ's
 * max_wr) holding a window of receives the peer has not delivered to
 * (SHM_SRQ_WINDOW at most) and those it has but we did not poll yet,
 * which this process tops up from the pool: at ferry_post_srq_recv, when it
 * polls the QP's completions, and when the QP's peer waits for a receive
 * and kicks the monitor (srq_kick).  So peers still read only rings that
 * one process writes, and can take no more than their window.
 * posted counts the WRs posted and not yet completed, in the pool or in
 * a window: the limit is checked against it when completions are taken.
 */
#define SHM_SRQ_WINDOW		8u	/* receives a peer may take, not delivered,
					 * at most (and no more than posted / QPs) */
#define SHM_SRQ_RING		256u	/* ... in a QP's RQ of up to this many */
struct shm_srq {
	struct ferry_srq srq;
	pthread_mutex_t lock;		/* pool, counts, limit; inside rq_lock */
	uint8_t *pool;			/* cap entries of stride bytes, a ring */
	size_t stride;
	uint32_t cap;			/* a power of two >= max_wr */
	uint32_t max_wr, max_sge, limit;
	uint64_t head, tail;		/* the pool holds [head, tail) */
	uint32_t posted;
	pthread_mutex_t qps_lock;	/* qps; before any QP's rq_lock */
	struct shm_qp **qps;		/* the QPs on it */
	uint32_t nqps, qps_cap;
	struct shm_srq *next;		/* in the process's list (the monitor's) */
};

static inline struct shm_srq *to_ssrq(struct ferry_srq *srq)
{
	return container_of(srq, struct shm_srq, srq);
}

/* A WR of ferry_post_send_direct's FERRY_DIRECT_NOCACHE: stores past our caches. */
#define SHM_SWQE_NOCACHE	(1u << 31)

/* A posted send, copied at post time. */
struct shm_swqe {
	uint64_t wr_id;
	enum ferry_wr_opcode opcode;
	unsigned int flags;		/* enum ferry_send_flags, SHM_SWQE_NOCACHE */
	uint32_t imm_data;
	uint64_t remote_addr;
	uint32_t rkey;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t num_sge;
	uint32_t inline_len;		/* > 0: payload copied into the slot */
	/* Followed by cap.max_send_sge struct ferry_sge, then the inline bytes. */
};

/* A posted receive, kept privately (the peer sees a translated copy). */
struct shm_rwqe {
	uint64_t wr_id;
	uint64_t total_len;
	uint32_t num_sge;
	bool bounce;		/* published with SHM_RQ_BOUNCE */
	uint64_t filled;	/* bounce: bytes copied in so far */
};

/* A receive's own SGE, kept for bounced SENDs and for publishing. */
struct shm_lsge {
	uint64_t addr;
	uint32_t length;
	uint32_t direct;	/* a peer of another user may write it: a window
				 * of an MR with remote write access */
};

/* The connection of a QP to its peer, made by ferry_qp_exchange. */
struct shm_conn {
	int sock;			/* AF_UNIX SOCK_SEQPACKET, watched for hang-up */
	/* sock is our recv CQ's channel as well (ferry_comp_channel_on_conn):
	 * its number is the caller's, and ERR shuts it down to wake pollers. */
	bool on_channel;
	pid_t peer_pid;			/* from the HELLO's credentials */
	uid_t peer_uid;
	const uint8_t *peer_bounce;	/* the peer's staging ring (shm_conn_bounces) */
	bool bounces;			/* peer_uid is not both of ours */
	/* The arena's pool of that process, holding our region and the
	 * copies of our PD's table and recv CQ's word that it reads. */
	struct shm_pool *pool;
	struct shm_mirror *table_mirror, *notify_mirror;
	/* /proc/<pid>/mem of the peer, for memory outside blocks (shm_peer.c),
	 * opened at first use, or SHM_PEER_MEM_*; peer_mem_err: why refused. */
	int peer_mem;
	int peer_mem_err;
	uint32_t peer_qpn;
	uint32_t peer_rq_size;		/* validated copies from HELLO */
	uint32_t peer_rq_sge;
	size_t peer_rq_stride;
	struct shm_mapping *peer_region_map;	/* the segment, read-only */
	const struct shm_region *peer_region;	/* the peer's region in it */
	struct shm_delivery *peer_dq;	/* slot 0 of the peer's DQ ring (shm_dq_entry) */
	struct shm_delivery *my_dq;	/* slot 0 of ours (deliveries to the peer) */
	/* The last rkey resolved to mapped memory, to skip the table walk. */
	uint32_t rkey_cached;
	uint32_t rkey_access;
	uint64_t rkey_addr, rkey_length;
	uint8_t *rkey_base;		/* mapped address of rkey_addr */
	struct shm_mapping *peer_table_map;	/* segments, read-only */
	struct shm_mapping *peer_notify_map;
	const struct shm_mr_entry *peer_table;
	uint32_t peer_table_entries;	/* validated copy from REGION */
	struct shm_mapping *peer_xtable_map;	/* its overflow table, once announced */
	const struct shm_mr_entry *peer_xtable;
	const struct shm_notify *peer_notify;
	struct shm_wake_name peer_wake;	/* the peer's recv CQ's wake socket */
	struct shm_wake_name peer_kick;	/* wakes the peer's monitor (RNR) */
	uint64_t last_signalled_gen;
	struct shm_peer_block {
		uint64_t id;
		struct shm_mapping *map;
	} *blocks;			/* peer's ferry_alloc blocks we mapped */
	uint32_t nblocks, blocks_cap;
	uint64_t *announced;		/* our block ids the peer has */
	uint32_t nannounced, announced_cap;
	bool table_announced;		/* our PD's overflow table: sent */
	bool dead;			/* socket hung up */
	bool watched;			/* registered with the monitor */
	/* While the exchange runs (qp->xconn): the peer's message it waits
	 * for, and whether our BLOCKs and REGION are out (from then on
	 * ferry_reg_mr announces new blocks on it, as on an established one). */
	enum shm_xstate {
		SHM_X_HELLO,		/* the peer's HELLO */
		SHM_X_REGION,		/* its BLOCKs and REGION */
		SHM_X_READY,		/* our READY sent: its READY */
	} xstate;
	bool blocks_sent;
};

struct shm_qp {
	struct ferry_qp qp;
	struct ferry_qp_cap cap;
	int sq_sig_all;
	ferry_lock_t sq_lock;		/* SQ, connection, state changes */
	ferry_lock_t rq_lock;		/* RQ */

	/* Attributes set by modify_qp. */
	uint32_t access;
	uint8_t min_rnr_timer, rnr_retry, retry_cnt, timeout;
	uint8_t max_rd_atomic, max_dest_rd_atomic, port_num;
	uint16_t pkey_index;
	enum ferry_mtu path_mtu;
	uint32_t rq_psn, sq_psn, dest_qp_num;
	struct ferry_ah_attr ah_attr;	/* kept for ferry_query_qp only */

	/* Send queue: posted [sq_exec, sq_head) wait; [sq_retired, sq_exec) done. */
	uint8_t *sq;			/* sq_size slots of sq_stride bytes */
	size_t sq_stride;
	uint32_t sq_size;
	uint64_t sq_head, sq_exec;
	_Atomic uint64_t sq_retired;	/* advanced by poll_cq */
	uint64_t dq_seq;		/* peer receives we consumed (deliveries made) */
	uint64_t peer_rq_known;		/* peer's rq_prod as last read: credits */
	_Atomic bool async_error;	/* the peer broke the protocol: go to ERR */
	int rnr_left;			/* retries left for the WR at sq_exec */
	bool rnr_pending;		/* the WR at sq_exec waits for a receive */
	bool hangup_pending;		/* the peer went before RTS: ERR at RTS */
	uint64_t rnr_deadline_ns;

	/* Receive queue (private half; the region holds the published half).
	 * rq is a ring of rq_cap entries (heap), grown as more receives are
	 * outstanding: an idle socket's 16 take 384 bytes, not a page. */
	struct shm_rwqe *rq;
	uint32_t rq_cap;
	uint32_t rq_size;
	uint64_t rq_prod, rq_cons;
	struct shm_rsge *rq_pending;	/* receives posted before the region exists */
	struct shm_lsge *rq_local;	/* the same receives' SGEs as posted */
	/* Bounced SENDs: bytes of the WR at sq_exec staged so far, and bytes
	 * staged in all (our region's bounce_prod; the peer's bounce_cons
	 * for its ring, ours). */
	uint64_t bounce_done;
	uint64_t bounce_prod, bounce_cons;
	uint64_t bounce_retry_ns;	/* the monitor's next look while waiting for room */
	bool bounce;			/* the connection bounces (shm_conn_bounces) */
	uint8_t *bounce_ring;		/* our staging ring, in the region */

	/* The region we own and the connection. */
	struct shm_piece region_piece;	/* the region, in the peer's pool */
	struct shm_region *region;	/* its head, region_head_off into the piece */
	size_t region_size, region_head_off;
	size_t rq_stride;
	struct shm_conn *conn;
	struct shm_conn *xconn;		/* exchange begun (HELLO sent), not ended */

	/* Joined out of band (RTR with dest_qp_num and an address vector,
	 * no exchange before): the rendezvous under way or done, shm_join.c.
	 * join_wait: sends do not run straight from post_send but ask
	 * shm_join_sq_hold first (no peer yet, or a PSN still to check). */
	struct shm_join *join;
	bool join_wait;
	struct shm_ud *ud;		/* UD QPs only (shm-ud.h) */
	/* Shared receive queue (shm_srq.c): the RQ above is the QP's window
	 * on it, topped up from it; srq_last_wqe: LAST_WQE_REACHED raised
	 * (rq_lock). */
	struct shm_srq *srq;
	bool srq_last_wqe;

	struct shm_qp *pd_next;		/* in shm_pd.qps */
	struct shm_qp *rnr_next;	/* in the monitor's RNR list */
	bool in_rnr_list;
};

static inline struct shm_pd *to_spd(struct ferry_pd *pd)
{
	return container_of(pd, struct shm_pd, pd);
}
static inline struct shm_mr *to_smr(struct ferry_mr *mr)
{
	return container_of(mr, struct shm_mr, mr);
}
static inline struct shm_cq *to_scq(struct ferry_cq *cq)
{
	return container_of(cq, struct shm_cq, cq);
}
static inline struct shm_qp *to_sqp(struct ferry_qp *qp)
{
	return container_of(qp, struct shm_qp, qp);
}

/* shm_pd.c, shm_mr.c, shm_cq.c: what connections and the data path use */
const struct shm_mr_entry *shm_mr_lookup_local(struct shm_pd *pd, uint32_t lkey);
const struct shm_mr_entry *shm_pd_next_entry(struct shm_pd *spd, uint32_t *pos);
int shm_conn_announce_table(struct shm_conn *conn, const struct shm_piece *p);
const struct shm_mr_entry *shm_conn_peer_xentry(struct shm_conn *conn, uint32_t idx);
void shm_cq_add_local(struct shm_cq *cq, const struct shm_lwc *lwc);
void shm_cq_signal_local(struct shm_cq *cq, bool solicited_or_error);
void shm_cq_attach_recv(struct shm_cq *cq, struct shm_qp *qp);
void shm_cq_detach_recv(struct shm_cq *cq, struct shm_qp *qp);
void shm_pd_add_qp(struct shm_pd *pd, struct shm_qp *qp);
static inline void shm_pd_windows_out(struct shm_pd *spd)
{
	atomic_store_explicit(&spd->windows_out, true, memory_order_relaxed);
}
/*
 * The copy of the PD's MR table, or of the CQ's notify word, in @pool: the
 * one there (one more connection through it), or a new one, filled from
 * the primary.  NULL + errno.  _put: a connection through it ends; the
 * last one gives it back (zeroed).  A QP's sq_lock may be held.
 */
struct shm_mirror *shm_pd_mirror_get(struct shm_pd *spd, struct shm_pool *pool);
void shm_pd_mirror_put(struct shm_pd *spd, struct shm_mirror *m);
struct shm_mirror *shm_cq_mirror_get(struct shm_cq *scq, struct shm_pool *pool);
void shm_cq_mirror_put(struct shm_cq *scq, struct shm_mirror *m);
void shm_pd_remove_qp(struct shm_pd *pd, struct shm_qp *qp);

/* shm_wake.c: waking a CQ by its socket's name */
/* A bound, non-blocking wake socket (parked) and its name; -1 + errno. */
int shm_wake_socket(struct shm_wake_name *name);
/* A wake socket (@fd, named @name) no CQ uses any more: kept for the next
 * shm_wake_socket, or closed.  Only one nobody else holds. */
void shm_wake_socket_put(int fd, const struct shm_wake_name *name);
static inline bool shm_wake_name_ok(const struct shm_wake_name *name)
{
	return name->len >= 2 && name->len <= SHM_WAKE_NAME_MAX && name->bytes[0] == '\0';
}
/* Make the CQ named @name poll readable. */
void shm_wake(const struct shm_wake_name *name);
/* Take a wake-up queued at @fd: 1, 0 if none (EAGAIN), -1 + errno. */
int shm_wake_drain(int fd);
/* Test hook: the process's sender socket (made if need be), or -1. */
int shm_wake_test_sender(void);

/* shm_conn.c: exchange, announcements, monitor */
int shm_qp_exchange(struct ferry_qp *qp, int sock, uint32_t *peer_qpn_p);
/* In steps (the provider's qp_exchange_begin/step/abort): send HELLO; take
 * what the peer sent and answer it, EAGAIN while it is not all there; drop
 * an exchange under way. */
int shm_qp_exchange_begin(struct ferry_qp *qp, int sock);
int shm_qp_exchange_step(struct ferry_qp *qp, uint32_t *peer_qpn_p);
void shm_qp_exchange_abort(struct ferry_qp *qp);
/* Drop qp->xconn (there is one), and our region with it; sq_lock held. */
void shm_qp_exchange_drop(struct shm_qp *qp);
/* Where new blocks are announced: the connection, or an exchange's whose
 * blocks went out already (NULL: neither); sq_lock held. */
struct shm_conn *shm_qp_announce_conn(struct shm_qp *qp);
/* Free @conn, @qp's (established, or its exchange's), and what it holds. */
void shm_conn_destroy(struct shm_qp *qp, struct shm_conn *conn);
int shm_conn_announce_block(struct shm_conn *conn, uint64_t id, int fd);
struct shm_mapping *shm_conn_peer_block(struct shm_conn *conn, uint64_t id);
/* Wake the peer's recv CQ whose channel is the connection (SHM_NOTIFY_CONN). */
void shm_conn_wake(struct shm_conn *conn);
/*
 * shm_conn_move - the connection's socket takes number @to (dup3 onto it;
 * -1: the lowest free one, close-on-exec if @cloexec), held twice there
 * (ours and the caller's), and our hold of the old number is let go.
 * Returns the number, or -1 + errno.  sq_lock held.
 */
int shm_conn_move(struct shm_qp *qp, int to, bool cloexec);
void shm_monitor_rnr(struct shm_qp *qp);
void shm_monitor_forget(struct shm_qp *qp);
/* In a child of fork: a monitor of its own, watching the inherited QPs. */
void shm_monitor_fork_child(void);
void shm_monitor_watch(struct shm_qp *qp);
/* The name peers kick this process's monitor by (started if need be). */
int shm_monitor_kick_name(struct shm_wake_name *name);
/* The QP's region, in the pool of @conn's peer, sized for its queue. */
/* The bytes of one receive-queue entry with @rq_sge SGEs. */
static inline size_t shm_rq_stride(uint32_t rq_sge)
{
	return 8 + rq_sge * sizeof(struct shm_rsge);
}
int shm_region_create(struct shm_qp *qp, struct shm_conn *conn);
/*
 * Does the connection bounce SENDs (and its regions have staging rings)?
 * When its peer is another user: its uid (the real one, as the kernel
 * puts it in credentials) is not both of ours -- as shm_peer.c decides
 * whose memory it may reach.  Such a peer gets no window of our receive
 * buffers, only of memory registered for remote access.  Both ends decide
 * alike unless one runs with two uids (setuid): then the regions' sizes
 * disagree, the exchange fails, and the shim goes TCP.  Known once the
 * peer's HELLO is in.
 */
static inline bool shm_conn_bounces(const struct shm_conn *conn)
{
	return conn->bounces;	/* decided once, at the HELLO (shm_hello_recv) */
}

#define SHM_ACCESS_REMOTE (FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ | \
			   FERRY_ACCESS_REMOTE_ATOMIC)

/*
 * Is the window of an MR with @access writable?  With remote write or
 * atomic access; or with local write access alone, for the SENDs of peers
 * of our user (shm_conn_may_map), whose receives land there.
 */
static inline bool shm_window_writable(uint32_t access)
{
	return (access & (FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_ATOMIC)) ||
	       ((access & FERRY_ACCESS_LOCAL_WRITE) && !(access & SHM_ACCESS_REMOTE));
}

/* May the peer of @conn have the window of an MR with @access? */
static inline bool shm_conn_may_map(const struct shm_conn *conn, uint32_t access)
{
	return !shm_conn_bounces(conn) || (access & SHM_ACCESS_REMOTE);
}
/*
 * shm_region_release - the QP lets go of its region, and of @conn (may be
 * NULL; its peer-region mapping is taken): reused at once when the peer
 * has let go of ours, else once it does (or dies).
 */
void shm_region_release(struct shm_qp *qp, struct shm_conn *conn);

/* shm_peer.c: a peer process's memory outside blocks */
#define SHM_PEER_MEM_UNOPENED	(-1)
#define SHM_PEER_MEM_REFUSED	(-2)
/*
 * shm_peer_rw - read or write the peer's memory at @addr (sq_lock held):
 * bytes moved, or -1 + errno (EPERM: a peer of another user; ESRCH: the
 * peer exited, or its pid is another process's).
 */
ssize_t shm_peer_rw(struct shm_conn *conn, bool write, const struct iovec *iov, int n,
		    uint64_t addr);

/*
 * May @qp run the exchange?  In INIT (ferry_qp_exchange, the CM); or,
 * joined out of band, in RTR or RTS: the join thread runs it when the
 * peer turns up, after the application's modify_qp (shm_join.c).
 */
static inline bool shm_qp_may_exchange(const struct shm_qp *qp)
{
	enum ferry_qp_state s = qp->qp.state;

	return s == FERRY_QPS_INIT ||
	       (qp->join && (s == FERRY_QPS_RTR || s == FERRY_QPS_RTS));
}

/* shm_join.c: QPs joined out of band, the ibverbs way */
/*
 * shm_join_prepare - @qp goes to RTR towards (@peer_lid, @peer_qpn) with no
 * exchange behind it, expecting @rq_psn: make its join (qp->join,
 * join_wait); @peer_lid 0: nobody reachable.  sq_lock held.
 * 0, or -1 + errno.  shm_join_register, once sq_lock is let go: hand it
 * to the join thread (started if need be), which finds the peer.
 */
int shm_join_prepare(struct shm_qp *qp, uint16_t peer_lid, uint32_t peer_qpn, uint32_t rq_psn);
void shm_join_register(struct shm_qp *qp);
/* Stop and free @qp's join, if any; no QP lock held (may wait for the thread). */
void shm_join_forget(struct shm_qp *qp);
/*
 * shm_join_sq_hold - may the send queue of a joined @qp run?  false: yes.
 * true: not now -- no peer yet (the thread retries, then fails the head
 * WR with RETRY_EXC_ERR on RC, drops the WRs on UC), or the PSN did not
 * match (RC: retry exceeded at once).  sq_lock held, QP in RTS.
 */
bool shm_join_sq_hold(struct shm_qp *qp);

/* shm_qp.c: QP objects and the state machine */
uint32_t shm_qp_num_take(void);	/* a new QP number of this process */
struct ferry_qp *shm_create_qp(struct ferry_pd *pd, struct ferry_qp_init_attr *attr);
int shm_modify_qp(struct ferry_qp *qp, struct ferry_qp_attr *attr, int mask);
/* shm_port.c: the port and the process's LID and GID. */
int shm_query_port(struct ferry_context *ctx, uint8_t port, struct ferry_port_attr *attr);
int shm_query_gid(struct ferry_context *ctx, uint8_t port, int index, union ferry_gid *gid);
int shm_query_pkey(struct ferry_context *ctx, uint8_t port, int index, uint16_t *pkey);
struct sockaddr_un;
/* The abstract name that LID @lid's holder binds (for tests, and the join). */
socklen_t shm_port_lid_name(uint16_t lid, struct sockaddr_un *un);
/* The process's LID (claimed if need be); 0 or -1 + errno. */
int shm_port_self_lid(uint16_t *lid_p, uint32_t *netns_p);
/* The LID's socket, listening (non-blocking), the port's to close; -1 + errno. */
int shm_port_listener(uint16_t *lid_p);
/* The LID a GID of ours names; -1 + EHOSTUNREACH for any other GID. */
int shm_port_gid_lid(const union ferry_gid *gid, uint16_t *lid_p);
int shm_query_qp(struct ferry_qp *qp, struct ferry_qp_attr *attr,
		 struct ferry_qp_init_attr *init_attr);
int shm_destroy_qp(struct ferry_qp *qp);
void shm_qp_set_error(struct shm_qp *qp, const char *why);	/* sq_lock held */
void shm_qp_flush_sq(struct shm_qp *qp);			/* sq_lock held */

/* shm_srq.c: what QPs on an SRQ use of it */
/* The RQ a QP on @srq gets (its window), in @cap; its PD must be the SRQ's. */
int shm_srq_qp_caps(struct shm_srq *srq, struct ferry_pd *pd, struct ferry_qp_cap *cap);
int shm_srq_attach(struct shm_srq *srq, struct shm_qp *qp);
void shm_srq_detach(struct shm_qp *qp);
/* Top the QP's window up from its SRQ: rq_lock held (_locked) or taken. */
void shm_srq_fill_locked(struct shm_qp *qp);
void shm_srq_fill(struct shm_qp *qp);
/* @n receives of the QP's window completed; rq_lock held. */
void shm_srq_consumed(struct shm_qp *qp, uint32_t n);
/* The QP is in ERR: its window goes back to the SRQ, then LAST_WQE_REACHED
 * (once); rq_lock held (_locked) or taken. */
void shm_srq_qp_error_locked(struct shm_qp *qp);
void shm_srq_qp_error(struct shm_qp *qp);
/* RESET or destroy: the window goes back to the SRQ; rq_lock held. */
void shm_srq_qp_reset(struct shm_qp *qp);
/* The monitor was kicked: top up the QPs whose peers wait. */
void shm_srq_monitor_pass(void);

/* shm_data.c (sends) and shm_recv.c (receives): the data path */
/* shm_recv.c, for SRQs: translate @wr's SGEs with @spd's MRs into @rs and
 * @ls (at most @max_sge); place a translated receive in the QP's RQ (0 or
 * ENOMEM); publish and kick the waiting peer after placing.  rq_lock held. */
int shm_rq_translate(struct shm_pd *spd, const struct ferry_recv_wr *wr, uint32_t max_sge,
		     struct shm_rsge *rs, struct shm_lsge *ls, uint64_t *total_p);
int shm_rq_place(struct shm_qp *qp, uint64_t wr_id, uint64_t total, uint32_t num_sge,
		 const struct shm_rsge *rs, const struct shm_lsge *ls);
void shm_rq_posted(struct shm_qp *qp);
int shm_post_send(struct ferry_qp *qp, struct ferry_send_wr *wr, struct ferry_send_wr **bad);
int shm_post_send_direct(struct ferry_qp *qp, struct ferry_send_wr *wr, unsigned int how);
int shm_post_recv(struct ferry_qp *qp, struct ferry_recv_wr *wr, struct ferry_recv_wr **bad);
int shm_poll_recv(struct shm_qp *qp, int n, struct ferry_wc *wc);	/* rq_lock taken */
void shm_sq_progress(struct shm_qp *qp);			/* sq_lock held */
void shm_sq_settle_rnr(struct shm_qp *qp);			/* no lock held */
void shm_rq_publish(struct shm_qp *qp);				/* rq_lock held */
void shm_sq_complete(struct shm_qp *qp, uint64_t seq, const struct shm_swqe *s,
		     enum ferry_wc_status status, uint32_t byte_len);	/* sq_lock held */
uint64_t shm_rnr_delay_ns(uint32_t code);
static inline size_t shm_region_head_size(void)
{
	return (sizeof(struct shm_region) + 63) & ~(size_t)63;
}
/* Slots are computed, never initialised: an idle QP's SQ stays untouched memory. */
static inline struct shm_swqe *shm_sq_slot(struct shm_qp *qp, uint64_t seq)
{
	return (struct shm_swqe *)(qp->sq + (seq & (qp->sq_size - 1)) * qp->sq_stride);
}

static inline struct ferry_sge *shm_swqe_sge(const struct shm_swqe *s)
{
	return (struct ferry_sge *)(uintptr_t)(s + 1);
}

static inline uint8_t *shm_swqe_inline(struct shm_qp *qp, const struct shm_swqe *s)
{
	return (uint8_t *)(shm_swqe_sge(s) + qp->cap.max_send_sge);
}

/* Where things are in a region. */

/*
 * Where things are in a region: the DQ ring, the head, the RQ ring.  The
 * head sits SHM_REGION_DQ_LEAD bytes into a page (the region starts on
 * one: arena pieces of a page or more are page-aligned), after the DQ's
 * first slots and before the RQ's first entries.  A protocol constant,
 * not the page size: both ends compute the same layout.
 */
#define SHM_REGION_PAGE		4096u
#define SHM_REGION_DQ_LEAD	1024u

struct shm_region_layout {
	size_t head_off;	/* offset of struct shm_region; the DQ ring ends there */
	size_t bounce_off;	/* the staging ring, if any */
	size_t size;		/* whole region */
};

/*
 * The peer's MR table slot @idx, or NULL (0, or past any table it has
 * announced); the QP's sq_lock held.  Every RDMA operation asks: the first
 * table inline, the overflow one out of line.
 */
static inline const struct shm_mr_entry *shm_conn_peer_entry(struct shm_conn *conn,
							      uint32_t idx)
{
	if (idx < conn->peer_table_entries)
		return idx ? &conn->peer_table[idx] : NULL;
	return shm_conn_peer_xentry(conn, idx);
}

/* The private record of receive @seq; rq_lock held. */
static inline struct shm_rwqe *shm_rwqe_at(struct shm_qp *qp, uint64_t seq)
{
	return &qp->rq[seq & (qp->rq_cap - 1)];
}

static inline struct shm_region_layout shm_region_layout(uint32_t rq_size, size_t rq_stride,
							 uint32_t dq_size, bool bounce)
{
	size_t dq_bytes = (size_t)dq_size * sizeof(struct shm_delivery);
	/* The head is a 64-byte aligned struct: a ring of one 32-byte slot
	 * (a peer that posts at most one receive) still leads by 64. */
	size_t dq_lead = (dq_bytes + 63) & ~(size_t)63;
	size_t lead = dq_lead < SHM_REGION_DQ_LEAD ? dq_lead : SHM_REGION_DQ_LEAD;
	struct shm_region_layout l;

	l.head_off = ((dq_lead - lead + SHM_REGION_PAGE - 1) & ~(size_t)(SHM_REGION_PAGE - 1)) +
		     lead;
	l.size = l.head_off + shm_region_head_size() + (size_t)rq_size * rq_stride;
	l.bounce_off = (l.size + SHM_REGION_PAGE - 1) & ~(size_t)(SHM_REGION_PAGE - 1);
	if (bounce)
		l.size = l.bounce_off + SHM_BOUNCE_SIZE;
	return l;
}

static inline uint8_t *shm_rq_entry(uint8_t *region, size_t stride, uint32_t size, uint64_t seq)
{
	return region + shm_region_head_size() + (seq & (size - 1)) * stride;
}

/* Slot of delivery @seq in the DQ ring of @region (its head). */
static inline struct shm_delivery *shm_dq_entry(uint8_t *region, uint32_t dq_size, uint64_t seq)
{
	return (struct shm_delivery *)region - 1 - (seq & (dq_size - 1));
}

/* Test hook: the QP's own region, the memory its peer reads (its head is
 * qp->region, inside). */
int shm_qp_test_region(struct ferry_qp *qp, void **addr_p, size_t *len_p);

/* The provider's clock, util's (monotime.h). */
static inline uint64_t shm_now_ns(void)
{
	return monotime_ns();
}

#endif /* FERRY_SHM_INTERNAL_H */
