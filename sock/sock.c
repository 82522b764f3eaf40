/*
 * sock.c - the fd table and the life of a ferry socket: socket, bind,
 * listen, accept, connect, shutdown, close, and the names.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "fdtab.h"
#include "sock-internal.h"

/*
 * The fd table (util's fdtab.h): a lookup on the data path is two loads
 * and takes no lock.  A page of slots is made when an fd in its range
 * first names a socket.
 */
static struct fdtab sock_table;

struct ferry_sock *sock_get(int fd)
{
	struct ferry_sock *s = fdtab_get(&sock_table, fd);

	if (!s)
		errno = fd < 0 || fd >= FDTAB_MAX || fcntl(fd, F_GETFD) < 0 ? EBADF : ENOTSOCK;
	return s;
}

int sock_table_set(int fd, struct ferry_sock *s)
{
	return fdtab_put(&sock_table, fd, s, NULL);	/* EMFILE, ENOMEM */
}

void sock_table_clear(int fd)
{
	fdtab_put(&sock_table, fd, NULL, NULL);
}

int ferry_sock_is_ferry(int s)
{
	int e = errno, yes = sock_get(s) != NULL;

	errno = e;
	return yes;
}

int sock_epoll_add(struct ferry_sock *s, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

	if (s->fd_is_cch || s->fd < 0)
		return s->fd < 0 ? 0 : ERR(EINVAL);	/* no set (sock_fd_merge, bare) */
	if (epoll_ctl(s->fd, EPOLL_CTL_ADD, fd, &ev) < 0 && errno != EEXIST) {
		ferry_warn("sock %d: adding fd %d to its epoll set: %m", s->fd, fd);
		return -1;
	}
	return 0;
}

int sock_renumber(int from, int to)
{
	struct ferry_sock *s = sock_get(from);

	if (!s)
		return -1;
	if (from == to)
		return 0;
	if (dup3(from, to, O_CLOEXEC) < 0)
		return -1;
	if (sock_table_set(to, s) < 0) {
		int e = errno;

		close(to);
		return ERR(e);
	}
	sock_table_clear(from);
	if (s->fd_is_cch)
		ferry_comp_channel_renumber(s->cch, to);	/* shm: cannot fail */
	s->fd = to;
	sock_stat_set_fd(s);
	close(from);
	return 0;
}

void sock_epoll_del(struct ferry_sock *s, int fd)
{
	/* A set another process holds too (sock_forget) must keep its
	 * entries; one about to be closed loses them anyway. */
	if (s->detached || s->freeing || s->fd_is_cch || s->fd < 0)
		return;
	epoll_ctl(s->fd, EPOLL_CTL_DEL, fd, NULL);
}

/*
 * A connected shm socket whose peer has no iomap (so announces no memory
 * once connected) becomes its connection: the AF_UNIX socket to the peer,
 * put on number @fd (-1: the lowest free one), is its number and its
 * completion channel, the peer's wake-ups come on it as records, and the
 * CM keeps no copy (ferry_comp_channel_on_conn, ferry_cm_let_go).  One
 * descriptor for the whole connection.  Returns the number, or -1 with
 * nothing changed.
 */
static int sock_fd_on_conn(struct ferry_sock *s, int fd, bool cloexec)
{
	int n;

	if (!s->cch || !s->qp || !s->id || !s->shm_transport || s->detached ||
	    s->remote_iomap.length || !sock_is_connected(s))
		return -1;
	n = ferry_comp_channel_on_conn(s->cch, s->qp, fd, cloexec);
	if (n < 0)
		return -1;
	ferry_cm_let_go(s->id);
	s->fd = n;
	s->fd_is_cch = true;
	return n;
}

/* A bare socket (no epoll set) gets its number: its connection's, or its
 * channel's, moved low. */
