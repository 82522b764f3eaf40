/*
 * ferry/socket.h - stream sockets over RC queue pairs.
 *
 * A ferry socket carries a byte stream over one RC QP with registered ring
 * buffers, speaking rsocket's wire protocol (version 1), so that over the
 * verbs transport it talks to librdmacm's rsocket and over the shm
 * transport it runs between processes of one host at memory speed.
 *
 * The calls mirror the BSD socket calls one for one: ferry_socket() for
 * socket(), ferry_sock_<call>() for <call>().  A ferry socket is named by a
 * real kernel file descriptor that ferry reserves for it, so its number
 * never collides with the application's own files and follows the
 * lowest-free rule; it must be used with ferry_sock_* calls only (and closed
 * with ferry_sock_close).  <ferry/rsocket.h> maps rsocket's names (rsocket,
 * rbind, ..., riowrite) onto these calls.
 *
 * Error convention: as the BSD calls: -1 with errno set.
 */
#ifndef FERRY_SOCKET_H
#define FERRY_SOCKET_H

#include <poll.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ferry's own socket options, level SOL_FERRY (rsocket's SOL_RDMA values). */
#define SOL_FERRY		0x10000
#define FERRY_SQSIZE		0	/* send queue depth (int) */
#define FERRY_RQSIZE		1	/* receive queue depth (int) */
#define FERRY_INLINE		2	/* inline threshold in bytes (int) */
#define FERRY_IOMAPSIZE		3	/* iomap entries (int) */
#define FERRY_ROUTE		4	/* not supported: ENOPROTOOPT */
#define FERRY_TRANSPORT_OPT	0x100	/* getsockopt: "shm" or "verbs" (char[16]) */
/* The send ring's bytes (int), as SO_SNDBUF sets them, but leaving the send
 * buffer free to grow beyond the ring up to tcp_wmem's maximum. */
#define FERRY_SNDRING		0x101

int ferry_socket(int domain, int type, int protocol);
int ferry_sock_bind(int s, const struct sockaddr *addr, socklen_t addrlen);
int ferry_sock_listen(int s, int backlog);
int ferry_sock_accept(int s, struct sockaddr *addr, socklen_t *addrlen);
int ferry_sock_accept4(int s, struct sockaddr *addr, socklen_t *addrlen, int flags);
int ferry_sock_connect(int s, const struct sockaddr *addr, socklen_t addrlen);
int ferry_sock_shutdown(int s, int how);
int ferry_sock_close(int s);

ssize_t ferry_sock_send(int s, const void *buf, size_t len, int flags);
ssize_t ferry_sock_sendto(int s, const void *buf, size_t len, int flags,
			  const struct sockaddr *dest_addr, socklen_t addrlen);
ssize_t ferry_sock_sendmsg(int s, const struct msghdr *msg, int flags);
ssize_t ferry_sock_write(int s, const void *buf, size_t count);
ssize_t ferry_sock_writev(int s, const struct iovec *iov, int iovcnt);

ssize_t ferry_sock_recv(int s, void *buf, size_t len, int flags);
ssize_t ferry_sock_recvfrom(int s, void *buf, size_t len, int flags,
			    struct sockaddr *src_addr, socklen_t *addrlen);
ssize_t ferry_sock_recvmsg(int s, struct msghdr *msg, int flags);
ssize_t ferry_sock_read(int s, void *buf, size_t count);
ssize_t ferry_sock_readv(int s, const struct iovec *iov, int iovcnt);

/*
 * ferry_sock_poll / ferry_sock_select - poll(2) and select(2) over any mix of
 * ferry sockets and ordinary file descriptors.
 */
int ferry_sock_poll(struct pollfd *fds, nfds_t nfds, int timeout);
int ferry_sock_select(int nfds, fd_set *readfds, fd_set *writefds,
		      fd_set *exceptfds, struct timeval *timeout);

/*
 * ferry_sock_epoll_create1 / _ctl / _wait - epoll(7) over any mix of ferry
 * sockets and ordinary file descriptors (rsocket's repoll_*): level-
 * triggered, EPOLLET and EPOLLONESHOT as epoll has them, the same errors.
 * The set's number is a real epoll fd; close it with ferry_sock_close.
 * @flags: EPOLL_CLOEXEC, and O_NONBLOCK as rsocket takes it.
 */
int ferry_sock_epoll_create1(int flags);
int ferry_sock_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event);
int ferry_sock_epoll_wait(int epfd, struct epoll_event *events, int maxevents,
			  int timeout);

int ferry_sock_getpeername(int s, struct sockaddr *addr, socklen_t *addrlen);
int ferry_sock_getsockname(int s, struct sockaddr *addr, socklen_t *addrlen);
int ferry_sock_setsockopt(int s, int level, int optname, const void *optval,
			  socklen_t optlen);
int ferry_sock_getsockopt(int s, int level, int optname, void *optval,
			  socklen_t *optlen);
int ferry_sock_fcntl(int s, int cmd, ... /* int arg */);
int ferry_sock_ioctl(int s, unsigned long request, ... /* int *arg */);

/* Is @s a ferry socket? 1 yes, 0 no. */
int ferry_sock_is_ferry(int s);

/*
 * Direct placement (rsocket's riomap/riounmap/riowrite): expose @buf to the
 * peer at @offset; the peer's ferry_sock_iowrite places data there with one
 * RDMA WRITE, in order with the stream.
 */
off_t ferry_sock_iomap(int s, void *buf, size_t len, int prot, int flags, off_t offset);
int ferry_sock_iounmap(int s, void *buf, size_t len);
size_t ferry_sock_iowrite(int s, const void *buf, size_t count, off_t offset, int flags);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_SOCKET_H */
