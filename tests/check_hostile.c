/*
 * check_hostile.c - a peer that corrupts the shared state it publishes.
 *
 * A forked child connects to the test process, behaves for a while, then
 * overwrites its QP's outbound region (the memory the test process reads:
 * see shm_qp_test_region in prov/shm/shm-internal.h) with 0xff bytes,
 * random bytes, or plausible-but-wrong counters and ring entries, and keeps
 * doing so while it tries to send.  The test process keeps posting and
 * polling.  It must not crash (Check's fork mode turns a crash into a
 * failure), must not hang (every wait is bounded), must end with its QP in
 * ERR, must report only completions for work it posted, each once, and
 * must never write outside its registered buffer (guard canaries).
 * Meanwhile a second, healthy child keeps echoing correctly.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "testutil.h"
#include "shm-internal.h"

enum hostile_mode {
	HOSTILE_FF,		/* every byte 0xff */
	HOSTILE_RANDOM,		/* random bytes */
	HOSTILE_COUNTERS,	/* producer counters far ahead */
	HOSTILE_DELIVERIES,	/* a few deliveries too many, with garbage */
	HOSTILE_RECEIVES,	/* fake posted receives pointing anywhere */
	HOSTILE_HEADER,		/* magic, sizes and qp number rewritten */
	HOSTILE_NMODES
};

static const char *const hostile_names[HOSTILE_NMODES] = {
	"0xff", "random", "counters", "deliveries", "receives", "header",
};

enum {
	H_BUF = 65536,		/* the parent's registered buffer */
	H_GUARD = 65536,	/* canary space on each side */
	H_RECVS = 32,		/* receives the parent posts to the hostile peer */
	H_RECV_LEN = 1024,
	H_LEGIT = 4,		/* well-formed SENDs before the corruption */
	H_ABUSE_MS = 300,	/* how long the child keeps corrupting */
	H_RECV_ID = 100,
	H_SEND_ID = 1000,
};

#define H_CANARY 0xc5

/* ctl messages */
enum { H_READY = 1, H_GO, H_CORRUPTING, H_DONE, H_EXIT };

/* --- the hostile child --- */

static void hostile_corrupt(struct tu_end *e, enum hostile_mode mode,
			    unsigned int *seed)
{
	struct shm_qp *sqp = to_sqp(e->qp);
	struct shm_region *reg;
	uint8_t *base;
	size_t len;
	void *addr;

	TU_CHILD_CHECK(shm_qp_test_region(e->qp, &addr, &len) == 0);
	TU_CHILD_CHECK(len >= sqp->region_head_off + shm_region_head_size());
	base = addr;
	reg = sqp->region;
	switch (mode) {
	case HOSTILE_FF:
		memset(base, 0xff, len);
		break;
	case HOSTILE_RANDOM:
		for (size_t i = 0; i < len; i++)
			base[i] = (uint8_t)rand_r(seed);
		break;
	case HOSTILE_COUNTERS: {
		uint32_t dq_size = reg->dq_size;

		atomic_store(&reg->rq_prod, atomic_load(&reg->rq_prod) + (1ull << 40));
		/* every delivery slot claims a sequence number far ahead */
		if (dq_size * sizeof(struct shm_delivery) <= sqp->region_head_off)
			for (uint32_t i = 0; i < dq_size; i++)
				atomic_store(&shm_dq_entry((uint8_t *)reg, dq_size, i)->seq,
					     sqp->dq_seq + (1ull << 20) + i);
		break;
	}
	case HOSTILE_DELIVERIES: {
		uint32_t dq_size = reg->dq_size;

		if (dq_size * sizeof(struct shm_delivery) <= sqp->region_head_off)
			for (uint32_t i = 0; i < dq_size; i++) {
				struct shm_delivery *d = shm_dq_entry((uint8_t *)reg, dq_size, i);

				d->opcode = i % 2 ? 0x1234 : FERRY_WC_RECV;
				d->status = i % 3 ? 999 : FERRY_WC_SUCCESS;
				d->byte_len = i % 2 ? 0xffffffffu : H_RECV_LEN + 1;
				d->imm_data = 0xdeadbeef;
				d->flags = 0xffffffffu;
			}
		/* the next three slots look like the deliveries the parent expects */
		if (dq_size * sizeof(struct shm_delivery) <= sqp->region_head_off && dq_size)
			for (uint64_t k = 1; k <= 3; k++)
				atomic_store(&shm_dq_entry((uint8_t *)reg, dq_size,
							   sqp->dq_seq + k - 1)->seq,
					     sqp->dq_seq + k);
		break;
	}
	case HOSTILE_RECEIVES: {
		uint64_t block = to_smr(e->mr)->block_id;

		for (uint32_t i = 0; i < sqp->rq_size; i++) {
			uint8_t *ent = shm_rq_entry((uint8_t *)reg, sqp->rq_stride,
						    sqp->rq_size, i);
			struct shm_rsge *sge = (struct shm_rsge *)(ent + 8);
			uint32_t count = i % 2 ? 0xffffu : sqp->cap.max_recv_sge;

			if ((size_t)(ent - base) + sqp->rq_stride > len)
				break;
			memcpy(ent, &count, sizeof(count));
			for (uint32_t s = 0; s < sqp->cap.max_recv_sge; s++) {
				sge[s].block_id = s % 2 ? block : block + 12345;
				sge[s].addr = s % 3 == 0 ? (1ull << 40) :
					      s % 3 == 1 ? e->len - 8 : UINT64_MAX - 4;
				sge[s].length = s % 2 ? 4096 : (1ull << 40);
			}
		}
		atomic_store(&reg->rq_prod, atomic_load(&reg->rq_prod) + sqp->rq_size);
		break;
	}
	case HOSTILE_HEADER:
		reg->magic = 0;
		reg->version = 77;
		reg->qp_num = 0xffffffu;
		reg->rq_size = 0x80000000u;
		reg->rq_sge = 0xffffffffu;
		reg->dq_size = 3;
		atomic_store(&reg->in_error, 0);
		atomic_store(&reg->rq_prod, atomic_load(&reg->rq_prod) + 1);
		break;
	case HOSTILE_NMODES:
		break;
	}
}

