/*
 * check_main.c - the one runner of ferry's Check suites.
 *
 * Tests run in CK_FORK mode so that a crashing test fails alone.  Select
 * with the usual Check variables: CK_RUN_SUITE=ops CK_RUN_CASE=atomic ...
 */
#include "config.h"

#include <signal.h>
#include <stdlib.h>

#include "check_suites.h"

int main(void)
{
	SRunner *runner;
	int failed;

	/* A peer that died must show up as an error, never kill the runner. */
	signal(SIGPIPE, SIG_IGN);

	runner = srunner_create(objects_suite());
	srunner_add_suite(runner, query_suite());
	srunner_add_suite(runner, arena_suite());
	srunner_add_suite(runner, qp_state_suite());
	srunner_add_suite(runner, ops_suite());
	srunner_add_suite(runner, ops_fork_suite());
	srunner_add_suite(runner, errors_suite());
	srunner_add_suite(runner, rnr_suite());
	srunner_add_suite(runner, flush_suite());
	srunner_add_suite(runner, srq_suite());
	srunner_add_suite(runner, srq_peers_suite());
	srunner_add_suite(runner, channel_suite());
	srunner_add_suite(runner, peer_suite());
	srunner_add_suite(runner, hostile_suite());
	srunner_add_suite(runner, hostile_mem_suite());
	srunner_add_suite(runner, hostile_window_suite());
	srunner_add_suite(runner, hostile_squat_suite());
	srunner_add_suite(runner, ud_suite());
	srunner_add_suite(runner, cm_msg_suite());
	srunner_add_suite(runner, cm_suite());
	srunner_add_suite(runner, cm_robust_suite());
	srunner_add_suite(runner, hostile_cm_suite());
	srunner_add_suite(runner, sock_data_suite());
	srunner_add_suite(runner, sock_conn_suite());
	srunner_add_suite(runner, sock_opt_suite());
	srunner_add_suite(runner, sock_fd_suite());
	srunner_add_suite(runner, sock_shim_suite());
	srunner_add_suite(runner, sock_iwarp_suite());
	srunner_add_suite(runner, repoll_suite());
	srunner_add_suite(runner, config_suite());
	srunner_add_suite(runner, stat_suite());
	srunner_add_suite(runner, tcp_wire_suite());
	srunner_add_suite(runner, tcp_wire_ddp_suite());
	srunner_add_suite(runner, tcp_suite());
	srunner_add_suite(runner, util_suite());
	srunner_add_suite(runner, transport_suite());
	srunner_add_suite(runner, join_suite());

	srunner_set_fork_status(runner, CK_FORK);
	srunner_run_all(runner, CK_NORMAL);
	failed = srunner_ntests_failed(runner);
	srunner_free(runner);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
