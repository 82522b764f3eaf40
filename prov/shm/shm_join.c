/*
 * shm_join.c - QPs joined out of band, the ibverbs way: a QP moved to RTR
 * with dest_qp_num, rq_psn and an address vector (a LID, or a GID of
 * ours), with no ferry_qp_exchange before, finds its peer through the
 * rendezvous of shm_join.h, run by one thread per process.
 *
 * What hardware does, ferry does:
 *   - modify_qp to RTR succeeds at once, peer or no peer;
 *   - sends posted in RTS before the peer is found wait; when it is not
 *     found within the QP's timeout and retry_cnt (4.096 us << timeout,
 *     retry_cnt + 1 times; no less than SHM_JOIN_WAIT_MIN_NS, for the
 *     rendezvous is a handshake, not a packet; timeout 0, "infinite",
 *     waits SHM_JOIN_WAIT_DEFAULT_NS, never for ever; UC, which has no
 *     timeout, SHM_JOIN_WAIT_MIN_NS; and not while the peer, found,
 *     is in the middle of the handshake), an RC QP completes
 *     the first with FERRY_WC_RETRY_EXC_ERR and goes to ERR; a UC QP
 *     drops them, completing them successfully, as an unacknowledged
 *     sender knows no better, and keeps looking for its peer;
 *   - PSNs: an RC sender whose sq_psn is not the rq_psn its peer expects
 *     would have its packets NAKed or ignored as out of sequence and
 *     retried in vain: its first send completes with RETRY_EXC_ERR and
 *     the QP goes to ERR (the peer sees nothing).  UC receivers resync on
 *     the next message's first packet: UC ignores PSNs.
 *
 * Locking: sj.lock, then a QP's sq_lock (the thread holds sj.lock while it
 * works on a join, and the exchange steps take the sq_lock).  Nothing
 * takes sj.lock with a sq_lock held: modify_qp prepares a join under its
 * sq_lock and registers it after; sends arm their deadline under the
 * sq_lock alone and wake the thread by its eventfd.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "shm-internal.h"
#include "shm_join.h"

#define SHM_JOIN_WAIT_MIN_NS	 2000000000ull	/* 2 s */
#define SHM_JOIN_WAIT_DEFAULT_NS 10000000000ull	/* timeout 0: 10 s */
#define SHM_JOIN_DIAL_FIRST_NS	    1000000ull	/* 1 ms, doubled ... */
#define SHM_JOIN_DIAL_MAX_NS	  200000000ull	/* ... up to 200 ms */
#define SHM_JOIN_STEP_NS	 (SHM_EXCHANGE_TIMEOUT_MS * 1000000ull)	/* a stalled peer */
#define SHM_JOIN_INCOMING_MAX	32	/* accepted, JOIN not yet read */

enum shm_join_state {
	SHM_J_WAIT,		/* listener: for the peer's JOIN */
	SHM_J_DIAL,		/* dialler: dial at step_ns */
	SHM_J_ASKED,		/* dialler: JOIN sent, for ACCEPT until step_ns */
	SHM_J_EXCHANGE,		/* the QP exchange on sock, until step_ns */
	SHM_J_DONE,		/* joined */
	SHM_J_OVER,		/* given up (RC: retry exceeded) */
};

struct shm_join {
	struct shm_qp *qp;
	struct shm_join *next;		/* in sj.joins */
	/* Fixed at prepare. */
	uint32_t qpn, peer_qpn;
	uint16_t lid, peer_lid;		/* peer_lid 0: unreachable */
	uint32_t rq_psn;
	enum ferry_qp_type type;
	bool dialer;
	/* The thread's (sj.lock). */
	enum shm_join_state state;
	int sock;			/* -1 */
	uint64_t step_ns;		/* next dial, or deadline of ASKED, EXCHANGE */
	uint64_t backoff_ns;
	/* The QP's (sq_lock). */
	uint32_t peer_rq_psn;
	uint64_t send_deadline_ns;	/* 0: no send waits for the peer */
	bool given_up;			/* UC: sends are dropped until joined */
};

/* An accepted connection whose JOIN is not in yet. */
struct shm_join_in {
	int sock;
	uint64_t deadline_ns;
	struct shm_join_in *next;
};

