/*
 * ping_stats.c - round-trip times without keeping every sample: a run
 * without -C may last for days.  A log-linear histogram (HDR style) keeps
 * values under 128 ns exactly and larger ones in 64 buckets per power of
 * two, so a quantile is within 1/128 of a real sample; min and max are
 * exact.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "ping.h"

#define STATS_EXACT 128		/* values below this have a bucket each */
#define STATS_SUB_BITS 6	/* 64 buckets per power of two above */
#define STATS_SUB (1u << STATS_SUB_BITS)
#define STATS_FIRST_EXP 7	/* log2(STATS_EXACT) */
#define STATS_BUCKETS (STATS_EXACT + (64 - STATS_FIRST_EXP) * STATS_SUB)

struct ping_stats {
	uint64_t count;
	uint64_t min_ns, max_ns;
	uint64_t buckets[STATS_BUCKETS];
};

static unsigned int stats_bucket(uint64_t ns)
{
	unsigned int exp, shift;

	if (ns < STATS_EXACT)
		return (unsigned int)ns;
	exp = 63 - (unsigned int)__builtin_clzll(ns);
	shift = exp - STATS_SUB_BITS;
	return STATS_EXACT + (exp - STATS_FIRST_EXP) * STATS_SUB +
	       (unsigned int)((ns >> shift) - STATS_SUB);
}

/* The middle of bucket @b, in ns. */
static uint64_t stats_bucket_mid(unsigned int b)
{
	unsigned int exp, shift;
	uint64_t low;

	if (b < STATS_EXACT)
		return b;
	exp = STATS_FIRST_EXP + (b - STATS_EXACT) / STATS_SUB;
	shift = exp - STATS_SUB_BITS;
	low = (uint64_t)(STATS_SUB + (b - STATS_EXACT) % STATS_SUB) << shift;
	return low + ((1ull << shift) >> 1);
}

struct ping_stats *ping_stats_new(void)
{
	struct ping_stats *stats = calloc(1, sizeof(*stats));

	if (stats)
		stats->min_ns = UINT64_MAX;
	return stats;
}

void ping_stats_free(struct ping_stats *stats)
{
	free(stats);
}

void ping_stats_add(struct ping_stats *stats, uint64_t ns)
{
	stats->count++;
	stats->buckets[stats_bucket(ns)]++;
	if (ns < stats->min_ns)
		stats->min_ns = ns;
	if (ns > stats->max_ns)
		stats->max_ns = ns;
}

uint64_t ping_stats_count(const struct ping_stats *stats)
{
	return stats->count;
}

/* Nearest rank: the smallest sample with at least q * count at or below it. */
uint64_t ping_stats_quantile(const struct ping_stats *stats, double q)
{
	uint64_t rank, seen = 0, mid;
	unsigned int b;

	if (stats->count == 0)
		return 0;
	rank = (uint64_t)ceil(q * (double)stats->count);
	if (rank < 1)
		rank = 1;
	for (b = 0; b < STATS_BUCKETS; b++) {
		seen += stats->buckets[b];
		if (seen >= rank)
			break;
	}
	if (b == STATS_BUCKETS)
		return stats->max_ns;
	mid = stats_bucket_mid(b);
	if (mid < stats->min_ns)
		return stats->min_ns;
	if (mid > stats->max_ns)
		return stats->max_ns;
	return mid;
}

void ping_stats_print(const struct ping_stats *stats, FILE *out)
{
	if (stats->count == 0) {
		fprintf(out, "%s: 0 pings\n", PING_PROG);
		return;
	}
	fprintf(out, "%s: %llu pings, rtt min/p50/p99/max = %.1f/%.1f/%.1f/%.1f us\n",
		PING_PROG, (unsigned long long)stats->count,
		stats->min_ns / 1e3, ping_stats_quantile(stats, 0.50) / 1e3,
		ping_stats_quantile(stats, 0.99) / 1e3, stats->max_ns / 1e3);
}
