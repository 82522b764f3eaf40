/*
 * cm-export.h - what the connection manager offers the socket layer above
 * it, beyond the public API of <ferry/cm.h>: calls the stream sockets and,
 * through them, the preload shim need to share connections across fork,
 * to hold a port with the program's own TCP socket, to ask cheaply
 * whether a destination has a ferry listener, and to hand a connection's
 * socket over to the stream socket.  Nothing here is part of libferry's
 * installed API (lib/libferry.sym).
 *
 * Every call is on a struct ferry_cm_id or ferry_event_channel of the
 * public API; errors are the CM's convention: 0, or -1 with errno.
 */
#ifndef FERRY_CM_EXPORT_H
#define FERRY_CM_EXPORT_H

#include <ferry/cm.h>

/*
 * ferry_cm_detach - this process lets go of a connection another process
 * holds too (after fork): from now on destroying @id closes this
 * process's copies only and changes nothing the other process or the
 * peer sees -- no shutdown of the connection socket.  (ferry_pd_detach
 * does the same for the connection's PD.)
 */
void ferry_cm_detach(struct ferry_cm_id *id);
/*
 * ferry_cm_quiet - @id (a listener: the ids of its connections too) wants
 * no DISCONNECTED event once established, so its transport may leave the
 * connection unwatched: on shm the CM thread then is not woken by every
 * peer that goes (the provider's monitor still is, and takes the QP to
 * ERR).  Call it on a fresh id, before connect or listen.  For stream
 * sockets, whose peers end in band and whose connected ids' events go to
 * a channel nobody reads.
 */
void ferry_cm_quiet(struct ferry_cm_id *id);
/*
 * ferry_cm_hold_port - the port that @id (fresh) will bind and listen on
 * is held by @fd, the caller's kernel TCP socket bound to it, which the
 * caller makes listen (the preload shim: the program's own socket).  The
 * shm transport then names its rendezvous after that socket instead of
 * reserving the port with a TCP socket of its own (see cm/cm_shm_owner.c).
 * @fd need only stay open until ferry_bind_addr returns.
 */
int ferry_cm_hold_port(struct ferry_cm_id *id, int fd);
/*
 * Listeners shared by fork (cm/cm_shm_listen.c, shm only).  The rendezvous
 * of a listener is a listening AF_UNIX socket that every process holding
 * it may accept from, as every holder of a TCP listener may; but a CM id
 * and its thread are one process's.  So a listener that fork shares stops
 * taking connections on its own (ferry_cm_listen_share): each process then
 * takes one when its program accepts (ferry_cm_listen_take), and a child
 * makes its own listener on the inherited socket
 * (ferry_cm_adopt_rendezvous).  All: 0 or -1 with errno.
 *
 * ferry_cm_rendezvous_fd - the listening rendezvous socket of @id, to poll
 * (readable: a connection waits that some holder may take); -1 with
 * ENOTSUP when no shm listener is behind @id.  Stays @id's.
 */
int ferry_cm_rendezvous_fd(struct ferry_cm_id *id);
/* ferry_cm_listen_share - @id (listening) takes connections only when
 * asked from now on; those it took already go on to their events. */
int ferry_cm_listen_share(struct ferry_cm_id *id);
/*
 * ferry_cm_listen_take - a shared listener takes one waiting connection
 * (non-blocking): 0, and its request comes as CONNECT_REQUEST; EAGAIN
 * when none waits (another process took it), or accept(2)'s errno
 * (EMFILE ...).
 */
int ferry_cm_listen_take(struct ferry_cm_id *id);
/*
 * ferry_cm_offer_tcp - @fd, a TCP client the caller's own socket accepted
 * on the port listener @listener holds (ferry_cm_hold_port), for the tcp
 * transport when FERRY_TRANSPORT=tcp forces it: its first bytes are
 * peeked (at most half a second's wait) and an MPA Request is taken: 1,
 * @fd is the CM's now (closed or kept), the connection comes as
 * CONNECT_REQUEST.  0: not taken, @fd is still the caller's, unread (not
 * forced, not MPA, no tcp behind @listener).  -1 with errno.  Any thread
 * but the CM's.
 */
int ferry_cm_offer_tcp(struct ferry_cm_id *listener, int fd);
/*
 * ferry_cm_progress - take the next step of @id's connect, accept or
 * listen in the caller's thread when what it waits for has come (the
 * listener's answer, the peer's side of the QP exchange, connections at
 * a listener's rendezvous), rather than leave it to the CM thread: on a
 * caller that polls anyway, a thread switch less per step.  Never waits
 * for the peer; what was done comes as events, as it would have.  1 when
 * a step was taken, 0 when nothing had come (or the transport has no
 * such steps).  The caller serializes its calls on @id with this one.
 */
