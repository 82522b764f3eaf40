/*
 * shm_monitor.c - the shm provider's monitor thread, one per process:
 * it watches every connection's AF_UNIX socket for hang-up (the peer died
 * or destroyed its QP: move ours to ERR within milliseconds) and retries
 * sends that wait for a receive (RNR) when their timer expires or when the
 * peer kicks the monitor's socket (by name) after posting a receive.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "shm-internal.h"

struct shm_watch {
	struct shm_qp *qp;
	/*
	 * What the epoll item of the QP's socket carries: a number never
	 * used twice, not the QP's address.  An event epoll_wait returned
	 * can be looked at after its QP was freed and another one made at
	 * the same address: by address, that fresh connection was taken for
	 * the hung-up one and moved to ERR.
	 */
	uint64_t hup_id;
	/*
	 * The number the epoll item was added under.  The connection's
	 * socket may move to another (shm_conn_move: a stream socket's
	 * descriptor becomes its connection); the item stays where it is,
	 * since epoll watches the file, and goes when the file does.  Moving
	 * it too cost an add and a delete per connection.  Only while the
	 * socket still has this number can EPOLL_CTL_DEL name the item: the
	 * old number may since be another file's, in the set under its own.
	 */
	int item_fd;
	int pins;		/* the monitor is using qp: don't free it */
	struct shm_watch *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t unpinned;
	pid_t pid;		/* process that started it: restart after fork */
	int epfd;
	int kick_fd;			/* a wake socket (shm_wake.c): peers kick by name */
	struct shm_wake_name kick_name;
	struct shm_watch *watches;	/* QPs with a connection or RNR wait */
	uint64_t last_hup_id;
} mon = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.unpinned = PTHREAD_COND_INITIALIZER,
	.epfd = -1,
	.kick_fd = -1,
};

/* Timer values of min_rnr_timer's IB encoding, in microseconds. */
static const uint32_t shm_rnr_us[32] = {
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960,
	1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
};

uint64_t shm_rnr_delay_ns(uint32_t code)
{
	return (uint64_t)shm_rnr_us[code & 31] * 1000;
}

static struct shm_watch *shm_watch_find(struct shm_qp *qp)
{
	struct shm_watch *w;

	for (w = mon.watches; w; w = w->next)
		if (w->qp == qp)
			return w;
	return NULL;
}

static struct shm_watch *shm_watch_find_hup(uint64_t id)
{
	struct shm_watch *w;

	for (w = mon.watches; w; w = w->next)
		if (w->hup_id == id)
			return w;
	return NULL;
}

static void *shm_monitor_main(void *arg);

/*
 * A hang-up is reported once (ONESHOT): the socket may be known by another
 * number than its item's (shm_watch.item_fd), where EPOLL_CTL_DEL can no
 * longer name it, and a hung-up socket stays ready for good.  An item
 * left behind by a socket that outlives its QP (another process holds it)
 * carries a hup_id no watch has any more: its one report is ignored.
 */
#define SHM_HUP_EVENTS	(EPOLLRDHUP | EPOLLONESHOT)

/*
 * fork: the child must not inherit mon.lock held by the parent's monitor
 * thread, and starts its own monitor on first use (mon.pid differs).
 */
static void shm_monitor_atfork_prepare(void)
{
	pthread_mutex_lock(&mon.lock);
}

static void shm_monitor_atfork_parent(void)
{
	pthread_mutex_unlock(&mon.lock);
}

static void shm_monitor_atfork_child(void)
{
	if (mon.epfd >= 0)
		close(mon.epfd);	/* the parent's; our own comes on first use */
	mon.epfd = -1;
	pthread_mutex_unlock(&mon.lock);
}

static pthread_once_t shm_atfork_once = PTHREAD_ONCE_INIT;

static void shm_monitor_register_atfork(void)
{
	pthread_atfork(shm_monitor_atfork_prepare, shm_monitor_atfork_parent,
		       shm_monitor_atfork_child);
}

