/*
 * check_hostile_window.c - attacks on the memory a peer may map of ours,
 * and on SENDs between users, each played as the attacker would (issue
 * 13, "Security and isolation" in ferry(7)); the rest of the attacks on
 * memory are check_hostile_mem.c's, in the same suite (hostile_mem):
 *
 *   - everything of ours a peer has mapped, written over, and what it
 *     cannot map writable tried with mprotect: only the pages of the MRs
 *     it may write change, and none once the MR is deregistered, or once
 *     the last queue pair of its protection domain is gone;
 *   - SENDs between users, staged by the sender and copied in by the
 *     receiver, and a sender that stages lies.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <check.h>

#include "check_suites.h"
#include "hmtest.h"
#include "testutil.h"
#include "shm-internal.h"

/* --- what a peer may map of our memory --- */

/* Where the attacker writes: everything of ours it can map writable. */
#define HM_W_OURS 0x11		/* bytes the peer must never change */
#define HM_W_RO 0x22		/* a region it may only read */
#define HM_W_FIRST 0xee		/* what it writes while the MR lives */
#define HM_W_AFTER 0x77		/* what it writes after the MR is gone */
#define HM_W_FRESH 0x33		/* ours, after the dereg */

/* Every writable mapping of another process's ferry_alloc memory here,
 * after trying to make the read-only ones writable; *upgraded counts
 * those the kernel let us. */
static int hm_foreign_mappings(uint8_t **start, size_t *len, int max, int *upgraded)
{
	char line[512], path[256], perms[8];
	unsigned long s, e, off, ino;
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f) && n < max) {
		path[0] = '\0';
		if (sscanf(line, "%lx-%lx %7s %lx %*s %lu %255s", &s, &e, perms, &off, &ino,
			   path) < 6 || !strstr(path, "memfd:ferry-alloc") ||
		    ferry_block_is_own_inode(ino))
			continue;
		if (perms[1] != 'w') {
			if (mprotect((void *)s, e - s, PROT_READ | PROT_WRITE) != 0)
				continue;
			(*upgraded)++;
		}
		start[n] = (uint8_t *)s;
		len[n++] = e - s;
	}
	fclose(f);
	return n;
}

/* The attacker: connects, writes HM_W_FIRST over all it can map of ours,
 * reports, and on the word to go on writes HM_W_AFTER over the same. */
static int hm_window_child(int sock, int ctl, void *arg)
{
	const struct hm_plain_arg *pa = arg;
	uint8_t *start[64];
	size_t len[64];
	struct tu_remote peer;
	struct tu_end e;
	int n, upgraded = 0;
	uint32_t go;

	if (pa->uid)
		TU_CHILD_CHECK(setresgid(pa->uid, pa->uid, pa->uid) == 0 &&
			       setresuid(pa->uid, pa->uid, pa->uid) == 0);
	tu_child_connect(&e, &(struct tu_opts){ 0 }, sock, &peer);
	n = hm_foreign_mappings(start, len, 64, &upgraded);
	TU_CHILD_CHECK(n > 0);
	for (int i = 0; i < n; i++)
		memset(start[i], HM_W_FIRST, len[i]);
	TU_CHILD_CHECK(tu_send_u32(ctl, (uint32_t)upgraded) == 0);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &go, TU_WAIT_MS) == 0);
	for (int i = 0; i < n; i++)
		memset(start[i], HM_W_AFTER, len[i]);
	TU_CHILD_CHECK(tu_send_u32(ctl, 1) == 0);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &go, TU_WAIT_MS) == 0);
	_exit(0);
}

/* The MRs the attacker's peer holds: one that spans two of four pages of
 * a block, read-write, and a read-only one over a whole block. */
struct hm_window_mem {
	uint8_t *block, *ro;
	struct ferry_mr *mr, *ro_mr;
};

static void hm_window_setup(struct tu_end *e, void *arg)
{
	struct hm_window_mem *w = arg;

	w->block = ferry_alloc(4 * HM_PAGE);
	w->ro = ferry_alloc(2 * HM_PAGE);
	ck_assert_ptr_nonnull(w->block);
	ck_assert_ptr_nonnull(w->ro);
	memset(w->block, HM_W_OURS, 4 * HM_PAGE);
	memset(w->ro, HM_W_RO, 2 * HM_PAGE);
	/* [page 1 + 100, page 2 + 200): pages 1 and 2 are what it spans. */
	w->mr = ferry_reg_mr(e->pd, w->block + HM_PAGE + 100, HM_PAGE + 100,
			     FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE |
			     FERRY_ACCESS_REMOTE_READ);
	w->ro_mr = ferry_reg_mr(e->pd, w->ro, 2 * HM_PAGE, FERRY_ACCESS_REMOTE_READ);
	ck_assert_ptr_nonnull(w->mr);
	ck_assert_ptr_nonnull(w->ro_mr);
}

