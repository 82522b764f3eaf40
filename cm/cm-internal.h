/*
 * cm-internal.h - the connection manager's private objects and the
 * interface between the CM core (cm/cm.c, cm/cm_event.c, cm/cm_thread.c,
 * cm/cm_addr.c) and its transports (cm/cm_shm.c, later cm/cm_verbs.c).
 *
 * Threads.  One CM thread per process runs a libevent loop (started on
 * first use, restarted lazily in a child after fork).  An id has one owner
 * at a time, and only the owner changes its state or its transport's
 * per-id state, so ids need no locks and a transport's callbacks never
 * race with the calls:
 *
 *  - While the loop can reach the id (cm_id_priv.in_loop: some event of
 *    its transport leads to it), the CM thread owns it: the public calls
 *    check their arguments in the caller's thread and run their work there
 *    with cm_thread_call(), which waits for the result (cm_id_call).
 *  - Before that (an id being resolved or connected, or one whose accept
 *    runs) the caller's thread owns it, and a call on it runs right there,
 *    sparing two thread switches, provided every transport involved says
 *    so (cm_transport.calls_inline).  The transport sets in_loop before it
 *    hands the loop its first event of the id, and touches the id no more
 *    in that call.  A call that ends the id's life in the loop (accept,
 *    reject, disconnect, destroy) may take the id back first
 *    (cm_transport.unloop: cm_watch_del waits out a callback that runs).
 *
 * Two things always run in the caller's thread: QP creation
 * (ferry_cm_create_qp, cm_transport.qp_init), which may block, and
 * cm_transport.accept (the shm transport sends its side of the QP
 * exchange there, and hands the rest to the CM thread: nothing waits for
 * a peer, neither there nor in the CM thread).
 *
 * Events.  Transports report outcomes with cm_event_report(); the core
 * queues them on the id's channel (an eventfd in semaphore mode: readable
 * while events are queued).  A synchronous id (no channel) has a private
 * channel its calls wait on.  One lock (cm_event_lock in cm_event.c)
 * protects every queue and every id's count of unacknowledged events.
 */
#ifndef FERRY_CM_INTERNAL_H
#define FERRY_CM_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <sys/types.h>

#include <event2/util.h>
#include <event2/event.h>

#include <ferry/cm.h>

#include "cm-export.h"
#include "core-export.h"
#include "monotime.h"

struct event_base;
struct cm_id_priv;

/* Life of an id, as rdma_cm's states (only what ferry needs). */
enum cm_state {
	CM_IDLE,
	CM_ADDR_BOUND,		/* ferry_bind_addr done */
	CM_ADDR_QUERY,
	CM_ADDR_RESOLVED,
	CM_ROUTE_QUERY,
	CM_ROUTE_RESOLVED,
	CM_CONNECT,		/* client: request sent, waiting for the reply */
	CM_CONNECT_REQ,		/* server side id of an incoming request */
	CM_ACCEPTING,		/* server: ferry_accept running */
	CM_ESTABLISHED,
	CM_DISCONNECT,		/* over (disconnected, rejected, failed) */
	CM_LISTEN,
	CM_DESTROYING,
};

/* The most transports a build can have (core's table, transport.h). */
#define CM_TP_MAX FERRY_TRANSPORTS_MAX

/* QP attributes the transport settled for the RTR/RTS transitions. */
struct cm_qp_param {
	uint8_t max_rd_atomic;		/* our initiator depth */
	uint8_t max_dest_rd_atomic;	/* our responder resources */
	uint8_t retry_count;
	uint8_t rnr_retry_count;
};

/*
 * A transport of the CM (libevent's eventop is the model): one const
 * table per transport, the `cm` of its entry in core's table of
 * transports (core/transport.c), which also holds its name and its
 * address rule (which destinations it serves), in order of preference.
 * Every member is mandatory unless noted; an operation a transport
 * cannot do points at a function failing with ENOTSUP.
 *
 * Unless noted, an operation runs in the CM thread (never block there for
 * long: callbacks of every connection of the process wait), returns 0 or
 * -1 with errno, and reports its asynchronous outcome later with
 * cm_event_report() / cm_id_disconnected().  The core has checked the
 * arguments and the id's state and sets the state the call leads to.
 * Per-id state lives in *cm_tp_data(id, tp).
 */
