/*
 * shm_conn.c - connecting two shm QPs, and memory blocks announced later.
 *
 * The exchange runs over an AF_UNIX SOCK_SEQPACKET socket, the same on
 * both sides (ferry_qp_exchange over a socketpair is symmetric):
 *
 *   HELLO   qp_num, psn, rq depth and SGEs;  no fds; the names of the
 *           recv CQ's and the monitor's wake sockets (shm_wake.c)
 *   BLOCK   block id;                        fd: a ferry_alloc block
 *   TABLE   (where in the segment)           fd: the copy of the PD's
 *                                            overflow MR table
 *   REGION  region size, MR table size,      fds: their segments, each
 *           where the region and the copies  once (read-only; usually one)
 *           of the MR table and the recv
 *           CQ's notify word are
 *   READY   (nothing)                        we hold all the peer sent
 *
 * Each side sends HELLO (shm_qp_exchange_begin, which needs nothing from
 * the peer: the CM sends it right behind its request).  Its credentials,
 * as the kernel attaches them, say which process the peer is, and so
 * which pool of the arena (shm_arena.c) holds what that process may read:
 * HELLO passes no memory, since before it nothing says whose it would be.
 * Once a side has the peer's HELLO, it makes its region in that pool,
 * sized for the peer's queue, and finds or makes the copies of its PD's
 * MR table and its recv CQ's notify word there (shm_pd.c, shm_cq.c; the
 * region itself: shm_region.c), then sends its
 * BLOCKs for every block already registered with some access (and the
 * overflow table's copy, if any, TABLE), then its REGION; once it has mapped
 * the peer's BLOCKs and REGION, READY.  The exchange completes with the
 * peer's READY: neither side is connected before both hold everything,
 * so a side that fails (out of descriptors, say) leaves a peer that never
 * connected, not one connected and then reset.  BLOCKs also go later,
 * whenever ferry_reg_mr registers a new block (from our REGION on).
 *
 * Steps.  shm_qp_exchange_step never waits: it takes what is there,
 * answers, and returns EAGAIN while more must come; how far it got is
 * kept in the pending connection (qp->xconn, shm_conn.xstate).  The CM
 * calls it from its thread's events, with a deadline of its own; the
 * blocking ferry_qp_exchange (an application's socket) calls it in a
 * poll() loop bounded by SHM_EXCHANGE_TIMEOUT_MS.  A step holds the
 * QP's sq_lock, as ferry_reg_mr's announcements do.
 *
 * Every message is checked for size, magic, version, type, fd count and
 * value ranges; unexpected descriptors are closed.  Descriptors the kernel
 * dropped for want of free ones (MSG_CTRUNC) fail the exchange with
 * EMFILE, said as such.  The socket stays open: the monitor thread
 * watches it and a hang-up moves the QP to ERR.  It may become the recv
 * CQ's channel as well (ferry_comp_channel_on_conn, shm_conn_move): the
 * peer then wakes that CQ with a 1-byte record on it (shm_conn_wake), and
 * the QP's error shuts it down.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm-internal.h"

#define SHM_MSG_MAX_FDS 8

/* --- messages --- */

static int shm_msg_send(int sock, struct shm_msg *msg, const int *fds, int nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * SHM_MSG_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = msg, .iov_len = sizeof(*msg) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	msg->magic = SHM_MAGIC;
	msg->version = SHM_VERSION;
	if (nfds > 0) {
		struct cmsghdr *cm;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(*msg)) {
		if (n >= 0)
			errno = EPROTO;
		return -1;
	}
	return 0;
}

static void shm_close_fds(int *fds, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

/*
 * A message came with fewer descriptors than it carried (MSG_CTRUNC with
 * room to spare: a control buffer too small would have been filled): the
 * kernel dropped them because this process, or the system, has no
 * descriptor free.  Not the peer's fault, so not "malformed": say so at
 * warn once (it tends to repeat), and fail with the cause, so that the
 * caller falls back rather than resets.
 */
static int shm_msg_fds_lost(int sock)
{
	static atomic_bool warned;
	int e = EMFILE, fd;

	fd = fcntl(sock, F_DUPFD_CLOEXEC, 0);	/* which table is full? */
	if (fd >= 0)
		close(fd);	/* freed meanwhile: still ours that ran out */
	else if (errno == ENFILE)
		e = ENFILE;
	if (!atomic_exchange(&warned, true))
		ferry_warn("out of file descriptors in this process (%s): a connection's "
			   "memory could not be received; its exchange fails", strerror(e));
	else
		ferry_info("out of file descriptors in this process (%s)", strerror(e));
	return ERR(e);
}

/*
 * Descriptors of the SCM_RIGHTS in @mh into @got; their count.  Not
 * parked (ferry_fd_park): every one is closed in the step that took it,
 * once mapped, so it never holds a low number a program expects for its
 * own files for longer than that, and parking cost two system calls each.
 */
static int shm_msg_take_fds(struct msghdr *mh, int *got, struct ucred *cred_p)
{
	struct cmsghdr *cm;
	int ngot = 0, i;

	for (cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));

			for (i = 0; i < k && ngot < SHM_MSG_MAX_FDS; i++) {
				memcpy(&got[ngot], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				ngot++;
			}
		} else if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS &&
			   cred_p) {
			memcpy(cred_p, CMSG_DATA(cm), sizeof(*cred_p));
		}
	}
	return ngot;
}

