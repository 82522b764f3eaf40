/*
 * ferry-stat - list the ferry stream-socket connections of this host's
 * network namespace, as ss(8) lists TCP's (man/ferry-stat.1).
 *
 * stat_scan.c finds and reads the statistics segments of the processes;
 * this file picks the rows the options ask for and prints them as a table
 * or as JSON: the sockets, or with -s each process's connects under the
 * shim, over ferry and over TCP by reason.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <arpa/inet.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stat_scan.h"

/* Which rows: ss's default is the connections, -l the listeners, -a all. */
enum stat_show { STAT_SHOW_CONNECTIONS, STAT_SHOW_LISTENING, STAT_SHOW_ALL };

struct stat_opts {
	enum stat_show show;
	bool numeric;		/* -n: no service names */
	bool resolve;		/* -r: host names */
	bool json;
	bool header;
	bool summary;		/* -s: connects per process, not sockets */
	pid_t pid;		/* -p; 0: every process */
};

#define STAT_COLUMNS	9
#define STAT_ADDR_MAX	(NI_MAXHOST + NI_MAXSERV + 4)

/* --- one row in words --- */

static const char *stat_state_name(const struct stat_row *r)
{
	static const char *const names[SOCK_STAT_NSTATES] = {
		[SOCK_STAT_FREE] = "FREE",
		[SOCK_STAT_UNCONN] = "UNCONN",
		[SOCK_STAT_LISTEN] = "LISTEN",
		[SOCK_STAT_SYN_SENT] = "SYN-SENT",
		[SOCK_STAT_SYN_RECV] = "SYN-RECV",
		[SOCK_STAT_ESTAB] = "ESTAB",
		[SOCK_STAT_FAILED] = "FAILED",
	};
	bool peer_done = r->flags & SOCK_STAT_F_PEER_SHUT_WR;
	bool we_done = r->flags & (SOCK_STAT_F_SHUT_WR | SOCK_STAT_F_DISC_SENT);

	if (r->state != SOCK_STAT_ESTAB)
		return names[r->state];
	/* How an established connection ends, in TCP's words where they fit. */
	if (r->flags & SOCK_STAT_F_TIMEDOUT)
		return "TIMEDOUT";
	if (r->flags & SOCK_STAT_F_RESET)
		return "RESET";
	if (peer_done && we_done)
		return "CLOSING";
	if (peer_done)
		return "CLOSE-WAIT";
	if (we_done)
		return "FIN-WAIT";
	return "ESTAB";
}

static const char *stat_transport_name(unsigned int tp)
{
	static const char *const names[SOCK_STAT_NTRANSPORTS] = {
		[SOCK_STAT_TP_NONE] = "-",
		[SOCK_STAT_TP_SHM] = "shm",
		[SOCK_STAT_TP_VERBS] = "verbs",
		[SOCK_STAT_TP_OTHER] = "other",
		[SOCK_STAT_TP_TCP] = "tcp",
	};

	return names[tp];
}

/* The numeric host of @a into @buf (no brackets). */
static void stat_host_numeric(const struct sock_stat_addr *a, char *buf, size_t len)
{
	if (!a->family || !inet_ntop(a->family, a->addr, buf, (socklen_t)len))
		snprintf(buf, len, "*");
}

/* "host:port" as ss writes it: IPv6 hosts in brackets, "*" for none. */
static void stat_addr_str(const struct sock_stat_addr *a, const struct stat_opts *o,
			  char *buf, size_t len)
{
	char host[NI_MAXHOST], serv[NI_MAXSERV];
	struct sockaddr_storage ss;
	socklen_t sl;

	if (!a->family) {
		snprintf(buf, len, "*:*");
		return;
	}
	memset(&ss, 0, sizeof(ss));
	if (a->family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(a->port);
		memcpy(&sin->sin_addr, a->addr, 4);
		sl = sizeof(*sin);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(a->port);
		sin6->sin6_scope_id = a->scope_id;
		memcpy(&sin6->sin6_addr, a->addr, 16);
		sl = sizeof(*sin6);
	}
	if (getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), serv, sizeof(serv),
			(o->resolve ? 0 : NI_NUMERICHOST) |
			(o->numeric ? NI_NUMERICSERV : 0)) != 0) {
		stat_host_numeric(a, host, sizeof(host));
		snprintf(serv, sizeof(serv), "%u", a->port);
	}
	if (a->family == AF_INET6 && strchr(host, ':'))
		snprintf(buf, len, "[%s]:%s", host, serv);
	else
		snprintf(buf, len, "%s:%s", host, serv);
}

