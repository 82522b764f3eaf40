/*
 * sockets.c - the life of a socket under the shim: socket, connect,
 * listen, accept, close, dup, and the calls about a socket rather than
 * its data (options, names, fcntl, ioctl, shutdown).
 *
 * The choice (see ferry(7), "The preload shim"):
 *
 *   socket()   always the kernel's socket; a TCP one is remembered (FP_TCP).
 *   connect()  first a look, in the program's thread, at whether ferry
 *              could serve the destination at all (sock_connect_probe: not
 *              this host and no RDMA device, nothing listening, a TCP
 *              listener known to have no ferry listener behind it); if it
 *              could, a ferry connection to the same address: shm finds the
 *              destination's ferry listener through the CM's rendezvous
 *              name, and an RDMA device through rdma_cm, which the peer
 *              must accept.  If the look says no, or the ferry connect is
 *              refused or fails in any way, the kernel TCP connect the
 *              program asked for, on its untouched socket, as without the
 *              shim (a non-blocking one stays so).  On success the ferry
 *              socket takes over the program's fd number.  Either way the
 *              route is counted for ferry-stat -s.
 *   listen()   the kernel listen, then a ferry listener on the same address
 *              and port; accept() serves both queues in turn.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <unistd.h>

#include "preload.h"

static const char *fp_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
	} else {
		snprintf(buf, len, "(family %d)", sa->sa_family);
	}
	return buf;
}

/* --- socket --- */

FP_EXPORT int socket(int domain, int type, int protocol)
{
	struct fp_fd *e;
	int fd;

	fp_real_init();
	fd = fp_real.socket(domain, type, protocol);
	if (fd < 0 || fp_inside() || !fp_enabled())
		return fd;
	if ((domain == AF_INET || domain == AF_INET6) &&
	    (type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) == SOCK_STREAM &&
	    (protocol == 0 || protocol == IPPROTO_TCP)) {
		e = fp_new(FP_TCP, domain);
		if (e) {
			e->nonblock = type & SOCK_NONBLOCK;
			fp_free(fp_set(fd, e));
		}
	} else {
		/* A number the table still names from an fd closed behind the
		 * shim's back (close_range, a raw syscall) is stale. */
		fp_free(fp_set(fd, NULL));
	}
	return fd;
}

/*
 * Ring size for programs that set none: TCP grows its buffers to megabytes
 * under load, and programs written for it write 128 KiB at a time (iperf3):
 * with rsocket's 128 KiB rings each such write waits for the whole ring to
 * drain.  512 KiB rings let writer and reader overlap while staying in the
 * caches (measured with iperf3: 128 KiB 7-12 Gbit/s, 512 KiB 56, 2 MiB 34).
 * The pages of a ring are only allocated as they are touched.
 */
#define FP_DEF_RING (512 * 1024)

/*
 * How long a connect waits for a ferry listener's answer before it goes
 * to TCP (stopped, or too busy to run its CM thread and acceptor): a live
 * one answers in well under a millisecond, but a loaded machine can keep
 * its threads off the CPU for a good part of this, and a needless
 * fallback costs speed.  Once it has answered, the QP exchange has the
 * CM's 2 s (cm/cm_shm.h).
 */
#define FP_FERRY_CONNECT_MS 500

