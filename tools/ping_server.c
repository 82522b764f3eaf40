/*
 * ping_server.c - the server side of rping's protocol: listen, accept a
 * client, and per ping RDMA-READ its source, send a go-ahead, RDMA-WRITE the
 * data into its sink, send a go-ahead; until the client disconnects.
 *
 * One client at a time.  Requests that arrive meanwhile wait in a queue (the
 * CM reports them on the same channel as the served connection's events);
 * without -P the server ends after its first client and refuses the rest.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "ping.h"

#define SERVER_BACKLOG 16
#define SERVER_MAX_PENDING 16

struct ping_server {
	struct ferry_event_channel *channel;
	struct ferry_cm_id *listen_id;
	/* Requests waiting for their turn, oldest first. */
	struct ferry_cm_id *pending[SERVER_MAX_PENDING];
	unsigned int npending;
};

static void server_refuse(struct ferry_cm_id *id)
{
	if (ferry_reject(id, NULL, 0))
		ping_debug("ferry_reject: %s", strerror(errno));
	ferry_destroy_id(id);
}

/* Events that are not about the connection being served. */
static void server_on_event(struct ferry_cm_event *event, void *arg)
{
	struct ping_server *srv = arg;
	struct ferry_cm_id *id = event->id;
	enum ferry_cm_event_type type = event->event;
	int status = event->status;
	unsigned int i;

	ferry_ack_cm_event(event);	/* frees it: only the copies above from here */
	ping_debug("cm event %s (status %d) for %s", ferry_event_str(type), status,
		   id == srv->listen_id ? "the listener" : "a request");
	if (type == FERRY_CM_EVENT_CONNECT_REQUEST) {
		if (srv->npending == SERVER_MAX_PENDING) {
			server_refuse(id);
			return;
		}
		srv->pending[srv->npending++] = id;
		return;
	}
	/* A queued requester that gave up: forget it. */
	for (i = 0; i < srv->npending; i++) {
		if (srv->pending[i] != id)
			continue;
		memmove(&srv->pending[i], &srv->pending[i + 1],
			(srv->npending - i - 1) * sizeof(srv->pending[0]));
		srv->npending--;
		ferry_destroy_id(id);
		return;
	}
}

/* The next request: a queued one, or wait for one.  NULL when interrupted. */
static struct ferry_cm_id *server_next_request(struct ping_server *srv)
{
	struct ferry_cm_event *event;
	struct ferry_cm_id *id;

	while (srv->npending == 0) {
		if (ping_fd_wait(srv->channel->fd, -1) < 0)
			return NULL;
		if (ferry_get_cm_event(srv->channel, &event)) {
			ping_error("ferry_get_cm_event: %s", strerror(errno));
			return NULL;
		}
		server_on_event(event, srv);
	}
	id = srv->pending[0];
	memmove(&srv->pending[0], &srv->pending[1],
		(srv->npending - 1) * sizeof(srv->pending[0]));
	srv->npending--;
	return id;
}

/* One ping, as the server sees it; returns an enum ping_status. */
static int server_ping(struct ping_conn *conn, const struct ping_advert *source)
{
	struct ping_advert sink;
	uint32_t len;
	int status;

	status = ping_conn_rdma(conn, false, source->size, source);
	if (status != PING_OK)
		return status;
	if (ping_opts.verbose)
		printf("server ping data: %.*s\n",
		       (int)strnlen(conn->data_buf, source->size), conn->data_buf);
	status = ping_conn_send_advert(conn, conn->data_buf, conn->data_mr,
				       (uint32_t)conn->size);
	if (status == PING_OK)
		status = ping_conn_wait_advert(conn, &sink);
	if (status != PING_OK)
		return status;
	len = source->size < sink.size ? source->size : sink.size;
	status = ping_conn_rdma(conn, true, len, &sink);
	if (status == PING_OK)
		status = ping_conn_send_advert(conn, conn->data_buf, conn->data_mr,
					       (uint32_t)conn->size);
	return status;
}

/*
 * Serve pings until the client disconnects between two of them (the normal
 * end).  Returns 0, or -1 after reporting what went wrong.
 */
