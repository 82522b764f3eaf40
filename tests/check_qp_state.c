/*
 * check_qp_state.c - the RC state machine of ibverbs through ferry_modify_qp:
 * legal and illegal transitions, required and forbidden attribute masks,
 * attribute values, and what ferry_query_qp reports afterwards.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>

#include <check.h>

#include "check_suites.h"
#include "testutil.h"

#define INIT_MASK (FERRY_QP_STATE | FERRY_QP_PKEY_INDEX | FERRY_QP_PORT | \
		   FERRY_QP_ACCESS_FLAGS)
#define RTR_MASK (FERRY_QP_STATE | FERRY_QP_AV | FERRY_QP_PATH_MTU | \
		  FERRY_QP_DEST_QPN | FERRY_QP_RQ_PSN | \
		  FERRY_QP_MAX_DEST_RD_ATOMIC | FERRY_QP_MIN_RNR_TIMER)
#define RTS_MASK (FERRY_QP_STATE | FERRY_QP_TIMEOUT | FERRY_QP_RETRY_CNT | \
		  FERRY_QP_RNR_RETRY | FERRY_QP_SQ_PSN | FERRY_QP_MAX_QP_RD_ATOMIC)

#define ARRAY_SIZE(x) (sizeof(x) / sizeof((x)[0]))

static struct tu_end a, b;
static uint32_t peer_qpn_a;	/* what a's exchange reported */

static void qs_setup(void)
{
	tu_end_open(&a, NULL);
	tu_end_open(&b, NULL);
}

static void qs_teardown(void)
{
	tu_pair_close(&a, &b);
}

static void qs_init_attr(struct ferry_qp_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = FERRY_QPS_INIT;
	attr->port_num = 1;
	attr->qp_access_flags = TU_QP_ACCESS_ALL;
}

static void qs_rtr_attr(struct ferry_qp_attr *attr, uint32_t dest)
{
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = FERRY_QPS_RTR;
	attr->path_mtu = FERRY_MTU_2048;
	attr->dest_qp_num = dest;
	attr->max_dest_rd_atomic = 1;
	attr->min_rnr_timer = 5;
	attr->ah_attr.port_num = 1;
}

static void qs_rts_attr(struct ferry_qp_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = FERRY_QPS_RTS;
	attr->timeout = 12;
	attr->retry_cnt = 6;
	attr->rnr_retry = 3;
	attr->max_rd_atomic = 1;
}

/* Expect modify to fail with EINVAL and leave the state as it was. */
static void qs_expect_einval(struct ferry_qp *qp, struct ferry_qp_attr *attr,
			     int mask, int line)
{
	enum ferry_qp_state before = tu_qp_state(qp);

	errno = 0;
	ck_assert_msg(ferry_modify_qp(qp, attr, mask) == -1,
		      "line %d: modify_qp (mask %#x, to %d) succeeded", line,
		      mask, attr->qp_state);
	ck_assert_msg(errno == EINVAL, "line %d: errno %d, not EINVAL", line, errno);
	ck_assert_int_eq(tu_qp_state(qp), before);
	ck_assert_int_eq(qp->state, before);
}
#define EXPECT_EINVAL(qp, attr, mask) qs_expect_einval(qp, attr, mask, __LINE__)

struct qs_exchange_job {
	struct ferry_qp *qp;
	int sock;
	uint32_t peer;
	int ret;
};

static void *qs_exchange_thread(void *arg)
{
	struct qs_exchange_job *job = arg;

	job->ret = ferry_qp_exchange(job->qp, job->sock, &job->peer);
	return NULL;
}

