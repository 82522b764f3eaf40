/*
 * lock.h - a small futex lock for the data path.
 *
 * glibc's pthread_mutex spends about 60 instructions on an uncontended
 * lock/unlock pair (type dispatch, elision checks); the data path takes
 * several such pairs per message.  This lock is one compare-and-swap to take
 * and one exchange to release when uncontended, and sleeps in the kernel
 * when it is not, so it may be held across a blocking call.  States:
 * 0 free, 1 held, 2 held with (possible) sleepers.
 */
#ifndef FERRY_LOCK_H
#define FERRY_LOCK_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct {
	_Atomic uint32_t state;
} ferry_lock_t;

#define FERRY_LOCK_INIT { 0 }

void ferry_lock_slow(ferry_lock_t *l);
void ferry_unlock_wake(ferry_lock_t *l);

static inline void ferry_lock_init(ferry_lock_t *l)
{
	atomic_init(&l->state, 0);
}

static inline void ferry_lock(ferry_lock_t *l)
{
	uint32_t free_state = 0;

	if (__builtin_expect(atomic_compare_exchange_strong_explicit(&l->state, &free_state, 1,
			memory_order_acquire, memory_order_relaxed), 1))
		return;
	ferry_lock_slow(l);
}

static inline void ferry_unlock(ferry_lock_t *l)
{
	if (__builtin_expect(atomic_exchange_explicit(&l->state, 0, memory_order_release) != 1, 0))
		ferry_unlock_wake(l);
}

#endif /* FERRY_LOCK_H */