static struct {
	pthread_mutex_t lock;
	pid_t pid;			/* whose thread runs; 0: none */
	int wake_fd;			/* eventfd: look again */
	int listen_fd;			/* the LID's socket (shm_port.c's) */
	uint16_t lid;
	struct shm_join *joins;
	struct shm_join_in *incoming;
	unsigned int nincoming;
} sj = { .lock = PTHREAD_MUTEX_INITIALIZER, .wake_fd = -1, .listen_fd = -1 };
FERRY_FORK_SAFE(shm_join, sj.lock)

static void shm_join_kick(void)
{
	uint64_t one = 1;

	if (sj.wake_fd >= 0 && write(sj.wake_fd, &one, sizeof(one)) < 0)
		ferry_debug("shm join: kick: %m");
}

/* --- what a QP's send queue sees (sq_lock held) --- */

static uint64_t shm_join_wait_ns(const struct shm_qp *qp)
{
	uint64_t ns;

	if (qp->qp.qp_type == FERRY_QPT_UC)
		return SHM_JOIN_WAIT_MIN_NS;	/* no timeout to honour: the handshake's */
	if (qp->timeout == 0)
		return SHM_JOIN_WAIT_DEFAULT_NS;
	ns = (4096ull << qp->timeout) * (qp->retry_cnt + 1u);
	return ns < SHM_JOIN_WAIT_MIN_NS ? SHM_JOIN_WAIT_MIN_NS : ns;
}

/* RC without a peer: the head WR's retries are exhausted. */
static void shm_join_fail_head(struct shm_qp *qp, const char *why)
{
	if (qp->sq_exec < qp->sq_head) {
		shm_sq_complete(qp, qp->sq_exec, shm_sq_slot(qp, qp->sq_exec),
				FERRY_WC_RETRY_EXC_ERR, 0);
		qp->sq_exec++;
	}
	shm_qp_set_error(qp, why);
}

/* UC without a peer: what is posted goes nowhere, and says so to nobody. */
static void shm_join_drop_sq(struct shm_qp *qp)
{
	for (; qp->sq_exec < qp->sq_head; qp->sq_exec++) {
		const struct shm_swqe *s = shm_sq_slot(qp, qp->sq_exec);

		if (qp->sq_sig_all || (s->flags & FERRY_SEND_SIGNALED))
			shm_sq_complete(qp, qp->sq_exec, s, FERRY_WC_SUCCESS, 0);
	}
}

bool shm_join_sq_hold(struct shm_qp *qp)
{
	struct shm_join *j = qp->join;

	if (!j) {
		qp->join_wait = false;
		return false;
	}
	if (qp->conn) {
		if (qp->sq_exec == qp->sq_head)
			return true;	/* the PSN is checked with the first send */
		if (j->type == FERRY_QPT_RC && qp->sq_psn != j->peer_rq_psn) {
			ferry_info("QP %u: sq_psn %#x, but QP %u expects %#x: retry exceeded",
				   qp->qp.qp_num, qp->sq_psn, j->peer_qpn, j->peer_rq_psn);
			shm_join_fail_head(qp, "PSN out of sequence");
			return true;
		}
		qp->join_wait = false;
		return false;
	}
	if (qp->sq_exec == qp->sq_head)
		return true;
	if (j->given_up) {
		shm_join_drop_sq(qp);
		return true;
	}
	if (!j->send_deadline_ns) {
		j->send_deadline_ns = shm_now_ns() + shm_join_wait_ns(qp);
		shm_join_kick();
	}
	return true;
}

/* A send waits past its deadline: give up (RC) or drop (UC).  Returns
 * the deadline still ahead, 0 for none.  sj.lock held. */
static uint64_t shm_join_check_sends(struct shm_join *j, uint64_t now)
{
	struct shm_qp *qp = j->qp;
	uint64_t next = 0;

	/* Found: the peer answered, it is the handshake that takes time (a
	 * loaded host, valgrind); its own deadline (step_ns) bounds it. */
	if (j->state == SHM_J_ASKED || j->state == SHM_J_EXCHANGE)
		return 0;
	ferry_lock(&qp->sq_lock);
	if (!qp->conn && j->send_deadline_ns && now >= j->send_deadline_ns) {
		j->send_deadline_ns = 0;
		if (j->type == FERRY_QPT_RC) {
			ferry_info("QP %u: no QP %u at LID %u: retry exceeded", j->qpn,
				   j->peer_qpn, j->peer_lid);
			shm_join_fail_head(qp, "retry exceeded: no peer");
			j->state = SHM_J_OVER;
		} else {
			j->given_up = true;
			shm_join_drop_sq(qp);
		}
	} else if (!qp->conn) {
		next = j->send_deadline_ns;
	}
	ferry_unlock(&qp->sq_lock);
	return next;
}

