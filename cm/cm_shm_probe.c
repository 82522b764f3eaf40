/*
 * cm_shm_probe.c - would a connect over shm find a ferry listener
 * (cm_transport.probe)?  The preload shim asks before it makes anything
 * for a ferry connect, so that a destination ferry does not serve costs
 * the program about what TCP alone costs: one sock_diag round trip in the
 * caller's thread, on the netlink socket the CM keeps anyway.
 *
 * The kernel says which listening TCP socket a connection would reach
 * (cm_shm_owner.c), and a ferry listener is named after that socket.  A
 * connect that dialled the name and found no ferry listener, or one that
 * is not the port owner's, leaves here the destination and the socket's
 * cookie (the kernel never gives one cookie to two sockets).  Later
 * connects to that destination go to TCP without a look for
 * SHM_CM_PROBE_QUICK_MS, then ask sock_diag again: while the same socket
 * listens there, TCP again, with no dial, for SHM_CM_PROBE_TTL_MS since
 * the dial.  Nothing listening at all is never remembered: a server that
 * comes up is found by the very next connect.
 *
 * How a client learns that a ferry listener appeared: a new server, even
 * on the same port, listens on a new socket with a new cookie, which the
 * first look after SHM_CM_PROBE_QUICK_MS sees.  A socket that comes to
 * have a ferry listener after a connect found none behind it -- the
 * shim's listen() on a socket the kernel gives its port lets the kernel
 * listen first; a listening socket inherited from a program not under the
 * shim -- is dialled again SHM_CM_PROBE_TTL_MS after.  A ferry listener
 * that goes (its ferry side given up) is learnt by the next connect that
 * dials it.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "cm_shm.h"

/* How long a destination found without a ferry listener goes to TCP unlooked. */
#define SHM_CM_PROBE_QUICK_MS	100
/* How long the same listening socket is believed to have none, undialled. */
#define SHM_CM_PROBE_TTL_MS	1000
/* Destinations remembered; beyond, the oldest memory goes. */
#define SHM_CM_PROBE_SLOTS	64
/*
 * How long the owner a probe found serves the connect behind it: the shim
 * probes, then connects at once, and asking sock_diag twice cost three
 * system calls per connection.  A listener gone meanwhile fails the dial
 * (the shim then goes to TCP), as it would a moment after a fresh look.
 */
#define SHM_CM_PROBE_REUSE_MS	50

struct shm_cm_probe_slot {
	struct sockaddr_in6 dst;	/* or a sockaddr_in; family 0: free */
	uint64_t cookie;		/* of the TCP socket listening there */
	uint64_t inode;
	uint64_t dialled_ms;		/* when a connect found it so */
	uint64_t looked_ms;		/* when sock_diag last named the same socket */
	enum ferry_cm_probe why;	/* NO_FERRY or NOT_OWNER */
};

static struct {
	pthread_mutex_t lock;
	struct shm_cm_probe_slot v[SHM_CM_PROBE_SLOTS];
} shm_cm_probe_mem = { .lock = PTHREAD_MUTEX_INITIALIZER };
FERRY_FORK_SAFE(shm_cm_probe_mem, shm_cm_probe_mem.lock)

/* The last owner a probe found, until a connect takes it. */
static struct {
	pthread_mutex_t lock;
	bool valid;
	struct sockaddr_in6 dst;	/* or a sockaddr_in */
	struct shm_cm_owner owner;
	uint64_t looked_ms;
} shm_cm_probe_last = { .lock = PTHREAD_MUTEX_INITIALIZER };
FERRY_FORK_SAFE(shm_cm_probe_last, shm_cm_probe_last.lock)

/* Is slot @m about destination @dst?  Address and port only: the rest of a
 * sockaddr (sin_zero, flow label) is whatever the program left there. */
static bool shm_cm_probe_is(const struct shm_cm_probe_slot *m, const struct sockaddr *dst)
{
	const struct sockaddr *sa = (const struct sockaddr *)&m->dst;

	if (sa->sa_family != dst->sa_family || cm_addr_port(sa) != cm_addr_port(dst))
		return false;
	if (dst->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)dst)->sin_addr.s_addr;
	return dst->sa_family == AF_INET6 &&
	       memcmp(&m->dst.sin6_addr, &((const struct sockaddr_in6 *)dst)->sin6_addr,
		      sizeof(m->dst.sin6_addr)) == 0;
}

/* The slot of @dst, or NULL (lock held). */
static struct shm_cm_probe_slot *shm_cm_probe_find(const struct sockaddr *dst)
{
	size_t i;

	for (i = 0; i < SHM_CM_PROBE_SLOTS; i++)
		if (shm_cm_probe_is(&shm_cm_probe_mem.v[i], dst))
			return &shm_cm_probe_mem.v[i];
	return NULL;
}