static int sock_fd_give(struct ferry_sock *s, bool cloexec)
{
	int old = s->cch->fd, fd;

	if (sock_fd_on_conn(s, -1, cloexec) >= 0) {
		sock_stat_set_fd(s);
		return 0;
	}
	fd = fcntl(old, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
	if (fd < 0)
		return -1;
	if (ferry_comp_channel_renumber(s->cch, fd) < 0) {
		int e = errno;

		close(fd);
		return ERR(e);
	}
	close(old);
	s->fd = fd;
	s->fd_is_cch = true;
	sock_stat_set_fd(s);
	return 0;
}

/*
 * sock_fd_merge - a connected shm socket whose epoll set holds nothing but
 * its completion channel becomes its connection (sock_fd_on_conn), or
 * where it cannot, that channel (the CQ's wake socket): the connection or
 * the channel moves onto the socket's number (dup3) and the set goes.
 * Only before the application can have put the number
 * in an epoll set of its own, or be polling it: a registration there
 * names the set's file, which dup3 closes.  So a blocking connect does it
 * before it returns success (accepted sockets on shm never had a set:
 * accept gives them their channel's number); a non-blocking connect keeps
 * its set (its caller may have registered the number to learn when it
 * completes).
 */
static void sock_fd_merge(struct ferry_sock *s)
{
	int old, flags;

	if (s->fd_is_cch || s->fd < 0 || !s->cch || s->chan_in_epoll || !s->shm_transport ||
	    s->detached || !sock_is_connected(s))
		return;
	flags = fcntl(s->fd, F_GETFD);
	if (flags < 0 || sock_fd_on_conn(s, s->fd, flags & FD_CLOEXEC) >= 0 ||
	    dup3(s->cch->fd, s->fd, (flags & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0)
		return;
	/* The epoll set is gone; the socket's number is its channel's now.
	 * Were renumbering refused, both numbers would name the channel,
	 * which still works: one descriptor is merely not saved. */
	old = s->cch->fd;
	if (ferry_comp_channel_renumber(s->cch, s->fd) == 0) {
		close(old);
		s->fd_is_cch = true;
	}
}

struct ferry_sock *sock_new(int domain, bool nonblock, bool cloexec, bool bare)
{
	struct ferry_sock *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->fd = bare ? -1 : epoll_create1(cloexec ? EPOLL_CLOEXEC : 0);
	if (s->fd < 0 && !bare) {
		free(s);
		return NULL;
	}
	s->domain = domain;
	atomic_init(&s->nonblock, nonblock);
	atomic_init(&s->bl_ctrl, -1);
	pthread_mutex_init(&s->cm_lock, NULL);
	pthread_mutex_init(&s->slock, NULL);
	pthread_mutex_init(&s->plock, NULL);
	pthread_mutex_init(&s->rlock, NULL);
	pthread_mutex_init(&s->cqlock, NULL);
	pthread_mutex_init(&s->wait_lock, NULL);
	pthread_cond_init(&s->wait_cond, NULL);
	sock_opt_defaults(s);
	sock_stat_attach(s);
	return s;
}

void sock_free(struct ferry_sock *s)
{
	s->freeing = true;
	sock_conn_teardown(s);
	sock_stat_detach(s);
	if (s->fd >= 0)
		ferry_fd_close(s->fd);	/* its connection's QP may still hold it */
	pthread_mutex_destroy(&s->cm_lock);
	pthread_mutex_destroy(&s->slock);
	pthread_mutex_destroy(&s->plock);
	pthread_mutex_destroy(&s->rlock);
	pthread_mutex_destroy(&s->cqlock);
	pthread_mutex_destroy(&s->wait_lock);
	pthread_cond_destroy(&s->wait_cond);
	free(s);
}

/**
 * ferry_socket - a new stream socket (AF_INET or AF_INET6, SOCK_STREAM with
 * SOCK_NONBLOCK / SOCK_CLOEXEC).  Returns its fd, or -1 with errno.
 */
int ferry_socket(int domain, int type, int protocol)
{
	int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
	struct ferry_sock *s;

	if (domain != AF_INET && domain != AF_INET6)
		return ERR(EAFNOSUPPORT);
	if (base != SOCK_STREAM)
		return ERR(ESOCKTNOSUPPORT);
	if (protocol != 0 && protocol != IPPROTO_TCP)
		return ERR(EPROTONOSUPPORT);
	s = sock_new(domain, type & SOCK_NONBLOCK, type & SOCK_CLOEXEC, false);
	if (!s)
		return -1;
	if (sock_table_set(s->fd, s) < 0) {
		int e = errno;

		sock_free(s);
		return ERR(e);
	}
	return s->fd;
}

static socklen_t sock_addr_len(int family)
{
	return family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

int ferry_sock_bind(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
	struct ferry_sock *s = sock_get(fd);
	int ret = 0;

	if (!s)
		return -1;
	if (!addr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) ||
	    addrlen < sock_addr_len(addr->sa_family))
		return ERR(EINVAL);
	pthread_mutex_lock(&s->cm_lock);
	if (s->state != SOCK_INIT || s->bound.sa.sa_family)
		ret = ERR(EINVAL);
	else
		memcpy(&s->bound, addr, sock_addr_len(addr->sa_family));
	pthread_mutex_unlock(&s->cm_lock);
	return ret;
}

int sock_listen_adopt(int fd, int backlog, int tcp_fd, int rdv_fd)
{
	struct ferry_sock *s = sock_get(fd);
	int ret;

	if (!s) {
		if (rdv_fd >= 0)
			close(rdv_fd);
		return -1;
	}
	pthread_mutex_lock(&s->cm_lock);
	if (s->state == SOCK_LISTENING && rdv_fd < 0) {
		ret = 0;
	} else if (s->state != SOCK_INIT) {
		if (rdv_fd >= 0)
			close(rdv_fd);
		ret = ERR(EINVAL);
	} else if ((ret = sock_conn_listen(s, backlog, tcp_fd, rdv_fd)) == 0) {
		sock_stat_update(s);
	}
	pthread_mutex_unlock(&s->cm_lock);
	return ret;
}

int sock_listen_held(int fd, int backlog, int tcp_fd)
{
	return sock_listen_adopt(fd, backlog, tcp_fd, -1);
}

/* The CM id of listening socket @fd, or NULL (EINVAL). */
static struct ferry_cm_id *sock_listen_id(int fd)
{
	struct ferry_sock *s = sock_get(fd);

	if (!s)
		return NULL;
	if (s->state != SOCK_LISTENING || !s->id) {
		errno = EINVAL;
		return NULL;
	}
	return s->id;	/* a listener's id stays until it closes */
}

int sock_listen_share(int fd)
{
	struct ferry_cm_id *id = sock_listen_id(fd);

	return id ? ferry_cm_listen_share(id) : -1;
}

int sock_listen_take(int fd)
{
	struct ferry_cm_id *id = sock_listen_id(fd);

	return id ? ferry_cm_listen_take(id) : -1;
}

int sock_listen_offer(int fd, int tcp_fd)
{
	struct ferry_cm_id *id = sock_listen_id(fd);

	return id ? ferry_cm_offer_tcp(id, tcp_fd) : -1;
}

int sock_listen_rendezvous(int fd)
{
	struct ferry_cm_id *id = sock_listen_id(fd);

	return id ? ferry_cm_rendezvous_fd(id) : -1;
}

int ferry_sock_listen(int fd, int backlog)
{
	return sock_listen_held(fd, backlog, -1);
}

static bool sock_accept_ready(struct ferry_sock *s)
{
	bool ready;

	pthread_mutex_lock(&s->cm_lock);
	sock_conn_process(s);
	ready = s->ready != NULL || s->state != SOCK_LISTENING;
	pthread_mutex_unlock(&s->cm_lock);
	return ready;
}

int ferry_sock_accept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags)
{
	struct ferry_sock *s = sock_get(fd), *ns;

	if (!s)
		return -1;
	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))
		return ERR(EINVAL);
	for (;;) {
		pthread_mutex_lock(&s->cm_lock);
		if (s->state != SOCK_LISTENING) {
			pthread_mutex_unlock(&s->cm_lock);
			return ERR(EINVAL);
		}
		sock_conn_process(s);
		ns = sock_conn_take_ready(s);
		if (!ns)
			sock_conn_spare_prepare(s);
		pthread_mutex_unlock(&s->cm_lock);
		if (ns)
			break;
		if (atomic_load(&s->nonblock))
			return ERR(EAGAIN);
		if (sock_wait_handshake(s, sock_accept_ready, 0) < 0)
			return -1;
	}
	atomic_store(&ns->nonblock, !!(flags & SOCK_NONBLOCK));
	if (ns->fd < 0 && sock_fd_give(ns, flags & SOCK_CLOEXEC) < 0) {
		int e = errno;

		/* No number for it (EMFILE, say): the connection stays queued
		 * for a later accept, as a TCP listener's does. */
		pthread_mutex_lock(&s->cm_lock);
		if (s->state == SOCK_LISTENING)
			sock_conn_put_back(s, ns);
		else
			sock_free(ns);
		pthread_mutex_unlock(&s->cm_lock);
		return ERR(e);
	}
	if (!(flags & SOCK_CLOEXEC))
		fcntl(ns->fd, F_SETFD, 0);
	if (sock_table_set(ns->fd, ns) < 0) {
		int e = errno;

		sock_free(ns);
		return ERR(e);
	}
	if (addr && addrlen && ferry_sock_getpeername(ns->fd, addr, addrlen) < 0)
		*addrlen = 0;
	return ns->fd;
}