/* Options set on a socket before it became a ferry socket, replayed. */
static void fp_replay_options(int sfd, const struct fp_fd *e)
{
	int on = 1, rcvbuf = e->rcvbuf, sndbuf = e->sndbuf;

	/* FERRY_RBUF / FERRY_SBUF (ferry-run --rbuf/--sbuf) reach sock/'s
	 * own defaults; without them, the shim's. */
	if (!rcvbuf && !getenv("FERRY_RBUF"))
		rcvbuf = FP_DEF_RING;
	if (!sndbuf && !getenv("FERRY_SBUF"))
		sndbuf = FP_DEF_RING;
	if (rcvbuf)
		ferry_sock_setsockopt(sfd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(int));
	/* The shim's own default sizes the ring only: SO_SNDBUF would fix
	 * the send buffer, which grows as TCP's unless the program set it. */
	if (e->sndbuf)
		ferry_sock_setsockopt(sfd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(int));
	else if (sndbuf)
		ferry_sock_setsockopt(sfd, SOL_FERRY, FERRY_SNDRING, &sndbuf, sizeof(int));
	if (e->nodelay)
		ferry_sock_setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	if (e->keepalive)
		ferry_sock_setsockopt(sfd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	if (e->keepidle)
		ferry_sock_setsockopt(sfd, IPPROTO_TCP, TCP_KEEPIDLE, &e->keepidle, sizeof(int));
	if (e->keepintvl)
		ferry_sock_setsockopt(sfd, IPPROTO_TCP, TCP_KEEPINTVL, &e->keepintvl,
				      sizeof(int));
	if (e->keepcnt)
		ferry_sock_setsockopt(sfd, IPPROTO_TCP, TCP_KEEPCNT, &e->keepcnt, sizeof(int));
	if (e->linger_set)
		ferry_sock_setsockopt(sfd, SOL_SOCKET, SO_LINGER, &e->linger, sizeof(e->linger));
}

/* --- connect --- */

/*
 * Try ferry for @fd's connect to @addr.  Returns 0 when the ferry socket
 * now holds @fd's number, -1 (errno: why) when the kernel should connect.
 */
static int fp_connect_ferry(int fd, struct fp_fd *e, const struct sockaddr *addr,
			    socklen_t len)
{
	int sfd, err;

	FP_ENTER();
	sfd = ferry_socket(e->domain, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sfd < 0)
		goto fail;
	fp_replay_options(sfd, e);
	/* Blocking, whatever the program's flag: the answer decides which
	 * transport the program's socket will be, before it returns.  So
	 * bounded, short: a server stopped or too busy to answer sends us to
	 * TCP, whose backlog answers at once, instead of holding the program
	 * for the CM's 30 s. */
	sock_connect_bound(sfd, FP_FERRY_CONNECT_MS);
	if (ferry_sock_connect(sfd, addr, len) < 0 || sock_renumber(sfd, fd) < 0) {
		err = errno;
		ferry_sock_close(sfd);
		errno = err;
		goto fail;
	}
	if (e->nonblock)
		ferry_sock_fcntl(fd, F_SETFL, O_NONBLOCK);
	FP_LEAVE();
	return 0;
fail:
	FP_LEAVE();
	return -1;
}

void fp_connect_route(const struct sockaddr *addr, enum sock_stat_route r, int err)
{
	char name[80] = "(no address)";

	FP_ENTER();	/* the segment may be made now, with libc's calls */
	sock_stat_route(r);
	FP_LEAVE();
	/* The address is formatted only for a log that shows it. */
	if (ferry_log_level() < (r == SOCK_STAT_RT_FERRY ? FERRY_LOG_DEBUG : FERRY_LOG_INFO))
		return;
	if (addr)
		fp_addr_str(addr, name, sizeof(name));
	if (r == SOCK_STAT_RT_FERRY)
		ferry_debug("connect to %s: ferry", name);
	else
		fp_info("connect to %s: not ferry (%s%s%s): TCP", name, sock_stat_route_name(r),
			err ? ": " : "", err ? strerror(err) : "");
}

/* May the connect of FP_TCP entry @e to @addr go over ferry?  If not, why. */
static enum sock_stat_route fp_connect_choose(struct fp_fd *e, const struct sockaddr *addr,
					      socklen_t len)
{
	enum sock_stat_route r;

	if (!fp_allow(addr, len))
		return SOCK_STAT_RT_EXCLUDED;
	/* Before anything is made: a destination ferry does not serve costs
	 * one look at most (none when it is not this host), in this thread. */
	FP_ENTER();
	r = sock_connect_probe(addr);
	FP_LEAVE();
	if (r != SOCK_STAT_RT_FERRY)
		return r;
	e->refs = fp_ref_new();
	return e->refs ? SOCK_STAT_RT_FERRY : SOCK_STAT_RT_NO_FDS;
}

FP_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	struct fp_fd *e = fp_get(fd);
	enum sock_stat_route r;
	int err;

	fp_real_init();
	if (e && e->kind == FP_FERRY && !fp_inside()) {
		int ret;

		/* Asking again after a non-blocking connect: EISCONN. */
		FP_ENTER();
		ret = ferry_sock_connect(e->sfd, addr, len);
		FP_LEAVE();
		return ret;
	}
	if (!e || e->kind != FP_TCP || fp_inside() || !addr ||
	    (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) ||
	    addr->sa_family != e->domain ||
	    len < (addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) :
		   sizeof(struct sockaddr_in6)))
		return fp_real.connect(fd, addr, len);
	r = fp_connect_choose(e, addr, len);
	if (r != SOCK_STAT_RT_FERRY) {
		fp_connect_route(addr, r, 0);
		goto tcp;
	}
	if (fp_connect_ferry(fd, e, addr, len) == 0) {
		e->sfd = fd;
		e->kind = FP_FERRY;
		fp_connect_route(addr, SOCK_STAT_RT_FERRY, 0);
		if (e->nonblock)
			return ERR(EINPROGRESS);	/* as TCP: writable at once */
		return 0;
	}
	err = errno;
	FP_ENTER();
	r = sock_connect_why(addr, err);
	FP_LEAVE();
	fp_connect_route(addr, r, err);
	fp_ref_put(e->refs);
	e->refs = NULL;
