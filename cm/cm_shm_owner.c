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
#include <pthread.h>
#include <stdatomic.h>
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
 * A peer port for the lookup, different each time: a SO_REUSEPORT group's
 * pick hashes the peer's address and port, and with one fixed peer every
 * client would be sent to the same member (nginx "reuseport": to one
 * worker).  Any spread will do; it need not be unpredictable, since
 * every member is the port owner's.
 */
static uint16_t shm_cm_diag_peer_port(void)
{
	static _Atomic uint32_t turn;
	uint32_t v = (atomic_fetch_add(&turn, 1) + (uint32_t)ferry_pid()) * 2654435761u;

	return (uint16_t)((v >> 16) | 1);
}

/*
 * The exact-lookup request for a connection to @dst: our destination is
 * the socket's source, the peer a wildcard address, which no established
 * connection has, so the kernel's lookup ends at the listener; its port
 * spreads lookups over a SO_REUSEPORT group.
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
	r->id.idiag_dport = htons(shm_cm_diag_peer_port());
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

/*
 * One netlink socket per process, kept: opening and closing one costs
 * twice the lookup itself (1.5 us of 2.3 measured).  Its netlink port id
 * proves before each use that the number is still ours (a program may
 * close descriptors behind our back, and the number be reused); a child
 * of fork drops the parent's (they would read each other's answers).
 */
static struct {
	pthread_mutex_t lock;
	int fd;			/* -1: none open */
	uint32_t port_id;	/* the kernel's nl_pid for it */
	uint32_t seq;		/* of the last request */
} shm_cm_diag = { PTHREAD_MUTEX_INITIALIZER, -1, 0, 0 };
static pthread_once_t shm_cm_diag_once = PTHREAD_ONCE_INIT;

/* Is @fd still the netlink socket whose port id is @port_id? */
static bool shm_cm_diag_still(int fd, uint32_t port_id)
{
	struct sockaddr_nl nl;
	socklen_t len = sizeof(nl);

	return getsockname(fd, (struct sockaddr *)&nl, &len) == 0 &&
	       nl.nl_family == AF_NETLINK && nl.nl_pid == port_id;
}

static void shm_cm_diag_atfork_child(void)
{
	pthread_mutex_init(&shm_cm_diag.lock, NULL);
	if (shm_cm_diag.fd >= 0 && shm_cm_diag_still(shm_cm_diag.fd, shm_cm_diag.port_id))
		close(shm_cm_diag.fd);
	shm_cm_diag.fd = -1;
}

static void shm_cm_diag_init(void)
{
	pthread_atfork(NULL, NULL, shm_cm_diag_atfork_child);
}

/* The kept socket, opened (and bound, for its port id) if need be.  Lock held. */
static int shm_cm_diag_socket(void)
{
	struct sockaddr_nl nl = { .nl_family = AF_NETLINK };
	socklen_t len = sizeof(nl);
	int fd = shm_cm_diag.fd;

	if (fd >= 0 && shm_cm_diag_still(fd, shm_cm_diag.port_id))
		return fd;
	shm_cm_diag.fd = -1;	/* not ours any more: never close it */
	fd = ferry_fd_park(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&nl, sizeof(nl)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&nl, &len) < 0) {
		int e = errno;

		close(fd);
		return ERR(e);
	}
	shm_cm_diag.fd = fd;
	shm_cm_diag.port_id = nl.nl_pid;
	return fd;
}

/*
 * Ask the kernel on the kept socket; the answer (its length) in @buf.  It
 * answers within sendto, so the reply is queued already; an older one left
 * by a request that failed half-way is skipped (its sequence number).
 * Lock held.
 */
static ssize_t shm_cm_diag_ask(const struct sockaddr *dst, void *buf, size_t len)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} msg = {
		.nlh = {
			.nlmsg_len = sizeof(msg),
			.nlmsg_type = SOCK_DIAG_BY_FAMILY,
			.nlmsg_flags = NLM_F_REQUEST,
		},
	};
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	int nl = shm_cm_diag_socket();
	ssize_t n;

	if (nl < 0)
		return -1;
	msg.nlh.nlmsg_seq = ++shm_cm_diag.seq;
	shm_cm_diag_req(dst, &msg.req);
	if (sendto(nl, &msg, sizeof(msg), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		return -1;
	do
		n = recv(nl, buf, len, MSG_DONTWAIT);
	while ((n < 0 && errno == EINTR) ||
	       (n >= (ssize_t)sizeof(struct nlmsghdr) &&
		((struct nlmsghdr *)buf)->nlmsg_seq != msg.nlh.nlmsg_seq));
	return n < 0 && errno == EAGAIN ? ERR(EPROTO) : n;
}

/* Read the kernel's answer: the owner, or -1 (ENOENT: no listener). */
static int shm_cm_diag_parse(const void *buf, size_t len, uint16_t port,
			     struct shm_cm_owner *owner_p)
{
	const struct nlmsghdr *nlh = buf;
	const struct inet_diag_msg *m;

	if (!NLMSG_OK(nlh, len))
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

	pthread_once(&shm_cm_diag_once, shm_cm_diag_init);
	pthread_mutex_lock(&shm_cm_diag.lock);
	n = shm_cm_diag_ask(dst, buf, sizeof(buf));
	pthread_mutex_unlock(&shm_cm_diag.lock);
	if (n < 0)
		return -1;
	return shm_cm_diag_parse(buf, (size_t)n, cm_addr_port(dst), owner_p);
}
