/*
 * bench/herd_kv.c - bench/herd's key-value table (open addressing, linear
 * probing, fixed 32-byte values), each client's exact model of its own key
 * range, the request mix, and the report of a run.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "herd.h"

double herd_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* splitmix64: the keys, the values and the mix from one fixed seed. */
static uint64_t herd_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t herd_rng_next(uint64_t *state)
{
	*state += 0x9e3779b97f4a7c15ull;
	return herd_mix(*state);
}

void herd_key_make(uint32_t id, uint8_t key[HERD_KEY_BYTES])
{
	uint64_t a = herd_mix(id), b = herd_mix(a ^ id);

	memcpy(key, &a, 8);
	memcpy(key + 8, &b, 8);
}

uint8_t herd_value_initial(uint32_t id, uint8_t value[HERD_VALUE_MAX])
{
	uint64_t w = herd_mix((uint64_t)id << 32 | 0x5a5a);
	int i;

	for (i = 0; i < HERD_VALUE_MAX; i += 8) {
		memcpy(value + i, &w, 8);
		w = herd_mix(w);
	}
	return HERD_VALUE_MAX;
}

/* --- the table --- */

static uint32_t herd_table_home(const uint8_t key[HERD_KEY_BYTES])
{
	uint64_t a, b;

	memcpy(&a, key, 8);
	memcpy(&b, key + 8, 8);
	return (uint32_t)(herd_mix(a ^ (b * 31)) & (HERD_TABLE_BUCKETS - 1));
}

/* The bucket holding @key, or the free one where it would go; NULL: full. */
static struct herd_bucket *herd_table_find(struct herd_table *t,
					   const uint8_t key[HERD_KEY_BYTES])
{
	uint32_t i = herd_table_home(key), n;

	for (n = 0; n < HERD_TABLE_BUCKETS; n++, i = (i + 1) & (HERD_TABLE_BUCKETS - 1)) {
		struct herd_bucket *b = &t->buckets[i];

		if (!b->used || memcmp(b->key, key, HERD_KEY_BYTES) == 0)
			return b;
	}
	return NULL;
}

/* Every client's keys with their first values, as HERD fills its table. */
int herd_table_init(struct herd_table *t, int nclients)
{
	uint32_t id, ids = (uint32_t)nclients * HERD_KEYS_PER_CLIENT;

	t->buckets = calloc(HERD_TABLE_BUCKETS, sizeof(*t->buckets));
	if (!t->buckets) {
		perror("herd: table");
		return -1;
	}
	for (id = 0; id < ids; id++) {
		uint8_t key[HERD_KEY_BYTES];
		struct herd_bucket *b;

		herd_key_make(id, key);
		b = herd_table_find(t, key);
		b->used = 1;
		memcpy(b->key, key, HERD_KEY_BYTES);
		b->vlen = herd_value_initial(id, b->value);
	}
	return 0;
}

void herd_table_fini(struct herd_table *t)
{
	free(t->buckets);
	t->buckets = NULL;
}

void herd_table_execute(struct herd_table *t, const struct herd_req *req,
			struct herd_resp *resp)
{
	struct herd_bucket *b;

	memset(resp, 0, sizeof(*resp));
	resp->seq = req->seq;
	resp->slot = req->slot;
	/* A peer's request: an unknown op or a value longer than a bucket's
	 * is answered, not executed. */
	if ((req->op != HERD_OP_GET && req->op != HERD_OP_PUT) || req->vlen > HERD_VALUE_MAX) {
		resp->status = HERD_ST_BAD;
		return;
	}
	b = herd_table_find(t, req->key);
	if (!b) {
		resp->status = req->op == HERD_OP_GET ? HERD_ST_MISSING : HERD_ST_FULL;
	} else if (req->op == HERD_OP_GET) {
		resp->status = b->used ? HERD_ST_OK : HERD_ST_MISSING;
		resp->vlen = b->used ? b->vlen : 0;
		memcpy(resp->value, b->value, resp->vlen);
	} else {
		b->used = 1;
		memcpy(b->key, req->key, HERD_KEY_BYTES);
		b->vlen = req->vlen;
		memset(b->value, 0, HERD_VALUE_MAX);
		memcpy(b->value, req->value, req->vlen);
		resp->status = HERD_ST_OK;
	}
}

/* --- a client's model --- */

