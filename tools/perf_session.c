/*
 * perf_session.c - one ferry-perf session between a client and a server
 * process: set-up (HELLO, ferry connection, INFO), then the rows the client
 * planned, one at a time (TEST -> READY -> run -> FINISH -> DONE), then BYE.
 * Whether the two processes were forked by --local or started by hand with
 * -s / -c makes no difference here.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "perf.h"

/* What one side holds for the life of the session. */
struct perf_session {
	const struct perf_opts *opts;
	int ctrl_fd;
	int ferry_fd;
	size_t max_size;		/* largest message of the plan */
	unsigned int transports;	/* 1 << enum perf_transport */
	struct perf_ferry *ferry;
	int tcp_listen_fd;
	uint16_t tcp_port;
	void *bare_map;
	size_t bare_map_size;
	struct perf_bare *bare;
	void *scratch;			/* payload of tcp and shm-bare rows */
	void *scratch2;			/* memcpy target without ferry */
	struct perf_spawner *spawner;	/* stream rows: forks their workers */
};

/*
 * Page-aligned and zeroed.  Alignment matters: glibc's memcpy between
 * buffers whose addresses differ by 16 modulo 4 KiB runs ~20x slower (4K
 * aliasing), which would skew the memcpy yardstick.
 */
static void *perf_xcalloc(size_t size)
{
	size_t rounded = (size + 4095) & ~(size_t)4095;
	void *p = aligned_alloc(4096, rounded);

	if (!p)
		perf_die("out of memory (%zu bytes)", size);
	memset(p, 0, rounded);
	return p;
}

static bool perf_uses(const struct perf_session *s, enum perf_transport tr)
{
	return s->transports & (1u << tr);
}

static void perf_bare_map(struct perf_session *s, int fd)
{
	s->bare_map_size = perf_bare_map_size(s->max_size);
	s->bare_map = mmap(NULL, s->bare_map_size, PROT_READ | PROT_WRITE,
			   MAP_SHARED, fd, 0);
	if (s->bare_map == MAP_FAILED)
		perf_die_errno("mmap (shm-bare)");
	s->bare = perf_bare_attach(s->bare_map, s->max_size);
}

/* Server: the shared mapping of the shm-bare yardstick; returns its fd. */
static int perf_bare_create(struct perf_session *s)
{
	int fd = memfd_create("ferry-perf-bare", MFD_CLOEXEC);

	if (fd < 0)
		perf_die_errno("memfd_create");
	if (ftruncate(fd, (off_t)perf_bare_map_size(s->max_size)) < 0)
		perf_die_errno("ftruncate (memfd)");
	perf_bare_map(s, fd);
	return fd;
}

static void perf_session_open_ferry(struct perf_session *s, const struct perf_msg *hello)
{
	if (s->opts->addr) {	/* the address form: through the CM */
		s->ferry = perf_net_ferry_open(s->opts, hello, s->ctrl_fd);
		return;
	}
	s->ferry = perf_ferry_open(s->max_size, (int)hello->sq_depth,
				   (int)hello->signal_every,
				   (int)hello->inline_max, s->ctrl_fd);
	perf_ferry_connect(s->ferry, s->ferry_fd);
}

static void perf_session_close(struct perf_session *s)
{
	if (s->opts->addr)
		perf_net_disconnect();
	if (s->ferry)
		perf_ferry_close(s->ferry);
	if (s->opts->addr)
		perf_net_close();
	if (s->bare) {
		perf_bare_detach(s->bare);
		munmap(s->bare_map, s->bare_map_size);
	}
	if (s->tcp_listen_fd >= 0)
		close(s->tcp_listen_fd);
	perf_spawner_stop(s->spawner);
	free(s->scratch);
	free(s->scratch2);
}

static void perf_row_describe(const struct perf_row *row, char *buf, size_t len)
{
	char size[16];

	perf_format_size(size, sizeof(size), row->size);
	snprintf(buf, len, "%s %s %s %s %s", perf_test_name(row->test),
		 perf_op_name(row->op), perf_transport_name(row->transport),
		 perf_mode_name(row->mode), size);
}

