/*
 * perf_report.c - turn timings into rows, print them (a table for people,
 * one JSON object per line for scripts) and, at the end, the ratios the
 * issues set as targets, computed from the rows of this run, and how the
 * preload shim changes the tcp rows (for information).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

#define PERF_REPORT_MAX_ROWS 1024

/* The state of the report: rows kept for the ratios and the plot. */
static struct {
	bool json;
	const char *cpus;
	bool stream_seen;		/* the stream section's heading is out */
	bool network;			/* the address form: issue 16's targets */
	struct perf_result rows[PERF_REPORT_MAX_ROWS];
	int nrows;
} report;

static int perf_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorts @ns; fills min / p50 / p99 (nearest-rank percentiles). */
void perf_lat_stats(uint64_t *ns, size_t n, struct perf_result *res)
{
	size_t i50, i99;

	res->iters = n;
	if (n == 0)
		return;
	qsort(ns, n, sizeof(*ns), perf_cmp_u64);
	i50 = (n * 50 + 99) / 100;
	i99 = (n * 99 + 99) / 100;
	res->min_us = ns[0] / 1e3;
	res->p50_us = ns[i50 ? i50 - 1 : 0] / 1e3;
	res->p99_us = ns[i99 ? i99 - 1 : 0] / 1e3;
}

void perf_bw_result(struct perf_result *res, uint64_t bytes, uint64_t msgs,
		    uint64_t elapsed_ns)
{
	double sec = elapsed_ns ? elapsed_ns / 1e9 : 1e-9;

	res->bytes = bytes;
	res->iters = msgs;
	res->seconds = sec;
	res->gbit_s = bytes * 8.0 / sec / 1e9;
	res->mmsg_s = msgs / sec / 1e6;
}

void perf_report_set_network(bool network)
{
	report.network = network;
}

void perf_report_begin(bool json, const char *banner, const char *cpus)
{
	report.json = json;
	report.cpus = cpus;
	if (json)
		return;
	printf("# %s\n", banner);
	/* CPU per GB: both ends' getrusage, measured in the address form */
	printf("%-7s %-9s %-11s %-5s %5s %9s %9s %9s %9s %9s %9s%s\n",
	       "test", "op", "transport", "mode", "size",
	       "p50 us", "min us", "p99 us", "Gbit/s", "Mmsg/s", "conn/s",
	       report.network ? "  cpu s/GB" : "");
	fflush(stdout);
}

/* A transport that has no rows in this run, and why. */
void perf_report_note(const char *transport, const char *note)
{
	if (report.json)
		printf("{\"test\":\"note\",\"op\":\"stream\",\"transport\":\"%s\","
		       "\"note\":\"%s\"}\n", transport, note);
	else
		printf("# %s: %s\n", transport, note);
	fflush(stdout);
}

const struct perf_result *perf_report_rows(int *n_p)
{
	*n_p = report.nrows;
	return report.rows;
}

bool perf_report_is_json(void)
{
	return report.json;
}

static void perf_report_json(const struct perf_result *r)
{
	printf("{\"test\":\"%s\",\"op\":\"%s\",\"transport\":\"%s\","
	       "\"mode\":\"%s\",\"size\":%zu,\"iters\":%llu,",
	       perf_test_name(r->test), perf_op_name(r->op),
	       perf_transport_name(r->transport), perf_mode_name(r->mode),
	       r->size, (unsigned long long)r->iters);
	if (r->skipped)
		printf("\"skipped\":\"%s\",", r->note);
	else if (r->test == PERF_TEST_LAT)
		printf("\"rtt_us_min\":%.3f,\"rtt_us_p50\":%.3f,\"rtt_us_p99\":%.3f,",
		       r->min_us, r->p50_us, r->p99_us);
	else if (r->test == PERF_TEST_CONNECT)
		printf("\"conn_s\":%.1f,\"seconds\":%.4f,", r->conn_s, r->seconds);
	else if (r->test == PERF_TEST_RATE)
		printf("\"msg_s\":%.0f,\"gbit_s\":%.3f,\"bytes\":%llu,\"seconds\":%.4f,",
		       r->mmsg_s * 1e6, r->gbit_s, (unsigned long long)r->bytes,
		       r->seconds);
	else
		printf("\"gbit_s\":%.3f,\"mmsg_s\":%.4f,\"bytes\":%llu,\"seconds\":%.4f,"
		       "\"cpu_s_per_gb\":%.4f,", r->gbit_s, r->mmsg_s,
		       (unsigned long long)r->bytes, r->seconds, r->cpu_s_per_gb);
	printf("\"rounds\":%u,\"cpus\":\"%s\"}\n", r->rounds ? r->rounds : 1, report.cpus);
}

