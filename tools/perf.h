/*
 * perf.h - what the pieces of ferry-perf share: options, the control
 * protocol between the two processes, results, and the entry points of each
 * transport (perf_verbs.c, perf_tcp.c, perf_yardstick.c), of the stream
 * socket rows (perf_stream.c, run in worker processes perf_spawn.c forks,
 * or execs under the preload shim: perf_preload.c), of the report
 * (perf_report.c) and of the plot (perf_plot.c).
 *
 * Roles: the client drives (chooses every test, measures, prints); the
 * server answers.  Both run in the same order under the control socket, one
 * test ("row") at a time: TEST -> READY -> run -> FINISH -> DONE.
 */
#ifndef FERRY_PERF_H
#define FERRY_PERF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "monotime.h"

#define PERF_PROG "ferry-perf"
#define PERF_MAX_SIZES 32
#define PERF_MIN_SIZE 8
#define PERF_MAX_SIZE (4u << 20)
#define PERF_MAX_ROUNDS 8		/* rounds a row may be split into */
/* argv[1] of a stream worker exec'd under the shim (not for people) */
#define PERF_WORKER_OPT "--stream-worker"

enum perf_test {
	PERF_TEST_LAT,		/* ping-pong round trip */
	PERF_TEST_BW,		/* one-way stream with a window */
	PERF_TEST_RATE,		/* stream: 64 B sends one way, messages/s */
	PERF_TEST_CONNECT,	/* stream: connect+accept+1 byte each way+close */
	PERF_TEST_COUNT
};

enum perf_op {
	PERF_OP_WRITE,		/* RDMA WRITE; latency: peer spins on last byte */
	PERF_OP_WRITE_IMM,	/* RDMA WRITE with immediate: recv completion */
	PERF_OP_READ,		/* RDMA READ */
	PERF_OP_SEND,		/* SEND / RECV (tcp: send / recv) */
	PERF_OP_FADD,		/* atomic fetch-and-add */
	PERF_OP_CAS,		/* atomic compare-and-swap */
	PERF_OP_COPY,		/* memcpy yardstick */
	PERF_OP_STREAM,		/* stream sockets: ferry_sock_* or BSD calls */
	PERF_OP_COUNT
};

enum perf_transport {
	PERF_TR_FERRY,		/* ferry's shm provider */
	PERF_TR_TCP,		/* kernel TCP loopback */
	PERF_TR_BARE,		/* two processes, one shared mapping */
	PERF_TR_MEMCPY,		/* memcpy in one process */
	PERF_TR_VERBS,		/* ferry over an RDMA device (stream rows only) */
	PERF_TR_PRELOAD,	/* the tcp code under the preload shim (stream) */
	PERF_TR_COUNT
};

enum perf_mode {
	PERF_MODE_BUSY,		/* spin on the CQ / flag */
	PERF_MODE_BLOCK,	/* sleep: completion channel, blocking syscalls */
	PERF_MODE_COUNT
};

enum perf_role {
	PERF_ROLE_LOCAL,
	PERF_ROLE_SERVER,
	PERF_ROLE_CLIENT,
};

/* Everything the command line sets. */
struct perf_opts {
	enum perf_role role;
	bool role_given;
	const char *name;		/* abstract AF_UNIX name */
	const char *addr;		/* -a: the address form (perf_net.c) */
	uint16_t port;			/* -P: the CM's port; control: +1 */
	size_t sizes[PERF_MAX_SIZES];
	int nsizes;			/* 0: 64 B for lat, 64 KiB for bw */
	unsigned int tests;		/* 1 << enum perf_test */
	unsigned int ops;		/* 1 << enum perf_op */
	unsigned int transports;	/* 1 << enum perf_transport; 0: default */
	unsigned int modes;		/* 1 << enum perf_mode; 0: default */
	long iters;			/* latency iterations per row */
	bool iters_given;		/* -n was given */
	long warmup;			/* -1: automatic */
	uint64_t bw_bytes;		/* bandwidth: stop after this many bytes */
	double bw_seconds;		/* ... or after this long */
	int sq_depth;			/* send queue depth = bandwidth window */
	int signal_every;		/* 0: sq_depth / 8 */
	int inline_max;			/* requested max_inline_data */
	int cpus[2];			/* --local: client, server; -1: auto */
	int cpu_self;			/* -s/-c: pin self; -1: no */
	bool no_pin;
	int timeout;			/* seconds a row may take before abort */
	bool json;
	const char *plot;		/* --plot FILE.png, NULL: none */
	const char *verbs_addr;		/* --verbs-addr; NULL: find one */
};

