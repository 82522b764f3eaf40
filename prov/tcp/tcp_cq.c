/*
 * tcp_cq.c - completion queues and completion channels of the tcp
 * transport.
 *
 * A CQ is a ring of finished ferry_wc under a mutex: the progress thread
 * and posters push, the application polls (busy polling costs no system
 * call).  A channel is a pipe: an armed CQ that gets a completion writes
 * its own address into it (8 bytes, below PIPE_BUF, so atomic), and
 * ferry_get_cq_event reads one back -- blocking or not as the caller set
 * the read end, as with ibverbs' channel fd.  A record is the CQ's
 * address and its id, and a read takes it only if that CQ still is one of
 * the channel's: events a CQ fired but nobody read go with it when it is
 * destroyed, as the kernel's do.  A CQ with events read but not yet
 * acknowledged cannot be destroyed (EBUSY).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tcp-internal.h"

/* What a fired arm writes into its channel's pipe: atomic, under PIPE_BUF. */
struct tcp_cq_event {
	struct tcp_cq *cq;
	uint64_t id;
};

static uint64_t tcp_cq_ids;	/* the last CQ id handed out */

static inline struct tcp_channel *to_tch(struct ferry_comp_channel *ch)
{
	return container_of(ch, struct tcp_channel, ch);
}

struct ferry_comp_channel *tcp_create_comp_channel(struct ferry_context *ctx)
{
	struct tcp_channel *ch = calloc(1, sizeof(*ch));
	int fds[2];

	if (!ch)
		return NULL;
	if (pipe2(fds, O_CLOEXEC) < 0) {
		free(ch);
		return NULL;
	}
	/* The notifier never blocks; the reader decides for itself. */
	fcntl(fds[1], F_SETFL, O_NONBLOCK);
	ch->ch.context = ctx;
	ch->ch.fd = fds[0];
	ch->wfd = fds[1];
	pthread_mutex_init(&ch->lock, NULL);
	return &ch->ch;
}

int tcp_destroy_comp_channel(struct ferry_comp_channel *fch)
{
	struct tcp_channel *ch = to_tch(fch);

	close(ch->ch.fd);
	close(ch->wfd);
	pthread_mutex_destroy(&ch->lock);
	free(ch);
	return 0;
}

/* Is @ev's CQ still one of @ch's?  Then it counts as read (ch->lock held). */
static bool tcp_channel_take(struct tcp_channel *ch, const struct tcp_cq_event *ev)
{
	struct tcp_cq *cq;

	for (cq = ch->cqs; cq; cq = cq->ch_next)
		if (cq == ev->cq && cq->id == ev->id)
			break;
	if (!cq)
		return false;	/* fired by a CQ destroyed since */
	pthread_mutex_lock(&cq->lock);
	cq->got++;
	pthread_mutex_unlock(&cq->lock);
	return true;
}

/* The next record of a live CQ; @block: wait for one as the fd says. */
static int tcp_channel_read(struct ferry_comp_channel *fch, struct ferry_cq **cq_p, bool block)
{
	struct tcp_channel *ch = to_tch(fch);
	struct pollfd pfd = { .fd = fch->fd, .events = POLLIN };
	struct tcp_cq_event ev;
	bool taken;
	ssize_t n;

	for (;;) {
		if (!block && poll(&pfd, 1, 0) <= 0)
			return ERR(EAGAIN);
		do
			n = read(fch->fd, &ev, sizeof(ev));
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return -1;
		if (n != sizeof(ev))
			return ERR(EIO);	/* never: the pipe holds whole records */
		pthread_mutex_lock(&ch->lock);
		taken = tcp_channel_take(ch, &ev);
		pthread_mutex_unlock(&ch->lock);
		if (taken)
			break;
	}
	*cq_p = &ev.cq->cq;
	return 0;
}

int tcp_get_cq_event(struct ferry_comp_channel *fch, struct ferry_cq **cq_p)
{
	return tcp_channel_read(fch, cq_p, true);
}

int tcp_poll_cq_event(struct ferry_comp_channel *fch, struct ferry_cq **cq_p)
{
	return tcp_channel_read(fch, cq_p, false);
}

struct ferry_cq *tcp_create_cq(struct ferry_context *ctx, int cqe, struct ferry_comp_channel *ch)
{
	struct tcp_cq *cq;

