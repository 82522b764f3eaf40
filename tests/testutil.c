/*
 * testutil.c - helpers for the Check suites (see testutil.h).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include <check.h>

#include "core-export.h"
#include "testutil.h"

bool tu_under_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD");

	return p && strstr(p, "vgpreload");
}

uint64_t tu_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void tu_sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

const char *tu_transport(void)
{
	const char *name = getenv("FERRY_TRANSPORT");

	return name && *name ? name : "shm";
}

bool tu_on_shm(void)
{
	return strcmp(tu_transport(), "shm") == 0;
}

/* The node type sysfs gives the RDMA device @name (4: an RNIC), or -1. */
static int tu_sysfs_node_type(const char *name)
{
	char path[256];
	int type = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/node_type", name);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%d", &type) != 1)
			type = -1;
		fclose(f);
	}
	return type;
}

bool tu_on_iwarp(void)
{
	struct ferry_device **list;
	const char *name = NULL;
	bool iwarp = false;
	int n = 0, i;

	if (strcmp(tu_transport(), "verbs") != 0)
		return false;
	list = ferry_get_device_list(&n);
	for (i = 0; list && i < n && !name; i++) {
		if (strncmp(ferry_get_device_name(list[i]), "verbs:", 6) == 0)
			name = ferry_get_device_name(list[i]) + 6;
	}
	if (name)
		iwarp = tu_sysfs_node_type(name) == 4;
	if (list)
		ferry_free_device_list(list);
	return iwarp;
}

/* Build an end; returns NULL on success or a description of what failed. */
static const char *tu_end_build(struct tu_end *e, const struct tu_opts *o)
{
	static const struct tu_opts defaults;
	struct ferry_qp_init_attr init;
	int cqe, access;

	if (!o)
		o = &defaults;
	memset(e, 0, sizeof(*e));
	cqe = o->cqe ? o->cqe : 256;
	access = o->mr_access ? o->mr_access : TU_ACCESS_ALL;
	e->len = o->buf_len ? o->buf_len : 65536;

	/* FERRY_TRANSPORT chooses the provider (shm unless set). */
	e->ctx = ferry_open_transport(NULL);
	if (!e->ctx)
		return "ferry_open_transport(NULL)";
	e->pd = o->pd_max_remote ? ferry_alloc_pd_small(e->ctx, o->pd_max_remote) :
				   ferry_alloc_pd(e->ctx);
	if (!e->pd)
		return "ferry_alloc_pd";
	if (o->channel) {
		e->channel = ferry_create_comp_channel(e->ctx);
		if (!e->channel)
			return "ferry_create_comp_channel";
	}
	e->send_cq = ferry_create_cq(e->ctx, cqe, e, e->channel, 0);
	if (!e->send_cq)
		return "ferry_create_cq";
	e->recv_cq = e->send_cq;
	if (o->split_cq) {
		e->recv_cq = ferry_create_cq(e->ctx, cqe, e, e->channel, 0);
		if (!e->recv_cq)
			return "ferry_create_cq (recv)";
	}

	e->buf_malloc = o->malloc_buf;
	if (o->malloc_buf) {
		if (posix_memalign((void **)&e->buf, 4096, e->len))
			e->buf = NULL;
	} else {
		e->buf = ferry_alloc(e->len);
	}
	if (!e->buf)
		return "buffer allocation";
	memset(e->buf, 0, e->len);
	e->mr = ferry_reg_mr(e->pd, e->buf, e->len, access);
	if (!e->mr)
		return "ferry_reg_mr";

	memset(&init, 0, sizeof(init));
	init.qp_context = e;
	init.send_cq = e->send_cq;
	init.recv_cq = e->recv_cq;
	init.qp_type = FERRY_QPT_RC;
	init.sq_sig_all = o->no_sig_all ? 0 : 1;
	init.cap.max_send_wr = o->max_send_wr ? o->max_send_wr : 64;
	init.cap.max_recv_wr = o->max_recv_wr ? o->max_recv_wr : 64;
	init.cap.max_send_sge = o->max_sge ? o->max_sge : 4;
	init.cap.max_recv_sge = o->max_sge ? o->max_sge : 4;
	init.cap.max_inline_data = o->max_inline;
	e->qp = ferry_create_qp(e->pd, &init);
	if (!e->qp)
		return "ferry_create_qp";
	return NULL;
}

