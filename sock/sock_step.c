/*
 * sock_step.c - the handshake steps a socket's own threads take rather
 * than leave to the CM thread (ferry_cm_progress, ferry_cm_hold and
 * ferry_cm_release): a thread that polls a connecting or listening socket
 * takes the steps whose messages have come; one that sleeps on it sleeps
 * on the handshakes' sockets too, so that what comes wakes it alone.  Each
 * step saved is a wake-up of the CM thread and a thread switch back, on
 * the CPU the caller runs on; nothing here waits for a peer longer than
 * the caller was going to wait anyway, and every step keeps its deadline.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <poll.h>
#include <pthread.h>

#include "sock-internal.h"

/*
 * Steps the CM thread would take for the socket, taken here when what
 * they wait for has come (ferry_cm_progress): the listener's answer and
 * the exchange of a connect; the connections at a listener's rendezvous
 * and the exchanges of those it accepted.  Each would otherwise cost a
 * wake-up of the CM thread and a thread switch back, on the CPU this
 * caller polls on.  cm_lock held, as for every call on these ids.
 */
bool sock_conn_progress(struct ferry_sock *s)
{
	struct ferry_sock *p;
	bool stepped = false;

	if (!s->id)
		return false;
	if (s->state == SOCK_CONNECTING)
		return ferry_cm_progress(s->id) > 0;
	if (s->state != SOCK_LISTENING)
		return false;
	for (p = s->pending; p; p = p->next)
		stepped |= p->id && ferry_cm_progress(p->id) > 0;
	stepped |= ferry_cm_progress(s->id) > 0;
	return stepped;
}

/* Hold the step @id waits for into @pfd: true if there is one. */
static bool sock_conn_hold_id(struct ferry_cm_id *id, struct pollfd *pfd, int *ms_p)
{
	int fd = id ? ferry_cm_hold(id, ms_p) : -1;

	*pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
	return fd >= 0;
}

int sock_conn_hold(struct ferry_sock *s, struct pollfd *fds, int max, int *ms_p)
{
	struct ferry_sock *p;
	int n = 0;

	pthread_mutex_lock(&s->cm_lock);
	if (s->chan && s->chan_in_epoll && s->state == SOCK_CONNECTING && max > 0)
		n += sock_conn_hold_id(s->id, &fds[n], ms_p);
	else if (s->chan && s->state == SOCK_LISTENING)
		for (p = s->pending; p && n < max; p = p->next)
			n += sock_conn_hold_id(p->id, &fds[n], ms_p);
	pthread_mutex_unlock(&s->cm_lock);
	return n;
}

/* An id held and not released (the socket changed meanwhile) is no
 * leak: whatever took it from us ended the hold (unloop). */
void sock_conn_release(struct ferry_sock *s)
{
	struct ferry_sock *p;

	pthread_mutex_lock(&s->cm_lock);
	if (s->state == SOCK_CONNECTING && s->id)
		ferry_cm_release(s->id);
	else if (s->state == SOCK_LISTENING)
		for (p = s->pending; p; p = p->next)
			if (p->id)
				ferry_cm_release(p->id);
	sock_conn_process(s);
	pthread_mutex_unlock(&s->cm_lock);
}

/*
 * Should a caller that found nothing give its CPU to the CM thread?  A
 * connect whose request is out takes its answer and exchange itself and
 * keeps the CPU: the CM thread, woken too by what arrives, would get there
 * first and cost two thread switches.  Before that (a retry timer, say)
 * the CM thread may have a step this caller cannot take, and a listener's
 * connections whose request had not come yet are the CM thread's: yield.
 */
bool sock_conn_yields(const struct ferry_sock *s)
{
	return s->state == SOCK_LISTENING || (s->state == SOCK_CONNECTING && !s->qp);
}
