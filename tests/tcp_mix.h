/*
 * tcp_mix.h - what the two files of tests/tcp_mix share: its limits, the
 * messages the two ends exchange, and the state of one end (struct mix).
 * tcp_mix.c: the command line, the CM, the runs; tcp_mix_data.c: the
 * seeded bytes, the memory, the posts and the completions.
 */
#ifndef FERRY_TESTS_TCP_MIX_H
#define FERRY_TESTS_TCP_MIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ferry/cm.h>
#include <ferry/verbs.h>

#define MIX_REGION (4u << 20)		/* each of src, dst, win, rsrc */
#define MIX_RDMA_MAX (256u << 10)	/* largest WRITE / READ */
#define MIX_SEND_MAX (64u << 10)	/* largest SEND = a slot's size */
#define MIX_SLOTS 64			/* server receive slots */
#define MIX_CREDIT_EVERY 16		/* receives per credit message */
#define MIX_CREDIT_RECVS 16		/* client receives for credits, reply */
#define MIX_CTRL_LEN 64			/* a control message's buffer */
#define MIX_SQ_DEPTH 32
#define MIX_CQ_DEPTH 256
#define MIX_IMM_FINAL 0xffffffffu	/* client -> server: the hash follows */
#define MIX_IMM_REPLY 0xfffffffeu	/* server -> client: the verdict */
#define MIX_CM_TIMEOUT_MS 20000
#define MIX_LOST_WAIT_MS 10000		/* DISCONNECTED after a flush, at most */

/* wr_id kinds (the low byte); the rest is a slot or credit index. */
enum mix_wr {
	MIX_WR_WRITE = 1,
	MIX_WR_READ,
	MIX_WR_SEND,
	MIX_WR_CTRL,		/* a credit, final or reply message */
	MIX_WR_RECV_SLOT,
	MIX_WR_RECV_CTRL,
};

/* The server's memory, as the accept's private data describes it. */
struct mix_advert {
	uint64_t addr;		/* win; rsrc follows it */
	uint32_t rkey;
	uint32_t region;
};

/* The final message: what the server's win must hash to. */
struct mix_final {
	uint64_t win_hash;
	uint64_t sends;
	uint64_t send_bytes;
};

struct mix {
	/* options */
	bool server, expect_lost;
	const char *addr;
	uint16_t port;
	uint64_t seed, total;
	/* CM and verbs objects */
	struct ferry_event_channel *channel;
	struct ferry_cm_id *listen_id, *id;
	struct ferry_pd *pd;
	struct ferry_comp_channel *comp;
	struct ferry_cq *cq;
	/* memory: one registered block each side, and its parts */
	uint8_t *mem;
	struct ferry_mr *mr;
	uint8_t *src, *dst, *win, *rsrc, *slots, *ctrl, *check;
	uint8_t *want_src, *want_rsrc;	/* the seed's contents, unregistered */
	uint8_t *model_win, *model_dst;	/* client: what must be there */
	struct mix_advert peer;
	/* progress */
	uint64_t rng, moved, sends, send_bytes, recvs, credits, ctrl_seq;
	unsigned int outstanding;
	bool lost, disconnected, done, reply_ok;
	bool closing;		/* disconnecting: flushes are expected */
	struct mix_final final;
};


void mix_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t mix_hash(const uint8_t *buf, size_t len);
double mix_now_real(void);
int mix_mem_setup(struct mix *mix);
int mix_post(struct mix *mix, struct ferry_send_wr *wr, const char *what);
int mix_post_recv_slot(struct mix *mix, unsigned int slot);
int mix_post_recv_ctrl(struct mix *mix, unsigned int i);
int mix_post_ctrl(struct mix *mix, uint32_t imm, const void *data, uint32_t len);
int mix_client_fill(struct mix *mix);
int mix_take_cm_event(struct mix *mix);
int mix_wait(struct mix *mix, int timeout_ms);
struct ferry_cm_event *mix_expect(struct mix *mix, enum ferry_cm_event_type want);
int mix_expect_ack(struct mix *mix, enum ferry_cm_event_type want);

#endif /* FERRY_TESTS_TCP_MIX_H */
