/*
 * ferry-perf - latency and throughput of ferry's verbs over the shm
 * transport, side by side with kernel TCP loopback, a bare shared-memory
 * ping-pong and memcpy, and of ferry's stream sockets (shm, verbs) beside
 * kernel TCP sockets and TCP sockets moved onto ferry by the preload shim,
 * all measured in the same run.
 *
 * This file: the command line, the plan of rows, and the three ways of
 * getting a client and a server process (--local forks them; -s and -c are
 * started by hand and meet on an abstract AF_UNIX name).  The session itself
 * is perf_session.c; each transport has its own file.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "perf.h"

#define PERF_MAX_ROWS 1024
#define PERF_LAT_BYTES (512u << 20)	/* shrinks -n for large messages */
#define PERF_ALL_FERRY_OPS ((1u << PERF_OP_WRITE) | (1u << PERF_OP_WRITE_IMM) | \
			    (1u << PERF_OP_READ) | (1u << PERF_OP_SEND) | \
			    (1u << PERF_OP_FADD) | (1u << PERF_OP_CAS))
#define PERF_ATOMIC_OPS ((1u << PERF_OP_FADD) | (1u << PERF_OP_CAS))
#define PERF_STREAM_OP (1u << PERF_OP_STREAM)
#define PERF_ALL_TESTS ((1u << PERF_TEST_COUNT) - 1)
#define PERF_PLOT_ITERS 5000		/* --plot: -n of the size sweep */
#define PERF_CONNECT_MAX 1000000	/* connect rows: default -n */
/*
 * Rows run in this many rounds, the rows of one test in turns (ferry,
 * tcp, shm-bare, ferry, tcp, shm-bare, ...), each round a share of the
 * row's iterations or time: a burst of noise on the host, or the host
 * moving the two CPUs apart for a while (this machine's two vCPUs spend
 * stretches on cores that share no cache, where every round trip costs
 * several times more), then falls on both sides of a ratio, not on one
 * row whole.  The report merges a row's rounds (perf_report_row).  Size
 * sweeps (several -S sizes, --plot) run each row once.
 */
#define PERF_ROUNDS 5
#define PERF_RATE_SIZE 64		/* rate rows: message size */

static void perf_usage(FILE *out)
{
	fprintf(out,
"Usage: ferry-perf --local [OPTIONS]     fork a server and a client here\n"
"       ferry-perf -s [-p NAME]          serve one client\n"
"       ferry-perf -c [-p NAME] [OPTIONS] run the tests against a server\n"
"       ferry-perf -s -a ADDR [-P PORT]  serve one client on another host\n"
"       ferry-perf -c -a ADDR [-P PORT] [OPTIONS]\n"
"\n"
"Latency (ping-pong round trip: min, p50, p99 in microseconds) and\n"
"throughput (Gbit/s) of ferry's verbs over the shm transport, and of ferry's\n"
"stream sockets (op stream: latency, throughput, 64 B message rate and\n"
"connection setup rate).  --local also measures, in the same run, kernel TCP\n"
"loopback, the same TCP code under the preload shim (tcp+preload), a bare\n"
"shared-memory ping-pong and memcpy, and prints the ratios the project\n"
"targets.  Each row runs in 5 rounds, the rows of a test taking turns, and\n"
"is printed after its last (one round in size sweeps; see ferry-perf(1)).\n"
"\n"
"Roles:\n"
"  -l, --local            fork a server; pin client and server to two CPUs\n"
"  -s, --server           wait for one client on the abstract socket NAME\n"
"  -c, --client           connect to a server on the abstract socket NAME\n"
"  -p, --name NAME        abstract AF_UNIX name (default \"ferry-perf\")\n"
"  -a, --addr ADDR        the address form, between hosts: the server's IPv4\n"
"                         address; ferry goes through the CM (its tcp\n"
"                         transport to another host), and the tcp rows go\n"
"                         the same path; verbs rows only (ferry-cm, tcp)\n"
"  -P, --port PORT        the address form: the CM's port (default 7480);\n"
"                         the control connection uses PORT+1\n"
"\n"
"What to measure (the client decides; a server ignores these):\n"
"  -t, --test LIST        lat,bw,rate,connect or all (default all); rate\n"
"                         and connect are stream tests\n"
"  -o, --op LIST          write,write_imm,read,send,atomic (= fadd,cas),\n"
"                         verbs (all of those), stream (sockets) or all\n"
"                         (default all); atomics always move 8 bytes\n"
"  -T, --transport LIST   ferry (= ferry-shm),ferry-verbs,tcp,tcp+preload\n"
"                         (= preload),shm-bare,memcpy or all (default all\n"
"                         with --local, ferry with -c); ferry-verbs: stream\n"
"                         rows, when an RDMA device exists; tcp+preload:\n"
"                         stream rows, the tcp code run under\n"
"                         libferry-preload.so (FERRY_PRELOAD_LIB: which one)\n"
"  -S, --size LIST|all    message sizes, 8 B to 4 MiB, k/K and m/M suffixes,\n"
"                         comma-separated; all = powers of two 8..4M\n"
"                         (default 64 for lat, 64K for bw)\n"
"      --busy             busy-poll completions (the default with -c)\n"
"      --block            arm the CQ and sleep in ferry_get_cq_event\n"
"      --both             both (the default of --local for lat; bw is busy)\n"
"  -n, --iters N          latency round trips per row (default 20000; fewer\n"
"                         for messages over 16 KiB: 512 MiB per row at most);\n"
"                         connect: at most N connections (default 1000000)\n"
"  -w, --warmup N         unmeasured round trips first (default n/10, <= 2000)\n"
"  -B, --bytes N          bw: stop after N bytes (default 2G) ...\n"
"  -D, --duration SEC     ... or after SEC seconds (default 0.5); rate the\n"
"                         same; connect runs for twice as long\n"
"  -d, --depth N          send queue depth = bw window (default 128)\n"
"      --signal-every N   signal one send WR in N (default depth/8)\n"
"      --inline N         request N bytes of inline data (default 64; 0: off)\n"
"      --verbs-addr ADDR  ferry-verbs: IPv4 address of an RDMA netdev\n"
"                         (default: that of the first RDMA device's port 1)\n"
"\n"
"Placement and output:\n"
"      --cpus A,B         --local: client on CPU A, server on CPU B\n"
"                         (default: the first two CPUs allowed)\n"
"      --cpu N            -s/-c: pin this process to CPU N\n"
"      --no-pin           do not pin\n"
"      --timeout SEC      abort a row (and kill the peer) after SEC (default 60)\n"
"  -j, --json             one JSON object per line instead of the table\n"
"      --plot FILE.png    also draw stream latency and throughput against\n"
"                         message size (gnuplot); sweeps every size\n"
"  -h, --help             this text\n"
"\n"
"Exit status: 0 success, 1 a call failed or the peer died, 2 bad arguments.\n");
}