/*
 * shm_msg_recv - receive one message of one of the @types (a mask of
 * SHM_MSG_BIT) with the descriptors of its type (into @fds, room for
 * SHM_MSG_FDS), never waiting.  With @cred_p, also the sender's
 * credentials as the kernel vouches for them (SO_PASSCRED must be on; pid
 * 0 when none came).  Returns how many descriptors came, or -1 with errno:
 * EAGAIN (nothing there), ECONNRESET (peer gone), EMFILE / ENFILE (its
 * descriptors were dropped: shm_msg_fds_lost), EPROTO (malformed: wrong
 * size, magic, version, type or fd count).
 */
static int shm_msg_recv(int sock, struct shm_msg *msg, uint32_t types, int *fds,
			struct ucred *cred_p)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * SHM_MSG_MAX_FDS) +
			 CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = msg, .iov_len = sizeof(*msg) };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf),
	};
	int got[SHM_MSG_MAX_FDS], ngot;
	ssize_t n;

	do
		n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if (n == 0)
		return ERR(ECONNRESET);
	ngot = shm_msg_take_fds(&mh, got, cred_p);
	if ((mh.msg_flags & MSG_CTRUNC) && ngot < SHM_MSG_MAX_FDS) {
		shm_close_fds(got, ngot);
		return shm_msg_fds_lost(sock);
	}
	if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
	    !shm_msg_shape_ok(msg, (size_t)n, ngot, types)) {
		ferry_warn("malformed message from peer (%zd bytes, type %u, %d fds)",
			   n, n >= 12 ? msg->type : 0, ngot);
		shm_close_fds(got, ngot);
		return ERR(EPROTO);
	}
	memcpy(fds, got, sizeof(int) * (size_t)ngot);
	return ngot;
}

/* --- the exchange --- */

/*
 * The peer's pid and uid (whose memory outside blocks shm_peer.c opens,
 * and whose pool of the arena holds what it reads of ours) come from the
 * credentials the kernel attaches to its HELLO: SO_PEERCRED would name
 * whoever created the socket, which for a socketpair shared across fork
 * is not the peer.
 */
static int shm_check_socket(int sock, bool cm_made)
{
	socklen_t len = sizeof(int);
	int type, domain, on = 1;

	if (cm_made)	/* the CM's own: no need to ask the kernel what it is */
		return setsockopt(sock, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on));
	if (getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
		return -1;	/* ENOTSOCK, EBADF */
	len = sizeof(int);
	if (getsockopt(sock, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0)
		return -1;
	if (domain != AF_UNIX || type != SOCK_SEQPACKET) {
		ferry_info("ferry_qp_exchange needs an AF_UNIX SOCK_SEQPACKET socket");
		return ERR(EINVAL);
	}
	return setsockopt(sock, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on));
}

static int shm_hello_send(struct shm_qp *qp, struct shm_conn *conn)
{
	struct shm_cq *rcq = to_scq(qp->qp.recv_cq);
	struct shm_msg m = { .type = SHM_MSG_HELLO };

	if (shm_monitor_kick_name(&m.kick) < 0)
		return -1;
	m.qp_num = qp->qp.qp_num;
	m.psn = qp->sq_psn;
	m.rq_size = qp->rq_size;
	m.rq_sge = qp->cap.max_recv_sge;
	m.wake = rcq->wake;
	return shm_msg_send(conn->sock, &m, NULL, 0);
}

