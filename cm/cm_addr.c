/*
 * cm_addr.c - which transport reaches an address, and address helpers.
 *
 * The transports are core's table (core/transport.c): resolution asks
 * it for the first transport, in order of preference, whose address rule
 * serves the destination -- shm serves this host (loopback, or an address
 * of an interface of this network namespace: cm_addr_is_local, kept
 * here), the verbs transport, when built, what an RDMA device routes to.
 * FERRY_TRANSPORT=shm|verbs forces one (core reads it).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cm-internal.h"

/* Shared per-process devices, one per transport, opened on first use. */
static struct {
	pthread_mutex_t lock;
	struct ferry_context *ctx[CM_TP_MAX];
} cm_devices = { PTHREAD_MUTEX_INITIALIZER, { NULL } };

void **cm_tp_data(struct cm_id_priv *id, const struct cm_transport *tp)
{
	return &id->tp_data[ferry_transport_index_of_cm(tp)];
}

int cm_transport_forced(const struct cm_transport **tp_p)
{
	const struct ferry_transport *tp;

	*tp_p = NULL;
	if (ferry_transport_forced(&tp) < 0) {
		ferry_info("cm: FERRY_TRANSPORT=%s names no transport of the CM in this build",
			   getenv("FERRY_TRANSPORT"));
		return ERR(ENODEV);
	}
	if (tp && !tp->cm) {
		ferry_info("cm: FERRY_TRANSPORT=%s: the CM does not serve that transport yet",
			   tp->name);
		return ERR(ENODEV);
	}
	*tp_p = tp ? tp->cm : NULL;
	return 0;
}

const struct cm_transport *cm_transport_for(const struct sockaddr *dst)
{
	const struct ferry_transport *reaching;
	const struct cm_transport *tp;
	char buf[INET6_ADDRSTRLEN];

	if (cm_transport_forced(&tp) < 0)
		return NULL;
	if (tp)
		return tp;
	reaching = ferry_transport_reaching(dst);
	if (reaching)
		return reaching->cm;
	ferry_info("cm: no transport reaches %s: it is not an address of this host "
		   "(shm)%s", cm_addr_ntop(dst, buf, sizeof(buf)),
#ifdef HAVE_VERBS
		   ferry_transports_count > 1 ? " and no RDMA device routes to it (verbs)" :
		   ", and the verbs transport of the CM is not registered in this build"
#else
		   ", and ferry was built without the verbs transport"
#endif
		   );
	errno = EHOSTUNREACH;
	return NULL;
}

enum ferry_cm_probe ferry_cm_probe(const struct sockaddr *dst)
{
	const struct cm_transport *tp;
	enum ferry_cm_probe r;
	size_t i;

	if (!dst || !cm_addr_len(dst))
		return FERRY_CM_PROBE_REMOTE;
	if (cm_transport_forced(&tp) < 0)
		return FERRY_CM_PROBE_REMOTE;	/* no transport a connect could use */
	if (tp) {
		r = tp->probe(dst);
		return r == FERRY_CM_PROBE_UNREACHED ? FERRY_CM_PROBE_REMOTE : r;
	}
	/* The transport cm_transport_for would pick answers. */
	for (i = 0; i < ferry_transports_count; i++) {
		if (!cm_transport_at(i))
			continue;	/* no CM part (transport.h) */
		r = cm_transport_at(i)->probe(dst);
		if (r != FERRY_CM_PROBE_UNREACHED)
			return r;
	}
	return FERRY_CM_PROBE_REMOTE;
}

struct ferry_context *cm_transport_context(const struct cm_transport *tp)
{
	size_t i = ferry_transport_index_of_cm(tp);
	struct ferry_context *ctx;

	pthread_mutex_lock(&cm_devices.lock);
	ctx = cm_devices.ctx[i];
	if (!ctx) {
		ctx = ferry_open_transport(ferry_transports[i].name);
		if (!ctx)
			ferry_info("cm: no %s device: %m", ferry_transports[i].name);
		cm_devices.ctx[i] = ctx;
	}
	pthread_mutex_unlock(&cm_devices.lock);
	return ctx;
}

/* --- addresses --- */

socklen_t cm_addr_len(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return sizeof(struct sockaddr_in);
	if (sa->sa_family == AF_INET6)
		return sizeof(struct sockaddr_in6);
	return 0;
}

bool cm_addr_is_wildcard(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (sa->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return false;
}

bool cm_addr_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

static bool cm_addr_same_host(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		      &((const struct sockaddr_in6 *)b)->sin6_addr,
		      sizeof(struct in6_addr)) == 0;
}

/*
 * This host's addresses as getifaddrs last told, kept CM_LOCAL_TTL_MS:
 * asking dumps every interface over netlink (five system calls and tens
 * of microseconds), which every connect to a non-loopback address paid --
 * to a remote one too, only to learn that ferry has no way there.  An
 * address added or removed is seen within that time (until then a
 * connect to it goes to TCP, or tries ferry and finds no listener).
 */
#define CM_LOCAL_TTL_MS	1000
#define CM_LOCAL_MAX	64	/* more addresses than that: asked every time */

