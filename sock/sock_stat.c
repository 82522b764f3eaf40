/*
 * sock_stat.c - the owner's side of the statistics segment (sock_stat.h):
 * creating it with the first socket, handing slots out and taking them
 * back, and writing a socket's identity when its state changes.
 *
 * A socket without a slot (the segment could not be made, or is full)
 * points at a process-local sink slot, so that the data path never tests
 * for one: its counters go nowhere.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sock-internal.h"

/* The segment fd is moved up to here (or half the fd limit, if lower),
 * out of the numbers applications expect to get. */
#define SOCK_STAT_FD_LOW	512

_Static_assert(SOCK_PEER_SHUT_WR == SOCK_STAT_F_PEER_SHUT_WR &&
	       SOCK_PEER_GONE == SOCK_STAT_F_PEER_GONE && SOCK_RESET == SOCK_STAT_F_RESET &&
	       SOCK_SHUT_RD == SOCK_STAT_F_SHUT_RD && SOCK_SHUT_WR == SOCK_STAT_F_SHUT_WR &&
	       SOCK_DISC_SENT == SOCK_STAT_F_DISC_SENT &&
	       SOCK_TIMEDOUT == SOCK_STAT_F_TIMEDOUT,
	       "ferry_sock.closed bits are published as they are");

/* This process's segment; everything under lock. */
static struct {
	pthread_mutex_t lock;
	struct sock_stat_header *hdr;	/* NULL until the first socket */
	struct sock_stat_slot *slots;
	uint32_t free_head;		/* index + 1 of a free slot, 0: none */
	int fd;
	bool failed;			/* creation failed: do not retry per socket */
	bool atfork_set;
	bool full_reported;		/* "all slots taken" was logged */
} stat_seg = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

/* Where the counters of a socket without a slot go. */
static struct sock_stat_slot stat_sink;

static size_t sock_stat_segment_size(void)
{
	return SOCK_STAT_HEADER_SIZE + (size_t)SOCK_STAT_SLOTS * sizeof(struct sock_stat_slot);
}

/* The child keeps the parent's mapping for inherited sockets, but hands
 * out slots from a segment of its own, made on its first new socket. */
static void sock_stat_atfork_child(void)
{
	pthread_mutex_init(&stat_seg.lock, NULL);
	if (stat_seg.fd >= 0)
		close(stat_seg.fd);
	stat_seg.fd = -1;
	stat_seg.hdr = NULL;
	stat_seg.slots = NULL;
	stat_seg.free_head = 0;
	stat_seg.failed = false;
	stat_seg.full_reported = false;
}

/* Move @fd above the numbers an application uses; keeps it on failure. */
static int sock_stat_fd_up(int fd)
{
	struct rlimit rl;
	rlim_t low = SOCK_STAT_FD_LOW;
	int up;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur / 2 < low)
		low = rl.rlim_cur / 2;
	if (low <= (rlim_t)fd)
		return fd;
	up = fcntl(fd, F_DUPFD_CLOEXEC, (int)low);
	if (up < 0)
		return fd;
	close(fd);
	return up;
}

/* Make the segment (lock held). */
static int sock_stat_create(void)
{
	size_t size = sock_stat_segment_size();
	struct sock_stat_header *hdr;
	int fd;

	fd = ferry_memfd_create(SOCK_STAT_NAME, size);
	if (fd < 0)
		return -1;
	fd = sock_stat_fd_up(fd);
	hdr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (hdr == MAP_FAILED) {
		ferry_warn("sock: mapping the statistics segment: %m");
		close(fd);
		return -1;
	}
	hdr->version = SOCK_STAT_VERSION;
	hdr->header_size = SOCK_STAT_HEADER_SIZE;
	hdr->slot_size = sizeof(struct sock_stat_slot);
	hdr->nslots = SOCK_STAT_SLOTS;
	hdr->pid = (int32_t)getpid();
	__atomic_store_n(&hdr->magic, SOCK_STAT_MAGIC, __ATOMIC_RELEASE);
	stat_seg.hdr = hdr;
	stat_seg.slots = (struct sock_stat_slot *)((uint8_t *)hdr + SOCK_STAT_HEADER_SIZE);
	stat_seg.fd = fd;
	stat_seg.free_head = 0;
	if (!stat_seg.atfork_set && pthread_atfork(NULL, NULL, sock_stat_atfork_child) == 0)
		stat_seg.atfork_set = true;
	return 0;
}