__attribute__((noreturn, format(printf, 1, 2)))
static void perf_bad_arg(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", PERF_PROG);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", PERF_PROG);
	exit(2);
}

/* "64", "4k", "1M", "2G" -> bytes; false on anything else. */
static bool perf_parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return false;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B')	/* accept 4Ki, 4KiB, 4KB */
		end += end[0] == 'i' && end[1] == 'B' ? 2 : 1;
	if (*end)
		return false;
	*out = v;
	return true;
}

static long perf_parse_long(const char *s, const char *what, long min, long max)
{
	uint64_t v;

	if (!perf_parse_bytes(s, &v) || v < (uint64_t)min || v > (uint64_t)max)
		perf_bad_arg("%s: '%s' is not a number in %ld..%ld", what, s,
			     min, max);
	return (long)v;
}

static void perf_parse_sizes(struct perf_opts *o, const char *arg)
{
	char *copy = strdup(arg), *tok, *save = NULL;
	uint64_t v;

	o->nsizes = 0;
	if (strcmp(arg, "all") == 0) {
		for (v = PERF_MIN_SIZE; v <= PERF_MAX_SIZE; v <<= 1)
			o->sizes[o->nsizes++] = v;
		free(copy);
		return;
	}
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (!perf_parse_bytes(tok, &v) || v < PERF_MIN_SIZE ||
		    v > PERF_MAX_SIZE)
			perf_bad_arg("-S: '%s' is not a size from 8 to 4M", tok);
		if (o->nsizes == PERF_MAX_SIZES)
			perf_bad_arg("-S: at most %d sizes", PERF_MAX_SIZES);
		o->sizes[o->nsizes++] = v;
	}
	free(copy);
	if (o->nsizes == 0)
		perf_bad_arg("-S: no size given");
}

/* A comma list of names -> bit mask; @names[i] sets @bits[i]. */
static unsigned int perf_parse_list(const char *opt, const char *arg,
				    const char *const *names,
				    const unsigned int *bits, int n)
{
	char *copy = strdup(arg), *tok, *save = NULL;
	unsigned int mask = 0;
	int i;

	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		for (i = 0; i < n && strcmp(tok, names[i]) != 0; i++)
			;
		if (i == n)
			perf_bad_arg("%s: unknown name '%s'", opt, tok);
		mask |= bits[i];
	}
	free(copy);
	if (!mask)
		perf_bad_arg("%s: empty list", opt);
	return mask;
}

static void perf_parse_cpus(struct perf_opts *o, const char *arg)
{
	char *end;
	long a, b;

	a = strtol(arg, &end, 10);
	if (end == arg || *end != ',' || a < 0)
		perf_bad_arg("--cpus: expected A,B, got '%s'", arg);
	b = strtol(end + 1, &end, 10);
	if (*end || b < 0 || a >= 1024 || b >= 1024)
		perf_bad_arg("--cpus: expected A,B, got '%s'", arg);
	o->cpus[0] = (int)a;
	o->cpus[1] = (int)b;
}

