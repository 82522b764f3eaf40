/*
 * shm_channel.c - the shm provider's completion channels: an epoll set of
 * CQs' wake sockets, or (single) one CQ's wake socket itself, which may
 * later become that CQ's QP's connection.  The CQ's arm word they clear
 * is shm_cq.c's.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "shm-internal.h"
#include "shm-ops.h"
#include "shm-ud.h"

struct ferry_comp_channel *shm_create_comp_channel(struct ferry_context *ctx)
{
	struct shm_channel *sch = calloc(1, sizeof(*sch));

	if (!sch)
		return NULL;
	sch->ch.fd = ferry_fd_park(epoll_create1(EPOLL_CLOEXEC));
	if (sch->ch.fd < 0) {
		free(sch);
		return NULL;
	}
	sch->ch.context = ctx;
	return &sch->ch;
}

struct ferry_comp_channel *shm_create_comp_channel_single(struct ferry_context *ctx)
{
	struct shm_channel *sch = calloc(1, sizeof(*sch));

	if (!sch)
		return NULL;
	sch->ch.fd = shm_wake_socket(&sch->wake);
	if (sch->ch.fd < 0) {
		free(sch);
		return NULL;
	}
	sch->single = true;
	sch->ch.context = ctx;
	return &sch->ch;
}

/* A single-CQ channel's event: its wake socket had something. */
static int shm_cq_event_single(struct shm_channel *sch, struct shm_cq **scq_p, bool nowait)
{
	struct pollfd pfd = { .fd = sch->ch.fd, .events = POLLIN };

	for (;;) {
		int got = shm_wake_drain(sch->ch.fd);

		if (got > 0)
			break;
		if (got < 0)
			return -1;
		/* O_NONBLOCK unless the application took it off */
		if (nowait || (fcntl(sch->ch.fd, F_GETFL) & O_NONBLOCK))
			return ERR(EAGAIN);
		if (poll(&pfd, 1, -1) < 0)
			return -1;
	}
	/* A count with no CQ: one gone since (its events were acked). */
	if (!sch->cq)
		return ERR(EAGAIN);
	*scq_p = sch->cq;
	return 0;
}

int shm_destroy_comp_channel(struct ferry_comp_channel *ch)
{
	struct shm_channel *sch = container_of(ch, struct shm_channel, ch);

	if (!sch->fd_given)
		close(ch->fd);	/* the core refuses while CQs still use it */
	free(sch);
	return 0;
}

/*
 * A single channel's socket now has number @fd, which the caller made
 * (dup3) and keeps: it closes the old number, and @fd when it is done.
 * The CQ is woken by name, so no one else holds the number.
 */
int shm_renumber_comp_channel(struct ferry_comp_channel *ch, int fd)
{
	struct shm_channel *sch = container_of(ch, struct shm_channel, ch);

	if (!sch->single)
		return ERR(EOPNOTSUPP);
	if (sch->on_conn && sch->cq) {
		/* Its QP, while there (conn_qp), holds the number too and has
		 * its monitor watch it. */
		int flags = fcntl(fd, F_GETFD), moved = fd;
		struct shm_qp *qp;

		ferry_lock(&sch->cq->lock);
		qp = sch->cq->conn_qp;
		ferry_unlock(&sch->cq->lock);
		if (qp) {
			ferry_lock(&qp->sq_lock);
			if (qp->conn)
				moved = shm_conn_move(qp, fd, flags > 0 && (flags & FD_CLOEXEC));
			ferry_unlock(&qp->sq_lock);
		}
		if (moved < 0)
			return -1;
	}
	if (sch->cq) {
		ferry_lock(&sch->cq->lock);
		sch->cq->efd = fd;
		ferry_unlock(&sch->cq->lock);
	}
	ch->fd = fd;
	sch->fd_given = true;
	return 0;
}

