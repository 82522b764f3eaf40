/*
 * check_arena.c - the shm arena's pools (one per peer process) and the
 * copies of MR tables and notify words published in them (issue 13,
 * point 5; prov/shm/shm_arena.c, shm_pd.c, shm_cq.c):
 *
 *   - a pool per (pid, uid): another uid with the same pid gets another
 *     pool, and a piece given back returns to its own pool only;
 *   - unused pools stay for the next connection, SHM_POOL_IDLE of them,
 *     the one idle the longest unmapped and closed first;
 *   - a child of fork starts with no pools, and never hands out a piece
 *     of its parent's;
 *   - a PD's table has a copy per pool, refcounted, that every change
 *     (registration, deregistration, the overflow table) reaches, and
 *     that comes back zeroed; a CQ's notify word likewise.
 *
 * The pools here are of made-up peers (pids past any real one): pools are
 * keys, not processes, until a connection uses them.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "check_suites.h"
#include "testutil.h"
#include "shm-internal.h"

/* Pids no process has (the kernel's limit is 2^22). */
#define AR_PID		0x7ff00000

/* Descriptors of pool segments this process holds. */
static int ar_pool_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	char path[300], target[256];
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		len = readlink(path, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		n += strstr(target, "memfd:ferry-shm-pool") != NULL;
	}
	closedir(d);
	return n;
}

START_TEST(test_pool_per_peer)
{
	struct shm_pool *a = shm_arena_pool_get(AR_PID, 1000);
	struct shm_pool *b = shm_arena_pool_get(AR_PID, 1001);
	struct shm_pool *a2 = shm_arena_pool_get(AR_PID, 1000);
	struct shm_piece pa, pb, p;
	uint8_t *pa_addr;

	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_ptr_eq(a, a2);	/* the same process: the same pool */
	ck_assert_ptr_ne(a, b);		/* its pid reused by another user: not */
	ck_assert_int_eq(shm_arena_get(a, 64, SHM_PIECE_NOTIFY, &pa), 0);
	ck_assert_int_eq(shm_arena_get(b, 64, SHM_PIECE_NOTIFY, &pb), 0);
	ck_assert_ptr_eq(pa.seg->pool, a);
	ck_assert_ptr_eq(pb.seg->pool, b);
	ck_assert_ptr_ne(pa.seg, pb.seg);
	ck_assert_int_ge(pa.seg->fd, 0);
	ck_assert_int_ne(pa.seg->fd, pb.seg->fd);

	/* Given back, a piece serves its own pool again, never another. */
	pa_addr = pa.addr;
	memset(pa.addr, 0x5a, 64);
	shm_arena_put(&pa, SHM_PIECE_UNZEROED);
	for (int i = 0; i < 64; i++) {
		ck_assert_int_eq(shm_arena_get(b, 64, SHM_PIECE_NOTIFY, &p), 0);
		ck_assert_ptr_ne(p.addr, pa_addr);
		shm_arena_put(&p, 64);
	}
	ck_assert_int_eq(shm_arena_get(a, 64, SHM_PIECE_NOTIFY, &pa), 0);
	ck_assert_ptr_eq(pa.addr, pa_addr);
	ck_assert(!pa.zero);

	/* The private pool has no descriptor: nothing of it can be passed. */
	ck_assert_int_eq(shm_arena_get(NULL, 64, SHM_PIECE_NOTIFY, &p), 0);
	ck_assert_int_eq(p.seg->fd, -1);
	ck_assert_ptr_ne(p.seg->pool, a);
	shm_arena_put(&p, 64);

	shm_arena_put(&pa, 64);
	shm_arena_put(&pb, 64);
	shm_arena_pool_put(a2);
	shm_arena_pool_put(b);
	shm_arena_pool_put(a);
}
END_TEST

/*
 * In a child of fork, which starts with no pools (the test process's are
 * its parent's): SHM_POOL_IDLE + 4 peers come and go; SHM_POOL_IDLE of
 * their pools stay, with a descriptor each, the newest of them as they
 * were, and the oldest went first.
 */
