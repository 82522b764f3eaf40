/*
 * sock_iomap.c - direct data placement (rsocket's riomap / riounmap /
 * riowrite).
 *
 * A socket offers the peer FERRY_IOMAPSIZE slots (set before connecting,
 * at most SOCK_MAX_IOMAP) in its connect data: the IOMAP flag, the count
 * in target_iomap_size, and the slots themselves right after the target
 * SGL, under the same rkey.  ferry_sock_iomap registers a buffer for remote
 * write, writes an rs_iomap entry {offset, addr, rkey, length} into a free
 * slot of the peer's and sends an IOMAP_SGL immediate with the slot's
 * index; the receiver copies the entry when the immediate arrives, so a
 * mapping is known to the peer from the first stream byte sent after it,
 * and an unmapping (a zero-length entry) likewise.  ferry_sock_iowrite
 * looks the offset up among the entries the peer sent and places the data
 * with a plain RDMA WRITE on the same QP, so it lands before any stream
 * data sent after it; it takes an SQ slot and no receive credit.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <endian.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "sock-internal.h"

size_t sock_iomap_tail_size(uint32_t entries)
{
	size_t n = RS_SGL_SIZE * sizeof(struct rs_sge) + entries * sizeof(struct rs_iomap);

	return (n + 4095) & ~(size_t)4095;
}

/* The peer wrote slot @index of our target iomap (cqlock held). */
void sock_iomap_take(struct ferry_sock *s, uint32_t index)
{
	struct rs_iomap e;

	if (index >= s->target_iomap_size || !s->peer_iomap)
		return;
	/* In our byte order already: the writer swaps (sock_iomap_post, as
	 * rsocket does), so swapping here too would undo it. */
	memcpy(&e, (const void *)&s->target_iomap[index], sizeof(e));
	if (e.offset + e.sge.length < e.offset)
		e.sge.length = 0;	/* wraps: unusable */
	s->peer_iomap[index] = e;
}

void sock_iomap_free_all(struct ferry_sock *s)
{
	struct sock_iomap *m;

	while ((m = s->iomaps)) {
		s->iomaps = m->next;
		if (m->mr)
			ferry_dereg_mr(m->mr);
		free(m);
	}
	free(s->peer_iomap);
	s->peer_iomap = NULL;
}

/* A free slot of the peer's target iomap, or -1. slock held. */
static int sock_iomap_free_slot(struct ferry_sock *s)
{
	uint32_t i;
	struct sock_iomap *m;

	for (i = 0; i < s->remote_iomap.length; i++) {
		for (m = s->iomaps; m; m = m->next)
			if (m->index == (int)i)
				break;
		if (!m)
			return (int)i;
	}
	return -1;
}

static bool sock_iomap_post_ready(struct ferry_sock *s)
{
	sock_progress(s);
	return sock_send_error(s) ||
	       (sock_credits(s) > RS_QP_CTRL_SIZE &&
		atomic_load(&s->sqe_avail) > RS_QP_CTRL_SIZE);
}

/* Write @e into the peer's slot @index and tell it. slock held. */
static int sock_iomap_publish(struct ferry_sock *s, int index, const struct rs_iomap *e)
{
	struct rs_iomap wire = *e;
	struct iovec v = { &wire, sizeof(wire) };
	const struct iovec *cur = &v;
	uint8_t small[SOCK_SMALL_MAX];
	struct ferry_sge sge[2];
	unsigned int flags;
	size_t off = 0;
	uint32_t bytes;
	int nsge, ret, err;

	while (!sock_iomap_post_ready(s) ||
	       atomic_load(&s->sbuf_free) < sizeof(wire)) {
		if (sock_wait(s, sock_iomap_post_ready, 0) < 0)
			return -1;
		sock_progress(s);
	}
	err = sock_send_error(s);
	if (err)
		return ERR(err);
	if (s->peer_swap) {
		wire.offset = __builtin_bswap64(wire.offset);
		wire.sge.addr = __builtin_bswap64(wire.sge.addr);
		wire.sge.key = __builtin_bswap32(wire.sge.key);
		wire.sge.length = __builtin_bswap32(wire.sge.length);
	}
	bytes = sock_stage(s, sizeof(wire), &cur, &off, small, sge, &nsge, &flags);
	pthread_mutex_lock(&s->plock);
	ret = sock_post_wr(s, FERRY_WR_RDMA_WRITE_WITH_IMM, sge, nsge, flags,
			   s->remote_iomap.addr + (uint64_t)index * sizeof(wire),
			   s->remote_iomap.key, htobe32(RS_OP_IOMAP_SGL | (uint32_t)index),
			   bytes, false);
	pthread_mutex_unlock(&s->plock);
	return ret;
}

