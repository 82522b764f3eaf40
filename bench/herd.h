/*
 * bench/herd.h - what bench/herd's pieces share: the request slot and the
 * response on the wire (the same bytes over ferry and over TCP), the
 * key-value table both servers execute against, each client's model of
 * its own keys, and the results the processes leave in shared memory.
 */
#ifndef FERRY_BENCH_HERD_H
#define FERRY_BENCH_HERD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define HERD_KEY_BYTES		16
#define HERD_VALUE_MAX		32
#define HERD_WINDOW_MAX		16	/* slots per client */
#define HERD_CLIENTS_MAX	8
#define HERD_KEYS_PER_CLIENT	4096	/* each client owns a range: its model is exact */
#define HERD_TABLE_BUCKETS	65536	/* open addressing, at most half full */
#define HERD_HOSTILE_EVERY	100	/* --hostile: this often a request the server must refuse */

enum herd_op { HERD_OP_GET = 1, HERD_OP_PUT = 2 };
enum herd_status { HERD_ST_OK = 0, HERD_ST_MISSING = 1, HERD_ST_BAD = 2, HERD_ST_FULL = 3 };

/*
 * One request slot, 64 bytes as in HERD.  The client WRITEs it whole; seq
 * is its last byte, so a server that sees a new seq sees the rest too
 * (the NIC's DMA, and shm's copies of 64 bytes or less, go in address
 * order).  seq is never 0: 0 is a slot never written.
 */
struct herd_req {
	uint8_t key[HERD_KEY_BYTES];
	uint8_t op;			/* enum herd_op */
	uint8_t vlen;			/* PUT: bytes of value */
	uint8_t slot;			/* the slot's index in its window (TCP has no address) */
	uint8_t pad0;
	uint8_t value[HERD_VALUE_MAX];
	uint8_t pad1[11];
	uint8_t seq;
};
_Static_assert(sizeof(struct herd_req) == 64, "a request slot is 64 bytes");

/* The response: a UD SEND (or 36 bytes on the TCP stream). */
struct herd_resp {
	uint8_t seq;			/* the request's */
	uint8_t slot;
	uint8_t status;			/* enum herd_status */
	uint8_t vlen;			/* GET: bytes of value */
	uint8_t value[HERD_VALUE_MAX];
};
_Static_assert(sizeof(struct herd_resp) == 36, "a response is 36 bytes");

/* The key-value table (the server's). */
struct herd_bucket {
	uint8_t key[HERD_KEY_BYTES];
	uint8_t used;
	uint8_t vlen;
	uint8_t value[HERD_VALUE_MAX];
};
struct herd_table {
	struct herd_bucket *buckets;	/* HERD_TABLE_BUCKETS */
};

int herd_table_init(struct herd_table *t, int nclients);
void herd_table_fini(struct herd_table *t);
/* Execute @req (from a peer: checked) and fill @resp. */
void herd_table_execute(struct herd_table *t, const struct herd_req *req,
			struct herd_resp *resp);

/* Key number @id (of all clients' keys) as its 16 bytes, and its first value. */
void herd_key_make(uint32_t id, uint8_t key[HERD_KEY_BYTES]);
uint8_t herd_value_initial(uint32_t id, uint8_t value[HERD_VALUE_MAX]);

/* What a client knows of its own keys, and what it has outstanding. */
struct herd_model {
	uint32_t first_id;			/* its keys: first_id .. + HERD_KEYS_PER_CLIENT */
	uint8_t vlen[HERD_KEYS_PER_CLIENT];
	uint8_t value[HERD_KEYS_PER_CLIENT][HERD_VALUE_MAX];
	uint8_t busy[HERD_KEYS_PER_CLIENT];	/* a request on it is outstanding */
	uint64_t rng;
};

/* One outstanding request of a client's window. */
struct herd_pending {
	struct herd_req req;
	uint32_t key_index;		/* into the model */
	double sent;			/* seconds (herd_now) of the first send */
	double resent;			/* of the last (re)send */
	bool busy;
	bool hostile;			/* a malformed request: HERD_ST_BAD expected */
};

void herd_model_init(struct herd_model *m, int client, uint64_t seed);
/* Draw the next request (95% GET, 5% PUT, uniform over free keys) into @p. */
void herd_model_next(struct herd_model *m, struct herd_pending *p, uint8_t slot, uint8_t seq);
/* Check @resp against the model for @p; update the model on a PUT.  0 or -1 (said why). */
int herd_model_check(struct herd_model *m, struct herd_pending *p, const struct herd_resp *resp);

/* A client's results, in memory shared by every process of the run. */
struct herd_result {
	double start, end;		/* seconds, CLOCK_MONOTONIC */
	uint64_t done;			/* responses checked */
	uint64_t retransmits;		/* UC/UD lose: requests sent again */
	uint64_t stale;			/* responses to a request already answered */
	int failed;
	float *lat_us;			/* [n], in the shared block */
};

struct herd_shared {
	atomic_int stop;		/* set by the parent when every client has exited */
	int nclients;
	struct herd_result res[HERD_CLIENTS_MAX];
};

/* Options of a run. */
struct herd_opts {
	int clients, window, gid_index;
	long iters;			/* requests per client */
	const char *transport;
	bool local;
	bool hostile;			/* one request in HERD_HOSTILE_EVERY malformed */
};

/* A client's window of requests, whatever carries them. */
struct herd_window {
	struct herd_model *model;
	struct herd_pending pend[HERD_WINDOW_MAX];
	uint8_t seq[HERD_WINDOW_MAX];	/* each slot's last seq */
	long issued;
	int window;
	long iters;
	bool hostile;
	struct herd_result *res;
};

int herd_window_init(struct herd_window *cl, const struct herd_opts *o, int client,
		     struct herd_result *res);
void herd_window_fini(struct herd_window *cl);
/* The next request into @slot (NULL when all are issued): send it. */
struct herd_req *herd_window_issue(struct herd_window *cl, uint8_t slot);
/* The same request again, with a new seq (its last was lost, or its answer). */
struct herd_req *herd_window_reissue(struct herd_window *cl, uint8_t slot);
/* A response from the server (unchecked bytes): 0 answered, 1 stale, -1 wrong. */
int herd_window_on_resp(struct herd_window *cl, const struct herd_resp *resp);

double herd_now(void);
/* A shared block for a run of @o (results and latency arrays). */
struct herd_shared *herd_shared_make(const struct herd_opts *o);
void herd_shared_free(struct herd_shared *sh, const struct herd_opts *o);
/* Req/s, p50 and p99 of a run; prints its row. 0, or -1 when a client failed. */
int herd_report_row(struct herd_shared *sh, const struct herd_opts *o, const char *op,
		    const char *transport, double *mreq_p);

/* The TCP request/response loop (bench/herd_tcp.c): the same server logic. */
int herd_tcp_run(const struct herd_opts *o, struct herd_shared *sh);

#endif /* FERRY_BENCH_HERD_H */