static int shm_hello_recv(struct shm_conn *conn)
{
	struct ucred cred = { .pid = 0 };
	struct shm_msg m;
	int none[SHM_MSG_FDS];

	if (shm_msg_recv(conn->sock, &m, SHM_MSG_BIT(SHM_MSG_HELLO), none, &cred) < 0)
		return -1;
	conn->peer_pid = cred.pid;
	if (conn->peer_pid <= 0) {
		ferry_warn("peer's HELLO carries no credentials");
		return ERR(EPROTO);
	}
	if (!shm_hello_ok(&m)) {
		ferry_warn("peer's HELLO has bad values (qp %u, rq %u x %u, wake names "
			   "%u and %u bytes)", m.qp_num, m.rq_size, m.rq_sge, m.wake.len,
			   m.kick.len);
		return ERR(EPROTO);
	}
	conn->peer_qpn = m.qp_num;
	conn->peer_rq_size = m.rq_size;
	conn->peer_rq_sge = m.rq_sge;
	conn->peer_rq_stride = shm_rq_stride(m.rq_sge);
	conn->peer_wake = m.wake;
	conn->peer_kick = m.kick;
	conn->peer_uid = cred.uid;
	conn->bounces = cred.uid != geteuid() || cred.uid != getuid();
	conn->pool = shm_arena_pool_get(conn->peer_pid, conn->peer_uid);
	return conn->pool ? 0 : ERR(ENOMEM);
}

static void shm_conn_take(struct shm_conn *conn, const struct shm_msg *m, int fd);
static int shm_conn_announce_existing(struct shm_qp *qp, struct shm_conn *conn);

/*
 * Where REGION's pieces are: each piece's offset, and the number of its
 * segment's descriptor in @fds, each segment passed once.  Their count.
 */
static int shm_region_place(struct shm_msg *m, const struct shm_piece *const *pieces, int *fds)
{
	int i, k, nfds = 0;

	for (i = 0; i < SHM_RP_PIECES; i++) {
		for (k = 0; k < nfds && fds[k] != pieces[i]->seg->fd; k++)
			;
		if (k == nfds)
			fds[nfds++] = pieces[i]->seg->fd;
		m->off[i] = pieces[i]->off;
		m->fdi[i] = (uint32_t)k;
	}
	return nfds;
}

/* The copies of our PD's table and recv CQ's word that the peer reads. */
static int shm_conn_mirrors_get(struct shm_qp *qp, struct shm_conn *conn)
{
	conn->table_mirror = shm_pd_mirror_get(to_spd(qp->qp.pd), conn->pool);
	if (conn->table_mirror)
		conn->notify_mirror = shm_cq_mirror_get(to_scq(qp->qp.recv_cq), conn->pool);
	if (!conn->notify_mirror) {
		ferry_warn("QP %u: no room for the peer's copy of an MR table or notify word: %m",
			   qp->qp.qp_num);
		return ERR(ENOMEM);
	}
	return 0;
}

/*
 * Once the peer's HELLO is in: our region, sized for the peer's queue,
 * and the copies of what else it reads, then our blocks, then REGION.
 * Blocks go first so that when the exchange completes on either side,
 * every rkey the application may already hold is reachable; from here on
 * ferry_reg_mr announces new ones on this connection (blocks_sent, set
 * under the sq_lock the scan holds).
 */
static int shm_region_send(struct shm_qp *qp, struct shm_conn *conn)
{
	struct shm_msg m = { .type = SHM_MSG_REGION };
	const struct shm_piece *pieces[SHM_RP_PIECES];
	int fds[SHM_MSG_FDS], nfds;

	if (shm_region_create(qp, conn) < 0 || shm_conn_mirrors_get(qp, conn) < 0)
		return -1;
	/* Receives posted in INIT must be in the region before the peer can
	 * see it: a peer that starts sending the moment its exchange ends
	 * would otherwise find none and wait out an RNR timer. */
	ferry_lock(&qp->rq_lock);
	shm_rq_publish(qp);
	ferry_unlock(&qp->rq_lock);
	if (shm_conn_announce_existing(qp, conn) < 0)
		return -1;
	conn->blocks_sent = true;
	m.value = qp->region_size;
	m.table_entries = to_spd(qp->qp.pd)->table_entries;
	pieces[SHM_RP_REGION] = &qp->region_piece;
	pieces[SHM_RP_TABLE] = &conn->table_mirror->piece;
	pieces[SHM_RP_NOTIFY] = &conn->notify_mirror->piece;
	nfds = shm_region_place(&m, pieces, fds);
	return shm_msg_send(conn->sock, &m, fds, nfds);
}

/*
 * Piece @i of the peer's REGION @m, @size bytes: its segment is mapped
 * (and fstat'ed, and its seals read) once per message, however many
 * pieces it holds (usually all three), the later ones taking a reference
 * of the first's mapping, their bounds checked against it.  @maps: those
 * mapped so far, by piece.
 */