/* --- choosing and ordering --- */

static bool stat_wanted(const struct stat_row *r, const struct stat_opts *o)
{
	switch (o->show) {
	case STAT_SHOW_LISTENING:
		return r->state == SOCK_STAT_LISTEN;
	case STAT_SHOW_CONNECTIONS:
		return r->state == SOCK_STAT_SYN_SENT || r->state == SOCK_STAT_SYN_RECV ||
		       r->state == SOCK_STAT_ESTAB;
	case STAT_SHOW_ALL:
		break;
	}
	return true;
}

static int stat_row_cmp(const void *a, const void *b)
{
	const struct stat_row *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->fd < y->fd ? -1 : x->fd > y->fd;
}

/* --- the table --- */

/* The cells of one row (or of the header when @r is NULL). */
static void stat_cells(const struct stat_row *r, const struct stat_opts *o,
		       char cells[STAT_COLUMNS][STAT_ADDR_MAX + 64])
{
	static const char *const head[STAT_COLUMNS] = {
		"State", "Transport", "Local Address:Port", "Peer Address:Port",
		"Sent", "Received", "Rx-ring", "Tx-ring", "Process",
	};
	const size_t len = STAT_ADDR_MAX + 64;
	int i;

	if (!r) {
		for (i = 0; i < STAT_COLUMNS; i++)
			snprintf(cells[i], len, "%s", head[i]);
		return;
	}
	snprintf(cells[0], len, "%s", stat_state_name(r));
	snprintf(cells[1], len, "%s", stat_transport_name(r->transport));
	stat_addr_str(&r->local, o, cells[2], len);
	stat_addr_str(&r->peer, o, cells[3], len);
	snprintf(cells[4], len, "%llu", (unsigned long long)r->tx_bytes);
	snprintf(cells[5], len, "%llu", (unsigned long long)r->rx_bytes);
	snprintf(cells[6], len, "%llu/%u", (unsigned long long)r->rx_unread, r->rbuf_size);
	snprintf(cells[7], len, "%llu/%u", (unsigned long long)r->tx_in_flight, r->sbuf_size);
	snprintf(cells[8], len, "users:((\"%s\",pid=%d,fd=%d))", r->comm, (int)r->pid, r->fd);
}

static void stat_print_table(const struct stat_row *rows, size_t n, const struct stat_opts *o)
{
	static char cells[STAT_COLUMNS][STAT_ADDR_MAX + 64];
	int width[STAT_COLUMNS] = { 0 }, i;
	size_t k;

	/* Two passes: the widths, then the lines. */
	for (k = o->header ? 0 : 1; k <= n; k++) {
		stat_cells(k ? &rows[k - 1] : NULL, o, cells);
		for (i = 0; i < STAT_COLUMNS; i++) {
			int w = (int)strlen(cells[i]);

			if (w > width[i])
				width[i] = w;
		}
	}
	for (k = o->header ? 0 : 1; k <= n; k++) {
		stat_cells(k ? &rows[k - 1] : NULL, o, cells);
		for (i = 0; i < STAT_COLUMNS - 1; i++)
			printf("%-*s ", width[i], cells[i]);
		printf("%s\n", cells[STAT_COLUMNS - 1]);
	}
}

/* --- JSON --- */

static void stat_json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void stat_json_addr(const char *name, const struct sock_stat_addr *a)
{
	char host[INET6_ADDRSTRLEN];

	printf("\"%s\":", name);
	if (!a->family) {
		printf("null");
		return;
	}
	stat_host_numeric(a, host, sizeof(host));
	printf("{\"address\":\"%s\",\"port\":%u}", host, a->port);
}

