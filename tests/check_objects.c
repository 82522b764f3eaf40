/*
 * check_objects.c - devices, contexts, PDs, memory, CQs, channels and QPs:
 * creation, the attributes they report, destruction order, argument errors.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "check_suites.h"
#include "testutil.h"
#include "shm-internal.h"

START_TEST(test_device_list)
{
	struct ferry_device **list;
	int num = -1;

	list = ferry_get_device_list(&num);
	ck_assert_ptr_nonnull(list);
	ck_assert_int_ge(num, 1);
	ck_assert_ptr_null(list[num]);
	for (int i = 0; i < num; i++) {
		ck_assert_ptr_nonnull(list[i]);
		ck_assert_ptr_nonnull(ferry_get_device_name(list[i]));
		ck_assert_int_gt((int)strlen(ferry_get_device_name(list[i])), 0);
	}
	/*
	 * shm is always built and listed first; FERRY_TRANSPORT=verbs (the
	 * Soft-RoCE run) lists only that provider's devices.
	 */
	ck_assert_str_eq(ferry_get_device_transport(list[0]), tu_transport());
	ferry_free_device_list(list);

	/* the count is optional */
	list = ferry_get_device_list(NULL);
	ck_assert_ptr_nonnull(list);
	ck_assert_ptr_nonnull(list[0]);
	ferry_free_device_list(list);
}
END_TEST

START_TEST(test_open_device)
{
	struct ferry_device **list = ferry_get_device_list(NULL);
	struct ferry_context *ctx;
	struct ferry_device_attr attr;

	ck_assert_ptr_nonnull(list);
	ctx = ferry_open_device(list[0]);
	ck_assert_ptr_nonnull(ctx);
	memset(&attr, 0, sizeof(attr));
	ck_assert_int_eq(ferry_query_device(ctx, &attr), 0);
	ck_assert_uint_gt(attr.max_qp, 64);
	ck_assert_uint_gt(attr.max_qp_wr, 0);
	ck_assert_uint_ge(attr.max_sge, 4);
	ck_assert_uint_gt(attr.max_cqe, 0);
	ck_assert_uint_gt(attr.max_cq, 0);
	ck_assert_uint_gt(attr.max_mr, 0);
	ck_assert_uint_gt(attr.max_pd, 0);
	ck_assert_uint_gt(attr.max_mr_size, 0);
	ck_assert_uint_ge(attr.max_qp_rd_atom, 1);
	if (tu_on_shm())	/* CPU atomics on shared memory */
		ck_assert_int_eq(attr.atomic_cap, FERRY_ATOMIC_GLOB);
	else	/* the device's own */
		ck_assert_int_le(attr.atomic_cap, FERRY_ATOMIC_GLOB);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
	ferry_free_device_list(list);
}
END_TEST

START_TEST(test_open_transport)
{
	struct ferry_context *ctx;

	ctx = ferry_open_transport("shm");
	ck_assert_ptr_nonnull(ctx);
	ck_assert_int_eq(ferry_close_device(ctx), 0);

	ctx = ferry_open_transport(NULL);
	ck_assert_ptr_nonnull(ctx);
	ck_assert_int_eq(ferry_close_device(ctx), 0);

	errno = 0;
	ctx = ferry_open_transport("no-such-transport");
	ck_assert_ptr_null(ctx);
	ck_assert_int_ne(errno, 0);
}
END_TEST

