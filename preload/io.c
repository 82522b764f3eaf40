/*
 * io.c - the data calls: read, write, send, recv and their vector,
 * message and file variants.  A ferry socket's go to sock/; every other
 * fd's straight to libc.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "preload.h"

/* The ferry socket @fd names, as sock/'s number, or -1. */
static inline int fp_ferry(int fd)
{
	struct fp_fd *e;

	if (fp_inside())
		return -1;
	e = fp_get(fd);
	return e && e->kind == FP_FERRY ? e->sfd : -1;
}

/*
 * Flags a TCP socket takes without effect on a stream ferry carries, which
 * programs pass anyway: dropped here rather than refused by sock/.
 */
#define FP_SEND_IGNORED (MSG_CONFIRM)
#define FP_RECV_IGNORED (MSG_CMSG_CLOEXEC | MSG_NOSIGNAL)

#define FP_CALL(expr) ({ __typeof__(expr) r_; FP_ENTER(); r_ = (expr); FP_LEAVE(); r_; })

FP_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	int s = fp_ferry(fd);

	if (s < 0) {
		fp_real_init();
		return fp_real.read(fd, buf, n);
	}
	return FP_CALL(ferry_sock_read(s, buf, n));
}

FP_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	int s = fp_ferry(fd);

	if (s < 0) {
		fp_real_init();
		return fp_real.write(fd, buf, n);
	}
	return FP_CALL(ferry_sock_write(s, buf, n));
}

FP_EXPORT ssize_t readv(int fd, const struct iovec *iov, int n)
{
	int s = fp_ferry(fd);

	fp_real_init();
	if (s < 0)
		return fp_real.readv(fd, iov, n);
	return FP_CALL(ferry_sock_readv(s, iov, n));
}

FP_EXPORT ssize_t writev(int fd, const struct iovec *iov, int n)
{
	int s = fp_ferry(fd);

	fp_real_init();
	if (s < 0)
		return fp_real.writev(fd, iov, n);
	return FP_CALL(ferry_sock_writev(s, iov, n));
}

FP_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	int s = fp_ferry(fd);

	fp_real_init();
	if (s < 0)
		return fp_real.recv(fd, buf, n, flags);
	return FP_CALL(ferry_sock_recv(s, buf, n, flags & ~FP_RECV_IGNORED));
}

FP_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *addr,
			   socklen_t *len)
{
	int s = fp_ferry(fd);

	fp_real_init();
	if (s < 0)
		return fp_real.recvfrom(fd, buf, n, flags, addr, len);
	return FP_CALL(ferry_sock_recvfrom(s, buf, n, flags & ~FP_RECV_IGNORED, addr, len));
}

FP_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	int s = fp_ferry(fd);

	fp_real_init();
	if (s < 0)
		return fp_real.recvmsg(fd, msg, flags);
	return FP_CALL(ferry_sock_recvmsg(s, msg, flags & ~FP_RECV_IGNORED));
}

FP_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	int s = fp_ferry(fd);

	fp_real_init();
	if (s < 0)
		return fp_real.send(fd, buf, n, flags);
	return FP_CALL(ferry_sock_send(s, buf, n, flags & ~FP_SEND_IGNORED));
}

/*
 * A TCP Fast Open connect (sendto or sendmsg with MSG_FASTOPEN on a socket
 * not connected yet) happens behind connect()'s back, in the kernel: it
 * stays TCP's.  Counted as a connect the shim does not serve, and the
 * socket forgotten, as a connect that goes to TCP leaves it.
 */
static void fp_fastopen(int fd, int flags, const struct sockaddr *addr, socklen_t len)
{
	struct fp_fd *e;

	if (!(flags & MSG_FASTOPEN) || fp_inside())
		return;
	e = fp_get(fd);
	if (!e || e->kind != FP_TCP)
		return;
	/* The address is the program's, as long as it says: logged if whole. */
	if (addr && len < (e->domain == AF_INET6 ? sizeof(struct sockaddr_in6) :
			   sizeof(struct sockaddr_in)))
		addr = NULL;
	fp_connect_route(addr, SOCK_STAT_RT_UNSUPPORTED, 0);
	fp_free(fp_set(fd, NULL));
}

FP_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags,
			 const struct sockaddr *addr, socklen_t len)
{
	int s = fp_ferry(fd);

	fp_real_init();
	if (s < 0) {
		fp_fastopen(fd, flags, addr, len);
		return fp_real.sendto(fd, buf, n, flags, addr, len);
	}
	(void)addr;	/* Linux's TCP ignores the address on a connected socket */
	(void)len;
	return FP_CALL(ferry_sock_send(s, buf, n, flags & ~FP_SEND_IGNORED));
}