/* Both QPs must be in INIT. */
static void qs_exchange(void)
{
	struct qs_exchange_job ja = { .qp = a.qp }, jb = { .qp = b.qp };
	pthread_t thread;
	int sv[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	ja.sock = sv[0];
	jb.sock = sv[1];
	ck_assert_int_eq(pthread_create(&thread, NULL, qs_exchange_thread, &jb), 0);
	qs_exchange_thread(&ja);
	pthread_join(thread, NULL);
	close(sv[0]);
	close(sv[1]);
	ck_assert_int_eq(ja.ret, 0);
	ck_assert_int_eq(jb.ret, 0);
	ck_assert_uint_eq(ja.peer, b.qp->qp_num);
	ck_assert_uint_eq(jb.peer, a.qp->qp_num);
	peer_qpn_a = ja.peer;
}

/* a and b to INIT and exchanged. */
static void qs_to_init_exchanged(void)
{
	ck_assert_int_eq(tu_qp_to_init(a.qp, TU_QP_ACCESS_ALL), 0);
	ck_assert_int_eq(tu_qp_to_init(b.qp, TU_QP_ACCESS_ALL), 0);
	qs_exchange();
}

START_TEST(test_reset_to_init)
{
	struct ferry_qp_attr attr;
	struct ferry_qp_init_attr qinit;

	/* each required bit missing in turn */
	qs_init_attr(&attr);
	EXPECT_EINVAL(a.qp, &attr, INIT_MASK & ~FERRY_QP_PORT);
	EXPECT_EINVAL(a.qp, &attr, INIT_MASK & ~FERRY_QP_PKEY_INDEX);
	EXPECT_EINVAL(a.qp, &attr, INIT_MASK & ~FERRY_QP_ACCESS_FLAGS);
	/* bits RESET->INIT does not allow */
	EXPECT_EINVAL(a.qp, &attr, INIT_MASK | FERRY_QP_SQ_PSN);
	EXPECT_EINVAL(a.qp, &attr, INIT_MASK | FERRY_QP_DEST_QPN);
	EXPECT_EINVAL(a.qp, &attr, INIT_MASK | FERRY_QP_RNR_RETRY);
	/* illegal targets from RESET */
	attr.qp_state = FERRY_QPS_RTR;
	EXPECT_EINVAL(a.qp, &attr, INIT_MASK);
	attr.qp_state = FERRY_QPS_RTS;
	EXPECT_EINVAL(a.qp, &attr, INIT_MASK);
	attr.qp_state = FERRY_QPS_SQD;
	EXPECT_EINVAL(a.qp, &attr, FERRY_QP_STATE);
	attr.qp_state = (enum ferry_qp_state)42;
	EXPECT_EINVAL(a.qp, &attr, FERRY_QP_STATE);

	qs_init_attr(&attr);
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, INIT_MASK), 0);
	ck_assert_int_eq(a.qp->state, FERRY_QPS_INIT);
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_INIT);

	/* INIT -> INIT with optional attributes */
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_INIT;
	attr.qp_access_flags = FERRY_ACCESS_REMOTE_READ;
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE |
					 FERRY_QP_ACCESS_FLAGS), 0);
	memset(&attr, 0, sizeof(attr));
	ck_assert_int_eq(ferry_query_qp(a.qp, &attr, FERRY_QP_STATE |
					FERRY_QP_ACCESS_FLAGS, &qinit), 0);
	ck_assert_uint_eq(attr.qp_access_flags, FERRY_ACCESS_REMOTE_READ);
	ck_assert_int_eq(attr.qp_state, FERRY_QPS_INIT);
}
END_TEST

START_TEST(test_init_illegal)
{
	struct ferry_qp_attr attr;

	ck_assert_int_eq(tu_qp_to_init(a.qp, TU_QP_ACCESS_ALL), 0);
	/* INIT -> RTS skips RTR */
	qs_rts_attr(&attr);
	EXPECT_EINVAL(a.qp, &attr, RTS_MASK);
	attr.qp_state = FERRY_QPS_SQD;
	EXPECT_EINVAL(a.qp, &attr, FERRY_QP_STATE);
	/* cur_qp_state that does not match */
	qs_init_attr(&attr);
	attr.cur_qp_state = FERRY_QPS_RTS;
	EXPECT_EINVAL(a.qp, &attr, FERRY_QP_STATE | FERRY_QP_CUR_STATE);
	/* ibverbs allows CUR_STATE only on transitions to RTS */
	attr.cur_qp_state = FERRY_QPS_INIT;
	EXPECT_EINVAL(a.qp, &attr, FERRY_QP_STATE | FERRY_QP_CUR_STATE);
}
END_TEST