tcp:
	/* From here the kernel's socket, untouched: the shim forgets it, and
	 * the program's own connect runs as it would without the shim. */
	fp_free(fp_set(fd, NULL));
	return fp_real.connect(fd, addr, len);
}

/* --- listen and accept --- */

/* Move ferry socket @sfd above the application's fd range (fp_hide_fd). */
static int fp_hide_sock(int sfd)
{
	int high = fp_hide_fd(fp_real.dup(sfd));

	if (high < 0)
		return sfd;
	if (high == sfd || sock_renumber(sfd, high) < 0) {
		if (high != sfd)
			fp_real.close(high);
		return sfd;
	}
	return high;
}

/*
 * A ferry listener for listener @fd, bound to @ss, hidden; -1 with errno.
 * @rdv_fd: a rendezvous inherited by fork to listen on (taken), or -1.
 */
static int fp_listen_make(int fd, struct fp_fd *e, int backlog,
			  const struct sockaddr_storage *ss, socklen_t len, int rdv_fd)
{
	int lfd, on = 1;

	FP_ENTER();
	lfd = ferry_socket(e->domain, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd < 0 && rdv_fd >= 0)
		fp_real.close(rdv_fd);
	if (lfd >= 0) {
		fp_replay_options(lfd, e);
		ferry_sock_setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
		/* The program's socket holds the port: the ferry listener
		 * speaks for it (see ferry(7), "Port ownership"). */
		if (ferry_sock_bind(lfd, (const struct sockaddr *)ss, len) < 0 ||
		    sock_listen_adopt(lfd, backlog, fd, rdv_fd) < 0) {
			int err = errno;

			ferry_sock_close(lfd);
			errno = err;
			lfd = -1;
		} else {
			lfd = fp_hide_sock(lfd);
		}
	}
	FP_LEAVE();
	return lfd;
}

/*
 * The ferry side of listener @fd, bound to @ss: a ferry listener on the
 * same address and port, and the acceptor watching it.  Returns 0 with
 * @e an FP_LISTEN; otherwise says why and forgets @fd (TCP only).
 */
static int fp_listen_ferry(int fd, struct fp_fd *e, int backlog,
			   const struct sockaddr_storage *ss, socklen_t len)
{
	char name[80];
	int lfd;

	fp_addr_str((const struct sockaddr *)ss, name, sizeof(name));
	if (!fp_allow((const struct sockaddr *)ss, len)) {
		fp_info("listen on %s: excluded by the configuration: TCP only", name);
		goto plain;
	}
	lfd = fp_listen_make(fd, e, backlog, ss, len, -1);
	if (lfd < 0) {
		fp_info("listen on %s: no ferry listener (%m): TCP only", name);
		goto plain;
	}
	e->ferry_fd = lfd;
	if (fp_acceptor_add(e) < 0) {
		fp_info("listen on %s: no acceptor (%m): TCP only", name);
		FP_ENTER();
		ferry_sock_close(lfd);
		FP_LEAVE();
		e->ferry_fd = -1;
		goto plain;
	}
	e->kind = FP_LISTEN;
	e->backlog = backlog;
	fp_info("listen on %s: TCP and ferry", name);
	return 0;
plain:
	fp_free(fp_set(fd, NULL));
	return -1;
}

