/*
 * sock_stat.h - the statistics segment of a process's ferry sockets: the
 * layout ferry-stat(1) reads, and the counter updates of the data path.
 *
 * Each process that has ferry sockets keeps one memfd named "ferry-stat"
 * (in /proc/PID/fd as "/memfd:ferry-stat (deleted)"), created with its
 * first socket, close-on-exec and sealed against shrinking and growing.
 * It holds a header and an array of fixed-size slots; every socket holds
 * one slot from creation to close.
 *
 * Writers.  Only the owning process writes.  The identity of a slot
 * (state, addresses, transport, ring sizes) changes at connect, accept and
 * close, under a sequence counter that is odd while it changes; the
 * counters are monotonic byte counts, each with one writer at a time (the
 * lock of the side that moves those bytes), updated with relaxed stores:
 * no lock, no atomic read-modify-write, no system call on the data path.
 * Sender and receiver counters sit on different cache lines.
 *
 * Readers (ferry-stat) map the segment read-only and take a slot by
 * reading seq, the slot, and seq again: a change or an odd value means the
 * slot was being written, or freed and taken again, and the read is
 * retried.  Everything read is another process's memory and is checked:
 * the header against the file size and the seals, every slot's enums, and
 * the counters are only subtracted with clamping.
 *
 * After fork the child keeps the parent's mapping for the sockets it
 * inherited (their counters keep going into the parent's slots, which the
 * child never frees) and makes a segment of its own for its first new
 * socket; the inherited descriptor of the parent's segment is closed in
 * the child.
 *
 * The header also counts, per process, how the program's connects under
 * the preload shim went (enum sock_stat_route): over ferry, or to kernel
 * TCP and why.  Any thread of the owner adds to them (relaxed atomic
 * adds, once per connect, never on the data path).
 *
 * The layout is an interface between processes of possibly different
 * builds: change it only together with SOCK_STAT_VERSION.
 */
#ifndef FERRY_SOCK_STAT_H
#define FERRY_SOCK_STAT_H

#include <stdint.h>

#define SOCK_STAT_NAME		"ferry-stat"	/* memfd name */
#define SOCK_STAT_MAGIC		0x3154535952524546ull	/* "FERRYST1", little-endian */
#define SOCK_STAT_VERSION	2	/* 2: the header counts connects by route */
#define SOCK_STAT_HEADER_SIZE	128		/* slot 0 starts here */
#define SOCK_STAT_SLOTS		65536		/* slots per process */
#define SOCK_STAT_SLOTS_MAX	(1u << 20)	/* most a reader accepts */

/* Life of a socket, as ferry-stat prints it. */
enum sock_stat_state {
	SOCK_STAT_FREE,		/* slot not in use */
	SOCK_STAT_UNCONN,	/* created or bound */
	SOCK_STAT_LISTEN,
	SOCK_STAT_SYN_SENT,	/* connecting */
	SOCK_STAT_SYN_RECV,	/* accepted by the CM, not established yet */
	SOCK_STAT_ESTAB,	/* connected; see flags for how it ends */
	SOCK_STAT_FAILED,	/* connect failed */
	SOCK_STAT_NSTATES
};

/* How an established connection is ending: bits of flags, only gained. */
#define SOCK_STAT_F_PEER_SHUT_WR	(1u << 0)	/* peer sent SHUTDOWN or DISCONNECT */
#define SOCK_STAT_F_PEER_GONE		(1u << 1)	/* peer sent DISCONNECT */
#define SOCK_STAT_F_RESET		(1u << 2)	/* QP error */
#define SOCK_STAT_F_SHUT_RD		(1u << 3)	/* shutdown(SHUT_RD) */
#define SOCK_STAT_F_SHUT_WR		(1u << 4)	/* shutdown(SHUT_WR) */
#define SOCK_STAT_F_DISC_SENT		(1u << 5)	/* DISCONNECT sent */
#define SOCK_STAT_F_TIMEDOUT		(1u << 6)	/* keepalive gave up */

enum sock_stat_transport {
	SOCK_STAT_TP_NONE,	/* no connection resources (yet) */
	SOCK_STAT_TP_SHM,
	SOCK_STAT_TP_VERBS,
	SOCK_STAT_TP_OTHER,
	SOCK_STAT_TP_TCP,	/* ferry's user-space iWARP (appended: rows keep their values) */
	SOCK_STAT_NTRANSPORTS
};

/*
 * Where a connect() of the program's under the preload shim went: over
 * ferry, or to kernel TCP for this reason.  Values are indexes into
 * sock_stat_header.connects: append only.
 */
