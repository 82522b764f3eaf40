/*
 * sock_io.c - the send and receive calls of the API, each a thin shape
 * over sock_data_send / sock_data_recv with an iovec array.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <limits.h>

#include "sock-internal.h"

#define SOCK_SEND_FLAGS (MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE | MSG_EOR)
#define SOCK_RECV_FLAGS (MSG_DONTWAIT | MSG_PEEK | MSG_WAITALL | MSG_TRUNC)

static int sock_iov_check(const struct iovec *iov, int iovcnt)
{
	if (iovcnt < 0 || iovcnt > IOV_MAX || (iovcnt && !iov))
		return ERR(EINVAL);
	return 0;
}

ssize_t ferry_sock_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct ferry_sock *s = sock_get(fd);

	if (!s)
		return -1;
	if (!msg || sock_iov_check(msg->msg_iov, (int)msg->msg_iovlen) < 0)
		return ERR(EINVAL);
	if (flags & ~SOCK_SEND_FLAGS)
		return ERR(EOPNOTSUPP);
	if (msg->msg_name && msg->msg_namelen)
		return sock_is_connected(s) ? ERR(EISCONN) : ERR(ENOTCONN);
	return sock_data_send(s, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t ferry_sock_send(int fd, const void *buf, size_t len, int flags)
{
	struct iovec iov = { (void *)buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	return ferry_sock_sendmsg(fd, &msg, flags);
}

ssize_t ferry_sock_sendto(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *dest_addr, socklen_t addrlen)
{
	struct iovec iov = { (void *)buf, len };
	struct msghdr msg = { .msg_name = (void *)dest_addr, .msg_namelen = addrlen,
			      .msg_iov = &iov, .msg_iovlen = 1 };

	return ferry_sock_sendmsg(fd, &msg, flags);
}

ssize_t ferry_sock_write(int fd, const void *buf, size_t count)
{
	return ferry_sock_send(fd, buf, count, 0);
}

ssize_t ferry_sock_writev(int fd, const struct iovec *iov, int iovcnt)
{
	struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };

	if (iovcnt < 0)
		return ERR(EINVAL);
	return ferry_sock_sendmsg(fd, &msg, 0);
}

ssize_t ferry_sock_recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct ferry_sock *s = sock_get(fd);

	if (!s)
		return -1;
	if (!msg || sock_iov_check(msg->msg_iov, (int)msg->msg_iovlen) < 0)
		return ERR(EINVAL);
	if (flags & ~SOCK_RECV_FLAGS)
		return ERR(EOPNOTSUPP);
	msg->msg_flags = 0;
	msg->msg_controllen = 0;
	if (msg->msg_name)
		msg->msg_namelen = 0;
	return sock_data_recv(s, msg->msg_iov, (int)msg->msg_iovlen, flags & ~MSG_TRUNC);
}

ssize_t ferry_sock_recv(int fd, void *buf, size_t len, int flags)
{
	struct iovec iov = { buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	return ferry_sock_recvmsg(fd, &msg, flags);
}

ssize_t ferry_sock_recvfrom(int fd, void *buf, size_t len, int flags,
			    struct sockaddr *src_addr, socklen_t *addrlen)
{
	ssize_t n = ferry_sock_recv(fd, buf, len, flags);

	if (n >= 0 && src_addr && addrlen && ferry_sock_getpeername(fd, src_addr, addrlen) < 0)
		*addrlen = 0;
	return n;
}

ssize_t ferry_sock_read(int fd, void *buf, size_t count)
{
	return ferry_sock_recv(fd, buf, count, 0);
}

ssize_t ferry_sock_readv(int fd, const struct iovec *iov, int iovcnt)
{
	struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };

	if (iovcnt < 0)
		return ERR(EINVAL);
	return ferry_sock_recvmsg(fd, &msg, 0);
}