/* --- the rendezvous (sj.lock held) --- */

static void shm_join_close_sock(struct shm_join *j)
{
	if (j->sock >= 0)
		ferry_fd_close(j->sock);
	j->sock = -1;
}

/* Back to the start: the dialler dials again after a pause, the
 * listener waits for the next JOIN. */
static void shm_join_restart(struct shm_join *j, uint64_t now)
{
	shm_join_close_sock(j);
	if (j->state == SHM_J_OVER || j->state == SHM_J_DONE)
		return;
	if (!j->dialer) {
		j->state = SHM_J_WAIT;
		return;
	}
	j->backoff_ns = j->backoff_ns ? 2 * j->backoff_ns : SHM_JOIN_DIAL_FIRST_NS;
	if (j->backoff_ns > SHM_JOIN_DIAL_MAX_NS)
		j->backoff_ns = SHM_JOIN_DIAL_MAX_NS;
	j->state = SHM_J_DIAL;
	j->step_ns = now + j->backoff_ns;
}

static void shm_join_msg_fill(const struct shm_join *j, struct shm_join_msg *m, uint16_t type)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->qp_type = (uint32_t)j->type;
	m->src_lid = j->lid;
	m->dst_lid = j->peer_lid;
	m->src_qpn = j->qpn;
	m->dst_qpn = j->peer_qpn;
	m->rq_psn = j->rq_psn;
}

static void shm_join_dial(struct shm_join *j, uint64_t now)
{
	struct shm_join_msg m;

	if (!j->peer_lid) {		/* unreachable: wait for the deadline */
		j->step_ns = UINT64_MAX;
		return;
	}
	j->sock = shm_join_msg_dial(j->peer_lid);
	if (j->sock < 0) {
		shm_join_restart(j, now);
		return;
	}
	shm_join_msg_fill(j, &m, SHM_JOIN_REQ);
	if (shm_join_msg_send(j->sock, &m) < 0) {
		shm_join_restart(j, now);
		return;
	}
	j->state = SHM_J_ASKED;
	j->step_ns = now + SHM_JOIN_STEP_NS;
}

/* The QP exchange on j->sock: the join's socket is the connection's now. */
static void shm_join_exchange(struct shm_join *j, uint32_t peer_rq_psn, uint64_t now)
{
	ferry_lock(&j->qp->sq_lock);
	j->peer_rq_psn = peer_rq_psn;
	ferry_unlock(&j->qp->sq_lock);
	if (shm_qp_exchange_begin(&j->qp->qp, j->sock) < 0) {
		ferry_info("QP %u: join: beginning the exchange: %m", j->qpn);
		shm_join_restart(j, now);
		return;
	}
	j->state = SHM_J_EXCHANGE;
	j->step_ns = now + SHM_JOIN_STEP_NS;
}

/* The dialler's answer came. */
static void shm_join_on_answer(struct shm_join *j, uint64_t now)
{
	struct shm_join_msg m;

	if (shm_join_msg_recv(j->sock, &m) < 0) {
		if (errno != EAGAIN)
			shm_join_restart(j, now);
		return;
	}
	if (m.type != SHM_JOIN_ACCEPT || m.src_lid != j->peer_lid ||
	    m.src_qpn != j->peer_qpn || m.dst_qpn != j->qpn || m.qp_type != (uint32_t)j->type) {
		shm_join_restart(j, now);	/* REFUSE (not there yet), or nonsense */
		return;
	}
	shm_join_exchange(j, m.rq_psn, now);
}

/*
 * The peer may have finished its half first and delivered already, and
 * woken our application, whose poll found no connection yet, and which
 * sleeps again on its armed CQ: fire it, so that it polls once more (a
 * CQ event with nothing in it is one a verbs program is ready for).
 * sq_lock held.
 */
