/*
 * cm_event.c - event channels, the event queue, get/ack, and the waiting
 * that makes synchronous ids synchronous.
 *
 * A channel's fd is an eventfd in semaphore mode whose count always equals
 * the number of queued events: an event is queued and the count raised
 * under cm_event_lock, and taken off with the count lowered under it, so
 * the fd polls readable exactly while events are queued and the read that
 * lowers the count never blocks.  ferry_get_cm_event itself sleeps on a
 * condition variable, or fails with EAGAIN when the application made the
 * fd non-blocking (as rdma_get_cm_event does).
 *
 * Every id counts its events that are queued or retrieved but not acked
 * (events_out): ferry_destroy_id drops the queued ones and waits for the
 * others to be acked, as rdma_destroy_id does.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cm-internal.h"

/* Protects every channel's queue and every id's events_out. */
static pthread_mutex_t cm_event_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t cm_event_once = PTHREAD_ONCE_INIT;

/*
 * Forks so far.  A channel made before one may share its eventfd with
 * another process, whose count of it is not ours (cm_event_unlink_locked);
 * one made since the last fork has its eventfd to itself.
 */
static _Atomic unsigned int cm_event_forks;

static void cm_event_atfork_prepare(void)
{
	atomic_fetch_add(&cm_event_forks, 1);
}

static void cm_event_atfork_child(void)
{
	pthread_mutex_init(&cm_event_lock, NULL);
}

static void cm_event_init_once(void)
{
	pthread_atfork(cm_event_atfork_prepare, NULL, cm_event_atfork_child);
}

/* --- channels --- */

struct cm_channel *cm_channel_new(void)
{
	struct cm_channel *chan;

	pthread_once(&cm_event_once, cm_event_init_once);
	chan = calloc(1, sizeof(*chan));
	if (!chan)
		return NULL;
	chan->ch.fd = ferry_fd_park(eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC));
	if (chan->ch.fd < 0) {
		ferry_warn("cm: creating an event channel: %m");
		free(chan);
		return NULL;
	}
	chan->forks = atomic_load(&cm_event_forks);
	pthread_cond_init(&chan->cond, NULL);
	return chan;
}

void cm_channel_free(struct cm_channel *chan)
{
	close(chan->ch.fd);
	pthread_cond_destroy(&chan->cond);
	free(chan);
}

/**
 * ferry_create_event_channel - a channel for the events of the ids created
 * on it.  Its fd polls readable while events are queued.
 */
struct ferry_event_channel *ferry_create_event_channel(void)
{
	struct cm_channel *chan = cm_channel_new();

	return chan ? &chan->ch : NULL;
}

/**
 * ferry_destroy_event_channel - fails with EBUSY while ids use the channel
 * or events are queued on it.
 */
int ferry_destroy_event_channel(struct ferry_event_channel *channel)
{
	struct cm_channel *chan;
	bool busy;

	if (!channel)
		return ERR(EINVAL);
	chan = container_of(channel, struct cm_channel, ch);
	pthread_mutex_lock(&cm_event_lock);
	busy = chan->nids || chan->head;
	pthread_mutex_unlock(&cm_event_lock);
	if (busy)
		return ERR(EBUSY);
	cm_channel_free(chan);
	return 0;
}

void cm_channel_add_id(struct cm_channel *chan)
{
	pthread_mutex_lock(&cm_event_lock);
	chan->nids++;
	pthread_mutex_unlock(&cm_event_lock);
}

void cm_channel_remove_id(struct cm_channel *chan)
{
	pthread_mutex_lock(&cm_event_lock);
	chan->nids--;
	pthread_mutex_unlock(&cm_event_lock);
}

/* --- queueing --- */

/* The state an event leads its id to. */
static void cm_event_set_state(struct cm_id_priv *id, enum ferry_cm_event_type type)
{
	switch (type) {
	case FERRY_CM_EVENT_ADDR_RESOLVED:
		id->state = CM_ADDR_RESOLVED;
		break;
	case FERRY_CM_EVENT_ADDR_ERROR:
		/* as rdma_cm: a device is known only once an address resolved */
		id->state = id->bound ? CM_ADDR_BOUND : CM_IDLE;
		if (!id->bound)
			id->id.verbs = NULL;
		break;
	case FERRY_CM_EVENT_ROUTE_RESOLVED:
		id->state = CM_ROUTE_RESOLVED;
		break;
	case FERRY_CM_EVENT_ROUTE_ERROR:
		id->state = CM_ADDR_RESOLVED;
		break;
	case FERRY_CM_EVENT_ESTABLISHED:
		id->state = CM_ESTABLISHED;
		break;
	case FERRY_CM_EVENT_REJECTED:
	case FERRY_CM_EVENT_UNREACHABLE:
	case FERRY_CM_EVENT_CONNECT_ERROR:
	case FERRY_CM_EVENT_DISCONNECTED:
		id->state = CM_DISCONNECT;
		break;
	default:
		break;
	}
}