static struct shm_mapping *shm_region_map_piece(const struct shm_msg *m, const int *fds,
						struct shm_mapping *const *maps, int i,
						uint64_t size, const void **addr_p)
{
	int k;

	for (k = 0; k < i; k++)
		if (maps[k] && m->fdi[k] == m->fdi[i])
			return shm_arena_map_again(maps[k], m->off[i], size, addr_p);
	return shm_arena_map_peer(fds[m->fdi[i]], m->off[i], size, addr_p);
}

/* Map what the peer's REGION @m names, in its @nfds descriptors @fds. */
static int shm_region_map_pieces(struct shm_conn *conn, const struct shm_msg *m,
				 const int *fds, const struct shm_region_layout *want,
				 const void **region_p)
{
	struct shm_mapping *maps[SHM_RP_PIECES] = { NULL };

	conn->peer_table_entries = m->table_entries;
	maps[SHM_RP_REGION] = shm_region_map_piece(m, fds, maps, SHM_RP_REGION, want->size,
						   region_p);
	if (maps[SHM_RP_REGION])
		maps[SHM_RP_TABLE] = shm_region_map_piece(m, fds, maps, SHM_RP_TABLE,
				(size_t)m->table_entries * sizeof(struct shm_mr_entry),
				(const void **)&conn->peer_table);
	if (maps[SHM_RP_TABLE])
		maps[SHM_RP_NOTIFY] = shm_region_map_piece(m, fds, maps, SHM_RP_NOTIFY,
							   sizeof(struct shm_notify),
							   (const void **)&conn->peer_notify);
	conn->peer_region_map = maps[SHM_RP_REGION];
	conn->peer_table_map = maps[SHM_RP_TABLE];
	conn->peer_notify_map = maps[SHM_RP_NOTIFY];
	if (!conn->peer_region_map || !conn->peer_table_map || !conn->peer_notify_map)
		return ERR(EPROTO);
	return 0;
}

/* Map the peer's region and the rest, passed as @fds (which this closes) with @m. */
static int shm_region_map(struct shm_qp *qp, struct shm_conn *conn, const struct shm_msg *m,
			  int *fds, int nfds)
{
	struct shm_region_layout want = shm_region_layout(conn->peer_rq_size,
							  conn->peer_rq_stride, qp->rq_size,
							  shm_conn_bounces(conn));
	const struct shm_region *pr;
	const void *start;
	int r;

	if (!shm_region_msg_ok(m, nfds, &want)) {
		ferry_warn("peer's REGION is bad (region %llu bytes at %llu, expected %zu; MR "
			   "table %u slots at %llu; notify word at %llu; %d descriptors)",
			   (unsigned long long)m->value, (unsigned long long)m->off[SHM_RP_REGION],
			   want.size, m->table_entries, (unsigned long long)m->off[SHM_RP_TABLE],
			   (unsigned long long)m->off[SHM_RP_NOTIFY], nfds);
		shm_close_fds(fds, nfds);
		return ERR(EPROTO);
	}
	r = shm_region_map_pieces(conn, m, fds, &want, &start);
	shm_close_fds(fds, nfds);
	if (r < 0)
		return -1;
	pr = (const struct shm_region *)((const uint8_t *)start + want.head_off);
	conn->peer_region = pr;
	if (pr->qp_num != conn->peer_qpn || pr->rq_size != conn->peer_rq_size ||
	    pr->rq_sge != conn->peer_rq_sge || pr->dq_size != qp->rq_size) {
		ferry_warn("peer's region disagrees with its HELLO");
		return ERR(EPROTO);
	}
	conn->peer_dq = shm_dq_entry((uint8_t *)conn->peer_region, qp->rq_size, 0);
	conn->peer_bounce = shm_conn_bounces(conn) ?
			    (const uint8_t *)start + want.bounce_off : NULL;
	conn->my_dq = shm_dq_entry((uint8_t *)qp->region, conn->peer_rq_size, 0);
	return 0;
}

/*
 * Take the peer's announcements up to a message of type @last (REGION or
 * READY), whose descriptors (REGION's) land in @fds (room for
 * SHM_MSG_FDS): their count.  EAGAIN: not there yet, what came so far is
 * taken.
 */
static int shm_conn_take_until(struct shm_conn *conn, uint32_t last, struct shm_msg *m,
			       int *fds)
{
	uint32_t types = SHM_MSG_BIT(last) | SHM_MSG_BIT(SHM_MSG_BLOCK) |
			 SHM_MSG_BIT(SHM_MSG_TABLE);
	int n;

	for (;;) {
		n = shm_msg_recv(conn->sock, m, types, fds, NULL);
		if (n < 0 || m->type == last)
			return n;
		shm_conn_take(conn, m, fds[0]);
	}
}

