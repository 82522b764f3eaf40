/*
 * ping.h - what the pieces of ferry-ping share: options, rping's wire format
 * (ping_wire.c), round-trip statistics (ping_stats.c), one connection's
 * resources and progress (ping_conn.c), and the two roles (ping_client.c,
 * ping_server.c).
 *
 * The protocol is rping's (librdmacm examples; man/ferry-ping.1), so
 * that ferry-ping and rping talk to each other over the verbs transport:
 *
 *   client                               server
 *   SEND advert(source)  ------------->  RDMA READ source -> buffer
 *                        <-------------  SEND go-ahead
 *   SEND advert(sink)    ------------->  RDMA WRITE buffer -> sink
 *                        <-------------  SEND go-ahead
 *   compare sink with source (-V), print it (-v)
 *
 * Every message is a 16-byte advertisement; each side keeps one receive
 * posted (before connecting / accepting) and reposts it as soon as it
 * completes.
 */
#ifndef FERRY_PING_H
#define FERRY_PING_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include <ferry/cm.h>

#include "monotime.h"

#define PING_PROG "ferry-ping"
#define PING_DEFAULT_PORT 7174
#define PING_DEFAULT_SIZE 64	/* rping's default */
#define PING_MIN_SIZE 23	/* "rdma-ping-2147483647: " and its NUL */
#define PING_MAX_SIZE 65536
#define PING_ADVERT_LEN 16
#define PING_CM_TIMEOUT_MS 2000	/* address and route resolution */
#define PING_CONNECT_TIMEOUT_MS 10000	/* connect / accept to ESTABLISHED */

/* Everything the command line sets. */
struct ping_opts {
	bool server;			/* -s; else client (-c) */
	const char *addr;		/* -a: server bind / client destination */
	const char *src_addr;		/* -I: client source address */
	uint16_t port;			/* -p */
	unsigned long count;		/* -C; 0: until interrupted */
	size_t size;			/* -S: bytes of each ping */
	bool verbose;			/* -v: print each ping's data */
	bool validate;			/* -V: compare sink with source */
	bool debug;			/* -d: trace the steps on stderr */
	bool persistent;		/* -P: serve clients one after another */
	bool quiet;			/* -q: only the summary */
};

extern struct ping_opts ping_opts;
/* Set by SIGINT / SIGTERM: stop after the current step, print the summary. */
extern volatile sig_atomic_t ping_interrupted;

void ping_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ping_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "addr port N" of @sa, in a static buffer. */
const char *ping_addr_str(const struct sockaddr *sa);
int ping_addr_parse(const char *host, uint16_t port, bool passive,
		    struct sockaddr_storage *ss_p);

/* --- ping_wire.c: rping's messages --- */

/* A buffer advertisement; 16 bytes big-endian on the wire. */
struct ping_advert {
	uint64_t addr;
	uint32_t rkey;
	uint32_t size;
};

void ping_advert_encode(const struct ping_advert *advert,
			uint8_t out[PING_ADVERT_LEN]);
void ping_advert_decode(const uint8_t in[PING_ADVERT_LEN],
			struct ping_advert *advert_p);
/* Fill @buf with ping number @ping's text: "rdma-ping-N: ABC...", NUL-ended. */
void ping_pattern_fill(char *buf, size_t size, unsigned long ping);

/* --- ping_stats.c: round-trip times --- */

struct ping_stats;

struct ping_stats *ping_stats_new(void);
void ping_stats_free(struct ping_stats *stats);
void ping_stats_add(struct ping_stats *stats, uint64_t ns);
uint64_t ping_stats_count(const struct ping_stats *stats);
/* The @q quantile (0 < q <= 1) in ns, within 1/128 of the true sample. */
uint64_t ping_stats_quantile(const struct ping_stats *stats, double q);
void ping_stats_print(const struct ping_stats *stats, FILE *out);

/* --- ping_conn.c: one connection --- */

/* What the waiting calls return. */
enum ping_status {
	PING_FAIL = -1,		/* an error, already reported */
	PING_OK = 0,
	PING_CLOSED = 1,	/* the connection is gone: conn->closed_why */
	PING_STOPPED = 2,	/* interrupted by a signal */
};

/* Wait up to @timeout_ms (-1: forever) for @fd to poll readable: 1, 0 on
 * timeout, -1 when interrupted or on error (reported). */
int ping_fd_wait(int fd, int timeout_ms);

/*
 * Called with CM events that are not about the connection being served
 * (a server gets new requests this way); the callee acks @event.
 */
typedef void (*ping_cm_event_cb)(struct ferry_cm_event *event, void *arg);

struct ping_conn {
	struct ferry_event_channel *channel;	/* the CM's, shared */
	struct ferry_cm_id *id;
	ping_cm_event_cb other_event_cb;
	void *other_event_arg;

	struct ferry_pd *pd;
	struct ferry_comp_channel *comp_channel;
	struct ferry_cq *cq;
	bool qp_created;

	uint8_t *recv_buf;	/* one 16-byte receive, always posted */
	uint8_t *send_buf;	/* the advertisement being sent */
	char *data_buf;		/* server: READ target / WRITE source; client: sink */
	char *source_buf;	/* client only: what the server reads */
	size_t size;		/* bytes of data_buf and source_buf */
	struct ferry_mr *recv_mr, *send_mr, *data_mr, *source_mr;

	/* Progress, updated from completions and CM events. */
	struct ping_advert peer_advert;	/* the last one received */
	bool advert_ready;		/* peer_advert not consumed yet */
	bool send_busy;			/* send_buf owned by the transport */
	bool rdma_busy;			/* a READ or WRITE is outstanding */
	bool closed;			/* disconnected or flushed */
	bool disconnected;		/* DISCONNECTED event seen */
	char closed_why[128];
};

/* A connection of @id, whose events come on @channel; nothing made yet. */
void ping_conn_init(struct ping_conn *conn, struct ferry_event_channel *channel,
		    struct ferry_cm_id *id);
/* PD, completion channel, CQ, QP on the id's device, buffers, one receive. */
int ping_conn_setup(struct ping_conn *conn, size_t size, bool client);
/* Release what setup made, even partly (not the id). */
void ping_conn_teardown(struct ping_conn *conn);

/* The connection parameters of rping, for connect and accept. */
void ping_conn_param_init(struct ferry_conn_param *param);

/*
 * Wait for the next CM event of the connection's id (events of other ids go
 * to the callback).  Returns 0 with its type and status, or -1 with errno
 * ETIMEDOUT after @timeout_ms (-1: none), or -1 when interrupted or on an
 * error (reported).
 */
int ping_conn_wait_cm(struct ping_conn *conn, int timeout_ms,
		      enum ferry_cm_event_type *type_p, int *status_p);

/* Each returns an enum ping_status. */
int ping_conn_send_advert(struct ping_conn *conn, const char *buf,
			  const struct ferry_mr *mr, uint32_t size);
int ping_conn_wait_advert(struct ping_conn *conn, struct ping_advert *advert_p);
/* RDMA READ (@write false) or WRITE of @len bytes of data_buf; waits. */
int ping_conn_rdma(struct ping_conn *conn, bool write, uint32_t len,
		   const struct ping_advert *remote);
/* Disconnect and wait a little for DISCONNECTED, so the peer sees it first. */
void ping_conn_disconnect(struct ping_conn *conn);

/* --- the roles; each returns the exit status --- */

int ping_client_run(void);
int ping_server_run(void);

#endif /* FERRY_PING_H */
