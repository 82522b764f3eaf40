/*
 * async.c - the asynchronous events of a context, for providers that
 * raise them themselves (shm: SRQ limit, last WQE, QP fatal, ...).
 *
 * ibverbs' async_fd is the kernel's event file: readable while its list of
 * events is not empty, blocking or not as its flags say.  Here it is an
 * eventfd whose counter is 1 exactly while the queue holds an event (set
 * by the post that makes the queue non-empty, read back by whatever
 * empties it, both under the queue's lock): poll(2) on it tells the truth
 * however the caller set O_NONBLOCK, and ferry_async_get waits on it only
 * when the caller left it blocking.  Events of an object being destroyed
 * are dropped from the queue (ferry_async_forget), as the kernel drops
 * them, so a readable fd always has an event behind it.  A program that
 * never reads them (ferry's own stream sockets do not) keeps at most
 * ASYNC_QUEUE_MAX: later ones are dropped, not piled up for ever.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core-export.h"

/* Events a queue holds at most. */
#define ASYNC_QUEUE_MAX 1024

struct async_item {
	struct ferry_async_event ev;
	const void *element;		/* what ev names, for ferry_async_forget */
	struct async_item *next;
};

/*
 * One lock for every context's queue: events are rare, and a static lock
 * can be held across fork() (FERRY_FORK_SAFE) -- a child forked while
 * another thread posted would otherwise inherit it held, and hang at its
 * first event.  A leaf: taken under any provider lock.
 */
static pthread_mutex_t async_lock = PTHREAD_MUTEX_INITIALIZER;
FERRY_FORK_SAFE(async, async_lock)

struct ferry_async_queue {
	struct async_item *head, *tail;
	unsigned int count;		/* items, at most ASYNC_QUEUE_MAX */
	int fd;				/* eventfd: 1 while head != NULL */
};

int ferry_async_open(struct ferry_context *ctx)
{
	struct ferry_async_queue *q = calloc(1, sizeof(*q));

	if (!q)
		return -1;
	/* Blocking, as ibv_context's async_fd is; close-on-exec, parked. */
	q->fd = ferry_fd_park(eventfd(0, EFD_CLOEXEC));
	if (q->fd < 0) {
		ferry_err("async events: eventfd: %m");
		free(q);
		return -1;
	}
	ctx->async = q;
	ctx->async_fd = q->fd;
	return 0;
}

void ferry_async_close(struct ferry_async_queue *q)
{
	struct async_item *it, *next;

	if (!q)
		return;
	for (it = q->head; it; it = next) {
		next = it->next;
		free(it);
	}
	close(q->fd);
	free(q);
}

/* Counter to 1 (the queue became non-empty) or back to 0; lock held. */
static void async_fd_set(struct ferry_async_queue *q, bool ready)
{
	uint64_t v = 1;
	ssize_t n;

	/* Reading a counter of 1 never blocks, whatever the fd's mode. */
	n = ready ? write(q->fd, &v, sizeof(v)) : read(q->fd, &v, sizeof(v));
	if (n != sizeof(v))
		ferry_warn("async events: eventfd %s: %m", ready ? "write" : "read");
}

/* Append @it, unless the queue is full; lock held.  false: full. */
static bool async_push_locked(struct ferry_async_queue *q, struct async_item *it)
{
	if (q->count >= ASYNC_QUEUE_MAX)
		return false;
	if (q->tail)
		q->tail->next = it;
	else
		q->head = it;
	q->tail = it;
	q->count++;
	if (q->head == it)
		async_fd_set(q, true);
	return true;
}

int ferry_async_post(struct ferry_context *ctx, enum ferry_event_type type, void *element)
{
	struct ferry_async_queue *q = ctx->async;
	struct async_item *it;
	bool queued;

	if (!q)
		return ERR(EOPNOTSUPP);
	it = calloc(1, sizeof(*it));
	if (!it) {
		ferry_err("async event %s lost: %m", ferry_event_type_str(type));
		return ERR(ENOMEM);
	}
	it->ev.event_type = type;
	it->element = element;
	if (type == FERRY_EVENT_SRQ_LIMIT_REACHED || type == FERRY_EVENT_SRQ_ERR)
		it->ev.element.srq = element;
	else if (type == FERRY_EVENT_CQ_ERR)
		it->ev.element.cq = element;
	else
		it->ev.element.qp = element;
	pthread_mutex_lock(&async_lock);
	queued = async_push_locked(q, it);
	pthread_mutex_unlock(&async_lock);
	if (!queued) {
		ferry_debug("async event %s dropped: %u wait unread",
			    ferry_event_type_str(type), ASYNC_QUEUE_MAX);
		free(it);
		return ERR(ENOBUFS);
	}
	return 0;
}

/* Take the first event, if any; lock held.  NULL when empty. */
static struct async_item *async_pop_locked(struct ferry_async_queue *q)
{
	struct async_item *it = q->head;

	if (!it)
		return NULL;
	q->head = it->next;
	q->count--;
	if (!q->head) {
		q->tail = NULL;
		async_fd_set(q, false);
	}
	return it;
}

void ferry_async_forget(struct ferry_context *ctx, const void *element)
{
	struct ferry_async_queue *q = ctx->async;
	struct async_item **pp, *it;
	bool had;

	if (!q)
		return;
	pthread_mutex_lock(&async_lock);
	had = q->head != NULL;
	q->tail = NULL;
	for (pp = &q->head; (it = *pp);) {
		if (it->element == element) {
			*pp = it->next;
			q->count--;
			free(it);
		} else {
			q->tail = it;
			pp = &it->next;
		}
	}
	if (had && !q->head)
		async_fd_set(q, false);
	pthread_mutex_unlock(&async_lock);
}

int ferry_async_get(struct ferry_context *ctx, struct ferry_async_event *ev)
{
	struct ferry_async_queue *q = ctx->async;
	struct pollfd pfd = { .fd = q->fd, .events = POLLIN };
	struct async_item *it;

	for (;;) {
		pthread_mutex_lock(&async_lock);
		it = async_pop_locked(q);
		pthread_mutex_unlock(&async_lock);
		if (it)
			break;
		if (fcntl(q->fd, F_GETFL) & O_NONBLOCK)
			return ERR(EAGAIN);
		/* Another thread may take the event we wake for: look again. */
		if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
			return -1;
	}
	*ev = it->ev;
	free(it);
	return 0;
}
