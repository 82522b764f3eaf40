/*
 * bench/herd-ferry.h - what bench/herd's ferry side shares between its
 * server (herd_server.c), its clients (herd_client.c) and the run
 * (herd.c): the queue depths, the out-of-band exchange, the device and
 * queue-pair helpers.  Each returns 0 (or an object) on success, -1 (or
 * NULL) having said why on stderr.
 */
#ifndef FERRY_BENCH_HERD_FERRY_H
#define FERRY_BENCH_HERD_FERRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/verbs.h>

#include "herd.h"

#define HERD_QKEY	0x48455244u	/* "HERD" */
#define HERD_UD_DEPTH	128		/* the server's UD send queue */
#define HERD_UD_SIGNAL	32		/* one response in this many is signalled */
#define HERD_UC_DEPTH	64		/* a client's UC send queue */
#define HERD_UC_SIGNAL	16
#define HERD_RECV_STRIDE 128		/* a client's receive buffer: GRH + response */
#define HERD_RESEND_S	0.5
#define HERD_STALL_S	20.0		/* nothing answered for this long: give up */
#define HERD_IDLE_SPINS	1		/* empty polls before a yield: see herd_idle */

/* What each side tells the other over its socketpair. */
struct herd_oob_client {
	uint32_t uc_qpn, ud_qpn;
	uint16_t lid;
	union ferry_gid gid;
};
struct herd_oob_server {
	uint64_t slots_addr;		/* this client's window of slots */
	uint32_t rkey, uc_qpn, ud_qpn, psn;
	uint16_t lid;
	union ferry_gid gid;
};

/* One device with what both sides open on it. */
struct herd_dev {
	struct ferry_context *ctx;
	struct ferry_pd *pd;
	uint16_t lid;
	union ferry_gid gid;
};

int herd_dev_open(struct herd_dev *d, const struct herd_opts *o);
void herd_dev_close(struct herd_dev *d);
/* The address of a peer: with a GRH when it sent a GID (RoCE needs one). */
struct ferry_ah_attr herd_ah_attr(uint16_t lid, const union ferry_gid *gid,
				  const struct herd_opts *o);
/* A QP of @type; *inline_p: the inline bytes it takes. */
struct ferry_qp *herd_qp_create(struct herd_dev *d, enum ferry_qp_type type,
				struct ferry_cq *scq, struct ferry_cq *rcq,
				int send_depth, int recv_depth, uint32_t *inline_p);
/* A UD QP to RTS with HERD_QKEY. */
int herd_ud_ready(struct ferry_qp *qp, uint32_t psn);
/* A UC QP joined to (lid, qpn): INIT, RTR, and RTS when it sends. */
int herd_uc_join(struct ferry_qp *qp, uint16_t lid, const union ferry_gid *gid,
		 uint32_t qpn, uint32_t psn, bool sends, const struct herd_opts *o);
/* Exactly @len bytes over a socketpair, out or in. */
int herd_oob_io(int fd, void *buf, size_t len, bool out);
/* An empty poll: spin or yield (herd.c says why). */
void herd_idle(unsigned int *idle);

/* The two sides, each in its forked process. */
int herd_server_run(const struct herd_opts *o, struct herd_shared *sh, const int *fds);
int herd_client_run(const struct herd_opts *o, struct herd_shared *sh, int c, int fd);

#endif /* FERRY_BENCH_HERD_FERRY_H */