struct cm_transport {
	/*
	 * Calls on an id the loop cannot reach (in_loop false) may run in the
	 * caller's thread: the transport sets in_loop before it first gives
	 * the loop an event leading to the id.  False: every call hops to the
	 * CM thread, whatever in_loop says.
	 */
	bool calls_inline;
	/*
	 * Caller's thread, for a call that ends the id's life in the loop or
	 * starts it anew (accept, reject, disconnect, destroy): take the id
	 * back from the loop, waiting for a callback of it that runs, and
	 * clear in_loop, so that the call can run right there.  -1: the loop
	 * keeps it (the call goes to the CM thread).
	 */
	int (*unloop)(struct cm_id_priv *id);
	/* Caller's thread: the call after unloop failed; give the id back. */
	void (*reloop)(struct cm_id_priv *id);

	/*
	 * Would a connect to @dst find a listener (ferry_cm_probe)?  UNREACHED
	 * only where the entry's address rule (reaches) is false; MAYBE
	 * when only a connect can tell.
	 * Cheaper than a connect by far: no descriptor, no CM thread, and
	 * for a destination it does not reach no system call.  Any thread.
	 */
	enum ferry_cm_probe (*probe)(const struct sockaddr *dst);
	/*
	 * Reserve id's source address (route.addr.src_addr) for listening.
	 * Port 0: pick one and store it there.  Fail with EADDRINUSE when
	 * taken, EACCES when the caller may not have it (shm holds the TCP
	 * port, as the kernel allows), or EADDRNOTAVAIL / ENODEV when this
	 * transport cannot serve that address at all (the core then goes on
	 * without it).
	 */
	int (*bind)(struct cm_id_priv *id);
	int (*listen)(struct cm_id_priv *id, int backlog);
	/* Addresses are in id->id.route.addr; report ADDR_RESOLVED/ERROR. */
	int (*resolve_addr)(struct cm_id_priv *id, int timeout_ms);
	/* Report ROUTE_RESOLVED or ROUTE_ERROR. */
	int (*resolve_route)(struct cm_id_priv *id, int timeout_ms);
	/*
	 * Caller's thread: move the id's new QP (id->id.qp, in RESET) to
	 * INIT; cm_qp_to_init_default() does it with ferry's defaults.
	 */
	int (*qp_init)(struct cm_id_priv *id);
	/* Report ESTABLISHED, or REJECTED / UNREACHABLE / CONNECT_ERROR. */
	int (*connect)(struct cm_id_priv *id, const struct ferry_conn_param *param);
	/*
	 * CM thread, as ferry_accept begins (the id is CM_ACCEPTING): answer
	 * the request, or prepare to.  A transport that gives the caller's
	 * thread the id for accept clears in_loop here.  On failure the core
	 * moves the id to CM_DISCONNECT.
	 */
	int (*accept_begin)(struct cm_id_priv *id, const struct ferry_conn_param *param);
	/*
	 * Caller's thread; use cm_id_call() for loop state.  Send our side
	 * and return 0; once the peer's side is in, connect the QP
	 * (cm_qp_to_rts) and report ESTABLISHED, here or later in the CM
	 * thread (CONNECT_ERROR if it never comes), never waiting for the
	 * peer.  On failure the core moves the id to CM_DISCONNECT.
	 */
	int (*accept)(struct cm_id_priv *id, const struct ferry_conn_param *param);
	int (*reject)(struct cm_id_priv *id, const void *pdata, uint8_t len);
	/* Tell the peer; the core then reports DISCONNECTED locally. */
	int (*disconnect)(struct cm_id_priv *id);
	/* Release the transport's state of @id; tell a connected peer. */
	void (*destroy)(struct cm_id_priv *id);
	/* Optional: an established quiet id lets go of what the provider
	 * holds as well (ferry_cm_let_go). */
	void (*let_go)(struct cm_id_priv *id);
	/*
	 * Optional, caller's thread (ferry_cm_progress): if what the id waits
	 * for from its peer is there, take the id back from the loop and run
	 * the step the CM thread would have run; 1 when it did, else 0.
	 * Never waits for the peer.
	 */
	int (*progress)(struct cm_id_priv *id);
	/*
	 * Optional, caller's thread (ferry_cm_hold, ferry_cm_release): take
	 * the id's read watch from the loop for a caller that sleeps on its
	 * descriptor instead (returned; *ms_p lowered to the watch's
	 * deadline), -1 when there is none; then take the step if what it
	 * waits for has come or its time is up (1), or give the watch back
	 * (0).  A held id is the caller's: the loop does nothing for it.
	 */
	int (*hold)(struct cm_id_priv *id, int *ms_p);
	int (*release)(struct cm_id_priv *id);
};