static void shm_join_wake_recv(struct shm_qp *qp)
{
	struct shm_cq *rcq = to_scq(qp->qp.recv_cq);

	ferry_lock(&rcq->lock);
	shm_cq_signal_local(rcq, true);
	ferry_unlock(&rcq->lock);
}

/* The exchange moved on: joined, failed, or more to come. */
static void shm_join_on_exchange(struct shm_join *j, uint64_t now)
{
	struct shm_qp *qp = j->qp;
	uint32_t peer_qpn = 0;

	if (shm_qp_exchange_step(&qp->qp, &peer_qpn) < 0) {
		if (errno != EAGAIN)
			shm_join_restart(j, now);
		return;
	}
	shm_join_close_sock(j);		/* the connection holds it */
	ferry_lock(&qp->sq_lock);
	if (peer_qpn != j->peer_qpn) {
		/* The rendezvous said otherwise: a peer that lies. */
		j->state = SHM_J_OVER;
		shm_qp_set_error(qp, "joined a QP it did not ask for");
	} else {
		j->state = SHM_J_DONE;
		j->send_deadline_ns = 0;
		ferry_debug("QP %u: joined QP %u at LID %u", j->qpn, j->peer_qpn, j->peer_lid);
		shm_join_wake_recv(qp);
		if (qp->qp.state == FERRY_QPS_RTS)
			shm_sq_progress(qp);	/* what waited runs (or the PSN fails) */
	}
	ferry_unlock(&qp->sq_lock);
}

/* The listener's QP that @m asks for, or NULL. */
static struct shm_join *shm_join_find_asked(const struct shm_join_msg *m)
{
	struct shm_join *j;

	for (j = sj.joins; j; j = j->next) {
		if (!j->dialer && j->state == SHM_J_WAIT && j->qpn == m->dst_qpn &&
		    j->lid == m->dst_lid && j->peer_lid == m->src_lid &&
		    j->peer_qpn == m->src_qpn && (uint32_t)j->type == m->qp_type)
			return j;
	}
	return NULL;
}

static void shm_join_refuse(int sock, const struct shm_join_msg *req, uint32_t reason)
{
	struct shm_join_msg m = { .type = SHM_JOIN_REFUSE, .qp_type = req->qp_type,
				  .src_lid = req->dst_lid, .dst_lid = req->src_lid,
				  .src_qpn = req->dst_qpn, .dst_qpn = req->src_qpn,
				  .reason = reason };

	(void)shm_join_msg_send(sock, &m);
}

/*
 * A JOIN came on @sock: take it (returns true: the socket is the join's
 * now) or refuse it (false: the caller closes it).
 */
static bool shm_join_on_request(int sock, uint64_t now)
{
	struct shm_join_msg m, ok;
	struct shm_join *j;

	if (shm_join_msg_recv(sock, &m) < 0 || m.type != SHM_JOIN_REQ)
		return false;
	if (m.dst_lid != sj.lid || !shm_join_msg_peer_holds(sock, m.src_lid)) {
		shm_join_refuse(sock, &m, EPERM);
		return false;
	}
	j = shm_join_find_asked(&m);
	if (!j) {
		shm_join_refuse(sock, &m, ENOENT);
		return false;
	}
	shm_join_msg_fill(j, &ok, SHM_JOIN_ACCEPT);
	if (shm_join_msg_send(sock, &ok) < 0)
		return false;
	j->sock = sock;
	shm_join_exchange(j, m.rq_psn, now);
	return true;
}

/* A new connection on the LID's socket. */
static void shm_join_accept(uint64_t now)
{
	struct shm_join_in *in;
	int i, sock;

	for (i = 0; i < SHM_JOIN_INCOMING_MAX; i++) {
		sock = accept4(sj.listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (sock < 0)
			return;
		sock = ferry_fd_park(sock);
		if (sj.nincoming >= SHM_JOIN_INCOMING_MAX || !(in = malloc(sizeof(*in)))) {
			close(sock);	/* a flood: an honest dialler dials again */
			continue;
		}
		in->sock = sock;
		in->deadline_ns = now + SHM_JOIN_STEP_NS;
		in->next = sj.incoming;
		sj.incoming = in;
		sj.nincoming++;
	}
}

static void shm_join_in_drop(struct shm_join_in **pp, bool close_sock)
{
	struct shm_join_in *in = *pp;

	*pp = in->next;
	if (close_sock)
		close(in->sock);
	free(in);
	sj.nincoming--;
}

/* --- the thread --- */

/* What to poll: the kick, the listener, then each socket. */
struct shm_join_poll {
	struct pollfd *fds;
	size_t n, cap;
};

static int shm_join_poll_add(struct shm_join_poll *p, int fd)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 16;
		struct pollfd *fds = realloc(p->fds, cap * sizeof(*fds));

		if (!fds)
			return -1;
		p->fds = fds;
		p->cap = cap;
	}
	p->fds[p->n++] = (struct pollfd){ .fd = fd, .events = POLLIN };
	return 0;
}

