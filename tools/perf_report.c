/*
 * perf_report.c - turn timings into rows, print them (a table for people,
 * one JSON object per line for scripts) and, at the end, the ratios the
 * issue sets as targets, computed from the rows of this run.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

#define PERF_REPORT_MAX_ROWS 1024

/* The state of the report: rows kept for the ratios. */
static struct {
	bool json;
	const char *cpus;
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

void perf_report_begin(bool json, const char *banner, const char *cpus)
{
	report.json = json;
	report.cpus = cpus;
	if (json)
		return;
	printf("# %s\n", banner);
	printf("%-4s %-9s %-9s %-5s %5s %9s %9s %9s %9s %9s\n",
	       "test", "op", "transport", "mode", "size",
	       "p50 us", "min us", "p99 us", "Gbit/s", "Mmsg/s");
	fflush(stdout);
}

static void perf_report_json(const struct perf_result *r)
{
	printf("{\"test\":\"%s\",\"op\":\"%s\",\"transport\":\"%s\","
	       "\"mode\":\"%s\",\"size\":%zu,\"iters\":%llu,",
	       perf_test_name(r->test), perf_op_name(r->op),
	       perf_transport_name(r->transport), perf_mode_name(r->mode),
	       r->size, (unsigned long long)r->iters);
	if (r->test == PERF_TEST_LAT)
		printf("\"rtt_us_min\":%.3f,\"rtt_us_p50\":%.3f,\"rtt_us_p99\":%.3f,",
		       r->min_us, r->p50_us, r->p99_us);
	else
		printf("\"gbit_s\":%.3f,\"mmsg_s\":%.4f,\"bytes\":%llu,\"seconds\":%.4f,",
		       r->gbit_s, r->mmsg_s, (unsigned long long)r->bytes,
		       r->seconds);
	printf("\"cpus\":\"%s\"}\n", report.cpus);
}

static void perf_report_human(const struct perf_result *r)
{
	char size[16];

	perf_format_size(size, sizeof(size), r->size);
	printf("%-4s %-9s %-9s %-5s %5s ", perf_test_name(r->test),
	       perf_op_name(r->op), perf_transport_name(r->transport),
	       perf_mode_name(r->mode), size);
	if (r->test == PERF_TEST_LAT)
		printf("%9.2f %9.2f %9.2f %9s %9s\n", r->p50_us, r->min_us,
		       r->p99_us, "-", "-");
	else
		printf("%9s %9s %9s %9.2f %9.3f\n", "-", "-", "-", r->gbit_s,
		       r->mmsg_s);
}

void perf_report_row(const struct perf_result *res)
{
	if (report.nrows < PERF_REPORT_MAX_ROWS)
		report.rows[report.nrows++] = *res;
	if (report.json)
		perf_report_json(res);
	else
		perf_report_human(res);
	fflush(stdout);
}

static const struct perf_result *perf_report_find(enum perf_test test,
						  int op,
						  enum perf_transport tr,
						  enum perf_mode mode,
						  size_t size)
{
	int i;

	for (i = 0; i < report.nrows; i++) {
		const struct perf_result *r = &report.rows[i];

		if (r->test == test && (op < 0 || r->op == (enum perf_op)op) &&
		    r->transport == tr && r->mode == mode && r->size == size)
			return r;
	}
	return NULL;
}

/* One target of the issue: value = num / den, met when on the right side. */
struct perf_ratio {
	const char *name;		/* JSON key */
	const char *label;		/* table text */
	const struct perf_result *num, *den;
	bool bandwidth;			/* compare gbit_s, else rtt p50 */
	bool at_most;			/* target is an upper bound */
	double target;
};

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
	n = q->bandwidth ? q->num->gbit_s : q->num->p50_us;
	d = q->bandwidth ? q->den->gbit_s : q->den->p50_us;
	value = d > 0 ? n / d : 0;
	met = q->at_most ? value <= q->target : value >= q->target;
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

void perf_report_ratios(void)
{
	const struct perf_result *ferry_busy, *ferry_block, *bare, *tcp;
	const struct perf_result *ferry_bw, *copy_bw;
	struct perf_ratio ratios[4];
	size_t i;

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
		ferry_busy, bare, false, true, 2.0 };
	ratios[1] = (struct perf_ratio){ "tcp_rtt_per_ferry_busy_rtt",
		"tcp 64 B rtt / ferry write_imm 64 B busy rtt",
		tcp, ferry_busy, false, false, 10.0 };
	ratios[2] = (struct perf_ratio){ "ferry_write_bw_per_memcpy_bw",
		"ferry write 64 KiB bw / memcpy 64 KiB bw",
		ferry_bw, copy_bw, true, false, 0.70 };
	ratios[3] = (struct perf_ratio){ "ferry_block_rtt_per_tcp_rtt",
		"ferry write_imm 64 B --block rtt / tcp 64 B rtt",
		ferry_block, tcp, false, true, 1.0 };

	if (!report.json)
		printf("\nratios (this run; p50 for latency):\n");
	for (i = 0; i < sizeof(ratios) / sizeof(ratios[0]); i++)
		perf_ratio_print(&ratios[i]);
	fflush(stdout);
}