static void stat_print_json(const struct stat_row *rows, size_t n)
{
	static const struct { unsigned int bit; const char *name; } flags[] = {
		{ SOCK_STAT_F_PEER_SHUT_WR, "peer-shut-wr" },
		{ SOCK_STAT_F_PEER_GONE, "peer-gone" },
		{ SOCK_STAT_F_RESET, "reset" },
		{ SOCK_STAT_F_SHUT_RD, "shut-rd" },
		{ SOCK_STAT_F_SHUT_WR, "shut-wr" },
		{ SOCK_STAT_F_DISC_SENT, "disconnect-sent" },
		{ SOCK_STAT_F_TIMEDOUT, "timed-out" },
	};
	size_t k, f;
	bool first;

	printf("[");
	for (k = 0; k < n; k++) {
		const struct stat_row *r = &rows[k];

		printf("%s\n  {\"pid\":%d,\"process\":", k ? "," : "", (int)r->pid);
		stat_json_string(r->comm);
		printf(",\"fd\":%d,\"state\":\"%s\",\"transport\":\"%s\",", r->fd,
		       stat_state_name(r), stat_transport_name(r->transport));
		stat_json_addr("local", &r->local);
		putchar(',');
		stat_json_addr("peer", &r->peer);
		printf(",\"sent\":%llu,\"received\":%llu", (unsigned long long)r->tx_bytes,
		       (unsigned long long)r->rx_bytes);
		printf(",\"rx_ring\":{\"unread\":%llu,\"size\":%u}",
		       (unsigned long long)r->rx_unread, r->rbuf_size);
		printf(",\"tx_ring\":{\"in_flight\":%llu,\"size\":%u}",
		       (unsigned long long)r->tx_in_flight, r->sbuf_size);
		printf(",\"sent_nocache\":%llu", (unsigned long long)r->tx_nocache);
		printf(",\"flags\":[");
		for (f = 0, first = true; f < sizeof(flags) / sizeof(flags[0]); f++) {
			if (!(r->flags & flags[f].bit))
				continue;
			printf("%s\"%s\"", first ? "" : ",", flags[f].name);
			first = false;
		}
		printf("]}");
	}
	printf("%s]\n", n ? "\n" : "");
}

/* --- -s: connects per process --- */

/* Connects of @p that went to TCP, whatever the reason (saturating). */
static uint64_t stat_proc_tcp(const struct stat_proc *p)
{
	uint64_t n = 0;
	unsigned int r;

	for (r = SOCK_STAT_RT_FERRY + 1; r < SOCK_STAT_NROUTES; r++)
		n = n + p->connects[r] < n ? UINT64_MAX : n + p->connects[r];
	return n;
}

/* "reason:N" for every reason with connects, comma-separated; "-" if none. */
static void stat_proc_why(const struct stat_proc *p, char *buf, size_t len)
{
	size_t at = 0;
	unsigned int r;

	snprintf(buf, len, "-");
	for (r = SOCK_STAT_RT_FERRY + 1; r < SOCK_STAT_NROUTES && at < len; r++) {
		if (!p->connects[r])
			continue;
		at += (size_t)snprintf(buf + at, len - at, "%s%s:%llu", at ? "," : "",
				       sock_stat_route_name(r),
				       (unsigned long long)p->connects[r]);
	}
}