START_TEST(test_windows)
{
	struct hm_plain_arg arg = { geteuid() == 0 ? 65534 : 0 };
	struct hm_window_mem w;
	uint32_t upgraded, done;
	struct tu_end e;
	pid_t pid;
	int ctl;

	if (!tu_on_shm())
		HM_SKIP("test_windows", "shared mappings are the shm transport's");
	pid = hm_connect(hm_window_child, &arg, &e, &ctl, hm_window_setup, &w);
	ck_assert_int_eq(tu_recv_u32(ctl, &upgraded, TU_WAIT_MS), 0);
	ck_assert_msg(upgraded == 0, "the peer made %u read-only mappings of ours writable",
		      upgraded);
	ck_assert_msg(tu_all_bytes(w.block, HM_PAGE, HM_W_OURS) &&
		      tu_all_bytes(w.block + 3 * HM_PAGE, HM_PAGE, HM_W_OURS),
		      "the peer wrote into pages of a block that no MR of it spans");
	ck_assert_msg(tu_all_bytes(w.ro, 2 * HM_PAGE, HM_W_RO),
		      "the peer wrote into an MR registered for remote reads only");
	ck_assert_msg(tu_all_bytes(w.block + HM_PAGE + 100, HM_PAGE + 100, HM_W_FIRST),
		      "the peer could not write the MR it was given");

	/* Deregistered: the pages are ours alone again, whatever it writes. */
	ck_assert_int_eq(ferry_dereg_mr(w.mr), 0);
	ck_assert_msg(tu_all_bytes(w.block + HM_PAGE + 100, HM_PAGE + 100, HM_W_FIRST),
		      "taking the window back lost what it held");
	memset(w.block + HM_PAGE, HM_W_FRESH, 2 * HM_PAGE);
	ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
	ck_assert_int_eq(tu_recv_u32(ctl, &done, TU_WAIT_MS), 0);
	ck_assert_msg(tu_all_bytes(w.block + HM_PAGE, 2 * HM_PAGE, HM_W_FRESH),
		      "the peer still writes an MR after ferry_dereg_mr");
	ck_assert_msg(tu_all_bytes(w.block, HM_PAGE, HM_W_OURS) &&
		      tu_all_bytes(w.block + 3 * HM_PAGE, HM_PAGE, HM_W_OURS),
		      "the rest of the block changed");
	ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_dereg_mr(w.ro_mr), 0);
	ferry_free(w.block);
	ferry_free(w.ro);
	close(ctl);
	tu_end_close(&e);
}
END_TEST

/* The same peer, and a connection that ends while its MR stays. */
START_TEST(test_windows_after_disconnect)
{
	struct hm_plain_arg arg = { geteuid() == 0 ? 65534 : 0 };
	struct hm_window_mem w;
	uint32_t upgraded, done;
	struct tu_end e;
	pid_t pid;
	int ctl;

	if (!tu_on_shm())
		HM_SKIP("test_windows_after_disconnect", "shared mappings are the shm transport's");
	pid = hm_connect(hm_window_child, &arg, &e, &ctl, hm_window_setup, &w);
	ck_assert_int_eq(tu_recv_u32(ctl, &upgraded, TU_WAIT_MS), 0);
	ck_assert_msg(tu_all_bytes(w.block + HM_PAGE + 100, HM_PAGE + 100, HM_W_FIRST),
		      "the peer could not write the MR it was given");

	/* The PD's one QP goes: its peer loses what it mapped, the MRs stay. */
	ck_assert_int_eq(ferry_destroy_qp(e.qp), 0);
	e.qp = NULL;
	ck_assert_msg(tu_all_bytes(w.block + HM_PAGE + 100, HM_PAGE + 100, HM_W_FIRST),
		      "taking the window back lost what it held");
	memset(w.block + HM_PAGE, HM_W_FRESH, 2 * HM_PAGE);
	memset(e.buf, HM_W_FRESH, e.len);
	ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
	ck_assert_int_eq(tu_recv_u32(ctl, &done, TU_WAIT_MS), 0);
	ck_assert_msg(tu_all_bytes(w.block + HM_PAGE, 2 * HM_PAGE, HM_W_FRESH) &&
		      tu_all_bytes(e.buf, e.len, HM_W_FRESH),
		      "a peer whose connection ended still writes our MRs");
	ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_dereg_mr(w.mr), 0);
	ck_assert_int_eq(ferry_dereg_mr(w.ro_mr), 0);
	ferry_free(w.block);
	ferry_free(w.ro);
	close(ctl);
	tu_end_close(&e);
}
END_TEST