enum {
	OPT_BUSY = 256, OPT_BLOCK, OPT_BOTH, OPT_SIGNAL, OPT_INLINE,
	OPT_CPUS, OPT_CPU, OPT_NO_PIN, OPT_TIMEOUT, OPT_PLOT, OPT_VERBS_ADDR,
};

static const struct option perf_long_opts[] = {
	{ "local", no_argument, NULL, 'l' },
	{ "server", no_argument, NULL, 's' },
	{ "client", no_argument, NULL, 'c' },
	{ "name", required_argument, NULL, 'p' },
	{ "addr", required_argument, NULL, 'a' },
	{ "port", required_argument, NULL, 'P' },
	{ "test", required_argument, NULL, 't' },
	{ "op", required_argument, NULL, 'o' },
	{ "transport", required_argument, NULL, 'T' },
	{ "size", required_argument, NULL, 'S' },
	{ "iters", required_argument, NULL, 'n' },
	{ "warmup", required_argument, NULL, 'w' },
	{ "bytes", required_argument, NULL, 'B' },
	{ "duration", required_argument, NULL, 'D' },
	{ "depth", required_argument, NULL, 'd' },
	{ "busy", no_argument, NULL, OPT_BUSY },
	{ "block", no_argument, NULL, OPT_BLOCK },
	{ "both", no_argument, NULL, OPT_BOTH },
	{ "signal-every", required_argument, NULL, OPT_SIGNAL },
	{ "inline", required_argument, NULL, OPT_INLINE },
	{ "cpus", required_argument, NULL, OPT_CPUS },
	{ "cpu", required_argument, NULL, OPT_CPU },
	{ "no-pin", no_argument, NULL, OPT_NO_PIN },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "json", no_argument, NULL, 'j' },
	{ "plot", required_argument, NULL, OPT_PLOT },
	{ "verbs-addr", required_argument, NULL, OPT_VERBS_ADDR },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static void perf_set_role(struct perf_opts *o, enum perf_role role)
{
	if (o->role_given && o->role != role)
		perf_bad_arg("choose one of --local, -s and -c");
	o->role = role;
	o->role_given = true;
}

static void perf_parse_opt(struct perf_opts *o, int c, const char *arg)
{
	static const char *const tests[] = { "lat", "bw", "rate", "connect",
		"all" };
	static const unsigned int test_bits[] = { 1u << PERF_TEST_LAT,
		1u << PERF_TEST_BW, 1u << PERF_TEST_RATE,
		1u << PERF_TEST_CONNECT, PERF_ALL_TESTS };
	static const char *const ops[] = { "write", "write_imm", "read",
		"send", "atomic", "fadd", "cas", "verbs", "stream", "all" };
	static const unsigned int op_bits[] = { 1u << PERF_OP_WRITE,
		1u << PERF_OP_WRITE_IMM, 1u << PERF_OP_READ,
		1u << PERF_OP_SEND, PERF_ATOMIC_OPS, 1u << PERF_OP_FADD,
		1u << PERF_OP_CAS, PERF_ALL_FERRY_OPS, PERF_STREAM_OP,
		PERF_ALL_FERRY_OPS | PERF_STREAM_OP };
	static const char *const trs[] = { "ferry", "ferry-shm", "ferry-verbs",
		"verbs", "tcp", "tcp+preload", "preload", "shm-bare", "bare",
		"memcpy", "all" };
	static const unsigned int tr_bits[] = { 1u << PERF_TR_FERRY,
		1u << PERF_TR_FERRY, 1u << PERF_TR_VERBS, 1u << PERF_TR_VERBS,
		1u << PERF_TR_TCP, 1u << PERF_TR_PRELOAD, 1u << PERF_TR_PRELOAD,
		1u << PERF_TR_BARE, 1u << PERF_TR_BARE, 1u << PERF_TR_MEMCPY,
		(1u << PERF_TR_COUNT) - 1 };
	char *end;

	switch (c) {
	case 'l': perf_set_role(o, PERF_ROLE_LOCAL); break;
	case 's': perf_set_role(o, PERF_ROLE_SERVER); break;
	case 'c': perf_set_role(o, PERF_ROLE_CLIENT); break;
	case 'p':
		if (!*arg || strlen(arg) > 100)
			perf_bad_arg("-p: the name must have 1 to 100 characters");
		o->name = arg;
		break;
	case 'a': o->addr = arg; break;
	case 'P': o->port = (uint16_t)perf_parse_long(arg, "-P", 1, 65534); break;
	case 't': o->tests = perf_parse_list("-t", arg, tests, test_bits, 5); break;
	case 'o': o->ops = perf_parse_list("-o", arg, ops, op_bits, 10); break;
	case 'T': o->transports = perf_parse_list("-T", arg, trs, tr_bits, 11); break;
	case 'S': perf_parse_sizes(o, arg); break;
	case 'n':
		o->iters = perf_parse_long(arg, "-n", 1, 100000000);
		o->iters_given = true;
		break;
	case 'w': o->warmup = perf_parse_long(arg, "-w", 0, 100000000); break;
	case 'B':
		o->bw_bytes = (uint64_t)perf_parse_long(arg, "-B", 1, 1L << 50);
		break;
	case 'D':
		o->bw_seconds = strtod(arg, &end);
		if (end == arg || *end || !(o->bw_seconds > 0 && o->bw_seconds <= 3600))
			perf_bad_arg("-D: '%s' is not a duration in seconds (0..3600]", arg);
		break;
	case 'd': o->sq_depth = (int)perf_parse_long(arg, "-d", 2, 16384); break;
	case OPT_BUSY: o->modes = 1u << PERF_MODE_BUSY; break;
	case OPT_BLOCK: o->modes = 1u << PERF_MODE_BLOCK; break;
	case OPT_BOTH: o->modes = 3; break;
	case OPT_SIGNAL:
		o->signal_every = (int)perf_parse_long(arg, "--signal-every", 1, 16384);
		break;
	case OPT_INLINE:
		o->inline_max = (int)perf_parse_long(arg, "--inline", 0, 65536);
		break;
	case OPT_CPUS: perf_parse_cpus(o, arg); break;
	case OPT_CPU: o->cpu_self = (int)perf_parse_long(arg, "--cpu", 0, 1023); break;
	case OPT_NO_PIN: o->no_pin = true; break;
	case OPT_TIMEOUT:
		o->timeout = (int)perf_parse_long(arg, "--timeout", 1, 86400);
		break;
	case 'j': o->json = true; break;
	case OPT_PLOT:
		if (!*arg)
			perf_bad_arg("--plot: give a file name");
		o->plot = arg;
		break;
	case OPT_VERBS_ADDR: o->verbs_addr = arg; break;
	case 'h': perf_usage(stdout); exit(0);
	default: perf_bad_arg("unknown option");
	}
}