/*
 * In a child of fork: listener @fd's ferry side is the parent's, which
 * this process cannot drive (its CM thread is the parent's); a listener of
 * its own on the same rendezvous takes over, so that clients are served
 * by whichever process accepts.  0, or -1 with errno (the caller makes
 * @fd TCP only).
 */
int fp_listen_adopt(int fd, struct fp_fd *e)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int rdv, lfd;

	if (fp_real.getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	rdv = fp_hide_fd(fp_real.fcntl(e->rdv_fd, F_DUPFD_CLOEXEC, 0));
	if (rdv < 0)
		return -1;
	lfd = fp_listen_make(fd, e, e->backlog, &ss, len, rdv);
	if (lfd < 0)
		return -1;
	/* The parent's listener stays, unused, until exit: any release
	 * would reach into the parent's CM state (fp_listen_downgrade). */
	fp_real.close(e->ready_efd);
	e->ready_efd = -1;
	atomic_store(&e->efd_raised, false);
	e->ferry_fd = lfd;
	FP_ENTER();
	e->rdv_fd = sock_listen_rendezvous(lfd);
	FP_LEAVE();
	if (fp_acceptor_add(e) < 0) {
		int err = errno;

		FP_ENTER();
		ferry_sock_close(lfd);
		FP_LEAVE();
		e->ferry_fd = -1;
		e->rdv_fd = -1;
		e->kind = FP_PLAIN;
		return ERR(err);
	}
	return 0;
}

/*
 * listen: when the socket is bound to a port already, the ferry listener
 * comes first, so that a client that finds the TCP port open finds ferry's
 * too; an unbound socket gets its port from the kernel's listen.
 */