static int hostile_child(int sock, int ctl, void *arg)
{
	enum hostile_mode mode = (enum hostile_mode)(intptr_t)arg;
	struct tu_opts o = { .max_sge = 4 };
	struct tu_remote peer;
	struct tu_end e;
	struct ferry_wc wc[8];
	unsigned int seed = 12345u + (unsigned int)mode;
	uint32_t msg;
	uint64_t until;

	tu_child_connect(&e, &o, sock, &peer);
	for (int i = 0; i < 8; i++)
		TU_CHILD_CHECK(tu_post_recv1(e.qp, (uint64_t)i, e.buf + 1024 * i,
					     1024, e.mr->lkey) == 0);

	/* behave first */
	for (int i = 0; i < H_LEGIT; i++) {
		tu_fill(e.buf + 16384 + 512 * i, 300, 900 + (unsigned)i);
		TU_CHILD_CHECK(tu_post_send1(e.qp, 50 + (uint64_t)i, FERRY_WR_SEND, 0,
					     e.buf + 16384 + 512 * i, 300,
					     e.mr->lkey, 0, 0) == 0);
	}
	TU_CHILD_CHECK(tu_child_poll(e.send_cq, wc, H_LEGIT, TU_WAIT_MS) == H_LEGIT);
	TU_CHILD_CHECK(tu_send_u32(ctl, H_READY) == 0);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &msg, TU_WAIT_MS) == 0 && msg == H_GO);

	/* then misbehave, again and again, while also trying to send */
	hostile_corrupt(&e, mode, &seed);
	TU_CHILD_CHECK(tu_send_u32(ctl, H_CORRUPTING) == 0);
	until = tu_now_ms() + H_ABUSE_MS;
	while (tu_now_ms() < until) {
		hostile_corrupt(&e, mode, &seed);
		tu_post_send1(e.qp, 60, FERRY_WR_SEND, 0, e.buf, 200, e.mr->lkey,
			      0, 0);
		tu_post_send1(e.qp, 61, FERRY_WR_RDMA_WRITE_WITH_IMM, 0, e.buf, 200,
			      e.mr->lkey, peer.addr, peer.rkey);
		ferry_poll_cq(e.send_cq, 8, wc);
		hostile_corrupt(&e, mode, &seed);
		tu_sleep_ms(1);
	}
	TU_CHILD_CHECK(tu_send_u32(ctl, H_DONE) == 0);
	tu_recv_u32(ctl, &msg, 30000);
	_exit(0);	/* no cleanup: our own state is garbage on purpose */
}