/* Release whatever tu_end_build made; returns the first failing call. */
static const char *tu_end_release(struct tu_end *e)
{
	const char *failed = NULL;

	if (e->qp && ferry_destroy_qp(e->qp))
		failed = "ferry_destroy_qp";
	if (e->mr && ferry_dereg_mr(e->mr) && !failed)
		failed = "ferry_dereg_mr";
	if (e->buf) {
		if (e->buf_malloc)
			free(e->buf);
		else
			ferry_free(e->buf);
	}
	if (e->recv_cq && e->recv_cq != e->send_cq &&
	    ferry_destroy_cq(e->recv_cq) && !failed)
		failed = "ferry_destroy_cq (recv)";
	if (e->send_cq && ferry_destroy_cq(e->send_cq) && !failed)
		failed = "ferry_destroy_cq";
	if (e->channel && ferry_destroy_comp_channel(e->channel) && !failed)
		failed = "ferry_destroy_comp_channel";
	if (e->pd && ferry_dealloc_pd(e->pd) && !failed)
		failed = "ferry_dealloc_pd";
	if (e->ctx && ferry_close_device(e->ctx) && !failed)
		failed = "ferry_close_device";
	memset(e, 0, sizeof(*e));
	return failed;
}

void tu_end_open(struct tu_end *e, const struct tu_opts *o)
{
	const char *failed = tu_end_build(e, o);

	ck_assert_msg(failed == NULL, "%s failed: %s", failed ? failed : "",
		      strerror(errno));
}

void tu_end_close(struct tu_end *e)
{
	const char *failed = tu_end_release(e);

	ck_assert_msg(failed == NULL, "%s failed: %s", failed ? failed : "",
		      strerror(errno));
}

void tu_child_end_open(struct tu_end *e, const struct tu_opts *o)
{
	const char *failed = tu_end_build(e, o);

	if (failed) {
		fprintf(stderr, "child: %s failed: %s\n", failed, strerror(errno));
		_exit(3);
	}
}

void tu_child_connect(struct tu_end *e, const struct tu_opts *o, int sock,
		      struct tu_remote *peer_p)
{
	struct tu_remote mine;

	tu_child_end_open(e, o);
	mine = (struct tu_remote){ (uintptr_t)e->buf, e->len, e->mr->rkey,
				   e->qp->qp_num, 0, 0, 0, 0 };
	TU_CHILD_CHECK(tu_msg_send(sock, &mine, sizeof(mine)) == 0);
	TU_CHILD_CHECK(tu_msg_recv(sock, peer_p, sizeof(*peer_p), TU_WAIT_MS) == 0);
	TU_CHILD_CHECK(ferry_qp_connect_sock(e->qp, sock, TU_QP_ACCESS_ALL) == 0);
}

void tu_child_end_close(struct tu_end *e)
{
	const char *failed = tu_end_release(e);

	if (failed) {
		fprintf(stderr, "child: %s failed: %s\n", failed, strerror(errno));
		_exit(4);
	}
}

/* --- connecting two ends of one process --- */

struct tu_connect_job {
	struct ferry_qp *qp;
	int sock;
	int access;
	bool manual;		/* only ferry_qp_exchange */
	uint32_t peer_qpn;
	int ret;
	int err;
};

static void *tu_connect_thread(void *arg)
{
	struct tu_connect_job *job = arg;

	if (job->manual)
		job->ret = ferry_qp_exchange(job->qp, job->sock, &job->peer_qpn);
	else
		job->ret = ferry_qp_connect_sock(job->qp, job->sock, job->access);
	job->err = errno;
	return NULL;
}

