/*
 * sock-export.h - what the socket layer offers the preload shim (preload/)
 * and the tools, beside the public <ferry/socket.h>: the shim's one door
 * into ferry (rdma-core's preload, on rsocket.h alone, is the model).
 *
 * Everything is on a socket's number, as the public calls are; no struct
 * of the socket layer crosses, and nothing of its locks.  Where the shim
 * used to look a socket up and then read it or call on it, one call here
 * does both.  Costs: the look poll(2) and epoll_wait(2) take at each socket
 * (sock_revents_fd) makes the calls it made, the lookup and the look's own
 * (its body is inlined); send and receive are the public calls.  The calls
 * made around a sleep (prepare, done, arm, drain), which sit next to a
 * system call, and a listener's ready look run one direct call deeper than
 * the shim's own reads did (a nanosecond or two).
 * A number that names no ferry socket fails as sock/'s lookup does: -1
 * with EBADF (not open) or ENOTSOCK (not a ferry socket), unless said.
 *
 * Also here: what the shim uses of core (logging, ferry's own threads,
 * fork, the descriptor floor), declared as core-export.h declares it; and,
 * in sock_stat.h, the layout of the statistics segment, which ferry-stat
 * reads in other processes' memory without linking any of ferry (a file of
 * its own so that ferry-stat includes it alone).
 */
#ifndef FERRY_SOCK_EXPORT_H
#define FERRY_SOCK_EXPORT_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ferry/socket.h>

#include "sock_stat.h"

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

/* --- sock.c: numbers, listeners and connects under the shim --- */

/*
 * sock_renumber - move the socket named @from onto fd number @to (which it
 * replaces, as dup3 does; close-on-exec set).  For the preload shim, whose
 * sockets must keep the number the application already holds.
 */
int sock_renumber(int from, int to);
/*
 * Listeners shared by fork (ferry_cm_listen_share and the rest, in
 * cm/export/cm-export.h): sock_listen_adopt listens as ferry_sock_listen,
 * on a port that @tcp_fd, the program's TCP socket bound to it, holds,
 * on @rdv_fd, an inherited rendezvous it takes (closed on failure; -1:
 * none, a listener of its own); sock_listen_share stops the listener
 * taking connections unasked; sock_listen_take takes one waiting
 * connection for its ready queue (EAGAIN: none); sock_listen_rendezvous
 * is the socket to poll for them.
 */
int sock_listen_adopt(int fd, int backlog, int tcp_fd, int rdv_fd);
int sock_listen_share(int fd);
int sock_listen_take(int fd);
int sock_listen_rendezvous(int fd);
/*
 * sock_listen_offer - @tcp_fd, a client the program's TCP socket accepted
 * on the port listener @fd holds, for the listener's tcp transport (only
 * when FERRY_TRANSPORT=tcp forces it; ferry_cm_offer_tcp): 1, taken (no
 * longer the caller's) and coming to @fd's accept queue; 0, the caller's
 * still, unread; -1 with errno.
 */
int sock_listen_offer(int fd, int tcp_fd);
/*
 * sock_connect_bound - a connect of socket @fd (not yet connecting) gives
 * up after @ms without the listener's answer (ETIMEDOUT), rather than the
 * CM's long default.  For the shim, which falls back to TCP then.
 */
int sock_connect_bound(int fd, unsigned int ms);
/*
 * sock_connect_probe - could a connect to @addr go over ferry?  Asked
 * before any socket is made, in the caller's thread (ferry_cm_probe):
 * SOCK_STAT_RT_FERRY when a connect may find a ferry listener, else why
 * not.  For the shim, whose connects that go to TCP then cost about what
 * TCP costs.
 */
enum sock_stat_route sock_connect_probe(const struct sockaddr *addr);
/* Why a ferry connect to @addr that failed with @err goes to TCP. */
enum sock_stat_route sock_connect_why(const struct sockaddr *addr, int err);
/*
 * sock_forget - let go of socket @fd in this process without a word to the
 * peer, for the preload shim when another process (after fork) still holds
 * the connection: every descriptor and mapping of this process goes, while
 * what the other process relies on -- the shared MR table, the connection
 * socket (no shutdown), the stream (no DISCONNECT) -- is left as it is.
 */