int ferry_sock_accept(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
	return ferry_sock_accept4(fd, addr, addrlen, 0);
}

static bool sock_connect_done(struct ferry_sock *s)
{
	bool done;

	pthread_mutex_lock(&s->cm_lock);
	sock_conn_process(s);
	done = s->state != SOCK_CONNECTING;
	pthread_mutex_unlock(&s->cm_lock);
	return done;
}

/* The connect request is on its way to the peer, or the connect is over. */
static bool sock_connect_sent(struct ferry_sock *s)
{
	bool sent;

	pthread_mutex_lock(&s->cm_lock);
	sock_conn_process(s);
	sent = s->state != SOCK_CONNECTING || s->qp;
	pthread_mutex_unlock(&s->cm_lock);
	return sent;
}

int sock_connect_bound(int fd, unsigned int ms)
{
	struct ferry_sock *s = sock_get(fd);
	int ret = 0;

	if (!s)
		return -1;
	pthread_mutex_lock(&s->cm_lock);
	if (s->state == SOCK_INIT)
		s->connect_ms = ms;
	else
		ret = ERR(EISCONN);
	pthread_mutex_unlock(&s->cm_lock);
	return ret;
}

int ferry_sock_connect(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
	struct ferry_sock *s = sock_get(fd);
	int ret, err;

	if (!s)
		return -1;
	if (!addr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) ||
	    addrlen < sock_addr_len(addr->sa_family))
		return ERR(EINVAL);
	pthread_mutex_lock(&s->cm_lock);
	switch (s->state) {
	case SOCK_INIT:
		ret = sock_conn_connect(s, addr, addrlen);
		if (ret == 0)
			sock_stat_update(s);
		break;
	case SOCK_CONNECTING:
		ret = ERR(EALREADY);
		break;
	case SOCK_CONNECTED:
		ret = ERR(EISCONN);
		break;
	default:
		ret = ERR(EINVAL);
		break;
	}
	pthread_mutex_unlock(&s->cm_lock);
	if (ret < 0 && errno != EALREADY)
		return -1;
	if (ret < 0 && !atomic_load(&s->nonblock))
		errno = 0;	/* a blocking connect joins the one under way */
	else if (ret < 0)
		return -1;
	if (atomic_load(&s->nonblock)) {
		/*
		 * Address and route resolution are local steps (at most the
		 * CM's timeouts), taken here: nothing but the caller takes a
		 * connecting socket's CM steps, and the peer must see the
		 * request without this socket being polled again, as a TCP
		 * peer sees the SYN.  Failures show in SO_ERROR.
		 */
		sock_wait(s, sock_connect_sent,
			  monotime_ns() + 2ull * SOCK_CM_TIMEOUT_MS * 1000000u);
		/* Even a connection refused at once is reported through
		 * SO_ERROR, as a non-blocking TCP connect does. */
		if (sock_connect_done(s) && s->state == SOCK_CONNECTED)
			return 0;
		return ERR(EINPROGRESS);
	} else if (sock_wait_handshake(s, sock_connect_done, 0) < 0) {
		return -1;
	}
	pthread_mutex_lock(&s->cm_lock);
	ret = 0;
	if (s->state != SOCK_CONNECTED) {
		err = s->so_error ? s->so_error : ECONNREFUSED;
		s->so_error = 0;
		ret = ERR(err);
	}
	pthread_mutex_unlock(&s->cm_lock);
	/* What the peer sent while we waited was taken without credits in
	 * return (sock_give_credits waits for ESTABLISHED): return them now. */
	if (ret == 0) {
		sock_fd_merge(s);
		sock_give_credits(s, false);
	}
	return ret;
}

