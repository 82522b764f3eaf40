/*
 * check_util.c - util's generic pieces: the descriptor table (fdtab.h)
 * and the monotonic clock (monotime.h).
 *
 * The table is what the socket layer, the preload shim and core's
 * shared-descriptor counts all index by fd: lookups of fds never put are
 * empty, out-of-range fds are refused with EMFILE and never indexed, a
 * slot keeps what was put until replaced, pages are made on the first put
 * only, and threads making one page at once all get the same slot.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "fdtab.h"
#include "monotime.h"
#include "check_suites.h"

/* A table of the test's own; every page it made freed at the end. */
static struct fdtab cu_tab;

static void cu_tab_free(void)
{
	size_t i;

	for (i = 0; i < FDTAB_PAGES; i++) {
		free(atomic_load(&cu_tab.pages[i]));
		atomic_store(&cu_tab.pages[i], NULL);
	}
}

static size_t cu_pages_made(void)
{
	size_t i, n = 0;

	for (i = 0; i < FDTAB_PAGES; i++)
		n += atomic_load(&cu_tab.pages[i]) != NULL;
	return n;
}

START_TEST(test_fdtab_empty)
{
	static const int fds[] = {
		0, 1, 1023, 1024, FDTAB_MAX - 1, -1, FDTAB_MAX, INT_MAX, INT_MIN,
	};
	size_t i;

	for (i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		ck_assert_ptr_null(fdtab_get(&cu_tab, fds[i]));
		ck_assert_ptr_null(fdtab_slot(&cu_tab, fds[i], sizeof(void *)));
	}
	ck_assert_uint_eq(cu_pages_made(), 0);
}
END_TEST

START_TEST(test_fdtab_put_get)
{
	int a, b;
	void *old = &a;

	ck_assert_int_eq(fdtab_put(&cu_tab, 5, &a, &old), 0);
	ck_assert_ptr_null(old);
	ck_assert_ptr_eq(fdtab_get(&cu_tab, 5), &a);
	ck_assert_ptr_null(fdtab_get(&cu_tab, 4));
	ck_assert_ptr_null(fdtab_get(&cu_tab, 6));
	/* replacing gives back what was there */
	ck_assert_int_eq(fdtab_put(&cu_tab, 5, &b, &old), 0);
	ck_assert_ptr_eq(old, &a);
	ck_assert_ptr_eq(fdtab_get(&cu_tab, 5), &b);
	ck_assert_int_eq(fdtab_put(&cu_tab, 5, NULL, &old), 0);
	ck_assert_ptr_eq(old, &b);
	ck_assert_ptr_null(fdtab_get(&cu_tab, 5));
	ck_assert_uint_eq(cu_pages_made(), 1);
	cu_tab_free();
}
END_TEST

START_TEST(test_fdtab_range)
{
	static const int bad[] = { -1, INT_MIN, FDTAB_MAX, INT_MAX };
	int a;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		ck_assert_int_eq(fdtab_put(&cu_tab, bad[i], &a, NULL), -1);
		ck_assert_int_eq(errno, EMFILE);
		errno = 0;
		ck_assert_ptr_null(fdtab_slot_make(&cu_tab, bad[i], sizeof(uint16_t)));
		ck_assert_int_eq(errno, EMFILE);
		/* clearing an fd no table can hold is a no-op, not an error */
		ck_assert_int_eq(fdtab_put(&cu_tab, bad[i], NULL, NULL), 0);
	}
	/* the last fd of the range is held */
	ck_assert_int_eq(fdtab_put(&cu_tab, FDTAB_MAX - 1, &a, NULL), 0);
	ck_assert_ptr_eq(fdtab_get(&cu_tab, FDTAB_MAX - 1), &a);
	ck_assert_uint_eq(cu_pages_made(), 1);
	cu_tab_free();
}
END_TEST

START_TEST(test_fdtab_clear_makes_no_page)
{
	void *old = &old;

	ck_assert_int_eq(fdtab_put(&cu_tab, 3000, NULL, &old), 0);
	ck_assert_ptr_null(old);
	ck_assert_uint_eq(cu_pages_made(), 0);
}
END_TEST