/* Start the monitor in this process if needed; mon.lock held. */
static int shm_monitor_start_locked(void)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0 };	/* the kick */
	struct shm_watch *w;
	pthread_attr_t attr;
	pthread_t tid;
	sigset_t all, old;
	int err;

	if (mon.pid == ferry_pid())
		return 0;
	pthread_once(&shm_atfork_once, shm_monitor_register_atfork);
	/* After fork the child has the parent's fds but no thread: begin anew,
	 * watching the QPs it inherited (their connections may live on here).
	 * The parent's kick socket stays open: peers still kick it by name. */
	mon.epfd = ferry_fd_park(epoll_create1(EPOLL_CLOEXEC));
	mon.kick_fd = shm_wake_socket(&mon.kick_name);
	if (mon.epfd < 0 || mon.kick_fd < 0 ||
	    epoll_ctl(mon.epfd, EPOLL_CTL_ADD, mon.kick_fd, &ev) < 0) {
		ferry_err("starting the shm monitor: %m");
		goto err;
	}
	for (w = mon.watches; w; w = w->next) {
		struct epoll_event wev = { .events = SHM_HUP_EVENTS, .data.u64 = w->hup_id };

		w->pins = 0;	/* the parent's thread held them */
		if (!w->qp->conn || !w->qp->conn->watched)
			continue;
		w->item_fd = w->qp->conn->sock;
		if (epoll_ctl(mon.epfd, EPOLL_CTL_ADD, w->item_fd, &wev) < 0)
			w->qp->conn->watched = false;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);	/* signals stay the app's */
	err = pthread_create(&tid, &attr, shm_monitor_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (err) {
		errno = err;
		ferry_err("starting the shm monitor thread: %m");
		goto err;
	}
	mon.pid = ferry_pid();
	return 0;
err:
	if (mon.epfd >= 0)
		close(mon.epfd);
	if (mon.kick_fd >= 0)
		close(mon.kick_fd);
	mon.epfd = mon.kick_fd = -1;
	return -1;
}

int shm_monitor_kick_name(struct shm_wake_name *name)
{
	int ret;

	pthread_mutex_lock(&mon.lock);
	ret = shm_monitor_start_locked();
	if (ret == 0)
		*name = mon.kick_name;
	pthread_mutex_unlock(&mon.lock);
	return ret;
}

static struct shm_watch *shm_watch_get_locked(struct shm_qp *qp)
{
	struct shm_watch *w = shm_watch_find(qp);

	if (w)
		return w;
	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->qp = qp;
	w->next = mon.watches;
	mon.watches = w;
	return w;
}

void shm_monitor_watch(struct shm_qp *qp)
{
	struct epoll_event ev = { .events = SHM_HUP_EVENTS };
	struct shm_watch *w;

	pthread_mutex_lock(&mon.lock);
	if (shm_monitor_start_locked() == 0 && (w = shm_watch_get_locked(qp)) &&
	    (ev.data.u64 = w->hup_id = ++mon.last_hup_id) &&
	    epoll_ctl(mon.epfd, EPOLL_CTL_ADD, w->item_fd = qp->conn->sock, &ev) == 0)
		qp->conn->watched = true;
	else
		ferry_warn("QP %u: cannot watch the peer for hang-up: %m", qp->qp.qp_num);
	pthread_mutex_unlock(&mon.lock);
}

/* Stop @w's item, if it can still be named; mon.lock held. */
static void shm_watch_unwatch_locked(struct shm_watch *w)
{
	struct shm_conn *conn = w->qp->conn;

	if (conn->sock == w->item_fd)
		epoll_ctl(mon.epfd, EPOLL_CTL_DEL, w->item_fd, NULL);
	conn->watched = false;
}

/* The WR at the head of @qp's SQ waits for a receive; sq_lock held. */
void shm_monitor_rnr(struct shm_qp *qp)
{
	pthread_mutex_lock(&mon.lock);
	if (shm_monitor_start_locked() == 0 && shm_watch_get_locked(qp))
		qp->in_rnr_list = true;
	pthread_mutex_unlock(&mon.lock);
	/* Let the monitor recompute its sleep. */
	shm_wake(&mon.kick_name);
}

/*
 * shm_monitor_forget - the QP goes away or back to RESET: stop watching it
 * and wait until the monitor no longer uses it.  Must be called without the
 * QP's sq_lock (the monitor takes it while the QP is pinned).
 */
void shm_monitor_forget(struct shm_qp *qp)
{
	struct shm_watch **pp, *w;

	pthread_mutex_lock(&mon.lock);
	if (mon.pid != ferry_pid()) {
		pthread_mutex_unlock(&mon.lock);
		return;
	}
	/* Waiting for the pins lets other threads add and remove watches:
	 * look for the link to ours again after each wait. */
	for (;;) {
		for (pp = &mon.watches; (w = *pp) && w->qp != qp; pp = &w->next)
			;
		if (!w || !w->pins)
			break;
		pthread_cond_wait(&mon.unpinned, &mon.lock);
	}
	if (w) {
		if (qp->conn && qp->conn->watched)
			shm_watch_unwatch_locked(w);
		*pp = w->next;
		free(w);
	}
	qp->in_rnr_list = false;
	pthread_mutex_unlock(&mon.lock);
}