/* Control messages (SOCK_SEQPACKET: one message per send). */
enum perf_msg_type {
	PERF_MSG_HELLO = 0x46505231,	/* client -> server: session config */
	PERF_MSG_INFO,			/* both ways: addresses, keys, port */
	PERF_MSG_TEST,			/* client -> server: run this row */
	PERF_MSG_READY,			/* server -> client */
	PERF_MSG_FINISH,		/* client -> server: my side is done */
	PERF_MSG_DONE,			/* server -> client: value = bytes seen */
	PERF_MSG_BYE,			/* client -> server: end of session */
};

struct perf_msg {
	uint32_t type;
	uint32_t test;
	uint32_t op;
	uint32_t transport;
	uint32_t mode;
	uint32_t transports;		/* HELLO: mask of transports in use */
	uint32_t sq_depth;		/* HELLO */
	uint32_t signal_every;		/* HELLO */
	uint32_t inline_max;		/* HELLO */
	uint32_t rkey;			/* INFO: rkey of the target buffer */
	uint32_t atomic_rkey;		/* INFO */
	uint32_t tcp_port;		/* INFO (server) */
	uint64_t size;			/* HELLO: buffer size; TEST: msg size */
	uint64_t iters;			/* TEST: measured + warm-up iterations */
	uint64_t value;			/* DONE: bytes or messages seen */
	uint64_t addr;			/* INFO: target buffer */
	uint64_t atomic_addr;		/* INFO: atomic target word */
	uint64_t bytes;			/* TEST (bw): byte budget */
	double seconds;			/* TEST (bw): time budget */
	uint32_t stream;		/* HELLO: stream rows follow */
	uint32_t skipped;		/* READY (stream): the server could not listen */
	uint64_t cpu_ns;		/* DONE (bw): the server's CPU time in the row */
};

/* One row of the report. */
struct perf_result {
	enum perf_test test;
	enum perf_op op;
	enum perf_transport transport;
	enum perf_mode mode;
	size_t size;
	uint64_t iters;			/* measured iterations or messages */
	double min_us, p50_us, p99_us;	/* lat */
	double gbit_s, mmsg_s, seconds;	/* bw, rate */
	uint64_t bytes;			/* bw, rate */
	double conn_s;			/* connect */
	unsigned int round, rounds;	/* this row is round @round of @rounds,
					 * run in turns with the other rows of
					 * its test (see perf_report_row) */
	double round_p50_us[PERF_MAX_ROUNDS];	/* lat: each round's p50 */
	double cpu_s_per_gb;		/* bw: both ends' CPU time per 10^9 bytes */
	bool skipped;			/* stream row not run: see note */
	char note[96];			/* why it was skipped */
};

/* A row the client asks for. */
struct perf_row {
	enum perf_test test;
	enum perf_op op;
	enum perf_transport transport;
	enum perf_mode mode;
	size_t size;
	uint64_t iters;			/* lat: measured iterations */
	uint64_t warmup;		/* lat */
	uint64_t bytes;			/* bw */
	double seconds;			/* bw */
	unsigned int round, rounds;	/* round @round (0..) of @rounds */
};

/* --- perf_util.c: time, control messages, errors, pinning --- */

extern const char *perf_role_name;	/* "client" / "server" in messages */
extern volatile int perf_child_pid;	/* --local: killed when we die */

__attribute__((noreturn, format(printf, 1, 2)))
void perf_die(const char *fmt, ...);
__attribute__((noreturn))
void perf_die_errno(const char *call);
void perf_peer_check(int ctrl_fd);

/* Call on every empty turn of a busy loop: looks at the peer now and then. */
static inline void perf_spin_check(int ctrl_fd, unsigned long *spins)
{
	if ((++*spins & 0x3ffff) == 0)
		perf_peer_check(ctrl_fd);
}

void perf_msg_send(int fd, const struct perf_msg *msg, int pass_fd);
void perf_msg_recv(int fd, struct perf_msg *msg, uint32_t type, int *fd_p);

void perf_watchdog_arm(int seconds, const char *what);
void perf_watchdog_disarm(void);

int perf_cpus_allowed(int *cpus, int max);
void perf_pin_self(int cpu);