/* Run the connect (or exchange) of both QPs, b's from a helper thread. */
static void tu_pair_run(struct tu_connect_job *ja, struct tu_connect_job *jb)
{
	pthread_t thread;
	int sv[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	ja->sock = sv[0];
	jb->sock = sv[1];
	ck_assert_int_eq(pthread_create(&thread, NULL, tu_connect_thread, jb), 0);
	tu_connect_thread(ja);
	ck_assert_int_eq(pthread_join(thread, NULL), 0);
	close(sv[0]);
	close(sv[1]);
	ck_assert_msg(ja->ret == 0, "connect/exchange (a) failed: %s", strerror(ja->err));
	ck_assert_msg(jb->ret == 0, "connect/exchange (b) failed: %s", strerror(jb->err));
}

void tu_pair_connect(struct tu_end *a, struct tu_end *b, int qp_access)
{
	struct tu_connect_job ja = { .qp = a->qp, .access = qp_access };
	struct tu_connect_job jb = { .qp = b->qp, .access = qp_access };

	tu_pair_run(&ja, &jb);
	ck_assert_int_eq(a->qp->state, FERRY_QPS_RTS);
	ck_assert_int_eq(b->qp->state, FERRY_QPS_RTS);
}

void tu_pair_open(struct tu_end *a, struct tu_end *b, const struct tu_opts *o)
{
	tu_end_open(a, o);
	tu_end_open(b, o);
	tu_pair_connect(a, b, TU_QP_ACCESS_ALL);
}

void tu_pair_close(struct tu_end *a, struct tu_end *b)
{
	tu_end_close(a);
	tu_end_close(b);
}

int tu_qp_to_init(struct ferry_qp *qp, int qp_access)
{
	struct ferry_qp_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = 1;
	attr.qp_access_flags = (unsigned int)qp_access;
	return ferry_modify_qp(qp, &attr, FERRY_QP_STATE | FERRY_QP_PKEY_INDEX |
			       FERRY_QP_PORT | FERRY_QP_ACCESS_FLAGS);
}

int tu_qp_to_rtr(struct ferry_qp *qp, uint32_t dest_qpn, uint8_t min_rnr_timer)
{
	struct ferry_qp_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_RTR;
	attr.path_mtu = FERRY_MTU_1024;
	attr.dest_qp_num = dest_qpn;
	attr.rq_psn = 0;
	attr.max_dest_rd_atomic = 1;
	attr.min_rnr_timer = min_rnr_timer;
	attr.ah_attr.port_num = 1;
	return ferry_modify_qp(qp, &attr, FERRY_QP_STATE | FERRY_QP_AV |
			       FERRY_QP_PATH_MTU | FERRY_QP_DEST_QPN |
			       FERRY_QP_RQ_PSN | FERRY_QP_MAX_DEST_RD_ATOMIC |
			       FERRY_QP_MIN_RNR_TIMER);
}

int tu_qp_to_rts(struct ferry_qp *qp, uint8_t rnr_retry)
{
	struct ferry_qp_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = FERRY_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = rnr_retry;
	attr.sq_psn = 0;
	attr.max_rd_atomic = 1;
	return ferry_modify_qp(qp, &attr, FERRY_QP_STATE | FERRY_QP_TIMEOUT |
			       FERRY_QP_RETRY_CNT | FERRY_QP_RNR_RETRY |
			       FERRY_QP_SQ_PSN | FERRY_QP_MAX_QP_RD_ATOMIC);
}

void tu_pair_connect_manual(struct tu_end *a, struct tu_end *b,
			    uint8_t rnr_retry, uint8_t min_rnr_timer)
{
	struct tu_connect_job ja = { .qp = a->qp, .manual = true };
	struct tu_connect_job jb = { .qp = b->qp, .manual = true };

	ck_assert_int_eq(tu_qp_to_init(a->qp, TU_QP_ACCESS_ALL), 0);
	ck_assert_int_eq(tu_qp_to_init(b->qp, TU_QP_ACCESS_ALL), 0);
	tu_pair_run(&ja, &jb);
	ck_assert_uint_eq(ja.peer_qpn, b->qp->qp_num);
	ck_assert_uint_eq(jb.peer_qpn, a->qp->qp_num);
	ck_assert_int_eq(tu_qp_to_rtr(a->qp, ja.peer_qpn, min_rnr_timer), 0);
	ck_assert_int_eq(tu_qp_to_rtr(b->qp, jb.peer_qpn, min_rnr_timer), 0);
	ck_assert_int_eq(tu_qp_to_rts(a->qp, rnr_retry), 0);
	ck_assert_int_eq(tu_qp_to_rts(b->qp, rnr_retry), 0);
}

/* --- completions --- */

static int tu_poll_raw(struct ferry_cq *cq, struct ferry_wc *wc, int n,
		       int timeout_ms, bool *failed_p)
{
	uint64_t deadline = tu_now_ms() + (uint64_t)timeout_ms;
	int got = 0, spins = 0;

	*failed_p = false;
	while (got < n) {
		int r = ferry_poll_cq(cq, n - got, wc + got);

		if (r < 0) {
			*failed_p = true;
			break;
		}
		got += r;
		if (got >= n || tu_now_ms() >= deadline)
			break;
		if (r == 0 && ++spins > 1000) {
			tu_sleep_ms(1);	/* let a peer on the same core run */
			spins = 0;
		}
	}
	return got;
}

int tu_poll(struct ferry_cq *cq, struct ferry_wc *wc, int n, int timeout_ms)
{
	bool failed;
	int got = tu_poll_raw(cq, wc, n, timeout_ms, &failed);

	ck_assert_msg(!failed, "ferry_poll_cq failed: %s", strerror(errno));
	return got;
}

int tu_child_poll(struct ferry_cq *cq, struct ferry_wc *wc, int n,
		  int timeout_ms)
{
	bool failed;
	int got = tu_poll_raw(cq, wc, n, timeout_ms, &failed);

	TU_CHILD_CHECK(!failed);
	return got;
}

void tu_poll1(struct ferry_cq *cq, struct ferry_wc *wc)
{
	ck_assert_msg(tu_poll(cq, wc, 1, TU_WAIT_MS) == 1,
		      "no completion within %d ms", TU_WAIT_MS);
}

void tu_assert_cq_empty(struct ferry_cq *cq)
{
	struct ferry_wc wc;
	int r = ferry_poll_cq(cq, 1, &wc);

	ck_assert_msg(r == 0, "CQ not empty: poll returned %d (wr_id %llu status %s)",
		      r, r > 0 ? (unsigned long long)wc.wr_id : 0ULL,
		      r > 0 ? ferry_wc_status_str(wc.status) : "-");
}

enum ferry_qp_state tu_qp_state(struct ferry_qp *qp)
{
	struct ferry_qp_attr attr;
	struct ferry_qp_init_attr init;

	memset(&attr, 0, sizeof(attr));
	ck_assert_int_eq(ferry_query_qp(qp, &attr, FERRY_QP_STATE, &init), 0);
	return attr.qp_state;
}

bool tu_wait_qp_state(struct ferry_qp *qp, enum ferry_qp_state state,
		      int timeout_ms)
{
	uint64_t deadline = tu_now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		if (tu_qp_state(qp) == state)
			return true;
		if (tu_now_ms() >= deadline)
			return false;
		tu_sleep_ms(1);
	}
}