/* We hold all the peer sent before its REGION, and the region: tell it. */
static int shm_ready_send(struct shm_conn *conn)
{
	struct shm_msg m = { .type = SHM_MSG_READY };

	return shm_msg_send(conn->sock, &m, NULL, 0);
}

/*
 * Take the exchange as far as the peer's messages allow; sq_lock held.
 * HELLO, then our side (BLOCK..., REGION); the peer's BLOCK..., REGION,
 * then our READY; its READY.  Each side completes only with the other's
 * READY, which it sends once it holds everything: a peer that fails to
 * take our region (out of descriptors, say) leaves us never connected,
 * instead of connected and then reset.
 */
static int shm_exchange_advance(struct shm_qp *qp, struct shm_conn *conn)
{
	int fds[SHM_MSG_FDS], nfds;
	struct shm_msg m;

	if (conn->xstate == SHM_X_HELLO) {
		if (shm_hello_recv(conn) < 0 || shm_region_send(qp, conn) < 0)
			return -1;
		conn->xstate = SHM_X_REGION;
	}
	if (conn->xstate == SHM_X_REGION) {
		nfds = shm_conn_take_until(conn, SHM_MSG_REGION, &m, fds);
		if (nfds < 0 || shm_region_map(qp, conn, &m, fds, nfds) < 0 ||
		    shm_ready_send(conn) < 0)
			return -1;
		conn->xstate = SHM_X_READY;
	}
	return shm_conn_take_until(conn, SHM_MSG_READY, &m, fds) < 0 ? -1 : 0;
}

void shm_conn_destroy(struct shm_qp *qp, struct shm_conn *conn)
{
	uint32_t i;

	if (conn->sock >= 0)
		ferry_fd_close(conn->sock);
	shm_pd_mirror_put(to_spd(qp->qp.pd), conn->table_mirror);
	shm_cq_mirror_put(to_scq(qp->qp.recv_cq), conn->notify_mirror);
	shm_arena_pool_put(conn->pool);
	shm_unmap(conn->peer_region_map);
	shm_unmap(conn->peer_table_map);
	shm_unmap(conn->peer_xtable_map);
	shm_unmap(conn->peer_notify_map);
	if (conn->peer_mem >= 0)
		close(conn->peer_mem);
	for (i = 0; i < conn->nblocks; i++)
		shm_unmap(conn->blocks[i].map);
	free(conn->blocks);
	free(conn->announced);
	free(conn);
}

struct shm_announce {
	struct shm_conn *conn;
	uint64_t id;
	bool tried;		/* a descriptor came: its failure is the send's */
};

/* ferry_block_window_send's callback: BLOCK @a->id with @fd. */
static int shm_conn_announce_fd(int fd, void *arg)
{
	struct shm_announce *a = arg;

	a->tried = true;
	return shm_conn_announce_block(a->conn, a->id, fd);
}

/*
 * Announce the window of every MR of the PD that has one (SEND targets and
 * one-sided targets: shm_mr_share) to a new peer;
 * sq_lock held.  The table is read without the PD lock (reg_mr takes the PD
 * lock and then our sq_lock): an MR registered too late for this scan is
 * announced by reg_mr itself, which waits for our sq_lock and then finds
 * blocks_sent set (shm_qp_announce_conn).
 */
static int shm_conn_announce_existing(struct shm_qp *qp, struct shm_conn *conn)
{
	struct shm_pd *spd = to_spd(qp->qp.pd);
	const struct shm_mr_entry *e;
	uint32_t pos = 0;

	/* The overflow table's copy in the peer's pool is made with the
	 * table (shm_pd_grow) or with the copy (shm_pd_mirror_get). */
	if (atomic_load_explicit(&spd->xtable, memory_order_acquire) &&
	    shm_conn_announce_table(conn, &conn->table_mirror->xpiece) < 0)
		return -1;

	while ((e = shm_pd_next_entry(spd, &pos))) {
		struct shm_announce a = { conn, e->block_id, false };

		if (!a.id || !shm_conn_may_map(conn, e->access))
			continue;
		errno = 0;
		if (ferry_block_window_send(a.id, shm_conn_announce_fd, &a) < 0) {
			/* Freed meanwhile is fine; out of descriptors is not:
			 * the peer would connect without the block and find
			 * its writes refused later (remote access errors);
			 * nor is a block the peer must have, not sent. */
			if (a.tried || errno == EMFILE || errno == ENFILE || errno == ENOMEM)
				return -1;
			continue;
		}
		shm_pd_windows_out(spd);
	}
	return 0;
}