int ferry_sock_shutdown(int fd, int how)
{
	struct ferry_sock *s = sock_get(fd);
	unsigned int closed;

	if (!s)
		return -1;
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return ERR(EINVAL);
	if (!sock_is_connected(s))
		return ERR(ENOTCONN);
	if (how == SHUT_RD || how == SHUT_RDWR)
		atomic_fetch_or(&s->closed, SOCK_SHUT_RD);
	if (how == SHUT_RD) {
		sock_stat_flags(s);
		return 0;
	}
	/* Data written before is ahead of the control message on the QP; data
	 * still in the send backlog goes first, the message after it. */
	pthread_mutex_lock(&s->slock);
	closed = atomic_fetch_or(&s->closed, SOCK_SHUT_WR);
	if (!(closed & (SOCK_SHUT_WR | SOCK_RESET | SOCK_PEER_GONE)))
		sock_backlog_ctrl(s, how == SHUT_RDWR ? RS_CTRL_DISCONNECT : RS_CTRL_SHUTDOWN);
	else if (how == SHUT_RDWR && atomic_load(&s->bl_ctrl) >= 0)
		atomic_store(&s->bl_ctrl, RS_CTRL_DISCONNECT);
	else if (how == SHUT_RDWR)
		atomic_fetch_or(&s->closed, SOCK_DISC_SENT);
	pthread_mutex_unlock(&s->slock);
	sock_stat_flags(s);
	return 0;
}