const char *perf_test_name(enum perf_test test);
const char *perf_op_name(enum perf_op op);
const char *perf_transport_name(enum perf_transport tr);
/* Another name for PERF_TR_FERRY's rows ("ferry-cm" in the address form). */
void perf_transport_rename_ferry(const char *name);
const char *perf_mode_name(enum perf_mode mode);
void perf_format_size(char *buf, size_t len, size_t size);
void perf_row_to_msg(const struct perf_row *row, struct perf_msg *msg);
void perf_msg_to_row(const struct perf_msg *msg, size_t max_size,
		     struct perf_row *row);

/* --- perf_session.c: the two sides of one session --- */

int perf_session_server(const struct perf_opts *opts, int ctrl_fd,
			int ferry_fd);
int perf_session_client(const struct perf_opts *opts, int ctrl_fd,
			int ferry_fd, const struct perf_row *rows, int nrows);

/* --- perf_report.c --- */

void perf_lat_stats(uint64_t *ns, size_t n, struct perf_result *res);
void perf_bw_result(struct perf_result *res, uint64_t bytes, uint64_t msgs,
		    uint64_t elapsed_ns);
void perf_report_begin(bool json, const char *banner, const char *cpus);
void perf_report_row(const struct perf_result *res);
void perf_report_note(const char *transport, const char *note);
void perf_report_ratios(void);
/* The address form: the ferry rows are ferry-cm, the targets issue 16's. */
void perf_report_set_network(bool network);
/* The rows reported so far (for the plot). */
const struct perf_result *perf_report_rows(int *n_p);
bool perf_report_is_json(void);

/* --- perf_plot.c: --plot FILE.png with gnuplot --- */

/* 0 when the png was written; 1 (after saying why) when it was not. */
int perf_plot_write(const char *png);

/* --- perf_spawn.c: worker processes for the stream rows --- */

/*
 * The stream rows run in fresh processes because the socket layer reads
 * FERRY_POLL_US once per process: each row forks a worker with the
 * environment of its mode.  Workers are forked by a spawner process that
 * is itself forked before the session touches ferry, so that they start
 * from a process with no ferry state and no threads.
 */
struct perf_spawner;

struct perf_spawner *perf_spawner_start(const struct perf_opts *opts,
					const int *close_fds, int nclose);
void perf_spawner_stop(struct perf_spawner *sp);
/* Server: start a worker that listens; its port, 0 if it could not. */
uint16_t perf_stream_server_start(struct perf_spawner *sp,
				  const struct perf_row *row, char *note,
				  size_t note_len);
/* Server: wait for the worker of the row; returns the bytes it received. */
uint64_t perf_stream_server_wait(struct perf_spawner *sp);
/* Client: run the row in a worker against the server's @port. */
void perf_stream_client(struct perf_spawner *sp, const struct perf_row *row,
			uint16_t port, struct perf_result *res);
/*
 * A worker exec'd under the shim (argv: PERF_WORKER_OPT server|client FD):
 * read the row from the channel FD, run it, exit.
 */
__attribute__((noreturn))
void perf_stream_worker_main(bool server, int chan_fd);
/* Server worker: the port it listens on (0: it cannot, see @note) ... */
void perf_stream_report_port(int chan_fd, uint16_t port, const char *note);
/* ... and at the end, the bytes it received. */
void perf_stream_report_bytes(int chan_fd, uint64_t bytes);

/* --- perf_stream.c: the stream rows, inside a worker --- */

/* Environment of a worker for @row (FERRY_POLL_US, FERRY_TRANSPORT). */
void perf_stream_setenv(const struct perf_row *row);
/* The address the rows of @tr use; false (and @note) when there is none. */
bool perf_stream_addr(enum perf_transport tr, const char *verbs_addr,
		      struct sockaddr_storage *ss, char *note, size_t note_len);
/* Is there an RDMA device for the ferry-verbs rows? (@note: why not) */
bool perf_stream_verbs_present(char *note, size_t note_len);
/*
 * Server worker: listen, tell @chan_fd the port (0 and a note if it
 * cannot), serve the row, tell the bytes received.
 */
void perf_stream_serve(const struct perf_opts *opts, const struct perf_row *row,
		       int chan_fd);
/* Client worker: run the row against @port; fills @res. */
void perf_stream_run(const struct perf_opts *opts, const struct perf_row *row,
		     uint16_t port, struct perf_result *res);