FP_EXPORT int listen(int fd, int backlog)
{
	struct fp_fd *e = fp_get(fd);
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int ret, err;

	fp_real_init();
	if (!e || e->kind != FP_TCP || fp_inside())
		return fp_real.listen(fd, backlog);
	if (fp_real.getsockname(fd, (struct sockaddr *)&ss, &len) == 0 &&
	    ((struct sockaddr_in *)&ss)->sin_port != 0) {
		/* sin_port and sin6_port are at the same place */
		bool ferry = fp_listen_ferry(fd, e, backlog, &ss, len) == 0;

		ret = fp_real.listen(fd, backlog);
		if (ret < 0 && ferry) {
			err = errno;
			fp_set(fd, NULL);
			fp_acceptor_del(e);
			FP_ENTER();
			ferry_sock_close(e->ferry_fd);
			FP_LEAVE();
			fp_free(e);
			errno = err;
		}
		return ret;
	}
	ret = fp_real.listen(fd, backlog);
	len = sizeof(ss);
	if (ret == 0 && fp_real.getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
		fp_listen_ferry(fd, e, backlog, &ss, len);
	return ret;
}

/* Take a ferry connection from @e's listener; -1 with EAGAIN if none. */
static int fp_accept_ferry(struct fp_fd *e, struct sockaddr *addr, socklen_t *len, int flags)
{
	struct fp_fd *ne;
	_Atomic int *refs;
	int nfd;

	refs = fp_ref_new();
	if (!refs)
		return ERR(EAGAIN);
	FP_ENTER();
	do {
		nfd = ferry_sock_accept4(e->ferry_fd, addr, len,
					 (flags & SOCK_NONBLOCK) | SOCK_CLOEXEC);
	} while (nfd < 0 && errno == EAGAIN && fp_acceptor_ready(e));
	FP_LEAVE();
	ne = nfd >= 0 ? fp_new(FP_FERRY, e->domain) : NULL;
	if (!ne) {
		int err = nfd >= 0 ? ENOMEM : errno;

		if (nfd >= 0) {
			FP_ENTER();
			ferry_sock_close(nfd);
			FP_LEAVE();
		}
		fp_ref_put(refs);
		return ERR(err);
	}
	ne->nonblock = flags & SOCK_NONBLOCK;
	ne->sfd = nfd;
	ne->refs = refs;
	fp_free(fp_set(nfd, ne));
	return nfd;
}

/*
 * How long accept() waits for the handshake of a connection it took from a
 * shared rendezvous.  A healthy client completes it in well under a
 * millisecond; the wait makes accept() return what it took, as the
 * kernel's does, rather than leave it in this process's queue, where it
 * would be lost if the program closed the listener next (nginx's old
 * workers at a reload).  A client that stalls costs the program this
 * long, once; its connection is accepted later if it completes.
 */
#define FP_TAKE_WAIT_MS	20

/*
 * A shared listener (fork.c): take a connection waiting on the rendezvous
 * that every holder may accept from, and wait for it.  -1 with EAGAIN when
 * another process took it first, or errno as accept(2)'s.
 */
static int fp_accept_shared(struct fp_fd *e, struct sockaddr *addr, socklen_t *len,
			    int flags)
{
	struct pollfd p = { .fd = e->ready_efd, .events = POLLIN };
	uint64_t now, end;
	int ret, nfd;

	FP_ENTER();
	ret = sock_listen_take(e->ferry_fd);
	FP_LEAVE();
	if (ret < 0)
		return -1;
	end = fp_now_ns() + FP_TAKE_WAIT_MS * 1000000ull;
	for (;;) {
		nfd = fp_accept_ferry(e, addr, len, flags);
		if (nfd >= 0 || errno != EAGAIN)
			return nfd;
		now = fp_now_ns();
		if (now >= end)
			return ERR(EAGAIN);	/* it comes through ready_efd */
		fp_real.poll(&p, 1, (int)((end - now) / 1000000) + 1);
	}
}

/* Is a kernel connection waiting on listening socket @fd? */
static bool fp_kernel_pending(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return fp_real.poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

/*
 * A kernel client @nfd of listener @e: with FERRY_TRANSPORT=tcp, ferry's
 * tcp transport takes it when it speaks MPA (sock_listen_offer), as its
 * listener cannot have the port the program's socket holds.  True when
 * taken: @nfd is no longer the program's.
 */
static bool fp_accept_offer(struct fp_fd *e, int nfd)
{
	int ret;

	FP_ENTER();
	ret = sock_listen_offer(e->ferry_fd, nfd);
	FP_LEAVE();
	return ret > 0;
}

static int fp_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	struct fp_fd *e = fp_get(fd);
	int nfd, round;

	if (!e || e->kind != FP_LISTEN || fp_inside())
		return fp_real.accept4(fd, addr, len, flags);
	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))
		return ERR(EINVAL);
	e->accepted = true;
	for (;;) {
		/* The two queues in turn, so that neither starves the other. */
		e->accept_ferry_first = !e->accept_ferry_first;
		for (round = 0; round < 2; round++) {
			if ((round == 0) == e->accept_ferry_first) {
				nfd = fp_accept_ferry(e, addr, len, flags);
				if (nfd < 0 && errno == EAGAIN && e->rdv_fd >= 0) {
					nfd = fp_accept_shared(e, addr, len, flags);
					if (nfd < 0 && errno != EAGAIN)
						return -1;	/* EMFILE ...: as TCP's */
				}
				if (nfd >= 0)
					return nfd;
				if (errno != EAGAIN)
					fp_info("accept: ferry listener: %m");
			} else if (e->nonblock || fp_kernel_pending(fd)) {
				nfd = fp_real.accept4(fd, addr, len, flags);
				if (nfd >= 0 && fp_accept_offer(e, nfd))
					continue;	/* ferry's now: it comes through its queue */
				if (nfd >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
					return nfd;
			}
		}
		if (e->nonblock)
			return ERR(EAGAIN);
		if (fp_accept_wait(fd, e) < 0)
			return -1;
	}
}

FP_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	fp_real_init();
	return fp_accept(fd, addr, len, 0);
}

FP_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	fp_real_init();
	return fp_accept(fd, addr, len, flags);
}

/* --- close and dup --- */

struct fp_alias_query {
	struct fp_fd *e;
	int not, found;
};

