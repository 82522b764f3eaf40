/*
 * ping_conn.c - one ferry-ping connection: its verbs resources, the posts of
 * rping's protocol, and the wait for their completions and for CM events.
 *
 * Waiting polls the CQ for a short while (a ping's round trip is a few
 * microseconds on the soft transport), then arms it and sleeps in poll(2)
 * on both the completion channel and the CM event channel, so that a peer
 * that disconnects or dies wakes us as surely as a completion does.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>

#include "ping.h"

#define CONN_CQ_DEPTH 16
#define CONN_SQ_DEPTH 8		/* a SEND and a READ/WRITE at most */
#define CONN_RQ_DEPTH 2		/* one receive posted at a time, as rping */
#define CONN_SPIN_NS 200000	/* poll the CQ this long before sleeping */
#define CONN_DISCONNECT_WAIT_MS 1000

/* wr_id of each kind of work request. */
enum conn_wr {
	CONN_WR_RECV = 1,
	CONN_WR_SEND,
	CONN_WR_RDMA,
};

static const char *conn_wr_name(uint64_t wr_id, enum ferry_wc_opcode opcode)
{
	switch (wr_id) {
	case CONN_WR_RECV: return "receive";
	case CONN_WR_SEND: return "SEND";
	case CONN_WR_RDMA: return opcode == FERRY_WC_RDMA_READ ? "RDMA READ" :
		"RDMA WRITE";
	}
	return "work request";
}

static void conn_mark_closed(struct ping_conn *conn, const char *why)
{
	if (conn->closed)
		return;
	conn->closed = true;
	snprintf(conn->closed_why, sizeof(conn->closed_why), "%s", why);
	ping_debug("connection closed: %s", why);
}

/* ferry_alloc'd memory (reachable on every transport), registered. */
static void *conn_alloc_reg(struct ping_conn *conn, size_t size, int access,
			    struct ferry_mr **mr_p)
{
	void *buf = ferry_alloc(size);

	if (!buf) {
		ping_error("ferry_alloc(%zu): %s", size, strerror(errno));
		return NULL;
	}
	memset(buf, 0, size);
	*mr_p = ferry_reg_mr(conn->pd, buf, size, access);
	if (!*mr_p) {
		ping_error("ferry_reg_mr(%zu bytes): %s", size, strerror(errno));
		ferry_free(buf);
		return NULL;
	}
	return buf;
}

static int conn_buffers_setup(struct ping_conn *conn, bool client)
{
	/*
	 * LOCAL_WRITE is all a receive needs (rping asks no more), but the shm
	 * provider hands a peer only the ferry_alloc blocks of MRs with remote
	 * rights, and a SEND into a block the peer does not know fails with
	 * REM_OP_ERR.  REMOTE_WRITE works around that; its rkey is never sent.
	 */
	conn->recv_buf = conn_alloc_reg(conn, PING_ADVERT_LEN,
					FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE,
					&conn->recv_mr);
	if (!conn->recv_buf)
		return -1;
	conn->send_buf = conn_alloc_reg(conn, PING_ADVERT_LEN, 0, &conn->send_mr);
	if (!conn->send_buf)
		return -1;
	/* Client: the sink the server writes.  Server: READ target, WRITE source. */
	conn->data_buf = conn_alloc_reg(conn, conn->size,
					FERRY_ACCESS_LOCAL_WRITE |
					FERRY_ACCESS_REMOTE_WRITE |
					FERRY_ACCESS_REMOTE_READ, &conn->data_mr);
	if (!conn->data_buf)
		return -1;
	if (!client)
		return 0;
	conn->source_buf = conn_alloc_reg(conn, conn->size,
					  FERRY_ACCESS_REMOTE_READ, &conn->source_mr);
	return conn->source_buf ? 0 : -1;
}

static int conn_post_recv(struct ping_conn *conn)
{
	struct ferry_sge sge = {
		.addr = (uintptr_t)conn->recv_buf,
		.length = PING_ADVERT_LEN,
		.lkey = conn->recv_mr->lkey,
	};
	struct ferry_recv_wr wr = {
		.wr_id = CONN_WR_RECV,
		.sg_list = &sge,
		.num_sge = 1,
	};
	struct ferry_recv_wr *bad_wr;

	if (ferry_post_recv(conn->id->qp, &wr, &bad_wr)) {
		ping_error("ferry_post_recv: %s", strerror(errno));
		return -1;
	}
	return 0;
}

void ping_conn_init(struct ping_conn *conn, struct ferry_event_channel *channel,
		    struct ferry_cm_id *id)
{
	memset(conn, 0, sizeof(*conn));
	conn->channel = channel;
	conn->id = id;
}