/* --- posting --- */

int tu_post_send1(struct ferry_qp *qp, uint64_t wr_id,
		  enum ferry_wr_opcode opcode, unsigned int flags,
		  void *addr, uint32_t len, uint32_t lkey,
		  uint64_t remote_addr, uint32_t rkey)
{
	struct ferry_sge sge = { (uintptr_t)addr, len, lkey };
	struct ferry_send_wr wr, *bad = NULL;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = opcode;
	wr.send_flags = flags;
	wr.wr.rdma.remote_addr = remote_addr;
	wr.wr.rdma.rkey = rkey;
	return ferry_post_send(qp, &wr, &bad);
}

void tu_post_send_ok(struct ferry_qp *qp, struct ferry_send_wr *wr)
{
	struct ferry_send_wr *bad = NULL;

	ck_assert_msg(ferry_post_send(qp, wr, &bad) == 0, "post_send: %s",
		      strerror(errno));
	ck_assert_ptr_null(bad);
}

int tu_post_atomic(struct ferry_qp *qp, uint64_t wr_id,
		   enum ferry_wr_opcode opcode, void *local, uint32_t lkey,
		   uint64_t remote_addr, uint32_t rkey,
		   uint64_t compare_add, uint64_t swap)
{
	struct ferry_sge sge = { (uintptr_t)local, 8, lkey };
	struct ferry_send_wr wr, *bad = NULL;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = opcode;
	wr.send_flags = FERRY_SEND_SIGNALED;
	wr.wr.atomic.remote_addr = remote_addr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	return ferry_post_send(qp, &wr, &bad);
}