void sock_forget(int fd);

/* --- sock_stat.c --- */

/* Count a connect of the program's under the shim, by where it went (the
 * segment is made if this process has none yet). */
void sock_stat_route(enum sock_stat_route r);

/* --- sock_wait.c: how long a waiter polls before it sleeps --- */

unsigned int sock_poll_us(void);
/* FERRY_POLL_US when the variable is unset (the preload shim raises it). */
extern unsigned int sock_default_poll_us;

/* --- sock_poll.c --- */

/*
 * sock_revents_fd - what of @events (POLLIN, POLLOUT, ...) socket @fd has
 * now, after taking its completions and CM events; POLLNVAL when @fd is
 * no ferry socket.  The look poll and epoll_wait make of each socket.
 */
short sock_revents_fd(int fd, short events);

/* --- sock_shim.c: sleeping, listeners, fork --- */

/*
 * Sleeping on sockets beside other descriptors (poll, epoll_wait).  One
 * thread at a time sleeps on a socket's descriptor for the socket's own
 * waiters (its leader); a poller that becomes it arms the socket, so that
 * what comes next raises the descriptor, sleeps, then drains what woke it.
 *
 * sock_shim_wait_fd - the kernel descriptor that becomes readable when
 * socket @fd has news for a sleeper (its own number, or a set behind it).
 * sock_shim_sleep_prepare - the same, having made the caller the leader
 * (*@led_p true) and armed the socket, if no other thread leads;
 * sock_shim_sleep_done undoes it after the sleep (only when *@led_p was
 * true).  sock_shim_drain - the descriptor fired: drain it and release,
 * unless another thread leads (it does that).
 */
int sock_shim_wait_fd(int fd);
int sock_shim_sleep_prepare(int fd, bool *led_p);
void sock_shim_sleep_done(int fd);
void sock_shim_drain(int fd);
/*
 * An epoll set's items stay armed across calls of epoll_wait (arming
 * costs the peer a system call per notification).  sock_shim_arm arms
 * socket @fd without leading and gives in *@gen_p the count of its
 * drains; sock_shim_armed_since is false once a drain (by a thread that
 * slept on the socket meanwhile) spent an arm made at @gen, or @fd is no
 * socket; sock_shim_disarm takes back an arm that has not fired, unless
 * a sleeper relies on it.
 */
int sock_shim_arm(int fd, unsigned int *gen_p);
bool sock_shim_armed_since(int fd, unsigned int gen);
void sock_shim_disarm(int fd);

/*
 * sock_shim_listen_visit - take the queued CM events of listener @fd (for
 * the shim's acceptor thread, which completes handshakes in the
 * background); true when a connection is ready to accept.
 * sock_shim_listen_ready - is one ready?  1, 0, or -1 for no socket; no
 * lock, no system call.
 */
bool sock_shim_listen_visit(int fd);
int sock_shim_listen_ready(int fd);

/* SIOCOUTQ: bytes written to socket @fd and not yet taken by the peer;
 * -1 with EBADF for any number that is no socket, EFAULT for no @bytes_p. */
int sock_shim_outq(int fd, int *bytes_p);
/* What a TCP_INFO of socket @fd is made of (sock_shim_tcp_view). */
struct sock_shim_tcp {
	bool connected;
	uint32_t rbuf_size;		/* SO_RCVBUF */
	uint32_t sq_size;		/* sends in flight at most */
};
int sock_shim_tcp_view(int fd, struct sock_shim_tcp *view_p);

/*
 * Fork.  Both processes hold each connection after it; whichever drives
 * it owns what is not shared (counts, positions).  sock_shim_fork_quiet,
 * before fork(): socket @fd leaves the keepalive service (which would
 * drive it unasked in both processes) and notes its message counts in
 * *@mark_p; sock_shim_fork_drove, at close: has this process sent or
 * taken a message on @fd since (false: not, or no socket)?
 */
struct sock_fork_mark {
	uint16_t sseq, rseq;		/* messages sent, and taken */
};
int sock_shim_fork_quiet(int fd, struct sock_fork_mark *mark_p);
bool sock_shim_fork_drove(int fd, const struct sock_fork_mark *mark);

#endif /* FERRY_SOCK_EXPORT_H */