static int server_ping_loop(struct ping_conn *conn, const char *peer,
			    unsigned long *served_p)
{
	struct ping_advert source;
	int status;

	for (;;) {
		status = ping_conn_wait_advert(conn, &source);
		if (status == PING_CLOSED || status == PING_STOPPED)
			return 0;
		if (status != PING_OK)
			return -1;
		if (source.size == 0 || source.size > conn->size) {
			ping_error("client %s advertised a %u-byte buffer; valid sizes are 1 to %zu",
				   peer, source.size, conn->size);
			return -1;
		}
		status = server_ping(conn, &source);
		if (status == PING_CLOSED) {
			ping_error("connection from %s lost during ping %lu: %s", peer,
				   *served_p, conn->closed_why);
			return -1;
		}
		if (status != PING_OK)
			return status == PING_STOPPED ? 0 : -1;
		++*served_p;
	}
}

/* Accept @id and serve it; the id is destroyed.  Returns 0 or -1. */
static int server_serve(struct ping_server *srv, struct ferry_cm_id *id)
{
	enum ferry_cm_event_type type;
	struct ferry_conn_param param;
	unsigned long served = 0;
	struct ping_conn conn;
	char peer[80];
	int status, rc = -1;

	snprintf(peer, sizeof(peer), "%s", ping_addr_str(ferry_get_peer_addr(id)));
	ping_debug("connection request from %s", peer);
	ping_conn_init(&conn, srv->channel, id);
	conn.other_event_cb = server_on_event;
	conn.other_event_arg = srv;
	/* The largest buffer rping allows, so that any client size fits. */
	if (ping_conn_setup(&conn, PING_MAX_SIZE, false)) {
		server_refuse(id);
		ping_conn_teardown(&conn);
		return -1;
	}
	ping_conn_param_init(&param);
	if (ferry_accept(id, &param)) {
		ping_error("ferry_accept(%s): %s", peer, strerror(errno));
		goto out;
	}
	if (ping_conn_wait_cm(&conn, PING_CONNECT_TIMEOUT_MS, &type, &status)) {
		if (errno == ETIMEDOUT)
			ping_error("accepting %s: not established within %d ms", peer,
				   PING_CONNECT_TIMEOUT_MS);
		goto out;
	}
	if (type != FERRY_CM_EVENT_ESTABLISHED) {
		ping_error("accepting %s: %s (status %d)", peer, ferry_event_str(type),
			   status);
		goto out;
	}
	ping_debug("connection from %s established", peer);
	rc = server_ping_loop(&conn, peer, &served);
	ping_conn_disconnect(&conn);
	printf("%s: served %lu pings to %s\n", PING_PROG, served, peer);
out:
	ping_conn_teardown(&conn);
	ferry_destroy_id(id);
	return rc;
}

static int server_listen(struct ping_server *srv)
{
	struct sockaddr_storage addr;

	if (ping_addr_parse(ping_opts.addr ? ping_opts.addr : "0.0.0.0",
			    ping_opts.port, true, &addr))
		return -1;
	srv->channel = ferry_create_event_channel();
	if (!srv->channel) {
		ping_error("ferry_create_event_channel: %s", strerror(errno));
		return -1;
	}
	if (ferry_create_id(srv->channel, &srv->listen_id, srv, FERRY_PS_TCP)) {
		ping_error("ferry_create_id: %s", strerror(errno));
		return -1;
	}
	if (ferry_bind_addr(srv->listen_id, (struct sockaddr *)&addr)) {
		ping_error("ferry_bind_addr(%s): %s",
			   ping_addr_str((struct sockaddr *)&addr), strerror(errno));
		return -1;
	}
	if (ferry_listen(srv->listen_id, SERVER_BACKLOG)) {
		ping_error("ferry_listen(%s): %s",
			   ping_addr_str((struct sockaddr *)&addr), strerror(errno));
		return -1;
	}
	ping_debug("listening on %s", ping_addr_str((struct sockaddr *)&addr));
	return 0;
}

static void server_close(struct ping_server *srv)
{
	while (srv->npending > 0)
		server_refuse(srv->pending[--srv->npending]);
	if (srv->listen_id)
		ferry_destroy_id(srv->listen_id);
	if (srv->channel)
		ferry_destroy_event_channel(srv->channel);
}

int ping_server_run(void)
{
	struct ping_server srv;
	struct ferry_cm_id *id;
	int rc = 1;

	memset(&srv, 0, sizeof(srv));
	if (server_listen(&srv))
		goto out;
	do {
		id = server_next_request(&srv);
		if (!id) {
			/* Interrupted: the normal end of a persistent server. */
			rc = ping_interrupted ? 0 : 1;
			break;
		}
		rc = server_serve(&srv, id) ? 1 : 0;
	} while (ping_opts.persistent && !ping_interrupted);
out:
	server_close(&srv);
	return rc;
}
