/*
 * examples/pingpong.h - the out-of-band exchange of the ping-pong examples:
 * each side tells the other its (LID, QPN, PSN, GID) over a TCP socket of
 * its own, in the text format of rdma-core's ibv_*_pingpong, so that
 * ferry's examples and Debian's ibv_rc_pingpong / ibv_uc_pingpong talk to
 * each other in both directions.
 *
 * The conversation (as rdma-core's examples hold it):
 *   client -> server  "LLLL:QQQQQQ:PPPPPP:GGGG...G\0"   (PP_MSG_SIZE bytes)
 *   server            moves its QP to RTR/RTS with what it read, then
 *   server -> client  its own message, the same format
 *   client -> server  "done\0", then the client moves its QP to RTR/RTS.
 * The server's QP is therefore ready before the client learns where it is,
 * and a client never sends to a QP that is not yet listening (which would
 * lose UC messages).  L, Q, P: lowercase hex, zero-padded; G: the GID's 16
 * bytes as 32 hex digits, in wire (network) order.
 *
 * Every call returns 0 (or a descriptor) on success and -1 on failure,
 * having said why on stderr.
 */
#ifndef FERRY_EXAMPLES_PINGPONG_H
#define FERRY_EXAMPLES_PINGPONG_H

#include <stdint.h>

#include <ferry/verbs.h>

/* One side's address as the exchange carries it. */
struct pp_dest {
	uint16_t lid;
	uint32_t qpn;		/* 24 bits */
	uint32_t psn;		/* 24 bits */
	union ferry_gid gid;	/* all zero: none (the receiver uses the LID) */
};

/* Bytes of one address message, its terminating NUL included. */
#define PP_MSG_SIZE sizeof("0000:000000:000000:00000000000000000000000000000000")

/* Client: dial host:port, send mine, read the peer's, say "done". */
int pp_exchange_client(const char *host, int port, const struct pp_dest *mine,
		       struct pp_dest *peer_p);

/*
 * Server, in two steps so that the QP is joined between them: accept one
 * client on port and read its address (returns the connected descriptor),
 * then send mine and wait for "done" (closes the descriptor either way).
 */
int pp_server_accept(int port, struct pp_dest *peer_p);
int pp_server_reply(int fd, const struct pp_dest *mine);

/* Both server steps at once, for callers whose QP needs nothing between. */
int pp_exchange_server(int port, const struct pp_dest *mine,
		       struct pp_dest *peer_p);

/*
 * The same for @n QPs at once (ibv_srq_pingpong's conversation): the
 * client sends its @n messages, reads the server's @n, then says "done";
 * the server reads @n, joins its QPs, then answers with its @n.
 */
int pp_exchange_client_n(const char *host, int port, const struct pp_dest *mine,
			 struct pp_dest *peer, int n);
int pp_server_accept_n(int port, struct pp_dest *peer, int n);
int pp_server_reply_n(int fd, const struct pp_dest *mine, int n);

/*
 * The message itself, for tests: pp_dest_format writes PP_MSG_SIZE bytes;
 * pp_dest_parse accepts exactly that format (fields in range, terminated)
 * and returns -1 for anything else, as a message from the network may be.
 */
void pp_dest_format(const struct pp_dest *dest, char msg[PP_MSG_SIZE]);
int pp_dest_parse(const char msg[PP_MSG_SIZE], struct pp_dest *dest_p);

/* The GID as the examples print it (inet_ntop: "fe80::1"). */
#define PP_GID_STRLEN 46
void pp_gid_str(const union ferry_gid *gid, char buf[PP_GID_STRLEN]);

/*
 * What rc_pingpong and srq_pingpong share besides the exchange, as
 * rdma-core's examples share pingpong.c: a number in [lo, hi] from the
 * command line (-1 after saying what is wrong); an MTU in bytes as the
 * enum (0: not one); the device named (NULL: the first); with -e, one CQ
 * event waited for, counted in *events_p and re-armed; the closing lines
 * of the ibv_*_pingpong report.
 */
struct timeval;
long pp_number(const char *what, const char *text, long lo, long hi);
enum ferry_mtu pp_mtu_of(long mtu);
struct ferry_context *pp_open_device(const char *devname);
int pp_wait_cq_event(struct ferry_comp_channel *channel, struct ferry_cq *cq,
		     unsigned int *events_p);
void pp_report(unsigned int size, unsigned int iters, const struct timeval *start,
	       const struct timeval *end);

#endif /* FERRY_EXAMPLES_PINGPONG_H */