static bool shm_join_polled_in(const struct shm_join_poll *p, int fd)
{
	size_t i;

	for (i = 0; i < p->n; i++)
		if (p->fds[i].fd == fd)
			return p->fds[i].revents != 0;
	return false;
}

static uint64_t shm_join_min(uint64_t a, uint64_t b)
{
	return (b && b < a) ? b : a;
}

/* Build the poll set; the time of the next timer.  sj.lock held. */
static uint64_t shm_join_poll_build(struct shm_join_poll *p, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	struct shm_join_in *in;
	struct shm_join *j;

	p->n = 0;
	shm_join_poll_add(p, sj.wake_fd);
	shm_join_poll_add(p, sj.listen_fd);
	for (in = sj.incoming; in; in = in->next) {
		shm_join_poll_add(p, in->sock);
		next = shm_join_min(next, in->deadline_ns);
	}
	for (j = sj.joins; j; j = j->next) {
		if (j->sock >= 0)
			shm_join_poll_add(p, j->sock);
		if (j->state == SHM_J_DIAL || j->state == SHM_J_ASKED ||
		    j->state == SHM_J_EXCHANGE)
			next = shm_join_min(next, j->step_ns);
		if (j->state != SHM_J_DONE && j->state != SHM_J_OVER)
			next = shm_join_min(next, shm_join_check_sends(j, now));
	}
	return next;
}

/* Everything the poll found, and every timer due.  sj.lock held. */
static void shm_join_run(const struct shm_join_poll *p, uint64_t now)
{
	struct shm_join_in **ip = &sj.incoming;
	struct shm_join *j;
	uint64_t v;

	if (shm_join_polled_in(p, sj.wake_fd) && read(sj.wake_fd, &v, sizeof(v)) < 0)
		ferry_debug("shm join: reading the kick: %m");
	while (*ip) {
		struct shm_join_in *in = *ip;

		if (shm_join_polled_in(p, in->sock))
			shm_join_in_drop(ip, !shm_join_on_request(in->sock, now));
		else if (now >= in->deadline_ns)
			shm_join_in_drop(ip, true);
		else
			ip = &in->next;
	}
	if (shm_join_polled_in(p, sj.listen_fd))
		shm_join_accept(now);
	for (j = sj.joins; j; j = j->next) {
		if (j->state == SHM_J_ASKED && j->sock >= 0 && shm_join_polled_in(p, j->sock))
			shm_join_on_answer(j, now);
		else if (j->state == SHM_J_EXCHANGE && shm_join_polled_in(p, j->sock))
			shm_join_on_exchange(j, now);
		if ((j->state == SHM_J_ASKED || j->state == SHM_J_EXCHANGE) && now >= j->step_ns) {
			if (j->state == SHM_J_EXCHANGE)
				shm_qp_exchange_abort(&j->qp->qp);
			shm_join_restart(j, now);
		}
		if (j->state == SHM_J_DIAL && now >= j->step_ns)
			shm_join_dial(j, now);
		if (j->state == SHM_J_OVER)
			shm_join_close_sock(j);
	}
}

/*
 * The thread's poll set lives here, not on its stack: a child of fork has
 * no such thread but keeps the memory (and may start a thread of its own,
 * which takes it over), and valgrind sees it reachable.
 */
static struct shm_join_poll shm_join_pollset;