static int stat_proc_cmp(const void *a, const void *b)
{
	const struct stat_proc *x = a, *y = b;

	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

static void stat_print_summary(const struct stat_proc *procs, size_t n,
			       const struct stat_opts *o)
{
	char why[512], who[64];
	size_t k;

	if (o->header)
		printf("%-32s %10s %10s  %s\n", "Process", "Ferry", "TCP", "Why TCP");
	for (k = 0; k < n; k++) {
		const struct stat_proc *p = &procs[k];

		snprintf(who, sizeof(who), "users:((\"%s\",pid=%d))", p->comm, (int)p->pid);
		stat_proc_why(p, why, sizeof(why));
		printf("%-32s %10llu %10llu  %s\n", who,
		       (unsigned long long)p->connects[SOCK_STAT_RT_FERRY],
		       (unsigned long long)stat_proc_tcp(p), why);
	}
}

static void stat_print_summary_json(const struct stat_proc *procs, size_t n)
{
	unsigned int r;
	size_t k;

	printf("[");
	for (k = 0; k < n; k++) {
		const struct stat_proc *p = &procs[k];

		printf("%s\n  {\"pid\":%d,\"process\":", k ? "," : "", (int)p->pid);
		stat_json_string(p->comm);
		printf(",\"ferry\":%llu,\"tcp\":%llu,\"tcp_because\":{",
		       (unsigned long long)p->connects[SOCK_STAT_RT_FERRY],
		       (unsigned long long)stat_proc_tcp(p));
		for (r = SOCK_STAT_RT_FERRY + 1; r < SOCK_STAT_NROUTES; r++)
			printf("%s\"%s\":%llu", r > SOCK_STAT_RT_FERRY + 1 ? "," : "",
			       sock_stat_route_name(r), (unsigned long long)p->connects[r]);
		printf("}}");
	}
	printf("%s]\n", n ? "\n" : "");
}

/* --- main --- */

static void stat_usage(FILE *f)
{
	fprintf(f,
		"Usage: ferry-stat [OPTION]...\n"
		"List the ferry stream-socket connections of this network namespace.\n"
		"\n"
		"  -a, --all          every socket, listening and unconnected ones too\n"
		"  -l, --listening    listening sockets only\n"
		"  -n, --numeric      ports as numbers, not service names\n"
		"  -r, --resolve      host names instead of addresses\n"
		"  -p, --pid=PID      only the sockets of process PID\n"
		"  -s, --summary      per process: connects over ferry, and over TCP by reason\n"
		"  -j, --json         JSON: one object per socket, numeric\n"
		"  -H, --no-header    no header line\n"
		"  -h, --help         this help\n"
		"  -V, --version      the version\n"
		"\n"
		"Rx-ring: bytes arrived and not yet read / ring size.\n"
		"Tx-ring: bytes written and not yet completed / ring size.\n");
}

static int stat_parse(int argc, char **argv, struct stat_opts *o)
{
	static const struct option longopts[] = {
		{ "all", no_argument, NULL, 'a' },
		{ "listening", no_argument, NULL, 'l' },
		{ "numeric", no_argument, NULL, 'n' },
		{ "resolve", no_argument, NULL, 'r' },
		{ "pid", required_argument, NULL, 'p' },
		{ "summary", no_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-header", no_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	long v;
	int c;

	while ((c = getopt_long(argc, argv, "alnrp:sjHhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'a': o->show = STAT_SHOW_ALL; break;
		case 'l': o->show = STAT_SHOW_LISTENING; break;
		case 'n': o->numeric = true; break;
		case 'r': o->resolve = true; break;
		case 's': o->summary = true; break;
		case 'j': o->json = true; break;
		case 'H': o->header = false; break;
		case 'p':
			v = strtol(optarg, &end, 10);
			if (*end || end == optarg || v <= 0 || v > 0x3fffffff) {
				fprintf(stderr, "ferry-stat: -p %s: not a process id\n", optarg);
				return 2;
			}
			o->pid = (pid_t)v;
			break;
		case 'h':
			stat_usage(stdout);
			return 0;
		case 'V':
			printf("ferry-stat (ferry) %s\n", PACKAGE_VERSION);
			return 0;
		default:
			fprintf(stderr, "Try 'ferry-stat --help'.\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ferry-stat: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct stat_opts o = { .show = STAT_SHOW_CONNECTIONS, .header = true };
	struct stat_scan_notes notes = { 0 };
	struct stat_rows rows = { 0 };
	size_t i, n = 0;
	int ret = stat_parse(argc, argv, &o);

	if (ret >= 0)
		return ret;
	if (stat_scan(o.pid, &rows, &notes) < 0) {
		perror("ferry-stat: reading /proc");
		return 1;
	}
	for (i = 0; i < rows.n; i++)
		if (stat_wanted(&rows.v[i], &o))
			rows.v[n++] = rows.v[i];
	if (n > 1)
		qsort(rows.v, n, sizeof(rows.v[0]), stat_row_cmp);
	if (rows.nprocs > 1)
		qsort(rows.procs, rows.nprocs, sizeof(rows.procs[0]), stat_proc_cmp);
	if (o.summary && o.json)
		stat_print_summary_json(rows.procs, rows.nprocs);
	else if (o.summary)
		stat_print_summary(rows.procs, rows.nprocs, &o);
	else if (o.json)
		stat_print_json(rows.v, n);
	else
		stat_print_table(rows.v, n, &o);
	if (notes.denied && geteuid() != 0)
		fprintf(stderr, "ferry-stat: %d processes could not be inspected "
				"(not yours); root sees them all\n", notes.denied);
	if (notes.bad_segments || notes.bad_slots)
		fprintf(stderr, "ferry-stat: ignored %d segments and %d sockets that failed "
				"the checks (a different ferry version?)\n",
			notes.bad_segments, notes.bad_slots);
	if (notes.busy_slots)
		fprintf(stderr, "ferry-stat: %d sockets changed too fast to be read\n",
			notes.busy_slots);
	stat_rows_free(&rows);
	fflush(stdout);
	return ferror(stdout) ? 1 : 0;
}
