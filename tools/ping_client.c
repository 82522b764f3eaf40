/*
 * ping_client.c - the client side of rping's protocol: resolve, connect,
 * then for each ping advertise the source, wait for the go-ahead, advertise
 * the sink, wait for the go-ahead, and check what the server wrote.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ping.h"

/* Why an event other than the one expected ended @step, in words. */
static void client_report_event(const char *step, enum ferry_cm_event_type type,
				int status)
{
	int err = status < 0 ? -status : status;

	switch (type) {
	case FERRY_CM_EVENT_REJECTED:
		ping_error("%s: connection refused by %s port %u (no server listening?)",
			   step, ping_opts.addr, ping_opts.port);
		return;
	case FERRY_CM_EVENT_UNREACHABLE:
		ping_error("%s: %s port %u is unreachable: %s", step, ping_opts.addr,
			   ping_opts.port, err ? strerror(err) : "no reason given");
		return;
	case FERRY_CM_EVENT_ADDR_ERROR:
	case FERRY_CM_EVENT_ROUTE_ERROR:
	case FERRY_CM_EVENT_CONNECT_ERROR:
		ping_error("%s: %s: %s", step, ferry_event_str(type),
			   err ? strerror(err) : "no reason given");
		return;
	default:
		ping_error("%s: unexpected event %s (status %d)", step,
			   ferry_event_str(type), status);
	}
}

/* Wait for event @want of the connection's id; anything else is an error. */
static int client_expect(struct ping_conn *conn, enum ferry_cm_event_type want,
			 int timeout_ms, const char *step)
{
	enum ferry_cm_event_type type;
	int status;

	if (ping_conn_wait_cm(conn, timeout_ms, &type, &status)) {
		if (errno == ETIMEDOUT)
			ping_error("%s: no answer from %s port %u within %d ms", step,
				   ping_opts.addr, ping_opts.port, timeout_ms);
		else if (errno == EINTR)
			ping_error("%s: interrupted", step);
		return -1;
	}
	if (type != want) {
		client_report_event(step, type, status);
		return -1;
	}
	return 0;
}

static int client_connect(struct ping_conn *conn)
{
	struct sockaddr_storage dst, src;
	struct ferry_conn_param param;
	struct ferry_cm_id *id = conn->id;

	if (ping_addr_parse(ping_opts.addr, ping_opts.port, false, &dst))
		return -1;
	if (ping_opts.src_addr && ping_addr_parse(ping_opts.src_addr, 0, false, &src))
		return -1;
	if (ferry_resolve_addr(id, ping_opts.src_addr ? (struct sockaddr *)&src : NULL,
			       (struct sockaddr *)&dst, PING_CM_TIMEOUT_MS)) {
		ping_error("ferry_resolve_addr(%s): %s",
			   ping_addr_str((struct sockaddr *)&dst), strerror(errno));
		return -1;
	}
	if (client_expect(conn, FERRY_CM_EVENT_ADDR_RESOLVED, PING_CONNECT_TIMEOUT_MS,
			  "ferry_resolve_addr"))
		return -1;
	if (ferry_resolve_route(id, PING_CM_TIMEOUT_MS)) {
		ping_error("ferry_resolve_route: %s", strerror(errno));
		return -1;
	}
	if (client_expect(conn, FERRY_CM_EVENT_ROUTE_RESOLVED, PING_CONNECT_TIMEOUT_MS,
			  "ferry_resolve_route"))
		return -1;
	ping_debug("resolved %s", ping_addr_str(ferry_get_peer_addr(id)));
	if (ping_conn_setup(conn, ping_opts.size, true))
		return -1;
	ping_conn_param_init(&param);
	if (ferry_connect(id, &param)) {
		ping_error("ferry_connect: %s", strerror(errno));
		return -1;
	}
	if (client_expect(conn, FERRY_CM_EVENT_ESTABLISHED, PING_CONNECT_TIMEOUT_MS,
			  "ferry_connect"))
		return -1;
	ping_debug("connected from %s", ping_addr_str(ferry_get_local_addr(id)));
	return 0;
}

/* Report the first byte where the sink differs from the source. */
static int client_validate(const struct ping_conn *conn, unsigned long ping)
{
	size_t i;

	if (memcmp(conn->source_buf, conn->data_buf, conn->size) == 0)
		return 0;
	for (i = 0; conn->source_buf[i] == conn->data_buf[i]; i++)
		;
	ping_error("data mismatch in ping %lu: byte %zu is %#04x, expected %#04x",
		   ping, i, (unsigned char)conn->data_buf[i],
		   (unsigned char)conn->source_buf[i]);
	return -1;
}

/* One ping; returns an enum ping_status. */
static int client_ping(struct ping_conn *conn, unsigned long ping,
		       struct ping_stats *stats)
{
	struct ping_advert go_ahead;
	uint64_t start;
	int status;

	ping_pattern_fill(conn->source_buf, conn->size, ping);
	if (ping_opts.validate)
		memset(conn->data_buf, 0, conn->size);
	start = monotime_ns();
	status = ping_conn_send_advert(conn, conn->source_buf, conn->source_mr,
				       (uint32_t)conn->size);
	if (status == PING_OK)
		status = ping_conn_wait_advert(conn, &go_ahead);
	if (status == PING_OK)
		status = ping_conn_send_advert(conn, conn->data_buf, conn->data_mr,
					       (uint32_t)conn->size);
	if (status == PING_OK)
		status = ping_conn_wait_advert(conn, &go_ahead);
	if (status != PING_OK)
		return status;
	ping_stats_add(stats, monotime_ns() - start);
	if (ping_opts.validate && client_validate(conn, ping))
		return PING_FAIL;
	if (ping_opts.verbose)
		printf("ping data: %.*s\n", (int)strnlen(conn->data_buf, conn->size),
		       conn->data_buf);
	return PING_OK;
}

static int client_ping_loop(struct ping_conn *conn, struct ping_stats *stats)
{
	unsigned long ping;
	int status = PING_OK;

	for (ping = 0; !ping_opts.count || ping < ping_opts.count; ping++) {
		status = client_ping(conn, ping, stats);
		if (status != PING_OK)
			break;
	}
	switch (status) {
	case PING_CLOSED:
		ping_error("connection to %s port %u lost during ping %lu: %s",
			   ping_opts.addr, ping_opts.port, ping, conn->closed_why);
		return -1;
	case PING_FAIL:
		return -1;
	}
	return 0;	/* done, or stopped by a signal */
}

int ping_client_run(void)
{
	struct ferry_event_channel *channel;
	struct ping_stats *stats;
	struct ferry_cm_id *id;
	struct ping_conn conn;
	int rc = 1;

	stats = ping_stats_new();
	if (!stats) {
		ping_error("out of memory");
		return 1;
	}
	channel = ferry_create_event_channel();
	if (!channel) {
		ping_error("ferry_create_event_channel: %s", strerror(errno));
		goto err_free_stats;
	}
	if (ferry_create_id(channel, &id, NULL, FERRY_PS_TCP)) {
		ping_error("ferry_create_id: %s", strerror(errno));
		goto err_destroy_channel;
	}
	ping_conn_init(&conn, channel, id);
	if (client_connect(&conn) == 0) {
		rc = client_ping_loop(&conn, stats) ? 1 : 0;
		ping_conn_disconnect(&conn);
		ping_stats_print(stats, stdout);
	}
	ping_conn_teardown(&conn);
	ferry_destroy_id(id);
err_destroy_channel:
	ferry_destroy_event_channel(channel);
err_free_stats:
	ping_stats_free(stats);
	return rc;
}
