/*
 * ferry/rsocket.h - librdmacm's rsocket API on ferry's stream sockets.
 *
 * A program written for <rdma/rsocket.h> builds against ferry unchanged by
 * including this header instead: every r* call is a static inline function
 * over the matching ferry_sock_* call, and SOL_RDMA's options map onto
 * SOL_FERRY's.  ferry itself exports no symbol named like librdmacm's, so
 * a program may link both.  Do not include <rdma/rsocket.h> as well.
 */
#ifndef FERRY_RSOCKET_H
#define FERRY_RSOCKET_H

/*
 * The includes of rdma-core's <rdma/rsocket.h>, with ferry's headers for
 * <infiniband/verbs.h> and <rdma/rdma_cma.h>: a program that relies on it
 * for errno, poll, epoll, select or mmap's PROT_* (riomap) builds as is.
 */
#include <ferry/verbs.h>
#include <ferry/cm.h>
#include <ferry/socket.h>
#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SOL_RDMA	SOL_FERRY
#define RDMA_SQSIZE	FERRY_SQSIZE
#define RDMA_RQSIZE	FERRY_RQSIZE
#define RDMA_INLINE	FERRY_INLINE
#define RDMA_IOMAPSIZE	FERRY_IOMAPSIZE
#define RDMA_ROUTE	FERRY_ROUTE

static inline int rsocket(int domain, int type, int protocol)
{
	return ferry_socket(domain, type, protocol);
}
static inline int rbind(int s, const struct sockaddr *addr, socklen_t addrlen)
{
	return ferry_sock_bind(s, addr, addrlen);
}
static inline int rlisten(int s, int backlog)
{
	return ferry_sock_listen(s, backlog);
}
static inline int raccept(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	return ferry_sock_accept(s, addr, addrlen);
}
static inline int rconnect(int s, const struct sockaddr *addr, socklen_t addrlen)
{
	return ferry_sock_connect(s, addr, addrlen);
}
static inline int rshutdown(int s, int how)
{
	return ferry_sock_shutdown(s, how);
}
static inline int rclose(int s)
{
	return ferry_sock_close(s);
}
static inline ssize_t rrecv(int s, void *buf, size_t len, int flags)
{
	return ferry_sock_recv(s, buf, len, flags);
}
static inline ssize_t rrecvfrom(int s, void *buf, size_t len, int flags,
				struct sockaddr *src_addr, socklen_t *addrlen)
{
	return ferry_sock_recvfrom(s, buf, len, flags, src_addr, addrlen);
}
static inline ssize_t rrecvmsg(int s, struct msghdr *msg, int flags)
{
	return ferry_sock_recvmsg(s, msg, flags);
}
static inline ssize_t rsend(int s, const void *buf, size_t len, int flags)
{
	return ferry_sock_send(s, buf, len, flags);
}
static inline ssize_t rsendto(int s, const void *buf, size_t len, int flags,
			      const struct sockaddr *dest_addr, socklen_t addrlen)
{
	return ferry_sock_sendto(s, buf, len, flags, dest_addr, addrlen);
}
static inline ssize_t rsendmsg(int s, const struct msghdr *msg, int flags)
{
	return ferry_sock_sendmsg(s, msg, flags);
}
static inline ssize_t rread(int s, void *buf, size_t count)
{
	return ferry_sock_read(s, buf, count);
}
static inline ssize_t rreadv(int s, const struct iovec *iov, int iovcnt)
{
	return ferry_sock_readv(s, iov, iovcnt);
}
static inline ssize_t rwrite(int s, const void *buf, size_t count)
{
	return ferry_sock_write(s, buf, count);
}
static inline ssize_t rwritev(int s, const struct iovec *iov, int iovcnt)
{
	return ferry_sock_writev(s, iov, iovcnt);
}
static inline int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return ferry_sock_poll(fds, nfds, timeout);
}
static inline int rselect(int nfds, fd_set *readfds, fd_set *writefds,
			  fd_set *exceptfds, struct timeval *timeout)
{
	return ferry_sock_select(nfds, readfds, writefds, exceptfds, timeout);
}
static inline int rgetpeername(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	return ferry_sock_getpeername(s, addr, addrlen);
}
static inline int rgetsockname(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	return ferry_sock_getsockname(s, addr, addrlen);
}
static inline int rsetsockopt(int s, int level, int optname, const void *optval,
			      socklen_t optlen)
{
	return ferry_sock_setsockopt(s, level, optname, optval, optlen);
}
static inline int rgetsockopt(int s, int level, int optname, void *optval,
			      socklen_t *optlen)
{
	return ferry_sock_getsockopt(s, level, optname, optval, optlen);
}
/* rfcntl takes one int argument after @cmd (F_GETFL, F_SETFL). */
#define rfcntl(s, ...) ferry_sock_fcntl((s), __VA_ARGS__)
static inline off_t riomap(int s, void *buf, size_t len, int prot, int flags,
			   off_t offset)
{
	return ferry_sock_iomap(s, buf, len, prot, flags, offset);
}
static inline int riounmap(int s, void *buf, size_t len)
{
	return ferry_sock_iounmap(s, buf, len);
}
static inline size_t riowrite(int s, const void *buf, size_t count, off_t offset,
			      int flags)
{
	return ferry_sock_iowrite(s, buf, count, offset, flags);
}

/*
 * repoll_* (rdma-core, July 2026).  librdmacm's return an errno value
 * itself from some failures; ferry's return -1 with errno set, as epoll's
 * do, so a check for nonzero (or for -1) works with both.
 */
static inline int repoll_create(int flags)
{
	return ferry_sock_epoll_create1(flags);
}
static inline int repoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	return ferry_sock_epoll_ctl(epfd, op, fd, event);
}
static inline int repoll_wait(int epfd, struct epoll_event *events, int maxevents,
			      int timeout)
{
	return ferry_sock_epoll_wait(epfd, events, maxevents, timeout);
}

#ifdef __cplusplus
}
#endif

#endif /* FERRY_RSOCKET_H */
