/*
 * preload.h - the LD_PRELOAD shim: what its files share.
 *
 * The shim interposes libc's socket calls.  Every fd the application sees
 * stays a real kernel fd; the shim keeps a table of the fds it manages:
 *
 *   FP_TCP     a kernel TCP socket the application made that is neither
 *              connected nor listening yet: connect() and listen() decide
 *              what it becomes.  Every other call passes through.
 *   FP_FERRY   a ferry stream socket (sock/).  Its fd number is the
 *              socket's own epoll fd, moved onto the number the application
 *              knew (dup3 over the kernel socket it replaces).
 *   FP_LISTEN  a kernel TCP listening socket with a ferry listener beside
 *              it on the same address and port (its fd hidden above the
 *              application's range): accept() takes from both, and
 *              readiness is the union.
 *   FP_EPOLL   an epoll set into which the application put managed fds:
 *              they are kept beside it (epoll.c).
 *   FP_PLAIN   a listener whose ferry side was given up (fork.c): the
 *              kernel's alone, remembered only so listen() leaves it so.
 *
 * Every other fd (files, UDP, AF_UNIX, TCP connections ferry did not make)
 * is not in the table, and every call on it passes straight to libc.
 *
 * The guard.  Code of libferry that the shim calls uses libc itself (poll,
 * close, read on its own eventfds ...), and those calls come back through
 * the shim's symbols.  A thread-local depth counter, raised around every
 * call into libferry, sends them straight to libc.  libferry's own threads
 * (the CM loop, the keepalive and monitor threads) never touch the
 * application's fds, so for them the table lookup suffices.
 */
#ifndef FERRY_PRELOAD_H
#define FERRY_PRELOAD_H

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "fdtab.h"
#include "monotime.h"
#include "sock-export.h"

#define FP_EXPORT __attribute__((visibility("default")))

/* --- real.c: libc's functions, found with dlsym(RTLD_NEXT) --- */

struct fp_real {
	int (*socket)(int, int, int);
	int (*bind)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*shutdown)(int, int);
	int (*close)(int);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	int (*recvmmsg)(int, struct mmsghdr *, unsigned int, int, struct timespec *);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	int (*sendmmsg)(int, struct mmsghdr *, unsigned int, int);
	ssize_t (*sendfile)(int, int, off_t *, size_t);
	ssize_t (*sendfile64)(int, int, off_t *, size_t);
	ssize_t (*splice)(int, loff_t *, int, loff_t *, size_t, unsigned int);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *,
		       const sigset_t *);
	int (*epoll_create)(int);
	int (*epoll_create1)(int);
	int (*epoll_ctl)(int, int, int, struct epoll_event *);
	int (*epoll_wait)(int, struct epoll_event *, int, int);
	int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
	int (*epoll_pwait2)(int, struct epoll_event *, int, const struct timespec *,
			    const sigset_t *);
	int (*fcntl)(int, int, ...);
	int (*fcntl64)(int, int, ...);
	int (*ioctl)(int, unsigned long, ...);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*getpeername)(int, struct sockaddr *, socklen_t *);
	int (*getsockname)(int, struct sockaddr *, socklen_t *);
	pid_t (*fork)(void);
};

extern struct fp_real fp_real;
/* Resolve every entry of fp_real (idempotent, thread-safe). */
void fp_real_init(void);

/* --- the guard --- */

extern __thread int fp_depth __attribute__((tls_model("initial-exec")));

/* In ferry, called by the shim, or in one of ferry's own threads. */
static inline bool fp_inside(void)
{
	return fp_depth > 0 || ferry_own_thread;
}
#define FP_ENTER() (fp_depth++)
#define FP_LEAVE() (fp_depth--)

/* --- fdtab.c: the fds the shim manages --- */

enum fp_kind {
	FP_TCP = 1,
	FP_FERRY,
	FP_LISTEN,
	FP_EPOLL,		/* an epoll set holding managed fds (epoll.c) */
	FP_PLAIN,		/* a listener that lost its ferry side: the kernel's */
};

struct fp_ep;

struct fp_fd {
	enum fp_kind kind;
	int domain;
	/* FP_TCP: what to replay on a ferry socket if connect() picks ferry. */
	bool nonblock;
	int rcvbuf, sndbuf;		/* 0: not set */
	int nodelay, keepalive, keepidle, keepintvl, keepcnt;
	struct linger linger;
	bool linger_set;
	/* FP_LISTEN: the ferry listener beside the kernel one (-1: none),
	 * and the eventfd the acceptor raises when it has connections. */
	int ferry_fd;
	int ready_efd;
	atomic_bool efd_raised;		/* ready_efd written and not read back */
	bool accept_ferry_first;	/* alternate which accept queue goes first */
	bool accepted;			/* accept() was called on it (fork.c) */
	/* Shared by fork (fork.c): the ferry listener's rendezvous, which
	 * other processes accept from too; it is polled beside the kernel
	 * listener and taken from in accept().  -1: not shared.  The ferry
	 * listener's; @backlog: listen()'s, for the child's own listener. */
	int rdv_fd;
	int backlog;
	pid_t ferry_pid;		/* whose ferry listener ferry_fd is (fork.c) */
	/* FP_FERRY: the number sock/ knows it by (one of its names), and
	 * the shared count of processes holding it (fork.c). */
	int sfd;
	_Atomic int *refs;
	/* After fork: the socket's message counts then, to tell whether this
	 * process drove the connection since (fork.c). */
	bool forked;
	struct sock_fork_mark fork_mark;
	/* FP_EPOLL: the managed items of the set. */
	struct fp_ep *ep;
	/* Names (fds) of this entry in this process: dup() shares it. */
	atomic_int nref;
};

