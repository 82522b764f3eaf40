/*
 * testutil.h - helpers shared by the Check suites: one end of a connection
 * (context, PD, CQ, QP, a registered buffer), connecting two ends in one
 * process (two threads) or across fork(), bounded CQ polling, and a small
 * control channel between a test and the child processes it forks.
 *
 * Helpers called in the test process assert with ck_assert; helpers meant
 * for a forked child (tu_child_*) never call Check: a child reports failure
 * through its exit status (TU_CHILD_CHECK).
 */
#ifndef FERRY_TESTUTIL_H
#define FERRY_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <ferry/verbs.h>

/* Generous bound on any single wait: reaching it means a hang, not slowness. */
#define TU_WAIT_MS 10000
/* Check timeout of every test case, in seconds. */
#define TU_TCASE_TIMEOUT 30

#define TU_ACCESS_ALL (FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE | \
		       FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_ATOMIC)
#define TU_QP_ACCESS_ALL (FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ | \
			  FERRY_ACCESS_REMOTE_ATOMIC)

/* How to build one end; zero fields take the defaults noted. */
struct tu_opts {
	size_t buf_len;		/* registered buffer size; default 64 KiB */
	int mr_access;		/* MR access flags; default TU_ACCESS_ALL */
	bool malloc_buf;	/* buffer from malloc instead of ferry_alloc */
	bool channel;		/* create a completion channel for the CQs */
	bool split_cq;		/* separate send and receive CQs */
	bool no_sig_all;	/* sq_sig_all = 0 (default 1) */
	int cqe;		/* default 256 */
	uint32_t max_send_wr;	/* default 64 */
	uint32_t max_recv_wr;	/* default 64 */
	uint32_t max_sge;	/* send and recv; default 4 */
	uint32_t max_inline;	/* default 0 */
	uint32_t pd_max_remote;	/* > 0: ferry_alloc_pd_small(ctx, this) */
};

/* One end of a connection. */
struct tu_end {
	struct ferry_context *ctx;
	struct ferry_pd *pd;
	struct ferry_comp_channel *channel;	/* NULL unless opts.channel */
	struct ferry_cq *send_cq;
	struct ferry_cq *recv_cq;		/* == send_cq unless split_cq */
	struct ferry_qp *qp;
	char *buf;
	size_t len;
	bool buf_malloc;
	struct ferry_mr *mr;
};

/* What one end tells the other about its memory before connecting. */
struct tu_remote {
	uint64_t addr;
	uint64_t len;
	uint32_t rkey;
	uint32_t qp_num;
	uint64_t addr2;		/* optional second region */
	uint64_t len2;
	uint32_t rkey2;
	uint32_t pad;
};

/*
 * tu_transport - the provider the suites run on: FERRY_TRANSPORT, else
 * "shm".  Tests of one provider's own behaviour check it (tu_on_shm).
 */
const char *tu_transport(void);
bool tu_on_shm(void);

/*
 * tu_on_iwarp - on verbs, is ferry's first RDMA device an RNIC (sysfs
 * node_type 4, e.g. Linux siw)?  Tests of what iWARP lacks (RNR retries,
 * the IB CM's reasons, a manual RTR) skip there and say why.
 */
bool tu_on_iwarp(void);

/* --- in the test process (ck_assert on failure) --- */

void tu_end_open(struct tu_end *e, const struct tu_opts *o);
void tu_end_close(struct tu_end *e);

/*
 * tu_pair_connect - connect two ends of this process with
 * ferry_qp_connect_sock, one of them from a helper thread.
 */
void tu_pair_connect(struct tu_end *a, struct tu_end *b, int qp_access);
/* Open both ends with @o and connect them with all access rights. */
void tu_pair_open(struct tu_end *a, struct tu_end *b, const struct tu_opts *o);
void tu_pair_close(struct tu_end *a, struct tu_end *b);

/*
 * tu_pair_connect_manual - ferry_qp_exchange plus explicit modify_qp calls
 * (RESET -> INIT -> RTR -> RTS) with the given RNR parameters.
 */
void tu_pair_connect_manual(struct tu_end *a, struct tu_end *b,
			    uint8_t rnr_retry, uint8_t min_rnr_timer);

/* The three transitions with the masks ibverbs requires; return 0 / -1. */
int tu_qp_to_init(struct ferry_qp *qp, int qp_access);
int tu_qp_to_rtr(struct ferry_qp *qp, uint32_t dest_qpn, uint8_t min_rnr_timer);
int tu_qp_to_rts(struct ferry_qp *qp, uint8_t rnr_retry);

