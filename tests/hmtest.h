/*
 * hmtest.h - what the hostile-memory suites (check_hostile_mem.c,
 * check_hostile_window.c) share.
 */
#ifndef FERRY_HMTEST_H
#define FERRY_HMTEST_H

#include <stdio.h>
#include <sys/types.h>

#include "testutil.h"

/* Say why a test does not run here, and leave it (Check has no skip). */
#define HM_SKIP(name, why) do { \
	printf("SKIP %s: %s\n", name, why); \
	fflush(stdout); \
	return; \
	} while (0)

#define HM_PAGE 4096

/* For a peer that may run as another user. */
struct hm_plain_arg {
	uid_t uid;		/* become this user first (0: stay) */
};

/*
 * Open our end @e, let @setup (if any) register more before the exchange,
 * and connect it over @sock (which this closes) to a child's
 * tu_child_connect, all access rights.
 */
void hm_connect_sock(struct tu_end *e, int sock, void (*setup)(struct tu_end *, void *),
		     void *setup_arg);
/*
 * Fork @child (tu_fork) and connect our end @e to it, all access rights;
 * its pid, and its control socket in *ctl_p.
 */
pid_t hm_connect(int (*child)(int, int, void *), void *arg, struct tu_end *e,
		 int *ctl_p, void (*setup)(struct tu_end *, void *), void *setup_arg);

#endif /* FERRY_HMTEST_H */
