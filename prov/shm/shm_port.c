/*
 * shm_port.c - the shm device's one port and the process's address on it:
 * ferry_query_port, ferry_query_gid, ferry_query_pkey.
 *
 * A process's LID is a number it holds, not one it computes: the first
 * query binds an abstract AF_UNIX name "\0ferry/shm/lid/v1/<lid>" and
 * keeps the socket open for the life of the process.  The kernel gives a
 * name to one socket at a time, so no two live processes of one network
 * namespace hold the same LID, and the name goes when the process does.
 * A namespace is the scope in which shm peers reach each other at all
 * (abstract names, like TCP ports, are per network namespace), so it is
 * the LID's scope; the GID adds the namespace and is unique on the host:
 *
 *   bytes 0-3    fd 66 72 79   a unique-local IPv6 prefix ("fd" "fry"):
 *                              an shm GID, not any interface's
 *   bytes 4-7    the inode of the network namespace (big-endian)
 *   bytes 8-13   zero
 *   bytes 14-15  the LID (big-endian)
 *
 * The bound socket is also where the out-of-band join (a QP moved to RTR
 * with dest_qp_num and an address vector, shm_join.c) finds its peer: at
 * the first join it listens, and a peer dials the LID's name asking for
 * a QP number.  Anyone on the host may bind an abstract name, so a name
 * proves nothing about who holds it until it is held: the first free
 * number is taken (a squatter only moves us on), and from then on the
 * name is ours for the life of the process.  Whoever says it holds a
 * LID is checked the other way round: the process listening on that
 * LID's name (SO_PEERCRED of a connection to it) must be the one talking
 * (shm_join_msg.c).
 *
 * A child of fork inherits the parent's socket, but not its address: its
 * first query claims a LID of its own (claims are per ferry_pid()).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <arpa/inet.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "shm-internal.h"

#define SHM_LID_MAX	0xbfff	/* InfiniBand's last unicast LID */
#define SHM_PKEY_DEFAULT 0xffff	/* the default partition, full member */
#define SHM_PORT_BACKLOG 64	/* joins waiting for the join thread's accept */

/* The process's claim: its socket, and what it stands for. */
static struct {
	pid_t pid;		/* who claimed it; 0: nobody yet */
	int fd;
	uint16_t lid;
	uint32_t netns;		/* inode of the network namespace it was bound in */
	bool listening;		/* listen() called: joins dial it (shm_join.c) */
} shm_port_self;
static pthread_mutex_t shm_port_lock = PTHREAD_MUTEX_INITIALIZER;
FERRY_FORK_SAFE(shm_port, shm_port_lock)

socklen_t shm_port_lid_name(uint16_t lid, struct sockaddr_un *un)
{
	int n;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, "ferry/shm/lid/v1/%u", lid);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static uint32_t shm_port_netns(void)
{
	struct stat st;

	/* Without /proc the namespace is unknown: 0, which no nsfs inode is. */
	return stat("/proc/self/ns/net", &st) == 0 ? (uint32_t)st.st_ino : 0;
}

/*
 * Bind @fd to the first free LID, starting from one the pid picks (so
 * that a host's processes rarely meet on the way).  -1 with
 * EADDRNOTAVAIL when every LID of the namespace is held.
 */
static int shm_port_bind_lid(int fd, pid_t pid, uint16_t *lid_p)
{
	struct sockaddr_un un;
	uint32_t i, lid;
	socklen_t len;

	for (i = 0; i < SHM_LID_MAX; i++) {
		lid = 1 + ((uint32_t)pid + i) % SHM_LID_MAX;
		len = shm_port_lid_name((uint16_t)lid, &un);
		if (bind(fd, (struct sockaddr *)&un, len) == 0) {
			*lid_p = (uint16_t)lid;
			return 0;
		}
		if (errno != EADDRINUSE)
			return -1;
	}
	return ERR(EADDRNOTAVAIL);
}

/* The process's LID and namespace, claimed at the first call. */
static int shm_port_claim(uint16_t *lid_p, uint32_t *netns_p)
{
	pid_t pid = ferry_pid();
	uint16_t lid;
	int fd, ret = 0;

	pthread_mutex_lock(&shm_port_lock);
	if (shm_port_self.pid == pid)
		goto out;
	if (shm_port_self.pid) {
		/* The parent's, inherited across fork: its name stays the
		 * parent's while the parent holds its copy. */
		close(shm_port_self.fd);
		shm_port_self.pid = 0;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || shm_port_bind_lid(fd, pid, &lid) < 0) {
		ferry_warn("shm: cannot claim a LID: %m");
		if (fd >= 0) {
			int e = errno;

			close(fd);
			errno = e;
		}
		ret = -1;
		goto out;
	}
	shm_port_self.fd = ferry_fd_park(fd);
	shm_port_self.listening = false;
	shm_port_self.lid = lid;
	shm_port_self.netns = shm_port_netns();
	shm_port_self.pid = pid;
out:
	if (ret == 0) {
		*lid_p = shm_port_self.lid;
		*netns_p = shm_port_self.netns;
	}
	pthread_mutex_unlock(&shm_port_lock);
	return ret;
}