static void perf_report_human(const struct perf_result *r)
{
	char size[16];

	if (r->op == PERF_OP_STREAM && !report.stream_seen) {
		printf("# stream sockets: busy rows poll (FERRY_POLL_US=1000000; tcp and tcp+preload spin on MSG_DONTWAIT), block rows sleep (FERRY_POLL_US=0; tcp and tcp+preload block)\n");
		report.stream_seen = true;
	}
	perf_format_size(size, sizeof(size), r->size);
	printf("%-7s %-9s %-11s %-5s %5s ", perf_test_name(r->test),
	       perf_op_name(r->op), perf_transport_name(r->transport),
	       perf_mode_name(r->mode), size);
	if (r->skipped)
		printf("%s\n", r->note);
	else if (r->test == PERF_TEST_LAT)
		printf("%9.2f %9.2f %9.2f %9s %9s %9s\n", r->p50_us, r->min_us,
		       r->p99_us, "-", "-", "-");
	else if (r->test == PERF_TEST_CONNECT)
		printf("%9s %9s %9s %9s %9s %9.0f\n", "-", "-", "-", "-", "-",
		       r->conn_s);
	else if (report.network && r->cpu_s_per_gb > 0)
		printf("%9s %9s %9s %9.2f %9.3f %9s %10.3f\n", "-", "-", "-", r->gbit_s,
		       r->mmsg_s, "-", r->cpu_s_per_gb);
	else
		printf("%9s %9s %9s %9.2f %9.3f %9s\n", "-", "-", "-", r->gbit_s,
		       r->mmsg_s, "-");
}

static int perf_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * Add round @res to @acc, the row's result so far; after the last round,
 * what the rounds make together: latency min and p99 the extremes of the
 * rounds', p50 the median of their p50s (@acc keeps them); throughput,
 * rates and connections their sums over the sum of their times.
 */
static void perf_round_add(struct perf_result *acc, const struct perf_result *res)
{
	double p50[PERF_MAX_ROUNDS];
	unsigned int n = res->round + 1;

	if (res->skipped) {
		acc->skipped = true;
		memcpy(acc->note, res->note, sizeof(acc->note));
	}
	if (acc->skipped)
		return;
	if (res->round < PERF_MAX_ROUNDS)
		acc->round_p50_us[res->round] = res->p50_us;
	if (res->round > 0) {
		if (acc->bytes + res->bytes)	/* weighed by the bytes moved */
			acc->cpu_s_per_gb = (acc->cpu_s_per_gb * (double)acc->bytes +
					     res->cpu_s_per_gb * (double)res->bytes) /
					    (double)(acc->bytes + res->bytes);
		acc->iters += res->iters;
		acc->bytes += res->bytes;
		acc->seconds += res->seconds;
		if (res->min_us < acc->min_us)
			acc->min_us = res->min_us;
		if (res->p99_us > acc->p99_us)
			acc->p99_us = res->p99_us;
	}
	if (acc->test == PERF_TEST_LAT) {
		if (n < res->rounds)
			return;		/* the median waits for every round */
		if (n > PERF_MAX_ROUNDS)
			n = PERF_MAX_ROUNDS;
		memcpy(p50, acc->round_p50_us, n * sizeof(*p50));
		qsort(p50, n, sizeof(*p50), perf_cmp_double);
		acc->p50_us = n % 2 ? p50[n / 2] : (p50[n / 2 - 1] + p50[n / 2]) / 2;
	} else if (acc->test == PERF_TEST_CONNECT) {
		acc->conn_s = acc->iters / (acc->seconds > 0 ? acc->seconds : 1e-9);
	} else {
		double sec = acc->seconds > 0 ? acc->seconds : 1e-9;

		acc->gbit_s = acc->bytes * 8.0 / sec / 1e9;
		acc->mmsg_s = acc->iters / sec / 1e6;
	}
}

/*
 * A row run in rounds (PERF_ROUNDS in ferry-perf.c): the first round's
 * result is kept, the later ones are merged into it (perf_round_add), and
 * the whole is printed after the last.  Returns the row to print, or NULL
 * while rounds are still to come.
 */