/* --- a healthy child: echoes every SEND; a zero-length one ends it --- */

static int healthy_child(int sock, int ctl, void *arg)
{
	struct tu_end e;
	struct tu_remote peer;
	struct ferry_wc wc;

	tu_child_connect(&e, NULL, sock, &peer);
	TU_CHILD_CHECK(tu_post_recv1(e.qp, 0, e.buf, 1024, e.mr->lkey) == 0);
	for (;;) {
		TU_CHILD_CHECK(tu_child_poll(e.recv_cq, &wc, 1, 20000) == 1);
		TU_CHILD_CHECK(wc.status == FERRY_WC_SUCCESS);
		if (wc.byte_len == 0)
			break;
		TU_CHILD_CHECK(tu_post_recv1(e.qp, 0, e.buf, 1024, e.mr->lkey) == 0);
		memcpy(e.buf + 2048, e.buf, wc.byte_len);
		TU_CHILD_CHECK(tu_post_send1(e.qp, 1, FERRY_WR_SEND, 0, e.buf + 2048,
					     wc.byte_len, e.mr->lkey, 0, 0) == 0);
		TU_CHILD_CHECK(tu_child_poll(e.send_cq, &wc, 1, TU_WAIT_MS) == 1);
		TU_CHILD_CHECK(wc.status == FERRY_WC_SUCCESS);
	}
	tu_child_end_close(&e);
	(void)ctl;
	(void)arg;
	return 0;
}

/* --- the survivor --- */

struct hostile_parent {
	struct ferry_context *ctx;
	struct ferry_pd *pd;
	struct ferry_cq *send_cq, *recv_cq;
	struct ferry_qp *qp;
	char *block;		/* guard | registered buffer | guard */
	char *buf;
	struct ferry_mr *mr;
	struct tu_remote peer;
	bool recv_done[H_RECVS];
	uint64_t next_send_id;	/* next wr_id to post */
	uint64_t next_send_wc;	/* send completions come in order */
	bool error_seen;	/* any error completion */
	bool recv_error_seen;
	bool send_error_seen;
	int successes_after_corruption;
};

static void hostile_parent_open(struct hostile_parent *hp)
{
	struct ferry_qp_init_attr init;

	memset(hp, 0, sizeof(*hp));
	hp->ctx = ferry_open_transport("shm");
	ck_assert_ptr_nonnull(hp->ctx);
	hp->pd = ferry_alloc_pd(hp->ctx);
	ck_assert_ptr_nonnull(hp->pd);
	hp->send_cq = ferry_create_cq(hp->ctx, 1024, NULL, NULL, 0);
	hp->recv_cq = ferry_create_cq(hp->ctx, 1024, NULL, NULL, 0);
	ck_assert_ptr_nonnull(hp->send_cq);
	ck_assert_ptr_nonnull(hp->recv_cq);
	hp->block = ferry_alloc(H_GUARD + H_BUF + H_GUARD);
	ck_assert_ptr_nonnull(hp->block);
	memset(hp->block, H_CANARY, H_GUARD + H_BUF + H_GUARD);
	hp->buf = hp->block + H_GUARD;
	memset(hp->buf, 0, H_BUF);
	hp->mr = ferry_reg_mr(hp->pd, hp->buf, H_BUF, TU_ACCESS_ALL);
	ck_assert_ptr_nonnull(hp->mr);
	memset(&init, 0, sizeof(init));
	init.send_cq = hp->send_cq;
	init.recv_cq = hp->recv_cq;
	init.qp_type = FERRY_QPT_RC;
	init.sq_sig_all = 1;
	init.cap.max_send_wr = 64;
	init.cap.max_recv_wr = H_RECVS;
	init.cap.max_send_sge = 2;
	init.cap.max_recv_sge = 2;
	hp->qp = ferry_create_qp(hp->pd, &init);
	ck_assert_ptr_nonnull(hp->qp);
	hp->next_send_id = H_SEND_ID;
	hp->next_send_wc = H_SEND_ID;
}

static void hostile_parent_close(struct hostile_parent *hp)
{
	ck_assert_int_eq(ferry_destroy_qp(hp->qp), 0);
	ck_assert_int_eq(ferry_dereg_mr(hp->mr), 0);
	ferry_free(hp->block);
	ck_assert_int_eq(ferry_destroy_cq(hp->send_cq), 0);
	ck_assert_int_eq(ferry_destroy_cq(hp->recv_cq), 0);
	ck_assert_int_eq(ferry_dealloc_pd(hp->pd), 0);
	ck_assert_int_eq(ferry_close_device(hp->ctx), 0);
}