/*
 * Orderly end of a connection on close: DISCONNECT after the data, then
 * wait (linger) for what is in flight before the CM tears the QP down:
 * what is not acknowledged when the QP goes is lost.  Without SO_LINGER
 * the wait is SOCK_CLOSE_WAIT_MS at most (kernel TCP goes on sending after
 * close; a QP cannot outlive its socket).  It used to be one second, which
 * a Soft-RoCE peer under load could take to acknowledge: its last bytes and
 * the DISCONNECT were lost, and it read EOF early.
 */
#define SOCK_CLOSE_WAIT_MS	10000

static void sock_close_connected(struct ferry_sock *s)
{
	unsigned int closed;
	int wait_ms = SOCK_CLOSE_WAIT_MS;

	if (s->linger_on)
		wait_ms = s->linger_s * 1000;
	pthread_mutex_lock(&s->slock);
	/* What the send backlog holds first, as TCP goes on sending it; an
	 * abortive close (SO_LINGER 0) drops it. */
	if (!(s->linger_on && !s->linger_s))
		sock_backlog_drain(s, wait_ms);
	closed = atomic_fetch_or(&s->closed, SOCK_DISC_SENT | SOCK_SHUT_WR);
	if (!(closed & (SOCK_DISC_SENT | SOCK_RESET)) && !(s->linger_on && !s->linger_s))
		sock_send_ctrl(s, RS_CTRL_DISCONNECT, SOCK_CM_TIMEOUT_MS);
	pthread_mutex_unlock(&s->slock);
	if (wait_ms > 0 && !(atomic_load(&s->closed) & SOCK_RESET))
		sock_drain_sends(s, wait_ms);
	/* No ferry_disconnect: sock_free destroys the id right after, which
	 * tells the peer as well, and a trip to the CM thread is spared. */
}

void sock_forget(int fd)
{
	struct ferry_sock *s = sock_get(fd);

	if (!s)
		return;
	sock_epoll_forget(s);
	sock_table_clear(fd);
	sock_ka_forget(s);
	s->detached = true;
	if (s->pd)
		ferry_pd_detach(s->pd);
	if (s->cq)
		ferry_cq_detach(s->cq);
	if (s->id)
		ferry_cm_detach(s->id);
	/* Nothing goes to the peer: the connection is not ours alone. */
	atomic_fetch_or(&s->closed, SOCK_DISC_SENT | SOCK_SHUT_WR);
	sock_free(s);
}

int ferry_sock_close(int fd)
{
	struct ferry_sock *s = sock_get(fd);

	if (!s) {
		int e = errno;

		/* rsocket's rclose closes its epoll sets too. */
		if (e == ENOTSOCK && sock_epoll_close(fd) == 0)
			return 0;
		return ERR(e);
	}
	sock_epoll_forget(s);
	sock_table_clear(fd);
	sock_ka_forget(s);
	if (sock_is_connected(s))
		sock_close_connected(s);
	sock_free(s);
	return 0;
}

static int sock_copy_name(const struct sockaddr *sa, struct sockaddr *addr, socklen_t *addrlen)
{
	socklen_t len;

	if (!addr || !addrlen)
		return ERR(EFAULT);
	len = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) :
	      sizeof(struct sockaddr_in);
	memcpy(addr, sa, *addrlen < len ? *addrlen : len);
	*addrlen = len;
	return 0;
}

int ferry_sock_getpeername(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
	struct ferry_sock *s = sock_get(fd);

	if (!s)
		return -1;
	if (!sock_is_connected(s) || !s->id)
		return ERR(ENOTCONN);
	return sock_copy_name(ferry_get_peer_addr(s->id), addr, addrlen);
}

int ferry_sock_getsockname(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
	struct ferry_sock *s = sock_get(fd);
	struct sockaddr_storage any = { .ss_family = AF_INET };
	const struct sockaddr *sa;

	if (!s)
		return -1;
	pthread_mutex_lock(&s->cm_lock);
	if (s->id && ferry_get_local_addr(s->id)->sa_family)
		sa = ferry_get_local_addr(s->id);
	else if (s->bound.sa.sa_family)
		sa = &s->bound.sa;
	else {
		any.ss_family = (sa_family_t)s->domain;
		sa = (struct sockaddr *)&any;
	}
	pthread_mutex_unlock(&s->cm_lock);
	return sock_copy_name(sa, addr, addrlen);
}