static bool sock_iomap_overlaps(struct ferry_sock *s, uint64_t offset, size_t len)
{
	struct sock_iomap *m;

	for (m = s->iomaps; m; m = m->next)
		if (m->index >= 0 && offset < m->offset + m->len && m->offset < offset + len)
			return true;
	return false;
}

/**
 * ferry_sock_iomap - register @buf (@len bytes) with the socket.  With
 * PROT_WRITE the peer may place data into it with ferry_sock_iowrite at
 * @offset (-1: ferry picks one, the buffer's address); with PROT_NONE it is
 * registered for local use only.  Returns the offset, or -1 with errno:
 * EINVAL (arguments, or an offset range already mapped), ENOTCONN, ENOMEM
 * (the peer offered no free slot: FERRY_IOMAPSIZE on its side).
 */
off_t ferry_sock_iomap(int fd, void *buf, size_t len, int prot, int flags, off_t offset)
{
	struct ferry_sock *s = sock_get(fd);
	struct sock_iomap *m;
	struct rs_iomap e;
	int index = -1, access = FERRY_ACCESS_LOCAL_WRITE;

	if (!s)
		return -1;
	if (!buf || !len || flags || (prot != PROT_WRITE && prot != PROT_NONE) ||
	    (offset < 0 && offset != -1))
		return ERR(EINVAL);
	if (!sock_is_connected(s) || !s->qp)
		return ERR(ENOTCONN);
	if (offset == -1)
		offset = (off_t)(uintptr_t)buf;
	if ((uint64_t)offset + len < (uint64_t)offset)
		return ERR(EINVAL);
	m = calloc(1, sizeof(*m));
	if (!m)
		return ERR(ENOMEM);
	pthread_mutex_lock(&s->slock);
	if (prot == PROT_WRITE) {
		if (sock_iomap_overlaps(s, (uint64_t)offset, len)) {
			errno = EINVAL;
			goto err_unlock;
		}
		index = sock_iomap_free_slot(s);
		if (index < 0) {
			errno = ENOMEM;
			goto err_unlock;
		}
		access |= FERRY_ACCESS_REMOTE_WRITE;
	}
	m->mr = ferry_reg_mr(s->pd, buf, len, access);
	if (!m->mr)
		goto err_unlock;
	m->buf = buf;
	m->len = len;
	m->offset = (uint64_t)offset;
	m->index = index;
	if (index >= 0) {
		e.offset = m->offset;
		e.sge.addr = (uintptr_t)buf;
		e.sge.key = m->mr->rkey;
		e.sge.length = (uint32_t)(len > UINT32_MAX ? UINT32_MAX : len);
		m->len = e.sge.length;
		if (sock_iomap_publish(s, index, &e) < 0)
			goto err_dereg;
	}
	m->next = s->iomaps;
	s->iomaps = m;
	pthread_mutex_unlock(&s->slock);
	return offset;

err_dereg:
	{
		int e2 = errno;

		ferry_dereg_mr(m->mr);
		errno = e2;
	}
err_unlock:
	pthread_mutex_unlock(&s->slock);
	{
		int e2 = errno;

		free(m);
		return ERR(e2);
	}
}

/**
 * ferry_sock_iounmap - undo ferry_sock_iomap of @buf.  The peer learns of
 * it in order with the stream; it must not write there any more (a write
 * still in flight fails the connection, as it would on RDMA hardware).
 */
int ferry_sock_iounmap(int fd, void *buf, size_t len)
{
	struct ferry_sock *s = sock_get(fd);
	struct sock_iomap **pp, *m;
	struct rs_iomap e = { 0 };

	(void)len;	/* the whole mapping of @buf goes, as with rsocket */
	if (!s)
		return -1;
	pthread_mutex_lock(&s->slock);
	for (pp = &s->iomaps; (m = *pp); pp = &m->next)
		if (m->buf == buf)
			break;
	if (!m) {
		pthread_mutex_unlock(&s->slock);
		return ERR(EINVAL);
	}
	*pp = m->next;
	/* A connection that cannot carry the unmapping cannot write either. */
	if (m->index >= 0 && !sock_send_error(s))
		sock_iomap_publish(s, m->index, &e);
	pthread_mutex_unlock(&s->slock);
	ferry_dereg_mr(m->mr);
	free(m);
	return 0;
}