/* The slot for @dst: its own, else a free one or the oldest (lock held). */
static struct shm_cm_probe_slot *shm_cm_probe_take(const struct sockaddr *dst)
{
	struct shm_cm_probe_slot *m = shm_cm_probe_find(dst), *pick = NULL;
	size_t i;

	if (m)
		return m;
	for (i = 0; i < SHM_CM_PROBE_SLOTS; i++) {
		m = &shm_cm_probe_mem.v[i];
		if (!pick || m->looked_ms < pick->looked_ms)
			pick = m;	/* free (0) or the oldest */
	}
	return pick;
}

void shm_cm_probe_learn(const struct sockaddr *dst, const struct shm_cm_owner *o,
			enum ferry_cm_probe why)
{
	uint64_t now = monotime_coarse_ms();
	struct shm_cm_probe_slot *m;
	socklen_t len = cm_addr_len(dst);

	if (!len)
		return;
	pthread_mutex_lock(&shm_cm_probe_mem.lock);
	m = shm_cm_probe_take(dst);
	memset(m, 0, sizeof(*m));
	memcpy(&m->dst, dst, len);
	m->cookie = o->cookie;
	m->inode = o->inode;
	m->dialled_ms = m->looked_ms = now;
	m->why = why;
	pthread_mutex_unlock(&shm_cm_probe_mem.lock);
}

/*
 * What is remembered of @dst: NO_FERRY or NOT_OWNER, or MAYBE when nothing
 * (fresh enough) is.  @o: the socket sock_diag names there now, or NULL
 * when not looked yet.
 */
static enum ferry_cm_probe shm_cm_probe_recall(const struct sockaddr *dst,
					       const struct shm_cm_owner *o)
{
	enum ferry_cm_probe r = FERRY_CM_PROBE_MAYBE;
	uint64_t now = monotime_coarse_ms();
	struct shm_cm_probe_slot *m;

	pthread_mutex_lock(&shm_cm_probe_mem.lock);
	m = shm_cm_probe_find(dst);
	if (m && !o && now - m->looked_ms < SHM_CM_PROBE_QUICK_MS) {
		r = m->why;
	} else if (m && o && o->cookie == m->cookie && o->inode == m->inode &&
		   now - m->dialled_ms < SHM_CM_PROBE_TTL_MS) {
		m->looked_ms = now;
		r = m->why;
	}
	pthread_mutex_unlock(&shm_cm_probe_mem.lock);
	return r;
}

static void shm_cm_probe_owner_keep(const struct sockaddr *dst, const struct shm_cm_owner *o)
{
	socklen_t len = cm_addr_len(dst);

	if (!len || len > sizeof(shm_cm_probe_last.dst))
		return;
	pthread_mutex_lock(&shm_cm_probe_last.lock);
	memset(&shm_cm_probe_last.dst, 0, sizeof(shm_cm_probe_last.dst));
	memcpy(&shm_cm_probe_last.dst, dst, len);
	shm_cm_probe_last.owner = *o;
	shm_cm_probe_last.looked_ms = monotime_coarse_ms();
	shm_cm_probe_last.valid = true;
	pthread_mutex_unlock(&shm_cm_probe_last.lock);
}

bool shm_cm_probe_owner_take(const struct sockaddr *dst, struct shm_cm_owner *owner_p)
{
	struct shm_cm_probe_slot last;
	bool took = false;

	pthread_mutex_lock(&shm_cm_probe_last.lock);
	last.dst = shm_cm_probe_last.dst;
	if (shm_cm_probe_last.valid && shm_cm_probe_is(&last, dst) &&
	    monotime_coarse_ms() - shm_cm_probe_last.looked_ms < SHM_CM_PROBE_REUSE_MS) {
		*owner_p = shm_cm_probe_last.owner;
		shm_cm_probe_last.valid = false;
		took = true;
	}
	pthread_mutex_unlock(&shm_cm_probe_last.lock);
	return took;
}

enum ferry_cm_probe shm_cm_probe(const struct sockaddr *dst)
{
	struct shm_cm_owner owner;
	enum ferry_cm_probe r;

	if (!cm_addr_is_local(dst))
		return FERRY_CM_PROBE_UNREACHED;
	r = shm_cm_probe_recall(dst, NULL);
	if (r != FERRY_CM_PROBE_MAYBE)
		return r;
	if (shm_cm_owner_of(dst, &owner) < 0)
		return errno == ENOENT ? FERRY_CM_PROBE_NO_LISTENER : FERRY_CM_PROBE_UNKNOWN;
	r = shm_cm_probe_recall(dst, &owner);
	if (r == FERRY_CM_PROBE_MAYBE)
		shm_cm_probe_owner_keep(dst, &owner);
	return r;
}