/*
 * The single channel @ch, whose CQ takes the receives of connected @fqp
 * alone, becomes the QP's connection: the AF_UNIX socket to the peer,
 * moved to number @fd (or the lowest free one), is the channel's
 * descriptor, the CQ's wake socket goes, and the peer wakes the CQ with a
 * record on its end of the connection (SHM_NOTIFY_CONN).  Nobody may be
 * waiting on the channel meanwhile: a peer that read the arm word before
 * the change sends its wake-up to the socket that goes.
 */
int shm_comp_channel_on_conn(struct ferry_comp_channel *ch, struct ferry_qp *fqp,
				    int fd, bool cloexec)
{
	struct shm_channel *sch = to_sch(ch);
	struct shm_cq *scq = sch->cq;
	struct shm_qp *qp = to_sqp(fqp);
	int old = ch->fd, to = -1;

	if (!sch->single || sch->on_conn || !scq || fqp->recv_cq != &scq->cq)
		return ERR(EINVAL);
	ferry_lock(&qp->sq_lock);
	ferry_lock(&scq->lock);
	if (scq->nrqps != 1 || scq->rqps[0] != qp || !qp->conn || qp->conn->dead ||
	    qp->qp.state != FERRY_QPS_RTS || to_spd(fqp->pd)->detached)
		errno = EOPNOTSUPP;
	else
		to = 0;
	ferry_unlock(&scq->lock);
	if (to == 0)
		to = shm_conn_move(qp, fd, cloexec);
	if (to >= 0)
		qp->conn->on_channel = true;
	ferry_unlock(&qp->sq_lock);
	if (to < 0)
		return -1;

	ferry_lock(&scq->lock);
	scq->efd = to;
	scq->wake.len = 0;
	scq->conn_qp = qp;
	shm_notify_update(scq, scq->gen, 0, SHM_NOTIFY_CONN);
	ferry_unlock(&scq->lock);
	if (old != to && !sch->fd_given)
		shm_wake_socket_put(old, &sch->wake);	/* ours alone: the next CQ's */
	ch->fd = to;
	sch->wake.len = 0;
	sch->fd_given = true;
	sch->on_conn = true;
	return to;
}

static int shm_cq_event(struct ferry_comp_channel *ch, struct ferry_cq **cq_p, bool nowait)
{
	struct epoll_event ev;
	struct shm_cq *scq;
	int n, timeout = 0;

	if (to_sch(ch)->single) {
		if (shm_cq_event_single(to_sch(ch), &scq, nowait) < 0)
			return -1;
		goto got;
	}
	for (;;) {
		/* An event there is taken without asking whether the channel
		 * may block: that costs a system call (the flag is the fd's,
		 * set by the application with fcntl, as on ibverbs). */
		n = epoll_wait(ch->fd, &ev, 1, timeout);
		if (n < 0)
			return -1;	/* EINTR goes to the caller, as ibverbs */
		if (n == 0 && timeout == 0 && !nowait && !(fcntl(ch->fd, F_GETFL) & O_NONBLOCK)) {
			timeout = -1;
			continue;
		}
		if (n == 0)
			return ERR(EAGAIN);
		scq = ev.data.ptr;
		/* Its wake socket, or one of its UD QPs' (shm_ud_cq_arm). */
		if (shm_wake_drain(scq->efd) > 0 || shm_ud_cq_ready(scq))
			break;
		/* Another thread took this event: wait for the next one. */
	}
got:
	ferry_lock(&scq->lock);
	/* The channel's arm is spent; a futex sleeper's stays. */
	shm_notify_update(scq, scq->gen, SHM_NOTIFY_MODES, 0);
	scq->events++;
	ferry_unlock(&scq->lock);
	*cq_p = &scq->cq;
	return 0;
}

int shm_get_cq_event(struct ferry_comp_channel *ch, struct ferry_cq **cq_p)
{
	return shm_cq_event(ch, cq_p, false);
}

int shm_poll_cq_event(struct ferry_comp_channel *ch, struct ferry_cq **cq_p)
{
	return shm_cq_event(ch, cq_p, true);
}