/* Slots of another size: zeroed, distinct across a page boundary, stable. */
START_TEST(test_fdtab_sized_slots)
{
	_Atomic uint16_t *last = fdtab_slot_make(&cu_tab, 1023, sizeof(*last));
	_Atomic uint16_t *first = fdtab_slot_make(&cu_tab, 1024, sizeof(*first));

	ck_assert_ptr_nonnull(last);
	ck_assert_ptr_nonnull(first);
	ck_assert_uint_eq(atomic_load(last), 0);
	ck_assert_uint_eq(atomic_load(first), 0);
	atomic_store(last, 7);
	atomic_store(first, 9);
	ck_assert_ptr_eq(fdtab_slot(&cu_tab, 1023, sizeof(*last)), last);
	ck_assert_ptr_eq(fdtab_slot_make(&cu_tab, 1024, sizeof(*first)), first);
	ck_assert_uint_eq(atomic_load(last), 7);
	ck_assert_uint_eq(atomic_load(first), 9);
	/* the neighbour of a slot is untouched */
	ck_assert_uint_eq(atomic_load((_Atomic uint16_t *)fdtab_slot(&cu_tab, 1022, 2)), 0);
	ck_assert_uint_eq(cu_pages_made(), 2);
	cu_tab_free();
}
END_TEST

struct cu_seen {
	int fds[8];
	void *ptrs[8];
	int n;
};

static void cu_collect(int fd, void *ptr, void *arg)
{
	struct cu_seen *seen = arg;

	ck_assert_int_lt(seen->n, 8);
	seen->fds[seen->n] = fd;
	seen->ptrs[seen->n++] = ptr;
}

START_TEST(test_fdtab_for_each)
{
	static const int fds[] = { 0, 1023, 1024, 70000, FDTAB_MAX - 1 };
	int vals[5];
	struct cu_seen seen = { .n = 0 };
	int i;

	/* put out of order, one put then cleared: seen in fd order, once each */
	for (i = 4; i >= 0; i--)
		ck_assert_int_eq(fdtab_put(&cu_tab, fds[i], &vals[i], NULL), 0);
	ck_assert_int_eq(fdtab_put(&cu_tab, 2, &vals[0], NULL), 0);
	ck_assert_int_eq(fdtab_put(&cu_tab, 2, NULL, NULL), 0);
	fdtab_for_each(&cu_tab, cu_collect, &seen);
	ck_assert_int_eq(seen.n, 5);
	for (i = 0; i < 5; i++) {
		ck_assert_int_eq(seen.fds[i], fds[i]);
		ck_assert_ptr_eq(seen.ptrs[i], &vals[i]);
	}
	cu_tab_free();
}
END_TEST

#define CU_THREADS 8

static pthread_barrier_t cu_start;

static void *cu_make(void *arg)
{
	pthread_barrier_wait(&cu_start);
	return fdtab_slot_make(&cu_tab, (int)(intptr_t)arg, sizeof(void *));
}

/* Threads racing to make one page: one page wins, every thread gets it. */
START_TEST(test_fdtab_make_race)
{
	pthread_t t[CU_THREADS];
	void *slot[CU_THREADS];
	int i;

	ck_assert_int_eq(pthread_barrier_init(&cu_start, NULL, CU_THREADS), 0);
	for (i = 0; i < CU_THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, cu_make,
						(void *)(intptr_t)(5000 + (i & 1))), 0);
	for (i = 0; i < CU_THREADS; i++)
		ck_assert_int_eq(pthread_join(t[i], &slot[i]), 0);
	pthread_barrier_destroy(&cu_start);
	for (i = 0; i < CU_THREADS; i++) {
		ck_assert_ptr_nonnull(slot[i]);
		ck_assert_ptr_eq(slot[i], fdtab_slot(&cu_tab, 5000 + (i & 1), sizeof(void *)));
	}
	ck_assert_uint_eq(cu_pages_made(), 1);
	cu_tab_free();
}
END_TEST

/* The three clocks agree with each other and never go back. */
START_TEST(test_monotime)
{
	uint64_t ms0 = monotime_ms(), ns = monotime_ns(), ms1 = monotime_ms();
	uint64_t coarse = monotime_coarse_ms(), ms2 = monotime_ms();

	ck_assert_uint_le(ms0, ns / 1000000);
	ck_assert_uint_le(ns / 1000000, ms1);
	ck_assert_uint_le(ms1, ms2);
	/* the coarse clock is the last tick's time: never ahead */
	ck_assert_uint_le(coarse, ms2);
	ck_assert_uint_le(ns, monotime_ns());
}
END_TEST

Suite *util_suite(void)
{
	Suite *s = suite_create("util");
	TCase *tc = tcase_create("fdtab");

	tcase_add_test(tc, test_fdtab_empty);
	tcase_add_test(tc, test_fdtab_put_get);
	tcase_add_test(tc, test_fdtab_range);
	tcase_add_test(tc, test_fdtab_clear_makes_no_page);
	tcase_add_test(tc, test_fdtab_sized_slots);
	tcase_add_test(tc, test_fdtab_for_each);
	tcase_add_test(tc, test_fdtab_make_race);
	suite_add_tcase(s, tc);
	tc = tcase_create("monotime");
	tcase_add_test(tc, test_monotime);
	suite_add_tcase(s, tc);
	return s;
}
