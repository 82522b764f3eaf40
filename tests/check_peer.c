/*
 * check_peer.c - the life of the peer process: killed with SIGKILL in the
 * middle of a transfer (the survivor's WRs complete with errors, its blocked
 * ferry_get_cq_event wakes, its QP goes to ERR, nothing hangs); a fork()
 * that leaves a connected parent working; many QPs sharing one CQ.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <check.h>

#include "check_suites.h"
#include "shm-internal.h"
#include "testutil.h"

/* --- a peer that dies --- */

enum peer_mode {
	PEER_IDLE,	/* connects, then waits to be killed */
	PEER_WRITER,	/* keeps RDMA-writing into the parent */
};

struct peer_arg {
	enum peer_mode mode;
};

static int peer_child(int sock, int ctl, void *arg)
{
	const struct peer_arg *pa = arg;
	struct tu_opts o = { .max_send_wr = 256, .cqe = 1024 };
	struct tu_remote peer;
	struct tu_end e;
	struct ferry_wc wc[16];

	tu_child_connect(&e, &o, sock, &peer);
	TU_CHILD_CHECK(tu_send_u32(ctl, 1) == 0);	/* ready */
	if (pa->mode == PEER_WRITER) {
		tu_fill(e.buf, 4096, 50);
		for (;;) {
			for (int i = 0; i < 16; i++)
				TU_CHILD_CHECK(tu_post_send1(e.qp, (uint64_t)i,
							     FERRY_WR_RDMA_WRITE, 0,
							     e.buf, 4096, e.mr->lkey,
							     peer.addr + 4096 * (uint64_t)i,
							     peer.rkey) == 0);
			TU_CHILD_CHECK(tu_child_poll(e.send_cq, wc, 16,
						     TU_WAIT_MS) == 16);
		}
	}
	for (;;)
		pause();
	return 0;
}

struct peer_conn {
	struct tu_end end;
	struct tu_remote peer;
	pid_t pid;
	int ctl;
};

