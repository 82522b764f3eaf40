/*
 * check_query.c - the queries an ibverbs program makes before it joins
 * its QPs itself: device (plain and extended), port, GID, P_Key, and the
 * QP's address vector as it was set.  On shm, the LID and GID rules of
 * ferry(7): held, unique among live processes, a child's own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>
#include <ferry/verbs.h>

#include "check_suites.h"
#include "testutil.h"
#include "shm-internal.h"

static struct ferry_context *qt_open(void)
{
	struct ferry_context *ctx = ferry_open_transport(tu_transport());

	ck_assert_ptr_nonnull(ctx);
	return ctx;
}

/* A LID of this process's, through a pipe from a child (no Check there). */
static uint16_t qt_child_lid(void)
{
	struct ferry_port_attr pa;
	uint16_t lid = 0;
	int p[2], status;
	pid_t pid;

	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct ferry_context *ctx = ferry_open_transport("shm");

		if (ctx && ferry_query_port(ctx, 1, &pa) == 0)
			lid = pa.lid;
		if (ctx)
			ferry_close_device(ctx);
		_exit(write(p[1], &lid, sizeof(lid)) == sizeof(lid) ? 0 : 1);
	}
	close(p[1]);
	ck_assert_int_eq(read(p[0], &lid, sizeof(lid)), sizeof(lid));
	close(p[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return lid;
}

START_TEST(test_query_device)
{
	struct ferry_context *ctx = qt_open();
	struct ferry_device_attr attr;

	ck_assert_int_eq(ferry_query_device(ctx, &attr), 0);
	ck_assert_int_ge(attr.phys_port_cnt, 1);
	ck_assert_int_ge(attr.max_pkeys, 1);
	ck_assert_int_gt(attr.max_qp, 0);
	ck_assert_int_gt(attr.max_sge_rd, 0);
	ck_assert_int_ge(attr.max_qp_init_rd_atom, 1);
	if (tu_on_shm()) {
		/* SRQs (shm_srq.c): as deep as a QP's queue, and resizable. */
		ck_assert_int_gt(attr.max_srq, 0);
		ck_assert_int_eq(attr.max_srq_wr, attr.max_qp_wr);
		ck_assert_int_eq(attr.max_srq_sge, attr.max_sge);
		ck_assert_uint_ne(attr.device_cap_flags & FERRY_DEVICE_SRQ_RESIZE, 0);
		ck_assert_int_eq(attr.atomic_cap, FERRY_ATOMIC_GLOB);
		ck_assert_uint_ne(attr.device_cap_flags & FERRY_DEVICE_RC_RNR_NAK_GEN, 0);
		ck_assert_uint_eq(attr.page_size_cap & (uint64_t)sysconf(_SC_PAGESIZE),
				  (uint64_t)sysconf(_SC_PAGESIZE));
		ck_assert_ptr_nonnull(strstr(attr.fw_ver, "ferry"));
	}
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

START_TEST(test_query_device_ex)
{
	struct ferry_context *ctx = qt_open();
	struct ferry_query_device_ex_input in = { .comp_mask = 0 };
	struct ferry_device_attr_ex ex;
	struct ferry_device_attr attr;

	ck_assert_int_eq(ferry_query_device(ctx, &attr), 0);
	memset(&ex, 0xa5, sizeof(ex));
	ck_assert_int_eq(ferry_query_device_ex(ctx, NULL, &ex), 0);
	ck_assert_int_eq(ex.orig_attr.max_qp, attr.max_qp);
	ck_assert_int_eq(ex.orig_attr.max_srq, attr.max_srq);
	ck_assert_uint_ge(ex.phys_port_cnt_ex, 1);
	ck_assert_int_eq(ferry_query_device_ex(ctx, &in, &ex), 0);
	if (tu_on_shm()) {
		ck_assert_uint_eq(ex.odp_caps.general_caps, 0);
		ck_assert_uint_eq(ex.device_cap_flags_ex, 0);
		ck_assert_uint_eq(ex.comp_mask, 0);
	}
	/* Input bits nobody knows are refused, as ibverbs does. */
	in.comp_mask = 1;
	errno = 0;
	ck_assert_int_eq(ferry_query_device_ex(ctx, &in, &ex), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_query_device_ex(ctx, NULL, NULL), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

START_TEST(test_query_port)
{
	struct ferry_context *ctx = qt_open();
	struct ferry_port_attr pa;

	memset(&pa, 0xa5, sizeof(pa));
	ck_assert_int_eq(ferry_query_port(ctx, 1, &pa), 0);
	ck_assert_int_eq(pa.state, FERRY_PORT_ACTIVE);
	ck_assert_int_ge(pa.active_mtu, FERRY_MTU_256);
	ck_assert_int_le(pa.active_mtu, pa.max_mtu);
	ck_assert_int_ge(pa.gid_tbl_len, 1);
	ck_assert_uint_ge(pa.pkey_tbl_len, 1);
	ck_assert_str_eq(ferry_port_state_str(pa.state), "active");
	ck_assert_str_eq(ferry_port_state_str((enum ferry_port_state)99), "unknown");
	if (tu_on_shm()) {
		ck_assert_uint_eq(pa.link_layer, FERRY_LINK_LAYER_INFINIBAND);
		ck_assert_uint_ge(pa.lid, 1);
		ck_assert_uint_le(pa.lid, 0xbfff);
		ck_assert_int_eq(pa.max_mtu, FERRY_MTU_4096);
	}
	errno = 0;
	ck_assert_int_eq(ferry_query_port(ctx, 0, &pa), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_query_port(ctx, 200, &pa), -1);
	ck_assert_int_ne(errno, 0);
	errno = 0;
	ck_assert_int_eq(ferry_query_port(NULL, 1, &pa), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_query_port(ctx, 1, NULL), -1);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

START_TEST(test_query_gid_pkey)
{
	struct ferry_context *ctx = qt_open();
	union ferry_gid gid, again;
	uint16_t pkey;

	ck_assert_int_eq(ferry_query_gid(ctx, 1, 0, &gid), 0);
	ck_assert_int_eq(ferry_query_gid(ctx, 1, 0, &again), 0);
	ck_assert_mem_eq(gid.raw, again.raw, sizeof(gid.raw));	/* stable */
	ck_assert_int_eq(ferry_query_pkey(ctx, 1, 0, &pkey), 0);
	if (tu_on_shm())
		ck_assert_uint_eq(ntohs(pkey), 0xffff);
	errno = 0;
	ck_assert_int_eq(ferry_query_gid(ctx, 1, -1, &gid), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_query_gid(ctx, 1, 100000, &gid), -1);
	ck_assert_int_ne(errno, 0);
	errno = 0;
	ck_assert_int_eq(ferry_query_pkey(ctx, 0, 0, &pkey), -1);
	ck_assert_int_eq(errno, EINVAL);
	errno = 0;
	ck_assert_int_eq(ferry_query_pkey(ctx, 1, 100000, &pkey), -1);
	ck_assert_int_ne(errno, 0);
	ck_assert_int_eq(ferry_query_gid(ctx, 1, 0, NULL), -1);
	ck_assert_int_eq(ferry_query_pkey(ctx, 1, 0, NULL), -1);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

/* shm: the GID is prefix, network namespace, LID -- ferry(7). */
START_TEST(test_shm_gid_layout)
{
	struct ferry_context *ctx = ferry_open_transport("shm");
	struct ferry_port_attr pa;
	union ferry_gid gid;
	struct stat st;
	uint32_t netns;

	ck_assert_ptr_nonnull(ctx);
	ck_assert_int_eq(ferry_query_port(ctx, 1, &pa), 0);
	ck_assert_int_eq(ferry_query_gid(ctx, 1, 0, &gid), 0);
	ck_assert_uint_eq(gid.raw[0], 0xfd);
	ck_assert_mem_eq(&gid.raw[1], "fry", 3);
	memcpy(&netns, &gid.raw[4], sizeof(netns));
	if (stat("/proc/self/ns/net", &st) == 0)
		ck_assert_uint_eq(ntohl(netns), (uint32_t)st.st_ino);
	ck_assert_uint_eq(gid.raw[8] | gid.raw[9] | gid.raw[10] | gid.raw[11] |
			  gid.raw[12] | gid.raw[13], 0);
	ck_assert_uint_eq(((unsigned int)gid.raw[14] << 8) | gid.raw[15], pa.lid);
	/* rc_pingpong-style programs take a zero interface id for "no GID". */
	ck_assert_uint_ne(gid.global.interface_id, 0);
	ck_assert_int_eq(ferry_query_gid(ctx, 1, 1, &gid), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

/* shm: the LID's name is held while the process lives, by it alone. */
START_TEST(test_shm_lid_held)
{
	struct ferry_context *ctx = ferry_open_transport("shm");
	struct ferry_port_attr pa;
	struct sockaddr_un un;
	socklen_t len;
	int fd;

	ck_assert_ptr_nonnull(ctx);
	ck_assert_int_eq(ferry_query_port(ctx, 1, &pa), 0);
	len = shm_port_lid_name(pa.lid, &un);
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&un, len), -1);
	ck_assert_int_eq(errno, EADDRINUSE);
	close(fd);
	/* Another context of the same process: the same address. */
	{
		struct ferry_context *ctx2 = ferry_open_transport("shm");
		struct ferry_port_attr pa2;

		ck_assert_int_eq(ferry_query_port(ctx2, 1, &pa2), 0);
		ck_assert_uint_eq(pa2.lid, pa.lid);
		ck_assert_int_eq(ferry_close_device(ctx2), 0);
	}
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

/* shm: two live processes never share a LID; a forked child has its own. */
START_TEST(test_shm_lid_per_process)
{
	struct ferry_context *ctx = ferry_open_transport("shm");
	struct ferry_port_attr pa;
	uint16_t child;

	ck_assert_ptr_nonnull(ctx);
	ck_assert_int_eq(ferry_query_port(ctx, 1, &pa), 0);
	child = qt_child_lid();	/* the child inherited our claim */
	ck_assert_uint_ge(child, 1);
	ck_assert_uint_ne(child, pa.lid);
	ck_assert_int_eq(ferry_query_port(ctx, 1, &pa), 0);	/* ours is still ours */
	ck_assert_int_eq(ferry_close_device(ctx), 0);
}
END_TEST

/*
 * shm: a squatter on the LID a process would take first only moves it on.
 * The first try is 1 + pid % 0xbfff; a forked child squats its own.
 */
START_TEST(test_shm_lid_squatted)
{
	int p[2], status;
	uint16_t lid[2];
	pid_t pid;

	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct ferry_context *ctx = ferry_open_transport("shm");
		struct sockaddr_un un;
		struct ferry_port_attr pa;
		int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

		lid[0] = (uint16_t)(1 + (uint32_t)getpid() % 0xbfff);
		lid[1] = 0;
		if (fd >= 0 && bind(fd, (struct sockaddr *)&un, shm_port_lid_name(lid[0], &un)) == 0 &&
		    ctx && ferry_query_port(ctx, 1, &pa) == 0)
			lid[1] = pa.lid;
		if (ctx)
			ferry_close_device(ctx);
		if (fd >= 0)
			close(fd);
		_exit(write(p[1], lid, sizeof(lid)) == sizeof(lid) ? 0 : 1);
	}
	close(p[1]);
	ck_assert_int_eq(read(p[0], lid, sizeof(lid)), sizeof(lid));
	close(p[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_uint_ne(lid[1], 0);
	ck_assert_uint_ne(lid[1], lid[0]);
}
END_TEST

/* query_qp gives back the address vector modify_qp was given. */
START_TEST(test_query_qp_av)
{
	struct tu_end a, b;
	struct ferry_qp_attr attr, got;
	struct ferry_qp_init_attr init;
	union ferry_gid gid;
	struct ferry_port_attr pa;
	int rc;

	tu_pair_open(&a, &b, NULL);
	ck_assert_int_eq(ferry_query_port(a.ctx, 1, &pa), 0);
	ck_assert_int_eq(ferry_query_gid(a.ctx, 1, 0, &gid), 0);
	ck_assert_int_eq(ferry_query_qp(a.qp, &got, FERRY_QP_AV, &init), 0);
	ck_assert_uint_eq(got.ah_attr.port_num, 1);
	ck_assert_uint_ne(got.dest_qp_num, 0);
	/* SQD -> SQD is where ibverbs takes a new AV from a connected QP. */
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_SQD;
	rc = ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE);
	if (rc != 0 && !tu_on_shm()) {
		printf("SKIP test_query_qp_av (AV) on %s: no SQD here\n", tu_transport());
		tu_pair_close(&a, &b);
		return;
	}
	ck_assert_int_eq(rc, 0);
	attr.ah_attr.is_global = 1;
	attr.ah_attr.dlid = pa.lid;
	attr.ah_attr.sl = 3;
	attr.ah_attr.port_num = 1;
	attr.ah_attr.grh.dgid = gid;
	attr.ah_attr.grh.hop_limit = 7;
	rc = ferry_modify_qp(a.qp, &attr, FERRY_QP_STATE | FERRY_QP_AV);
	if (tu_on_shm())
		ck_assert_int_eq(rc, 0);
	/* verbs: the device's AV, which the exchange gave it (the peer's
	 * LID and GID), whatever the caller passed. */
	if (rc == 0 && tu_on_shm()) {
		ck_assert_int_eq(ferry_query_qp(a.qp, &got, FERRY_QP_AV, &init), 0);
		ck_assert_uint_eq(got.ah_attr.dlid, pa.lid);
		ck_assert_uint_eq(got.ah_attr.sl, 3);
		ck_assert_uint_eq(got.ah_attr.is_global, 1);
		ck_assert_uint_eq(got.ah_attr.grh.hop_limit, 7);
		ck_assert_mem_eq(got.ah_attr.grh.dgid.raw, gid.raw, 16);
	}
	tu_pair_close(&a, &b);
}
END_TEST

Suite *query_suite(void)
{
	Suite *s = suite_create("query");
	TCase *tc = tcase_create("device");

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_query_device);
	tcase_add_test(tc, test_query_device_ex);
	tcase_add_test(tc, test_query_port);
	tcase_add_test(tc, test_query_gid_pkey);
	tcase_add_test(tc, test_query_qp_av);
	suite_add_tcase(s, tc);

	tc = tcase_create("shm_address");
	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_shm_gid_layout);
	tcase_add_test(tc, test_shm_lid_held);
	tcase_add_test(tc, test_shm_lid_per_process);
	tcase_add_test(tc, test_shm_lid_squatted);
	suite_add_tcase(s, tc);
	return s;
}