/*
 * Before the session touches ferry (see perf_spawn.c); the spawner must not
 * keep the control and ferry sockets open.
 */
static void perf_session_start_spawner(struct perf_session *s)
{
	int fds[2] = { s->ctrl_fd, s->ferry_fd };

	s->spawner = perf_spawner_start(s->opts, fds, 2);
}

/* Client: a stream row; the server's worker listens, ours connects. */
static void perf_client_stream_row(struct perf_session *s,
				   const struct perf_row *row,
				   struct perf_result *res)
{
	struct perf_msg msg;

	perf_row_to_msg(row, &msg);
	perf_msg_send(s->ctrl_fd, &msg, -1);
	perf_msg_recv(s->ctrl_fd, &msg, PERF_MSG_READY, NULL);
	if (msg.skipped) {
		res->skipped = true;
		snprintf(res->note, sizeof(res->note),
			 "skipped: the server could not listen (its message is above)");
	} else {
		perf_stream_client(s->spawner, row, (uint16_t)msg.tcp_port, res);
	}
	memset(&msg, 0, sizeof(msg));
	msg.type = PERF_MSG_FINISH;
	perf_msg_send(s->ctrl_fd, &msg, -1);
	perf_msg_recv(s->ctrl_fd, &msg, PERF_MSG_DONE, NULL);
}

/* Client: one row, both sides; returns the result to report. */
static void perf_client_row(struct perf_session *s, const struct perf_row *row,
			    struct perf_result *res)
{
	struct perf_msg msg;
	uint64_t cpu_ns;
	void *src, *dst;

	memset(res, 0, sizeof(*res));
	res->test = row->test;
	res->op = row->op;
	res->transport = row->transport;
	res->mode = row->mode;
	res->size = row->size;
	res->round = row->round;	/* the plan's, not on the wire */
	res->rounds = row->rounds;
	if (row->op == PERF_OP_STREAM) {
		perf_client_stream_row(s, row, res);
		res->round = row->round;	/* the worker's result replaced ours */
		res->rounds = row->rounds;
		return;
	}
	if (row->transport == PERF_TR_MEMCPY) {	/* one process, no peer */
		if (s->ferry) {
			src = perf_ferry_buffers(s->ferry, &dst);
		} else {
			src = s->scratch;
			dst = s->scratch2;
		}
		perf_memcpy_bw(dst, src, row, res);
		return;
	}
	if (row->transport == PERF_TR_FERRY)
		perf_ferry_prepare(s->ferry, row);
	perf_row_to_msg(row, &msg);
	perf_msg_send(s->ctrl_fd, &msg, -1);
	perf_msg_recv(s->ctrl_fd, &msg, PERF_MSG_READY, NULL);
	cpu_ns = perf_cpu_ns();
	switch (row->transport) {
	case PERF_TR_FERRY:
		perf_ferry_client(s->ferry, row, s->ctrl_fd, res);
		break;
	case PERF_TR_TCP:
		perf_tcp_client(s->tcp_port, row, s->scratch, s->ctrl_fd, res);
		break;
	default:
		perf_bare_client(s->bare, row, s->scratch, s->ctrl_fd, res);
		break;
	}
	cpu_ns = perf_cpu_ns() - cpu_ns;
	memset(&msg, 0, sizeof(msg));
	msg.type = PERF_MSG_FINISH;
	perf_msg_send(s->ctrl_fd, &msg, -1);
	perf_msg_recv(s->ctrl_fd, &msg, PERF_MSG_DONE, NULL);
	if (row->test == PERF_TEST_BW && res->bytes)
		res->cpu_s_per_gb = (double)(cpu_ns + msg.cpu_ns) / (double)res->bytes;
	if (row->transport == PERF_TR_FERRY && row->test == PERF_TEST_BW &&
	    (row->op == PERF_OP_SEND || row->op == PERF_OP_WRITE_IMM) &&
	    msg.value != res->iters)
		perf_die("%s stream: the server received %llu of %llu messages",
			 perf_op_name(row->op), (unsigned long long)msg.value,
			 (unsigned long long)res->iters);
}