static void fp_alias_match(int fd, struct fp_fd *e, void *arg)
{
	struct fp_alias_query *q = arg;

	if (e == q->e && fd != q->not && q->found < 0)
		q->found = fd;
}

int fp_alias(int fd, struct fp_fd *e)
{
	struct fp_alias_query q = { e, fd, -1 };

	fp_for_each(fp_alias_match, &q);
	return q.found;
}

/*
 * @fd, one name of entry @e, is going away (the caller removed it from the
 * table).  Returns 1 if the caller must still close the kernel fd, 0 if
 * that was done here.
 */
static int fp_release(int fd, struct fp_fd *e)
{
	int alias, done = 1;

	if (atomic_fetch_sub(&e->nref, 1) > 1) {
		/* Other names remain: if sock/ knows the socket by this one,
		 * it moves to another (which closes this one). */
		if (e->kind == FP_FERRY && fd == e->sfd) {
			alias = fp_alias(fd, e);
			FP_ENTER();
			if (alias >= 0 && sock_renumber(fd, alias) == 0) {
				e->sfd = alias;
				done = 0;
			}
			FP_LEAVE();
		}
		return done;
	}
	switch (e->kind) {
	case FP_LISTEN:
		fp_epoll_forget(e);
		fp_acceptor_del(e);
		FP_ENTER();
		ferry_sock_close(e->ferry_fd);
		FP_LEAVE();
		break;
	case FP_EPOLL:
		fp_epoll_free(e->ep);
		break;
	case FP_FERRY:
		fp_epoll_forget(e);
		FP_ENTER();
		/* Who ends the connection in order (fork.c): the last process
		 * holding it, or the one that drove it since the fork; any
		 * other only lets go of its copy. */
		if (fp_close_ends(e))
			ferry_sock_close(e->sfd);
		else
			sock_forget(e->sfd);
		FP_LEAVE();
		done = fd != e->sfd;
		break;
	case FP_TCP:
	case FP_PLAIN:
		break;
	}
	fp_free(e);
	return done;
}

FP_EXPORT int close(int fd)
{
	struct fp_fd *e;

	fp_real_init();
	if (fp_inside())
		return fp_real.close(fd);
	e = fp_set(fd, NULL);
	if (!e)
		return fp_real.close(fd);
	return fp_release(fd, e) ? fp_real.close(fd) : 0;
}

/* @newfd is about to be replaced by a dup: let go of what it named. */
static void fp_dup_target(int newfd)
{
	struct fp_fd *e = fp_set(newfd, NULL);

	if (e)
		fp_release(newfd, e);	/* the dup closes or takes the number */
}

static int fp_dup_share(int oldfd, int newfd)
{
	struct fp_fd *e = fp_get(oldfd);

	if (newfd >= 0 && e) {
		atomic_fetch_add(&e->nref, 1);
		fp_free(fp_set(newfd, e));
		/* A ferry socket never reaches an exec'd program as garbage:
		 * all its names close on exec. */
		if (e->kind == FP_FERRY)
			fp_real.fcntl(newfd, F_SETFD, FD_CLOEXEC);
	}
	return newfd;
}

FP_EXPORT int dup(int oldfd)
{
	fp_real_init();
	if (fp_inside() || !fp_get(oldfd))
		return fp_real.dup(oldfd);
	return fp_dup_share(oldfd, fp_real.dup(oldfd));
}

static int fp_dup3(int oldfd, int newfd, int flags, bool is_dup2)
{
	if (fp_inside() || (!fp_get(oldfd) && !fp_get(newfd)))
		return is_dup2 ? fp_real.dup2(oldfd, newfd) : fp_real.dup3(oldfd, newfd, flags);
	if (oldfd == newfd)
		return is_dup2 ? fp_real.dup2(oldfd, newfd) : ERR(EINVAL);
	if (fp_real.fcntl(oldfd, F_GETFD) < 0)
		return -1;	/* EBADF, before newfd is touched */
	fp_dup_target(newfd);
	return fp_dup_share(oldfd, is_dup2 ? fp_real.dup2(oldfd, newfd) :
					     fp_real.dup3(oldfd, newfd, flags));
}