void herd_model_init(struct herd_model *m, int client, uint64_t seed)
{
	uint32_t i;

	memset(m, 0, sizeof(*m));
	m->first_id = (uint32_t)client * HERD_KEYS_PER_CLIENT;
	m->rng = seed ^ herd_mix((uint64_t)client + 1);
	for (i = 0; i < HERD_KEYS_PER_CLIENT; i++)
		m->vlen[i] = herd_value_initial(m->first_id + i, m->value[i]);
}

/*
 * Keys with a request outstanding are drawn again: two requests on one key
 * in a window may be executed in either order (the server polls slots in
 * its own order), and the model must know which came first.
 */
void herd_model_next(struct herd_model *m, struct herd_pending *p, uint8_t slot, uint8_t seq)
{
	uint64_t r;
	uint32_t k;
	int i;

	do {
		r = herd_rng_next(&m->rng);
		k = (uint32_t)(r % HERD_KEYS_PER_CLIENT);
	} while (m->busy[k]);
	m->busy[k] = 1;
	memset(&p->req, 0, sizeof(p->req));
	herd_key_make(m->first_id + k, p->req.key);
	p->key_index = k;
	p->req.slot = slot;
	p->req.seq = seq;
	p->req.op = (r >> 32) % 100 < 5 ? HERD_OP_PUT : HERD_OP_GET;
	if (p->req.op == HERD_OP_PUT) {
		uint64_t w = herd_rng_next(&m->rng);

		p->req.vlen = (uint8_t)(1 + w % HERD_VALUE_MAX);
		for (i = 0; i < HERD_VALUE_MAX; i += 8) {
			memcpy(p->req.value + i, &w, 8);
			w = herd_mix(w);
		}
		memset(p->req.value + p->req.vlen, 0, HERD_VALUE_MAX - p->req.vlen);
	}
	p->busy = true;
}

int herd_model_check(struct herd_model *m, struct herd_pending *p, const struct herd_resp *resp)
{
	uint32_t k = p->key_index;

	if (p->hostile) {
		/* The server must have refused it, and left the table alone
		 * (the GETs after it check that). */
		m->busy[k] = 0;
		p->busy = false;
		if (resp->status == HERD_ST_BAD)
			return 0;
		fprintf(stderr, "herd: a malformed request (op %u, %u bytes) got status %u\n",
			p->req.op, p->req.vlen, resp->status);
		return -1;
	}
	if (resp->status != HERD_ST_OK) {
		fprintf(stderr, "herd: key %u: status %u\n", m->first_id + k, resp->status);
		return -1;
	}
	if (p->req.op == HERD_OP_GET &&
	    (resp->vlen != m->vlen[k] || memcmp(resp->value, m->value[k], m->vlen[k]) != 0)) {
		fprintf(stderr, "herd: key %u: GET returned %u bytes unlike the model's %u\n",
			m->first_id + k, resp->vlen, m->vlen[k]);
		return -1;
	}
	if (p->req.op == HERD_OP_PUT) {
		m->vlen[k] = p->req.vlen;
		memcpy(m->value[k], p->req.value, HERD_VALUE_MAX);
	}
	m->busy[k] = 0;
	p->busy = false;
	return 0;
}

/* --- results --- */

static size_t herd_shared_bytes(const struct herd_opts *o)
{
	return sizeof(struct herd_shared) +
	       sizeof(float) * (size_t)o->iters * (size_t)o->clients;
}

