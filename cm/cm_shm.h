/*
 * cm_shm.h - what the files of the CM's shm transport share: cm_shm.c
 * (per-id state, sockets, the transport table), cm_shm_listen.c (bind,
 * listen, requests, accept, reject) and cm_shm_connect.c (the client).
 * Everything here runs in the thread that owns the id (cm-internal.h):
 * the CM thread once it has an event of the id, before that the caller's.
 */
#ifndef FERRY_CM_SHM_H
#define FERRY_CM_SHM_H

#include <sys/types.h>
#include <sys/time.h>
#include <sys/un.h>

#include <event2/event.h>

#include "cm-internal.h"
#include "cm_msg.h"

/* Rendezvous names: "<prefix>/<port>/<inode>/<cookie in hex>" (cm_shm_owner.c). */
#define SHM_CM_NAME_PREFIX	"ferry/cm/v2"
/* How long a client waits for ACCEPT or REJECT (the user may be slow),
 * unless its id asks for less (ferry_cm_connect_timeout: the shim). */
#define SHM_CM_CONNECT_TIMEOUT_MS	30000
/*
 * How long the QP exchange after ACCEPT may take, on either side.  A
 * healthy peer needs well under a millisecond; a stalled one holds only
 * its own pending connection, this long.
 */
#define SHM_CM_HANDSHAKE_MS	2000
/* How long an accepted socket may take to send its CONNECT_REQ. */
#define SHM_CM_REQUEST_TIMEOUT_MS	2000
/* A full listen backlog: try again after this long. */
#define SHM_CM_RETRY_MS		2
/* A listener out of descriptors or memory waits this long, doubling up to
 * the maximum, before it accepts again (rather than spin on the error). */
#define SHM_CM_BACKOFF_MIN_MS	5
#define SHM_CM_BACKOFF_MAX_MS	500
/* Connections taken per wake-up of a listener, to stay fair. */
#define SHM_CM_ACCEPT_BATCH	64

struct shm_cm_pending;

/*
 * A client's request and where to send it, from ferry_connect until the
 * answer (ACCEPT, REJECT, failure): most of a connecting id's state, and
 * none of an established one's, so it is held apart and freed then.
 */
struct shm_cm_request {
	struct cm_msg_param param;
	uint8_t req[CM_MSG_MAX_SIZE];
	size_t req_len;
	uint64_t deadline_ms;
	struct cm_msg accept;		/* the listener's ACCEPT, for ESTABLISHED */
};

/* The shm transport's state of one id (cm_id_priv.tp_data). */
struct shm_cm_id {
	struct cm_id_priv *id;
	int bind_fd;			/* holds the rendezvous name; listens after listen */
	struct event *accept_ev;	/* bind_fd readable */
	/* The rendezvous is shared with other processes (fork): accept_ev
	 * is gone, connections are taken one by one on the program's accept
	 * (ferry_cm_listen_take), so that none waits in a process that does
	 * not accept. */
	bool shared;
	/* accept() failed for want of descriptors or memory: accept_ev is
	 * off until this timer, which doubles while the want lasts. */
	struct event *backoff_ev;
	unsigned int backoff_ms;
	/* The kernel TCP socket holding the port, unless the caller holds it
	 * (ferry_cm_hold_port); listens along with bind_fd. */
	int port_fd;
	struct event *reset_ev;		/* port_fd readable: a TCP client to turn away */
	struct shm_cm_pending *pending;	/* accepted, waiting for CONNECT_REQ */
	int sock;			/* the connection, -1 */
	/* Reply, request or hang-up watch of the socket: one for the id's
	 * whole life, aimed anew by shm_cm_arm, armed and stopped by
	 * whichever thread owns the id without waking the CM thread. */
	struct cm_watch watch;
	/* The retry timer (a full backlog), rare: a libevent event, added
	 * and deleted like the watch. */
	struct event *retry_ev;
	bool armed;			/* the watch or retry_ev armed, its callback not run */
	bool retry_armed;		/* ... and it was retry_ev */
	bool held;			/* the watch taken by a sleeping caller (ferry_cm_hold) */
	uint64_t armed_deadline_ms;	/* its timeout's end, 0: none */
	struct shm_cm_request *request;	/* client, until the outcome */
	/* The QP exchange after ACCEPT, either side: its end, and the QP
	 * attributes settled for RTR/RTS once it completes. */
	uint64_t xdeadline_ms;
	struct cm_qp_param xqpp;
};

/* A connection a listener took that has not sent its request yet. */
struct shm_cm_pending {
	struct shm_cm_id *listener;
	int sock;
	struct event *ev;
	struct shm_cm_pending *next, **pprev;
};

/*
 * The kernel's listening TCP socket of a port, as far as a rendezvous
 * needs it: who owns it, and what names it (cm_shm_owner.c).
 */
struct shm_cm_owner {
	uid_t uid;		/* the socket's owner (its inode's, as sock_diag says) */
	uint64_t inode;
	uint64_t cookie;	/* SO_COOKIE */
	uint16_t port;
};