/*
 * The address form has the verbs-style rows of ferry (through the CM) and
 * of kernel TCP: the yardsticks of one host, the stream rows' workers and
 * the shim do not cross hosts.
 */
static void perf_check_addr_form(struct perf_opts *o)
{
	const unsigned int allowed = (1u << PERF_TR_FERRY) | (1u << PERF_TR_TCP);
	struct in_addr in;

	if (o->role == PERF_ROLE_LOCAL)
		perf_bad_arg("-a is for -s and -c (--local forks both here)");
	if (inet_pton(AF_INET, o->addr, &in) != 1)
		perf_bad_arg("-a: '%s' is not an IPv4 address", o->addr);
	if (!o->transports)
		o->transports = allowed;
	if (o->transports & ~allowed)
		perf_bad_arg("-a: only the ferry and tcp rows run between hosts");
	if ((o->ops & PERF_STREAM_OP) && !(o->ops & PERF_ALL_FERRY_OPS))
		perf_bad_arg("-a: the stream rows do not run between hosts");
	o->ops &= ~PERF_STREAM_OP;
	if (o->plot)
		perf_bad_arg("-a: --plot is for the stream rows");
}

static void perf_parse_args(struct perf_opts *o, int argc, char **argv)
{
	int c;

	memset(o, 0, sizeof(*o));
	o->name = "ferry-perf";
	o->iters = 20000;
	o->warmup = -1;
	o->bw_bytes = 2ull << 30;
	o->bw_seconds = 0.5;
	o->sq_depth = 128;
	o->inline_max = 64;
	o->cpus[0] = o->cpus[1] = -1;
	o->cpu_self = -1;
	o->timeout = 60;
	o->tests = PERF_ALL_TESTS;
	o->ops = PERF_ALL_FERRY_OPS | PERF_STREAM_OP;
	opterr = 0;
	o->port = 7480;
	while ((c = getopt_long(argc, argv, ":lscp:a:P:t:o:T:S:n:w:B:D:d:jh",
				perf_long_opts, NULL)) != -1) {
		if (c == '?')
			perf_bad_arg("unknown option '%s'", argv[optind - 1]);
		if (c == ':')
			perf_bad_arg("option '%s' needs an argument", argv[optind - 1]);
		perf_parse_opt(o, c, optarg);
	}
	if (optind < argc)
		perf_bad_arg("unexpected argument '%s'", argv[optind]);
	if (!o->role_given)
		perf_bad_arg("choose one of --local, -s and -c");
	if (o->signal_every == 0)
		o->signal_every = o->sq_depth / 8 ? o->sq_depth / 8 : 1;
	if (o->signal_every > o->sq_depth)
		perf_bad_arg("--signal-every %d is larger than the depth %d",
			     o->signal_every, o->sq_depth);
	if (o->addr) {
		perf_check_addr_form(o);
		return;
	}
	if (!o->transports)
		o->transports = o->role == PERF_ROLE_LOCAL ?
				(1u << PERF_TR_COUNT) - 1 : 1u << PERF_TR_FERRY;
}

/* --- the plan --- */

