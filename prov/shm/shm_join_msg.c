/*
 * shm_join_msg.c - the messages of the out-of-band join's rendezvous
 * (shm_join.h), dialling a LID, and checking who is at the other end.
 *
 * A JOIN names its sender by LID; the listener believes it only when the
 * kernel says the sender is the process listening on that LID's name.
 * LID names are claimed first-come for the life of a process
 * (shm_port.c), so the holder of a LID's name is that LID: a process that
 * claims another's LID in a JOIN is refused, and the QP it asked for
 * waits on for its real peer.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "shm-internal.h"
#include "shm_join.h"

#define SHM_JOIN_QPN_MAX	0xffffffu	/* 24 bits, as on the wire of IB */
#define SHM_JOIN_LID_MAX	0xbfffu		/* the last unicast LID */

int shm_join_msg_send(int sock, struct shm_join_msg *m)
{
	ssize_t n;

	m->magic = SHM_JOIN_MAGIC;
	m->version = SHM_JOIN_VERSION;
	do
		n = send(sock, m, sizeof(*m), MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	return n == (ssize_t)sizeof(*m) ? 0 : ERR(EPROTO);
}

/* Close every descriptor a message carried: the rendezvous passes none. */
static void shm_join_msg_close_fds(struct msghdr *mh)
{
	struct cmsghdr *c;
	size_t i, nfds;
	int fd;

	for (c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < nfds; i++) {
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			close(fd);
		}
	}
}

static bool shm_join_lid_ok(uint16_t lid)
{
	return lid != 0 && lid <= SHM_JOIN_LID_MAX;
}

/* Every field in range: a message from anyone on the host. */
static bool shm_join_msg_ok(const struct shm_join_msg *m)
{
	if (m->magic != SHM_JOIN_MAGIC || m->version != SHM_JOIN_VERSION)
		return false;
	if (m->type < SHM_JOIN_REQ || m->type > SHM_JOIN_REFUSE)
		return false;
	if (m->qp_type != FERRY_QPT_RC && m->qp_type != FERRY_QPT_UC)
		return false;
	if (!shm_join_lid_ok(m->src_lid) || !shm_join_lid_ok(m->dst_lid))
		return false;
	return m->src_qpn <= SHM_JOIN_QPN_MAX && m->dst_qpn <= SHM_JOIN_QPN_MAX &&
	       m->rq_psn <= SHM_JOIN_QPN_MAX;
}

int shm_join_msg_recv(int sock, struct shm_join_msg *m)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} ctl;
	/* One byte more than a message: a longer record shows as such. */
	char buf[sizeof(*m) + 1];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	ssize_t n;

	do
		n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if (n == 0)
		return ERR(ECONNRESET);
	shm_join_msg_close_fds(&mh);
	if ((size_t)n != sizeof(*m) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		return ERR(EPROTO);
	memcpy(m, buf, sizeof(*m));
	return shm_join_msg_ok(m) ? 0 : ERR(EPROTO);
}

int shm_join_msg_dial(uint16_t lid)
{
	struct sockaddr_un un;
	socklen_t len = shm_port_lid_name(lid, &un);
	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (sock < 0)
		return -1;
	sock = ferry_fd_park(sock);
	if (connect(sock, (struct sockaddr *)&un, len) < 0) {
		int e = errno;

		close(sock);
		return ERR(e);	/* ECONNREFUSED: nobody holds it; EAGAIN: backlog full */
	}
	return sock;
}

static int shm_join_msg_peer_pid(int sock, pid_t *pid_p)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -1;
	if (cred.pid <= 0)
		return ERR(ESRCH);
	*pid_p = cred.pid;
	return 0;
}

bool shm_join_msg_peer_holds(int sock, uint16_t lid)
{
	pid_t talker, holder = 0;
	int probe;
	bool same;

	if (shm_join_msg_peer_pid(sock, &talker) < 0) {
		ferry_warn("shm join: SO_PEERCRED of a JOIN's socket: %m");
		return false;
	}
	probe = shm_join_msg_dial(lid);
	if (probe < 0) {
		ferry_info("shm join: pid %d says it is LID %u, which nobody holds: %m",
			   (int)talker, lid);
		return false;
	}
	same = shm_join_msg_peer_pid(probe, &holder) == 0 && holder == talker;
	close(probe);
	if (!same)
		ferry_warn("shm join: pid %d says it is LID %u, which pid %d holds: refused",
			   (int)talker, lid, (int)holder);
	return same;
}