/*
 * The first half: HELLO needs nothing from the peer, so a caller may send
 * it early, ahead of the peer's first word (the CM sends it right after
 * its connection request).  The connection waits in qp->xconn.
 */
static int shm_qp_exchange_start(struct ferry_qp *fqp, int sock, bool share)
{
	struct shm_qp *qp = to_sqp(fqp);
	struct shm_conn *conn;

	if (shm_check_socket(sock, share) < 0)
		return -1;
	conn = calloc(1, sizeof(*conn));
	if (!conn)
		return -1;
	conn->peer_mem = SHM_PEER_MEM_UNOPENED;
	/* The CM's socket is held by both of us, one descriptor for two; an
	 * application's (ferry_qp_exchange) is copied, its to close. */
	conn->sock = share ? ferry_fd_hold(sock) : ferry_fd_dup(sock);
	if (conn->sock < 0)
		goto err_free;

	ferry_lock(&qp->sq_lock);
	if (!shm_qp_may_exchange(qp) || qp->conn || qp->xconn) {
		ferry_unlock(&qp->sq_lock);
		errno = qp->conn || qp->xconn ? EISCONN : EINVAL;
		goto err_free;
	}
	if (shm_hello_send(qp, conn) < 0) {
		ferry_unlock(&qp->sq_lock);
		ferry_info("QP %u: sending HELLO: %m", fqp->qp_num);
		goto err_free;
	}
	qp->xconn = conn;
	ferry_unlock(&qp->sq_lock);
	return 0;

err_free:
	{
		int e = errno;

		shm_conn_destroy(qp, conn);
		errno = e;
	}
	return -1;
}

struct shm_conn *shm_qp_announce_conn(struct shm_qp *qp)
{
	if (qp->conn)
		return qp->conn;
	return qp->xconn && qp->xconn->blocks_sent ? qp->xconn : NULL;
}

/*
 * Drop the exchange under way, failed or abandoned; sq_lock held.  Before
 * our READY the peer cannot have connected, nor have we made a delivery
 * from our region: it is reused at once (a peer that stalls must not pin
 * it).  After, the peer may have completed: the region waits for it to let
 * go, as an established connection's does (shm_region_release).
 */
void shm_qp_exchange_drop(struct shm_qp *qp)
{
	struct shm_conn *conn = qp->xconn;

	qp->xconn = NULL;
	shm_region_release(qp, conn->xstate == SHM_X_READY ? conn : NULL);
	shm_conn_destroy(qp, conn);
}

/* The exchange is complete: @conn becomes the QP's connection. */
static void shm_exchange_complete(struct shm_qp *qp, struct shm_conn *conn)
{
	qp->xconn = NULL;
	/* shm_poll_recv reads qp->conn under the recv CQ's lock alone. */
	ferry_lock(&to_scq(qp->qp.recv_cq)->lock);
	ferry_lock(&qp->rq_lock);
	qp->conn = conn;
	ferry_unlock(&qp->rq_lock);
	ferry_unlock(&to_scq(qp->qp.recv_cq)->lock);
}

/*
 * One step: what the peer sent since the last, and our answers.  Each runs
 * under the sq_lock and never waits; between steps ferry_reg_mr may
 * announce blocks on the exchange (shm_qp_announce_conn).
 */
int shm_qp_exchange_step(struct ferry_qp *fqp, uint32_t *peer_qpn_p)
{
	struct shm_qp *qp = to_sqp(fqp);
	struct shm_conn *conn;
	int e;

	ferry_lock(&qp->sq_lock);
	conn = qp->xconn;
	if (!conn) {
		ferry_unlock(&qp->sq_lock);
		return ERR(EINVAL);
	}
	if (!shm_qp_may_exchange(qp))
		errno = EINVAL;
	else if (shm_exchange_advance(qp, conn) == 0)
		goto complete;
	e = errno;
	if (e == EAGAIN) {
		ferry_unlock(&qp->sq_lock);
		return -1;
	}
	shm_qp_exchange_drop(qp);
	ferry_unlock(&qp->sq_lock);
	ferry_info("QP %u: exchange failed: %s", fqp->qp_num, strerror(e));
	return ERR(e);

complete:
	shm_exchange_complete(qp, conn);
	ferry_unlock(&qp->sq_lock);
	shm_monitor_watch(qp);
	*peer_qpn_p = conn->peer_qpn;
	return 0;
}

void shm_qp_exchange_abort(struct ferry_qp *fqp)
{
	struct shm_qp *qp = to_sqp(fqp);

	ferry_lock(&qp->sq_lock);
	if (qp->xconn)
		shm_qp_exchange_drop(qp);
	ferry_unlock(&qp->sq_lock);
}