struct perf_plan {
	struct perf_row rows[PERF_MAX_ROWS];
	int nrows;
	char verbs_note[128];		/* why there are no ferry-verbs rows */
	char preload_note[PATH_MAX + 96]; /* the shim, or why no tcp+preload rows */
};

/* Unmeasured round trips before @iters measured ones: -w, or a tenth. */
static uint64_t perf_plan_warmup(const struct perf_opts *o, uint64_t iters)
{
	if (o->warmup >= 0)
		return (uint64_t)o->warmup;
	return iters / 10 > 2000 ? 2000 : iters / 10 + 1;
}

/* The rounds @test's rows run in (PERF_ROUNDS), 1 in size sweeps. */
static unsigned int perf_plan_rounds(const struct perf_opts *o, enum perf_test test)
{
	return test == PERF_TEST_CONNECT || (o->nsizes <= 1 && !o->plot) ? PERF_ROUNDS : 1;
}

/*
 * Rows [@first, nrows) are round @r of @rounds: each gets its share of
 * the iterations, bytes and time, and a warm-up for its share.
 */
static void perf_plan_round(struct perf_plan *plan, const struct perf_opts *o, int first,
			    unsigned int r, unsigned int rounds)
{
	int i;

	for (i = first; i < plan->nrows && rounds > 1; i++) {
		struct perf_row *row = &plan->rows[i];

		row->round = r;
		row->rounds = rounds;
		row->seconds /= rounds;
		row->bytes /= rounds;
		row->iters = (row->iters + rounds - 1) / rounds;
		if (row->test == PERF_TEST_LAT)
			row->warmup = perf_plan_warmup(o, row->iters);
	}
}

static void perf_plan_add(struct perf_plan *plan, const struct perf_opts *o,
			  enum perf_test test, enum perf_op op,
			  enum perf_transport tr, enum perf_mode mode, size_t size)
{
	struct perf_row *row;
	uint64_t iters = (uint64_t)o->iters;

	if (plan->nrows == PERF_MAX_ROWS)
		perf_bad_arg("too many rows (at most %d)", PERF_MAX_ROWS);
	row = &plan->rows[plan->nrows++];
	memset(row, 0, sizeof(*row));
	row->test = test;
	row->op = op;
	row->transport = tr;
	row->mode = mode;
	row->size = size;
	if (iters > PERF_LAT_BYTES / size)
		iters = PERF_LAT_BYTES / size > 200 ? PERF_LAT_BYTES / size : 200;
	row->iters = iters;
	row->warmup = perf_plan_warmup(o, iters);
	row->bytes = o->bw_bytes;
	row->seconds = o->bw_seconds;
	if (test == PERF_TEST_CONNECT) {
		/* for twice the bw time, up to -n connections */
		row->seconds = 2 * o->bw_seconds;
		row->iters = o->iters_given ? (uint64_t)o->iters : PERF_CONNECT_MAX;
		row->warmup = 0;
	}
}

static unsigned int perf_plan_modes(const struct perf_opts *o,
				    enum perf_test test)
{
	if (o->modes)
		return o->modes;
	if (o->role == PERF_ROLE_LOCAL && test == PERF_TEST_LAT)
		return 3;
	return 1u << PERF_MODE_BUSY;
}

/* Rows of one test at one size: ferry (each mode, each op), then the others. */
static void perf_plan_size(struct perf_plan *plan, const struct perf_opts *o,
			   enum perf_test test, size_t size, bool first_size)
{
	unsigned int modes = perf_plan_modes(o, test), tr = o->transports;
	int mode, op;

	for (mode = 0; mode < PERF_MODE_COUNT && (tr & (1u << PERF_TR_FERRY)); mode++) {
		if (!(modes & (1u << mode)))
			continue;
		for (op = 0; op <= PERF_OP_CAS; op++) {
			bool atomic = (1u << op) & PERF_ATOMIC_OPS;

			if (!(o->ops & (1u << op)) || (atomic && !first_size))
				continue;
			/* a plain write has no completion to sleep on */
			if (test == PERF_TEST_LAT && op == PERF_OP_WRITE &&
			    mode == PERF_MODE_BLOCK)
				continue;
			perf_plan_add(plan, o, test, op, PERF_TR_FERRY, mode,
				      atomic ? 8 : size);
		}
	}
	if (tr & (1u << PERF_TR_TCP))
		perf_plan_add(plan, o, test, PERF_OP_SEND, PERF_TR_TCP,
			      PERF_MODE_BLOCK, size);
	if ((tr & (1u << PERF_TR_BARE)) && test == PERF_TEST_LAT)
		perf_plan_add(plan, o, test, PERF_OP_WRITE, PERF_TR_BARE,
			      PERF_MODE_BUSY, size);
	if ((tr & (1u << PERF_TR_MEMCPY)) && test == PERF_TEST_BW)
		perf_plan_add(plan, o, test, PERF_OP_COPY, PERF_TR_MEMCPY,
			      PERF_MODE_BUSY, size);
}