static void peer_connect(struct peer_conn *c, enum peer_mode mode, bool channel)
{
	struct tu_opts o = { .channel = channel, .max_send_wr = 256, .cqe = 1024 };
	static struct peer_arg arg;
	struct tu_remote mine;
	uint32_t ready;
	int sock;

	arg.mode = mode;
	c->pid = tu_fork(peer_child, &arg, &sock, &c->ctl);
	tu_end_open(&c->end, &o);
	mine = (struct tu_remote){ (uintptr_t)c->end.buf, c->end.len,
				   c->end.mr->rkey, c->end.qp->qp_num, 0, 0, 0, 0 };
	ck_assert_int_eq(tu_msg_send(sock, &mine, sizeof(mine)), 0);
	ck_assert_int_eq(tu_msg_recv(sock, &c->peer, sizeof(c->peer), TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_qp_connect_sock(c->end.qp, sock, TU_QP_ACCESS_ALL), 0);
	close(sock);
	ck_assert_int_eq(tu_recv_u32(c->ctl, &ready, TU_WAIT_MS), 0);
}

static void peer_kill(struct peer_conn *c)
{
	int status;

	ck_assert_int_eq(kill(c->pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(c->pid, &status, 0), c->pid);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	c->pid = 0;
}

static void peer_close(struct peer_conn *c)
{
	if (c->pid > 0)
		peer_kill(c);
	close(c->ctl);
	tu_end_close(&c->end);
}

/* Collect completions until @n arrived; every one must be an error. */
static void peer_expect_errors(struct ferry_cq *cq, int n)
{
	struct ferry_wc wc;

	for (int i = 0; i < n; i++) {
		tu_poll1(cq, &wc);
		ck_assert_msg(wc.status != FERRY_WC_SUCCESS,
			      "wr %llu succeeded after the peer died",
			      (unsigned long long)wc.wr_id);
	}
}

START_TEST(test_killed_idle_peer)
{
	struct peer_conn c;
	struct tu_end *e = &c.end;

	peer_connect(&c, PEER_IDLE, false);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(tu_post_recv1(e->qp, 10 + i, e->buf, 64,
					       e->mr->lkey), 0);
	/* outstanding: the child never posts a receive, rnr_retry is 7 */
	ck_assert_int_eq(tu_post_send1(e->qp, 1, FERRY_WR_SEND, 0, e->buf, 64,
				       e->mr->lkey, 0, 0), 0);
	peer_kill(&c);
	/* the send and the four receives all end in error */
	peer_expect_errors(e->send_cq, 5);
	ck_assert(tu_wait_qp_state(e->qp, FERRY_QPS_ERR, TU_WAIT_MS));
	ck_assert_int_eq(e->qp->state, FERRY_QPS_ERR);
	/* the next WRs fail too, without hanging */
	ck_assert_int_eq(tu_post_send1(e->qp, 2, FERRY_WR_RDMA_WRITE, 0, e->buf, 64,
				       e->mr->lkey, c.peer.addr, c.peer.rkey), 0);
	ck_assert_int_eq(tu_post_send1(e->qp, 3, FERRY_WR_RDMA_READ, 0, e->buf, 64,
				       e->mr->lkey, c.peer.addr, c.peer.rkey), 0);
	peer_expect_errors(e->send_cq, 2);
	tu_assert_cq_empty(e->send_cq);
	peer_close(&c);
}
END_TEST

/*
 * shm: a connection whose socket moved to other numbers (a stream socket's
 * descriptor becomes its connection: shm_conn_move) is still watched: the
 * monitor's item stays under the first number, where epoll still watches
 * the file, and the peer's death moves the QP to ERR all the same.
 */
START_TEST(test_killed_peer_after_move)
{
	struct peer_conn c;
	struct tu_end *e = &c.end;
	struct shm_qp *qp;
	int first, moved;

	if (!tu_on_shm()) {
		printf("SKIP test_killed_peer_after_move on %s: shm's monitor\n", tu_transport());
		return;
	}
	peer_connect(&c, PEER_IDLE, false);
	qp = to_sqp(e->qp);
	first = qp->conn->sock;
	ferry_lock(&qp->sq_lock);
	moved = shm_conn_move(qp, -1, true);
	ferry_unlock(&qp->sq_lock);
	ck_assert_int_ge(moved, 0);
	ck_assert_int_ne(moved, first);
	ck_assert_int_eq(qp->conn->sock, moved);
	peer_kill(&c);
	ck_assert(tu_wait_qp_state(e->qp, FERRY_QPS_ERR, TU_WAIT_MS));
	peer_close(&c);
}
END_TEST

START_TEST(test_killed_writer_peer)
{
	struct peer_conn c;
	struct tu_end *e = &c.end;
	struct ferry_wc wc[16];
	uint64_t deadline;
	bool failed = false;
	int rounds = 0;

	/* both directions busy when the child dies */
	peer_connect(&c, PEER_WRITER, false);
	tu_fill(e->buf + 65536 - 4096, 4096, 51);
	deadline = tu_now_ms() + TU_WAIT_MS;
	while (!failed) {
		int n;

		ck_assert_msg(tu_now_ms() < deadline,
			      "no error within %d ms of the peer's death", TU_WAIT_MS);
		if (rounds++ == 50)
			peer_kill(&c);
		for (int i = 0; i < 16; i++)
			ck_assert_int_eq(tu_post_send1(e->qp, (uint64_t)i,
						       FERRY_WR_RDMA_WRITE, 0,
						       e->buf + 65536 - 4096, 4096,
						       e->mr->lkey,
						       c.peer.addr + 4096 * (uint64_t)i,
						       c.peer.rkey), 0);
		n = tu_poll(e->send_cq, wc, 16, TU_WAIT_MS);
		ck_assert_int_eq(n, 16);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != FERRY_WC_SUCCESS) {
				ck_assert_msg(rounds > 50, "error before the kill: %s",
					      ferry_wc_status_str(wc[i].status));
				failed = true;
			} else {
				ck_assert_msg(!failed, "success after an error");
			}
		}
	}
	ck_assert(tu_wait_qp_state(e->qp, FERRY_QPS_ERR, TU_WAIT_MS));
	peer_close(&c);
}
END_TEST