/* --- SENDs between users: staged by the sender, copied in by the receiver --- */

#define HB_BIG (1024 * 1024 + 123)	/* more than a staging ring holds */
#define HB_MINE 4000			/* what the peer SENDs us */

/* The peer of another user: receives in memory registered for local
 * writes only, a ferry_alloc block and plain memory; one SEND to us. */
static int hb_child(int sock, int ctl, void *arg)
{
	const struct hm_plain_arg *pa = arg;
	static uint8_t joined[400];
	struct ferry_mr *rmr, *pmr;
	struct ferry_sge sg[2];
	struct ferry_recv_wr rwr = { .wr_id = 3, .sg_list = sg, .num_sge = 2 }, *bad;
	struct tu_remote peer;
	struct ferry_wc wc[3];
	struct tu_end e;
	uint8_t *rb, *pm;
	uint32_t ino, ok = 1;
	char maps[256];
	FILE *f;

	TU_CHILD_CHECK(setresgid(pa->uid, pa->uid, pa->uid) == 0 &&
		       setresuid(pa->uid, pa->uid, pa->uid) == 0);
	rb = ferry_alloc(2 * 1024 * 1024);
	pm = malloc(4096);
	TU_CHILD_CHECK(rb && pm);
	tu_child_connect(&e, &(struct tu_opts){ .split_cq = true }, sock, &peer);
	rmr = ferry_reg_mr(e.pd, rb, 2 * 1024 * 1024, FERRY_ACCESS_LOCAL_WRITE);
	pmr = ferry_reg_mr(e.pd, pm, 4096, FERRY_ACCESS_LOCAL_WRITE);
	TU_CHILD_CHECK(rmr && pmr);
	TU_CHILD_CHECK(tu_post_recv1(e.qp, 1, pm, 100, pmr->lkey) == 0);
	TU_CHILD_CHECK(tu_post_recv1(e.qp, 2, rb, HB_BIG, rmr->lkey) == 0);
	sg[0] = (struct ferry_sge){ (uintptr_t)rb + 1536 * 1024, 100, rmr->lkey };
	sg[1] = (struct ferry_sge){ (uintptr_t)pm + 1024, 300, pmr->lkey };
	TU_CHILD_CHECK(ferry_post_recv(e.qp, &rwr, &bad) == 0);

	/* The peer's receive block must not be mapped here. */
	TU_CHILD_CHECK(tu_recv_u32(ctl, &ino, TU_WAIT_MS) == 0);
	f = fopen("/proc/self/maps", "r");
	TU_CHILD_CHECK(f != NULL);
	while (fgets(maps, sizeof(maps), f)) {
		unsigned long i = 0;

		if (sscanf(maps, "%*s %*s %*s %*s %lu", &i) == 1 && i == ino)
			ok = 0;
	}
	fclose(f);
	TU_CHILD_CHECK(tu_send_u32(ctl, ok) == 0);

	tu_fill(e.buf, HB_MINE, 5);
	TU_CHILD_CHECK(tu_post_send1(e.qp, 9, FERRY_WR_SEND, 0, e.buf, HB_MINE, e.mr->lkey,
				     0, 0) == 0);
	TU_CHILD_CHECK(tu_child_poll(e.recv_cq, wc, 3, 10000) == 3);
	for (int i = 0; i < 3; i++)
		ok &= wc[i].status == FERRY_WC_SUCCESS;
	memcpy(joined, rb + 1536 * 1024, 100);
	memcpy(joined + 100, pm + 1024, 300);
	ok &= wc[0].byte_len == 100 && tu_check(pm, 100, 1);
	ok &= wc[1].byte_len == HB_BIG && tu_check(rb, HB_BIG, 2);
	ok &= wc[2].byte_len == 400 && tu_check(joined, 400, 3);
	TU_CHILD_CHECK(tu_send_u32(ctl, ok) == 0);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &ino, TU_WAIT_MS) == 0);
	TU_CHILD_CHECK(ferry_dereg_mr(rmr) == 0 && ferry_dereg_mr(pmr) == 0);
	ferry_free(rb);
	free(pm);
	_exit(0);
}

