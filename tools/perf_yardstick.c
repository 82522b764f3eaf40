/*
 * perf_yardstick.c - what ferry is measured against on one host:
 *
 *  - a bare shared-memory ping-pong: two processes, one shared mapping, each
 *    copies its payload into the area the other reads and bumps a sequence
 *    number the other spins on.  No queues, no keys, no checks: the floor
 *    that any same-host transport pays (one copy and one cache-line transfer
 *    each way);
 *  - memcpy bandwidth between two buffers of one process.
 *
 * Nothing here depends on libferry: bench/shm_pingpong links it alone.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "perf.h"

#define PERF_BARE_HDR 4096	/* the two sequence lines, page-rounded */
#define PERF_CACHE_LINE 64

struct perf_bare_hdr {
	/* Written by the client, spun on by the server. */
	uint64_t seq_to_server __attribute__((aligned(PERF_CACHE_LINE)));
	/* Written by the server, spun on by the client; own cache line. */
	uint64_t seq_to_client __attribute__((aligned(PERF_CACHE_LINE)));
};

/* A view of the shared mapping (which the caller owns). */
struct perf_bare {
	struct perf_bare_hdr *hdr;
	char *to_server;	/* payload area the client fills */
	char *to_client;	/* payload area the server fills */
	size_t max_size;
};

static size_t perf_page_round(size_t n)
{
	return (n + 4095) & ~(size_t)4095;
}

size_t perf_bare_map_size(size_t max_size)
{
	return PERF_BARE_HDR + 2 * perf_page_round(max_size);
}

struct perf_bare *perf_bare_attach(void *map, size_t max_size)
{
	struct perf_bare *bare = calloc(1, sizeof(*bare));

	if (!bare)
		perf_die("out of memory");
	bare->hdr = map;
	bare->to_server = (char *)map + PERF_BARE_HDR;
	bare->to_client = bare->to_server + perf_page_round(max_size);
	bare->max_size = max_size;
	return bare;
}

void perf_bare_detach(struct perf_bare *bare)
{
	free(bare);
}

/* Server, before each row: both sequences start from zero. */
void perf_bare_prepare(struct perf_bare *bare)
{
	__atomic_store_n(&bare->hdr->seq_to_server, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&bare->hdr->seq_to_client, 0, __ATOMIC_RELEASE);
}

static void perf_bare_wait(uint64_t *seq, uint64_t want, int ctrl_fd)
{
	unsigned long spins = 0;

	while (__atomic_load_n(seq, __ATOMIC_ACQUIRE) != want)
		perf_spin_check(ctrl_fd, &spins);
}

void perf_bare_client(struct perf_bare *bare, const struct perf_row *row,
		      void *buf, int ctrl_fd, struct perf_result *res)
{
	uint64_t total = row->warmup + row->iters, i;
	uint64_t *ns = malloc(row->iters * sizeof(*ns));

	if (!ns)
		perf_die("out of memory");
	for (i = 1; i <= total; i++) {
		uint64_t t0 = monotime_ns();

		memcpy(bare->to_server, buf, row->size);
		__atomic_store_n(&bare->hdr->seq_to_server, i, __ATOMIC_RELEASE);
		perf_bare_wait(&bare->hdr->seq_to_client, i, ctrl_fd);
		if (i > row->warmup)
			ns[i - row->warmup - 1] = monotime_ns() - t0;
	}
	perf_lat_stats(ns, row->iters, res);
	free(ns);
}

void perf_bare_server(struct perf_bare *bare, const struct perf_row *row,
		      void *buf, int ctrl_fd)
{
	uint64_t total = row->warmup + row->iters, i;

	for (i = 1; i <= total; i++) {
		perf_bare_wait(&bare->hdr->seq_to_server, i, ctrl_fd);
		memcpy(bare->to_client, buf, row->size);
		__atomic_store_n(&bare->hdr->seq_to_client, i, __ATOMIC_RELEASE);
	}
}

/*
 * Copy @src to @dst, row->size bytes at a time, until row->bytes are copied
 * or row->seconds have passed.  The clock is read once per ~1 MiB so that it
 * costs nothing for small sizes.
 */
void perf_memcpy_bw(void *dst, const void *src, const struct perf_row *row,
		    struct perf_result *res)
{
	uint64_t per_check = row->size >= (1u << 20) ? 1 : (1u << 20) / row->size;
	uint64_t limit_ns = (uint64_t)(row->seconds * 1e9);
	uint64_t copies = 0, t0, now, k;
	int warm;

	for (warm = 0; warm < 16; warm++)
		memcpy(dst, src, row->size);
	t0 = monotime_ns();
	do {
		for (k = 0; k < per_check; k++) {
			memcpy(dst, src, row->size);
			/* the copies must happen: dst is "used" */
			__asm__ volatile("" : : "r"(dst) : "memory");
		}
		copies += per_check;
		now = monotime_ns();
	} while (copies * row->size < row->bytes && now - t0 < limit_ns);
	perf_bw_result(res, copies * row->size, copies, now - t0);
}
