/*
 * shm_peer.c - reaching a peer process's memory that is not shared with us
 * (receives and MRs outside ferry_alloc blocks), without ever reaching
 * another process.
 *
 * process_vm_readv/writev name their target by pid, looked up at each call.
 * A peer that exits leaves its pid to be reused; a connection that a child
 * of the peer still holds would not hang up, and the next RDMA WRITE would
 * go, at addresses the peer chose, into whatever process got the pid --
 * with our privileges, which may be root's.  So a connection reaches its
 * peer's memory through /proc/<pid>/mem instead: that descriptor holds the
 * address space it was opened on, not the pid, and reads and writes
 * through it reach that one process or nothing (0 bytes once it exited).
 *
 * It is opened when the connection first needs it (most never do: stream
 * sockets and ferry_alloc memory need no descriptor at all), and only if
 * the process that has the peer's pid then is one that holds the
 * connection:
 *
 *   1. /proc/<pid>, a directory bound to the process that has the pid now
 *      (once it exits, nothing opens through it, whoever gets the pid);
 *   2. through it, the process's mem, and its fd directory, which must
 *      list the other end of our socket (its inode, as sock_diag tells);
 *   3. the mem file belongs to the user the peer's HELLO was sent by, ours.
 *
 * Everything is looked up through the one directory, so it is all one
 * process's, and that process holds the connection: the peer or a child
 * it gave the connection to.  A pid taken over by any other process fails
 * 2.  Only a peer of our own
 * user is reached at all: cross-memory access is what a user may do to its
 * own processes, never what ferry adds toward another user's (a root
 * server's peers of other users get remote access errors for memory
 * outside blocks).  A connection to this very process needs no
 * descriptor: our own pid cannot be reused while we run.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <dirent.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shm-internal.h"

/* The inode of the other end of the AF_UNIX socket @sock; 0 + errno. */
static unsigned int shm_unix_peer_inode(int sock)
{
	struct {
		struct nlmsghdr nlh;
		struct unix_diag_req r;
	} req = {
		.nlh = { .nlmsg_len = sizeof(req), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			 .nlmsg_flags = NLM_F_REQUEST },
		.r = { .sdiag_family = AF_UNIX, .udiag_states = ~0u,
		       .udiag_show = UDIAG_SHOW_PEER,
		       .udiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE } },
	};
	union {
		struct nlmsghdr nlh;
		char buf[512];
	} ans;
	unsigned int peer = 0;
	struct rtattr *rta;
	ssize_t n;
	int nl, len;

	req.r.udiag_ino = (unsigned int)ferry_fd_inode(sock);
	nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return 0;
	if (send(nl, &req, sizeof(req), 0) != (ssize_t)sizeof(req) ||
	    (n = recv(nl, &ans, sizeof(ans), 0)) < (ssize_t)NLMSG_LENGTH(sizeof(struct unix_diag_msg)) ||
	    !NLMSG_OK(&ans.nlh, (unsigned int)n) || ans.nlh.nlmsg_type != SOCK_DIAG_BY_FAMILY) {
		close(nl);
		errno = ESRCH;
		return 0;
	}
	close(nl);
	rta = (struct rtattr *)((char *)NLMSG_DATA(&ans.nlh) + sizeof(struct unix_diag_msg));
	len = (int)ans.nlh.nlmsg_len - (int)NLMSG_LENGTH(sizeof(struct unix_diag_msg));
	for (; RTA_OK(rta, len); rta = RTA_NEXT(rta, len))
		if (rta->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(rta) >= sizeof(peer))
			memcpy(&peer, RTA_DATA(rta), sizeof(peer));
	if (!peer)
		errno = ENOTCONN;
	return peer;
}

/* Does the process of /proc directory @proc hold socket inode @ino? */
static bool shm_proc_holds(int proc, unsigned int ino)
{
	char path[300], link[64], want[32];
	struct dirent *d;
	bool found = false;
	DIR *fds;
	int dfd;

	snprintf(want, sizeof(want), "socket:[%u]", ino);
	dfd = openat(proc, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return false;
	fds = fdopendir(dfd);
	if (!fds) {
		close(dfd);
		return false;
	}
	while (!found && (d = readdir(fds))) {
		ssize_t n;

		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "fd/%s", d->d_name);
		n = readlinkat(proc, path, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = '\0';
			found = strcmp(link, want) == 0;
		}
	}
	closedir(fds);
	return found;
}

/* Steps 1-3 above: the peer's memory file, or -1 + errno. */
static int shm_peer_mem_open(const struct shm_conn *conn)
{
	char path[32];
	struct stat st;
	unsigned int peer_ino;
	int proc, mem = -1, e = ESRCH;

	if (conn->peer_uid != geteuid() || conn->peer_uid != getuid())
		return ERR(EPERM);
	snprintf(path, sizeof(path), "/proc/%d", (int)conn->peer_pid);
	proc = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (proc < 0)
		return -1;
	mem = openat(proc, "mem", O_RDWR | O_CLOEXEC);
	if (mem < 0) {
		e = errno;
		goto err;
	}
	peer_ino = shm_unix_peer_inode(conn->sock);
	if (!peer_ino) {
		e = errno;
		goto err;
	}
	if (!shm_proc_holds(proc, peer_ino) || fstat(mem, &st) < 0 || st.st_uid != conn->peer_uid)
		goto err;	/* ESRCH: not the peer's process (any more) */
	close(proc);
	return ferry_fd_park(mem);
err:
	if (mem >= 0)
		close(mem);
	close(proc);
	return ERR(e);
}

ssize_t shm_peer_rw(struct shm_conn *conn, bool write, const struct iovec *iov, int n,
		    uint64_t addr)
{
	ssize_t r;

	if (addr > (uint64_t)INT64_MAX)
		return ERR(EFAULT);
	if (conn->peer_pid == ferry_pid()) {
		struct iovec remote = { (void *)(uintptr_t)addr, 0 };
		int i;

		for (i = 0; i < n; i++)
			remote.iov_len += iov[i].iov_len;
		return write ? process_vm_writev(conn->peer_pid, iov, (unsigned long)n, &remote, 1, 0)
			     : process_vm_readv(conn->peer_pid, iov, (unsigned long)n, &remote, 1, 0);
	}
	if (conn->peer_mem == SHM_PEER_MEM_UNOPENED) {
		conn->peer_mem = shm_peer_mem_open(conn);
		if (conn->peer_mem < 0) {
			conn->peer_mem_err = errno;
			ferry_info("peer pid %d (uid %u): its memory outside blocks is out of "
				   "reach: %s", (int)conn->peer_pid, (unsigned int)conn->peer_uid,
				   strerror(errno));
			conn->peer_mem = SHM_PEER_MEM_REFUSED;
		}
	}
	if (conn->peer_mem < 0)
		return ERR(conn->peer_mem_err);
	do
		r = write ? pwritev(conn->peer_mem, iov, n, (off_t)addr)
			  : preadv(conn->peer_mem, iov, n, (off_t)addr);
	while (r < 0 && errno == EINTR);
	if (r == 0 && n > 0 && iov[0].iov_len > 0)
		return ERR(ESRCH);	/* its address space is gone: it exited */
	return r;
}
