/*
 * socktest.h - what the stream-socket suites (tests/check_sock_*.c)
 * share.  They test ferry's stream sockets (sock/) with both ends in one
 * process (threads) or across fork, and bounded waits only.
 *
 * They run over the transport FERRY_TRANSPORT names (shm by default) at
 * FERRY_TEST_ADDR (default 127.0.0.1), as the CM suites do: inside the
 * Soft-RoCE VM, tests/rxe/check-rxe.sh runs them over verbs at the VM's
 * own address, since rdma_cm cannot route loopback over rxe.  A test that
 * cannot hold on a transport prints "SKIP <test>: <why>" and returns.
 * Every file's suite is named "sock" (CK_RUN_SUITE=sock runs them all);
 * its test cases keep the names basic, ends, stream and early, each with
 * its own timeout.
 */
#ifndef FERRY_SOCKTEST_H
#define FERRY_SOCKTEST_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

/* Any wait for the peer: reaching it means a hang, not slowness. */
#define TS_TIMEOUT_MS TU_WAIT_MS

/* Say why a test does not run here, and leave it (Check has no skip). */
/* On a real RDMA device (FERRY_TRANSPORT=verbs)? */
static inline bool ts_on_verbs(void)
{
	return strcmp(tu_transport(), "verbs") == 0;
}

#define TS_SKIP(name, why) do { \
	printf("SKIP %s on %s: %s\n", name, tu_transport(), why); \
	fflush(stdout); \
	return; \
	} while (0)

/* FERRY_TEST_ADDR (default 127.0.0.1), port @port. */
void ts_addr(struct sockaddr_in *sin, uint16_t port);
/* A listener on the test address, port chosen by the CM. */
int ts_listen(uint16_t *port_p);
/* Wait (bounded) for @events on ferry socket @fd: the revents, 0 if none. */
short ts_poll(int fd, short events, int ms);
/* A non-blocking connect to @port; _finish waits for it and makes the
 * socket blocking again. */
int ts_connect_start(uint16_t port);
void ts_connect_finish(int c);
/* A connected pair in this process: *a the client, *b the accepted end;
 * _opts sets SO_RCVBUF, SO_SNDBUF and FERRY_IOMAPSIZE unless 0. */
void ts_pair_opts(int *a, int *b, int rcvbuf, int sndbuf, int iomap);
void ts_pair(int *a, int *b);
/* @len pseudo-random bytes from @seed. */
void ts_fill(uint8_t *buf, size_t len, uint32_t seed);
/* Read exactly @len bytes (bounded by the socket's blocking). */
void ts_read_all(int fd, void *buf, size_t len);
/* Move @len bytes from @a to @b in one thread, checking every byte. */
void ts_move_checked(int a, int b, size_t len);

#endif /* FERRY_SOCKTEST_H */