static const struct perf_result *perf_report_round(const struct perf_result *res)
{
	struct perf_result *acc = NULL;
	int i;

	for (i = report.nrows - 1; i >= 0 && res->round > 0; i--) {
		struct perf_result *r = &report.rows[i];

		if (r->rounds == res->rounds && r->test == res->test && r->op == res->op &&
		    r->transport == res->transport && r->mode == res->mode &&
		    r->size == res->size) {
			acc = r;
			break;
		}
	}
	if (!acc) {
		if (report.nrows == PERF_REPORT_MAX_ROWS)
			return res->round + 1 < res->rounds ? NULL : res;
		acc = &report.rows[report.nrows++];
		*acc = *res;
	}
	perf_round_add(acc, res);
	return res->round + 1 < res->rounds ? NULL : acc;
}

void perf_report_row(const struct perf_result *res)
{
	if (res->rounds > 1) {
		res = perf_report_round(res);
		if (!res)
			return;
	} else if (report.nrows < PERF_REPORT_MAX_ROWS) {
		report.rows[report.nrows++] = *res;
	}
	if (report.json)
		perf_report_json(res);
	else
		perf_report_human(res);
	fflush(stdout);
}

/* A row of this run; @op -1: any operation but stream. */
static const struct perf_result *perf_report_find(enum perf_test test,
						  int op,
						  enum perf_transport tr,
						  enum perf_mode mode,
						  size_t size)
{
	int i;

	for (i = 0; i < report.nrows; i++) {
		const struct perf_result *r = &report.rows[i];

		if (r->skipped)
			continue;
		if (op < 0 ? r->op == PERF_OP_STREAM : r->op != (enum perf_op)op)
			continue;
		if (r->test == test && r->transport == tr && r->mode == mode &&
		    r->size == size)
			return r;
	}
	return NULL;
}

enum perf_metric {
	PERF_METRIC_RTT,		/* rtt p50 */
	PERF_METRIC_GBIT,		/* gbit_s */
	PERF_METRIC_MSG,		/* messages per second */
	PERF_METRIC_CONN,		/* connections per second */
	PERF_METRIC_CPU,		/* CPU seconds per GB */
};

/* One target of the issue: value = num / den, met when on the right side. */
struct perf_ratio {
	const char *name;		/* JSON key */
	const char *label;		/* table text */
	const struct perf_result *num, *den;
	enum perf_metric metric;
	bool at_most;			/* target is an upper bound */
	double target;			/* 0: for information, no target */
};

static double perf_metric_value(const struct perf_result *r, enum perf_metric m)
{
	switch (m) {
	case PERF_METRIC_GBIT: return r->gbit_s;
	case PERF_METRIC_MSG: return r->mmsg_s;
	case PERF_METRIC_CONN: return r->conn_s;
	case PERF_METRIC_CPU: return r->cpu_s_per_gb;
	default: return r->p50_us;
	}
}

static void perf_ratio_print(const struct perf_ratio *q)
{
	double n, d, value;
	bool met;

	if (!q->num || !q->den) {
		if (report.json)
			printf("{\"test\":\"ratio\",\"name\":\"%s\",\"op\":\"%s\","
			       "\"transport\":\"-\",\"mode\":\"-\",\"size\":0,"
			       "\"value\":null}\n", q->name, q->name);
		else
			printf("  %-50s %8s   (rows missing from this run)\n",
			       q->label, "n/a");
		return;
	}
	n = perf_metric_value(q->num, q->metric);
	d = perf_metric_value(q->den, q->metric);
	value = d > 0 ? n / d : 0;
	met = q->at_most ? value <= q->target : value >= q->target;
	if (q->target == 0) {
		if (report.json)
			printf("{\"test\":\"ratio\",\"name\":\"%s\",\"op\":\"%s\","
			       "\"transport\":\"%s/%s\",\"mode\":\"%s\",\"size\":%zu,"
			       "\"value\":%.3f,\"target\":null}\n",
			       q->name, q->name,
			       perf_transport_name(q->num->transport),
			       perf_transport_name(q->den->transport),
			       perf_mode_name(q->num->mode), q->num->size, value);
		else
			printf("  %-50s %8.2f   (for information)\n", q->label, value);
		return;
	}
	if (report.json) {
		printf("{\"test\":\"ratio\",\"name\":\"%s\",\"op\":\"%s\","
		       "\"transport\":\"%s/%s\",\"mode\":\"%s\",\"size\":%zu,"
		       "\"value\":%.3f,\"target\":\"%s %.2f\",\"met\":%s}\n",
		       q->name, q->name,
		       perf_transport_name(q->num->transport),
		       perf_transport_name(q->den->transport),
		       perf_mode_name(q->num->mode), q->num->size, value,
		       q->at_most ? "<=" : ">=", q->target,
		       met ? "true" : "false");
		return;
	}
	printf("  %-50s %8.2f   target %s %.2f  %s\n", q->label, value,
	       q->at_most ? "<=" : ">=", q->target, met ? "met" : "MISSED");
}

