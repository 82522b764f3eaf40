/*
 * sock_copy.c - which stores a stream's direct writes use.
 *
 * On shm a write goes straight from the caller's buffer into the peer's
 * ring (ferry_post_send_direct), and the reader copies it out on its own
 * CPU.  A plain store into the ring must first take the line back from
 * the reader's cache, where the last read left it: a round trip between
 * the two CPUs for every line.  When they share a cache complex that is
 * cheap and plain stores are the fastest copy there is; when they do not
 * (another complex, another socket, or a VM whose vCPUs the host placed
 * so) the round trips make the writer several times slower.  Stores that
 * go past the writer's caches (FERRY_DIRECT_NOCACHE) do not wait for
 * them: the lines go to memory and the reader fetches them from there,
 * at the same speed wherever the CPUs are, below the plain stores' best.
 *
 * On one 2-vCPU VM, 64 KiB stream writes moved 100-165 Gbit/s with plain
 * stores and 30-35 Gbit/s in runs where the vCPUs sat far apart, and
 * 70-107 Gbit/s with non-temporal ones in either case.  Where the
 * processes will run is not known beforehand and may change, so each
 * socket measures the rate of its large sends, from the start of one to
 * the end of the next (copying, waiting for ring space where a slower
 * reader shows, and whatever the program does in between), over
 * SOCK_COPY_WINDOW bytes sent without a pause, with one kind of store,
 * then the other; it keeps the faster, trying the other again now and
 * then (more rarely the more it lost by).  FERRY_STREAM_COPY=cached or
 * nocache fixes the kind.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "sock-internal.h"

/* Bytes of large writes measured at a time. */
#define SOCK_COPY_WINDOW	(8u << 20)
/* A pause this long between large sends: the program is not streaming. */
#define SOCK_COPY_GAP_NS	1000000u
/* Windows between two tries of the kind that lost; four times as many
 * when it moved less than half as much. */
#define SOCK_COPY_RETRY		16u

enum sock_copy_policy {
	SOCK_COPY_AUTO,
	SOCK_COPY_CACHED,
	SOCK_COPY_NOCACHE,
};

static enum sock_copy_policy sock_copy_policy(void)
{
	static atomic_int cached = -1;
	int v = atomic_load_explicit(&cached, memory_order_relaxed);

	if (v < 0) {
		const char *env = getenv("FERRY_STREAM_COPY");

		v = SOCK_COPY_AUTO;
		if (env && !strcmp(env, "cached"))
			v = SOCK_COPY_CACHED;
		else if (env && !strcmp(env, "nocache"))
			v = SOCK_COPY_NOCACHE;
		else if (env && *env && strcmp(env, "auto"))
			ferry_warn("FERRY_STREAM_COPY=%s is not auto, cached or nocache: "
				   "using auto", env);
		atomic_store_explicit(&cached, v, memory_order_relaxed);
	}
	return (enum sock_copy_policy)v;
}

unsigned int sock_copy_how(struct ferry_sock *s, uint32_t len)
{
	switch (sock_copy_policy()) {
	case SOCK_COPY_CACHED:
		return 0;
	case SOCK_COPY_NOCACHE:
		return FERRY_DIRECT_NOCACHE;
	default:
		break;
	}
	if (len < SOCK_COPY_LARGE)
		return 0;	/* short writes: what the reader needs soon, in cache */
	return s->copy.nocache ? FERRY_DIRECT_NOCACHE : 0;
}

void sock_copy_account(struct ferry_sock *s, uint64_t bytes, uint64_t start_ns,
		       uint64_t end_ns)
{
	struct sock_copy *c = &s->copy;
	unsigned int cur = c->nocache, other = !cur;
	unsigned int best, worst, retry;

	if (sock_copy_policy() != SOCK_COPY_AUTO)
		return;
	/* A pause between sends ends the stream the window measured. */
	if (start_ns - c->last_ns > SOCK_COPY_GAP_NS)
		c->bytes = c->ns = 0;
	else
		c->ns += start_ns - c->last_ns;
	c->last_ns = end_ns;
	c->bytes += bytes;
	c->ns += end_ns - start_ns;
	if (c->bytes < SOCK_COPY_WINDOW)
		return;
	c->rate[cur] = c->bytes * 1000 / (c->ns ? c->ns : 1) + 1;	/* bytes/us, > 0 */
	c->bytes = c->ns = 0;
	c->windows++;
	if (!c->rate[other]) {
		c->nocache = other;	/* not measured yet */
		return;
	}
	best = c->rate[cur] > c->rate[other] ? cur : other;
	worst = !best;
	retry = c->rate[worst] * 2 < c->rate[best] ? 4 * SOCK_COPY_RETRY : SOCK_COPY_RETRY;
	c->nocache = c->windows % retry == 0 ? worst : best;
}