int tu_post_recv1(struct ferry_qp *qp, uint64_t wr_id, void *addr,
		  uint32_t len, uint32_t lkey)
{
	struct ferry_sge sge = { (uintptr_t)addr, len, lkey };
	struct ferry_recv_wr wr, *bad = NULL;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ferry_post_recv(qp, &wr, &bad);
}

/* --- data patterns --- */

static unsigned char tu_pattern_byte(size_t i, unsigned int seed)
{
	uint32_t x = (uint32_t)i * 2654435761u + seed * 40503u + seed;

	return (unsigned char)(x >> 13 ^ x >> 5 ^ seed);
}

void tu_fill(void *buf, size_t len, unsigned int seed)
{
	unsigned char *p = buf;

	for (size_t i = 0; i < len; i++)
		p[i] = tu_pattern_byte(i, seed);
}

bool tu_check(const void *buf, size_t len, unsigned int seed)
{
	const unsigned char *p = buf;

	for (size_t i = 0; i < len; i++)
		if (p[i] != tu_pattern_byte(i, seed))
			return false;
	return true;
}

bool tu_all_bytes(const void *buf, size_t len, unsigned char value)
{
	const unsigned char *p = buf;

	for (size_t i = 0; i < len; i++)
		if (p[i] != value)
			return false;
	return true;
}

/* --- fork and control messages --- */

/* Is every thread of this process but the caller asleep (state S)? */
static bool tu_others_asleep(void)
{
	pid_t self = (pid_t)syscall(SYS_gettid);
	bool asleep = true;
	struct dirent *e;
	DIR *d = opendir("/proc/self/task");

	if (!d)
		return true;	/* cannot tell: fork as before */
	while (asleep && (e = readdir(d))) {
		char path[300], buf[512], *paren;
		ssize_t n;
		int fd;

		if (e->d_name[0] == '.' || atoi(e->d_name) == self)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;	/* exited meanwhile */
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		/* "tid (comm) S ...": the state follows the last ')'. */
		paren = strrchr(buf, ')');
		if (paren && paren[1] == ' ' && paren[2] != 'S')
			asleep = false;
	}
	closedir(d);
	return asleep;
}

pid_t tu_fork_quiet(void)
{
	uint64_t deadline = tu_now_ms() + 5000;

	while (!tu_others_asleep() && tu_now_ms() < deadline)
		usleep(200);
	fflush(NULL);
	return fork();
}

pid_t tu_fork(int (*child)(int sock, int ctl, void *arg), void *arg,
	      int *sock_p, int *ctl_p)
{
	int sv[2], cv[2];
	pid_t pid;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, cv), 0);
	pid = tu_fork_quiet();
	ck_assert_int_ne(pid, -1);
	if (pid == 0) {
		close(sv[0]);
		close(cv[0]);
		alarm(60);	/* never outlive a broken test */
		_exit(child(sv[1], cv[1], arg));
	}
	close(sv[1]);
	close(cv[1]);
	*sock_p = sv[0];
	*ctl_p = cv[0];
	return pid;
}

int tu_wait_child(pid_t pid, int timeout_ms)
{
	uint64_t deadline = tu_now_ms() + (uint64_t)timeout_ms;
	int status;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			break;
		if (r == -1 && errno != EINTR)
			return -1;
		if (tu_now_ms() >= deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		tu_sleep_ms(2);
	}
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}

int tu_msg_send(int fd, const void *msg, size_t len)
{
	ssize_t n;

	do
		n = send(fd, msg, len, MSG_NOSIGNAL);
	while (n == -1 && errno == EINTR);
	return n == (ssize_t)len ? 0 : -1;
}

int tu_msg_recv(int fd, void *msg, size_t len, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n;
	int r;

	do
		r = poll(&pfd, 1, timeout_ms);
	while (r == -1 && errno == EINTR);
	if (r != 1)
		return -1;
	do
		n = recv(fd, msg, len, 0);
	while (n == -1 && errno == EINTR);
	return n == (ssize_t)len ? 0 : -1;
}

int tu_send_u32(int fd, uint32_t v)
{
	return tu_msg_send(fd, &v, sizeof(v));
}

int tu_recv_u32(int fd, uint32_t *v, int timeout_ms)
{
	return tu_msg_recv(fd, v, sizeof(*v), timeout_ms);
}
