/*
 * sock_conn.c - setting a connection up through the CM: the private data
 * of rsocket's connect request and accept reply, the QP, CQ and rings, and
 * the event-driven state machine of connect and listen.
 *
 * Connect and accept run on CM event channels so that non-blocking sockets
 * need no thread: each step is taken when the socket is polled, waited on
 * or asked for SO_ERROR.  A listener's channel also carries the events of
 * the ids it accepted (the CM has no migrate_id), so it is refcounted.
 *
 * A listener whose accept finds nothing makes the buffers of its next
 * socket while it waits (a spare: PD, CQ, rings and MRs, fresh and shared
 * with nobody yet), so that a request is answered without them on the
 * client's time; only the QP waits for the request's id.  Likewise a
 * connect, once its request is out, makes buffers for the process's next
 * connect while the listener works on the answer.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <dirent.h>
#include <endian.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sock-internal.h"

/* --- CM channels --- */

struct sock_chan *sock_chan_new(void)
{
	struct sock_chan *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->ch = ferry_create_event_channel();
	if (!c->ch) {
		free(c);
		return NULL;
	}
	/* Blocking is fine: events are taken with ferry_cm_event_poll, which
	 * never waits, and the fd is only polled for readiness. */
	atomic_init(&c->refs, 1);
	return c;
}

void sock_chan_put(struct sock_chan *c)
{
	struct ferry_cm_event *ev;

	if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	while (ferry_cm_event_poll(c->ch, &ev) == 0)
		ferry_ack_cm_event(ev);
	if (ferry_destroy_event_channel(c->ch) < 0)
		ferry_warn("sock: destroying a CM channel: %m");
	free(c);
}

/*
 * The sink: a channel no one reads, for the ids of connected clients.  Once
 * ESTABLISHED a client's CM events are of no more use to its socket -- the
 * peer's orderly end comes in band (DISCONNECT), and a connection the CM
 * sees die takes the QP to ERR, which the socket sees -- so its id moves
 * here (ferry_migrate_id) and its own channel goes: one descriptor less per
 * connection.  Events of an id queued here go when it is destroyed.  One
 * per process, kept for good: a child of fork() makes its own, since the
 * parent's eventfd counts the parent's queue.
 */
static struct sock_chan *sock_sink;
static pid_t sock_sink_pid;
static pthread_mutex_t sock_sink_lock = PTHREAD_MUTEX_INITIALIZER;

static void sock_sink_atfork_child(void)
{
	pthread_mutex_init(&sock_sink_lock, NULL);
}

static void sock_sink_init(void)
{
	pthread_atfork(NULL, NULL, sock_sink_atfork_child);
}

/* A reference to this process's sink, made on first use; NULL if none. */
static struct sock_chan *sock_sink_get(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct sock_chan *c;

	pthread_once(&once, sock_sink_init);
	pthread_mutex_lock(&sock_sink_lock);
	if (sock_sink_pid != sock_pid()) {
		sock_sink = sock_chan_new();	/* its reference is the process's */
		sock_sink_pid = sock_sink ? sock_pid() : 0;
	}
	c = sock_sink;
	if (c)
		atomic_fetch_add(&c->refs, 1);
	pthread_mutex_unlock(&sock_sink_lock);
	return c;
}

/* After the events of its own channel were taken: park a connected id. */
static void sock_conn_park(struct ferry_sock *s)
{
	struct sock_chan *sink;

	s->chan_park = false;
	if (s->state != SOCK_CONNECTED || !s->id || !s->chan_in_epoll)
		return;
	sink = sock_sink_get();
	if (!sink)
		return;
	if (ferry_migrate_id(s->id, sink->ch) < 0) {
		sock_chan_put(sink);
		return;
	}
	sock_epoll_del(s, s->chan->ch->fd);
	sock_chan_put(s->chan);
	s->chan = sink;
	s->chan_in_epoll = false;
}

/* --- resources --- */