struct hb_mem {
	uint8_t *sbuf, *rbuf;
	struct ferry_mr *smr, *rmr;
};

static void hb_setup(struct tu_end *e, void *arg)
{
	struct hb_mem *m = arg;

	m->sbuf = ferry_alloc(2 * 1024 * 1024);
	m->rbuf = ferry_alloc(3 * HM_PAGE);
	ck_assert(m->sbuf && m->rbuf);
	memset(m->rbuf, HM_W_OURS, 3 * HM_PAGE);
	m->smr = ferry_reg_mr(e->pd, m->sbuf, 2 * 1024 * 1024, FERRY_ACCESS_LOCAL_WRITE);
	m->rmr = ferry_reg_mr(e->pd, m->rbuf, 3 * HM_PAGE, FERRY_ACCESS_LOCAL_WRITE);
	ck_assert(m->smr && m->rmr);
}

START_TEST(test_bounce_other_user)
{
	struct hm_plain_arg arg = { 65534 };
	struct ferry_block blk;
	struct ferry_wc wc[4];
	struct hb_mem m;
	struct tu_end e;
	uint32_t ok;
	pid_t pid;
	int ctl;

	if (!tu_on_shm())
		HM_SKIP("test_bounce_other_user", "staged SENDs are the shm transport's");
	if (geteuid() != 0)
		HM_SKIP("test_bounce_other_user", "needs root to run a peer as nobody");
	pid = hm_connect(hb_child, &arg, &e, &ctl, hb_setup, &m);
	ck_assert_int_eq(tu_post_recv1(e.qp, 7, m.rbuf + 100, 5000, m.rmr->lkey), 0);
	ck_assert(ferry_block_find(m.rbuf, 1, &blk));
	ck_assert_int_eq(tu_send_u32(ctl, (uint32_t)blk.ino), 0);
	ck_assert_int_eq(tu_recv_u32(ctl, &ok, TU_WAIT_MS), 0);
	ck_assert_msg(ok, "a peer of another user mapped memory of ours registered for local "
		      "writes only");

	tu_fill(m.sbuf, 100, 1);
	tu_fill(m.sbuf + 4096, HB_BIG, 2);
	tu_fill(m.sbuf + 4096 + HB_BIG + 16, 400, 3);
	ck_assert_int_eq(tu_post_send1(e.qp, 1, FERRY_WR_SEND, 0, m.sbuf, 100, m.smr->lkey,
				       0, 0), 0);
	ck_assert_int_eq(tu_post_send1(e.qp, 2, FERRY_WR_SEND, 0, m.sbuf + 4096, HB_BIG,
				       m.smr->lkey, 0, 0), 0);
	ck_assert_int_eq(tu_post_send1(e.qp, 3, FERRY_WR_SEND, 0, m.sbuf + 4096 + HB_BIG + 16,
				       400, m.smr->lkey, 0, 0), 0);
	/* Our three SENDs, and the peer's one to us (one CQ). */
	ck_assert_int_eq(tu_poll(e.send_cq, wc, 4, 20000), 4);
	for (int i = 0; i < 4; i++) {
		ck_assert_msg(wc[i].status == FERRY_WC_SUCCESS, "WR %llu: %s",
			      (unsigned long long)wc[i].wr_id, ferry_wc_status_str(wc[i].status));
		if (wc[i].wr_id == 7)
			ck_assert_int_eq(wc[i].byte_len, HB_MINE);
	}
	ck_assert_int_eq(tu_recv_u32(ctl, &ok, 20000), 0);
	ck_assert_msg(ok, "the peer's receives did not get what was sent, whole");
	ck_assert(tu_check(m.rbuf + 100, HB_MINE, 5));
	ck_assert(tu_all_bytes(m.rbuf, 100, HM_W_OURS));
	ck_assert(tu_all_bytes(m.rbuf + 100 + HB_MINE, 3 * HM_PAGE - 100 - HB_MINE, HM_W_OURS));
	ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_dereg_mr(m.smr), 0);
	ck_assert_int_eq(ferry_dereg_mr(m.rmr), 0);
	ferry_free(m.sbuf);
	ferry_free(m.rbuf);
	close(ctl);
	tu_end_close(&e);
}
END_TEST

