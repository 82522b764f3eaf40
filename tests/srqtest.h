/*
 * srqtest.h - what the SRQ suites (check_srq.c, check_srq_peers.c) share:
 * a receiver end whose QP is on an SRQ and a sender, connected in one
 * process, and helpers that post, send, receive and wait for events.
 */
#ifndef FERRY_SRQTEST_H
#define FERRY_SRQTEST_H

#include <stdbool.h>
#include <stdint.h>

#include "testutil.h"

enum {
	S_SLOT = 256,		/* bytes per receive buffer */
	S_MAX_WR = 32,
	S_MSGS = 150,		/* messages each peer process sends */
	S_QUIET_MS = 100,	/* how long "no event" is looked for */
};


/* The parent's word to a child: all was received, go. */
enum { SRQ_CTL_DONE = 0x5d };

/* The fixture of srq_setup: rx's QP is on srq_q, connected to tx's. */
extern struct tu_end rx, tx;
extern struct ferry_srq *srq_q;

int srq_child_ms(void);
struct ferry_qp *srq_qp_create(struct tu_end *e, struct ferry_srq *q);
struct ferry_srq *srq_create(struct ferry_pd *pd, uint32_t max_wr, uint32_t max_sge);
void srq_post(struct tu_end *e, struct ferry_srq *q, uint32_t slot);
void srq_arm(struct ferry_srq *q, uint32_t limit);
bool srq_fd_ready(struct ferry_context *ctx, int timeout_ms);
void srq_expect_event(struct ferry_context *ctx, enum ferry_event_type type,
		      const void *element);
void srq_send(struct tu_end *e, int n, uint32_t len);
void srq_recv(struct ferry_cq *cq, int n, uint32_t qpn, uint64_t *ids);
/* rx and tx opened, rx's QP replaced by one on srq_q (not connected). */
void srq_pair_open(void);
void srq_setup(void);
void srq_teardown(void);
void srq_connect_child(struct tu_end *e, struct ferry_qp *qp, int sock);

#endif /* FERRY_SRQTEST_H */