START_TEST(test_null_arguments)
{
	struct ferry_context *ctx = ferry_open_transport(NULL);
	struct ferry_device_attr attr;

	ck_assert_ptr_nonnull(ctx);
	errno = 0;
	ck_assert_ptr_null(ferry_alloc_pd(NULL));
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_query_device(NULL, &attr), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_query_device(ctx, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(ferry_reg_mr(NULL, &attr, sizeof(attr),
					FERRY_ACCESS_LOCAL_WRITE));
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(ferry_create_cq(NULL, 16, NULL, NULL, 0));
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(ferry_create_qp(NULL, NULL));
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_dealloc_pd(NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_destroy_cq(NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_destroy_qp(NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_dereg_mr(NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_close_device(NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

START_TEST(test_pd)
{
	struct ferry_context *ctx = ferry_open_transport(NULL);
	struct ferry_pd *pd1, *pd2;

	ck_assert_ptr_nonnull(ctx);
	pd1 = ferry_alloc_pd(ctx);
	pd2 = ferry_alloc_pd(ctx);
	ck_assert_ptr_nonnull(pd1);
	ck_assert_ptr_nonnull(pd2);
	ck_assert_ptr_eq(pd1->context, ctx);
	ck_assert_ptr_eq(pd2->context, ctx);
	ck_assert_ptr_ne(pd1, pd2);
	ck_assert_int_eq(ferry_dealloc_pd(pd1), 0);
	ck_assert_int_eq(ferry_dealloc_pd(pd2), 0);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

START_TEST(test_alloc)
{
	char *a = ferry_alloc(100);
	char *b = ferry_alloc(1 << 20);

	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq((uintptr_t)a % 4096, 0);
	ck_assert_uint_eq((uintptr_t)b % 4096, 0);
	memset(a, 0xab, 100);
	memset(b, 0xcd, 1 << 20);
	ck_assert(tu_all_bytes(a, 100, 0xab));
	ck_assert(tu_all_bytes(b, 1 << 20, 0xcd));
	ferry_free(a);
	ferry_free(b);
	ferry_free(NULL);
}
END_TEST

START_TEST(test_mr)
{
	struct ferry_context *ctx = ferry_open_transport(NULL);
	struct ferry_pd *pd = ferry_alloc_pd(ctx);
	char *shared = ferry_alloc(8192);
	char *heap = malloc(5000);
	struct ferry_mr *m1, *m2, *m3;

	ck_assert_ptr_nonnull(pd);
	ck_assert_ptr_nonnull(shared);
	ck_assert_ptr_nonnull(heap);
	m1 = ferry_reg_mr(pd, shared, 8192, TU_ACCESS_ALL);
	ck_assert_ptr_nonnull(m1);
	m2 = ferry_reg_mr(pd, shared + 100, 200, FERRY_ACCESS_LOCAL_WRITE);
	ck_assert_ptr_nonnull(m2);
	m3 = ferry_reg_mr(pd, heap, 5000, FERRY_ACCESS_LOCAL_WRITE |
			  FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ);
	ck_assert_ptr_nonnull(m3);

	ck_assert_ptr_eq(m1->addr, shared);
	ck_assert_uint_eq(m1->length, 8192);
	ck_assert_ptr_eq(m1->pd, pd);
	ck_assert_ptr_eq(m1->context, ctx);
	ck_assert_ptr_eq(m2->addr, shared + 100);
	ck_assert_uint_eq(m2->length, 200);
	ck_assert_ptr_eq(m3->addr, heap);
	ck_assert_uint_eq(m3->length, 5000);
	/* keys identify one registration each */
	ck_assert_uint_ne(m1->lkey, m2->lkey);
	ck_assert_uint_ne(m1->lkey, m3->lkey);
	ck_assert_uint_ne(m2->lkey, m3->lkey);
	ck_assert_uint_ne(m1->rkey, m2->rkey);
	ck_assert_uint_ne(m1->rkey, m3->rkey);
	ck_assert_uint_ne(m2->rkey, m3->rkey);

	ck_assert_int_eq(ferry_dereg_mr(m1), 0);
	ck_assert_int_eq(ferry_dereg_mr(m2), 0);
	ck_assert_int_eq(ferry_dereg_mr(m3), 0);
	ferry_free(shared);
	free(heap);
	ck_assert_int_eq(ferry_dealloc_pd(pd), 0);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

START_TEST(test_mr_errors)
{
	struct ferry_context *ctx = ferry_open_transport(NULL);
	struct ferry_pd *pd = ferry_alloc_pd(ctx);
	char *buf = ferry_alloc(4096);

	ck_assert_ptr_nonnull(pd);
	ck_assert_ptr_nonnull(buf);
	/* unknown access bit */
	errno = 0;
	ck_assert_ptr_null(ferry_reg_mr(pd, buf, 4096, 1 << 20));
	ck_assert_int_eq(errno, EINVAL);
	/* ibverbs: remote write or atomic needs local write */
	errno = 0;
	ck_assert_ptr_null(ferry_reg_mr(pd, buf, 4096, FERRY_ACCESS_REMOTE_WRITE));
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(ferry_reg_mr(pd, buf, 4096, FERRY_ACCESS_REMOTE_ATOMIC));
	ck_assert_int_eq(errno, EINVAL);
	/* NULL address with a length */
	errno = 0;
	ck_assert_ptr_null(ferry_reg_mr(pd, NULL, 4096, FERRY_ACCESS_LOCAL_WRITE));
	ck_assert_int_ne(errno, 0);
	ferry_free(buf);
	ck_assert_int_eq(ferry_dealloc_pd(pd), 0);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

START_TEST(test_cq)
{
	struct ferry_context *ctx = ferry_open_transport(NULL);
	struct ferry_device_attr attr;
	struct ferry_comp_channel *ch;
	struct ferry_cq *cq, *cq2;
	struct ferry_wc wc[4];
	int cookie;

	ck_assert_ptr_nonnull(ctx);
	ck_assert_int_eq(ferry_query_device(ctx, &attr), 0);
	ch = ferry_create_comp_channel(ctx);
	ck_assert_ptr_nonnull(ch);
	ck_assert_int_ge(ch->fd, 0);
	ck_assert_ptr_eq(ch->context, ctx);

	cq = ferry_create_cq(ctx, 10, &cookie, ch, 0);
	ck_assert_ptr_nonnull(cq);
	ck_assert_int_ge(cq->cqe, 10);
	ck_assert_ptr_eq(cq->cq_context, &cookie);
	ck_assert_ptr_eq(cq->channel, ch);
	ck_assert_ptr_eq(cq->context, ctx);
	ck_assert_int_eq(ferry_poll_cq(cq, 4, wc), 0);
	errno = 0;
	ck_assert_int_eq(ferry_poll_cq(cq, -1, wc), -1);
	ck_assert_int_eq(errno, EINVAL);

	cq2 = ferry_create_cq(ctx, 1, NULL, NULL, 0);
	ck_assert_ptr_nonnull(cq2);
	ck_assert_ptr_null(cq2->channel);
	ck_assert_int_ge(cq2->cqe, 1);
	/* arming a CQ that has no channel is pointless but ibverbs allows it */

	errno = 0;
	ck_assert_ptr_null(ferry_create_cq(ctx, 0, NULL, NULL, 0));
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_ptr_null(ferry_create_cq(ctx, -5, NULL, NULL, 0));
	ck_assert_int_eq(errno, EINVAL);
	if (attr.max_cqe < 0x7fffffff) {
		errno = 0;
		ck_assert_ptr_null(ferry_create_cq(ctx, attr.max_cqe + 1,
						   NULL, NULL, 0));
		ck_assert_int_eq(errno, EINVAL);
	}

	/* ibverbs: a channel in use by a CQ cannot go away */
	errno = 0;
	ck_assert_int_eq(ferry_destroy_comp_channel(ch), -1);
	ck_assert_int_eq(errno, EBUSY);
	ck_assert_int_eq(ferry_destroy_cq(cq), 0);
	ck_assert_int_eq(ferry_destroy_cq(cq2), 0);
	ck_assert_int_eq(ferry_destroy_comp_channel(ch), 0);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

static void objects_init_attr(struct ferry_qp_init_attr *init, struct ferry_cq *cq)
{
	memset(init, 0, sizeof(*init));
	init->send_cq = cq;
	init->recv_cq = cq;
	init->qp_type = FERRY_QPT_RC;
	init->sq_sig_all = 1;
	init->cap.max_send_wr = 16;
	init->cap.max_recv_wr = 8;
	init->cap.max_send_sge = 2;
	init->cap.max_recv_sge = 3;
	init->cap.max_inline_data = 32;
}

START_TEST(test_qp_create)
{
	struct ferry_context *ctx = ferry_open_transport(NULL);
	struct ferry_pd *pd = ferry_alloc_pd(ctx);
	struct ferry_cq *scq = ferry_create_cq(ctx, 32, NULL, NULL, 0);
	struct ferry_cq *rcq = ferry_create_cq(ctx, 32, NULL, NULL, 0);
	struct ferry_qp_init_attr init, qinit;
	struct ferry_qp_attr attr;
	struct ferry_qp *qp1, *qp2;
	int cookie;

	ck_assert_ptr_nonnull(scq);
	ck_assert_ptr_nonnull(rcq);
	objects_init_attr(&init, scq);
	init.recv_cq = rcq;
	init.qp_context = &cookie;
	qp1 = ferry_create_qp(pd, &init);
	ck_assert_ptr_nonnull(qp1);
	qp2 = ferry_create_qp(pd, &init);
	ck_assert_ptr_nonnull(qp2);

	ck_assert_ptr_eq(qp1->context, ctx);
	ck_assert_ptr_eq(qp1->pd, pd);
	ck_assert_ptr_eq(qp1->send_cq, scq);
	ck_assert_ptr_eq(qp1->recv_cq, rcq);
	ck_assert_ptr_eq(qp1->qp_context, &cookie);
	ck_assert_int_eq(qp1->qp_type, FERRY_QPT_RC);
	ck_assert_int_eq(qp1->state, FERRY_QPS_RESET);
	ck_assert_uint_ne(qp1->qp_num, qp2->qp_num);
	/* the actual capabilities are at least those asked for */
	ck_assert_uint_ge(init.cap.max_send_wr, 16);
	ck_assert_uint_ge(init.cap.max_recv_wr, 8);
	ck_assert_uint_ge(init.cap.max_send_sge, 2);
	ck_assert_uint_ge(init.cap.max_recv_sge, 3);
	ck_assert_uint_ge(init.cap.max_inline_data, 32);

	memset(&attr, 0, sizeof(attr));
	memset(&qinit, 0, sizeof(qinit));
	ck_assert_int_eq(ferry_query_qp(qp1, &attr, FERRY_QP_STATE | FERRY_QP_CAP,
					&qinit), 0);
	ck_assert_int_eq(attr.qp_state, FERRY_QPS_RESET);
	ck_assert_uint_ge(attr.cap.max_send_wr, 16);
	ck_assert_uint_ge(attr.cap.max_recv_wr, 8);
	ck_assert_uint_ge(attr.cap.max_inline_data, 32);
	ck_assert_ptr_eq(qinit.send_cq, scq);
	ck_assert_ptr_eq(qinit.recv_cq, rcq);
	ck_assert_ptr_eq(qinit.qp_context, &cookie);
	ck_assert_int_eq(qinit.qp_type, FERRY_QPT_RC);
	ck_assert_int_eq(qinit.sq_sig_all, 1);

	/* ibverbs: resources in use cannot be released */
	errno = 0;
	ck_assert_int_eq(ferry_destroy_cq(scq), -1);
	ck_assert_int_eq(errno, EBUSY);
	errno = 0;
	ck_assert_int_eq(ferry_dealloc_pd(pd), -1);
	ck_assert_int_eq(errno, EBUSY);

	ck_assert_int_eq(ferry_destroy_qp(qp1), 0);
	ck_assert_int_eq(ferry_destroy_qp(qp2), 0);
	ck_assert_int_eq(ferry_destroy_cq(scq), 0);
	ck_assert_int_eq(ferry_destroy_cq(rcq), 0);
	ck_assert_int_eq(ferry_dealloc_pd(pd), 0);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

START_TEST(test_qp_create_errors)
{
	struct ferry_context *ctx = ferry_open_transport(NULL);
	struct ferry_pd *pd = ferry_alloc_pd(ctx);
	struct ferry_cq *cq = ferry_create_cq(ctx, 32, NULL, NULL, 0);
	struct ferry_device_attr dev;
	struct ferry_qp_init_attr init;

	ck_assert_ptr_nonnull(cq);
	ck_assert_int_eq(ferry_query_device(ctx, &dev), 0);

	objects_init_attr(&init, cq);
	init.send_cq = NULL;
	errno = 0;
	ck_assert_ptr_null(ferry_create_qp(pd, &init));
	ck_assert_int_eq(errno, EINVAL);

	objects_init_attr(&init, cq);
	init.recv_cq = NULL;
	errno = 0;
	ck_assert_ptr_null(ferry_create_qp(pd, &init));
	ck_assert_int_eq(errno, EINVAL);

	objects_init_attr(&init, cq);
	init.qp_type = (enum ferry_qp_type)8;	/* RAW_PACKET in ibverbs */
	errno = 0;
	ck_assert_ptr_null(ferry_create_qp(pd, &init));
	ck_assert_msg(errno == EINVAL || errno == EOPNOTSUPP || errno == ENOTSUP,
		      "errno %d", errno);

	objects_init_attr(&init, cq);
	init.cap.max_send_wr = dev.max_qp_wr + 1;
	errno = 0;
	ck_assert_ptr_null(ferry_create_qp(pd, &init));
	ck_assert_int_eq(errno, EINVAL);

	objects_init_attr(&init, cq);
	init.cap.max_recv_sge = dev.max_sge + 1;
	errno = 0;
	ck_assert_ptr_null(ferry_create_qp(pd, &init));
	ck_assert_int_eq(errno, EINVAL);

	objects_init_attr(&init, cq);
	init.cap.max_inline_data = dev.max_inline_data + 1;
	errno = 0;
	ck_assert_ptr_null(ferry_create_qp(pd, &init));
	ck_assert_int_eq(errno, EINVAL);

	ck_assert_int_eq(ferry_destroy_cq(cq), 0);
	ck_assert_int_eq(ferry_dealloc_pd(pd), 0);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

START_TEST(test_post_in_reset)
{
	struct tu_end e;
	struct ferry_sge sge;
	struct ferry_send_wr swr, *sbad = NULL;
	struct ferry_recv_wr rwr, *rbad = NULL;

	tu_end_open(&e, NULL);
	sge.addr = (uintptr_t)e.buf;
	sge.length = 16;
	sge.lkey = e.mr->lkey;
	memset(&swr, 0, sizeof(swr));
	swr.wr_id = 1;
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = FERRY_WR_SEND;
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 2;
	rwr.sg_list = &sge;
	rwr.num_sge = 1;

	/* ibverbs: no sends before RTS, no receives in RESET */
	errno = 0;
	ck_assert_int_eq(ferry_post_send(e.qp, &swr, &sbad), -1);
	ck_assert_int_ne(errno, 0);
	ck_assert_ptr_eq(sbad, &swr);
	errno = 0;
	ck_assert_int_eq(ferry_post_recv(e.qp, &rwr, &rbad), -1);
	ck_assert_int_ne(errno, 0);
	ck_assert_ptr_eq(rbad, &rwr);
	tu_assert_cq_empty(e.send_cq);
	tu_end_close(&e);
}
END_TEST

START_TEST(test_strings)
{
	ck_assert_ptr_nonnull(ferry_wc_status_str(FERRY_WC_SUCCESS));
	ck_assert_ptr_nonnull(ferry_wc_status_str(FERRY_WC_REM_ACCESS_ERR));
	ck_assert_str_ne(ferry_wc_status_str(FERRY_WC_SUCCESS),
			 ferry_wc_status_str(FERRY_WC_REM_ACCESS_ERR));
	ck_assert_str_ne(ferry_wc_status_str(FERRY_WC_WR_FLUSH_ERR),
			 ferry_wc_status_str(FERRY_WC_RNR_RETRY_EXC_ERR));
	/* out of range values still give a string */
	ck_assert_ptr_nonnull(ferry_wc_status_str((enum ferry_wc_status)1000));
	ck_assert_ptr_nonnull(ferry_qp_state_str(FERRY_QPS_RTS));
	ck_assert_str_ne(ferry_qp_state_str(FERRY_QPS_RTS),
			 ferry_qp_state_str(FERRY_QPS_ERR));
	ck_assert_ptr_nonnull(ferry_qp_state_str((enum ferry_qp_state)1000));
}
END_TEST

/*
 * shm: a PD's MR table (its primary, in the arena's private pool) is
 * reused by the next PD with every slot's key generation kept, so a key
 * of the first PD opens nothing of the second.
 */
START_TEST(test_arena_table_reuse)
{
	struct ferry_context *ctx = ferry_open_transport("shm");
	char *buf = ferry_alloc(4096);
	struct ferry_pd *pd;
	struct ferry_mr *mr;
	struct shm_mr_entry *table;
	uint32_t old_key;

	ck_assert_ptr_nonnull(ctx);
	ck_assert_ptr_nonnull(buf);
	pd = ferry_alloc_pd(ctx);
	ck_assert_ptr_nonnull(pd);
	table = to_spd(pd)->table;
	mr = ferry_reg_mr(pd, buf, 4096, FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE);
	ck_assert_ptr_nonnull(mr);
	old_key = mr->rkey;
	ck_assert_int_eq(ferry_dereg_mr(mr), 0);
	ck_assert_int_eq(ferry_dealloc_pd(pd), 0);

	pd = ferry_alloc_pd(ctx);
	ck_assert_ptr_nonnull(pd);
	ck_assert_ptr_eq(to_spd(pd)->table, table);	/* the same piece, reused */
	mr = ferry_reg_mr(pd, buf, 4096, FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE);
	ck_assert_ptr_nonnull(mr);
	ck_assert_uint_eq(SHM_KEY_INDEX(mr->rkey), SHM_KEY_INDEX(old_key));
	ck_assert_uint_ne(mr->rkey, old_key);
	ck_assert_int_eq(ferry_dereg_mr(mr), 0);
	ck_assert_int_eq(ferry_dealloc_pd(pd), 0);
	ferry_free(buf);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

/* Notify words: a cache line each, in one segment, zero when handed out. */
START_TEST(test_arena_notify)
{
	struct ferry_context *ctx = ferry_open_transport("shm");
	struct ferry_cq *a, *b;
	struct shm_cq *sa, *sb;
	uintptr_t d;

	ck_assert_ptr_nonnull(ctx);
	a = ferry_create_cq(ctx, 4, NULL, NULL, 0);
	b = ferry_create_cq(ctx, 4, NULL, NULL, 0);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	sa = to_scq(a);
	sb = to_scq(b);
	ck_assert_ptr_eq(sa->notify_piece.seg, sb->notify_piece.seg);
	d = (uintptr_t)sa->notify > (uintptr_t)sb->notify ?
	    (uintptr_t)sa->notify - (uintptr_t)sb->notify :
	    (uintptr_t)sb->notify - (uintptr_t)sa->notify;
	ck_assert_uint_ge(d, 64);
	ck_assert_uint_eq((uintptr_t)sa->notify % 64, 0);
	ck_assert_int_eq(ferry_req_notify_cq(a, 0), 0);
	ck_assert_uint_ne(atomic_load(&sa->notify->word), 0);
	ck_assert_int_eq(ferry_destroy_cq(a), 0);
	a = ferry_create_cq(ctx, 4, NULL, NULL, 0);
	ck_assert_ptr_nonnull(a);
	ck_assert_uint_eq(atomic_load(&to_scq(a)->notify->word), 0);
	ck_assert_int_eq(ferry_destroy_cq(a), 0);
	ck_assert_int_eq(ferry_destroy_cq(b), 0);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

/*
 * After fork the child never hands out its parent's pieces: neither the
 * parent's free ones nor one it gives back itself.
 */
START_TEST(test_arena_fork)
{
	struct shm_piece mine, kept, other;
	uint8_t *mine_addr;
	int status;
	pid_t pid;

	ck_assert_int_eq(shm_arena_get(NULL, 64, SHM_PIECE_NOTIFY, &mine), 0);
	ck_assert_int_eq(shm_arena_get(NULL, 64, SHM_PIECE_NOTIFY, &kept), 0);
	mine_addr = mine.addr;
	shm_arena_put(&mine, 64);	/* free in the parent */
	pid = tu_fork_quiet();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct shm_piece p;
		int ok = 1;

		shm_arena_put(&kept, 64);	/* the parent's: not ours to reuse */
		for (int i = 0; i < 64 && ok; i++)
			ok = shm_arena_get(NULL, 64, SHM_PIECE_NOTIFY, &p) == 0 && p.seg != kept.seg;
		_exit(ok ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ck_assert_int_eq(shm_arena_get(NULL, 64, SHM_PIECE_NOTIFY, &other), 0);
	ck_assert_ptr_eq(other.addr, mine_addr);	/* the parent's free list is intact */
	shm_arena_put(&other, 64);
	shm_arena_put(&kept, 64);
}
END_TEST

/* Post one 256-byte SEND a -> b (b's receive posted first); a's completion. */
static void arena_send_one(struct tu_end *a, struct tu_end *b, unsigned int seed)
{
	struct ferry_wc wc;

	ck_assert_int_eq(tu_post_recv1(b->qp, 2, b->buf, 256, b->mr->lkey), 0);
	tu_fill(a->buf, 256, seed);
	ck_assert_int_eq(tu_post_send1(a->qp, 1, FERRY_WR_SEND, FERRY_SEND_SIGNALED,
				       a->buf, 256, a->mr->lkey, 0, 0), 0);
	tu_poll1(a->send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
}

/*
 * A region outlives its QP for as long as the peer has not let go of it:
 * the peer still finds the deliveries made before the QP was destroyed,
 * even after other connections came and went (and would have taken the
 * region had it been given back), and once the peer lets go the region
 * serves the next connection, cleared.
 */
START_TEST(test_arena_region_outlives_qp)
{
	struct tu_end a, b, c, d;
	struct ferry_wc wc;
	void *region_a;
	bool seen = false;

	tu_pair_open(&a, &b, NULL);
	arena_send_one(&a, &b, 11);
	region_a = to_sqp(a.qp)->region;
	tu_end_close(&a);

	for (int i = 0; i < 3; i++) {
		tu_pair_open(&c, &d, NULL);
		ck_assert_ptr_ne(to_sqp(c.qp)->region, region_a);
		ck_assert_ptr_ne(to_sqp(d.qp)->region, region_a);
		arena_send_one(&c, &d, 20 + i);
		tu_poll1(d.recv_cq, &wc);
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
		tu_pair_close(&c, &d);
	}

	/* b takes the message a sent before it went away */
	tu_poll1(b.recv_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
	ck_assert_uint_eq(wc.byte_len, 256);
	ck_assert(tu_check(b.buf, 256, 11));
	tu_end_close(&b);	/* b lets go: a's region is free now */

	for (int i = 0; i < 4 && !seen; i++) {
		tu_pair_open(&c, &d, NULL);
		seen = to_sqp(c.qp)->region == region_a || to_sqp(d.qp)->region == region_a;
		arena_send_one(&d, &c, 40 + i);
		tu_poll1(c.recv_cq, &wc);
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
		ck_assert(tu_check(c.buf, 256, 40 + i));
		arena_send_one(&c, &d, 50 + i);
		tu_poll1(d.recv_cq, &wc);
		ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
		ck_assert(tu_check(d.buf, 256, 50 + i));
		tu_assert_cq_empty(c.recv_cq);
		tu_assert_cq_empty(d.recv_cq);
		tu_pair_close(&c, &d);
	}
	ck_assert(seen);
}
END_TEST

/*
 * A region handed to a new connection keeps none of its last owner's
 * receives: a receive without SGEs (what sockets post) is not written on
 * the ring's first lap, since a region starts zeroed -- so a reused one
 * must be zeroed too.  Its last owner posted receives with an SGE into
 * the same slots; were they left, a SEND into the new 0-SGE receive would
 * be scattered into the old buffer (gone: the sender fails it) instead of
 * completing with 0 bytes.
 */
static void arena_post_recv0(struct ferry_qp *qp, uint64_t wr_id)
{
	struct ferry_recv_wr wr = { .wr_id = wr_id }, *bad = NULL;

	ck_assert_int_eq(ferry_post_recv(qp, &wr, &bad), 0);
}

START_TEST(test_arena_region_reused_clean)
{
	struct tu_end a, b;
	struct ferry_wc wc;
	void *old[2];
	bool seen = false;

	tu_pair_open(&a, &b, NULL);
	arena_send_one(&a, &b, 1);
	arena_send_one(&b, &a, 2);
	for (int i = 0; i < 4; i++) {	/* more receives with SGEs, unused */
		ck_assert_int_eq(tu_post_recv1(a.qp, 3, a.buf, 256, a.mr->lkey), 0);
		ck_assert_int_eq(tu_post_recv1(b.qp, 3, b.buf, 256, b.mr->lkey), 0);
	}
	old[0] = to_sqp(a.qp)->region;
	old[1] = to_sqp(b.qp)->region;
	tu_pair_close(&a, &b);

	for (int i = 0; i < 4 && !seen; i++) {
		tu_pair_open(&a, &b, NULL);
		seen = to_sqp(a.qp)->region == old[0] || to_sqp(a.qp)->region == old[1] ||
		       to_sqp(b.qp)->region == old[0] || to_sqp(b.qp)->region == old[1];
		for (int k = 0; k < 5; k++) {
			arena_post_recv0(a.qp, 10 + k);
			arena_post_recv0(b.qp, 10 + k);
			ck_assert_int_eq(tu_post_send1(a.qp, 20 + k, FERRY_WR_SEND,
						       FERRY_SEND_SIGNALED, NULL, 0, 0, 0, 0), 0);
			ck_assert_int_eq(tu_post_send1(b.qp, 20 + k, FERRY_WR_SEND,
						       FERRY_SEND_SIGNALED, NULL, 0, 0, 0, 0), 0);
			tu_poll1(a.send_cq, &wc);
			ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
			tu_poll1(b.send_cq, &wc);
			ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
			tu_poll1(a.recv_cq, &wc);
			ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
			ck_assert_uint_eq(wc.byte_len, 0);
			tu_poll1(b.recv_cq, &wc);
			ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
			ck_assert_uint_eq(wc.byte_len, 0);
		}
		tu_pair_close(&a, &b);
	}
	ck_assert(seen);
}
END_TEST

/* Mappings of "ferry-test-seg" files in /proc/self/maps. */
static int arena_test_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, "memfd:ferry-test-seg") != NULL;
	fclose(f);
	return n;
}

/*
 * A peer's segment stays mapped while unused, up to SHM_KEEP_IDLE of them:
 * the next connection to that peer finds it mapped; past the limit the
 * ones unused the longest go.
 */
START_TEST(test_arena_peer_maps_kept)
{
	enum { N = SHM_KEEP_IDLE + 4 };
	struct shm_mapping *m[N], *again;
	const void *p[N], *q;
	int fd[N];

	for (int i = 0; i < N; i++) {
		fd[i] = ferry_memfd_create("ferry-test-seg", 1 << 20);
		ck_assert_int_ge(fd[i], 0);
		m[i] = shm_arena_map_peer(fd[i], 4096, 64, &p[i]);
		ck_assert_ptr_nonnull(m[i]);
	}
	ck_assert_int_eq(arena_test_maps(), N);
	for (int i = 0; i < N; i++)
		shm_unmap(m[i]);
	ck_assert_int_eq(arena_test_maps(), SHM_KEEP_IDLE);
	/* the last one given up is still there, at the same place */
	again = shm_arena_map_peer(fd[N - 1], 4096, 64, &q);
	ck_assert_ptr_eq(again, m[N - 1]);
	ck_assert_ptr_eq(q, p[N - 1]);
	ck_assert_int_eq(arena_test_maps(), SHM_KEEP_IDLE);
	shm_unmap(again);
	/* a piece outside the file is refused */
	ck_assert_ptr_null(shm_arena_map_peer(fd[0], (1 << 20) - 32, 64, &q));
	for (int i = 0; i < N; i++)
		close(fd[i]);
}
END_TEST

/*
 * A piece serves one kind of object only: none sees another kind's
 * leftovers.  One given back unzeroed (as a recycled region is) says so
 * to its next owner; one given back with its dirty bytes reads 0.
 */
START_TEST(test_arena_kinds_apart)
{
	struct shm_piece r, t;
	uint8_t *addr;

	ck_assert_int_eq(shm_arena_get(NULL, 1 << 20, SHM_PIECE_REGION, &r), 0);
	ck_assert(r.zero);
	ck_assert(tu_all_bytes(r.addr, r.size, 0));
	addr = r.addr;
	memset(addr + 8192, 0xa5, 64);
	shm_arena_put(&r, SHM_PIECE_UNZEROED);
	ck_assert_int_eq(shm_arena_get(NULL, 1 << 20, SHM_PIECE_TABLE, &t), 0);
	ck_assert_ptr_ne(t.addr, addr);
	ck_assert(t.zero);
	shm_arena_put(&t, 0);
	ck_assert_int_eq(shm_arena_get(NULL, 1 << 20, SHM_PIECE_REGION, &r), 0);
	ck_assert_ptr_eq(r.addr, addr);	/* its own kind gets it back */
	ck_assert(!r.zero);
	ck_assert(tu_all_bytes(addr + 8192, 64, 0xa5));
	shm_arena_put(&r, 8192 + 64);
	ck_assert_int_eq(shm_arena_get(NULL, 1 << 20, SHM_PIECE_REGION, &r), 0);
	ck_assert_ptr_eq(r.addr, addr);
	ck_assert(r.zero);
	ck_assert(tu_all_bytes(r.addr, r.size, 0));
	shm_arena_put(&r, 0);
}
END_TEST

/*
 * Small pieces of one kind are cut from a page of their own: the small
 * MR tables of two PDs share a page though a large region was handed out
 * between them (bump allocation alone gave each its own page).
 */
START_TEST(test_arena_small_pieces_share_pages)
{
	struct shm_piece t1, r, t2;
	long page = sysconf(_SC_PAGESIZE);

	ck_assert_int_eq(shm_arena_get(NULL, 128, SHM_PIECE_TABLE, &t1), 0);
	ck_assert_int_eq(shm_arena_get(NULL, 1 << 16, SHM_PIECE_REGION, &r), 0);
	ck_assert_int_eq(shm_arena_get(NULL, 128, SHM_PIECE_TABLE, &t2), 0);
	ck_assert_ptr_eq(t1.seg, t2.seg);
	ck_assert_uint_eq(t1.off / (size_t)page, t2.off / (size_t)page);
	ck_assert_uint_ne(t1.off, t2.off);
	ck_assert(r.off + r.size <= t1.off || t1.off + t1.size <= r.off);
	shm_arena_put(&t2, 0);
	shm_arena_put(&r, 0);
	shm_arena_put(&t1, 0);
}
END_TEST

/*
 * A PD sized for one MR with remote access (a stream socket's) has a
 * table of two slots; MRs without remote access go to its private table,
 * whose keys no peer table has.
 */
START_TEST(test_small_pd_tables)
{
	struct ferry_context *ctx = ferry_open_transport("shm");
	char *buf = ferry_alloc(8192);
	struct ferry_mr *remote, *local[20];
	struct ferry_pd *pd;
	int i;

	ck_assert_ptr_nonnull(ctx);
	ck_assert_ptr_nonnull(buf);
	pd = ferry_alloc_pd_small(ctx, 1);
	ck_assert_ptr_nonnull(pd);
	ck_assert_uint_eq(to_spd(pd)->table_entries, 2);
	ck_assert_uint_le(to_spd(pd)->table_piece.size, 128);
	remote = ferry_reg_mr(pd, buf, 4096, FERRY_ACCESS_LOCAL_WRITE | FERRY_ACCESS_REMOTE_WRITE);
	ck_assert_ptr_nonnull(remote);
	ck_assert_uint_eq(SHM_KEY_INDEX(remote->rkey), 1);
	/* More local MRs than a first chunk holds: the private table grows. */
	for (i = 0; i < 20; i++) {
		local[i] = ferry_reg_mr(pd, buf + 4096, 4096, FERRY_ACCESS_LOCAL_WRITE);
		ck_assert_ptr_nonnull(local[i]);
		ck_assert(SHM_KEY_INDEX(local[i]->lkey) & SHM_KEY_LOCAL);
		ck_assert_ptr_nonnull(shm_mr_lookup_local(to_spd(pd), local[i]->lkey));
	}
	ck_assert_ptr_null(atomic_load(&to_spd(pd)->xtable));
	ck_assert_int_eq(ferry_dealloc_pd(pd), -1);	/* MRs remain */
	ck_assert_int_eq(errno, EBUSY);
	for (i = 0; i < 20; i++)
		ck_assert_int_eq(ferry_dereg_mr(local[i]), 0);
	ck_assert_int_eq(ferry_dereg_mr(remote), 0);
	ck_assert_int_eq(ferry_dealloc_pd(pd), 0);
	ferry_free(buf);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

Suite *objects_suite(void)
{
	Suite *s = suite_create("objects");
	TCase *tc;

	tc = tcase_create("device");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_device_list);
	tcase_add_test(tc, test_open_device);
	tcase_add_test(tc, test_open_transport);
	tcase_add_test(tc, test_null_arguments);
	tcase_add_test(tc, test_strings);
	suite_add_tcase(s, tc);

	tc = tcase_create("memory");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_pd);
	tcase_add_test(tc, test_alloc);
	tcase_add_test(tc, test_mr);
	tcase_add_test(tc, test_mr_errors);
	suite_add_tcase(s, tc);

	tc = tcase_create("cq_qp");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_cq);
	tcase_add_test(tc, test_qp_create);
	tcase_add_test(tc, test_qp_create_errors);
	tcase_add_test(tc, test_post_in_reset);
	suite_add_tcase(s, tc);

	if (tu_on_shm()) {
		tc = tcase_create("shm_arena");
		tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
		tcase_add_test(tc, test_arena_table_reuse);
		tcase_add_test(tc, test_arena_notify);
		tcase_add_test(tc, test_arena_fork);
		tcase_add_test(tc, test_arena_region_outlives_qp);
		tcase_add_test(tc, test_arena_region_reused_clean);
		tcase_add_test(tc, test_arena_peer_maps_kept);
		tcase_add_test(tc, test_arena_kinds_apart);
		tcase_add_test(tc, test_arena_small_pieces_share_pages);
		tcase_add_test(tc, test_small_pd_tables);
		suite_add_tcase(s, tc);
	}
	return s;
}