FP_EXPORT int dup2(int oldfd, int newfd)
{
	fp_real_init();
	return fp_dup3(oldfd, newfd, 0, true);
}

FP_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	fp_real_init();
	return fp_dup3(oldfd, newfd, flags, false);
}

/* --- fcntl and ioctl --- */

static int fp_fcntl(int fd, int cmd, long arg)
{
	struct fp_fd *e = fp_get(fd);
	int ret;

	if (fp_inside() || !e)
		return fp_real.fcntl(fd, cmd, arg);
	switch (cmd) {
	case F_DUPFD:
	case F_DUPFD_CLOEXEC:
		return fp_dup_share(fd, fp_real.fcntl(fd, cmd, arg));
	case F_GETFL:
		if (e->kind != FP_FERRY)
			break;
		FP_ENTER();
		ret = ferry_sock_fcntl(e->sfd, F_GETFL);
		FP_LEAVE();
		return ret;
	case F_SETFL:
		e->nonblock = arg & O_NONBLOCK;
		if (e->kind != FP_FERRY)
			break;
		FP_ENTER();
		ret = ferry_sock_fcntl(e->sfd, F_SETFL, arg);
		FP_LEAVE();
		return ret;
	case F_SETFD:
		if (e->kind == FP_FERRY && !(arg & FD_CLOEXEC)) {
			fp_info("fd %d: a ferry socket stays close-on-exec", fd);
			arg |= FD_CLOEXEC;
		}
		break;
	}
	return fp_real.fcntl(fd, cmd, arg);
}

FP_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	long arg;

	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	fp_real_init();
	return fp_fcntl(fd, cmd, arg);
}

/* Where glibc has fcntl64 (the 64-bit-off_t name), the same call. */
FP_EXPORT int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

FP_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	struct fp_fd *e = fp_get(fd);
	va_list ap;
	void *arg;
	int ret;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	fp_real_init();
	if (fp_inside() || !e)
		return fp_real.ioctl(fd, req, arg);
	if (req == FIONBIO && arg)
		e->nonblock = *(int *)arg != 0;
	if (e->kind != FP_FERRY)
		return fp_real.ioctl(fd, req, arg);
	FP_ENTER();
	switch (req) {
	case FIONREAD:
	case FIONBIO:
		ret = ferry_sock_ioctl(e->sfd, req, arg);
		break;
	case SIOCOUTQ:
		ret = sock_shim_outq(e->sfd, arg);
		break;
	default:
		ret = ERR(ENOTTY);
		break;
	}
	FP_LEAVE();
	return ret;
}

/* --- options and names --- */

static void fp_note_option(struct fp_fd *e, int level, int name, const void *val,
			   socklen_t len)
{
	int v;

	if (name == SO_LINGER && level == SOL_SOCKET && len >= sizeof(struct linger)) {
		memcpy(&e->linger, val, sizeof(e->linger));
		e->linger_set = true;
		return;
	}
	if (len < sizeof(int))
		return;
	memcpy(&v, val, sizeof(v));
	if (level == SOL_SOCKET) {
		if (name == SO_RCVBUF)
			e->rcvbuf = v;
		else if (name == SO_SNDBUF)
			e->sndbuf = v;
		else if (name == SO_KEEPALIVE)
			e->keepalive = v;
	} else if (level == IPPROTO_TCP) {
		if (name == TCP_NODELAY)
			e->nodelay = v;
		else if (name == TCP_KEEPIDLE)
			e->keepidle = v;
		else if (name == TCP_KEEPINTVL)
			e->keepintvl = v;
		else if (name == TCP_KEEPCNT)
			e->keepcnt = v;
	}
}

FP_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct fp_fd *e = fp_get(fd);
	int ret;

	fp_real_init();
	if (fp_inside() || !e)
		return fp_real.setsockopt(fd, level, name, val, len);
	if (e->kind != FP_FERRY) {
		ret = fp_real.setsockopt(fd, level, name, val, len);
		if (ret == 0 && val) {
			fp_note_option(e, level, name, val, len);
			if (e->kind == FP_LISTEN) {
				FP_ENTER();
				ferry_sock_setsockopt(e->ferry_fd, level, name, val, len);
				FP_LEAVE();
			}
		}
		return ret;
	}
	FP_ENTER();
	ret = ferry_sock_setsockopt(e->sfd, level, name, val, len);
	FP_LEAVE();
	/* Options ferry has no use for (IP_TOS, SO_PRIORITY, TCP_CONGESTION
	 * ...) are accepted and ignored, as on a TCP socket they would be
	 * accepted and matter little; the program goes on. */
	if (ret < 0 && errno == ENOPROTOOPT && level != SOL_FERRY)
		ret = 0;
	return ret;
}