int shm_qp_exchange_begin(struct ferry_qp *fqp, int sock)
{
	return shm_qp_exchange_start(fqp, sock, true);
}

/* Wait until @sock is readable, at most until @end_ns. */
static int shm_wait_readable(int sock, uint64_t end_ns)
{
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	uint64_t now = shm_now_ns();
	int r;

	if (now >= end_ns)
		return ERR(ETIMEDOUT);
	r = poll(&pfd, 1, (int)((end_ns - now + 999999) / 1000000));
	if (r == 0)
		return ERR(ETIMEDOUT);
	return r < 0 && errno != EINTR ? -1 : 0;
}

/* The application's own socket, its own thread: the steps, waiting between. */
int shm_qp_exchange(struct ferry_qp *fqp, int sock, uint32_t *peer_qpn_p)
{
	uint64_t end = shm_now_ns() + SHM_EXCHANGE_TIMEOUT_MS * 1000000ull;

	if (shm_qp_exchange_start(fqp, sock, false) < 0)
		return -1;
	while (shm_qp_exchange_step(fqp, peer_qpn_p) < 0) {
		if (errno != EAGAIN)
			return -1;
		if (shm_wait_readable(sock, end) < 0) {
			int e = errno;

			ferry_info("QP %u: exchange: %s", fqp->qp_num, strerror(e));
			shm_qp_exchange_abort(fqp);
			return ERR(e);
		}
	}
	return 0;
}

/* --- the connection's socket as the recv CQ's channel --- */