struct peer_killer {
	pid_t pid;
	unsigned int delay_ms;
};

static void *peer_killer_thread(void *arg)
{
	struct peer_killer *k = arg;

	tu_sleep_ms(k->delay_ms);
	kill(k->pid, SIGKILL);
	return NULL;
}

START_TEST(test_killed_peer_wakes_blocked_waiter)
{
	struct peer_conn c;
	struct tu_end *e = &c.end;
	struct peer_killer k;
	struct ferry_cq *cq = NULL;
	void *ctx = NULL;
	struct ferry_wc wc;
	pthread_t thread;
	int status;

	peer_connect(&c, PEER_IDLE, true);
	ck_assert_int_eq(tu_post_recv1(e->qp, 1, e->buf, 64, e->mr->lkey), 0);
	ck_assert_int_eq(ferry_req_notify_cq(e->recv_cq, 0), 0);
	ck_assert_int_eq(ferry_poll_cq(e->recv_cq, 1, &wc), 0);
	k.pid = c.pid;
	k.delay_ms = 100;
	ck_assert_int_eq(pthread_create(&thread, NULL, peer_killer_thread, &k), 0);
	/* blocks until the death is noticed; a hang fails the test */
	alarm(20);
	ck_assert_int_eq(ferry_get_cq_event(e->channel, &cq, &ctx), 0);
	alarm(0);
	pthread_join(thread, NULL);
	ck_assert_ptr_eq(cq, e->recv_cq);
	ferry_ack_cq_events(cq, 1);
	tu_poll1(e->recv_cq, &wc);
	ck_assert_uint_eq(wc.wr_id, 1);
	ck_assert_int_eq(wc.status, FERRY_WC_WR_FLUSH_ERR);
	ck_assert(tu_wait_qp_state(e->qp, FERRY_QPS_ERR, TU_WAIT_MS));
	ck_assert_int_eq(waitpid(c.pid, &status, 0), c.pid);
	c.pid = 0;
	peer_close(&c);
}
END_TEST

START_TEST(test_killed_peer_then_arm)
{
	struct peer_conn c;
	struct tu_end *e = &c.end;
	struct pollfd pfd;
	struct ferry_wc wc;

	/* the peer dies before anyone waits: arming afterwards still works */
	peer_connect(&c, PEER_IDLE, true);
	ck_assert_int_eq(tu_post_recv1(e->qp, 1, e->buf, 64, e->mr->lkey), 0);
	peer_kill(&c);
	ck_assert_int_eq(ferry_req_notify_cq(e->recv_cq, 0), 0);
	if (ferry_poll_cq(e->recv_cq, 1, &wc) == 0) {
		pfd.fd = e->channel->fd;
		pfd.events = POLLIN;
		ck_assert_int_eq(poll(&pfd, 1, TU_WAIT_MS), 1);
		tu_poll1(e->recv_cq, &wc);
	}
	ck_assert_uint_eq(wc.wr_id, 1);
	ck_assert_int_eq(wc.status, FERRY_WC_WR_FLUSH_ERR);
	ck_assert(tu_wait_qp_state(e->qp, FERRY_QPS_ERR, TU_WAIT_MS));
	peer_close(&c);
}
END_TEST

/* --- fork --- */

