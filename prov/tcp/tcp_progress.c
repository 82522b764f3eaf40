/*
 * tcp_progress.c - the "software NIC": one thread per context that moves
 * every QP's connection while the application computes.
 *
 * It sleeps in epoll_wait over the sockets of the QPs in RTR or later and
 * an eventfd (kicks: a receive was posted for a SEND that waits, a QP
 * goes); a socket is registered for EPOLLIN while there is something to
 * read and for EPOLLOUT only while output waits, so an idle connection
 * costs no wake-up at all.  The timeout is the nearest QP timer (RNR,
 * stalled FPDU), or none.
 *
 * A QP leaves (tcp_progress_remove) by leaving the epoll set and the list,
 * then waiting until the thread has finished the turn it is in: no turn
 * that began before can still hold its address.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "tcp-internal.h"

#define TCP_EVENTS	64

struct tcp_progress {
	pthread_t thread;
	int epfd, evfd;
	pthread_mutex_t lock;		/* the list, seq, stop */
	pthread_cond_t turned;		/* seq moved */
	struct tcp_qp *qps;		/* every QP registered */
	pid_t pid;			/* the process the thread runs in */
	uint64_t seq;			/* turns completed */
	bool stop;
	bool paused;			/* tests: the NIC stops between turns */
};

unsigned int tcp_stall_ms(void)
{
	static unsigned int ms;
	const char *env;

	if (!__atomic_load_n(&ms, __ATOMIC_RELAXED)) {
		env = getenv("FERRY_TCP_STALL_MS");
		__atomic_store_n(&ms, env && atoi(env) > 0 ? (unsigned int)atoi(env)
							   : TCP_STALL_MS_DEFAULT,
				 __ATOMIC_RELAXED);
	}
	return ms;
}

/*
 * In a child of fork() the thread is not there: nothing waits for it, and
 * the child's QPs do not move (a tcp connection stays its parent's; the
 * child only lets go of its copies).
 */
static bool tcp_progress_here(const struct tcp_progress *p)
{
	return p->pid == ferry_pid();
}

/* qp->lock held: the epoll registration the QP's state calls for. */
static void tcp_progress_update(struct tcp_qp *qp)
{
	struct tcp_progress *p = to_tctx(qp->qp.context)->prog;
	struct epoll_event ev = { .data.ptr = qp };
	int op;

	if (!p || qp->fd < 0 || qp->dying || !qp->in_epoll_list || !tcp_progress_here(p))
		return;		/* (a child of fork shares the parent's epoll set) */
	if (!qp->rx_eof && !qp->rx_held)
		ev.events |= EPOLLIN;
	if (qp->want_out && !qp->tx_shut)
		ev.events |= EPOLLOUT;
	if (ev.events == qp->events && (ev.events != 0) == qp->in_epoll)
		return;
	if (!ev.events)
		op = EPOLL_CTL_DEL;
	else
		op = qp->in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
	if (epoll_ctl(p->epfd, op, qp->fd, &ev) < 0 && op != EPOLL_CTL_DEL) {
		ferry_err("tcp QP %u: epoll_ctl: %m", qp->qp.qp_num);
		tcp_qp_set_error(qp, "cannot watch the socket");
		return;
	}
	qp->in_epoll = ev.events != 0;
	qp->events = ev.events;
}

void tcp_progress_want_out(struct tcp_qp *qp, bool on)
{
	qp->want_out = on;
	tcp_progress_update(qp);
}