void shm_conn_wake(struct shm_conn *conn)
{
	static const char byte = 'w';
	ssize_t n;

	/* EAGAIN: the peer's queue is full of wake-ups, readable already;
	 * EPIPE: it hung up, which its socket shows by itself. */
	do
		n = send(conn->sock, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
}

int shm_conn_move(struct shm_qp *qp, int to, bool cloexec)
{
	struct shm_conn *conn = qp->conn;
	int from = conn->sock, fd, held;

	if (to < 0)
		fd = fcntl(from, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
	else if (to == from)
		return ERR(EINVAL);
	else
		fd = dup3(from, to, cloexec ? O_CLOEXEC : 0);
	if (fd < 0)
		return -1;
	held = ferry_fd_hold(fd);	/* @fd itself, unless too high to count */
	if (held < 0) {
		int e = errno;

		if (to < 0)
			close(fd);
		return ERR(e);
	}
	ferry_lock(&qp->rq_lock);	/* post_recv may wake the peer on it */
	conn->sock = held;
	ferry_unlock(&qp->rq_lock);
	/* The monitor's item stays under @from (shm_watch.item_fd). */
	ferry_fd_close(from);	/* our hold; whoever else holds it closes it */
	return fd;
}

/* --- ferry_alloc blocks --- */

static bool shm_u64_push(uint64_t **arr, uint32_t *n, uint32_t *cap, uint64_t v)
{
	if (*n == *cap) {
		uint32_t c = *cap ? 2 * *cap : 8;
		uint64_t *a = realloc(*arr, c * sizeof(*a));

		if (!a)
			return false;
		*arr = a;
		*cap = c;
	}
	(*arr)[(*n)++] = v;
	return true;
}

/* Send block @id to the peer unless it has it; the QP's sq_lock held. */
int shm_conn_announce_block(struct shm_conn *conn, uint64_t id, int fd)
{
	struct shm_msg m = { .type = SHM_MSG_BLOCK, .value = id };
	uint32_t i;

	for (i = 0; i < conn->nannounced; i++)
		if (conn->announced[i] == id)
			return 0;
	if (shm_msg_send(conn->sock, &m, &fd, 1) < 0) {
		ferry_warn("announcing a memory block to the peer: %m");
		return -1;
	}
	if (!shm_u64_push(&conn->announced, &conn->nannounced, &conn->announced_cap, id))
		return ERR(ENOMEM);
	return 0;
}

static struct shm_mapping *shm_conn_find_block(struct shm_conn *conn, uint64_t id)
{
	uint32_t i;

	for (i = 0; i < conn->nblocks; i++)
		if (conn->blocks[i].id == id)
			return conn->blocks[i].map;
	return NULL;
}

/*
 * Map the peer's window @id from @fd (which this closes): read-write, or
 * read-only if that is how the peer opened it (a window of MRs we may
 * only read).  What we write into must then be mapped writable
 * (shm_conn_peer_block's callers check), or a hostile peer could have us
 * fault on its read-only pages.
 */
static void shm_conn_take_block(struct shm_conn *conn, uint64_t id, int fd)
{
	struct shm_mapping *map = NULL;
	int fl = fcntl(fd, F_GETFL);
	int prot = fl >= 0 && (fl & O_ACCMODE) == O_RDONLY ? PROT_READ : PROT_READ | PROT_WRITE;
	struct stat st;

	/* One fstat for both questions: whose inode, and what to map.  A
	 * peer in another process handing back one of our own blocks would
	 * have us write our memory where it chooses: refuse. */
	if (fstat(fd, &st) < 0)
		ferry_warn("a memory block the peer passed: fstat: %m");
	else if (conn->peer_pid != ferry_pid() && ferry_block_is_own_inode(st.st_ino))
		ferry_warn("peer passed back one of our own memory blocks");
	else if (!shm_conn_find_block(conn, id))
		map = shm_map_fd_stat(fd, &st, 1, prot);
	close(fd);
	if (!map)
		return;
	if (conn->nblocks == conn->blocks_cap) {
		uint32_t c = conn->blocks_cap ? 2 * conn->blocks_cap : 8;
		struct shm_peer_block *b = realloc(conn->blocks, c * sizeof(*b));

		if (!b) {
			shm_unmap(map);
			return;
		}
		conn->blocks = b;
		conn->blocks_cap = c;
	}
	conn->blocks[conn->nblocks].id = id;
	conn->blocks[conn->nblocks++].map = map;
}

/* Send where the peer's copy @p of our PD's overflow MR table is (once);
 * sq_lock held. */
int shm_conn_announce_table(struct shm_conn *conn, const struct shm_piece *p)
{
	struct shm_msg m = { .type = SHM_MSG_TABLE, .off = { p->off } };

	if (conn->table_announced || !p->seg)
		return 0;
	if (shm_msg_send(conn->sock, &m, &p->seg->fd, 1) < 0) {
		ferry_warn("announcing an MR table to the peer: %m");
		return -1;
	}
	conn->table_announced = true;
	return 0;
}

/* Map the peer's overflow MR table from @fd (which this closes). */
static void shm_conn_take_table(struct shm_conn *conn, uint64_t off, int fd)
{
	if (conn->peer_xtable_map) {
		ferry_warn("peer announced a second MR table: ignored");
	} else if (!shm_table_msg_ok(off)) {
		ferry_warn("peer's MR table announcement names a piece outside any segment, "
			   "or misaligned");
	} else {
		conn->peer_xtable_map = shm_arena_map_peer(fd, off,
				SHM_MR_TABLE_ENTRIES * sizeof(struct shm_mr_entry),
				(const void **)&conn->peer_xtable);
		if (!conn->peer_xtable_map)
			conn->peer_xtable = NULL;
	}
	close(fd);
}

/* An announcement: a block, or the overflow MR table. */
static void shm_conn_take(struct shm_conn *conn, const struct shm_msg *m, int fd)
{
	if (m->type == SHM_MSG_TABLE)
		shm_conn_take_table(conn, m->off[0], fd);
	else
		shm_conn_take_block(conn, m->value, fd);
}

/* Take in the announcements waiting in the socket. */
static void shm_conn_drain(struct shm_conn *conn)
{
	struct shm_msg m;
	int fds[SHM_MSG_FDS];

	while (!conn->dead) {
		if (shm_msg_recv(conn->sock, &m,
				 SHM_MSG_BIT(SHM_MSG_BLOCK) | SHM_MSG_BIT(SHM_MSG_TABLE), fds,
				 NULL) < 0) {
			if (errno == ECONNRESET)
				conn->dead = true;
			/* A message dropped (malformed, or its block lost for
			 * want of descriptors) is gone: on to the next. */
			if (errno != EPROTO && errno != EMFILE && errno != ENFILE)
				return;
			continue;
		}
		shm_conn_take(conn, &m, fds[0]);
	}
}

/* shm_conn_peer_entry past the peer's first table; sq_lock held. */
const struct shm_mr_entry *shm_conn_peer_xentry(struct shm_conn *conn, uint32_t idx)
{
	if (idx >= SHM_MR_TABLE_ENTRIES)
		return NULL;
	if (!conn->peer_xtable)
		shm_conn_drain(conn);	/* the key may have come before we looked */
	return conn->peer_xtable ? &conn->peer_xtable[idx] : NULL;
}

/* The peer's block @id mapped here, or NULL; the QP's sq_lock held. */
struct shm_mapping *shm_conn_peer_block(struct shm_conn *conn, uint64_t id)
{
	struct shm_mapping *m = shm_conn_find_block(conn, id);

	if (m)
		return m;
	shm_conn_drain(conn);
	return shm_conn_find_block(conn, id);
}