/* A ferry-shm stream row of @test: busy if measured, else blocking. */
static const struct perf_result *perf_stream_find(enum perf_test test, size_t size)
{
	const struct perf_result *r;

	r = perf_report_find(test, PERF_OP_STREAM, PERF_TR_FERRY, PERF_MODE_BUSY, size);
	return r ? r : perf_report_find(test, PERF_OP_STREAM, PERF_TR_FERRY,
					PERF_MODE_BLOCK, size);
}

/* The stream targets of issue 4: ferry-shm sockets beside TCP sockets. */
static int perf_stream_ratios(struct perf_ratio *q)
{
	const struct perf_result *busy, *block, *tcp_block, *tcp_busy;
	const struct perf_result *bw, *tcp_bw, *rate, *tcp_rate, *conn, *tcp_conn;
	enum perf_test lat = PERF_TEST_LAT;

	busy = perf_report_find(lat, PERF_OP_STREAM, PERF_TR_FERRY, PERF_MODE_BUSY, 64);
	block = perf_report_find(lat, PERF_OP_STREAM, PERF_TR_FERRY, PERF_MODE_BLOCK, 64);
	tcp_busy = perf_report_find(lat, PERF_OP_STREAM, PERF_TR_TCP, PERF_MODE_BUSY, 64);
	tcp_block = perf_report_find(lat, PERF_OP_STREAM, PERF_TR_TCP, PERF_MODE_BLOCK, 64);
	bw = perf_stream_find(PERF_TEST_BW, 65536);
	tcp_bw = perf_report_find(PERF_TEST_BW, PERF_OP_STREAM, PERF_TR_TCP,
				  PERF_MODE_BLOCK, 65536);
	rate = perf_stream_find(PERF_TEST_RATE, 64);
	tcp_rate = perf_report_find(PERF_TEST_RATE, PERF_OP_STREAM, PERF_TR_TCP,
				    PERF_MODE_BLOCK, 64);
	conn = perf_stream_find(PERF_TEST_CONNECT, 1);
	tcp_conn = perf_report_find(PERF_TEST_CONNECT, PERF_OP_STREAM, PERF_TR_TCP,
				    PERF_MODE_BLOCK, 1);

	q[0] = (struct perf_ratio){ "stream_tcp_rtt_per_ferry_busy_rtt",
		"stream: tcp 64 B rtt / ferry-shm 64 B busy rtt",
		tcp_block, busy, PERF_METRIC_RTT, false, 10.0 };
	q[1] = (struct perf_ratio){ "stream_tcp_busy_rtt_per_ferry_busy_rtt",
		"stream: tcp busy 64 B rtt / ferry-shm busy rtt",
		tcp_busy, busy, PERF_METRIC_RTT, false, 0 };
	q[2] = (struct perf_ratio){ "stream_ferry_bw_per_tcp_bw",
		"stream: ferry-shm 64 KiB bw / tcp 64 KiB bw",
		bw, tcp_bw, PERF_METRIC_GBIT, false, 3.0 };
	q[3] = (struct perf_ratio){ "stream_ferry_msg_s_per_tcp_msg_s",
		"stream: ferry-shm 64 B msg/s / tcp 64 B msg/s",
		rate, tcp_rate, PERF_METRIC_MSG, false, 10.0 };
	q[4] = (struct perf_ratio){ "stream_ferry_block_rtt_per_tcp_rtt",
		"stream: ferry-shm 64 B block rtt / tcp 64 B rtt",
		block, tcp_block, PERF_METRIC_RTT, true, 1.0 };
	q[5] = (struct perf_ratio){ "stream_ferry_conn_s_per_tcp_conn_s",
		"stream: ferry-shm conn/s / tcp conn/s",
		conn, tcp_conn, PERF_METRIC_CONN, false, 0.5 };
	return 6;
}

