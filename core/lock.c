/*
 * lock.c - the slow paths of the futex lock in lock.h.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lock.h"

static inline void ferry_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static void ferry_futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
	syscall(SYS_futex, (uint32_t *)addr, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

void ferry_lock_slow(ferry_lock_t *l)
{
	uint32_t s;
	int spin;

	/* A holder usually lets go within a few hundred cycles: spin a little. */
	for (spin = 0; spin < 100; spin++) {
		uint32_t free_state = 0;

		if (atomic_load_explicit(&l->state, memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_weak_explicit(&l->state, &free_state, 1,
				memory_order_acquire, memory_order_relaxed))
			return;
		ferry_cpu_relax();
	}
	/* Mark the lock contended; sleep until the holder wakes us. */
	s = atomic_exchange_explicit(&l->state, 2, memory_order_acquire);
	while (s != 0) {
		ferry_futex(&l->state, FUTEX_WAIT, 2);
		s = atomic_exchange_explicit(&l->state, 2, memory_order_acquire);
	}
}

void ferry_unlock_wake(ferry_lock_t *l)
{
	ferry_futex(&l->state, FUTEX_WAKE, 1);
}