/* --- the plan: stream sockets --- */

/*
 * Stream rows of one test, size and mode: ferry-shm, ferry-verbs, tcp,
 * tcp+preload (@preload: the shim was found).
 */
static void perf_plan_stream_rows(struct perf_plan *plan, const struct perf_opts *o,
				  enum perf_test test, enum perf_mode mode,
				  size_t size, bool verbs, bool preload)
{
	unsigned int tr = o->transports;
	/* TCP: busy (MSG_DONTWAIT spinning) for latency only; else blocking */
	bool tcp_row = test == PERF_TEST_LAT || mode == PERF_MODE_BLOCK ||
		       !(perf_plan_modes(o, test) & (1u << PERF_MODE_BLOCK));
	enum perf_mode tcp_mode = test == PERF_TEST_LAT ? mode : PERF_MODE_BLOCK;

	if (tr & (1u << PERF_TR_FERRY))
		perf_plan_add(plan, o, test, PERF_OP_STREAM, PERF_TR_FERRY, mode, size);
	if ((tr & (1u << PERF_TR_VERBS)) && verbs)
		perf_plan_add(plan, o, test, PERF_OP_STREAM, PERF_TR_VERBS, mode, size);
	if ((tr & (1u << PERF_TR_TCP)) && tcp_row)
		perf_plan_add(plan, o, test, PERF_OP_STREAM, PERF_TR_TCP, tcp_mode, size);
	/* an unmodified program under the shim: the tcp rows, the same modes */
	if ((tr & (1u << PERF_TR_PRELOAD)) && preload && tcp_row)
		perf_plan_add(plan, o, test, PERF_OP_STREAM, PERF_TR_PRELOAD,
			      tcp_mode, size);
}

/* The stream rows of one test, size and mode, in rounds (perf_plan_rounds). */
static void perf_plan_stream_test(struct perf_plan *plan, const struct perf_opts *o,
				  enum perf_test test, enum perf_mode mode,
				  size_t size, bool verbs, bool preload)
{
	unsigned int r, rounds = perf_plan_rounds(o, test);
	int first;

	for (r = 0; r < rounds; r++) {
		first = plan->nrows;
		perf_plan_stream_rows(plan, o, test, mode, size, verbs, preload);
		perf_plan_round(plan, o, first, r, rounds);
	}
}

/* The sizes of a stream test: -S, every size for --plot, or the default. */
static int perf_plan_stream_sizes(const struct perf_opts *o, enum perf_test test,
				  size_t *sizes)
{
	int n = 0;
	size_t v;

	if (test == PERF_TEST_RATE) {
		sizes[0] = PERF_RATE_SIZE;
		return 1;
	}
	if (test == PERF_TEST_CONNECT) {
		sizes[0] = 1;		/* the byte exchanged */
		return 1;
	}
	if (o->nsizes) {
		memcpy(sizes, o->sizes, o->nsizes * sizeof(*sizes));
		return o->nsizes;
	}
	if (o->plot) {
		for (v = PERF_MIN_SIZE; v <= PERF_MAX_SIZE; v <<= 1)
			sizes[n++] = v;
		return n;
	}
	sizes[0] = test == PERF_TEST_LAT ? 64 : 65536;
	return 1;
}

static void perf_plan_stream(struct perf_plan *plan, const struct perf_opts *o)
{
	size_t sizes[PERF_MAX_SIZES];
	char shim[PATH_MAX];
	bool verbs = false, preload = false;
	int test, mode, first = plan->nrows, i, n;

	if (!(o->ops & PERF_STREAM_OP))
		return;
	if (o->transports & (1u << PERF_TR_VERBS)) {
		verbs = o->verbs_addr ||
			perf_stream_verbs_present(plan->verbs_note,
						  sizeof(plan->verbs_note));
	}
	if (o->transports & (1u << PERF_TR_PRELOAD)) {
		preload = perf_preload_find(shim, sizeof(shim), plan->preload_note,
					    sizeof(plan->preload_note));
		if (preload)
			snprintf(plan->preload_note, sizeof(plan->preload_note),
				 "the tcp rows' code in worker processes exec'd with LD_PRELOAD=%s",
				 shim);
	}
	for (test = 0; test < PERF_TEST_COUNT; test++) {
		if (!(o->tests & (1u << test)))
			continue;
		n = perf_plan_stream_sizes(o, test, sizes);
		for (i = 0; i < n; i++)
			for (mode = 0; mode < PERF_MODE_COUNT; mode++)
				if (perf_plan_modes(o, test) & (1u << mode))
					perf_plan_stream_test(plan, o, test, mode,
							      sizes[i], verbs,
							      preload);
	}
	/* the sweep of --plot: fewer round trips, unless -n says */
	for (i = first; i < plan->nrows && o->plot && !o->iters_given; i++) {
		if (plan->rows[i].test == PERF_TEST_LAT &&
		    plan->rows[i].iters > PERF_PLOT_ITERS) {
			plan->rows[i].iters = PERF_PLOT_ITERS;
			plan->rows[i].warmup = PERF_PLOT_ITERS / 10;
		}
	}
}