/* A sender of another user that stages what no honest one would. */
struct hb_bad_arg {
	uid_t uid;
	int how;		/* which lie (hb_bad_child) */
};

static int hb_bad_child(int sock, int ctl, void *arg)
{
	const struct hb_bad_arg *ba = arg;
	struct shm_bounce_rec h = { .recv = 0, .off = 0, .len = 64 };
	struct tu_remote peer;
	struct shm_qp *q;
	uint64_t prod = sizeof(h) + 64;
	struct tu_end e;
	uint32_t go;

	TU_CHILD_CHECK(setresgid(ba->uid, ba->uid, ba->uid) == 0 &&
		       setresuid(ba->uid, ba->uid, ba->uid) == 0);
	tu_child_connect(&e, &(struct tu_opts){ 0 }, sock, &peer);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &go, TU_WAIT_MS) == 0);	/* its receive is posted */
	q = to_sqp(e.qp);
	TU_CHILD_CHECK(q->bounce && q->bounce_ring);
	switch (ba->how) {
	case 0:
		h.recv = 1000;			/* a receive it never posted */
		break;
	case 1:
		h.len = SHM_BOUNCE_SIZE;	/* past the ring's end */
		prod = SHM_BOUNCE_SIZE;
		break;
	case 2:
		prod = 4 * (uint64_t)SHM_BOUNCE_SIZE;	/* more than the ring holds */
		break;
	default:
		h.off = 8;			/* bytes it skipped */
		break;
	}
	memset(q->bounce_ring, 0x5c, SHM_BOUNCE_SIZE);
	memcpy(q->bounce_ring, &h, sizeof(h));
	atomic_store(&q->region->bounce_prod, prod);
	TU_CHILD_CHECK(tu_send_u32(ctl, 1) == 0);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &go, TU_WAIT_MS) == 0);
	_exit(0);
}

START_TEST(test_bounce_hostile_sender)
{
	if (!tu_on_shm())
		HM_SKIP("test_bounce_hostile_sender", "staged SENDs are the shm transport's");
	if (geteuid() != 0)
		HM_SKIP("test_bounce_hostile_sender", "needs root to run a peer as nobody");
	for (int how = 0; how < 4; how++) {
		struct hb_bad_arg arg = { 65534, how };
		struct ferry_wc wc;
		struct hb_mem m;
		struct tu_end e;
		uint32_t done;
		pid_t pid;
		int ctl, n;

		pid = hm_connect(hb_bad_child, &arg, &e, &ctl, hb_setup, &m);
		ck_assert_int_eq(tu_post_recv1(e.qp, 7, m.rbuf + 100, 5000, m.rmr->lkey), 0);
		ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
		ck_assert_int_eq(tu_recv_u32(ctl, &done, TU_WAIT_MS), 0);
		/* Its lie takes the QP down: the receive is flushed, not filled. */
		n = tu_poll(e.recv_cq, &wc, 1, 5000);
		ck_assert_msg(n == 1 && wc.status == FERRY_WC_WR_FLUSH_ERR,
			      "lie %d: got %d completions, status %s", how, n,
			      n ? ferry_wc_status_str(wc.status) : "-");
		ck_assert_int_eq(tu_qp_state(e.qp), FERRY_QPS_ERR);
		ck_assert_msg(tu_all_bytes(m.rbuf, 3 * HM_PAGE, HM_W_OURS),
			      "lie %d: a malformed record was copied in", how);
		ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
		ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
		ck_assert_int_eq(ferry_dereg_mr(m.smr), 0);
		ck_assert_int_eq(ferry_dereg_mr(m.rmr), 0);
		ferry_free(m.sbuf);
		ferry_free(m.rbuf);
		close(ctl);
		tu_end_close(&e);
	}
}
END_TEST

Suite *hostile_window_suite(void)
{
	Suite *s = suite_create("hostile_mem");
	TCase *tc = tcase_create("hostile_mem");

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_windows);
	tcase_add_test(tc, test_windows_after_disconnect);
	tcase_add_test(tc, test_bounce_other_user);
	tcase_add_test(tc, test_bounce_hostile_sender);
	suite_add_tcase(s, tc);
	return s;
}