/*
 * tu_poll - poll @cq until @n completions are in @wc or @timeout_ms passed.
 * Returns how many were collected (fails the test if poll_cq returns -1).
 */
int tu_poll(struct ferry_cq *cq, struct ferry_wc *wc, int n, int timeout_ms);
/* Exactly one completion within TU_WAIT_MS, else the test fails. */
void tu_poll1(struct ferry_cq *cq, struct ferry_wc *wc);
/* Assert the CQ is empty right now. */
void tu_assert_cq_empty(struct ferry_cq *cq);
/* Current QP state from ferry_query_qp. */
enum ferry_qp_state tu_qp_state(struct ferry_qp *qp);
/* Wait (bounded) until the QP reports @state; true when it did. */
bool tu_wait_qp_state(struct ferry_qp *qp, enum ferry_qp_state state,
		      int timeout_ms);

/* Post one WR with one SGE; return what ferry_post_* returned. */
int tu_post_send1(struct ferry_qp *qp, uint64_t wr_id,
		  enum ferry_wr_opcode opcode, unsigned int flags,
		  void *addr, uint32_t len, uint32_t lkey,
		  uint64_t remote_addr, uint32_t rkey);
int tu_post_atomic(struct ferry_qp *qp, uint64_t wr_id,
		   enum ferry_wr_opcode opcode, void *local, uint32_t lkey,
		   uint64_t remote_addr, uint32_t rkey,
		   uint64_t compare_add, uint64_t swap);
int tu_post_recv1(struct ferry_qp *qp, uint64_t wr_id, void *addr,
		  uint32_t len, uint32_t lkey);
/* Post @wr and the WRs chained to it; fail the test unless all were taken. */
void tu_post_send_ok(struct ferry_qp *qp, struct ferry_send_wr *wr);

/* Fill with a pattern derived from @seed; check it. */
void tu_fill(void *buf, size_t len, unsigned int seed);
bool tu_check(const void *buf, size_t len, unsigned int seed);
bool tu_all_bytes(const void *buf, size_t len, unsigned char value);

uint64_t tu_now_ms(void);
/* Under valgrind (which keeps descriptors of its own past the limit it
 * shows, and so does not run out of them as the kernel does)? */
bool tu_under_valgrind(void);
void tu_sleep_ms(unsigned int ms);

/* --- across fork() --- */

/*
 * tu_fork_quiet - fork() once every other thread of this process (ferry's
 * CM, shm monitor and keepalive threads) sleeps in a system call, waiting up
 * to a few seconds for it.  A child inherits the locks other threads held at
 * the fork; glibc's malloc takes its own locks around fork(), but the
 * allocator of AddressSanitizer as GCC 12 builds it does not, and a child
 * forked while another thread was inside it waits for that lock forever.
 * Tests fork through this (or tu_fork, which uses it).
 */
pid_t tu_fork_quiet(void);

/*
 * tu_fork - create the connection socket pair and a control socket pair,
 * fork, run @child(sock, ctl, arg) in the child and _exit with its result.
 * In the parent, *sock_p and *ctl_p receive the parent's ends.
 */
pid_t tu_fork(int (*child)(int sock, int ctl, void *arg), void *arg,
	      int *sock_p, int *ctl_p);
/* Wait for @pid up to @timeout_ms (then SIGKILL it); its exit status or -1. */
int tu_wait_child(pid_t pid, int timeout_ms);

/* Fixed-size control messages; return 0, or -1 on error / timeout / EOF. */
int tu_msg_send(int fd, const void *msg, size_t len);
int tu_msg_recv(int fd, void *msg, size_t len, int timeout_ms);
int tu_send_u32(int fd, uint32_t v);
int tu_recv_u32(int fd, uint32_t *v, int timeout_ms);

/* In a child: fail with a message and a nonzero status. */
#define TU_CHILD_CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "child %d: %s:%d: check failed: %s\n", \
			(int)getpid(), __FILE__, __LINE__, #cond); \
		_exit(2); \
	} } while (0)

/* In a child: open an end without Check; exits on failure. */
void tu_child_end_open(struct tu_end *e, const struct tu_opts *o);
void tu_child_end_close(struct tu_end *e);
/*
 * tu_child_connect - open an end with @o, trade tu_remotes (ours: the
 * end's buffer) with the parent over @sock and connect with every access
 * right; *peer_p receives the parent's tu_remote.
 */
void tu_child_connect(struct tu_end *e, const struct tu_opts *o, int sock,
		      struct tu_remote *peer_p);
/* In a child: bounded poll; returns count. */
int tu_child_poll(struct ferry_cq *cq, struct ferry_wc *wc, int n,
		  int timeout_ms);

#endif /* FERRY_TESTUTIL_H */
