/*
 * sock_backlog.c - the send buffer beyond the ring: bytes a program wrote
 * while the peer's ring was full, kept here until the peer frees room.
 *
 * Why.  Kernel TCP lets a writer run ahead of its reader by the send
 * buffer (up to net.ipv4.tcp_wmem's maximum, 4 MiB by default) plus the
 * receiver's buffer, and programs lean on it: an asyncio echo whose
 * client writes 8 MB before it reads, against a server that echoes what
 * it reads, finishes over TCP because the kernel's buffers on both sides
 * hold the 8 MB while neither end reads.  A ferry ring is 128 KiB, so both
 * ends blocked writing and the program hung.
 *
 * How.  A send that finds the peer's ring full (no target space or no
 * credits) copies what it has into the backlog and returns, up to
 * bl_limit bytes queued: the kernel's own tcp_wmem maximum, read once.
 * A non-blocking send does so at once (it cannot wait to see whether the
 * reader keeps up; asyncio's are such).  A blocking one first waits
 * SOCK_STALL_NS for the peer's update, and queues only if none came: a
 * reader that reads answers within microseconds, and every byte then
 * keeps to one copy on this side (queuing against a reader that keeps up
 * halved ferry-perf's stream bandwidth: two copies on the writer's CPU).
 * Once queued, later bytes queue behind, in order, until an update comes;
 * then the writer waits again while the backlog drains.
 * A program that set SO_SNDBUF has chosen its buffer, and gets none, as
 * TCP's buffer stops growing then.  The backlog is purely local: nothing
 * changes on the wire, so an rsocket peer sees an ordinary sender.
 *
 * Who moves it on.  The writer itself, first thing in every send; any
 * thread whose progress takes a message from the peer (the update that
 * frees its ring is one), if slock is free; a writer waiting for room;
 * and the process's service thread (sock_opt.c), which visits sockets
 * with a backlog often, for a program that blocks somewhere else while
 * its data waits.  A shutdown(SHUT_WR) after it waits for it too: its
 * control message goes once the backlog is empty, as TCP's FIN follows
 * the data.  close() waits for the peer to take it as it waits for what
 * is in flight (SOCK_CLOSE_WAIT_MS, or SO_LINGER's time).
 *
 * Memory.  Pieces of SOCK_BACKLOG_CHUNK bytes, mapped when needed and
 * unmapped as soon as the peer has their bytes: an idle connection holds
 * none, whatever it once queued.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>

#include "sock-internal.h"

struct sock_backlog_chunk {
	struct sock_backlog_chunk *next;
	uint32_t head;			/* next byte to go to the peer */
	uint32_t tail;			/* next byte free */
	uint8_t data[];
};

#define SOCK_BACKLOG_DATA	(SOCK_BACKLOG_CHUNK - offsetof(struct sock_backlog_chunk, data))

/* net.ipv4.tcp_wmem's third field, the most a TCP send buffer grows to. */
static size_t sock_backlog_wmem_max(void)
{
	static _Atomic size_t cached;
	size_t v = atomic_load_explicit(&cached, memory_order_relaxed);
	unsigned long long lo, def, max;
	FILE *f;

	if (v)
		return v;
	v = SOCK_BACKLOG_DEF_MAX;
	f = fopen("/proc/sys/net/ipv4/tcp_wmem", "re");
	if (f) {
		if (fscanf(f, "%llu %llu %llu", &lo, &def, &max) == 3 && max > 0)
			v = max > SOCK_MAX_BUF_SIZE ? SOCK_MAX_BUF_SIZE : (size_t)max;
		fclose(f);
	}
	atomic_store_explicit(&cached, v, memory_order_relaxed);
	return v;
}

void sock_backlog_setup(struct ferry_sock *s)
{
	s->bl_limit = s->sbuf_fixed ? 0 : sock_backlog_wmem_max();
}