static void *shm_join_main(void *arg)
{
	struct shm_join_poll *pp = &shm_join_pollset;
	uint64_t now, next;
	int timeout;

	(void)arg;
	for (;;) {
		pthread_mutex_lock(&sj.lock);
		now = shm_now_ns();
		next = shm_join_poll_build(pp, now);
		pthread_mutex_unlock(&sj.lock);
		timeout = next == UINT64_MAX ? -1 :
			  next <= now ? 0 : (int)((next - now + 999999) / 1000000);
		if (poll(pp->fds, pp->n, timeout) < 0 && errno != EINTR)
			ferry_warn("shm join: poll: %m");
		pthread_mutex_lock(&sj.lock);
		shm_join_run(pp, shm_now_ns());
		pthread_mutex_unlock(&sj.lock);
	}
	return NULL;
}

/* The thread of this process, started if need be; sj.lock held. */
static int shm_join_start_locked(void)
{
	pthread_attr_t attr;
	pthread_t tid;
	sigset_t all, old;
	int err;

	if (sj.pid == ferry_pid())
		return 0;
	/* A child of fork: the parent's thread is not here, nor are its
	 * joins (their sockets are the parent's); begin anew. */
	sj.joins = NULL;
	sj.incoming = NULL;
	sj.nincoming = 0;
	if (sj.wake_fd >= 0)
		close(sj.wake_fd);
	sj.wake_fd = ferry_fd_park(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	sj.listen_fd = shm_port_listener(&sj.lid);
	if (sj.wake_fd < 0 || sj.listen_fd < 0)
		goto err;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);	/* signals stay the app's */
	err = pthread_create(&tid, &attr, shm_join_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (err) {
		errno = err;
		goto err;
	}
	sj.pid = ferry_pid();
	return 0;
err:
	ferry_err("shm: starting the join thread: %m");
	return -1;
}

/* --- a QP's join --- */

int shm_join_prepare(struct shm_qp *qp, uint16_t peer_lid, uint32_t peer_qpn, uint32_t rq_psn)
{
	struct shm_join *j;
	uint32_t netns;

	j = calloc(1, sizeof(*j));
	if (!j)
		return -1;
	if (shm_port_self_lid(&j->lid, &netns) < 0) {
		free(j);
		return -1;
	}
	j->qp = qp;
	j->qpn = qp->qp.qp_num;
	j->peer_lid = peer_lid;
	j->peer_qpn = peer_qpn;
	j->rq_psn = rq_psn & 0xffffffu;
	j->type = qp->qp.qp_type;
	j->sock = -1;
	/* The lower (LID, QPN) dials: one connection, whoever comes first. */
	j->dialer = j->lid != peer_lid ? j->lid < peer_lid : j->qpn < peer_qpn;
	j->state = j->dialer ? SHM_J_DIAL : SHM_J_WAIT;
	if (j->lid == peer_lid && j->qpn == peer_qpn)
		j->peer_lid = 0;	/* itself: nobody to join */
	qp->join = j;
	qp->join_wait = true;
	return 0;
}

void shm_join_register(struct shm_qp *qp)
{
	struct shm_join *j;

	ferry_lock(&qp->sq_lock);
	j = qp->join;
	ferry_unlock(&qp->sq_lock);
	if (!j)
		return;
	pthread_mutex_lock(&sj.lock);
	if (shm_join_start_locked() < 0) {
		j->state = SHM_J_OVER;	/* sends will find no peer */
		j->peer_lid = 0;
	}
	j->step_ns = shm_now_ns();
	j->next = sj.joins;
	sj.joins = j;
	shm_join_kick();
	pthread_mutex_unlock(&sj.lock);
}

void shm_join_forget(struct shm_qp *qp)
{
	struct shm_join **pp, *j;

	ferry_lock(&qp->sq_lock);
	j = qp->join;
	ferry_unlock(&qp->sq_lock);
	if (!j)
		return;
	pthread_mutex_lock(&sj.lock);
	for (pp = &sj.joins; *pp; pp = &(*pp)->next) {
		if (*pp == j) {
			*pp = j->next;
			break;
		}
	}
	if (sj.pid == ferry_pid())	/* in a child of fork, the parent's */
		shm_join_close_sock(j);
	pthread_mutex_unlock(&sj.lock);
	ferry_lock(&qp->sq_lock);
	qp->join = NULL;
	qp->join_wait = false;
	ferry_unlock(&qp->sq_lock);
	free(j);
}
