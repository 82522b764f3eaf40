/*
 * preload.c - the shim's start: resolve libc, read the configuration
 * (conf.c: FERRY_PRELOAD, the exclusion rules, ferry.conf(5)).
 *
 * FERRY_PRELOAD=off (or a rule excluding the program) leaves every call to
 * libc: the shim is loaded but manages nothing.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "conf.h"
#include "preload.h"

static atomic_int fp_on = -1;

bool fp_enabled(void)
{
	int on = atomic_load_explicit(&fp_on, memory_order_relaxed);

	if (on < 0) {
		on = fp_config_enabled();
		atomic_store(&fp_on, on);
	}
	return on;
}

bool fp_allow(const struct sockaddr *addr, socklen_t len)
{
	return fp_config_allow(addr, len);
}

__attribute__((constructor)) static void fp_init(void)
{
	fp_real_init();
	fp_config_load();
	fp_enabled();
}