int shm_query_port(struct ferry_context *ctx, uint8_t port, struct ferry_port_attr *attr)
{
	uint32_t netns;
	uint16_t lid;

	(void)ctx;
	if (port != 1)
		return ERR(EINVAL);
	if (shm_port_claim(&lid, &netns) < 0)
		return -1;
	memset(attr, 0, sizeof(*attr));
	attr->state = FERRY_PORT_ACTIVE;
	attr->max_mtu = FERRY_MTU_4096;
	attr->active_mtu = FERRY_MTU_4096;
	attr->gid_tbl_len = 1;
	attr->max_msg_sz = 1u << 31;	/* InfiniBand's largest message */
	attr->pkey_tbl_len = 1;
	attr->lid = lid;
	attr->max_vl_num = 1;
	attr->active_width = 1;		/* 1X */
	attr->active_speed = 1;		/* SDR: nothing honest to say here */
	attr->phys_state = 5;		/* LinkUp */
	/* InfiniBand's addressing: a LID reaches the peer, a GID may. */
	attr->link_layer = FERRY_LINK_LAYER_INFINIBAND;
	return 0;
}

int shm_query_gid(struct ferry_context *ctx, uint8_t port, int index, union ferry_gid *gid)
{
	uint32_t netns;
	uint16_t lid;

	(void)ctx;
	if (port != 1 || index != 0)
		return ERR(EINVAL);
	if (shm_port_claim(&lid, &netns) < 0)
		return -1;
	memset(gid, 0, sizeof(*gid));
	gid->raw[0] = 0xfd;
	gid->raw[1] = 'f';
	gid->raw[2] = 'r';
	gid->raw[3] = 'y';
	netns = htonl(netns);
	memcpy(&gid->raw[4], &netns, sizeof(netns));
	gid->raw[14] = (uint8_t)(lid >> 8);
	gid->raw[15] = (uint8_t)lid;
	return 0;
}

int shm_query_pkey(struct ferry_context *ctx, uint8_t port, int index, uint16_t *pkey)
{
	(void)ctx;
	if (port != 1 || index != 0)
		return ERR(EINVAL);
	*pkey = htons(SHM_PKEY_DEFAULT);
	return 0;
}

int shm_port_self_lid(uint16_t *lid_p, uint32_t *netns_p)
{
	return shm_port_claim(lid_p, netns_p);
}

/*
 * The LID's socket made a listener (once; non-blocking): the process's
 * door for joins.  Its descriptor stays the port's: the caller polls and
 * accepts on it but never closes it.
 */
int shm_port_listener(uint16_t *lid_p)
{
	uint32_t netns;
	int fd = -1;

	if (shm_port_claim(lid_p, &netns) < 0)
		return -1;
	pthread_mutex_lock(&shm_port_lock);
	if (!shm_port_self.listening) {
		if (fcntl(shm_port_self.fd, F_SETFL, O_NONBLOCK) < 0 ||
		    listen(shm_port_self.fd, SHM_PORT_BACKLOG) < 0) {
			ferry_warn("shm: cannot listen on LID %u: %m", shm_port_self.lid);
			goto out;
		}
		shm_port_self.listening = true;
	}
	fd = shm_port_self.fd;
out:
	pthread_mutex_unlock(&shm_port_lock);
	return fd;
}

/*
 * The LID an shm GID names, or -1 (EHOSTUNREACH) for any other GID: not
 * ferry's prefix, or another network namespace (whose LIDs we cannot
 * reach).
 */
int shm_port_gid_lid(const union ferry_gid *gid, uint16_t *lid_p)
{
	union ferry_gid mine;
	uint16_t lid;

	if (shm_query_gid(NULL, 1, 0, &mine) < 0)
		return -1;
	/* Everything but the LID (bytes 14-15) must be ours. */
	if (memcmp(gid->raw, mine.raw, 14) != 0)
		return ERR(EHOSTUNREACH);
	lid = (uint16_t)(gid->raw[14] << 8 | gid->raw[15]);
	if (lid == 0 || lid > SHM_LID_MAX)
		return ERR(EHOSTUNREACH);
	*lid_p = lid;
	return 0;
}