/* Server: serve one TEST; false when the client said BYE. */
static bool perf_server_row(struct perf_session *s)
{
	struct perf_msg msg;
	struct perf_row row;
	char what[96];
	uint64_t value = 0, cpu_ns;
	ssize_t n;

	do
		n = recv(s->ctrl_fd, &msg, sizeof(msg), MSG_WAITALL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		perf_die_errno("recv (control socket)");
	if (n == 0)
		perf_die("the client closed the control connection (did it exit?)");
	if (n == (ssize_t)sizeof(msg) && msg.type == PERF_MSG_BYE)
		return false;
	if (n != (ssize_t)sizeof(msg) || msg.type != PERF_MSG_TEST)
		perf_die("protocol error: expected TEST, got %#x", msg.type);
	perf_msg_to_row(&msg, s->max_size, &row);
	perf_row_describe(&row, what, sizeof(what));
	/* later than the client's: the client reports and kills us */
	perf_watchdog_arm(s->opts->timeout + 5, what);
	memset(&msg, 0, sizeof(msg));
	if (row.op == PERF_OP_STREAM && s->spawner) {
		char note[96] = "";

		msg.tcp_port = perf_stream_server_start(s->spawner, &row, note,
							sizeof(note));
		msg.skipped = msg.tcp_port == 0;
		if (msg.skipped)
			fprintf(stderr, "%s (server): %s: %s\n", PERF_PROG, what, note);
	} else if (row.transport == PERF_TR_FERRY && s->ferry)
		perf_ferry_prepare(s->ferry, &row);
	else if (row.transport == PERF_TR_BARE && s->bare)
		perf_bare_prepare(s->bare);
	else if (!(row.transport == PERF_TR_TCP && s->tcp_listen_fd >= 0))
		perf_die("protocol error: %s was not set up",
			 perf_transport_name(row.transport));
	msg.type = PERF_MSG_READY;
	perf_msg_send(s->ctrl_fd, &msg, -1);
	cpu_ns = perf_cpu_ns();
	if (row.op == PERF_OP_STREAM)
		value = perf_stream_server_wait(s->spawner);
	else if (row.transport == PERF_TR_FERRY)
		value = perf_ferry_server(s->ferry, &row);
	else if (row.transport == PERF_TR_TCP)
		value = perf_tcp_server(s->tcp_listen_fd, &row, s->scratch);
	else
		perf_bare_server(s->bare, &row, s->scratch, s->ctrl_fd);
	perf_msg_recv(s->ctrl_fd, &msg, PERF_MSG_FINISH, NULL);
	/* up to FINISH: a server's part may end before its client's */
	cpu_ns = perf_cpu_ns() - cpu_ns;
	memset(&msg, 0, sizeof(msg));
	msg.type = PERF_MSG_DONE;
	msg.value = value;
	msg.cpu_ns = cpu_ns;
	perf_msg_send(s->ctrl_fd, &msg, -1);
	perf_watchdog_disarm();
	return true;
}

int perf_session_server(const struct perf_opts *opts, int ctrl_fd, int ferry_fd)
{
	struct perf_session s = { .opts = opts, .ctrl_fd = ctrl_fd,
				  .ferry_fd = ferry_fd, .tcp_listen_fd = -1 };
	struct perf_msg hello, info;
	int bare_fd = -1;

	perf_msg_recv(ctrl_fd, &hello, PERF_MSG_HELLO, NULL);
	perf_watchdog_arm(opts->timeout + 5, "session set-up");
	if (hello.size < PERF_MIN_SIZE || hello.size > PERF_MAX_SIZE ||
	    hello.sq_depth == 0 || hello.signal_every == 0)
		perf_die("protocol error: bad HELLO");
	s.max_size = hello.size;
	s.transports = hello.transports;
	if (hello.stream)
		perf_session_start_spawner(&s);
	s.scratch = perf_xcalloc(s.max_size);
	memset(&info, 0, sizeof(info));
	info.type = PERF_MSG_INFO;
	if (perf_uses(&s, PERF_TR_FERRY)) {
		perf_session_open_ferry(&s, &hello);
		perf_ferry_local_info(s.ferry, &info);
	}
	if (perf_uses(&s, PERF_TR_TCP)) {
		s.tcp_listen_fd = perf_tcp_listen(&s.tcp_port);
		info.tcp_port = s.tcp_port;
	}
	if (perf_uses(&s, PERF_TR_BARE))
		bare_fd = perf_bare_create(&s);
	perf_msg_send(ctrl_fd, &info, bare_fd);
	if (bare_fd >= 0)
		close(bare_fd);
	perf_msg_recv(ctrl_fd, &info, PERF_MSG_INFO, NULL);
	if (s.ferry)
		perf_ferry_set_peer(s.ferry, &info);
	perf_watchdog_disarm();
	while (perf_server_row(&s))
		;
	perf_session_close(&s);
	return 0;
}

int perf_session_client(const struct perf_opts *opts, int ctrl_fd, int ferry_fd,
			const struct perf_row *rows, int nrows)
{
	struct perf_session s = { .opts = opts, .ctrl_fd = ctrl_fd,
				  .ferry_fd = ferry_fd, .tcp_listen_fd = -1 };
	struct perf_msg hello, info;
	struct perf_result res;
	bool stream = false;
	char what[96];
	int bare_fd, i;

	s.max_size = 64;
	for (i = 0; i < nrows; i++) {
		if (rows[i].size > s.max_size)
			s.max_size = rows[i].size;
		if (rows[i].op == PERF_OP_STREAM)
			stream = true;	/* run by workers, not this session */
		else
			s.transports |= 1u << rows[i].transport;
	}
	if (stream)
		perf_session_start_spawner(&s);
	s.scratch = perf_xcalloc(s.max_size);
	s.scratch2 = perf_xcalloc(s.max_size);
	memset(&hello, 0, sizeof(hello));
	hello.type = PERF_MSG_HELLO;
	hello.size = s.max_size;
	hello.transports = s.transports & ~(1u << PERF_TR_MEMCPY);
	hello.stream = stream;
	hello.sq_depth = (uint32_t)opts->sq_depth;
	hello.signal_every = (uint32_t)opts->signal_every;
	hello.inline_max = (uint32_t)opts->inline_max;
	perf_watchdog_arm(opts->timeout, "session set-up");
	perf_msg_send(ctrl_fd, &hello, -1);
	if (perf_uses(&s, PERF_TR_FERRY))
		perf_session_open_ferry(&s, &hello);
	perf_msg_recv(ctrl_fd, &info, PERF_MSG_INFO, &bare_fd);
	s.tcp_port = (uint16_t)info.tcp_port;
	if (s.ferry)
		perf_ferry_set_peer(s.ferry, &info);
	if (perf_uses(&s, PERF_TR_BARE)) {
		if (bare_fd < 0)
			perf_die("protocol error: no shm-bare mapping from the server");
		perf_bare_map(&s, bare_fd);
	}
	if (bare_fd >= 0)
		close(bare_fd);
	memset(&info, 0, sizeof(info));
	info.type = PERF_MSG_INFO;
	if (s.ferry)
		perf_ferry_local_info(s.ferry, &info);
	perf_msg_send(ctrl_fd, &info, -1);
	perf_watchdog_disarm();

	for (i = 0; i < nrows; i++) {
		perf_row_describe(&rows[i], what, sizeof(what));
		perf_watchdog_arm(opts->timeout, what);
		perf_client_row(&s, &rows[i], &res);
		perf_watchdog_disarm();
		perf_report_row(&res);
	}
	memset(&hello, 0, sizeof(hello));
	hello.type = PERF_MSG_BYE;
	perf_msg_send(ctrl_fd, &hello, -1);
	perf_session_close(&s);
	return 0;
}