/* The MSS TCP has over loopback; programs check it for sanity. */
#define FP_MSS 65483

/* A TCP_INFO a program can live with: established, nothing lost. */
static int fp_tcp_info(const struct sock_shim_tcp *view, void *val, socklen_t *len)
{
	struct tcp_info ti;
	socklen_t n;

	memset(&ti, 0, sizeof(ti));
	ti.tcpi_state = view->connected ? TCP_ESTABLISHED : TCP_CLOSE;
	ti.tcpi_snd_mss = ti.tcpi_rcv_mss = FP_MSS;
	ti.tcpi_pmtu = FP_MSS + 52;
	ti.tcpi_rtt = 1;
	ti.tcpi_rcv_space = view->rbuf_size;
	ti.tcpi_snd_cwnd = view->sq_size;
	ti.tcpi_options = TCPI_OPT_TIMESTAMPS;
	n = *len < sizeof(ti) ? *len : (socklen_t)sizeof(ti);
	memcpy(val, &ti, n);
	*len = n;
	return 0;
}

FP_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct fp_fd *e = fp_get(fd);
	struct sock_shim_tcp view;
	int ret, v;

	fp_real_init();
	if (fp_inside() || !e || e->kind != FP_FERRY)
		return fp_real.getsockopt(fd, level, name, val, len);
	if (!val || !len)
		return ERR(EFAULT);
	FP_ENTER();
	ret = ferry_sock_getsockopt(e->sfd, level, name, val, len);
	if (ret < 0 && errno == ENOPROTOOPT && level == IPPROTO_TCP) {
		ret = 0;
		if (sock_shim_tcp_view(e->sfd, &view) < 0) {
			ret = -1;
		} else if (name == TCP_INFO) {
			ret = fp_tcp_info(&view, val, len);
		} else if (name == TCP_MAXSEG && *len >= sizeof(int)) {
			v = FP_MSS;
			memcpy(val, &v, sizeof(v));
			*len = sizeof(v);
		} else if (name == TCP_CONGESTION) {
			strncpy(val, "ferry", *len);
		} else {
			ret = ERR(ENOPROTOOPT);
		}
	}
	FP_LEAVE();
	return ret;
}

/* getpeername and getsockname: a ferry socket's names are sock/'s. */
static int fp_name(int fd, struct sockaddr *addr, socklen_t *len,
		   int (*real)(int, struct sockaddr *, socklen_t *),
		   int (*ferry)(int, struct sockaddr *, socklen_t *))
{
	struct fp_fd *e = fp_get(fd);
	int ret;

	if (fp_inside() || !e || e->kind != FP_FERRY)
		return real(fd, addr, len);
	FP_ENTER();
	ret = ferry(e->sfd, addr, len);
	FP_LEAVE();
	return ret;
}

FP_EXPORT int getpeername(int fd, struct sockaddr *addr, socklen_t *len)
{
	fp_real_init();
	return fp_name(fd, addr, len, fp_real.getpeername, ferry_sock_getpeername);
}

FP_EXPORT int getsockname(int fd, struct sockaddr *addr, socklen_t *len)
{
	fp_real_init();
	return fp_name(fd, addr, len, fp_real.getsockname, ferry_sock_getsockname);
}

FP_EXPORT int shutdown(int fd, int how)
{
	struct fp_fd *e = fp_get(fd);
	int ret;

	fp_real_init();
	if (fp_inside() || !e || e->kind != FP_FERRY)
		return fp_real.shutdown(fd, how);
	FP_ENTER();
	ret = ferry_sock_shutdown(e->sfd, how);
	FP_LEAVE();
	return ret;
}