static void perf_plan_build(struct perf_plan *plan, const struct perf_opts *o)
{
	static const size_t lat_default = 64, bw_default = 65536;
	int test, i;

	plan->nrows = 0;
	/* the verbs-style operations, and their yardsticks: lat and bw */
	for (test = 0; test <= PERF_TEST_BW; test++) {
		unsigned int r, rounds = perf_plan_rounds(o, test);

		if (!(o->tests & (1u << test)) || !(o->ops & PERF_ALL_FERRY_OPS))
			continue;
		for (r = 0; r < rounds; r++) {
			int first = plan->nrows;

			if (o->nsizes == 0)
				perf_plan_size(plan, o, test, test == PERF_TEST_LAT ?
					       lat_default : bw_default, true);
			for (i = 0; i < o->nsizes; i++)
				perf_plan_size(plan, o, test, o->sizes[i], i == 0);
			perf_plan_round(plan, o, first, r, rounds);
		}
	}
	perf_plan_stream(plan, o);
	if (plan->nrows == 0)
		perf_bad_arg("nothing to measure with these -t/-o/-T/--block choices%s",
			     o->modes == 1u << PERF_MODE_BLOCK ?
			     " (write latency has no completion to sleep on)" : "");
}

/* What the plan left out, and which shim the tcp+preload rows run under. */
static void perf_plan_notes(const struct perf_plan *plan)
{
	if (plan->verbs_note[0])
		perf_report_note("ferry-verbs", plan->verbs_note);
	if (plan->preload_note[0])
		perf_report_note(perf_transport_name(PERF_TR_PRELOAD),
				 plan->preload_note);
}

/* --- roles --- */

static void perf_banner(const struct perf_opts *o, const char *where,
			const char *cpus)
{
	char banner[512];

	snprintf(banner, sizeof(banner),
		 "ferry-perf %s; lat: -n %ld round trips per row; bw: up to %llu MiB or %.2f s per row, window %d, signal 1/%d; %s",
		 where, o->iters, (unsigned long long)(o->bw_bytes >> 20),
		 o->bw_seconds, o->sq_depth, o->signal_every, cpus);
	perf_report_begin(o->json, banner, cpus);
}

/* Wait up to @seconds for the forked server; kill it if it does not exit. */
static int perf_reap_child(pid_t pid, int seconds)
{
	int status, waited_ms;

	for (waited_ms = 0; waited_ms < seconds * 1000; waited_ms += 10) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid) {
			perf_child_pid = 0;
			if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
				return 0;
			fprintf(stderr, "%s: the server process %s %d\n", PERF_PROG,
				WIFEXITED(status) ? "exited with status" :
				"was killed by signal",
				WIFEXITED(status) ? WEXITSTATUS(status) :
				WTERMSIG(status));
			return 1;
		}
		if (r < 0 && errno != EINTR)
			perf_die_errno("waitpid");
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	perf_child_pid = 0;
	fprintf(stderr, "%s: the server process did not exit; killed it\n",
		PERF_PROG);
	return 1;
}

static int perf_run_local(const struct perf_opts *o, const struct perf_plan *plan)
{
	int ctrl[2], fsock[2], allowed[2], n, cpu_client = -1, cpu_server = -1;
	char cpus[128];
	pid_t parent = getpid(), pid;

	n = perf_cpus_allowed(allowed, 2);
	if (!o->no_pin && o->cpus[0] >= 0) {
		cpu_client = o->cpus[0];
		cpu_server = o->cpus[1];
	} else if (!o->no_pin && n >= 2) {
		cpu_client = allowed[0];
		cpu_server = allowed[1];
	}
	if (cpu_client >= 0)
		snprintf(cpus, sizeof(cpus), "client on cpu %d, server on cpu %d (pinned, every transport)",
			 cpu_client, cpu_server);
	else
		snprintf(cpus, sizeof(cpus), "not pinned (%s)",
			 o->no_pin ? "--no-pin" : "fewer than 2 cpus");
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctrl) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fsock) < 0)
		perf_die_errno("socketpair");
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		perf_die_errno("fork");
	if (pid == 0) {
		perf_role_name = "server";
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		close(ctrl[0]);
		close(fsock[0]);
		perf_pin_self(cpu_server);
		exit(perf_session_server(o, ctrl[1], fsock[1]));
	}
	perf_child_pid = pid;
	close(ctrl[1]);
	close(fsock[1]);
	perf_pin_self(cpu_client);
	perf_banner(o, "--local", cpus);
	perf_plan_notes(plan);
	perf_session_client(o, ctrl[0], fsock[0], plan->rows, plan->nrows);
	close(ctrl[0]);
	close(fsock[0]);
	if (perf_reap_child(pid, 10))
		return 1;
	perf_report_ratios();
	return o->plot ? perf_plot_write(o->plot) : 0;
}