static void tcp_progress_wake(struct tcp_progress *p)
{
	uint64_t one = 1;

	if (write(p->evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		ferry_warn("tcp: cannot wake the progress thread: %m");
}

void tcp_progress_kick(struct tcp_qp *qp)
{
	struct tcp_progress *p = to_tctx(qp->qp.context)->prog;

	__atomic_store_n(&qp->kicked, true, __ATOMIC_RELEASE);
	if (p)
		tcp_progress_wake(p);
}

/* A turn's work on one QP. */
static void tcp_progress_service(struct tcp_qp *qp, uint64_t now)
{
	pthread_mutex_lock(&qp->lock);
	if (!qp->dying) {
		__atomic_store_n(&qp->kicked, false, __ATOMIC_RELAXED);
		tcp_rx_timers(qp, now);
		tcp_rx_progress(qp);
		tcp_tx_progress(qp);
		tcp_progress_update(qp);
	}
	pthread_mutex_unlock(&qp->lock);
}

/* The timeout until the nearest timer; and service the QPs kicked or due. */
static int tcp_progress_timers(struct tcp_progress *p, bool scan)
{
	uint64_t now = monotime_ns(), next = 0;
	struct tcp_qp *qp;

	pthread_mutex_lock(&p->lock);
	for (qp = p->qps; qp; qp = qp->prog_next) {
		uint64_t due = __atomic_load_n(&qp->deadline_ns, __ATOMIC_RELAXED);
		bool kicked = __atomic_load_n(&qp->kicked, __ATOMIC_ACQUIRE);

		/* qp stays valid: tcp_progress_remove waits for this turn. */
		if ((scan && kicked) || (due && due <= now)) {
			pthread_mutex_unlock(&p->lock);
			tcp_progress_service(qp, now);
			pthread_mutex_lock(&p->lock);
			due = __atomic_load_n(&qp->deadline_ns, __ATOMIC_RELAXED);
		}
		if (due && (!next || due < next))
			next = due;
	}
	pthread_mutex_unlock(&p->lock);
	if (!next)
		return -1;
	now = monotime_ns();
	return next <= now ? 0 : (int)((next - now + 999999) / 1000000);
}

static void *tcp_progress_main(void *arg)
{
	struct tcp_progress *p = arg;
	struct epoll_event evs[TCP_EVENTS];
	int timeout = -1;

	ferry_own_thread = true;
	for (;;) {
		bool scan = false;
		int i, n = epoll_wait(p->epfd, evs, TCP_EVENTS, timeout);

		for (i = 0; i < n; i++) {
			if (!evs[i].data.ptr) {
				uint64_t v;

				scan = read(p->evfd, &v, sizeof(v)) > 0 || scan;
				continue;
			}
			tcp_progress_service(evs[i].data.ptr, monotime_ns());
		}
		timeout = tcp_progress_timers(p, scan);
		pthread_mutex_lock(&p->lock);
		p->seq++;
		pthread_cond_broadcast(&p->turned);
		while (p->paused && !p->stop)
			pthread_cond_wait(&p->turned, &p->lock);
		if (p->stop) {
			pthread_mutex_unlock(&p->lock);
			return NULL;
		}
		pthread_mutex_unlock(&p->lock);
	}
}

static struct tcp_progress *tcp_progress_start(struct tcp_context *tc)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	struct tcp_progress *p;

	pthread_mutex_lock(&tc->prog_lock);
	p = tc->prog;
	if (p)
		goto out;
	p = calloc(1, sizeof(*p));
	if (!p)
		goto out;
	p->epfd = epoll_create1(EPOLL_CLOEXEC);
	p->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->epfd < 0 || p->evfd < 0 || epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->evfd, &ev) < 0)
		goto err_close;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->turned, NULL);
	if (pthread_create(&p->thread, NULL, tcp_progress_main, p)) {
		pthread_mutex_destroy(&p->lock);
		pthread_cond_destroy(&p->turned);
		goto err_close;
	}
	p->pid = ferry_pid();
	tc->prog = p;
	goto out;

err_close:
	ferry_err("tcp: cannot start the progress thread: %m");
	if (p->epfd >= 0)
		close(p->epfd);
	if (p->evfd >= 0)
		close(p->evfd);
	free(p);
	p = NULL;
out:
	pthread_mutex_unlock(&tc->prog_lock);
	return p;
}

int tcp_progress_add(struct tcp_qp *qp)
{
	struct tcp_progress *p = tcp_progress_start(to_tctx(qp->qp.context));

	if (!p)
		return EAGAIN;
	pthread_mutex_lock(&p->lock);
	qp->prog_next = p->qps;
	p->qps = qp;
	pthread_mutex_unlock(&p->lock);
	qp->in_epoll_list = true;
	qp->dying = false;
	tcp_progress_update(qp);
	return 0;
}

void tcp_progress_remove(struct tcp_qp *qp)
{
	struct tcp_progress *p = to_tctx(qp->qp.context)->prog;
	struct tcp_qp **pp;
	uint64_t seq;

	pthread_mutex_lock(&qp->lock);
	if (!p || !qp->in_epoll_list) {
		pthread_mutex_unlock(&qp->lock);
		return;
	}
	if (qp->in_epoll && tcp_progress_here(p))
		epoll_ctl(p->epfd, EPOLL_CTL_DEL, qp->fd, NULL);
	qp->in_epoll = qp->in_epoll_list = false;
	qp->events = 0;
	qp->dying = true;
	pthread_mutex_unlock(&qp->lock);

	pthread_mutex_lock(&p->lock);
	for (pp = &p->qps; *pp; pp = &(*pp)->prog_next) {
		if (*pp == qp) {
			*pp = qp->prog_next;
			break;
		}
	}
	seq = p->seq;
	tcp_progress_wake(p);
	while (p->seq == seq && tcp_progress_here(p) && !pthread_equal(pthread_self(), p->thread))
		pthread_cond_wait(&p->turned, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

void tcp_progress_stop(struct tcp_context *tc)
{
	struct tcp_progress *p = tc->prog;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->turned);
	pthread_mutex_unlock(&p->lock);
	if (tcp_progress_here(p)) {
		tcp_progress_wake(p);
		pthread_join(p->thread, NULL);
	}
	close(p->epfd);
	close(p->evfd);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->turned);
	free(p);
	tc->prog = NULL;
}

uint64_t tcp_progress_turns(struct ferry_context *ctx)
{
	struct tcp_progress *p = to_tctx(ctx)->prog;
	uint64_t seq;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	seq = p->seq;
	pthread_mutex_unlock(&p->lock);
	return seq;
}

void tcp_progress_pause(struct ferry_context *ctx, bool pause)
{
	struct tcp_progress *p = to_tctx(ctx)->prog;
	uint64_t seq;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->paused = pause;
	seq = p->seq;
	pthread_cond_broadcast(&p->turned);
	if (pause && tcp_progress_here(p)) {
		/* Return once the thread is between turns, stopped. */
		tcp_progress_wake(p);
		while (p->seq == seq)
			pthread_cond_wait(&p->turned, &p->lock);
	}
	pthread_mutex_unlock(&p->lock);
}
