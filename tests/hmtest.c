/*
 * hmtest.c - what the hostile-memory suites (check_hostile_mem.c,
 * check_hostile_window.c) share: a forked peer connected to our end.
 */
#include "config.h"

#include <unistd.h>

#include <check.h>

#include "hmtest.h"
#include "testutil.h"

/*
 * Open our end @e, let @setup (if any) register more before the exchange,
 * and connect it over @sock (which this closes) to a child's
 * tu_child_connect, all access rights.
 */
void hm_connect_sock(struct tu_end *e, int sock, void (*setup)(struct tu_end *, void *),
		     void *setup_arg)
{
	struct tu_remote mine, peer;

	tu_end_open(e, &(struct tu_opts){ 0 });
	if (setup)
		setup(e, setup_arg);	/* registered before the exchange */
	mine = (struct tu_remote){ (uintptr_t)e->buf, e->len, e->mr->rkey, e->qp->qp_num,
				   0, 0, 0, 0 };
	ck_assert_int_eq(tu_msg_send(sock, &mine, sizeof(mine)), 0);
	ck_assert_int_eq(tu_msg_recv(sock, &peer, sizeof(peer), TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_qp_connect_sock(e->qp, sock, TU_QP_ACCESS_ALL), 0);
	close(sock);
}

/*
 * Fork @child (tu_fork) and connect our end @e to it, all access rights;
 * its pid, and its control socket in *ctl_p.
 */
pid_t hm_connect(int (*child)(int, int, void *), void *arg, struct tu_end *e,
		 int *ctl_p, void (*setup)(struct tu_end *, void *), void *setup_arg)
{
	pid_t pid;
	int sock;

	pid = tu_fork(child, arg, &sock, ctl_p);
	hm_connect_sock(e, sock, setup, setup_arg);
	return pid;
}