static struct {
	pthread_mutex_t lock;
	uint64_t until_ms;	/* the list is good until then; 0: never read */
	size_t n;
	bool overflow;		/* the host has more than fit */
	struct sockaddr_in6 addrs[CM_LOCAL_MAX];	/* or sockaddr_in, by family */
} cm_local = { .lock = PTHREAD_MUTEX_INITIALIZER };
FERRY_FORK_SAFE(cm_local, cm_local.lock)

/* Read the host's addresses into cm_local (lock held); false if unable. */
static bool cm_local_refresh(uint64_t now)
{
	struct ifaddrs *ifs, *ifa;

	if (getifaddrs(&ifs) < 0) {
		ferry_warn("cm: getifaddrs: %m");
		return false;
	}
	cm_local.n = 0;
	cm_local.overflow = false;
	for (ifa = ifs; ifa; ifa = ifa->ifa_next) {
		socklen_t len = ifa->ifa_addr ? cm_addr_len(ifa->ifa_addr) : 0;

		if (!len)
			continue;
		if (cm_local.n == CM_LOCAL_MAX) {
			cm_local.overflow = true;
			break;
		}
		memcpy(&cm_local.addrs[cm_local.n++], ifa->ifa_addr, len);
	}
	freeifaddrs(ifs);
	cm_local.until_ms = cm_local.overflow ? 0 : now + CM_LOCAL_TTL_MS;
	return true;
}

bool cm_addr_is_local(const struct sockaddr *sa)
{
	uint64_t now = monotime_coarse_ms();
	bool found = false;
	size_t i;

	if (cm_addr_is_loopback(sa) || cm_addr_is_wildcard(sa))
		return true;
	pthread_mutex_lock(&cm_local.lock);
	if (now < cm_local.until_ms || cm_local_refresh(now))
		for (i = 0; i < cm_local.n && !found; i++)
			found = cm_addr_same_host((struct sockaddr *)&cm_local.addrs[i], sa);
	pthread_mutex_unlock(&cm_local.lock);
	return found;
}

uint16_t cm_addr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

void cm_addr_set_port(struct sockaddr *sa, uint16_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons(port);
	else if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
}

const char *cm_addr_ntop(const struct sockaddr *sa, char *buf, size_t len)
{
	const void *a = sa->sa_family == AF_INET ?
		(const void *)&((const struct sockaddr_in *)sa)->sin_addr :
		(const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;

	if ((sa->sa_family != AF_INET && sa->sa_family != AF_INET6) ||
	    !inet_ntop(sa->sa_family, a, buf, (socklen_t)len))
		snprintf(buf, len, "(family %d)", sa->sa_family);
	return buf;
}

void cm_addr_wildcard(int family, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	ss->ss_family = (sa_family_t)family;
	cm_addr_set_port((struct sockaddr *)ss, port);
	if (family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_addr = in6addr_any;
}

/*
 * On this host the destination itself is a fine source (the kernel would
 * pick the same for a local destination); a wildcard destination means
 * loopback, as connect(2) to INADDR_ANY does.
 */
void cm_addr_source_for(const struct sockaddr *dst, struct sockaddr_storage *src)
{
	memset(src, 0, sizeof(*src));
	memcpy(src, dst, cm_addr_len(dst));
	cm_addr_set_port((struct sockaddr *)src, 0);
	if (!cm_addr_is_wildcard(dst))
		return;
	if (dst->sa_family == AF_INET)
		((struct sockaddr_in *)src)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else
		((struct sockaddr_in6 *)src)->sin6_addr = in6addr_loopback;
}

uint16_t cm_addr_ephemeral_port(void)
{
	static _Atomic uint32_t state;
	static _Atomic pid_t pid;
	pid_t self = ferry_pid();
	uint32_t old, next;

	if (atomic_load(&pid) != self) {	/* a child must not repeat its parent's ports */
		atomic_store(&state, (uint32_t)time(NULL) ^ ((uint32_t)self << 16) ^ 0x9e3779b9u);
		atomic_store(&pid, self);
	}
	/* xorshift32: cheap and good enough to spread ports; any thread */
	old = atomic_load(&state);
	do {
		next = old ^ (old << 13);
		next ^= next >> 17;
		next ^= next << 5;
	} while (!atomic_compare_exchange_weak(&state, &old, next));
	return (uint16_t)(32768 + next % (60999 - 32768 + 1));
}

/*
 * A kernel TCP socket bound to @src, so that the kernel's bind rules
 * decide whether we may have the port (EACCES for a privileged one,
 * EADDRINUSE); port 0: the kernel picks one, and @src gets it.
 * SO_REUSEADDR, as servers set it: it only spares us the TIME_WAIT of
 * others' connections (a listener's socket has none of its own: see
 * shm_cm_on_tcp and cm_tcp_take), and a port a listener holds stays
 * EADDRINUSE.
 */
int cm_port_reserve(struct sockaddr *src)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fd, on = 1;

	fd = ferry_fd_park(socket(src->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (fd < 0)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) < 0 ||
	    bind(fd, src, cm_addr_len(src)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
		int e = errno;

		close(fd);
		return ERR(e);
	}
	cm_addr_set_port(src, cm_addr_port((struct sockaddr *)&ss));
	return fd;
}