/* cm_shm_transport, cm_verbs_transport, cm_tcp_transport: declared in
 * transport.h. */

/*
 * cm_tcp_take - CM thread: @fd, a TCP client the shm transport's socket
 * accepted on @listener's port, for the tcp transport (cm_tcp_listen.c)
 * if it serves that listener: true, and @fd is its (kept or closed);
 * false, and @fd is still the caller's.
 */
bool cm_tcp_take(struct cm_id_priv *listener, int fd);

/* An event channel: the public struct, a queue, and who uses it. */
struct cm_channel {
	struct ferry_event_channel ch;	/* ch.fd: eventfd, EFD_SEMAPHORE */
	pthread_cond_t cond;		/* an event was queued */
	struct cm_event_priv *head, *tail;	/* queued, not yet retrieved */
	unsigned int nids;		/* ids using it */
	unsigned int forks;		/* cm_event.c's count of forks when it was made */
};

/* An event: the public one, and the private data it points into. */
struct cm_event_priv {
	struct ferry_cm_event event;
	struct cm_event_priv *next;
	uint8_t pdata[FERRY_MAX_PRIVATE_DATA_ACCEPT];
};

struct cm_id_priv {
	struct ferry_cm_id id;
	struct cm_channel *chan;	/* id.channel's, or a synchronous id's own */
	bool sync;			/* created without a channel */
	enum cm_state state;		/* the owner's (see Threads above) */
	bool in_loop;			/* the CM thread owns the id */
	/* No DISCONNECTED wanted (ferry_cm_quiet): once established, the
	 * transport need not watch the connection for hang-up. */
	bool quiet;
	/* How long a connect waits for the listener's answer, in ms; 0: the
	 * transport's default (ferry_cm_connect_timeout). */
	unsigned int connect_timeout_ms;
	const struct cm_transport *tp;	/* chosen by resolve / request */
	void *tp_data[CM_TP_MAX];	/* per transport, by ferry_transports[] index */
	bool bound;			/* ferry_bind_addr reserved src_addr */
	bool src_given;			/* src_addr is ferry_resolve_addr's, not derived */
	struct cm_qp_param peer;	/* request ids: what the client asked */
	unsigned int events_out;	/* reported and not acked (cm_event_lock) */
	pthread_cond_t acked;		/* events_out dropped (cm_event_lock) */
	bool owns_pd, owns_send_cq, owns_recv_cq;	/* ferry_cm_create_qp made them */
	bool detached;			/* ferry_cm_detach: close, never shut down */
	/* ferry_cm_hold_port: the caller's TCP socket holds the port to bind. */
	bool port_held;
	int port_held_fd;
	/* ferry_cm_adopt_rendezvous: a listening rendezvous of the held port,
	 * inherited by fork, to listen on instead of binding the name anew. */
	bool rdv_given;
	int rdv_given_fd;
};

static inline struct cm_id_priv *to_cm_id(struct ferry_cm_id *id)
{
	return container_of(id, struct cm_id_priv, id);
}