/* The peer's entry holding [@offset, @offset + @count), copied; cqlock. */
static bool sock_iomap_lookup(struct ferry_sock *s, uint64_t offset, size_t count,
			      struct rs_iomap *e_p)
{
	bool found = false;
	uint32_t i;

	pthread_mutex_lock(&s->cqlock);
	for (i = 0; s->peer_iomap && i < s->target_iomap_size && !found; i++) {
		const struct rs_iomap *e = &s->peer_iomap[i];

		if (e->sge.length && offset >= e->offset &&
		    count <= e->sge.length && offset - e->offset <= e->sge.length - count) {
			*e_p = *e;
			found = true;
		}
	}
	pthread_mutex_unlock(&s->cqlock);
	return found;
}

static bool sock_iowrite_ready(struct ferry_sock *s)
{
	sock_progress(s);
	/* The stream written before goes first (slock is the caller's). */
	if (sock_backlog_flush(s) == 0 && s->bl_head)
		return false;
	return sock_send_error(s) ||
	       (atomic_load(&s->sqe_avail) > RS_QP_CTRL_SIZE && atomic_load(&s->sbuf_free) > 0);
}

/**
 * ferry_sock_iowrite - place @count bytes of @buf at @offset of the peer's
 * iomap space, in order with the stream.  Returns the bytes written (fewer
 * than @count only for a non-blocking socket), or (size_t)-1 with errno:
 * EINVAL when no mapping of the peer holds the whole range, EAGAIN, EPIPE,
 * ECONNRESET, ENOTCONN.
 */
size_t ferry_sock_iowrite(int fd, const void *buf, size_t count, off_t offset, int flags)
{
	struct ferry_sock *s = sock_get(fd);
	struct iovec v = { (void *)buf, count };
	const struct iovec *cur = &v;
	bool nonblock;
	struct rs_iomap e;
	size_t done = 0, off = 0;
	int err = 0;

	if (!s)
		return (size_t)-1;
	nonblock = (flags & MSG_DONTWAIT) || atomic_load(&s->nonblock);
	if ((flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL)) || (count && !buf) || offset < 0) {
		errno = EINVAL;
		return (size_t)-1;
	}
	if (!sock_is_connected(s) || !s->qp) {
		errno = ENOTCONN;
		return (size_t)-1;
	}
	if (!count)
		return 0;
	pthread_mutex_lock(&s->slock);
	if (!sock_iomap_lookup(s, (uint64_t)offset, count, &e)) {
		sock_progress(s);	/* an entry may have just arrived */
		if (!sock_iomap_lookup(s, (uint64_t)offset, count, &e))
			err = EINVAL;
	}
	while (!err && done < count) {
		uint8_t small[SOCK_SMALL_MAX];
		struct ferry_sge sge[2];
		unsigned int wflags;
		uint32_t len, bytes;
		int nsge, ret;

		err = sock_send_error(s);
		if (err)
			break;
		if (!sock_iowrite_ready(s)) {
			if (nonblock) {
				err = EAGAIN;
				break;
			}
			if (sock_wait(s, sock_iowrite_ready, 0) < 0) {
				err = errno;
				break;
			}
			continue;
		}
		len = atomic_load(&s->sbuf_free);
		if (len > RS_MAX_TRANSFER)
			len = RS_MAX_TRANSFER;
		if (len > count - done)
			len = (uint32_t)(count - done);
		bytes = sock_stage(s, len, &cur, &off, small, sge, &nsge, &wflags);
		pthread_mutex_lock(&s->plock);
		ret = sock_post_wr(s, FERRY_WR_RDMA_WRITE, sge, nsge, wflags,
				   e.sge.addr + ((uint64_t)offset - e.offset) + done, e.sge.key,
				   0, bytes, false);
		pthread_mutex_unlock(&s->plock);
		if (ret < 0) {
			err = sock_send_error(s);
			break;
		}
		done += len;
	}
	pthread_mutex_unlock(&s->slock);
	if (done)
		return done;
	if (err == EPIPE && !(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	errno = err;
	return (size_t)-1;
}