static void shm_monitor_hangup(struct shm_qp *qp)
{
	enum ferry_qp_state state;

	ferry_lock(&qp->sq_lock);
	if (qp->conn && !qp->conn->dead) {
		qp->conn->dead = true;
		state = qp->qp.state;
		/* A peer may finish the exchange, send and go before we are
		 * even RTS (a server that answers and closes at once): as on a
		 * device, RTR and RTS are ours to reach, and the error comes
		 * with RTS (shm_modify_qp), after what the peer sent. */
		if (qp->qp.qp_type == FERRY_QPT_UC)
			;	/* unacknowledged: a lost peer just stops (shm_data.c) */
		else if (state == FERRY_QPS_INIT || state == FERRY_QPS_RTR)
			qp->hangup_pending = true;
		else
			shm_qp_set_error(qp, "peer hung up");
	}
	ferry_unlock(&qp->sq_lock);
}

/* Retry the RNR-waiting QPs whose timer expired, or all when kicked. */
static uint64_t shm_monitor_rnr_pass(bool kicked)
{
	struct shm_watch *w;
	uint64_t now = shm_now_ns(), next = UINT64_MAX;

	for (w = mon.watches; w; w = w->next) {
		struct shm_qp *qp = w->qp;

		if (!qp->in_rnr_list)
			continue;
		w->pins++;
		pthread_mutex_unlock(&mon.lock);
		ferry_lock(&qp->sq_lock);
		if (qp->rnr_pending && (kicked || now >= qp->rnr_deadline_ns))
			shm_sq_progress(qp);
		/* Decide under sq_lock (the order shm_monitor_rnr uses), so a
		 * sender that hits RNR again cannot be dropped from the list. */
		pthread_mutex_lock(&mon.lock);
		if (!qp->rnr_pending)
			qp->in_rnr_list = false;
		else if (qp->rnr_deadline_ns < next)
			next = qp->rnr_deadline_ns;
		ferry_unlock(&qp->sq_lock);
		if (--w->pins == 0)
			pthread_cond_broadcast(&mon.unpinned);
	}
	return next;
}

static void *shm_monitor_main(void *arg)
{
	struct epoll_event evs[16];
	uint64_t next = UINT64_MAX;
	int n, i, timeout;

	ferry_own_thread = true;
	for (;;) {
		bool kicked = false;

		if (next == UINT64_MAX) {
			timeout = -1;
		} else {
			uint64_t now = shm_now_ns();

			timeout = next <= now ? 0 : (int)((next - now + 999999) / 1000000);
		}
		n = epoll_wait(mon.epfd, evs, 16, timeout);
		pthread_mutex_lock(&mon.lock);
		for (i = 0; i < n; i++) {
			struct shm_watch *w;
			struct shm_qp *qp;

			if (!evs[i].data.u64) {
				/* Bounded: what is left keeps it readable. */
				for (int k = 0; k < 64 && shm_wake_drain(mon.kick_fd) > 0; k++)
					kicked = true;
				continue;
			}
			w = shm_watch_find_hup(evs[i].data.u64);
			qp = w ? w->qp : NULL;
			if (!qp || !qp->conn || !qp->conn->watched)
				continue;
			shm_watch_unwatch_locked(w);
			w->pins++;
			pthread_mutex_unlock(&mon.lock);
			shm_monitor_hangup(qp);
			pthread_mutex_lock(&mon.lock);
			if (--w->pins == 0)
				pthread_cond_broadcast(&mon.unpinned);
		}
		next = shm_monitor_rnr_pass(kicked);
		pthread_mutex_unlock(&mon.lock);
		/* A kick may be a peer whose window on our SRQ is empty. */
		if (kicked)
			shm_srq_monitor_pass();
	}
	return arg;
}

void shm_monitor_fork_child(void)
{
	pthread_mutex_lock(&mon.lock);
	if (mon.watches && mon.pid != ferry_pid())
		shm_monitor_start_locked();
	pthread_mutex_unlock(&mon.lock);
}