static void perf_abstract_addr(const char *name, struct sockaddr_un *sun,
			       socklen_t *len_p)
{
	size_t len = strlen(name);

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	memcpy(sun->sun_path + 1, name, len);	/* sun_path[0] = 0: abstract */
	*len_p = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

/* The address form's two sides (the connections: perf_net.c). */
static void perf_net_setup(const struct perf_opts *o)
{
	if (!perf_tcp_set_addr(o->addr))
		perf_die("-a: '%s' is not an IPv4 address", o->addr);
	perf_transport_rename_ferry("ferry-cm");
	perf_report_set_network(true);
}

static int perf_run_net_server(const struct perf_opts *o)
{
	int ctrl, rc;

	perf_net_setup(o);
	ctrl = perf_net_server_start(o);
	perf_pin_self(o->no_pin ? -1 : o->cpu_self);
	rc = perf_session_server(o, ctrl, -1);
	close(ctrl);
	return rc;
}

static int perf_run_server(const struct perf_opts *o)
{
	struct sockaddr_un sun;
	socklen_t len;
	int lfd, ctrl, fsock, rc;

	perf_role_name = "server";
	if (o->addr)
		return perf_run_net_server(o);
	perf_abstract_addr(o->name, &sun, &len);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		perf_die_errno("socket (AF_UNIX)");
	if (bind(lfd, (struct sockaddr *)&sun, len) < 0)
		perf_die("bind (@%s): %s", o->name, strerror(errno));
	if (listen(lfd, 2) < 0)
		perf_die_errno("listen");
	perf_pin_self(o->no_pin ? -1 : o->cpu_self);
	fprintf(stderr, "%s: waiting for a client on @%s\n", PERF_PROG, o->name);
	ctrl = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (ctrl < 0)
		perf_die_errno("accept (control)");
	fsock = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fsock < 0)
		perf_die_errno("accept (ferry)");
	close(lfd);
	rc = perf_session_server(o, ctrl, fsock);
	close(ctrl);
	close(fsock);
	return rc;
}

/* Connect to @name, retrying for two seconds while the server starts. */
static int perf_connect_abstract(const char *name)
{
	struct sockaddr_un sun;
	socklen_t len;
	int fd, tries;

	perf_abstract_addr(name, &sun, &len);
	for (tries = 0;; tries++) {
		fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (fd < 0)
			perf_die_errno("socket (AF_UNIX)");
		if (connect(fd, (struct sockaddr *)&sun, len) == 0)
			return fd;
		if (errno != ECONNREFUSED || tries >= 200)
			perf_die("connect (@%s): %s (is 'ferry-perf -s -p %s' running?)",
				 name, strerror(errno), name);
		close(fd);
		usleep(10000);
	}
}

static int perf_run_client(const struct perf_opts *o, const struct perf_plan *plan)
{
	char cpus[64], where[128], note[160];
	int ctrl, fsock = -1, rc;

	if (o->addr) {
		perf_net_setup(o);
		ctrl = perf_net_client_start(o);
		snprintf(where, sizeof(where), "-c -a %s -P %u", o->addr, o->port);
		snprintf(note, sizeof(note),
			 "ferry through the CM to %s port %u (its tcp transport for another host); tcp: kernel TCP to %s",
			 o->addr, o->port, o->addr);
	} else {
		ctrl = perf_connect_abstract(o->name);
		fsock = perf_connect_abstract(o->name);
		snprintf(where, sizeof(where), "-c");
	}
	perf_pin_self(o->no_pin ? -1 : o->cpu_self);
	if (o->cpu_self >= 0 && !o->no_pin)
		snprintf(cpus, sizeof(cpus), "client pinned to cpu %d", o->cpu_self);
	else
		snprintf(cpus, sizeof(cpus), "client not pinned");
	perf_banner(o, where, cpus);
	perf_plan_notes(plan);
	if (o->addr)
		perf_report_note("ferry-cm", note);
	rc = perf_session_client(o, ctrl, fsock, plan->rows, plan->nrows);
	close(ctrl);
	if (fsock >= 0)
		close(fsock);
	if (rc == 0)
		perf_report_ratios();
	if (rc == 0 && o->plot)
		rc = perf_plot_write(o->plot);
	return rc;
}

int main(int argc, char **argv)
{
	static struct perf_plan plan;
	struct perf_opts opts;
	bool worker_server;
	int chan_fd;

	signal(SIGPIPE, SIG_IGN);
	/* a stream worker exec'd under the preload shim (perf_preload.c) */
	if (perf_preload_worker_args(argc, argv, &worker_server, &chan_fd))
		perf_stream_worker_main(worker_server, chan_fd);
	perf_parse_args(&opts, argc, argv);
	if (opts.role == PERF_ROLE_SERVER)
		return perf_run_server(&opts);
	perf_plan_build(&plan, &opts);
	if (opts.role == PERF_ROLE_LOCAL)
		return perf_run_local(&opts, &plan);
	return perf_run_client(&opts, &plan);
}