static void cm_event_copy_param(struct cm_event_priv *ev,
				const struct ferry_conn_param *param)
{
	size_t len = param->private_data_len;

	ev->event.param.conn = *param;
	if (len > sizeof(ev->pdata))
		len = sizeof(ev->pdata);
	if (len && param->private_data)
		memcpy(ev->pdata, param->private_data, len);
	ev->event.param.conn.private_data = len ? ev->pdata : NULL;
	ev->event.param.conn.private_data_len = (uint8_t)len;
}

/* Queue @ev on @chan; cm_event_lock held. */
static void cm_event_enqueue_locked(struct cm_channel *chan, struct cm_event_priv *ev)
{
	uint64_t one = 1;

	ev->next = NULL;
	if (chan->tail)
		chan->tail->next = ev;
	else
		chan->head = ev;
	chan->tail = ev;
	if (write(chan->ch.fd, &one, sizeof(one)) != sizeof(one))
		ferry_err("cm: raising an event channel: %m");
	pthread_cond_broadcast(&chan->cond);
}

void cm_event_report(struct cm_id_priv *id, struct cm_id_priv *listen_id,
		     enum ferry_cm_event_type type, int status,
		     const struct ferry_conn_param *param)
{
	struct cm_event_priv *ev;
	struct cm_channel *chan;

	if (id->state == CM_DESTROYING)
		return;
	cm_event_set_state(id, type);
	ev = calloc(1, sizeof(*ev));
	if (!ev) {
		ferry_err("cm: out of memory, %s event lost", ferry_event_str(type));
		return;
	}
	ev->event.id = &id->id;
	ev->event.listen_id = listen_id ? &listen_id->id : NULL;
	ev->event.event = type;
	ev->event.status = status;
	if (param)
		cm_event_copy_param(ev, param);
	ferry_debug("cm: %s (status %d)", ferry_event_str(type), status);
	pthread_mutex_lock(&cm_event_lock);
	/* A CONNECT_REQUEST waits on the listener's channel (a synchronous
	 * listener's own), whatever channel the new id has.  Read under the
	 * lock: ferry_migrate_id changes it. */
	chan = listen_id ? listen_id->chan : id->chan;
	id->events_out++;
	cm_event_enqueue_locked(chan, ev);
	pthread_mutex_unlock(&cm_event_lock);
}

/* Take @ev, the successor of *@pp, off @chan; cm_event_lock held. */
static void cm_event_unlink_locked(struct cm_channel *chan, struct cm_event_priv **pp,
				   struct cm_event_priv *prev)
{
	struct pollfd pfd = { .fd = chan->ch.fd, .events = POLLIN };
	struct cm_event_priv *ev = *pp;
	uint64_t one;

	*pp = ev->next;
	if (chan->tail == ev)
		chan->tail = prev;
	/*
	 * The count is one per queued event, unless a child of fork() that
	 * shares the eventfd (not the queue) dropped events it inherited: then
	 * it is short, and a read of the (blocking) fd would wait forever
	 * under cm_event_lock.  Look first, unless no fork happened since the
	 * channel was made (a poll less per event).
	 */
	if (chan->forks != atomic_load(&cm_event_forks) && poll(&pfd, 1, 0) != 1)
		return;
	if (read(chan->ch.fd, &one, sizeof(one)) != sizeof(one))
		ferry_err("cm: lowering an event channel: %m");
}

void cm_event_purge(struct cm_id_priv *id)
{
	struct cm_event_priv **pp, *ev, *prev = NULL, *orphans = NULL;
	struct cm_channel *chan = id->chan;

	pthread_mutex_lock(&cm_event_lock);
	for (pp = &chan->head; (ev = *pp);) {
		if (ev->event.id != &id->id && ev->event.listen_id != &id->id) {
			prev = ev;
			pp = &ev->next;
			continue;
		}
		cm_event_unlink_locked(chan, pp, prev);
		to_cm_id(ev->event.id)->events_out--;
		if (ev->event.id != &id->id) {
			ev->next = orphans;	/* a request nobody has seen */
			orphans = ev;
		} else {
			free(ev);
		}
	}
	pthread_mutex_unlock(&cm_event_lock);
	while ((ev = orphans)) {
		struct cm_id_priv *req = to_cm_id(ev->event.id);

		orphans = ev->next;
		free(ev);
		cm_id_teardown(req);
		cm_id_free_unreported(req);
	}
}

/**
 * ferry_migrate_id - move @id to @channel (rdma_migrate_id): the events of
 * @id (and, for a listener, its connection requests) still queued on its
 * channel move along, in order; every later one is queued on @channel.
 * Events already retrieved are acked as before.  A synchronous id (created
 * without a channel) cannot move: EINVAL.
 */