START_TEST(test_rtr_rts)
{
	struct ferry_qp_attr attr, q;
	struct ferry_qp_init_attr qinit;
	static const int rtr_required[] = {
		FERRY_QP_AV, FERRY_QP_PATH_MTU, FERRY_QP_DEST_QPN, FERRY_QP_RQ_PSN,
		FERRY_QP_MAX_DEST_RD_ATOMIC, FERRY_QP_MIN_RNR_TIMER,
	};
	static const int rts_required[] = {
		FERRY_QP_TIMEOUT, FERRY_QP_RETRY_CNT, FERRY_QP_RNR_RETRY,
		FERRY_QP_SQ_PSN, FERRY_QP_MAX_QP_RD_ATOMIC,
	};

	qs_to_init_exchanged();

	qs_rtr_attr(&attr, peer_qpn_a);
	for (size_t i = 0; i < ARRAY_SIZE(rtr_required); i++)
		EXPECT_EINVAL(a.qp, &attr, RTR_MASK & ~rtr_required[i]);
	EXPECT_EINVAL(a.qp, &attr, RTR_MASK | FERRY_QP_SQ_PSN);	/* RTS only */

	qs_rtr_attr(&attr, peer_qpn_a);
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, RTR_MASK), 0);
	ck_assert_int_eq(a.qp->state, FERRY_QPS_RTR);

	qs_rts_attr(&attr);
	for (size_t i = 0; i < ARRAY_SIZE(rts_required); i++)
		EXPECT_EINVAL(a.qp, &attr, RTS_MASK & ~rts_required[i]);
	EXPECT_EINVAL(a.qp, &attr, RTS_MASK | FERRY_QP_DEST_QPN);	/* RTR only */

	qs_rts_attr(&attr);
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, RTS_MASK), 0);
	ck_assert_int_eq(a.qp->state, FERRY_QPS_RTS);

	memset(&q, 0, sizeof(q));
	memset(&qinit, 0, sizeof(qinit));
	ck_assert_int_eq(ferry_query_qp(a.qp, &q, RTR_MASK | RTS_MASK |
					FERRY_QP_ACCESS_FLAGS, &qinit), 0);
	ck_assert_int_eq(q.qp_state, FERRY_QPS_RTS);
	ck_assert_uint_eq(q.dest_qp_num, b.qp->qp_num);
	if (tu_on_shm()) {
		ck_assert_int_eq(q.path_mtu, FERRY_MTU_2048);
	} else {
		/* verbs caps it at both ports' active MTU (1024 on Soft-RoCE, eth MTU 1500) */
		ck_assert_int_le(q.path_mtu, FERRY_MTU_2048);
		ck_assert_int_ge(q.path_mtu, FERRY_MTU_1024);
	}
	ck_assert_uint_eq(q.min_rnr_timer, 5);
	ck_assert_uint_eq(q.timeout, 12);
	ck_assert_uint_eq(q.retry_cnt, 6);
	ck_assert_uint_eq(q.rnr_retry, 3);
	ck_assert_uint_eq(q.max_rd_atomic, 1);
	ck_assert_uint_eq(q.max_dest_rd_atomic, 1);
	ck_assert_uint_eq(q.qp_access_flags, TU_QP_ACCESS_ALL);

	/* RTS -> RTS with an optional attribute */
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_RTS;
	attr.min_rnr_timer = 9;
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE |
					 FERRY_QP_MIN_RNR_TIMER), 0);
	ck_assert_int_eq(ferry_query_qp(a.qp, &q, FERRY_QP_MIN_RNR_TIMER, &qinit), 0);
	ck_assert_uint_eq(q.min_rnr_timer, 9);
	/* RTS -> RTS naming the current state */
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_RTS;
	attr.cur_qp_state = FERRY_QPS_SQD;
	EXPECT_EINVAL(a.qp, &attr, FERRY_QP_STATE | FERRY_QP_CUR_STATE);
	attr.cur_qp_state = FERRY_QPS_RTS;
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE |
					 FERRY_QP_CUR_STATE), 0);
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_RTS);
	/* ... but not a required-once one */
	attr.dest_qp_num = 1;
	EXPECT_EINVAL(a.qp, &attr, FERRY_QP_STATE | FERRY_QP_DEST_QPN);
	/* backwards is illegal */
	qs_rtr_attr(&attr, peer_qpn_a);
	EXPECT_EINVAL(a.qp, &attr, RTR_MASK);
	qs_init_attr(&attr);
	EXPECT_EINVAL(a.qp, &attr, INIT_MASK);
}
END_TEST