static uint32_t pow2_at_least(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

static bool sock_ctx_is(const struct ferry_context *ctx, const char *transport)
{
	const char *tp = ctx ? ferry_get_device_transport(ctx->device) : NULL;

	return tp && strcmp(tp, transport) == 0;
}

/*
 * Will a socket connected on @ctx become its completion channel (accepted)?
 * Only shm's channels can be renumbered or become the connection; tcp's
 * and verbs' stay where the provider made them.
 */
static bool sock_ctx_merges(const struct ferry_context *ctx)
{
	return sock_ctx_is(ctx, "shm");
}

/*
 * PD, completion channel, CQ, rings and their MRs on @ctx: everything but
 * the QP, which needs the CM id.  A listener's spare (see
 * sock_conn_spare_prepare) has them already.
 */
static int sock_conn_buffers(struct ferry_sock *s, struct ferry_context *ctx)
{
	size_t rlen;

	if (s->pd)
		return 0;
	s->ctx = ctx;
	s->verbs_transport = sock_ctx_is(ctx, "verbs");
	s->shm_transport = sock_ctx_is(ctx, "shm");
	s->direct = s->shm_transport;
	/*
	 * A PD of its own: on shm, a PD's remote-access memory is announced to
	 * every peer connected through that PD, so one PD shared by all
	 * sockets made every new ring travel to every existing connection.
	 * Its MRs with remote access: the ring, and the iomaps the peer may
	 * write into (on shm its table of them then shares a page with other
	 * sockets', where a full-size table took a page of its own).
	 */
	s->pd = ferry_alloc_pd_small(s->ctx, 1 + s->target_iomap_size);
	if (!s->pd)
		return -1;
	/* One CQ: on shm the channel is its eventfd, no epoll set between. */
	s->cch = ferry_create_comp_channel_single(s->ctx);
	if (!s->cch)
		return -1;
	/* A fresh descriptor has no other status flag to keep. */
	fcntl(s->cch->fd, F_SETFL, O_NONBLOCK);
	if (sock_epoll_add(s, s->cch->fd) < 0)
		return -1;
	s->cq = ferry_create_cq(s->ctx, (int)(s->sq_size + sock_recv_depth(s)), s, s->cch, 0);
	if (!s->cq)
		return -1;

	s->rbuf_size = pow2_at_least(s->rbuf_size);
	s->sbuf_size = pow2_at_least(s->sbuf_size);
	/* Ring, target SGL and target iomap in one block; untouched pages
	 * stay unallocated. */
	rlen = s->rbuf_size + sock_iomap_tail_size(s->target_iomap_size);
	s->rbuf = ferry_alloc(rlen);
	if (!s->rbuf)
		return -1;
	s->target_sgl = (struct rs_sge *)(s->rbuf + s->rbuf_size);
	s->target_iomap = (struct rs_iomap *)(s->target_sgl + RS_SGL_SIZE);
	if (s->target_iomap_size) {
		s->peer_iomap = calloc(s->target_iomap_size, sizeof(*s->peer_iomap));
		if (!s->peer_iomap)
			return -1;
	}
	s->rmr = ferry_reg_mr(s->pd, s->rbuf, rlen,
			      FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE);
	if (!s->rmr)
		return -1;
	/* The send ring, then the receive slots of iWARP mode (sock_msg.c),
	 * left untouched where they are not used. */
	s->sbuf = mmap(NULL, sock_sbuf_map_size(s), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->sbuf == MAP_FAILED) {
		s->sbuf = NULL;
		return -1;
	}
	sock_msg_buffers(s);
	s->smr = ferry_reg_mr(s->pd, s->sbuf, sock_sbuf_map_size(s), FERRY_ACCESS_LOCAL_WRITE);
	if (!s->smr)
		return -1;
	return 0;
}

static bool sock_conn_spare_fits(const struct ferry_sock *l, const struct ferry_sock *sp,
				 const struct ferry_context *ctx);

/*
 * The process's spare buffers for its next connect, made while a connect
 * waits for its answer (sock_conn_connect_spare_make).  Fresh, shared with
 * nobody.  Made by sock_spare_pid: a child of fork() shares their memfds
 * with its parent and must leave them alone.
 */
static _Atomic(struct ferry_sock *) sock_spare;
static _Atomic pid_t sock_spare_pid;

/*
 * Let go of spare @sp, made by process @owner.  The parent's spare in a
 * child of fork() shares its memfds and epoll sets with the parent: only
 * this process's copies go (as sock_forget does), nothing the parent
 * relies on is changed -- no MR slot cleared, no epoll entry removed.
 */
static void sock_spare_release(struct ferry_sock *sp, pid_t owner)
{
	if (owner != sock_pid()) {
		sp->detached = true;
		if (sp->pd)
			ferry_pd_detach(sp->pd);
		if (sp->cq)
			ferry_cq_detach(sp->cq);
	}
	sock_free(sp);
}

static void sock_conn_connect_spare_make(const struct ferry_sock *s)
{
	struct ferry_sock *sp, *none = NULL;

	if (atomic_load(&sock_spare))
		return;
	sp = sock_new(s->domain, false, true, true);	/* a shell: its fd is never used */
	if (!sp)
		return;
	sock_stat_detach(sp);	/* a spare is no socket of the application's */
	sp->sbuf_size = s->sbuf_size;
	sp->rbuf_size = s->rbuf_size;
	sp->sq_size = s->sq_size;
	sp->rq_size = s->rq_size;
	sp->target_iomap_size = s->target_iomap_size;
	if (sock_conn_buffers(sp, s->ctx) < 0) {
		sock_free(sp);
		return;
	}
	atomic_store(&sock_spare_pid, sock_pid());
	if (!atomic_compare_exchange_strong(&sock_spare, &none, sp))
		sock_free(sp);	/* another thread's came first */
}

/* Move the process's spare buffers into @s if they fit its device and sizes. */
static void sock_conn_connect_spare_take(struct ferry_sock *s, struct ferry_context *ctx)
{
	struct ferry_sock *sp = atomic_exchange(&sock_spare, NULL);

	if (!sp)
		return;
	if (atomic_load(&sock_spare_pid) != sock_pid()) {
		sock_spare_release(sp, atomic_load(&sock_spare_pid));	/* the parent's */
		return;
	}
	if (!sock_conn_spare_fits(s, sp, ctx) || sock_epoll_add(s, sp->cch->fd) < 0) {
		sock_free(sp);
		return;
	}
	s->ctx = sp->ctx;
	s->verbs_transport = sp->verbs_transport;
	s->shm_transport = sp->shm_transport;
	s->direct = sp->direct;
	s->recv_slots = sp->recv_slots;
	s->msg_slot = sp->msg_slot;
	s->sbuf_size = sp->sbuf_size;
	s->rbuf_size = sp->rbuf_size;
	s->pd = sp->pd;
	s->cch = sp->cch;
	s->cq = sp->cq;
	s->cq->cq_context = s;
	s->rbuf = sp->rbuf;
	s->target_sgl = sp->target_sgl;
	s->target_iomap = sp->target_iomap;
	s->peer_iomap = sp->peer_iomap;
	s->rmr = sp->rmr;
	s->sbuf = sp->sbuf;
	s->smr = sp->smr;
	sp->pd = NULL;
	sp->cch = NULL;
	sp->cq = NULL;
	sp->rbuf = sp->sbuf = NULL;
	sp->peer_iomap = NULL;
	sp->rmr = sp->smr = NULL;
	sock_free(sp);	/* the empty shell */
}

/* Buffers (unless a spare brought them) and the QP, for the id's device. */
static int sock_conn_resources(struct ferry_sock *s)
{
	struct ferry_qp_init_attr attr = { 0 };

	if (!s->pd && s->state == SOCK_CONNECTING)
		sock_conn_connect_spare_take(s, s->id->verbs);
	if (sock_conn_buffers(s, s->id->verbs) < 0)
		return -1;
	attr.send_cq = s->cq;
	attr.recv_cq = s->cq;
	attr.qp_type = FERRY_QPT_RC;
	attr.cap.max_send_wr = s->sq_size;
	attr.cap.max_recv_wr = sock_recv_depth(s);
	attr.cap.max_send_sge = 2;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = s->inline_size;
	if (s->recv_slots && attr.cap.max_inline_data < sizeof(uint32_t))
		attr.cap.max_inline_data = sizeof(uint32_t);	/* iWARP mode's SEND */
	if (ferry_cm_create_qp(s->id, s->pd, &attr) < 0)
		return -1;
	s->qp = s->id->qp;
	if (attr.cap.max_inline_data < s->inline_size)
		s->inline_size = attr.cap.max_inline_data;
	if (sock_msg_qp_check(s, attr.cap.max_inline_data) < 0)
		return -1;

	atomic_store(&s->sqe_avail, (int)s->sq_size);
	atomic_store(&s->sbuf_free, s->sbuf_size);
	s->sbuf_head = 0;
	atomic_store(&s->r_received, 0);
	atomic_store(&s->r_consumed, 0);
	atomic_store(&s->rseq_no, 0);
	s->r_published = s->rbuf_size / 2;
	sock_backlog_setup(s);
	return sock_post_initial_recvs(s);	/* and the first credits */
}

void sock_conn_teardown(struct ferry_sock *s)
{
	struct ferry_sock *p;

	/* A spare made by the parent before fork() is released here without
	 * touching what the parent shares (its MR table, its epoll sets). */
	if (s->spare)
		sock_spare_release(s->spare, s->spare_pid);
	s->spare = NULL;
	/* A listener's accepted sockets nobody took. */
	while ((p = s->pending) || (p = s->ready)) {
		if (p == s->pending)
			s->pending = p->next;
		else
			s->ready = p->next;
		sock_free(p);
	}
	/*
	 * The ring before its QP and its MR: when a PD's last QP goes, or a
	 * region is deregistered, the memory its peers mapped is taken back
	 * from them by moving its pages (a copy, ferry_block_renew), which
	 * memory freed first never needs.  (Over verbs the registration holds
	 * its pages until the dereg that follows.)  Not over tcp: its progress
	 * thread copies a peer's WRITE into the ring's virtual addresses for
	 * as long as the MR is registered, so the ring goes after the MR.
	 */
	if (s->rbuf && s->shm_transport) {
		ferry_free(s->rbuf);
		s->rbuf = NULL;
	}
	/* The id first: once the CM has let go of it, its QP goes without
	 * another trip to the CM thread. */
	if (s->id) {
		ferry_destroy_id(s->id);	/* and s->qp */
		s->id = NULL;
	}
	s->qp = NULL;
	if (s->cq) {
		ferry_destroy_cq(s->cq);
		s->cq = NULL;
	}
	if (s->cch) {
		sock_epoll_del(s, s->cch->fd);
		ferry_destroy_comp_channel(s->cch);
		s->cch = NULL;
	}
	sock_iomap_free_all(s);
	sock_backlog_free(s);
	if (s->smr)
		ferry_dereg_mr(s->smr);
	if (s->rmr)
		ferry_dereg_mr(s->rmr);
	s->smr = s->rmr = NULL;
	if (s->rbuf)
		ferry_free(s->rbuf);
	if (s->sbuf)
		munmap(s->sbuf, sock_sbuf_map_size(s));
	s->sbuf = s->rbuf = NULL;
	if (s->pd && ferry_dealloc_pd(s->pd) < 0)
		ferry_warn("socket %d: releasing its PD: %m", s->fd);
	s->pd = NULL;
	if (s->chan) {
		if (s->chan_in_epoll)
			sock_epoll_del(s, s->chan->ch->fd);
		sock_chan_put(s->chan);
		s->chan = NULL;
	}
}

/*
 * The connection is up: both QPs' exchanges are over, and with them the
 * announcement of the ring's block to the peer, the one peer this PD will
 * ever have.  Its memfd is needed no more: one descriptor less per
 * connection (the mapping stays, here and in the peer).
 */
static void sock_conn_established(struct ferry_sock *s)
{
	sock_msg_setup(s);
	if (s->rbuf && ferry_block_drop_fd(s->rbuf) < 0)
		ferry_debug("sock %d: keeping the ring's descriptor: %m", s->fd);
	atomic_store(&s->last_rx_ns, monotime_ns());
	__atomic_store_n(&s->state, SOCK_CONNECTED, __ATOMIC_RELEASE);
	sock_stat_update(s);
}

static void sock_conn_param(struct ferry_conn_param *param, const uint8_t *pd)
{
	memset(param, 0, sizeof(*param));
	param->private_data = pd;
	param->private_data_len = RS_PRIVATE_DATA_LEN;
	param->responder_resources = 1;
	param->initiator_depth = 1;
	param->retry_count = 7;
	param->rnr_retry_count = 7;
}

/* --- active side --- */

static int sock_own_chan(struct ferry_sock *s)
{
	s->chan = sock_chan_new();
	if (!s->chan)
		return -1;
	if (sock_epoll_add(s, s->chan->ch->fd) < 0)
		return -1;
	s->chan_in_epoll = true;
	return 0;
}

int sock_conn_connect(struct ferry_sock *s, const struct sockaddr *addr, socklen_t len)
{
	struct sockaddr_storage dst;

	memset(&dst, 0, sizeof(dst));
	memcpy(&dst, addr, len < sizeof(dst) ? len : sizeof(dst));
	if (sock_own_chan(s) < 0 ||
	    ferry_create_id(s->chan->ch, &s->id, s, FERRY_PS_TCP) < 0)
		goto err;
	ferry_cm_quiet(s->id);	/* the peer's end comes in band, or as QP errors */
	ferry_cm_connect_timeout(s->id, s->connect_ms);
	if (ferry_resolve_addr(s->id, s->bound.sa.sa_family ? &s->bound.sa : NULL,
			       (struct sockaddr *)&dst, SOCK_CM_TIMEOUT_MS) < 0)
		goto err;
	s->state = SOCK_CONNECTING;
	return 0;
err:
	{
		int e = errno;

		sock_conn_teardown(s);
		return ERR(e);
	}
}

enum sock_stat_route sock_connect_probe(const struct sockaddr *addr)
{
	switch (ferry_cm_probe(addr)) {
	case FERRY_CM_PROBE_MAYBE:
		return SOCK_STAT_RT_FERRY;
	case FERRY_CM_PROBE_NO_LISTENER:
		return SOCK_STAT_RT_NO_LISTENER;
	case FERRY_CM_PROBE_NO_FERRY:
		return SOCK_STAT_RT_NO_FERRY;
	case FERRY_CM_PROBE_NOT_OWNER:
		return SOCK_STAT_RT_NOT_OWNER;
	case FERRY_CM_PROBE_UNKNOWN:
		return SOCK_STAT_RT_ERROR;
	case FERRY_CM_PROBE_REMOTE:
	case FERRY_CM_PROBE_UNREACHED:
		break;
	}
	return SOCK_STAT_RT_REMOTE;
}

enum sock_stat_route sock_connect_why(const struct sockaddr *addr, int err)
{
	enum sock_stat_route r;

	switch (err) {
	case EMFILE:
	case ENFILE:
	case ENOMEM:
	case ENOBUFS:
		return SOCK_STAT_RT_NO_FDS;
	case ETIMEDOUT:
		return SOCK_STAT_RT_TIMEOUT;
	case EHOSTUNREACH:
	case ENETUNREACH:
		return SOCK_STAT_RT_REMOTE;
	case ECONNREFUSED:
		/* What the refused connect learnt (no ferry listener, a
		 * squatter), or else the listener itself said no. */
		r = sock_connect_probe(addr);
		return r == SOCK_STAT_RT_FERRY ? SOCK_STAT_RT_REFUSED : r;
	}
	return SOCK_STAT_RT_ERROR;
}

static void sock_conn_fail(struct ferry_sock *s, int err)
{
	ferry_debug("sock %d: connect failed: %s", s->fd, strerror(err));
	s->so_error = err;
	__atomic_store_n(&s->state, SOCK_FAILED, __ATOMIC_RELEASE);
	sock_stat_update(s);
}

static int sock_event_errno(const struct ferry_cm_event *ev)
{
	switch (ev->event) {
	case FERRY_CM_EVENT_REJECTED:
		return ECONNREFUSED;
	case FERRY_CM_EVENT_ADDR_ERROR:
	case FERRY_CM_EVENT_ROUTE_ERROR:
		return ev->status > 0 ? ev->status : EHOSTUNREACH;
	case FERRY_CM_EVENT_UNREACHABLE:
		return ev->status > 0 && ev->status != ETIMEDOUT ? ev->status : ETIMEDOUT;
	default:
		return ev->status > 0 ? ev->status : ECONNREFUSED;
	}
}

/* One event of a connecting (or connected) socket's own channel. */
static void sock_conn_active_event(struct ferry_sock *s, struct ferry_cm_event *ev)
{
	uint8_t pd[RS_PRIVATE_DATA_LEN];
	struct ferry_conn_param param;

	if (s->state != SOCK_CONNECTING) {
		if (ev->event == FERRY_CM_EVENT_DISCONNECTED)
			atomic_fetch_or(&s->closed, SOCK_PEER_SHUT_WR);
		return;
	}
	switch (ev->event) {
	case FERRY_CM_EVENT_ADDR_RESOLVED:
		if (ferry_resolve_route(s->id, SOCK_CM_TIMEOUT_MS) < 0)
			sock_conn_fail(s, errno);
		break;
	case FERRY_CM_EVENT_ROUTE_RESOLVED:
		if (sock_conn_resources(s) < 0) {
			sock_conn_fail(s, errno);
			break;
		}
		sock_conn_data_build(s, pd);
		sock_conn_param(&param, pd);
		if (ferry_connect(s->id, &param) < 0) {
			sock_conn_fail(s, errno);
			break;
		}
		/* The answer takes a while: make the next connect's buffers. */
		sock_conn_connect_spare_make(s);
		break;
	case FERRY_CM_EVENT_ESTABLISHED:
		if (sock_conn_data_take(s, ev->param.conn.private_data,
					ev->param.conn.private_data_len) < 0) {
			sock_conn_fail(s, errno);
			ferry_disconnect(s->id);
			break;
		}
		sock_conn_established(s);
		sock_ka_update(s);
		s->chan_park = true;	/* once this loop has let go of the channel */
		break;
	default:
		sock_conn_fail(s, sock_event_errno(ev));
		break;
	}
}

/* --- passive side --- */

int sock_conn_listen(struct ferry_sock *s, int backlog, int tcp_fd, int rdv_fd)
{
	struct sockaddr_storage any;

	if (sock_own_chan(s) < 0 ||
	    ferry_create_id(s->chan->ch, &s->id, s, FERRY_PS_TCP) < 0 ||
	    (tcp_fd >= 0 && ferry_cm_hold_port(s->id, tcp_fd) < 0))
		goto err;
	/* From here the id owns @rdv_fd, and closes it when it goes. */
	if (rdv_fd >= 0 && ferry_cm_adopt_rendezvous(s->id, rdv_fd) < 0)
		goto err;
	rdv_fd = -1;
	ferry_cm_quiet(s->id);	/* and its connections' ids */
	if (!s->bound.sa.sa_family) {
		memset(&any, 0, sizeof(any));
		any.ss_family = (sa_family_t)s->domain;
	}
	if (ferry_bind_addr(s->id, s->bound.sa.sa_family ? &s->bound.sa :
			    (struct sockaddr *)&any) < 0 ||
	    ferry_listen(s->id, backlog > 0 ? backlog : 128) < 0)
		goto err;
	s->backlog = backlog;
	s->tcp_beside = tcp_fd >= 0;
	s->state = SOCK_LISTENING;
	return 0;
err:
	{
		int e = errno;

		if (rdv_fd >= 0)
			close(rdv_fd);
		sock_conn_teardown(s);
		return ERR(e);
	}
}

/* Options set on the listener are inherited, as with TCP. */
static void sock_conn_inherit(struct ferry_sock *s, const struct ferry_sock *l)
{
	s->sbuf_size = l->sbuf_size;
	s->sbuf_fixed = l->sbuf_fixed;
	s->rbuf_size = l->rbuf_size;
	s->sq_size = l->sq_size;
	s->rq_size = l->rq_size;
	s->inline_size = l->inline_size;
	s->target_iomap_size = l->target_iomap_size;
	s->keepalive = l->keepalive;
	s->keepidle = l->keepidle;
	s->keepintvl = l->keepintvl;
	s->keepcnt = l->keepcnt;
	s->nodelay = l->nodelay;
	s->linger_on = l->linger_on;
	s->linger_s = l->linger_s;
}

/* Were the spare's buffers made for a request on @ctx with these options? */
static bool sock_conn_spare_fits(const struct ferry_sock *l, const struct ferry_sock *sp,
				 const struct ferry_context *ctx)
{
	return sp->ctx == ctx && sp->sbuf_size == pow2_at_least(l->sbuf_size) &&
	       sp->rbuf_size == pow2_at_least(l->rbuf_size) && sp->sq_size == l->sq_size &&
	       sp->rq_size == l->rq_size && sp->target_iomap_size == l->target_iomap_size;
}

/* The socket for a request on @ctx: the listener's spare if it fits. */
static struct ferry_sock *sock_conn_new_accepted(struct ferry_sock *l,
						 struct ferry_context *ctx)
{
	struct ferry_sock *s = l->spare_pid == sock_pid() ? l->spare : NULL;

	if (l->spare && !s)
		sock_spare_release(l->spare, l->spare_pid);	/* the parent's */
	l->spare = NULL;	/* used or dropped */
	l->req_ctx = ctx;
	if (s && sock_conn_spare_fits(l, s, ctx)) {
		sock_stat_attach(s);	/* a socket from now on: ferry-stat lists it */
		sock_conn_inherit(s, l);
		s->sbuf_size = pow2_at_least(s->sbuf_size);	/* as its buffers */
		s->rbuf_size = pow2_at_least(s->rbuf_size);
		return s;
	}
	if (s)
		sock_free(s);	/* the options changed since */
	s = sock_new(l->domain, false, true, sock_ctx_merges(ctx));
	if (s)
		sock_conn_inherit(s, l);
	return s;
}

void sock_conn_spare_prepare(struct ferry_sock *l)
{
	struct ferry_sock *s;

	if (l->spare && l->spare_pid != sock_pid()) {
		sock_spare_release(l->spare, l->spare_pid);	/* the parent's */
		l->spare = NULL;
	}
	/* Not while an accepted connection completes its handshake: that
	 * wait is short, and the spare would come and go by its timing. */
	if (l->spare || !l->req_ctx || l->state != SOCK_LISTENING || l->pending)
		return;
	s = sock_new(l->domain, false, true, sock_ctx_merges(l->req_ctx));
	if (!s)
		return;
	sock_stat_detach(s);	/* not a socket of the application's yet */
	sock_conn_inherit(s, l);
	if (sock_conn_buffers(s, l->req_ctx) < 0) {
		ferry_debug("sock %d: no spare buffers: %m", l->fd);
		sock_free(s);
		return;
	}
	l->spare = s;
	l->spare_pid = sock_pid();
}

/*
 * Is this process short of descriptors?  A connection over ferry costs the
 * program one, as over TCP -- but from the moment ferry takes it, not from
 * the program's accept(): the kernel keeps a TCP backlog in no descriptor
 * of the program's, ferry's ready connections each hold one.  A server
 * near its limit that took every client over ferry would fail its own
 * open()s and accept()s where TCP leaves it room.  So a listener with TCP
 * beside it sends the client there unless SOCK_FD_HEADROOM, an eighth of
 * the limit and one for each connection it holds that the program has not
 * taken yet (which the program's handling of it will want) are free.  The
 * lowest free number bounds the count from below (every one under it is
 * in use) and costs one call; only when it is past half the limit are
 * they counted.
 */
#define SOCK_FD_HEADROOM	8

static long sock_fds_used(void)
{
	struct dirent *d;
	long n = 0;
	DIR *dir = opendir("/proc/self/fd");

	if (!dir)
		return -1;
	while ((d = readdir(dir)))
		if (d->d_name[0] != '.')
			n++;
	closedir(dir);
	return n - 1;	/* the directory's own */
}

/* @any_fd: a descriptor of ours, open (to look for the lowest free one);
 * @held: connections taken and not accepted yet. */
static bool sock_fds_short(int any_fd, long held)
{
	struct rlimit rl;
	long lowest, used, want;
	int fd;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur > (rlim_t)1 << 30)
		return false;
	want = SOCK_FD_HEADROOM + (long)rl.rlim_cur / 8 + held;
	fd = fcntl(any_fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return errno == EMFILE || errno == ENFILE;
	close(fd);
	lowest = fd;
	if ((long)rl.rlim_cur - lowest < want)
		return true;
	if (lowest < (long)rl.rlim_cur / 2)
		return false;
	used = sock_fds_used();
	return used >= 0 && (long)rl.rlim_cur - used < want;
}

/* Connections @l holds that the program has not accepted: ready, pending. */
static long sock_conn_held(const struct ferry_sock *l)
{
	const struct ferry_sock *s;
	long n = l->nready;

	for (s = l->pending; s; s = s->next)
		n++;
	return n;
}

/* A connection request: a new socket with its resources, accepted at once. */
static void sock_conn_request(struct ferry_sock *l, struct ferry_cm_event *ev)
{
	uint8_t pd[RS_PRIVATE_DATA_LEN];
	struct ferry_conn_param param;
	struct ferry_sock *s;

	if (l->tcp_beside && sock_fds_short(l->fd, sock_conn_held(l))) {
		ferry_info("sock %d: few descriptors left: a client goes over TCP", l->fd);
		ferry_reject(ev->id, NULL, 0);
		l->reap_id = ev->id;	/* after the event's ack (sock_conn_process) */
		return;
	}
	s = sock_conn_new_accepted(l, ev->id->verbs);
	if (!s) {
		ferry_warn("sock: no memory for a connection request: rejecting it");
		ferry_reject(ev->id, NULL, 0);
		l->reap_id = ev->id;	/* after the event's ack (sock_conn_process) */
		return;
	}
	s->id = ev->id;
	s->id->context = s;
	s->chan = l->chan;
	atomic_fetch_add(&l->chan->refs, 1);
	if (sock_conn_resources(s) < 0 ||
	    sock_conn_data_take(s, ev->param.conn.private_data,
				ev->param.conn.private_data_len) < 0)
		goto err_reject;
	sock_conn_data_build(s, pd);
	sock_conn_param(&param, pd);
	if (ferry_accept(s->id, &param) < 0)
		goto err_reject;
	s->state = SOCK_ACCEPTING;
	s->next = l->pending;
	l->pending = s;
	return;

err_reject:
	ferry_info("sock: refusing a connection: %m");
	ferry_reject(s->id, NULL, 0);
	/* Destroying the id waits until its events are acked, and this one's
	 * CONNECT_REQUEST is not yet: the socket goes after the ack. */
	l->reap = s;
}

static struct ferry_sock *sock_unlink_pending(struct ferry_sock *l, struct ferry_cm_id *id)
{
	struct ferry_sock **pp, *s;

	for (pp = &l->pending; (s = *pp); pp = &s->next) {
		if (s->id == id) {
			*pp = s->next;
			s->next = NULL;
			return s;
		}
	}
	return NULL;
}

static void sock_conn_passive_event(struct ferry_sock *l, struct ferry_cm_event *ev)
{
	struct ferry_sock *s;

	if (ev->event == FERRY_CM_EVENT_CONNECT_REQUEST) {
		sock_conn_request(l, ev);
		return;
	}
	if (ev->id == l->id)
		return;
	s = sock_unlink_pending(l, ev->id);
	if (!s)
		return;	/* an accepted socket's later events: its QP tells */
	if (ev->event != FERRY_CM_EVENT_ESTABLISHED) {
		/* The client did not complete the handshake (CONNECT_ERROR,
		 * after ferry_accept returned): the socket goes after this
		 * event's ack, which destroying its id waits for. */
		ferry_info("sock: accepted connection failed: %s", ferry_event_str(ev->event));
		l->reap = s;
		return;
	}
	sock_conn_established(s);
	if (l->ready_tail)
		l->ready_tail->next = s;
	else
		l->ready = s;
	l->ready_tail = s;
	l->nready++;
	__atomic_store_n(&l->arrivals, l->arrivals + 1, __ATOMIC_RELAXED);
}

struct ferry_sock *sock_conn_take_ready(struct ferry_sock *l)
{
	struct ferry_sock *s = l->ready;

	if (!s)
		return NULL;
	l->ready = s->next;
	if (!l->ready)
		l->ready_tail = NULL;
	l->nready--;
	s->next = NULL;
	sock_ka_update(s);
	return s;
}

/* Put @s, taken from @l's ready queue, back at its head; cm_lock held. */
void sock_conn_put_back(struct ferry_sock *l, struct ferry_sock *s)
{
	s->next = l->ready;
	l->ready = s;
	if (!l->ready_tail)
		l->ready_tail = s;
	l->nready++;
	__atomic_store_n(&l->arrivals, l->arrivals + 1, __ATOMIC_RELAXED);
}

/* Take the events on the socket's channel: were there any? */
static bool sock_conn_take_events(struct ferry_sock *s)
{
	struct ferry_cm_event *ev;
	bool got = false;

	while (ferry_cm_event_poll(s->chan->ch, &ev) == 0) {
		got = true;
		if (s->state == SOCK_LISTENING)
			sock_conn_passive_event(s, ev);
		else
			sock_conn_active_event(s, ev);
		ferry_ack_cm_event(ev);
		if (s->reap) {
			sock_free(s->reap);
			s->reap = NULL;
		}
		if (s->reap_id) {
			ferry_destroy_id(s->reap_id);
			s->reap_id = NULL;
		}
	}
	return got;
}

/*
 * Take the socket's CM events, and the steps that wait for this thread
 * (sock_conn_progress).  While it connects or listens, the rest comes
 * from the CM thread of this process, which may share the caller's CPU
 * (and does when the process is pinned): a caller spinning on a socket
 * with nothing yet gives that thread the CPU rather than keep it waiting.
 */
void sock_conn_process(struct ferry_sock *s)
{
	bool got;

	if (!s->chan || !s->chan_in_epoll)
		return;
	got = sock_conn_take_events(s);
	if (!got && sock_conn_progress(s))
		got = sock_conn_take_events(s);
	if (s->chan_park)
		sock_conn_park(s);
	if (!got && sock_conn_yields(s))
		sched_yield();
}