static void hostile_check_canaries(struct hostile_parent *hp)
{
	ck_assert_msg(tu_all_bytes(hp->block, H_GUARD, H_CANARY),
		      "written below the registered buffer");
	ck_assert_msg(tu_all_bytes(hp->block + H_GUARD + H_BUF, H_GUARD, H_CANARY),
		      "written above the registered buffer");
}

/* Receive i lands at buf + i * H_RECV_LEN; the upper half is for sends. */
static char *hostile_recv_buf(struct hostile_parent *hp, int i)
{
	return hp->buf + (size_t)i * H_RECV_LEN;
}

/* Validate every completion there is now; returns how many. */
static int hostile_drain(struct hostile_parent *hp, bool corrupted)
{
	struct ferry_wc wc[16];
	int total = 0, n;

	while ((n = ferry_poll_cq(hp->recv_cq, 16, wc)) > 0) {
		for (int k = 0; k < n; k++) {
			int i = (int)(wc[k].wr_id - H_RECV_ID);

			ck_assert_msg(wc[k].wr_id >= H_RECV_ID && i < H_RECVS,
				      "completion for a receive never posted: %llu",
				      (unsigned long long)wc[k].wr_id);
			ck_assert_msg(!hp->recv_done[i], "receive %d completed twice", i);
			hp->recv_done[i] = true;
			ck_assert_uint_le(wc[k].status, FERRY_WC_GENERAL_ERR);
			ck_assert_uint_eq(wc[k].qp_num, hp->qp->qp_num);
			if (wc[k].status != FERRY_WC_SUCCESS) {
				hp->error_seen = hp->recv_error_seen = true;
				continue;
			}
			/* one queue completes in order: no success after an error */
			ck_assert_msg(!hp->recv_error_seen, "receive success after an error");
			ck_assert_msg(wc[k].opcode == FERRY_WC_RECV ||
				      wc[k].opcode == FERRY_WC_RECV_RDMA_WITH_IMM,
				      "opcode %d", wc[k].opcode);
			ck_assert_uint_le(wc[k].byte_len, H_RECV_LEN);
			if (corrupted)
				hp->successes_after_corruption++;
		}
		total += n;
	}
	ck_assert_int_ne(n, -1);
	while ((n = ferry_poll_cq(hp->send_cq, 16, wc)) > 0) {
		for (int k = 0; k < n; k++) {
			ck_assert_msg(wc[k].wr_id == hp->next_send_wc,
				      "send completion %llu, expected %llu",
				      (unsigned long long)wc[k].wr_id,
				      (unsigned long long)hp->next_send_wc);
			hp->next_send_wc++;
			ck_assert_uint_le(wc[k].status, FERRY_WC_GENERAL_ERR);
			if (wc[k].status != FERRY_WC_SUCCESS)
				hp->error_seen = hp->send_error_seen = true;
			else
				ck_assert_msg(!hp->send_error_seen,
					      "send success after an error");
		}
		total += n;
	}
	ck_assert_int_ne(n, -1);
	return total;
}

/* Post one of each kind of WR at the hostile peer (failures are fine). */
static void hostile_poke(struct hostile_parent *hp)
{
	char *src = hp->buf + H_BUF / 2;
	uint64_t id = hp->next_send_id;
	int ok = 0;

	if (hp->next_send_id - hp->next_send_wc > 32)
		return;		/* let completions catch up */
	tu_fill(src, 2048, 7);
	ok += tu_post_send1(hp->qp, id + ok, FERRY_WR_SEND, 0, src, 1000,
			    hp->mr->lkey, 0, 0) == 0;
	ok += tu_post_send1(hp->qp, id + ok, FERRY_WR_RDMA_WRITE, 0, src, 2048,
			    hp->mr->lkey, hp->peer.addr + 4096, hp->peer.rkey) == 0;
	ok += tu_post_send1(hp->qp, id + ok, FERRY_WR_RDMA_READ, 0,
			    src + 4096, 2048, hp->mr->lkey, hp->peer.addr,
			    hp->peer.rkey) == 0;
	ok += tu_post_atomic(hp->qp, id + ok, FERRY_WR_ATOMIC_FETCH_AND_ADD,
			     src + 8192, hp->mr->lkey, hp->peer.addr + 8192,
			     hp->peer.rkey, 1, 0) == 0;
	hp->next_send_id += (uint64_t)ok;
}