static struct sock_backlog_chunk *sock_backlog_chunk_new(struct ferry_sock *s)
{
	struct sock_backlog_chunk *c = mmap(NULL, SOCK_BACKLOG_CHUNK, PROT_READ | PROT_WRITE,
					    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (c == MAP_FAILED) {
		ferry_debug("sock %d: no memory for the send backlog: %m", s->fd);
		return NULL;
	}
	c->next = NULL;
	c->head = c->tail = 0;
	if (s->bl_tail)
		s->bl_tail->next = c;
	else
		s->bl_head = c;
	s->bl_tail = c;
	return c;
}

/* The oldest piece was sent: it goes. */
static void sock_backlog_chunk_drop(struct ferry_sock *s)
{
	struct sock_backlog_chunk *c = s->bl_head;

	s->bl_head = c->next;
	if (!s->bl_head)
		s->bl_tail = NULL;
	munmap(c, SOCK_BACKLOG_CHUNK);
}

size_t sock_backlog_put(struct ferry_sock *s, size_t len, const struct iovec **iov_p,
			size_t *off_p)
{
	size_t queued = sock_backlog_bytes(s), done = 0;

	if (queued >= s->bl_limit)
		return 0;
	if (len > s->bl_limit - queued)
		len = s->bl_limit - queued;
	while (done < len) {
		struct sock_backlog_chunk *c = s->bl_tail;
		size_t n;

		if (!c || c->tail == SOCK_BACKLOG_DATA)
			c = sock_backlog_chunk_new(s);
		if (!c)
			break;	/* no memory: the writer waits for the peer instead */
		n = SOCK_BACKLOG_DATA - c->tail;
		if (n > len - done)
			n = len - done;
		sock_gather(c->data + c->tail, n, iov_p, off_p);
		c->tail += (uint32_t)n;
		done += n;
	}
	atomic_fetch_add_explicit(&s->bl_bytes, done, memory_order_relaxed);
	return done;
}

uint64_t sock_backlog_full(struct ferry_sock *s)
{
	uint64_t none = 0, now = monotime_ns(), since;

	if (sock_backlog_bytes(s) >= s->bl_limit)
		return 0;	/* full or none: only the peer ends the wait */
	atomic_compare_exchange_strong(&s->full_since_ns, &none, now);
	since = atomic_load(&s->full_since_ns);
	return (since ? since : now) + SOCK_STALL_NS;
}

bool sock_backlog_stalled(struct ferry_sock *s)
{
	uint64_t since = atomic_load_explicit(&s->full_since_ns, memory_order_relaxed);

	return since && monotime_ns() - since >= SOCK_STALL_NS;
}

/* The control message a shutdown left for after the backlog. */
static void sock_backlog_ctrl_send(struct ferry_sock *s)
{
	int ctrl = atomic_load(&s->bl_ctrl);

	if (ctrl < 0 || s->bl_head)
		return;
	if (sock_send_ctrl(s, (uint32_t)ctrl, 0) < 0 && errno == EAGAIN)
		return;		/* no SQ slot yet: the next flush tries again */
	atomic_store(&s->bl_ctrl, -1);
	if (ctrl == RS_CTRL_DISCONNECT)
		atomic_fetch_or(&s->closed, SOCK_DISC_SENT);
}

int sock_backlog_flush(struct ferry_sock *s)
{
	while (s->bl_head) {
		struct sock_backlog_chunk *c = s->bl_head;
		struct iovec v = { c->data + c->head, c->tail - c->head };
		const struct iovec *cur = &v;
		size_t off = 0;
		uint32_t space;
		ssize_t written;

		/* A peer that is gone takes nothing more: what waits is lost,
		 * as a TCP send buffer is when the peer resets. */
		if (atomic_load(&s->closed) & (SOCK_RESET | SOCK_PEER_GONE)) {
			sock_backlog_free(s);
			return -1;
		}
		space = sock_send_space(s);
		if (!space)
			break;
		if (space > v.iov_len)
			space = (uint32_t)v.iov_len;
		written = sock_write_data(s, space, &cur, &off);
		if (written < 0)
			return -1;
		c->head += (uint32_t)written;
		atomic_fetch_sub_explicit(&s->bl_bytes, (size_t)written, memory_order_relaxed);
		if (c->head == c->tail)
			sock_backlog_chunk_drop(s);
	}
	sock_backlog_ctrl_send(s);
	return 0;
}

void sock_backlog_kick(struct ferry_sock *s)
{
	/* Whoever holds slock now moves the backlog on itself (a writer), or
	 * leaves it to the service thread's next visit. */
	if (pthread_mutex_trylock(&s->slock) != 0)
		return;
	sock_backlog_flush(s);
	pthread_mutex_unlock(&s->slock);
}

void sock_backlog_ctrl(struct ferry_sock *s, int ctrl)
{
	if (s->bl_head) {
		atomic_store(&s->bl_ctrl, ctrl);
		return;
	}
	sock_send_ctrl(s, (uint32_t)ctrl, SOCK_CM_TIMEOUT_MS);
	if (ctrl == RS_CTRL_DISCONNECT)
		atomic_fetch_or(&s->closed, SOCK_DISC_SENT);
}

/* sock_wait's test while close waits: slock is the waiter's. */
static bool sock_backlog_drained(struct ferry_sock *s)
{
	sock_progress(s);
	sock_backlog_flush(s);
	return !s->bl_head || (atomic_load(&s->closed) & (SOCK_RESET | SOCK_PEER_GONE));
}

bool sock_backlog_drain(struct ferry_sock *s, int timeout_ms)
{
	if (!s->bl_head)
		return true;
	if (timeout_ms > 0)
		sock_wait(s, sock_backlog_drained, monotime_ns() + (uint64_t)timeout_ms * 1000000u);
	if (!s->bl_head)
		return true;
	ferry_info("sock %d: closed with %zu written bytes the peer never took", s->fd,
		   sock_backlog_bytes(s));
	return false;
}

void sock_backlog_free(struct ferry_sock *s)
{
	while (s->bl_head)
		sock_backlog_chunk_drop(s);
	atomic_store_explicit(&s->bl_bytes, 0, memory_order_relaxed);
}