/*
 * The descriptors of SCM_RIGHTS header @c, and their number in *n_p; NULL
 * for another kind of header.  The program's header is not trusted: a
 * length shorter than a header, or past the control buffer, counts none
 * (the kernel refuses such a message with EINVAL anyway).
 */
static int *fp_rights_of(const struct msghdr *msg, struct cmsghdr *c, size_t *n_p)
{
	size_t room = msg->msg_controllen - (size_t)((char *)c - (char *)msg->msg_control);

	*n_p = 0;
	if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len < CMSG_LEN(0) || c->cmsg_len > room)
		return NULL;
	*n_p = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
	return (int *)(void *)CMSG_DATA(c);
}

/* The first descriptor of @msg's SCM_RIGHTS that is of @kind, or -1. */
static int fp_rights_find(const struct msghdr *msg, enum fp_kind kind)
{
	struct cmsghdr *c;
	struct fp_fd *e;
	size_t i, n;
	int *fds;

	for (c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR((struct msghdr *)msg, c)) {
		fds = fp_rights_of(msg, c, &n);
		for (i = 0; i < n; i++) {
			e = fp_get(fds[i]);
			if (e && e->kind == kind)
				return fds[i];
		}
	}
	return -1;
}

/*
 * Descriptors passed with SCM_RIGHTS (socket activation, binary upgrades).
 * The receiver gets the kernel fds, not the shim's state for them:
 *  - a listener's ferry side cannot follow (its CM state is this
 *    process's), and left here it would keep taking ferry clients into a
 *    process that may never accept them; so the listener steps aside to
 *    TCP, in this process too: the receiver gets a plain TCP listener and
 *    every client is served by whichever process accepts;
 *  - a ferry connection's fd is the socket's epoll fd, not a TCP socket:
 *    what the receiver got would be garbage to it, so the message is
 *    refused (EOPNOTSUPP) and nothing is passed; the connection stays the
 *    sender's, whole.
 * Returns -1 (errno set) to refuse the message.
 */
static int fp_pass_rights(const struct msghdr *msg)
{
	int fd;

	if (!msg || !msg->msg_control || fp_inside())
		return 0;
	fd = fp_rights_find(msg, FP_FERRY);
	if (fd >= 0) {
		fp_info("fd %d: a ferry connection cannot be passed with "
			"SCM_RIGHTS: refused (EOPNOTSUPP)", fd);
		errno = EOPNOTSUPP;
		return -1;
	}
	while ((fd = fp_rights_find(msg, FP_LISTEN)) >= 0) {
		fp_info("fd %d: a listener passed with SCM_RIGHTS: "
			"TCP only from now on", fd);
		fp_listen_downgrade(fd, fp_get(fd), false);
	}
	return 0;
}

FP_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	int s = fp_ferry(fd);

	fp_real_init();
	if (s < 0) {
		fp_fastopen(fd, flags, msg ? msg->msg_name : NULL, msg ? msg->msg_namelen : 0);
		if (fp_pass_rights(msg) < 0)
			return -1;
		return fp_real.sendmsg(fd, msg, flags);
	}
	if (msg && msg->msg_name) {
		/* As Linux's TCP: the address of a connected socket is ignored. */
		struct msghdr m = *msg;

		m.msg_name = NULL;
		m.msg_namelen = 0;
		return FP_CALL(ferry_sock_sendmsg(s, &m, flags & ~FP_SEND_IGNORED));
	}
	return FP_CALL(ferry_sock_sendmsg(s, msg, flags & ~FP_SEND_IGNORED));
}

/*
 * The mmsg calls on a stream: one message after the other, as many as go
 * through; the first failure ends the batch (reported only if it is the
 * first message, as the kernel does).
 */
FP_EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags,
		       struct timespec *timeout)
{
	int s = fp_ferry(fd);
	unsigned int i;
	ssize_t r;

	fp_real_init();
	if (s < 0)
		return fp_real.recvmmsg(fd, v, n, flags, timeout);
	for (i = 0; i < n; i++) {
		r = FP_CALL(ferry_sock_recvmsg(s, &v[i].msg_hdr,
					       i ? flags | MSG_DONTWAIT : flags));
		if (r < 0)
			return i ? (int)i : -1;
		v[i].msg_len = (unsigned int)r;
		if (r == 0 || (flags & MSG_WAITFORONE))
			return (int)i + 1;
	}
	return (int)n;
}