int ping_conn_setup(struct ping_conn *conn, size_t size, bool client)
{
	struct ferry_cm_id *id = conn->id;
	struct ferry_qp_init_attr attr;

	conn->size = size;

	conn->pd = ferry_alloc_pd(id->verbs);
	if (!conn->pd) {
		ping_error("ferry_alloc_pd: %s", strerror(errno));
		return -1;
	}
	conn->comp_channel = ferry_create_comp_channel(id->verbs);
	if (!conn->comp_channel) {
		ping_error("ferry_create_comp_channel: %s", strerror(errno));
		return -1;
	}
	conn->cq = ferry_create_cq(id->verbs, CONN_CQ_DEPTH, conn,
				   conn->comp_channel, 0);
	if (!conn->cq) {
		ping_error("ferry_create_cq: %s", strerror(errno));
		return -1;
	}
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = conn->cq;
	attr.recv_cq = conn->cq;
	attr.cap.max_send_wr = CONN_SQ_DEPTH;
	attr.cap.max_recv_wr = CONN_RQ_DEPTH;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.qp_type = FERRY_QPT_RC;
	if (ferry_cm_create_qp(id, conn->pd, &attr)) {
		ping_error("ferry_cm_create_qp: %s", strerror(errno));
		return -1;
	}
	conn->qp_created = true;
	ping_debug("created pd, completion channel, cq and qp %u on %s",
		   id->qp->qp_num, ping_addr_str(ferry_get_local_addr(id)));
	if (conn_buffers_setup(conn, client))
		return -1;
	/* Before connect / accept: the peer may SEND as soon as it is connected. */
	return conn_post_recv(conn);
}

static void conn_free_buf(void *buf, struct ferry_mr *mr)
{
	if (mr && ferry_dereg_mr(mr))
		ping_error("ferry_dereg_mr: %s", strerror(errno));
	if (buf)
		ferry_free(buf);
}

void ping_conn_teardown(struct ping_conn *conn)
{
	if (conn->qp_created)
		ferry_cm_destroy_qp(conn->id);
	conn_free_buf(conn->source_buf, conn->source_mr);
	conn_free_buf(conn->data_buf, conn->data_mr);
	conn_free_buf(conn->send_buf, conn->send_mr);
	conn_free_buf(conn->recv_buf, conn->recv_mr);
	if (conn->cq && ferry_destroy_cq(conn->cq))
		ping_error("ferry_destroy_cq: %s", strerror(errno));
	if (conn->comp_channel && ferry_destroy_comp_channel(conn->comp_channel))
		ping_error("ferry_destroy_comp_channel: %s", strerror(errno));
	if (conn->pd && ferry_dealloc_pd(conn->pd))
		ping_error("ferry_dealloc_pd: %s", strerror(errno));
	ping_conn_init(conn, conn->channel, conn->id);
}

void ping_conn_param_init(struct ferry_conn_param *param)
{
	memset(param, 0, sizeof(*param));
	param->responder_resources = 1;
	param->initiator_depth = 1;
	param->retry_count = 7;
	param->rnr_retry_count = 7;
}

/* --- completions --- */

static int conn_handle_recv(struct ping_conn *conn, const struct ferry_wc *wc)
{
	if (wc->byte_len != PING_ADVERT_LEN) {
		ping_error("received %u bytes, expected a %d-byte buffer advertisement",
			   wc->byte_len, PING_ADVERT_LEN);
		return -1;
	}
	if (conn->advert_ready) {
		ping_error("protocol error: a second advertisement before the first was used");
		return -1;
	}
	ping_advert_decode(conn->recv_buf, &conn->peer_advert);
	conn->advert_ready = true;
	ping_debug("received advertisement: addr %#llx rkey %#x size %u",
		   (unsigned long long)conn->peer_advert.addr,
		   conn->peer_advert.rkey, conn->peer_advert.size);
	/* Repost at once: the peer's next SEND may follow our next post closely. */
	return conn_post_recv(conn);
}

static int conn_handle_wc(struct ping_conn *conn, const struct ferry_wc *wc)
{
	if (wc->status == FERRY_WC_WR_FLUSH_ERR) {
		conn_mark_closed(conn, "the connection was flushed");
		return 0;
	}
	if (wc->status != FERRY_WC_SUCCESS) {
		ping_error("%s failed: %s (status %d)",
			   conn_wr_name(wc->wr_id, wc->opcode),
			   ferry_wc_status_str(wc->status), wc->status);
		conn_mark_closed(conn, "a work request failed");
		return -1;
	}
	switch (wc->wr_id) {
	case CONN_WR_RECV:
		return conn_handle_recv(conn, wc);
	case CONN_WR_SEND:
		conn->send_busy = false;
		return 0;
	case CONN_WR_RDMA:
		conn->rdma_busy = false;
		return 0;
	}
	ping_error("completion of unknown work request %llu",
		   (unsigned long long)wc->wr_id);
	return -1;
}

