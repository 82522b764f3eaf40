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

#include <sys/resource.h>

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

/*
 * The floor of ferry's own descriptors: half the soft limit, so that the
 * program's numbers stay where the kernel would put them without ferry
 * (lowest free) while it holds fewer than that.
 */
static void fp_park_fds(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur >= 128 &&
	    rl.rlim_cur != RLIM_INFINITY)
		ferry_fd_park_base = (int)(rl.rlim_cur > 2 * 1024 * 1024 ? 1024 * 1024 :
					   rl.rlim_cur / 2);
}

/*
 * Programs under the shim are event loops whose peer answers within tens
 * of microseconds when both run: polling that long (yielding now and then)
 * keeps both out of the sleep/wake-up a message otherwise costs.  Measured
 * with redis-benchmark: 10 us 1.5x TCP's rate, 50 us 2.4x, 200 us 3.5-6x;
 * iperf3 about 4x for all three.  FERRY_POLL_US still decides.
 */
#define FP_DEF_POLL_US 200

__attribute__((constructor)) static void fp_init(void)
{
	fp_real_init();
	fp_park_fds();
	sock_default_poll_us = FP_DEF_POLL_US;
	fp_config_load();
	fp_enabled();
}