/* A stream row of this run. */
static const struct perf_result *perf_stream_row(enum perf_test test,
						   enum perf_transport tr,
						   enum perf_mode mode, size_t size)
{
	return perf_report_find(test, PERF_OP_STREAM, tr, mode, size);
}

/*
 * An unmodified program under the shim against itself on kernel TCP: the
 * tcp rows and the tcp+preload rows run the same code, so each line says
 * how many times better the shim made it (for information: no target).
 */
static int perf_preload_ratios(struct perf_ratio *q)
{
	enum perf_transport tcp = PERF_TR_TCP, pre = PERF_TR_PRELOAD;
	enum perf_mode busy = PERF_MODE_BUSY, block = PERF_MODE_BLOCK;
	enum perf_test lat = PERF_TEST_LAT;

	q[0] = (struct perf_ratio){ "preload_tcp_busy_rtt_per_preload_busy_rtt",
		"preload: tcp / tcp+preload 64 B busy rtt",
		perf_stream_row(lat, tcp, busy, 64),
		perf_stream_row(lat, pre, busy, 64), PERF_METRIC_RTT, false, 0 };
	q[1] = (struct perf_ratio){ "preload_tcp_block_rtt_per_preload_block_rtt",
		"preload: tcp / tcp+preload 64 B block rtt",
		perf_stream_row(lat, tcp, block, 64),
		perf_stream_row(lat, pre, block, 64), PERF_METRIC_RTT, false, 0 };
	q[2] = (struct perf_ratio){ "preload_bw_per_tcp_bw",
		"preload: tcp+preload / tcp 64 KiB bw",
		perf_stream_row(PERF_TEST_BW, pre, block, 65536),
		perf_stream_row(PERF_TEST_BW, tcp, block, 65536),
		PERF_METRIC_GBIT, false, 0 };
	q[3] = (struct perf_ratio){ "preload_msg_s_per_tcp_msg_s",
		"preload: tcp+preload / tcp 64 B msg/s",
		perf_stream_row(PERF_TEST_RATE, pre, block, 64),
		perf_stream_row(PERF_TEST_RATE, tcp, block, 64),
		PERF_METRIC_MSG, false, 0 };
	q[4] = (struct perf_ratio){ "preload_conn_s_per_tcp_conn_s",
		"preload: tcp+preload / tcp conn/s",
		perf_stream_row(PERF_TEST_CONNECT, pre, block, 1),
		perf_stream_row(PERF_TEST_CONNECT, tcp, block, 1),
		PERF_METRIC_CONN, false, 0 };
	return 5;
}

/*
 * The address form's targets (issue 16): ferry through the CM (the tcp
 * transport, to another host) beside kernel TCP on the same path.
 */
static void perf_network_ratios(void)
{
	const struct perf_result *tcp_rtt, *tcp_bw;
	struct perf_ratio q[6];
	size_t i;

	tcp_rtt = perf_report_find(PERF_TEST_LAT, -1, PERF_TR_TCP, PERF_MODE_BLOCK, 64);
	tcp_bw = perf_report_find(PERF_TEST_BW, -1, PERF_TR_TCP, PERF_MODE_BLOCK, 65536);
#define PERF_NET_ROW(test, op, size) \
	perf_report_find(test, op, PERF_TR_FERRY, PERF_MODE_BUSY, size)
	q[0] = (struct perf_ratio){ "net_ferry_write_imm_rtt_per_tcp_rtt",
		"ferry-cm write_imm 64 B busy rtt / tcp 64 B rtt",
		PERF_NET_ROW(PERF_TEST_LAT, PERF_OP_WRITE_IMM, 64), tcp_rtt,
		PERF_METRIC_RTT, true, 1.3 };
	q[1] = (struct perf_ratio){ "net_ferry_send_rtt_per_tcp_rtt",
		"ferry-cm send 64 B busy rtt / tcp 64 B rtt",
		PERF_NET_ROW(PERF_TEST_LAT, PERF_OP_SEND, 64), tcp_rtt,
		PERF_METRIC_RTT, true, 1.3 };
	q[2] = (struct perf_ratio){ "net_ferry_read_rtt_per_tcp_rtt",
		"ferry-cm read 64 B busy rtt / tcp 64 B rtt",
		PERF_NET_ROW(PERF_TEST_LAT, PERF_OP_READ, 64), tcp_rtt,
		PERF_METRIC_RTT, true, 0 };
	q[3] = (struct perf_ratio){ "net_ferry_write_bw_per_tcp_bw",
		"ferry-cm write 64 KiB bw / tcp 64 KiB bw",
		PERF_NET_ROW(PERF_TEST_BW, PERF_OP_WRITE, 65536), tcp_bw,
		PERF_METRIC_GBIT, false, 0.8 };
	q[4] = (struct perf_ratio){ "net_ferry_read_bw_per_tcp_bw",
		"ferry-cm read 64 KiB bw / tcp 64 KiB bw",
		PERF_NET_ROW(PERF_TEST_BW, PERF_OP_READ, 65536), tcp_bw,
		PERF_METRIC_GBIT, false, 0.8 };
	q[5] = (struct perf_ratio){ "net_ferry_write_cpu_per_tcp_cpu",
		"ferry-cm write 64 KiB cpu s/GB / tcp's",
		PERF_NET_ROW(PERF_TEST_BW, PERF_OP_WRITE, 65536), tcp_bw,
		PERF_METRIC_CPU, true, 0 };
#undef PERF_NET_ROW
	if (!report.json)
		printf("\nratios (this run; p50 for latency; issue 16's targets):\n");
	for (i = 0; i < sizeof(q) / sizeof(q[0]); i++)
		if (q[i].num && q[i].den)
			perf_ratio_print(&q[i]);
	fflush(stdout);
}