START_TEST(test_attr_ranges)
{
	struct ferry_qp_attr attr;

	/* values outside their IB encodings are refused */
	qs_to_init_exchanged();
	qs_rtr_attr(&attr, peer_qpn_a);
	attr.path_mtu = (enum ferry_mtu)6;
	EXPECT_EINVAL(a.qp, &attr, RTR_MASK);
	attr.path_mtu = (enum ferry_mtu)0;
	EXPECT_EINVAL(a.qp, &attr, RTR_MASK);
	qs_rtr_attr(&attr, peer_qpn_a);
	attr.min_rnr_timer = 32;	/* 5 bits */
	EXPECT_EINVAL(a.qp, &attr, RTR_MASK);
	qs_rtr_attr(&attr, peer_qpn_a);
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, RTR_MASK), 0);

	qs_rts_attr(&attr);
	attr.rnr_retry = 8;		/* 3 bits */
	EXPECT_EINVAL(a.qp, &attr, RTS_MASK);
	qs_rts_attr(&attr);
	attr.retry_cnt = 8;		/* 3 bits */
	EXPECT_EINVAL(a.qp, &attr, RTS_MASK);
	qs_rts_attr(&attr);
	attr.timeout = 32;		/* 5 bits */
	EXPECT_EINVAL(a.qp, &attr, RTS_MASK);
	qs_rts_attr(&attr);
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, RTS_MASK), 0);
}
END_TEST

START_TEST(test_post_by_state)
{
	struct ferry_qp_attr attr;
	char *buf = a.buf;

	/* receives may be posted from INIT on; sends only in RTS */
	ck_assert_int_eq(tu_qp_to_init(a.qp, TU_QP_ACCESS_ALL), 0);
	ck_assert_int_eq(tu_qp_to_init(b.qp, TU_QP_ACCESS_ALL), 0);
	ck_assert_int_eq(tu_post_recv1(a.qp, 1, buf, 64, a.mr->lkey), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 2, FERRY_WR_SEND, 0, buf, 8,
				       a.mr->lkey, 0, 0), -1);
	qs_exchange();
	ck_assert_int_eq(tu_qp_to_rtr(a.qp, peer_qpn_a, 1), 0);
	ck_assert_int_eq(tu_post_recv1(a.qp, 3, buf, 64, a.mr->lkey), 0);
	ck_assert_int_eq(tu_post_send1(a.qp, 4, FERRY_WR_SEND, 0, buf, 8,
				       a.mr->lkey, 0, 0), -1);
	ck_assert_int_eq(tu_qp_to_rts(a.qp, 7), 0);
	ck_assert_int_eq(tu_qp_to_rtr(b.qp, a.qp->qp_num, 1), 0);
	ck_assert_int_eq(tu_qp_to_rts(b.qp, 7), 0);

	/* the two receives posted before RTS are live: b's sends land in them */
	tu_fill(b.buf, 16, 77);
	ck_assert_int_eq(tu_post_send1(b.qp, 5, FERRY_WR_SEND, FERRY_SEND_SIGNALED,
				       b.buf, 16, b.mr->lkey, 0, 0), 0);
	{
		struct ferry_wc wc;

		tu_poll1(b.send_cq, &wc);
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
		tu_poll1(a.recv_cq, &wc);
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
		ck_assert_uint_eq(wc.wr_id, 1);
		ck_assert_uint_eq(wc.byte_len, 16);
		ck_assert(tu_check(buf, 16, 77));
	}
	(void)attr;
}
END_TEST

START_TEST(test_to_err_and_reset)
{
	struct ferry_qp_attr attr;

	/*
	 * RESET -> ERR is legal in IBA and on shm.  Linux's RDMA core refuses
	 * it for every kernel driver (ib_modify_qp_is_ok has no RESET -> ERR
	 * entry), so on verbs it fails with EINVAL and the QP stays in RESET.
	 */
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_ERR;
	if (tu_on_shm()) {
		ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE), 0);
		ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_ERR);
	} else {
		EXPECT_EINVAL(a.qp, &attr, FERRY_QP_STATE);
		ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_RESET);
	}
	attr.qp_state = FERRY_QPS_RESET;
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE), 0);
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_RESET);

	/* a connected pair: RTS -> ERR, RTS -> RESET */
	qs_to_init_exchanged();
	ck_assert_int_eq(tu_qp_to_rtr(a.qp, peer_qpn_a, 1), 0);
	ck_assert_int_eq(tu_qp_to_rts(a.qp, 7), 0);
	ck_assert_int_eq(tu_qp_to_rtr(b.qp, a.qp->qp_num, 1), 0);
	ck_assert_int_eq(tu_qp_to_rts(b.qp, 7), 0);
	attr.qp_state = FERRY_QPS_ERR;
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE), 0);
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_ERR);
	ck_assert_int_eq(a.qp->state, FERRY_QPS_ERR);
	attr.qp_state = FERRY_QPS_RESET;
	ck_assert_int_eq(ferry_modify_qp(b.qp, &attr, FERRY_QP_STATE), 0);
	ck_assert_int_eq(tu_qp_state(b.qp), FERRY_QPS_RESET);

	/* from ERR only RESET (or ERR) */
	qs_init_attr(&attr);
	EXPECT_EINVAL(a.qp, &attr, INIT_MASK);
	qs_rts_attr(&attr);
	EXPECT_EINVAL(a.qp, &attr, RTS_MASK);
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_ERR;
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE), 0);
	attr.qp_state = FERRY_QPS_RESET;
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE), 0);
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_RESET);
	/* and RESET -> INIT again */
	ck_assert_int_eq(tu_qp_to_init(a.qp, TU_QP_ACCESS_ALL), 0);
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_INIT);
}
END_TEST