int ferry_cm_progress(struct ferry_cm_id *id);
/*
 * ferry_cm_hold - a caller about to sleep until @id's next step can run
 * (a blocking connect) takes that step from the CM thread: the descriptor
 * to poll for POLLIN, *@ms_p (a poll timeout, -1: none) lowered to the
 * step's deadline; -1 when @id has no such step (nothing is held).  The
 * wake-up then goes to the caller alone, not to the CM thread and from it
 * to the caller.  ferry_cm_release - after the sleep, however it ended:
 * the step runs here if what it waits for has come or its deadline has
 * passed (1), else it goes back to the CM thread (0).  Every hold is
 * released, by the same caller, its calls on @id serialized with these.
 */
int ferry_cm_hold(struct ferry_cm_id *id, int *ms_p);
int ferry_cm_release(struct ferry_cm_id *id);
/*
 * ferry_cm_adopt_rendezvous - @id (fresh, ferry_cm_hold_port'd with the
 * TCP socket @fd was made for) listens, shared, on @fd: a listening
 * rendezvous inherited by fork, which it owns from a successful
 * ferry_bind_addr on.  EINVAL at bind when @fd is not that socket's.
 */
int ferry_cm_adopt_rendezvous(struct ferry_cm_id *id, int fd);
/*
 * ferry_cm_connect_timeout - a connect of @id waits at most @ms for the
 * listener's answer (not for the QP exchange after it), then reports
 * UNREACHABLE with ETIMEDOUT; 0: the transport's default (30 s on shm,
 * where the user may accept by hand).  For the socket layer under the
 * shim, which would rather fall back to TCP than wait.  Call it on a
 * fresh id, before connect.  Honoured by the shm transport.
 */
void ferry_cm_connect_timeout(struct ferry_cm_id *id, unsigned int ms);

struct sockaddr;
/* What ferry_cm_probe can tell of a destination without connecting. */
enum ferry_cm_probe {
	FERRY_CM_PROBE_MAYBE,		/* a ferry listener may answer: connect to learn */
	FERRY_CM_PROBE_REMOTE,		/* no transport reaches it (not this host, no device) */
	FERRY_CM_PROBE_NO_LISTENER,	/* nothing listens on its port */
	FERRY_CM_PROBE_NO_FERRY,	/* a TCP listener no ferry listener speaks for */
	FERRY_CM_PROBE_NOT_OWNER,	/* its ferry rendezvous is not the port owner's */
	FERRY_CM_PROBE_UNKNOWN,		/* the kernel would not say who listens */
	/* Internal to the transports: this one does not reach it, ask the next. */
	FERRY_CM_PROBE_UNREACHED,
};
/*
 * ferry_cm_probe - would a connect to @dst find a ferry listener?  For the
 * preload shim, which connects over TCP when not, and wants to know that
 * for what TCP alone costs: in the caller's thread, no CM thread, no
 * descriptor of its own, at most one round trip to the kernel (shm asks
 * sock_diag who listens, and remembers for a while which TCP listeners
 * a connect found no ferry listener behind, cm/cm_shm_probe.c); a
 * destination no transport reaches costs no system call at all.  Only
 * MAYBE leads to a connect that may succeed.  Any thread.
 */
enum ferry_cm_probe ferry_cm_probe(const struct sockaddr *dst);
/*
 * ferry_cm_let_go - a quiet @id, established, keeps nothing of its
 * connection the provider holds as well (shm: its socket, so that the
 * stream socket can own it alone, ferry_comp_channel_on_conn).  EINVAL
 * for any other id, or where there is nothing to let go (verbs).
 */
int ferry_cm_let_go(struct ferry_cm_id *id);

/* --- cm_event.c --- */

struct ferry_event_channel;
struct ferry_cm_event;

/*
 * ferry_cm_event_poll - the next event of @channel if one is queued, else
 * -1 with EAGAIN.  Unlike ferry_get_cm_event it never sleeps and never
 * asks the fd whether it is non-blocking: a caller that polls in a loop
 * makes no system call while nothing is queued.
 */
int ferry_cm_event_poll(struct ferry_event_channel *channel,
			struct ferry_cm_event **event_p);

#endif /* FERRY_CM_EXPORT_H */