/* --- cm_thread.c --- */

/* The CM thread's event base (starting the thread if needed), or NULL. */
struct event_base *cm_thread_base(void);
/* Is the caller the CM thread? */
bool cm_thread_is_self(void);
/*
 * cm_thread_call - run @fn(@arg) in the CM thread and wait for it; returns
 * what @fn returned, with @fn's errno.  From the CM thread: calls @fn.
 */
int cm_thread_call(int (*fn)(void *arg), void *arg);

/*
 * cm_id_call - run @fn(@arg), a call on @id through transport @tp (NULL:
 * any transport), in the thread that owns the id: the caller's when the
 * loop cannot reach it and every transport involved allows it, else the
 * CM thread's (cm_thread_call).
 */
int cm_id_call(struct cm_id_priv *id, const struct cm_transport *tp,
	       int (*fn)(void *arg), void *arg);
/*
 * cm_id_call_taking - as cm_id_call, for a call that ends the id's life in
 * the loop or starts it anew: first take the id from the loop if @tp can
 * (cm_transport.unloop), which spares the trip to the CM thread.
 */
int cm_id_call_taking(struct cm_id_priv *id, const struct cm_transport *tp,
		      int (*fn)(void *arg), void *arg);

/* --- cm_watch.c --- */

/* States of a cm_watch (changed under the watch set's lock). */
enum cm_watch_state {
	CM_WATCH_IDLE,		/* not in the set */
	CM_WATCH_ARMED,		/* in the set, its callback not taken yet */
	CM_WATCH_FIRING,	/* its callback runs in the CM thread */
};

/*
 * A socket the CM thread watches, one shot: armed and stopped from any
 * thread without waking the CM thread (libevent's event_add/event_del
 * from another thread do).  Its callback runs in the CM thread with
 * EV_READ, EV_CLOSED (hang-up or error) or EV_TIMEOUT.  Kept by the
 * watch's owner; it must be stopped (cm_watch_del) before it is freed.
 */
struct cm_watch {
	int fd;
	short what;			/* EV_READ and/or EV_CLOSED */
	event_callback_fn cb;
	void *arg;
	uint64_t deadline_ms;		/* CLOCK_MONOTONIC ms, 0: none */
	enum cm_watch_state state;
	bool in_callback;		/* its callback runs, and may have armed it again */
	pid_t pid;			/* process that armed it */
	struct cm_watch *next, **pprev;	/* the timed list, while armed with a deadline */
};

/* Arm @w (idle) on @fd; 0, or -1 with errno. */
int cm_watch_add(struct cm_watch *w, int fd, short what, event_callback_fn cb, void *arg,
		 uint64_t deadline_ms);
/* Arm @w again as it was last armed (same deadline). */
int cm_watch_readd(struct cm_watch *w);
/*
 * Stop @w: once this returns its callback does not run and is not
 * running (unless the caller is that callback).  True if it was armed.
 */
bool cm_watch_del(struct cm_watch *w);

/* --- cm_event.c --- */

/*
 * cm_event_report - queue an event for @id (dropped if @id is being
 * destroyed).  @param (may be NULL) carries the peer's private data and
 * connection parameters; for CONNECT_REQUEST @id is the new id and
 * @listen_id its listener.  Updates id->state for the event.
 */
void cm_event_report(struct cm_id_priv *id, struct cm_id_priv *listen_id,
		     enum ferry_cm_event_type type, int status,
		     const struct ferry_conn_param *param);
struct cm_channel *cm_channel_new(void);
void cm_channel_free(struct cm_channel *chan);
/* Count an id using @chan (ferry_destroy_event_channel refuses then). */
void cm_channel_add_id(struct cm_channel *chan);
void cm_channel_remove_id(struct cm_channel *chan);
/*
 * Drop the queued events of @id; for a listener also the queued
 * CONNECT_REQUESTs on it, whose ids are destroyed.  CM thread.
 */