static int ar_idle_child(void)
{
	enum { N = SHM_POOL_IDLE + 4 };
	struct shm_pool *pools[N], *again;
	struct shm_piece p[N], q;
	uint8_t *addr[N];
	unsigned int idle;
	int fds0;

	TU_CHILD_CHECK(shm_arena_test_pools(&idle) == 0 && idle == 0);
	fds0 = ar_pool_fds();	/* the parent's busy pools' */
	for (int i = 0; i < N; i++) {
		pools[i] = shm_arena_pool_get(AR_PID + 100 + i, 0);
		TU_CHILD_CHECK(pools[i] != NULL);
		TU_CHILD_CHECK(shm_arena_get(pools[i], 4096, SHM_PIECE_REGION, &p[i]) == 0);
		addr[i] = p[i].addr;
	}
	TU_CHILD_CHECK(ar_pool_fds() == fds0 + N);
	for (int i = 0; i < N; i++) {
		shm_arena_put(&p[i], 0);
		shm_arena_pool_put(pools[i]);
	}
	TU_CHILD_CHECK(shm_arena_test_pools(&idle) == SHM_POOL_IDLE && idle == SHM_POOL_IDLE);
	TU_CHILD_CHECK(ar_pool_fds() == fds0 + SHM_POOL_IDLE);

	/* The newest is as it was: its segment, its piece. */
	again = shm_arena_pool_get(AR_PID + 100 + N - 1, 0);
	TU_CHILD_CHECK(shm_arena_get(again, 4096, SHM_PIECE_REGION, &q) == 0);
	TU_CHILD_CHECK(q.addr == addr[N - 1] && q.zero);
	TU_CHILD_CHECK(shm_arena_test_pools(&idle) == SHM_POOL_IDLE &&
		       idle == SHM_POOL_IDLE - 1);
	shm_arena_put(&q, 0);
	shm_arena_pool_put(again);
	/* The oldest went: a new pool, a new segment (another descriptor). */
	again = shm_arena_pool_get(AR_PID + 100, 0);
	TU_CHILD_CHECK(shm_arena_get(again, 4096, SHM_PIECE_REGION, &q) == 0);
	TU_CHILD_CHECK(ar_pool_fds() == fds0 + SHM_POOL_IDLE + 1);
	shm_arena_put(&q, 0);
	shm_arena_pool_put(again);
	TU_CHILD_CHECK(ar_pool_fds() == fds0 + SHM_POOL_IDLE);
	return 0;
}

START_TEST(test_pool_idle_bounded)
{
	struct shm_pool *mine = shm_arena_pool_get(AR_PID + 99, 0);
	struct shm_piece p;
	int status;
	pid_t pid;

	/* A pool of the parent's, in use across the fork. */
	ck_assert_ptr_nonnull(mine);
	ck_assert_int_eq(shm_arena_get(mine, 64, SHM_PIECE_NOTIFY, &p), 0);
	pid = tu_fork_quiet();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(ar_idle_child());
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	shm_arena_put(&p, 64);
	shm_arena_pool_put(mine);
}
END_TEST

/*
 * After fork the child has none of its parent's pools: the same peer's
 * pool is a new one there, and a piece of the parent's given back in the
 * child is never handed out again (nor zeroed: the parent may use it).
 */