/* Poll the CQ empty; returns the number of completions or -1. */
static int conn_poll_cq(struct ping_conn *conn)
{
	struct ferry_wc wc[CONN_CQ_DEPTH];
	int n, i, total = 0;

	do {
		n = ferry_poll_cq(conn->cq, CONN_CQ_DEPTH, wc);
		if (n < 0) {
			ping_error("ferry_poll_cq: %s", strerror(errno));
			return -1;
		}
		for (i = 0; i < n; i++)
			if (conn_handle_wc(conn, &wc[i]))
				return -1;
		total += n;
	} while (n == CONN_CQ_DEPTH);
	return total;
}

/* --- CM events --- */

/*
 * Take one event off the channel.  Events of other ids go to the callback;
 * ours are acked here and returned through *ours_p, *type_p, *status_p.
 */
static int conn_take_cm_event(struct ping_conn *conn, bool *ours_p,
			      enum ferry_cm_event_type *type_p, int *status_p)
{
	struct ferry_cm_event *event;
	enum ferry_cm_event_type type;

	*ours_p = false;
	if (ferry_get_cm_event(conn->channel, &event)) {
		ping_error("ferry_get_cm_event: %s", strerror(errno));
		return -1;
	}
	if (event->id != conn->id) {
		if (conn->other_event_cb)
			conn->other_event_cb(event, conn->other_event_arg);
		else
			ferry_ack_cm_event(event);
		return 0;
	}
	type = event->event;
	*status_p = event->status;
	ferry_ack_cm_event(event);
	ping_debug("cm event %s (status %d)", ferry_event_str(type), *status_p);
	if (type == FERRY_CM_EVENT_DISCONNECTED) {
		conn->disconnected = true;
		conn_mark_closed(conn, "the peer disconnected");
	} else if (type == FERRY_CM_EVENT_DEVICE_REMOVAL)
		conn_mark_closed(conn, "the device was removed");
	*ours_p = true;
	*type_p = type;
	return 0;
}

/* Wait up to @timeout_ms (-1: forever) for @fd to be readable; 0: timeout. */
int ping_fd_wait(int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int n;

	for (;;) {
		if (ping_interrupted) {
			errno = EINTR;
			return -1;
		}
		n = poll(&pfd, 1, timeout_ms);
		if (n >= 0)
			return n;
		if (errno != EINTR) {
			ping_error("poll: %s", strerror(errno));
			return -1;
		}
	}
}

int ping_conn_wait_cm(struct ping_conn *conn, int timeout_ms,
		      enum ferry_cm_event_type *type_p, int *status_p)
{
	uint64_t deadline = monotime_ns() + (uint64_t)timeout_ms * 1000000u;
	bool ours = false;
	int left = timeout_ms, n;

	while (!ours) {
		if (timeout_ms >= 0) {
			uint64_t now = monotime_ns();

			left = now >= deadline ? 0 : (int)((deadline - now) / 1000000u) + 1;
		}
		n = ping_fd_wait(conn->channel->fd, left);
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (conn_take_cm_event(conn, &ours, type_p, status_p))
			return -1;
	}
	return 0;
}

/* Sleep until a completion event or a CM event, and take it. */
static int conn_sleep(struct ping_conn *conn)
{
	struct pollfd pfd[2] = {
		{ .fd = conn->comp_channel->fd, .events = POLLIN },
		{ .fd = conn->channel->fd, .events = POLLIN },
	};
	enum ferry_cm_event_type type;
	struct ferry_cq *cq;
	void *cq_context;
	bool ours;
	int status;

	if (poll(pfd, 2, -1) < 0) {
		if (errno == EINTR)
			return 0;
		ping_error("poll: %s", strerror(errno));
		return -1;
	}
	if (pfd[0].revents) {
		if (ferry_get_cq_event(conn->comp_channel, &cq, &cq_context)) {
			ping_error("ferry_get_cq_event: %s", strerror(errno));
			return -1;
		}
		ferry_ack_cq_events(cq, 1);
	}
	if (pfd[1].revents)
		return conn_take_cm_event(conn, &ours, &type, &status);
	return 0;
}