void cm_event_purge(struct cm_id_priv *id);
/* Wait until every event of @id retrieved by the user is acked. */
void cm_event_wait_acked(struct cm_id_priv *id);
/*
 * cm_sync_wait - synchronous ids: wait for the outcome of the call just
 * made; 0 when it is @want, else -1 with errno from the event.  The event
 * stays in id.event until the next call or destroy.  Others: returns 0.
 */
int cm_sync_wait(struct cm_id_priv *id, enum ferry_cm_event_type want);
/* Synchronous ids: ack the event kept in id.event, if any. */
void cm_sync_release(struct cm_id_priv *id);
/* The channel's events for ferry_get_request: get and keep in the new id. */
int cm_sync_get_request(struct cm_id_priv *listen, struct cm_id_priv **id_p);

/* --- cm.c: ids --- */

/* A new id for an incoming request on @listener (same channel, context). */
struct cm_id_priv *cm_id_new_request(struct cm_id_priv *listener,
				     const struct cm_transport *tp);
/* Tear down an id in the CM thread (transport, queued events). */
void cm_id_teardown(struct cm_id_priv *id);
/* Free an id no user knows about (a request never reported). */
void cm_id_free_unreported(struct cm_id_priv *id);
/*
 * cm_id_disconnected - the connection of @id is over: QP to ERR, report
 * DISCONNECTED and, for an id with a QP, TIMEWAIT_EXIT.  CM thread.
 */
void cm_id_disconnected(struct cm_id_priv *id);

/* The transport's per-id state slot. */
void **cm_tp_data(struct cm_id_priv *id, const struct cm_transport *tp);

/* --- cm_qp.c: the id's QP --- */

int cm_qp_to_init_default(struct cm_id_priv *id);
/* Move the id's QP from INIT through RTR to RTS, connected to @dest_qpn. */
int cm_qp_to_rts(struct cm_id_priv *id, uint32_t dest_qpn,
		 const struct cm_qp_param *param);
void cm_qp_to_error(struct cm_id_priv *id);

/* --- cm_addr.c: addresses, and the CM's side of the transport table --- */

/* The CM part of transport @i of core's table (ferry_transports[]). */
static inline const struct cm_transport *cm_transport_at(size_t i)
{
	return ferry_transports[i].cm;
}
/* The transport FERRY_TRANSPORT forces, NULL if none; -1 ENODEV (logged)
 * if it names none of this build. */
int cm_transport_forced(const struct cm_transport **tp_p);
/* The first transport reaching @dst (or the forced one); NULL + log if none. */
const struct cm_transport *cm_transport_for(const struct sockaddr *dst);
/* The per-process device of @tp (opened once, kept open), NULL + errno. */
struct ferry_context *cm_transport_context(const struct cm_transport *tp);

socklen_t cm_addr_len(const struct sockaddr *sa);
bool cm_addr_is_wildcard(const struct sockaddr *sa);
bool cm_addr_is_loopback(const struct sockaddr *sa);
/* Loopback, or an address of an interface of this network namespace. */
bool cm_addr_is_local(const struct sockaddr *sa);
uint16_t cm_addr_port(const struct sockaddr *sa);	/* host order */
void cm_addr_set_port(struct sockaddr *sa, uint16_t port);
/* A kernel TCP socket bound to @src, for its port (the shm and tcp
 * listeners; port 0: the kernel's pick, written into @src); -1 errno. */
int cm_port_reserve(struct sockaddr *src);
/* "127.0.0.1" / "::1": the address alone, in @buf of INET6_ADDRSTRLEN. */
const char *cm_addr_ntop(const struct sockaddr *sa, char *buf, size_t len);
/* The wildcard address of @family with @port. */
void cm_addr_wildcard(int family, uint16_t port, struct sockaddr_storage *ss);
/* A port of the ephemeral range (32768..60999), pseudo-random.  Any thread. */
uint16_t cm_addr_ephemeral_port(void);
/* A source address for reaching @dst from this host (same family). */
void cm_addr_source_for(const struct sockaddr *dst, struct sockaddr_storage *src);

#endif /* FERRY_CM_INTERNAL_H */