/* Anonymous shared memory made before the fork: every process writes its own part. */
struct herd_shared *herd_shared_make(const struct herd_opts *o)
{
	struct herd_shared *sh = mmap(NULL, herd_shared_bytes(o), PROT_READ | PROT_WRITE,
				      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	float *lat;
	int c;

	if (sh == MAP_FAILED) {
		perror("herd: shared results");
		return NULL;
	}
	lat = (float *)(void *)(sh + 1);
	sh->nclients = o->clients;
	atomic_init(&sh->stop, 0);
	for (c = 0; c < o->clients; c++)
		sh->res[c].lat_us = lat + (size_t)c * (size_t)o->iters;
	return sh;
}

void herd_shared_free(struct herd_shared *sh, const struct herd_opts *o)
{
	munmap(sh, herd_shared_bytes(o));
}

static int herd_float_cmp(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return (x > y) - (x < y);
}

int herd_report_row(struct herd_shared *sh, const struct herd_opts *o, const char *op,
		    const char *transport, double *mreq_p)
{
	double start = 1e300, end = 0;
	uint64_t done = 0, rexmit = 0, stale = 0;
	size_t n = 0, all = (size_t)o->iters * (size_t)o->clients;
	float *lat = malloc(sizeof(float) * all);
	int c, failed = 0;

	if (!lat)
		return -1;
	for (c = 0; c < o->clients; c++) {
		struct herd_result *r = &sh->res[c];

		failed |= r->failed || r->done != (uint64_t)o->iters;
		start = fmin(start, r->start);
		end = fmax(end, r->end);
		done += r->done;
		rexmit += r->retransmits;
		stale += r->stale;
		memcpy(lat + n, r->lat_us, sizeof(float) * r->done);
		n += r->done;
	}
	qsort(lat, n, sizeof(float), herd_float_cmp);
	*mreq_p = end > start ? (double)done / (end - start) / 1e6 : 0;
	printf("%-6s %-10s %-9s %7d %6d %8llu %9.4f %9.2f %9.2f %8llu %6llu%s\n", "herd", op,
	       transport, o->clients, o->window, (unsigned long long)done, *mreq_p,
	       n ? lat[n / 2] : 0.0, n ? lat[n * 99 / 100] : 0.0,
	       (unsigned long long)rexmit, (unsigned long long)stale,
	       failed ? "  FAILED" : "");
	free(lat);
	return failed ? -1 : 0;
}

/* --- a client's window --- */

int herd_window_init(struct herd_window *cl, const struct herd_opts *o, int client,
		     struct herd_result *res)
{
	memset(cl, 0, sizeof(*cl));
	cl->model = malloc(sizeof(*cl->model));
	if (!cl->model) {
		perror("herd: client model");
		return -1;
	}
	herd_model_init(cl->model, client, 0x4845524400000000ull);	/* "HERD": fixed */
	cl->window = o->window;
	cl->iters = o->iters;
	cl->hostile = o->hostile;
	cl->res = res;
	return 0;
}

void herd_window_fini(struct herd_window *cl)
{
	free(cl->model);
	cl->model = NULL;
}

static uint8_t herd_window_seq_next(struct herd_window *cl, uint8_t slot)
{
	cl->seq[slot] = (uint8_t)(cl->seq[slot] % 255 + 1);	/* 1..255: 0 is "never written" */
	return cl->seq[slot];
}

struct herd_req *herd_window_issue(struct herd_window *cl, uint8_t slot)
{
	struct herd_pending *p = &cl->pend[slot];

	if (cl->issued >= cl->iters)
		return NULL;
	cl->issued++;
	herd_model_next(cl->model, p, slot, herd_window_seq_next(cl, slot));
	p->hostile = cl->hostile && cl->issued % HERD_HOSTILE_EVERY == HERD_HOSTILE_EVERY / 2;
	if (p->hostile && (cl->issued / HERD_HOSTILE_EVERY) % 2) {
		p->req.op = HERD_OP_PUT;	/* a value longer than a bucket's */
		p->req.vlen = 200;
		memset(p->req.value, 0xee, HERD_VALUE_MAX);
	} else if (p->hostile) {
		p->req.op = 0x77;		/* no such operation */
	}
	p->sent = p->resent = herd_now();
	return &p->req;
}

struct herd_req *herd_window_reissue(struct herd_window *cl, uint8_t slot)
{
	struct herd_pending *p = &cl->pend[slot];

	p->req.seq = herd_window_seq_next(cl, slot);
	p->resent = herd_now();
	cl->res->retransmits++;
	return &p->req;
}

int herd_window_on_resp(struct herd_window *cl, const struct herd_resp *resp)
{
	struct herd_pending *p;

	/* The server's bytes: the slot indexes our window. */
	if (resp->slot >= cl->window || resp->vlen > HERD_VALUE_MAX) {
		fprintf(stderr, "herd: a response for slot %u, %u bytes\n", resp->slot, resp->vlen);
		return -1;
	}
	p = &cl->pend[resp->slot];
	if (!p->busy || resp->seq != p->req.seq) {
		cl->res->stale++;	/* the answer to a request sent again */
		return 1;
	}
	if (herd_model_check(cl->model, p, resp))
		return -1;
	cl->res->lat_us[cl->res->done++] = (float)((herd_now() - p->sent) * 1e6);
	return 0;
}