FP_EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	int s = fp_ferry(fd);
	unsigned int i;
	ssize_t r;

	fp_real_init();
	if (s < 0) {
		for (i = 0; i < n; i++)
			if (fp_pass_rights(&v[i].msg_hdr) < 0)
				return -1;
		return fp_real.sendmmsg(fd, v, n, flags);
	}
	for (i = 0; i < n; i++) {
		r = FP_CALL(ferry_sock_sendmsg(s, &v[i].msg_hdr, flags));
		if (r < 0)
			return i ? (int)i : -1;
		v[i].msg_len = (unsigned int)r;
	}
	return (int)n;
}

/*
 * sendfile to a ferry socket: the file's bytes through a buffer.  Each
 * chunk read is written whole (blocking, whatever the socket's flag)
 * before the next is read, so nothing taken from the file is lost; the
 * file offset moves only by what was sent.
 */
static ssize_t fp_sendfile(int s, int in, off_t *off, size_t count)
{
	char buf[64 * 1024];
	size_t done = 0, chunk;
	ssize_t r, w, put;
	off_t pos = off ? *off : 0;

	while (done < count) {
		chunk = count - done < sizeof(buf) ? count - done : sizeof(buf);
		r = off ? pread(in, buf, chunk, pos) : fp_real.read(in, buf, chunk);
		if (r <= 0) {
			if (r < 0 && !done)
				return -1;
			break;
		}
		for (put = 0; put < r; put += w) {
			w = FP_CALL(ferry_sock_send(s, buf + put, (size_t)(r - put), 0));
			if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				struct pollfd p = { .fd = s, .events = POLLOUT };

				FP_CALL(ferry_sock_poll(&p, 1, -1));
				w = 0;
				continue;
			}
			if (w < 0) {
				/* Unsent bytes go back to the file's offset. */
				if (!off)
					lseek(in, put - r, SEEK_CUR);
				done += (size_t)put;
				if (off)
					*off = pos + put;
				return done ? (ssize_t)done : -1;
			}
		}
		done += (size_t)r;
		pos += r;
		if ((size_t)r < chunk)
			break;
	}
	if (off)
		*off = pos;
	return (ssize_t)done;
}

FP_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t count)
{
	int s = fp_ferry(out);

	fp_real_init();
	if (s < 0)
		return fp_real.sendfile(out, in, off, count);
	return fp_sendfile(s, in, off, count);
}

FP_EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t count)
{
	int s = fp_ferry(out);

	fp_real_init();
	if (s < 0)
		return fp_real.sendfile64(out, in, off, count);
	return fp_sendfile(s, in, off, count);
}

/*
 * splice with a ferry socket at one end (the other must be a pipe, as for
 * the kernel's splice): through a buffer.  Into a ferry socket, what is
 * taken from the pipe is all written; out of one, only what the pipe can
 * take is read (16 KiB at most, a quarter of a pipe) and then all written,
 * waiting for the pipe's reader if need be; only a pipe whose reader is
 * gone (EPIPE) loses what was read.
 */
FP_EXPORT ssize_t splice(int in, loff_t *in_off, int out, loff_t *out_off, size_t len,
			 unsigned int flags)
{
	int sin = fp_ferry(in), sout = fp_ferry(out);
	char buf[64 * 1024];
	ssize_t r, w, put;

	fp_real_init();
	if (sin < 0 && sout < 0)
		return fp_real.splice(in, in_off, out, out_off, len, flags);
	if ((sin >= 0 && in_off) || (sout >= 0 && out_off) || (sin >= 0 && sout >= 0))
		return ERR(ESPIPE);
	if (len > sizeof(buf))
		len = sizeof(buf);
	if (sout >= 0) {
		r = in_off ? pread(in, buf, len, *in_off) : fp_real.read(in, buf, len);
		if (r <= 0)
			return r;
		if (in_off)
			*in_off += r;
		for (put = 0; put < r; put += w) {
			w = FP_CALL(ferry_sock_send(sout, buf + put, (size_t)(r - put), 0));
			if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				struct pollfd p = { .fd = sout, .events = POLLOUT };

				FP_CALL(ferry_sock_poll(&p, 1, -1));
				w = 0;
			} else if (w < 0) {
				return put ? put : -1;
			}
		}
		return r;
	}
	r = FP_CALL(ferry_sock_recv(sin, buf, len > 16384 ? 16384 : len,
				    (flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0));
	if (r <= 0)
		return r;
	for (put = 0; put < r; put += w) {
		w = out_off ? pwrite(out, buf + put, (size_t)(r - put), *out_off + put) :
			      fp_real.write(out, buf + put, (size_t)(r - put));
		if (w < 0 && errno != EINTR && errno != EAGAIN)
			return put ? put : -1;
		if (w < 0)
			w = 0;
	}
	if (out_off)
		*out_off += r;
	return r;
}