int ferry_migrate_id(struct ferry_cm_id *fid, struct ferry_event_channel *channel)
{
	struct cm_event_priv **pp, *ev, *prev = NULL;
	struct cm_channel *from, *to;
	struct cm_id_priv *id;

	if (!fid || !channel)
		return ERR(EINVAL);
	id = to_cm_id(fid);
	if (id->sync)
		return ERR(EINVAL);
	to = container_of(channel, struct cm_channel, ch);
	pthread_mutex_lock(&cm_event_lock);
	from = id->chan;
	if (from != to) {
		for (pp = &from->head; (ev = *pp);) {
			if (ev->event.id != fid && ev->event.listen_id != fid) {
				prev = ev;
				pp = &ev->next;
				continue;
			}
			cm_event_unlink_locked(from, pp, prev);	/* *pp: the next one */
			cm_event_enqueue_locked(to, ev);
		}
		from->nids--;
		to->nids++;
		id->chan = to;
		fid->channel = channel;
	}
	pthread_mutex_unlock(&cm_event_lock);
	return 0;
}

void cm_event_wait_acked(struct cm_id_priv *id)
{
	pthread_mutex_lock(&cm_event_lock);
	while (id->events_out)
		pthread_cond_wait(&id->acked, &cm_event_lock);
	pthread_mutex_unlock(&cm_event_lock);
}

/* --- get and ack --- */

/* The next event of @channel; @wait: sleep for one unless the fd is
 * non-blocking, else fail with EAGAIN at once. */
static int cm_event_get(struct ferry_event_channel *channel,
			struct ferry_cm_event **event_p, bool wait)
{
	struct cm_channel *chan;
	struct cm_event_priv *ev;

	if (!channel || !event_p)
		return ERR(EINVAL);
	chan = container_of(channel, struct cm_channel, ch);
	pthread_mutex_lock(&cm_event_lock);
	while (!chan->head) {
		if (!wait || (fcntl(channel->fd, F_GETFL) & O_NONBLOCK)) {
			pthread_mutex_unlock(&cm_event_lock);
			return ERR(EAGAIN);
		}
		pthread_cond_wait(&chan->cond, &cm_event_lock);
	}
	ev = chan->head;
	cm_event_unlink_locked(chan, &chan->head, NULL);
	pthread_mutex_unlock(&cm_event_lock);
	*event_p = &ev->event;
	return 0;
}

/**
 * ferry_get_cm_event - the next event of @channel: waits for one, or fails
 * with EAGAIN when the channel's fd is non-blocking and none is queued.
 */
int ferry_get_cm_event(struct ferry_event_channel *channel,
		       struct ferry_cm_event **event_p)
{
	return cm_event_get(channel, event_p, true);
}

int ferry_cm_event_poll(struct ferry_event_channel *channel,
			struct ferry_cm_event **event_p)
{
	return cm_event_get(channel, event_p, false);
}

/**
 * ferry_ack_cm_event - release an event from ferry_get_cm_event.  Every
 * event must be acked; ferry_destroy_id waits for the id's events.
 */
int ferry_ack_cm_event(struct ferry_cm_event *event)
{
	struct cm_event_priv *ev;
	struct cm_id_priv *id;

	if (!event || !event->id)
		return ERR(EINVAL);
	ev = container_of(event, struct cm_event_priv, event);
	id = to_cm_id(event->id);
	pthread_mutex_lock(&cm_event_lock);
	if (--id->events_out == 0)
		pthread_cond_broadcast(&id->acked);
	pthread_mutex_unlock(&cm_event_lock);
	free(ev);
	return 0;
}

/* --- synchronous ids --- */

/* errno for a synchronous call whose outcome was @ev, as librdmacm's. */
static int cm_event_errno(const struct ferry_cm_event *ev)
{
	if (ev->event == FERRY_CM_EVENT_REJECTED)
		return ECONNREFUSED;
	return ev->status > 0 ? ev->status : EPROTO;
}

void cm_sync_release(struct cm_id_priv *id)
{
	struct ferry_cm_event *ev = id->id.event;

	if (!ev)
		return;
	id->id.event = NULL;
	ferry_ack_cm_event(ev);
}

/* Keep @ev in id.event, releasing the one kept before (after: the caller
 * may have passed private data pointing into it). */
static void cm_sync_keep(struct cm_id_priv *id, struct ferry_cm_event *ev)
{
	cm_sync_release(id);
	id->id.event = ev;
}

int cm_sync_wait(struct cm_id_priv *id, enum ferry_cm_event_type want)
{
	struct ferry_cm_event *ev;

	if (!id->sync)
		return 0;
	if (ferry_get_cm_event(&id->chan->ch, &ev) < 0)
		return -1;
	cm_sync_keep(id, ev);
	if (ev->event == want)
		return 0;
	return ERR(cm_event_errno(ev));
}

int cm_sync_get_request(struct cm_id_priv *listen, struct cm_id_priv **id_p)
{
	struct ferry_cm_event *ev;
	struct cm_id_priv *req;
	int err;

	if (ferry_get_cm_event(&listen->chan->ch, &ev) < 0)
		return -1;
	if (ev->event != FERRY_CM_EVENT_CONNECT_REQUEST) {
		err = cm_event_errno(ev);
		ferry_ack_cm_event(ev);
		return ERR(err);
	}
	req = to_cm_id(ev->id);
	cm_sync_keep(req, ev);
	*id_p = req;
	return 0;
}
