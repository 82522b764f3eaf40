/*
 * cm_shm_owner.c - who owns a TCP port, and the rendezvous name of the
 * ferry listener that may speak for it.
 *
 * A ferry listener on shm is the process that holds the kernel's listening
 * TCP socket for its address and port: the kernel's bind rules (privileged
 * ports, EADDRINUSE, SO_REUSEPORT only among one uid) then decide who may
 * listen, as they do for TCP.  So its rendezvous name is made from that
 * socket: its inode and its cookie, which nobody can know before the
 * socket exists, and which the kernel tells anyone who asks sock_diag.
 *
 * A client asks the kernel which listening socket a TCP connection to its
 * destination would reach: sock_diag's exact lookup (no NLM_F_DUMP) runs
 * the kernel's own listener lookup (specific address before wildcard,
 * IPv4 into dual-stack IPv6 sockets, a SO_REUSEPORT group's pick), one
 * netlink round trip that walks no table.  It connects to that socket's
 * name and takes the listener only if SO_PEERCRED says it runs as the
 * socket's owner (cm_shm_connect.c).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "cm_shm.h"

/* The loopback device's index in every network namespace: local TCP
 * traffic arrives through it, and a listener bound to another device
 * does not get it. */
#define SHM_CM_LOOPBACK_IFINDEX	1

void shm_cm_name(const struct shm_cm_owner *o, struct sockaddr_un *un, socklen_t *len_p)
{
	int n;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	/* The cookie in hex, as ss -e prints it ("sk:"). */
	n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1,
		     SHM_CM_NAME_PREFIX "/%u/%" PRIu64 "/%" PRIx64,
		     o->port, o->inode, o->cookie);
	*len_p = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int shm_cm_owner_of_fd(int fd, struct shm_cm_owner *owner_p)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	socklen_t clen = sizeof(owner_p->cookie);
	struct stat sb;

	if (fstat(fd, &sb) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_COOKIE, &owner_p->cookie, &clen) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	owner_p->uid = sb.st_uid;
	owner_p->inode = (uint64_t)sb.st_ino;
	owner_p->port = cm_addr_port((struct sockaddr *)&ss);
	return 0;
}

/*
 * The exact-lookup request for a connection to @dst: our destination is
 * the socket's source, the peer a wildcard with port 0, which no
 * established connection has, so the kernel's lookup ends at the listener.
 * An IPv4-mapped destination goes the IPv4 way, as its packets would: the
 * kernel does that when both addresses are mapped.
 */
static void shm_cm_diag_req(const struct sockaddr *dst, struct inet_diag_req_v2 *r)
{
	memset(r, 0, sizeof(*r));
	r->sdiag_family = (uint8_t)dst->sa_family;
	r->sdiag_protocol = IPPROTO_TCP;
	r->idiag_states = 1u << TCP_LISTEN;
	r->id.idiag_sport = htons(cm_addr_port(dst));
	r->id.idiag_if = SHM_CM_LOOPBACK_IFINDEX;
	r->id.idiag_cookie[0] = r->id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	if (dst->sa_family == AF_INET) {
		r->id.idiag_src[0] = ((const struct sockaddr_in *)dst)->sin_addr.s_addr;
		return;
	}
	memcpy(r->id.idiag_src, &((const struct sockaddr_in6 *)dst)->sin6_addr, 16);
	if (IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)dst)->sin6_addr))
		r->id.idiag_dst[2] = htonl(0xffff);
}

/* One request, one answer on the fresh netlink socket @nl; its length or -1. */
static ssize_t shm_cm_diag_ask(int nl, const struct sockaddr *dst, void *buf, size_t len)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} msg = {
		.nlh = {
			.nlmsg_len = sizeof(msg),
			.nlmsg_type = SOCK_DIAG_BY_FAMILY,
			.nlmsg_flags = NLM_F_REQUEST,
			.nlmsg_seq = 1,
		},
	};
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	ssize_t n;

	shm_cm_diag_req(dst, &msg.req);
	if (sendto(nl, &msg, sizeof(msg), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		return -1;
	/* The kernel answers within sendto: the reply is queued already. */
	do
		n = recv(nl, buf, len, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	return n;
}

/* Read the kernel's answer: the owner, or -1 (ENOENT: no listener). */
static int shm_cm_diag_parse(const void *buf, size_t len, uint16_t port,
			     struct shm_cm_owner *owner_p)
{
	const struct nlmsghdr *nlh = buf;
	const struct inet_diag_msg *m;

	if (!NLMSG_OK(nlh, len) || nlh->nlmsg_seq != 1)
		return ERR(EPROTO);
	if (nlh->nlmsg_type == NLMSG_ERROR) {
		const struct nlmsgerr *e = NLMSG_DATA(nlh);

		if (nlh->nlmsg_len < NLMSG_LENGTH(sizeof(*e)))
			return ERR(EPROTO);
		return ERR(e->error ? -e->error : EPROTO);
	}
	if (nlh->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
	    nlh->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
		return ERR(EPROTO);
	m = NLMSG_DATA(nlh);
	if (m->idiag_state != TCP_LISTEN)
		return ERR(ENOENT);	/* not a listener: nothing would accept */
	owner_p->uid = m->idiag_uid;
	owner_p->inode = m->idiag_inode;
	owner_p->cookie = (uint64_t)m->id.idiag_cookie[1] << 32 | m->id.idiag_cookie[0];
	owner_p->port = port;
	return 0;
}

int shm_cm_owner_of(const struct sockaddr *dst, struct shm_cm_owner *owner_p)
{
	/* An inet_diag_msg and its few default attributes; long-aligned. */
	long buf[2048 / sizeof(long)];
	ssize_t n;
	int nl, e;

	nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return -1;
	n = shm_cm_diag_ask(nl, dst, buf, sizeof(buf));
	e = errno;
	close(nl);
	if (n < 0)
		return ERR(e == EAGAIN ? EPROTO : e);
	return shm_cm_diag_parse(buf, (size_t)n, cm_addr_port(dst), owner_p);
}