/* --- perf_preload.c: the tcp+preload rows (the tcp code under the shim) --- */

/* The shim's path into @path; false and a "skipped: ..." @note if none. */
bool perf_preload_find(char *path, size_t len, char *note, size_t note_len);
/* Does the connection @fd run on ferry (shm)?  If not, why in @note. */
bool perf_preload_on_ferry(int fd, char *note, size_t note_len);
/*
 * In a freshly forked worker: exec ferry-perf's worker mode with the shim
 * in LD_PRELOAD, handing down @chan_fd.  Returns only on failure, with a
 * "skipped: ..." @note.
 */
void perf_preload_exec(bool server, int chan_fd, char *note, size_t note_len);
/* Is this the worker mode?  Its role and channel if so. */
bool perf_preload_worker_args(int argc, char **argv, bool *server_p,
			      int *chan_fd_p);

/* --- perf_verbs.c: the ferry transport --- */

struct perf_ferry;

struct perf_ferry *perf_ferry_open(size_t buf_size, int sq_depth,
				   int signal_every, int inline_max,
				   int ctrl_fd);
void perf_ferry_connect(struct perf_ferry *pf, int sock);
void perf_ferry_local_info(struct perf_ferry *pf, struct perf_msg *msg);
void perf_ferry_set_peer(struct perf_ferry *pf, const struct perf_msg *msg);
void *perf_ferry_buffers(struct perf_ferry *pf, void **rbuf_p);
void perf_ferry_prepare(struct perf_ferry *pf, const struct perf_row *row);
void perf_ferry_client(struct perf_ferry *pf, const struct perf_row *row,
		       int ctrl_fd, struct perf_result *res);
uint64_t perf_ferry_server(struct perf_ferry *pf, const struct perf_row *row);
void perf_ferry_close(struct perf_ferry *pf);
struct ferry_cm_id;
struct perf_ferry *perf_ferry_open_cm(struct ferry_cm_id *id, size_t buf_size,
				      int sq_depth, int signal_every, int inline_max,
				      int ctrl_fd);

/*
 * --- perf_net.c: the address form, -s/-c -a ADDR [-P PORT]: between two
 * hosts.  The control connection is kernel TCP to ADDR port PORT+1, the
 * ferry one goes through the CM to ADDR port PORT (so the tcp transport to
 * another host), the tcp rows on ADDR too.
 */

/* Server: listen on the CM (first, so that a client never finds it not
 * yet there), then take the control connection. */
int perf_net_server_start(const struct perf_opts *opts);
/* Client: the control connection (retried while the server starts). */
int perf_net_client_start(const struct perf_opts *opts);
/* Both: the session's ferry connection (the server accepts, the client
 * connects), its objects made on the CM's device. */
struct perf_ferry *perf_net_ferry_open(const struct perf_opts *opts,
				       const struct perf_msg *hello, int ctrl_fd);
/* Before perf_ferry_close: the disconnect; after it, the CM ids freed. */
void perf_net_disconnect(void);
void perf_net_close(void);
/* The CPU time of this process (every thread) so far, in ns. */
uint64_t perf_cpu_ns(void);

/* --- perf_tcp.c: kernel TCP loopback (or the address form's path) --- */

/* The rows' IPv4 address (default 127.0.0.1); false if @addr is not one. */
bool perf_tcp_set_addr(const char *addr);
int perf_tcp_listen(uint16_t *port_p);
void perf_tcp_client(uint16_t port, const struct perf_row *row, void *buf,
		     int ctrl_fd, struct perf_result *res);
uint64_t perf_tcp_server(int listen_fd, const struct perf_row *row, void *buf);

/* --- perf_yardstick.c: bare shared-memory ping-pong and memcpy --- */

struct perf_bare;

size_t perf_bare_map_size(size_t max_size);
struct perf_bare *perf_bare_attach(void *map, size_t max_size);
void perf_bare_detach(struct perf_bare *bare);
void perf_bare_prepare(struct perf_bare *bare);
void perf_bare_client(struct perf_bare *bare, const struct perf_row *row,
		      void *buf, int ctrl_fd, struct perf_result *res);
void perf_bare_server(struct perf_bare *bare, const struct perf_row *row,
		      void *buf, int ctrl_fd);
void perf_memcpy_bw(void *dst, const void *src, const struct perf_row *row,
		    struct perf_result *res);

#endif /* FERRY_PERF_H */
