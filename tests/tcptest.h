/*
 * tcptest.h - helpers of the tcp provider's suite (check_tcp.c,
 * check_tcp_hostile.c): one end (context on "tcp", PD, CQ, QP, a
 * registered buffer), a loopback TCP connection (optionally with a small
 * MSS), two ends joined over it after the MPA exchange, and a raw peer
 * that speaks the wire format by hand through the codec, to misbehave.
 */
#ifndef FERRY_TCPTEST_H
#define FERRY_TCPTEST_H

#include <stdbool.h>
#include <stdint.h>

#include <check.h>
#include <ferry/verbs.h>

#include "tcp-internal.h"

struct tt_end {
	struct ferry_context *ctx;
	struct ferry_pd *pd;
	struct ferry_comp_channel *ch;
	struct ferry_cq *cq;
	struct ferry_qp *qp;
	uint8_t *buf;
	size_t len;
	struct ferry_mr *mr;
	uint32_t mss;			/* the socket's, read before attach */
};

struct tt_opts {
	size_t buf_len;			/* default 64 KiB */
	int mr_access;			/* default all */
	bool channel;
	uint32_t mss;			/* 0: loopback's */
	uint8_t rnr_retry;		/* the initiator's (a) */
	uint8_t min_rnr_timer;		/* the responder's (b) */
	bool no_rfc7306;		/* join as if the peer were siw */
	bool no_crc;			/* neither side asks for CRC32c */
};

void tt_end_open(struct tt_end *e, const struct tt_opts *o);
void tt_end_close(struct tt_end *e);
/* A connected loopback pair: *a_p connects, *b_p was accepted. */
void tt_tcp_pair(int *a_p, int *b_p, uint32_t mss);
/* Both ends open and joined: @a is the MPA Initiator. */
void tt_pair(struct tt_end *a, struct tt_end *b, const struct tt_opts *o);
void tt_pair_close(struct tt_end *a, struct tt_end *b);
/* @e's QP: INIT, attached to @fd with @conn, RTR, RTS. */
void tt_join(struct tt_end *e, int fd, const struct tcp_attach *conn, const struct tt_opts *o);

/* --- a raw peer --- */

struct tt_raw {
	int fd;
	bool crc;
	uint32_t msn[4];
	struct tcpw_fpdu_parser parser;
	uint8_t *pbuf;
	uint8_t in[65536];
	size_t in_len, in_off;
	struct tcpw_fpdu last;		/* the FPDU tt_raw_recv returned */
};

/*
 * A ferry end @e (Initiator) joined to a raw Responder: the raw side
 * answers the Request (with ferry's private data when @ferry_pd) and
 * reads the RTR.
 */
void tt_raw_pair(struct tt_end *e, struct tt_raw *r, const struct tt_opts *o, bool ferry_pd);
void tt_raw_close(struct tt_raw *r);
/* Send @s (untagged: queue and MSN filled in) with @len bytes of payload;
 * @corrupt flips a CRC bit. */
void tt_raw_send(struct tt_raw *r, struct tcpw_seg *s, const void *payload, size_t len,
		 bool corrupt);
/* The next segment: 1, 0 at EOF, -1 on a timeout or a stream error. */
int tt_raw_recv(struct tt_raw *r, struct tcpw_seg *s_p);
/* Read until a Terminate comes (1, *code_p) or EOF/timeout (0). */
int tt_raw_wait_term(struct tt_raw *r, struct tcpw_term_code *code_p);
/* Read until EOF: true when the stream ended (FIN) in time. */
bool tt_raw_wait_eof(struct tt_raw *r);

void tcp_hostile_tcases(Suite *s);

#endif /* FERRY_TCPTEST_H */