	(void)ch;	/* core sets cq->channel */
	if (cqe > TCP_MAX_CQE) {
		errno = EINVAL;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;
	cq->ring = calloc((size_t)cqe, sizeof(*cq->ring));
	if (!cq->ring) {
		free(cq);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&cq->lock, NULL);
	cq->size = (uint32_t)cqe;
	cq->cq.context = ctx;
	cq->cq.cqe = cqe;
	cq->id = __atomic_add_fetch(&tcp_cq_ids, 1, __ATOMIC_RELAXED);
	if (ch) {
		struct tcp_channel *tch = to_tch(ch);

		pthread_mutex_lock(&tch->lock);
		cq->ch_next = tch->cqs;
		tch->cqs = cq;
		pthread_mutex_unlock(&tch->lock);
	}
	return &cq->cq;
}

/* Take @cq off its channel's list, unless busy (ch->lock held). */
static bool tcp_cq_leave(struct tcp_channel *ch, struct tcp_cq *cq)
{
	struct tcp_cq **pp;
	bool busy;

	pthread_mutex_lock(&cq->lock);
	busy = cq->nqps > 0 || cq->got != cq->acked;
	pthread_mutex_unlock(&cq->lock);
	if (busy || !ch)
		return !busy;
	for (pp = &ch->cqs; *pp; pp = &(*pp)->ch_next)
		if (*pp == cq) {
			*pp = cq->ch_next;
			break;
		}
	return true;
}

int tcp_destroy_cq(struct ferry_cq *fcq)
{
	struct tcp_cq *cq = to_tcq(fcq);
	struct tcp_channel *ch = fcq->channel ? to_tch(fcq->channel) : NULL;
	bool gone;

	if (ch)
		pthread_mutex_lock(&ch->lock);
	gone = tcp_cq_leave(ch, cq);
	if (ch)
		pthread_mutex_unlock(&ch->lock);
	if (!gone)
		return ERR(EBUSY);
	pthread_mutex_destroy(&cq->lock);
	free(cq->ring);
	free(cq);
	return 0;
}

int tcp_req_notify_cq(struct ferry_cq *fcq, int solicited_only)
{
	struct tcp_cq *cq = to_tcq(fcq);

	pthread_mutex_lock(&cq->lock);
	/* An arm for every completion covers a solicited-only one. */
	if (!solicited_only)
		cq->arm = TCP_ARM_ALL;
	else if (cq->arm == TCP_ARM_NONE)
		cq->arm = TCP_ARM_SOLICITED;
	pthread_mutex_unlock(&cq->lock);
	return 0;
}

void tcp_ack_cq_events(struct ferry_cq *fcq, unsigned int n)
{
	struct tcp_cq *cq = to_tcq(fcq);

	pthread_mutex_lock(&cq->lock);
	cq->acked += n;
	pthread_mutex_unlock(&cq->lock);
}

/* cq->lock held: fire the arm (once) into the channel. */
static void tcp_cq_fire(struct tcp_cq *cq)
{
	struct tcp_cq_event ev = { .cq = cq, .id = cq->id };
	struct tcp_channel *ch;

	cq->arm = TCP_ARM_NONE;
	if (!cq->cq.channel)
		return;
	ch = to_tch(cq->cq.channel);
	if (write(ch->wfd, &ev, sizeof(ev)) != sizeof(ev))
		ferry_warn("tcp: CQ event lost: its channel holds %zu unread events (%m)",
			   (size_t)(65536 / sizeof(ev)));
}

void tcp_cq_push(struct tcp_cq *cq, const struct ferry_wc *wc, bool solicited)
{
	pthread_mutex_lock(&cq->lock);
	if (cq->count == cq->size) {
		if (!cq->overrun)
			ferry_warn("tcp: CQ of %u entries overrun: completions lost",
				   cq->size);
		cq->overrun = true;
	} else {
		cq->ring[(cq->head + cq->count) % cq->size] = *wc;
		/* Stored atomically for tcp_poll_cq's peek without the lock. */
		__atomic_store_n(&cq->count, cq->count + 1, __ATOMIC_RELEASE);
	}
	/* Errors raise a solicited-only arm too, as on InfiniBand: whoever
	 * waits must learn that the QP failed. */
	if (cq->arm == TCP_ARM_ALL ||
	    (cq->arm == TCP_ARM_SOLICITED && (solicited || wc->status != FERRY_WC_SUCCESS)))
		tcp_cq_fire(cq);
	pthread_mutex_unlock(&cq->lock);
}

int tcp_poll_cq(struct ferry_cq *fcq, int n, struct ferry_wc *wc)
{
	struct tcp_cq *cq = to_tcq(fcq);
	int got = 0;

	/* A racy peek first: an empty CQ polled in a loop takes no lock. */
	if (__atomic_load_n(&cq->count, __ATOMIC_ACQUIRE) == 0)
		return 0;
	pthread_mutex_lock(&cq->lock);
	while (got < n && cq->count) {
		wc[got++] = cq->ring[cq->head];
		cq->head = (cq->head + 1) % cq->size;
		__atomic_store_n(&cq->count, cq->count - 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&cq->lock);
	return got;
}