static void hostile_echo(struct tu_end *g, unsigned int seed)
{
	uint32_t len = 1 + seed % 1000;
	struct ferry_wc wc;

	ck_assert_int_eq(tu_post_recv1(g->qp, 7, g->buf + 8192, 1024, g->mr->lkey), 0);
	tu_fill(g->buf, len, seed);
	ck_assert_int_eq(tu_post_send1(g->qp, 8, FERRY_WR_SEND, 0, g->buf, len,
				       g->mr->lkey, 0, 0), 0);
	tu_poll1(g->send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	tu_poll1(g->recv_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.byte_len, len);
	ck_assert(tu_check(g->buf + 8192, len, seed));
}

/* Connect @g (opened after the fork) to the healthy child on @sock. */
static void hostile_connect_healthy(struct tu_end *g, int sock)
{
	struct tu_remote mine, peer;

	tu_end_open(g, NULL);
	mine = (struct tu_remote){ (uintptr_t)g->buf, g->len, g->mr->rkey,
				   g->qp->qp_num, 0, 0, 0, 0 };
	ck_assert_int_eq(tu_msg_send(sock, &mine, sizeof(mine)), 0);
	ck_assert_int_eq(tu_msg_recv(sock, &peer, sizeof(peer), TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_qp_connect_sock(g->qp, sock, TU_QP_ACCESS_ALL), 0);
	close(sock);
}

START_TEST(test_hostile_peer)
{
	enum hostile_mode mode = (enum hostile_mode)_i;
	struct hostile_parent hp;
	struct tu_remote mine;
	struct tu_end g;
	int sock, ctl, gsock, gctl, legit = 0;
	unsigned int echo_seed = 1;
	uint32_t msg;
	pid_t pid, gpid;
	uint64_t deadline;
	bool done = false;

	/* fork both children first: they inherit none of our ferry state */
	gpid = tu_fork(healthy_child, NULL, &gsock, &gctl);
	pid = tu_fork(hostile_child, (void *)(intptr_t)mode, &sock, &ctl);
	hostile_parent_open(&hp);
	hostile_connect_healthy(&g, gsock);
	hostile_echo(&g, echo_seed++);

	mine = (struct tu_remote){ (uintptr_t)hp.buf, H_BUF, hp.mr->rkey,
				   hp.qp->qp_num, 0, 0, 0, 0 };
	ck_assert_int_eq(tu_msg_send(sock, &mine, sizeof(mine)), 0);
	ck_assert_int_eq(tu_msg_recv(sock, &hp.peer, sizeof(hp.peer), TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_qp_connect_sock(hp.qp, sock, TU_QP_ACCESS_ALL), 0);
	for (int i = 0; i < H_RECVS; i++)
		ck_assert_int_eq(tu_post_recv1(hp.qp, H_RECV_ID + (uint64_t)i,
					       hostile_recv_buf(&hp, i), H_RECV_LEN,
					       hp.mr->lkey), 0);
	close(sock);

	/* the well-formed part arrives intact */
	ck_assert_int_eq(tu_recv_u32(ctl, &msg, TU_WAIT_MS), 0);
	ck_assert_uint_eq(msg, H_READY);
	deadline = tu_now_ms() + TU_WAIT_MS;
	while (legit < H_LEGIT && tu_now_ms() < deadline) {
		legit = 0;
		hostile_drain(&hp, false);
		for (int i = 0; i < H_LEGIT; i++)
			legit += hp.recv_done[i];
	}
	ck_assert_int_eq(legit, H_LEGIT);
	ck_assert(!hp.error_seen);
	for (int i = 0; i < H_LEGIT; i++)
		ck_assert(tu_check(hostile_recv_buf(&hp, i), 300, 900 + (unsigned)i));

	/* now the peer corrupts its region; keep working against it */
	ck_assert_int_eq(tu_send_u32(ctl, H_GO), 0);
	ck_assert_int_eq(tu_recv_u32(ctl, &msg, TU_WAIT_MS), 0);
	ck_assert_uint_eq(msg, H_CORRUPTING);
	deadline = tu_now_ms() + TU_WAIT_MS;
	while (!done) {
		ck_assert_msg(tu_now_ms() < deadline, "hostile phase never ended");
		hostile_poke(&hp);
		hostile_drain(&hp, true);
		hostile_echo(&g, echo_seed++);
		if (tu_msg_recv(ctl, &msg, sizeof(msg), 0) == 0)
			done = msg == H_DONE;
	}
	hostile_drain(&hp, true);
	hostile_check_canaries(&hp);
	fprintf(stderr, "hostile %s: error seen before the peer exited: %s, "
		"successful receives after corruption: %d\n", hostile_names[mode],
		hp.error_seen ? "yes" : "no", hp.successes_after_corruption);

	/* the peer goes away: at the latest now the QP must reach ERR */
	ck_assert_int_eq(tu_send_u32(ctl, H_EXIT), 0);
	tu_wait_child(pid, TU_WAIT_MS);
	close(ctl);
	ck_assert(tu_wait_qp_state(hp.qp, FERRY_QPS_ERR, TU_WAIT_MS));
	deadline = tu_now_ms() + TU_WAIT_MS;
	while (hp.next_send_wc < hp.next_send_id) {
		ck_assert_msg(tu_now_ms() < deadline, "sends never completed");
		hostile_drain(&hp, true);
	}
	hostile_drain(&hp, true);
	for (int i = 0; i < H_RECVS; i++)
		if (!hp.recv_done[i]) {
			/* every receive is accounted for: completed or flushed */
			deadline = tu_now_ms() + TU_WAIT_MS;
			while (!hp.recv_done[i] && tu_now_ms() < deadline)
				hostile_drain(&hp, true);
			ck_assert_msg(hp.recv_done[i], "receive %d never completed", i);
		}
	/* and new work only flushes */
	ck_assert_int_eq(tu_post_send1(hp.qp, hp.next_send_id++, FERRY_WR_SEND, 0,
				       hp.buf, 16, hp.mr->lkey, 0, 0), 0);
	deadline = tu_now_ms() + TU_WAIT_MS;
	while (hp.next_send_wc < hp.next_send_id) {
		ck_assert_msg(tu_now_ms() < deadline, "flush never came");
		hostile_drain(&hp, true);
	}
	ck_assert(hp.send_error_seen);
	hostile_check_canaries(&hp);

	/* the healthy connection never noticed */
	for (int i = 0; i < 50; i++)
		hostile_echo(&g, echo_seed++);
	ck_assert_int_eq(tu_qp_state(g.qp), FERRY_QPS_RTS);
	ck_assert_int_eq(tu_post_send1(g.qp, 9, FERRY_WR_SEND, 0, g.buf, 0,
				       g.mr->lkey, 0, 0), 0);
	ck_assert_int_eq(tu_wait_child(gpid, TU_WAIT_MS), 0);
	close(gctl);
	tu_end_close(&g);
	hostile_parent_close(&hp);
}
END_TEST

START_TEST(test_hostile_region_hook)
{
	struct tu_end a, b;
	void *addr = NULL;
	size_t len = 0;

	/* the hook exists only once the QP is connected */
	tu_end_open(&a, NULL);
	tu_end_open(&b, NULL);
	errno = 0;
	ck_assert_int_eq(shm_qp_test_region(a.qp, &addr, &len), -1);
	ck_assert_int_eq(errno, ENOTCONN);
	tu_pair_connect(&a, &b, TU_QP_ACCESS_ALL);
	ck_assert_int_eq(shm_qp_test_region(a.qp, &addr, &len), 0);
	ck_assert_ptr_nonnull(addr);
	ck_assert_uint_ge(len, to_sqp(a.qp)->region_head_off + shm_region_head_size());
	ck_assert_ptr_eq((uint8_t *)addr + to_sqp(a.qp)->region_head_off, to_sqp(a.qp)->region);
	ck_assert_uint_eq(to_sqp(a.qp)->region->magic, SHM_MAGIC);
	ck_assert_uint_eq(to_sqp(a.qp)->region->qp_num, a.qp->qp_num);
	tu_pair_close(&a, &b);
}
END_TEST

Suite *hostile_suite(void)
{
	Suite *s = suite_create("hostile");
	TCase *tc = tcase_create("corrupt_region");

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_hostile_region_hook);
	tcase_add_loop_test(tc, test_hostile_peer, 0, HOSTILE_NMODES);
	suite_add_tcase(s, tc);
	return s;
}
