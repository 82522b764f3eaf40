/*
 * check_suites.h - every Check suite of ferry; tests/check_main.c runs them.
 */
#ifndef FERRY_CHECK_SUITES_H
#define FERRY_CHECK_SUITES_H

#include <check.h>

Suite *objects_suite(void);
Suite *query_suite(void);
Suite *arena_suite(void);
Suite *qp_state_suite(void);
Suite *ops_suite(void);
Suite *ops_fork_suite(void);	/* suite "ops" too */
Suite *errors_suite(void);
Suite *rnr_suite(void);
Suite *flush_suite(void);
/* Both suite "srq". */
Suite *srq_suite(void);
Suite *srq_peers_suite(void);
Suite *channel_suite(void);
Suite *peer_suite(void);
Suite *hostile_suite(void);
/* Both suite "hostile_mem". */
Suite *hostile_mem_suite(void);
Suite *hostile_window_suite(void);
Suite *hostile_squat_suite(void);
Suite *ud_suite(void);
Suite *cm_msg_suite(void);
Suite *cm_suite(void);
Suite *cm_robust_suite(void);
Suite *hostile_cm_suite(void);
/* The stream sockets, by area; every one of them is suite "sock". */
Suite *sock_data_suite(void);
Suite *sock_conn_suite(void);
Suite *sock_opt_suite(void);
Suite *sock_fd_suite(void);
Suite *sock_shim_suite(void);
Suite *sock_iwarp_suite(void);
Suite *repoll_suite(void);
Suite *config_suite(void);
Suite *stat_suite(void);
Suite *tcp_wire_suite(void);
Suite *tcp_wire_ddp_suite(void);
Suite *tcp_suite(void);
Suite *util_suite(void);
Suite *transport_suite(void);
Suite *join_suite(void);

#endif /* FERRY_CHECK_SUITES_H */