/* The managed fds, by number (fdtab.c). */
extern struct fdtab fp_table;

/* The entry for @fd, or NULL: lock-free, no system call, no call. */
static inline struct fp_fd *fp_get(int fd)
{
	return fdtab_get(&fp_table, fd);
}
/* Install @e for @fd (NULL removes); returns the old entry. */
struct fp_fd *fp_set(int fd, struct fp_fd *e);
struct fp_fd *fp_new(enum fp_kind kind, int domain);
/* Release @e and whatever it holds that is the shim's (not the fd). */
void fp_free(struct fp_fd *e);
/* Call @fn for every managed fd (fork, exit). */
void fp_for_each(void (*fn)(int fd, struct fp_fd *e, void *arg), void *arg);
/* An fd number above the application's: for the shim's own hidden fds. */
int fp_hide_fd(int fd);
/* Forget every epoll registration of entry @e, by any of its names (epoll.c). */
void fp_epoll_forget(struct fp_fd *e);
/* The last name of an epoll set with managed items closed. */
void fp_epoll_free(struct fp_ep *ep);
/* A ferry socket or listener: what the shim answers for itself. */
static inline bool fp_is_managed(const struct fp_fd *e)
{
	return e && (e->kind == FP_FERRY || e->kind == FP_LISTEN);
}

/* --- preload.c --- */

/* Is the shim on for this program (FERRY_PRELOAD, the configuration)? */
bool fp_enabled(void);
/* May ferry serve a connection to, or a listener on, @addr? */
bool fp_allow(const struct sockaddr *addr, socklen_t len);

/* --- poll.c: readiness --- */

/* What of @events (POLLIN, POLLOUT, ...) a managed fd has now. */
short fp_revents(int fd, struct fp_fd *e, short events);
/* The same; with @kernel_too false, without the system call a listener's
 * kernel half costs (for spinning). */
short fp_revents_ex(int fd, struct fp_fd *e, short events, bool kernel_too);
/* A kernel fd's events now (poll with no timeout). */
short fp_kernel_revents(int fd, short events);
/* Listener @fd's kernel half now: its TCP socket and, shared, its rendezvous. */
short fp_listen_kernel_revents(int fd, struct fp_fd *e, short events);
/* Most kernel fds one managed fd sleeps on (fp_sleep_prepare). */
#define FP_WAKE_MAX	3
/*
 * Prepare to sleep on managed @fd: arm what raises its wake fds and fill
 * @wfd (up to FP_WAKE_MAX) with the kernel fds to sleep on; returns their
 * count.  fp_sleep_done() undoes it after the sleep.
 */
int fp_sleep_prepare(int fd, struct fp_fd *e, int wfd[FP_WAKE_MAX], bool *led);
void fp_sleep_done(int fd, struct fp_fd *e, bool led);
/* poll(2) over any mix of managed and kernel fds; timeout in ms (-1: none). */
int fp_poll(struct pollfd *fds, nfds_t nfds, int64_t timeout_ns, const sigset_t *mask);
/* The shim's clock, util's (monotime.h). */
static inline uint64_t fp_now_ns(void)
{
	return monotime_ns();
}
/* Spinning: give the CPU away now and then (every 16th @turn). */
void fp_spin_yield(unsigned int turn);

/* --- sockets.c --- */

/*
 * Count where a connect of the program's to @addr (NULL: unknown) went,
 * for ferry-stat -s, and say so when the log wants it (info: a connect
 * that went to TCP, and why); @err: a failed ferry connect's errno, or 0.
 */
void fp_connect_route(const struct sockaddr *addr, enum sock_stat_route r, int err);

/* Wait until listener @fd (FP_LISTEN) may have a connection to accept. */
int fp_accept_wait(int fd, struct fp_fd *e);
/* Another fd with the same entry as @fd, or -1. */
int fp_alias(int fd, struct fp_fd *e);

/* Child of fork: listener @fd gets a ferry listener of its own on the
 * rendezvous it shares; -1 with errno (fork.c then makes it TCP only). */
int fp_listen_adopt(int fd, struct fp_fd *e);

/* --- accept.c: the acceptor thread --- */

/* Have the acceptor complete @e's ferry handshakes in the background. */
int fp_acceptor_add(struct fp_fd *e);
void fp_acceptor_del(struct fp_fd *e);
/* Has @e's ferry listener a connection to accept?  (FP_ENTER'd caller.) */
bool fp_acceptor_ready(struct fp_fd *e);
/* Held across fork() (fork.c). */
void fp_acceptor_fork_lock(void);
void fp_acceptor_fork_unlock(void);

/* --- fork.c --- */

/* A new shared reference count (1) for a ferry socket; NULL if none left. */
_Atomic int *fp_ref_new(void);
/* Drop a reference; true if it was the last. */
bool fp_ref_put(_Atomic int *ref);
/* Closing ferry socket @e here: end the connection in order (true), or only
 * let go of this process's copy?  Drops this process's reference. */
bool fp_close_ends(struct fp_fd *e);
/* Make listener @fd a plain kernel one: the ferry listener goes (in a
 * child of fork, only this process's copy of it). */
void fp_listen_downgrade(int fd, struct fp_fd *e, bool in_child);

/* --- log --- */

#define fp_info(...) ferry_info(__VA_ARGS__)

#endif /* FERRY_PRELOAD_H */