/*
 * SQD -> RTS.  A device may refuse it while the send queue is still
 * draining (Soft-RoCE does, with EINVAL, until its SQ_DRAINED event): the
 * drain is the device's to finish, so on verbs the move is tried again
 * for a while.  shm drains at once: the first try must do.
 */
static int qs_sqd_to_rts(struct ferry_qp *qp, struct ferry_qp_attr *attr)
{
	int i;

	for (i = 0; i < 500; i++) {
		if (ferry_modify_qp(qp, attr, FERRY_QP_STATE) == 0)
			return 0;
		if (errno != EINVAL || tu_on_shm())
			return -1;
		usleep(10000);
	}
	return -1;
}

START_TEST(test_sqd)
{
	struct ferry_qp_attr attr;
	struct ferry_wc wc;

	tu_pair_connect(&a, &b, TU_QP_ACCESS_ALL);
	/* RTS -> SQD -> RTS, as ibverbs allows */
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_SQD;
	ck_assert_int_eq(ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE), 0);
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_SQD);
	/* SQD -> RTR is not a transition */
	qs_rtr_attr(&attr, b.qp->qp_num);
	EXPECT_EINVAL(a.qp, &attr, RTR_MASK);
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_RTS;
	ck_assert_int_eq(qs_sqd_to_rts(a.qp, &attr), 0);
	ck_assert_int_eq(tu_qp_state(a.qp), FERRY_QPS_RTS);

	/* and the QP still works */
	tu_fill(a.buf, 100, 5);
	ck_assert_int_eq(tu_post_send1(a.qp, 9, FERRY_WR_RDMA_WRITE, 0, a.buf, 100,
				       a.mr->lkey, (uintptr_t)b.buf, b.mr->rkey), 0);
	tu_poll1(a.send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert(tu_check(b.buf, 100, 5));
}
END_TEST

START_TEST(test_connect_sock_states)
{
	struct ferry_qp_attr q;
	struct ferry_qp_init_attr qinit;

	/* the convenience call takes RESET QPs to RTS with ferry's defaults */
	ck_assert_int_eq(a.qp->state, FERRY_QPS_RESET);
	tu_pair_connect(&a, &b, FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
	memset(&q, 0, sizeof(q));
	ck_assert_int_eq(ferry_query_qp(a.qp, &q, RTR_MASK | RTS_MASK |
					FERRY_QP_ACCESS_FLAGS, &qinit), 0);
	ck_assert_int_eq(q.qp_state, FERRY_QPS_RTS);
	ck_assert_uint_eq(q.dest_qp_num, b.qp->qp_num);
	ck_assert_uint_eq(q.rnr_retry, 7);
	ck_assert_uint_eq(q.min_rnr_timer, 1);
	ck_assert_uint_eq(q.qp_access_flags,
			  FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
	ck_assert_int_eq(ferry_query_qp(b.qp, &q, FERRY_QP_DEST_QPN, &qinit), 0);
	ck_assert_uint_eq(q.dest_qp_num, a.qp->qp_num);
}
END_TEST

Suite *qp_state_suite(void)
{
	Suite *s = suite_create("qp_state");
	TCase *tc = tcase_create("transitions");

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_checked_fixture(tc, qs_setup, qs_teardown);
	tcase_add_test(tc, test_reset_to_init);
	tcase_add_test(tc, test_init_illegal);
	tcase_add_test(tc, test_rtr_rts);
	tcase_add_test(tc, test_attr_ranges);
	tcase_add_test(tc, test_post_by_state);
	tcase_add_test(tc, test_to_err_and_reset);
	tcase_add_test(tc, test_sqd);
	tcase_add_test(tc, test_connect_sock_states);
	suite_add_tcase(s, tc);
	return s;
}