/* Is @slot one of this process's own (not the sink, not inherited)? */
static bool sock_stat_own(const struct sock_stat_slot *slot)
{
	return stat_seg.slots && slot >= stat_seg.slots &&
	       slot < stat_seg.slots + SOCK_STAT_SLOTS;
}

/* seq odd: readers retry until sock_stat_end. */
static void sock_stat_begin(struct sock_stat_slot *slot)
{
	__atomic_store_n(&slot->seq, slot->seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void sock_stat_end(struct sock_stat_slot *slot)
{
	__atomic_store_n(&slot->seq, slot->seq + 1, __ATOMIC_RELEASE);
}

/* A free slot, or NULL (lock held). */
static struct sock_stat_slot *sock_stat_take(void)
{
	struct sock_stat_header *hdr = stat_seg.hdr;
	struct sock_stat_slot *slot;
	uint32_t used;

	if (stat_seg.free_head) {
		slot = &stat_seg.slots[stat_seg.free_head - 1];
		stat_seg.free_head = slot->free_next;
		return slot;
	}
	used = hdr->used;
	if (used >= hdr->nslots)
		return NULL;
	__atomic_store_n(&hdr->used, used + 1, __ATOMIC_RELEASE);
	return &stat_seg.slots[used];
}

void sock_stat_attach(struct ferry_sock *s)
{
	struct sock_stat_slot *slot = NULL;

	s->stat = &stat_sink;
	pthread_mutex_lock(&stat_seg.lock);
	if (!stat_seg.hdr && !stat_seg.failed && sock_stat_create() < 0)
		stat_seg.failed = true;
	if (stat_seg.hdr) {
		slot = sock_stat_take();
		if (!slot && !stat_seg.full_reported) {
			ferry_info("sock: all %u statistics slots are taken: ferry-stat will not "
				   "show sockets beyond them", SOCK_STAT_SLOTS);
			stat_seg.full_reported = true;
		}
	}
	if (slot) {
		sock_stat_begin(slot);
		slot->state = SOCK_STAT_UNCONN;
		slot->fd = s->fd;
		slot->transport = SOCK_STAT_TP_NONE;
		slot->rbuf_size = slot->sbuf_size = 0;
		slot->free_next = 0;
		memset(&slot->local, 0, sizeof(slot->local));
		memset(&slot->peer, 0, sizeof(slot->peer));
		__atomic_store_n(&slot->flags, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&slot->tx_bytes, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&slot->tx_ring_in, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&slot->tx_nocache, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&slot->rx_bytes, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&slot->rx_ring_in, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&slot->tx_ring_out, 0, __ATOMIC_RELAXED);
		sock_stat_end(slot);
		s->stat = slot;
	}
	pthread_mutex_unlock(&stat_seg.lock);
}

void sock_stat_detach(struct ferry_sock *s)
{
	struct sock_stat_slot *slot = s->stat;

	s->stat = &stat_sink;
	pthread_mutex_lock(&stat_seg.lock);
	if (sock_stat_own(slot)) {
		sock_stat_begin(slot);
		slot->state = SOCK_STAT_FREE;
		slot->fd = -1;
		slot->free_next = stat_seg.free_head;
		sock_stat_end(slot);
		stat_seg.free_head = (uint32_t)(slot - stat_seg.slots) + 1;
	}
	pthread_mutex_unlock(&stat_seg.lock);
}

static void sock_stat_put_addr(struct sock_stat_addr *dst, const struct sockaddr *sa)
{
	memset(dst, 0, sizeof(*dst));
	if (!sa)
		return;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

		dst->family = AF_INET;
		dst->port = ntohs(sin->sin_port);
		memcpy(dst->addr, &sin->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;

		dst->family = AF_INET6;
		dst->port = ntohs(sin6->sin6_port);
		dst->scope_id = sin6->sin6_scope_id;
		memcpy(dst->addr, &sin6->sin6_addr, 16);
	}
}

static uint32_t sock_stat_state_of(enum sock_state state)
{
	switch (state) {
	case SOCK_INIT:		return SOCK_STAT_UNCONN;
	case SOCK_LISTENING:	return SOCK_STAT_LISTEN;
	case SOCK_CONNECTING:	return SOCK_STAT_SYN_SENT;
	case SOCK_ACCEPTING:	return SOCK_STAT_SYN_RECV;
	case SOCK_CONNECTED:	return SOCK_STAT_ESTAB;
	case SOCK_FAILED:	return SOCK_STAT_FAILED;
	}
	return SOCK_STAT_UNCONN;
}

static uint32_t sock_stat_transport_of(struct ferry_sock *s)
{
	const char *name;

	if (!s->ctx || !s->qp)
		return SOCK_STAT_TP_NONE;
	name = ferry_get_device_transport(s->ctx->device);
	if (name && strcmp(name, "shm") == 0)
		return SOCK_STAT_TP_SHM;
	if (name && strcmp(name, "verbs") == 0)
		return SOCK_STAT_TP_VERBS;
	if (name && strcmp(name, "tcp") == 0)
		return SOCK_STAT_TP_TCP;
	return SOCK_STAT_TP_OTHER;
}

void sock_stat_update(struct ferry_sock *s)
{
	struct sock_stat_slot *slot = s->stat;
	const struct sockaddr *local = NULL, *peer = NULL;
	enum sock_state state = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);

	if (s->id) {
		local = ferry_get_local_addr(s->id);
		if (state != SOCK_LISTENING)
			peer = ferry_get_peer_addr(s->id);
	}
	if ((!local || !local->sa_family) && s->bound.sa.sa_family)
		local = &s->bound.sa;
	pthread_mutex_lock(&stat_seg.lock);
	if (sock_stat_own(slot)) {
		sock_stat_begin(slot);
		slot->state = sock_stat_state_of(state);
		slot->fd = s->fd;
		slot->transport = sock_stat_transport_of(s);
		slot->rbuf_size = s->rbuf_size;
		slot->sbuf_size = s->sbuf_size;
		sock_stat_put_addr(&slot->local, local);
		sock_stat_put_addr(&slot->peer, peer);
		sock_stat_end(slot);
	}
	pthread_mutex_unlock(&stat_seg.lock);
	sock_stat_flags(s);
}

void sock_stat_set_fd(struct ferry_sock *s)
{
	struct sock_stat_slot *slot = s->stat;

	pthread_mutex_lock(&stat_seg.lock);
	if (sock_stat_own(slot)) {
		sock_stat_begin(slot);
		slot->fd = s->fd;
		sock_stat_end(slot);
	}
	pthread_mutex_unlock(&stat_seg.lock);
}

int sock_stat_fd(void)
{
	int fd;

	pthread_mutex_lock(&stat_seg.lock);
	fd = stat_seg.fd;
	pthread_mutex_unlock(&stat_seg.lock);
	return fd;
}

void sock_stat_route(enum sock_stat_route r)
{
	if ((unsigned int)r >= SOCK_STAT_NROUTES)
		r = SOCK_STAT_RT_ERROR;
	pthread_mutex_lock(&stat_seg.lock);
	/* A process whose connects all go to TCP has no socket to make the
	 * segment, and must be seen all the same. */
	if (!stat_seg.hdr && !stat_seg.failed && sock_stat_create() < 0)
		stat_seg.failed = true;
	if (stat_seg.hdr)
		__atomic_fetch_add(&stat_seg.hdr->connects[r], 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&stat_seg.lock);
}