static void peer_transfer_check(struct tu_end *a, struct tu_end *b,
				unsigned int seed)
{
	struct ferry_wc wc;
	uint64_t *counter = (uint64_t *)(b->buf + 60000);

	tu_fill(a->buf, 1000, seed);
	ck_assert_int_eq(tu_post_send1(a->qp, 1, FERRY_WR_RDMA_WRITE, 0, a->buf,
				       1000, a->mr->lkey, (uintptr_t)b->buf,
				       b->mr->rkey), 0);
	tu_poll1(a->send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert(tu_check(b->buf, 1000, seed));

	ck_assert_int_eq(tu_post_recv1(b->qp, 2, b->buf + 2000, 1000, b->mr->lkey), 0);
	ck_assert_int_eq(tu_post_send1(a->qp, 3, FERRY_WR_SEND, 0, a->buf, 1000,
				       a->mr->lkey, 0, 0), 0);
	tu_poll1(a->send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	tu_poll1(b->recv_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert(tu_check(b->buf + 2000, 1000, seed));

	*counter = 40;
	ck_assert_int_eq(tu_post_atomic(a->qp, 4, FERRY_WR_ATOMIC_FETCH_AND_ADD,
					a->buf + 8000, a->mr->lkey,
					(uintptr_t)counter, b->mr->rkey, 2, 0), 0);
	tu_poll1(a->send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(*counter, 42);
	ck_assert_uint_eq(*(uint64_t *)(a->buf + 8000), 40);

	ck_assert_int_eq(tu_post_send1(a->qp, 5, FERRY_WR_RDMA_READ, 0,
				       a->buf + 10000, 1000, a->mr->lkey,
				       (uintptr_t)b->buf + 2000, b->mr->rkey), 0);
	tu_poll1(a->send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert(tu_check(a->buf + 10000, 1000, seed));
}

START_TEST(test_fork_child_exits)
{
	struct tu_end a, b;
	pid_t pid;
	int status;

	tu_pair_open(&a, &b, NULL);
	peer_transfer_check(&a, &b, 60);

	/* a child that inherits everything, touches the library, and exits */
	pid = tu_fork_quiet();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		struct ferry_context *ctx = ferry_open_transport("shm");

		if (ctx)
			ferry_close_device(ctx);
		exit(0);	/* with atexit handlers and destructors */
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_RTS);
	ck_assert_int_eq(tu_qp_state(b.qp), FERRY_QPS_RTS);
	peer_transfer_check(&a, &b, 61);
	peer_transfer_check(&b, &a, 62);

	/* and one that is killed */
	pid = tu_fork_quiet();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		for (;;)
			pause();
	}
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	tu_sleep_ms(20);
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_RTS);
	peer_transfer_check(&a, &b, 63);
	tu_pair_close(&a, &b);
}
END_TEST

static int peer_echo_child(int sock, int ctl, void *arg)
{
	struct tu_end e;
	struct tu_remote peer;
	struct ferry_wc wc;

	tu_child_connect(&e, NULL, sock, &peer);
	TU_CHILD_CHECK(tu_post_recv1(e.qp, 0, e.buf, 1024, e.mr->lkey) == 0);
	for (;;) {
		TU_CHILD_CHECK(tu_child_poll(e.recv_cq, &wc, 1, 20000) == 1);
		if (wc.status != FERRY_WC_SUCCESS)
			break;	/* the parent is gone or done */
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

/* One echo round trip of @len bytes with a child; checked. */
static void peer_echo(struct tu_end *e, unsigned int seed, uint32_t len)
{
	struct ferry_wc wc;

	ck_assert_int_eq(tu_post_recv1(e->qp, 7, e->buf + 8192, 1024, e->mr->lkey), 0);
	tu_fill(e->buf, len, seed);
	ck_assert_int_eq(tu_post_send1(e->qp, 8, FERRY_WR_SEND, 0, e->buf, len,
				       e->mr->lkey, 0, 0), 0);
	tu_poll1(e->send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	tu_poll1(e->recv_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.byte_len, len);
	ck_assert(tu_check(e->buf + 8192, len, seed));
}

START_TEST(test_fork_with_remote_peer)
{
	struct tu_end p;
	struct tu_remote mine, peer;
	int sock, ctl, status;
	pid_t pid, other;

	/* connected to a child; fork another child that exits at once */
	pid = tu_fork(peer_echo_child, NULL, &sock, &ctl);
	tu_end_open(&p, NULL);
	mine = (struct tu_remote){ (uintptr_t)p.buf, p.len, p.mr->rkey,
				   p.qp->qp_num, 0, 0, 0, 0 };
	ck_assert_int_eq(tu_msg_send(sock, &mine, sizeof(mine)), 0);
	ck_assert_int_eq(tu_msg_recv(sock, &peer, sizeof(peer), TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_qp_connect_sock(p.qp, sock, TU_QP_ACCESS_ALL), 0);
	close(sock);
	peer_echo(&p, 70, 500);

	other = tu_fork_quiet();
	ck_assert_int_ne(other, -1);
	if (other == 0)
		_exit(0);
	ck_assert_int_eq(waitpid(other, &status, 0), other);
	for (unsigned int i = 0; i < 100; i++)
		peer_echo(&p, 71 + i, 1 + i * 10);
	ck_assert_int_eq(tu_qp_state(p.qp), FERRY_QPS_RTS);

	/* a zero-length message tells the child to finish */
	ck_assert_int_eq(tu_post_send1(p.qp, 9, FERRY_WR_SEND, 0, p.buf, 0,
				       p.mr->lkey, 0, 0), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	close(ctl);
	tu_end_close(&p);
}
END_TEST

START_TEST(test_fork_inherited_blocks)
{
	struct tu_end p;
	struct tu_remote mine, peer;
	int sock, ctl;
	pid_t pid;

	/*
	 * Our ferry_alloc memory exists before the fork, so the child
	 * inherits a copy of our allocator's table; that must not stop it
	 * from reaching our memory as its peer.
	 */
	tu_end_open(&p, NULL);
	pid = tu_fork(peer_echo_child, NULL, &sock, &ctl);
	mine = (struct tu_remote){ (uintptr_t)p.buf, p.len, p.mr->rkey,
				   p.qp->qp_num, 0, 0, 0, 0 };
	ck_assert_int_eq(tu_msg_send(sock, &mine, sizeof(mine)), 0);
	ck_assert_int_eq(tu_msg_recv(sock, &peer, sizeof(peer), TU_WAIT_MS), 0);
	ck_assert_int_eq(ferry_qp_connect_sock(p.qp, sock, TU_QP_ACCESS_ALL), 0);
	close(sock);
	for (unsigned int i = 0; i < 10; i++)
		peer_echo(&p, 80 + i, 100 + i);
	ck_assert_int_eq(tu_post_send1(p.qp, 9, FERRY_WR_SEND, 0, p.buf, 0,
				       p.mr->lkey, 0, 0), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	close(ctl);
	tu_end_close(&p);
}
END_TEST

/* --- many QPs on one CQ --- */

enum { MANY_QPS = 64 };

START_TEST(test_many_qps_one_cq)
{
	struct ferry_context *ctx[2];
	struct ferry_pd *pd[2];
	struct ferry_cq *cq[2];
	struct ferry_qp *qp[2][MANY_QPS];
	struct ferry_mr *mr[2];
	char *buf[2];
	struct ferry_wc wc[MANY_QPS];
	bool seen[MANY_QPS] = { false };
	struct ferry_qp_init_attr init;
	struct tu_end ea, eb;
	int got;

	for (int s = 0; s < 2; s++) {
		ctx[s] = ferry_open_transport("shm");
		ck_assert_ptr_nonnull(ctx[s]);
		pd[s] = ferry_alloc_pd(ctx[s]);
		ck_assert_ptr_nonnull(pd[s]);
		cq[s] = ferry_create_cq(ctx[s], 4 * MANY_QPS, NULL, NULL, 0);
		ck_assert_ptr_nonnull(cq[s]);
		buf[s] = ferry_alloc(MANY_QPS * 1024);
		ck_assert_ptr_nonnull(buf[s]);
		memset(buf[s], 0, MANY_QPS * 1024);
		mr[s] = ferry_reg_mr(pd[s], buf[s], MANY_QPS * 1024, TU_ACCESS_ALL);
		ck_assert_ptr_nonnull(mr[s]);
		for (int i = 0; i < MANY_QPS; i++) {
			memset(&init, 0, sizeof(init));
			init.send_cq = cq[s];
			init.recv_cq = cq[s];
			init.qp_type = FERRY_QPT_RC;
			init.sq_sig_all = 1;
			init.cap.max_send_wr = 4;
			init.cap.max_recv_wr = 4;
			init.cap.max_send_sge = 1;
			init.cap.max_recv_sge = 1;
			init.qp_context = (void *)(uintptr_t)i;
			qp[s][i] = ferry_create_qp(pd[s], &init);
			ck_assert_ptr_nonnull(qp[s][i]);
		}
	}
	for (int i = 0; i < MANY_QPS; i++) {
		memset(&ea, 0, sizeof(ea));
		memset(&eb, 0, sizeof(eb));
		ea.qp = qp[0][i];
		eb.qp = qp[1][i];
		tu_pair_connect(&ea, &eb, TU_QP_ACCESS_ALL);
		ck_assert_int_eq(tu_post_recv1(qp[1][i], 1000 + (uint64_t)i,
					       buf[1] + 1024 * i, 1024, mr[1]->lkey), 0);
	}

	/* each QP sends its own pattern and RDMA-writes a marker */
	for (int i = 0; i < MANY_QPS; i++) {
		tu_fill(buf[0] + 1024 * i, 500, 100 + (unsigned)i);
		ck_assert_int_eq(tu_post_send1(qp[0][i], (uint64_t)i, FERRY_WR_SEND, 0,
					       buf[0] + 1024 * i, 100 + (uint32_t)i,
					       mr[0]->lkey, 0, 0), 0);
		ck_assert_int_eq(tu_post_send1(qp[0][i], 500 + (uint64_t)i,
					       FERRY_WR_RDMA_WRITE, 0,
					       buf[0] + 1024 * i + 200, 300,
					       mr[0]->lkey,
					       (uintptr_t)buf[1] + 1024 * i + 200,
					       mr[1]->rkey), 0);
	}
	got = tu_poll(cq[0], wc, MANY_QPS, TU_WAIT_MS);
	ck_assert_int_eq(got, MANY_QPS);
	got += tu_poll(cq[0], wc, MANY_QPS, TU_WAIT_MS);
	ck_assert_int_eq(got, 2 * MANY_QPS);
	got = tu_poll(cq[1], wc, MANY_QPS, TU_WAIT_MS);
	ck_assert_int_eq(got, MANY_QPS);
	for (int k = 0; k < MANY_QPS; k++) {
		int i = (int)(wc[k].wr_id - 1000);

		ck_assert_int_eq(wc[k].status, FERRY_WC_SUCCESS);
		ck_assert(i >= 0 && i < MANY_QPS && !seen[i]);
		seen[i] = true;
		ck_assert_uint_eq(wc[k].qp_num, qp[1][i]->qp_num);
		ck_assert_uint_eq(wc[k].byte_len, 100 + (uint32_t)i);
		ck_assert(tu_check(buf[1] + 1024 * i, 100 + (size_t)i,
				   100 + (unsigned)i));
	}
	tu_assert_cq_empty(cq[1]);
	for (int i = 0; i < MANY_QPS; i++)
		ck_assert_mem_eq(buf[1] + 1024 * i + 200, buf[0] + 1024 * i + 200, 300);

	for (int s = 0; s < 2; s++) {
		for (int i = 0; i < MANY_QPS; i++)
			ck_assert_int_eq(ferry_destroy_qp(qp[s][i]), 0);
		ck_assert_int_eq(ferry_dereg_mr(mr[s]), 0);
		ferry_free(buf[s]);
		ck_assert_int_eq(ferry_destroy_cq(cq[s]), 0);
		ck_assert_int_eq(ferry_dealloc_pd(pd[s]), 0);
		ck_assert_int_eq(ferry_close_device(ctx[s]), 0);
	}
}
END_TEST

Suite *peer_suite(void)
{
	Suite *s = suite_create("peer");
	TCase *tc;

	tc = tcase_create("death");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_killed_idle_peer);
	tcase_add_test(tc, test_killed_peer_after_move);
	tcase_add_test(tc, test_killed_writer_peer);
	tcase_add_test(tc, test_killed_peer_wakes_blocked_waiter);
	tcase_add_test(tc, test_killed_peer_then_arm);
	suite_add_tcase(s, tc);

	tc = tcase_create("fork");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_fork_child_exits);
	tcase_add_test(tc, test_fork_with_remote_peer);
	tcase_add_test(tc, test_fork_inherited_blocks);
	suite_add_tcase(s, tc);

	tc = tcase_create("many_qps");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_many_qps_one_cq);
	suite_add_tcase(s, tc);
	return s;
}