struct shm_cm_id *shm_cm_state(struct cm_id_priv *id);
/* The state of @id, made if it has none yet; NULL on ENOMEM. */
struct shm_cm_id *shm_cm_state_get(struct cm_id_priv *id);
void shm_cm_pending_free(struct shm_cm_pending *p);

/* The CM's clock in ms, util's (monotime.h). */
static inline uint64_t shm_cm_now_ms(void)
{
	return monotime_ms();
}
struct timeval shm_cm_tv(uint64_t ms);
/* A non-blocking, close-on-exec AF_UNIX SOCK_SEQPACKET socket, or -1. */
int shm_cm_socket(void);
/* shutdown() and close the connection socket, drop its event. */
void shm_cm_close_sock(struct shm_cm_id *st);
/* One record: its length, 0 at EOF, -1 + errno (EBADMSG: oversized, fds). */
ssize_t shm_cm_recv(int sock, uint8_t *buf, size_t len);
int shm_cm_send(int sock, const struct cm_msg *msg);
void shm_cm_conn_param(struct ferry_conn_param *cp, const struct cm_msg *msg);
void shm_cm_msg_param(struct cm_msg_param *mp, const struct ferry_conn_param *cp);
uint8_t shm_cm_min(uint8_t a, uint8_t b);
/* After the QP exchange: watch the socket for EV_CLOSED only. */
int shm_cm_watch_hangup(struct shm_cm_id *st);
/*
 * shm_cm_exchange_step - one step of the id's QP exchange: 1 when it is
 * complete (*peer_qpn_p set), 0 when it waits for the peer (the watch is
 * armed for @cb, until xdeadline_ms), -1 + errno when it failed or its
 * deadline passed (ETIMEDOUT): the exchange is over, the socket open.
 */
int shm_cm_exchange_step(struct shm_cm_id *st, event_callback_fn cb, uint32_t *peer_qpn_p);
/*
 * shm_cm_arm - aim the id's watch at @fd for @what (EV_READ, EV_CLOSED),
 * calling @cb, and arm it (timeout @tv, may be NULL); @fd -1: the retry
 * timer, @tv only.  The loop owns the id from now (in_loop).  The owner's
 * thread; nothing of the id may be armed.
 */
int shm_cm_arm(struct shm_cm_id *st, int fd, short what, event_callback_fn cb,
	       const struct timeval *tv);
/* Stop the id's watch or timer (waits out its callback if it runs). */
void shm_cm_disarm(struct shm_cm_id *st);
/* First thing in a callback of the id's watch or timer: it is no longer armed. */
void shm_cm_fired(struct shm_cm_id *st);

/* cm_shm_owner.c */
/* The rendezvous name of the ferry listener holding @o. */
void shm_cm_name(const struct shm_cm_owner *o, struct sockaddr_un *un, socklen_t *len_p);
/* What names @fd, a TCP socket bound to its port; -1 with errno. */
int shm_cm_owner_of_fd(int fd, struct shm_cm_owner *owner_p);
/*
 * shm_cm_owner_of - the listening TCP socket a connection to @dst would
 * reach, asked of the kernel (sock_diag); -1 with ENOENT when none would.
 * Any thread, never blocks.
 */
int shm_cm_owner_of(const struct sockaddr *dst, struct shm_cm_owner *owner_p);

/* cm_shm_probe.c */
/* cm_transport.probe: sock_diag, then what connects learnt (below). */
enum ferry_cm_probe shm_cm_probe(const struct sockaddr *dst);
/* A connect to @dst dialled the rendezvous of @o: none there (@why
 * NO_FERRY), or not the port owner's (NOT_OWNER).  Probes believe it for a
 * while. */
/*
 * The owner of @dst's listening socket as a probe found it within the last
 * few milliseconds, for the connect that follows it: true once per probe
 * (the answer is taken), false when none is that fresh.
 */
bool shm_cm_probe_owner_take(const struct sockaddr *dst, struct shm_cm_owner *owner_p);
void shm_cm_probe_learn(const struct sockaddr *dst, const struct shm_cm_owner *o,
			enum ferry_cm_probe why);

/* cm_shm_listen.c */
int shm_cm_bind(struct cm_id_priv *id);
int shm_cm_listen(struct cm_id_priv *id, int backlog);
int shm_cm_accept_begin(struct cm_id_priv *id, const struct ferry_conn_param *param);
int shm_cm_accept(struct cm_id_priv *id, const struct ferry_conn_param *param);
int shm_cm_reject(struct cm_id_priv *id, const void *pdata, uint8_t len);
/* ferry_cm_progress of a listener: take the connections waiting at its
 * rendezvous, here; 1 when it took any. */
int shm_cm_listen_progress(struct shm_cm_id *st);

/* cm_shm_connect.c */
int shm_cm_connect(struct cm_id_priv *id, const struct ferry_conn_param *param);

#endif /* FERRY_CM_SHM_H */