enum sock_stat_route {
	SOCK_STAT_RT_FERRY,		/* over ferry */
	SOCK_STAT_RT_NO_LISTENER,	/* nothing listens on the port */
	SOCK_STAT_RT_NO_FERRY,		/* a TCP listener no ferry listener speaks for */
	SOCK_STAT_RT_NOT_OWNER,		/* its ferry rendezvous is not the port owner's */
	SOCK_STAT_RT_REFUSED,		/* the ferry listener refused (short of descriptors) */
	SOCK_STAT_RT_TIMEOUT,		/* no answer in the shim's bound, or a stalled handshake */
	SOCK_STAT_RT_NO_FDS,		/* this process was out of descriptors or memory */
	SOCK_STAT_RT_REMOTE,		/* not this host, and no RDMA device */
	SOCK_STAT_RT_EXCLUDED,		/* ferry.conf or FERRY_EXCLUDE_* keep it on TCP */
	SOCK_STAT_RT_UNSUPPORTED,	/* a connect the shim does not serve (TCP Fast Open) */
	SOCK_STAT_RT_ERROR,		/* anything else: FERRY_LOG=info says what */
	SOCK_STAT_NROUTES
};
#define SOCK_STAT_ROUTES_MAX	12	/* room in the header */

_Static_assert(SOCK_STAT_NROUTES <= SOCK_STAT_ROUTES_MAX, "the routes fit the header");

/* The name ferry-stat and the shim's log give route @r ("?" if none). */
static inline const char *sock_stat_route_name(unsigned int r)
{
	static const char *const names[SOCK_STAT_NROUTES] = {
		[SOCK_STAT_RT_FERRY] = "ferry",
		[SOCK_STAT_RT_NO_LISTENER] = "no-listener",
		[SOCK_STAT_RT_NO_FERRY] = "no-ferry-listener",
		[SOCK_STAT_RT_NOT_OWNER] = "not-port-owner",
		[SOCK_STAT_RT_REFUSED] = "refused",
		[SOCK_STAT_RT_TIMEOUT] = "timeout",
		[SOCK_STAT_RT_NO_FDS] = "no-descriptors",
		[SOCK_STAT_RT_REMOTE] = "remote",
		[SOCK_STAT_RT_EXCLUDED] = "excluded",
		[SOCK_STAT_RT_UNSUPPORTED] = "unsupported",
		[SOCK_STAT_RT_ERROR] = "error",
	};

	return r < SOCK_STAT_NROUTES ? names[r] : "?";
}

struct sock_stat_header {
	uint64_t magic;		/* SOCK_STAT_MAGIC, written last */
	uint32_t version;	/* SOCK_STAT_VERSION */
	uint32_t header_size;	/* SOCK_STAT_HEADER_SIZE */
	uint32_t slot_size;	/* sizeof(struct sock_stat_slot) */
	uint32_t nslots;	/* slots the segment has room for */
	uint32_t used;		/* slots [0, used) have been handed out (release) */
	int32_t pid;		/* the process that created it (its own namespace) */
	/* Connects under the shim by enum sock_stat_route; monotonic. */
	uint64_t connects[SOCK_STAT_ROUTES_MAX];
};

/* An address: IPv4 in the first 4 bytes of addr; port in host order. */
struct sock_stat_addr {
	uint16_t family;	/* AF_INET, AF_INET6, or 0: none */
	uint16_t port;
	uint32_t scope_id;
	uint8_t addr[16];
};

struct sock_stat_slot {
	/* Identity: the owner writes it under seq (odd while it changes). */
	uint32_t seq;
	uint32_t state;		/* enum sock_stat_state */
	int32_t fd;		/* the socket's descriptor in the owner */
	uint32_t transport;	/* enum sock_stat_transport */
	uint32_t rbuf_size;	/* receive ring, bytes */
	uint32_t sbuf_size;	/* send ring, bytes */
	uint32_t flags;		/* SOCK_STAT_F_*: atomic OR, outside seq */
	uint32_t free_next;	/* the owner's free list: slot index + 1, 0 ends */
	struct sock_stat_addr local;
	struct sock_stat_addr peer;
	uint8_t reserved_identity[48];

	/* Sender (slock). */
	uint64_t tx_bytes __attribute__((aligned(64)));	/* stream bytes sent */
	uint64_t tx_ring_in;	/* bytes copied into the send ring */
	uint64_t tx_nocache;	/* bytes stored past the caches (sock_copy.c) */
	uint8_t reserved_tx[40];

	/* Receiver (rlock) and progress (cqlock). */
	uint64_t rx_bytes __attribute__((aligned(64)));	/* stream bytes read */
	uint64_t rx_ring_in;	/* bytes that arrived in the receive ring */
	uint64_t tx_ring_out;	/* send-ring bytes whose writes completed */
	uint8_t reserved_rx[40];
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct sock_stat_header) <= SOCK_STAT_HEADER_SIZE,
	       "the header fits before slot 0");
_Static_assert(sizeof(struct sock_stat_slot) == 256, "slots are 256 bytes");
_Static_assert(SOCK_STAT_HEADER_SIZE % 64 == 0, "slots are cache-line aligned");

/*
 * sock_stat_add - add @n to a counter of a slot.  Only the one writer of
 * that counter calls it, so a load and a store suffice; both are atomic
 * so that a reader in another process never sees half a value.
 */
static inline void sock_stat_add(uint64_t *counter, uint64_t n)
{
	__atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + n,
			 __ATOMIC_RELAXED);
}

#endif /* FERRY_SOCK_STAT_H */