/* Make progress: completions first, then a short spin, then sleep. */
static int conn_progress(struct ping_conn *conn)
{
	uint64_t deadline;
	int n;

	n = conn_poll_cq(conn);
	if (n != 0)
		return n < 0 ? -1 : 0;
	deadline = monotime_ns() + CONN_SPIN_NS;
	while (monotime_ns() < deadline && !ping_interrupted) {
		n = conn_poll_cq(conn);
		if (n != 0)
			return n < 0 ? -1 : 0;
	}
	if (ferry_req_notify_cq(conn->cq, 0)) {
		ping_error("ferry_req_notify_cq: %s", strerror(errno));
		return -1;
	}
	/* A completion that came before the arm raises no event: poll again. */
	n = conn_poll_cq(conn);
	if (n != 0)
		return n < 0 ? -1 : 0;
	return conn_sleep(conn);
}

/* One step of waiting: PING_OK, or why the wait must end. */
static int conn_step(struct ping_conn *conn)
{
	if (ping_interrupted)
		return PING_STOPPED;
	if (conn->closed)
		return PING_CLOSED;
	if (conn_progress(conn))
		return PING_FAIL;
	return PING_OK;
}

/* --- rping's operations --- */

int ping_conn_send_advert(struct ping_conn *conn, const char *buf,
			  const struct ferry_mr *mr, uint32_t size)
{
	struct ping_advert advert = {
		.addr = (uintptr_t)buf,
		.rkey = mr->rkey,
		.size = size,
	};
	struct ferry_sge sge = {
		.addr = (uintptr_t)conn->send_buf,
		.length = PING_ADVERT_LEN,
		.lkey = conn->send_mr->lkey,
	};
	struct ferry_send_wr wr = {
		.wr_id = CONN_WR_SEND,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = FERRY_WR_SEND,
		.send_flags = FERRY_SEND_SIGNALED,
	};
	struct ferry_send_wr *bad_wr;
	int status;

	/* send_buf is the transport's until the previous SEND completed. */
	while (conn->send_busy)
		if ((status = conn_step(conn)) != PING_OK)
			return status;
	if (conn->closed)
		return PING_CLOSED;
	ping_advert_encode(&advert, conn->send_buf);
	if (ferry_post_send(conn->id->qp, &wr, &bad_wr)) {
		ping_error("ferry_post_send(SEND): %s", strerror(errno));
		return PING_FAIL;
	}
	conn->send_busy = true;
	ping_debug("sent advertisement: addr %p rkey %#x size %u", (void *)buf,
		   mr->rkey, size);
	return PING_OK;
}

int ping_conn_wait_advert(struct ping_conn *conn, struct ping_advert *advert_p)
{
	int status;

	while (!conn->advert_ready)
		if ((status = conn_step(conn)) != PING_OK)
			return status;
	*advert_p = conn->peer_advert;
	conn->advert_ready = false;
	return PING_OK;
}

int ping_conn_rdma(struct ping_conn *conn, bool write, uint32_t len,
		   const struct ping_advert *remote)
{
	struct ferry_sge sge = {
		.addr = (uintptr_t)conn->data_buf,
		.length = len,
		.lkey = conn->data_mr->lkey,
	};
	struct ferry_send_wr wr = {
		.wr_id = CONN_WR_RDMA,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = write ? FERRY_WR_RDMA_WRITE : FERRY_WR_RDMA_READ,
		.send_flags = FERRY_SEND_SIGNALED,
		.wr.rdma.remote_addr = remote->addr,
		.wr.rdma.rkey = remote->rkey,
	};
	struct ferry_send_wr *bad_wr;
	int status;

	if (ferry_post_send(conn->id->qp, &wr, &bad_wr)) {
		ping_error("ferry_post_send(%s): %s", write ? "RDMA WRITE" : "RDMA READ",
			   strerror(errno));
		return PING_FAIL;
	}
	conn->rdma_busy = true;
	while (conn->rdma_busy)
		if ((status = conn_step(conn)) != PING_OK)
			return status;
	return PING_OK;
}

void ping_conn_disconnect(struct ping_conn *conn)
{
	enum ferry_cm_event_type type;
	int status;

	if (conn->disconnected)
		return;
	if (ferry_disconnect(conn->id)) {
		ping_debug("ferry_disconnect: %s", strerror(errno));
		return;
	}
	/* Our own DISCONNECTED comes once the peer has been told. */
	while (!conn->disconnected)
		if (ping_conn_wait_cm(conn, CONN_DISCONNECT_WAIT_MS, &type, &status))
			break;
}