void perf_report_ratios(void)
{
	const struct perf_result *ferry_busy, *ferry_block, *bare, *tcp;
	const struct perf_result *ferry_bw, *copy_bw;
	struct perf_ratio ratios[16];
	size_t i, g, n = 4, groups[4];
	bool any;

	if (report.network) {
		perf_network_ratios();
		return;
	}
	ferry_busy = perf_report_find(PERF_TEST_LAT, PERF_OP_WRITE_IMM,
				      PERF_TR_FERRY, PERF_MODE_BUSY, 64);
	ferry_block = perf_report_find(PERF_TEST_LAT, PERF_OP_WRITE_IMM,
				       PERF_TR_FERRY, PERF_MODE_BLOCK, 64);
	bare = perf_report_find(PERF_TEST_LAT, -1, PERF_TR_BARE,
				PERF_MODE_BUSY, 64);
	tcp = perf_report_find(PERF_TEST_LAT, -1, PERF_TR_TCP,
			       PERF_MODE_BLOCK, 64);
	ferry_bw = perf_report_find(PERF_TEST_BW, PERF_OP_WRITE, PERF_TR_FERRY,
				    PERF_MODE_BUSY, 65536);
	copy_bw = perf_report_find(PERF_TEST_BW, -1, PERF_TR_MEMCPY,
				   PERF_MODE_BUSY, 65536);

	ratios[0] = (struct perf_ratio){ "ferry_busy_rtt_per_bare_rtt",
		"ferry write_imm 64 B busy rtt / shm-bare rtt",
		ferry_busy, bare, PERF_METRIC_RTT, true, 2.0 };
	ratios[1] = (struct perf_ratio){ "tcp_rtt_per_ferry_busy_rtt",
		"tcp 64 B rtt / ferry write_imm 64 B busy rtt",
		tcp, ferry_busy, PERF_METRIC_RTT, false, 10.0 };
	ratios[2] = (struct perf_ratio){ "ferry_write_bw_per_memcpy_bw",
		"ferry write 64 KiB bw / memcpy 64 KiB bw",
		ferry_bw, copy_bw, PERF_METRIC_GBIT, false, 0.70 };
	ratios[3] = (struct perf_ratio){ "ferry_block_rtt_per_tcp_rtt",
		"ferry write_imm 64 B --block rtt / tcp 64 B rtt",
		ferry_block, tcp, PERF_METRIC_RTT, true, 1.0 };
	groups[0] = 0;			/* verbs-style operations */
	groups[1] = n;			/* stream sockets */
	n += (size_t)perf_stream_ratios(ratios + n);
	groups[2] = n;			/* tcp under the preload against tcp */
	n += (size_t)perf_preload_ratios(ratios + n);
	groups[3] = n;

	if (!report.json)
		printf("\nratios (this run; p50 for latency):\n");
	/* a group none of whose rows ran stays silent */
	for (i = 0; i < n; i++) {
		size_t j;

		for (g = 0; i >= groups[g + 1]; g++)
			;
		for (any = false, j = groups[g]; j < groups[g + 1]; j++)
			any |= ratios[j].num && ratios[j].den;
		if (any)
			perf_ratio_print(&ratios[i]);
	}
	fflush(stdout);
}