START_TEST(test_pool_fork)
{
	struct shm_pool *pool = shm_arena_pool_get(AR_PID + 1, 0);
	struct shm_piece kept, p;
	int status;
	pid_t pid;

	ck_assert_int_eq(shm_arena_get(pool, 64, SHM_PIECE_NOTIFY, &kept), 0);
	memset(kept.addr, 0x77, 64);
	pid = tu_fork_quiet();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct shm_pool *child = shm_arena_pool_get(AR_PID + 1, 0);
		struct shm_aseg *parents = kept.seg;
		int ok = child && child != pool && shm_arena_test_pools(NULL) == 1;

		shm_arena_put(&kept, 64);	/* the parent's */
		for (int i = 0; i < 128 && ok; i++)
			ok = shm_arena_get(child, 64, SHM_PIECE_NOTIFY, &p) == 0 &&
			     p.seg != parents && p.seg->pool == child;
		shm_arena_pool_put(child);
		_exit(ok ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ck_assert(tu_all_bytes(kept.addr, 64, 0x77));	/* untouched by the child */
	shm_arena_put(&kept, 64);
	shm_arena_pool_put(pool);
}
END_TEST

/* --- the copies --- */

static const struct shm_mr_entry *ar_slot(const struct shm_mirror *m, const struct shm_pd *spd,
					  uint32_t idx)
{
	const struct shm_piece *p = idx < spd->table_entries ? &m->piece : &m->xpiece;

	ck_assert_ptr_nonnull(p->seg);
	return &((const struct shm_mr_entry *)p->addr)[idx];
}

/* @m's slot of @mr holds what the primary does. */
static void ar_assert_copy(const struct shm_mirror *m, struct shm_pd *spd, struct ferry_mr *mr)
{
	const struct shm_mr_entry *e = ar_slot(m, spd, SHM_KEY_INDEX(mr->rkey));

	ck_assert_uint_eq(atomic_load(&e->rkey), mr->rkey);
	ck_assert_uint_eq(e->addr, (uintptr_t)mr->addr);
	ck_assert_uint_eq(e->length, mr->length);
	ck_assert_uint_eq(e->access, FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE);
}

/*
 * A PD's copies: one per pool, made filled, reached by every change (the
 * overflow table included), never by an MR without remote access, and
 * given back zeroed by the last connection through it.
 */
START_TEST(test_pd_mirrors)
{
	const int rw = FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE;
	struct ferry_context *ctx = ferry_open_transport("shm");
	struct shm_pool *p1 = shm_arena_pool_get(AR_PID + 2, 0);
	struct shm_pool *p2 = shm_arena_pool_get(AR_PID + 3, 0);
	struct shm_mirror *m1, *m1b, *m2;
	struct ferry_mr *first, *local, *more[4];
	char *buf = ferry_alloc(8192);
	struct ferry_pd *pd;
	struct shm_pd *spd;

	ck_assert_ptr_nonnull(ctx);
	pd = ferry_alloc_pd_small(ctx, 1);
	ck_assert_ptr_nonnull(pd);
	spd = to_spd(pd);
	first = ferry_reg_mr(pd, buf, 4096, rw);
	ck_assert_ptr_nonnull(first);

	m1 = shm_pd_mirror_get(spd, p1);	/* made, with what is there */
	ck_assert_ptr_nonnull(m1);
	ck_assert_ptr_eq(m1->piece.seg->pool, p1);
	ar_assert_copy(m1, spd, first);
	m1b = shm_pd_mirror_get(spd, p1);	/* a second connection: the same */
	ck_assert_ptr_eq(m1b, m1);
	ck_assert_int_eq(m1->refs, 2);
	m2 = shm_pd_mirror_get(spd, p2);
	ck_assert_ptr_ne(m2, m1);
	ck_assert_ptr_eq(m2->piece.seg->pool, p2);
	ck_assert_ptr_ne(m2->piece.addr, spd->table_piece.addr);

	local = ferry_reg_mr(pd, buf + 4096, 4096, FERRY_ACCESS_LOCAL_WRITE);
	ck_assert_ptr_nonnull(local);
	ck_assert(tu_all_bytes(m1->piece.addr + 2 * sizeof(struct shm_mr_entry),
			       m1->piece.size - 2 * sizeof(struct shm_mr_entry), 0));
	/* Past the small table's slots: the overflow table, copied too. */
	for (int i = 0; i < 4; i++) {
		more[i] = ferry_reg_mr(pd, buf + 1024 * i, 1024, rw);
		ck_assert_ptr_nonnull(more[i]);
		ar_assert_copy(m1, spd, more[i]);
		ar_assert_copy(m2, spd, more[i]);
	}
	ck_assert_ptr_eq(m2->xpiece.seg->pool, p2);

	ck_assert_int_eq(ferry_dereg_mr(first), 0);
	ck_assert_uint_eq(atomic_load(&ar_slot(m1, spd, 1)->rkey), 0);
	ck_assert_uint_eq(atomic_load(&ar_slot(m2, spd, 1)->rkey), 0);

	/* The last connection through it gives it back, zeroed: the next one
	 * in that pool (here, the same piece) shows no key that is gone. */
	shm_pd_mirror_put(spd, m1b);
	shm_pd_mirror_put(spd, m1);
	m1 = shm_pd_mirror_get(spd, p1);
	ck_assert(tu_all_bytes(ar_slot(m1, spd, 1), sizeof(struct shm_mr_entry), 0));
	for (int i = 0; i < 4; i++) {
		ar_assert_copy(m1, spd, more[i]);
		ck_assert_int_eq(ferry_dereg_mr(more[i]), 0);
	}
	ck_assert_int_eq(ferry_dereg_mr(local), 0);
	shm_pd_mirror_put(spd, m1);
	shm_pd_mirror_put(spd, m2);
	ck_assert_ptr_null(spd->mirrors);
	ck_assert_int_eq(ferry_dealloc_pd(pd), 0);
	shm_arena_pool_put(p2);
	shm_arena_pool_put(p1);
	ferry_free(buf);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

static uint64_t ar_word(const struct shm_mirror *m)
{
	return atomic_load(&((const struct shm_notify *)m->piece.addr)->word);
}

/* A CQ's arm word: each copy, old or new, reads as the primary. */
START_TEST(test_cq_mirrors)
{
	struct ferry_context *ctx = ferry_open_transport("shm");
	struct shm_pool *p1 = shm_arena_pool_get(AR_PID + 4, 0);
	struct shm_pool *p2 = shm_arena_pool_get(AR_PID + 5, 0);
	struct shm_mirror *m1, *m2;
	struct ferry_cq *cq;
	struct shm_cq *scq;

	ck_assert_ptr_nonnull(ctx);
	cq = ferry_create_cq(ctx, 4, NULL, NULL, 0);
	ck_assert_ptr_nonnull(cq);
	scq = to_scq(cq);
	m1 = shm_cq_mirror_get(scq, p1);
	ck_assert_ptr_nonnull(m1);
	ck_assert_ptr_eq(m1->piece.seg->pool, p1);
	ck_assert_uint_eq(ar_word(m1), 0);
	ck_assert_int_eq(ferry_req_notify_cq(cq, 1), 0);
	ck_assert_uint_ne(atomic_load(&scq->notify->word), 0);
	ck_assert_uint_eq(ar_word(m1), atomic_load(&scq->notify->word));
	m2 = shm_cq_mirror_get(scq, p2);	/* made armed */
	ck_assert_uint_eq(ar_word(m2), atomic_load(&scq->notify->word));
	ck_assert_int_eq(ferry_req_notify_cq(cq, 0), 0);
	ck_assert_uint_eq(SHM_NOTIFY_MODE(ar_word(m1)), SHM_NOTIFY_ALL);
	ck_assert_uint_eq(ar_word(m2), atomic_load(&scq->notify->word));
	shm_cq_mirror_put(scq, m1);
	shm_cq_mirror_put(scq, m2);
	ck_assert_ptr_null(scq->mirrors);
	ck_assert_int_eq(ferry_destroy_cq(cq), 0);
	shm_arena_pool_put(p2);
	shm_arena_pool_put(p1);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

/*
 * A region's head is a 64-byte aligned struct wherever its delivery ring
 * ends, the one-slot ring of a peer with one receive included (it once
 * sat 32 bytes in: UBSan stopped bench/herd's UC clients).
 */
START_TEST(test_region_head_aligned)
{
	for (uint32_t dq = 1; dq <= SHM_MAX_QP_WR; dq <<= 1) {
		struct shm_region_layout l = shm_region_layout(1, shm_rq_stride(1), dq, dq & 2);

		ck_assert_uint_eq(l.head_off % 64, 0);
		ck_assert_uint_ge(l.head_off, (size_t)dq * sizeof(struct shm_delivery) < 1024 ?
					      (size_t)dq * sizeof(struct shm_delivery) : 1024);
		ck_assert_uint_lt(l.head_off, l.size);
	}
}
END_TEST

Suite *arena_suite(void)
{
	Suite *s = suite_create("arena");
	TCase *tc = tcase_create("arena");

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	if (tu_on_shm()) {
		tcase_add_test(tc, test_region_head_aligned);
		tcase_add_test(tc, test_pool_per_peer);
		tcase_add_test(tc, test_pool_idle_bounded);
		tcase_add_test(tc, test_pool_fork);
		tcase_add_test(tc, test_pd_mirrors);
		tcase_add_test(tc, test_cq_mirrors);
	}
	suite_add_tcase(s, tc);
	return s;
}
