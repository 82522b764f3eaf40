/*
 * check_hostile_mem.c - attacks on the memory a peer hands us or points us
 * at, each played as the attacker would (issue 13, "Security and
 * isolation" in ferry(7)):
 *
 *   - a memfd sealed against shrinking only, passed small and then grown,
 *     naming a piece far inside: the piece must be refused, never read
 *     past the mapping we have (a crash without the seal and size checks);
 *   - a peer whose receives are plain memory, which exits while a forked
 *     child keeps the connection open, its pid then reused by another
 *     process: the next SEND must reach nothing, never that process;
 *   - the same memory of a live peer: reached when the peer is of our
 *     user, never when it is another user's (root must not write where
 *     TCP would not let it);
 *   - a peer that reads all of every descriptor the server passes it,
 *     looking for another connection's queues, immediate data and MR
 *     entries (of its own user, and of another): it must find none, and
 *     its own connection's all; and the second connection between two
 *     processes shares their pool, mapping nothing new.
 *
 * What a peer may map of our memory, and SENDs between users:
 * check_hostile_window.c.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "check_suites.h"
#include "hmtest.h"
#include "testutil.h"
#include "shm-internal.h"

/* --- a memfd that grows --- */

static int hm_memfd(size_t size, int seals)
{
	int fd = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

/* Read every byte of what a mapping says is there: a fault kills the test. */
static unsigned int hm_touch(const volatile uint8_t *p, size_t len)
{
	unsigned int sum = 0;

	for (size_t i = 0; i < len; i += 512)
		sum += p[i];
	return sum + p[len - 1];
}

START_TEST(test_grown_memfd)
{
	const size_t small = 64 << 10, big = 64 << 20, far = 32 << 20, piece = 4096;
	struct shm_mapping *m1, *m2;
	const void *a1 = NULL, *a2 = NULL;
	int fd = hm_memfd(small, F_SEAL_SHRINK);

	/* First HELLO: a piece of the small file.  Refused: it could grow. */
	m1 = shm_arena_map_peer(fd, 0, piece, &a1);
	if (m1)
		hm_touch(a1, piece);
	/* The peer grows it and names a piece far inside the new size. */
	ck_assert_int_eq(ftruncate(fd, (off_t)big), 0);
	m2 = shm_arena_map_peer(fd, far, piece, &a2);
	if (m2)
		hm_touch(a2, piece);	/* SIGBUS or SIGSEGV past the old mapping */
	ck_assert_msg(!m1 && !m2, "a growable memfd was mapped");
	ck_assert_int_eq(errno, EINVAL);
	close(fd);

	/* Sealed both ways: pieces inside are fine, one past the end is not. */
	fd = hm_memfd(small, F_SEAL_SHRINK | F_SEAL_GROW);
	m1 = shm_arena_map_peer(fd, small - piece, piece, &a1);
	ck_assert_ptr_nonnull(m1);
	hm_touch(a1, piece);
	m2 = shm_arena_map_peer(fd, far, piece, &a2);
	ck_assert_ptr_null(m2);
	/* The same file mapped again (shared mapping): still bounded by it. */
	m2 = shm_arena_map_peer(fd, small - piece / 2, piece, &a2);
	ck_assert_ptr_null(m2);
	shm_unmap(m1);
	close(fd);

	/* A ferry_alloc block a peer passes goes through the same check. */
	fd = hm_memfd(small, F_SEAL_SHRINK);
	ck_assert_ptr_null(shm_map_fd(fd, 1, PROT_READ | PROT_WRITE));
	close(fd);
}
END_TEST

/* --- a reused pid --- */

/* Where the peer's receive buffer and, later, the victim's secret live. */
#define HM_ADDR ((void *)0x6e5a00000000ull)
#define HM_VICTIM 0x5a
#define HM_PAYLOAD 0xee

/* The peer: a receive in plain memory at HM_ADDR, then it exits, leaving a
 * child of its own to hold the connection open. */
static int hm_peer_child(int sock, int ctl, void *arg)
{
	struct tu_remote peer;
	struct ferry_mr *mr;
	struct tu_end e;
	uint8_t *buf;
	pid_t holder;

	(void)arg;
	buf = mmap(HM_ADDR, HM_PAGE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	TU_CHILD_CHECK(buf == HM_ADDR);
	tu_child_connect(&e, &(struct tu_opts){ 0 }, sock, &peer);
	mr = ferry_reg_mr(e.pd, buf, HM_PAGE, FERRY_ACCESS_LOCAL_WRITE);
	TU_CHILD_CHECK(mr != NULL);
	TU_CHILD_CHECK(tu_post_recv1(e.qp, 7, buf, HM_PAGE, mr->lkey) == 0);
	holder = tu_fork_quiet();
	TU_CHILD_CHECK(holder >= 0);
	if (holder == 0) {
		for (;;)
			pause();	/* holds the connection until killed */
	}
	TU_CHILD_CHECK(tu_send_u32(ctl, (uint32_t)holder) == 0);
	/* The receive stays published in the region the parent maps. */
	TU_CHILD_CHECK(ferry_dereg_mr(mr) == 0);
	_exit(0);
}

/* Fork a process that gets pid @want (root: ns_last_pid); it maps a page
 * at HM_ADDR full of HM_VICTIM, says so on @ready, then waits for a byte
 * on @go and exits 0 if the page is intact.  Returns its pid, or -1. */
static pid_t hm_spawn_victim(pid_t want, int ready, int go)
{
	for (int tries = 0; tries < 200; tries++) {
		FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");
		pid_t v;

		if (!f)
			return -1;
		fprintf(f, "%d", (int)want - 1);
		if (fclose(f) != 0)
			return -1;
		v = tu_fork_quiet();
		ck_assert_int_ge(v, 0);
		if (v == 0) {
			uint8_t *p;
			char c;

			if (getpid() != want)
				_exit(3);
			p = mmap(HM_ADDR, HM_PAGE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
			if (p != HM_ADDR)
				_exit(4);
			memset(p, HM_VICTIM, HM_PAGE);
			if (write(ready, "r", 1) != 1 || read(go, &c, 1) != 1)
				_exit(5);
			_exit(tu_all_bytes(p, HM_PAGE, HM_VICTIM) ? 0 : 1);
		}
		if (v == want)
			return v;
		waitpid(v, NULL, 0);	/* someone else took the pid first */
	}
	return -1;
}
START_TEST(test_pid_reuse)
{
	int ctl, status, rp[2], gp[2];
	struct ferry_wc wc;
	struct tu_end e;
	uint32_t holder;
	pid_t cpid, victim;
	char c;

	if (!tu_on_shm())
		HM_SKIP("test_pid_reuse", "cross-memory access is the shm transport's");
	if (geteuid() != 0 || access("/proc/sys/kernel/ns_last_pid", W_OK) != 0)
		HM_SKIP("test_pid_reuse", "needs root to pick the pid of a new process");
	cpid = hm_connect(hm_peer_child, NULL, &e, &ctl, NULL, NULL);
	ck_assert_int_eq(tu_recv_u32(ctl, &holder, TU_WAIT_MS), 0);
	ck_assert_int_eq(waitpid(cpid, &status, 0), cpid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* The peer is gone, its connection held open; its pid comes back. */
	ck_assert_int_eq(pipe(rp), 0);
	ck_assert_int_eq(pipe(gp), 0);
	victim = hm_spawn_victim(cpid, rp[1], gp[0]);
	if (victim < 0) {
		kill((pid_t)holder, SIGKILL);
		tu_end_close(&e);
		HM_SKIP("test_pid_reuse", "the peer's pid could not be had again");
	}
	ck_assert_int_eq(read(rp[0], &c, 1), 1);

	/* A SEND into the peer's receive, at HM_ADDR in "pid cpid". */
	memset(e.buf, HM_PAYLOAD, 64);
	ck_assert_int_eq(tu_post_send1(e.qp, 1, FERRY_WR_SEND, 0, e.buf, 64, e.mr->lkey,
				       0, 0), 0);
	tu_poll1(e.send_cq, &wc);
	ck_assert_int_eq(write(gp[1], "g", 1), 1);
	ck_assert_int_eq(waitpid(victim, &status, 0), victim);
	kill((pid_t)holder, SIGKILL);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the SEND meant for an exited peer was written into pid %d, "
		      "another process (status %#x)", (int)victim, status);
	ck_assert_int_ne(wc.status, FERRY_WC_SUCCESS);
	close(rp[0]);
	close(rp[1]);
	close(gp[0]);
	close(gp[1]);
	close(ctl);
	tu_end_close(&e);
}
END_TEST

/* --- memory outside blocks, of a live peer --- */
/* A peer whose receive and remote-access MR are plain memory at HM_ADDR;
 * it sends their address and rkey on @ctl, waits for the receive, and
 * reports on @ctl whether it arrived (1) or not (0). */
static int hm_plain_child(int sock, int ctl, void *arg)
{
	const struct hm_plain_arg *pa = arg;
	struct tu_remote peer, mine = { 0 };
	struct ferry_mr *mr;
	struct ferry_wc wc;
	struct tu_end e;
	uint8_t *buf;
	int n;

	if (pa->uid)
		TU_CHILD_CHECK(setresgid(pa->uid, pa->uid, pa->uid) == 0 &&
			       setresuid(pa->uid, pa->uid, pa->uid) == 0);
	buf = mmap(HM_ADDR, HM_PAGE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	TU_CHILD_CHECK(buf == HM_ADDR);
	memset(buf, 0, HM_PAGE);
	tu_child_connect(&e, &(struct tu_opts){ 0 }, sock, &peer);
	mr = ferry_reg_mr(e.pd, buf, HM_PAGE, FERRY_ACCESS_LOCAL_WRITE |
			  FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_REMOTE_READ);
	TU_CHILD_CHECK(mr != NULL);
	TU_CHILD_CHECK(tu_post_recv1(e.qp, 7, buf, 64, mr->lkey) == 0);
	mine.addr = (uintptr_t)buf;
	mine.len = HM_PAGE;
	mine.rkey = mr->rkey;
	TU_CHILD_CHECK(tu_msg_send(ctl, &mine, sizeof(mine)) == 0);
	n = tu_child_poll(e.recv_cq, &wc, 1, 3000);
	TU_CHILD_CHECK(tu_send_u32(ctl, n == 1 && wc.status == FERRY_WC_SUCCESS &&
				   tu_all_bytes(buf, 64, HM_PAYLOAD)) == 0);
	TU_CHILD_CHECK(tu_recv_u32(ctl, (uint32_t *)&n, TU_WAIT_MS) == 0);
	TU_CHILD_CHECK(ferry_dereg_mr(mr) == 0);
	_exit(0);
}

/* Connect to a hm_plain_child as @uid; SEND, WRITE and READ its plain
 * memory; true if all three succeeded (and the data is right). */
static bool hm_plain_run(uid_t uid)
{
	struct hm_plain_arg arg = { uid };
	struct tu_remote plain;
	struct ferry_wc wc[3];
	struct tu_end e;
	uint32_t arrived;
	bool ok;
	pid_t pid;
	int ctl;

	pid = hm_connect(hm_plain_child, &arg, &e, &ctl, NULL, NULL);
	ck_assert_int_eq(tu_msg_recv(ctl, &plain, sizeof(plain), TU_WAIT_MS), 0);
	memset(e.buf, HM_PAYLOAD, 64);
	tu_fill(e.buf + 1024, 512, 9);
	ck_assert_int_eq(tu_post_send1(e.qp, 1, FERRY_WR_SEND, 0, e.buf, 64, e.mr->lkey,
				       0, 0), 0);
	tu_poll1(e.send_cq, &wc[0]);
	ck_assert_int_eq(tu_recv_u32(ctl, &arrived, TU_WAIT_MS), 0);
	if (wc[0].status == FERRY_WC_SUCCESS) {
		ck_assert_int_eq(tu_post_send1(e.qp, 2, FERRY_WR_RDMA_WRITE, 0, e.buf + 1024,
					       512, e.mr->lkey, plain.addr + 1024,
					       plain.rkey), 0);
		tu_poll1(e.send_cq, &wc[1]);
		memset(e.buf + 2048, 0, 512);
		ck_assert_int_eq(tu_post_send1(e.qp, 3, FERRY_WR_RDMA_READ, 0, e.buf + 2048,
					       512, e.mr->lkey, plain.addr + 1024,
					       plain.rkey), 0);
		tu_poll1(e.send_cq, &wc[2]);
		ok = arrived && wc[1].status == FERRY_WC_SUCCESS &&
		     wc[2].status == FERRY_WC_SUCCESS && tu_check(e.buf + 2048, 512, 9);
	} else {
		ck_assert_msg(!arrived, "a failed SEND arrived");
		ok = false;
	}
	ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	close(ctl);
	tu_end_close(&e);
	return ok;
}

START_TEST(test_plain_memory_same_user)
{
	if (!tu_on_shm())
		HM_SKIP("test_plain_memory_same_user", "cross-memory access is the shm transport's");
	ck_assert_msg(hm_plain_run(0), "SEND, WRITE or READ into a live peer's plain memory "
		      "failed");
}
END_TEST

START_TEST(test_plain_memory_other_user)
{
	if (!tu_on_shm())
		HM_SKIP("test_plain_memory_other_user", "cross-memory access is the shm transport's");
	if (geteuid() != 0)
		HM_SKIP("test_plain_memory_other_user", "needs root to run a peer as nobody");
	ck_assert_msg(!hm_plain_run(65534), "root wrote into the plain memory of a peer "
		      "of another user");
}
END_TEST

/* --- what a peer sees of the server's other connections --- */

/*
 * The server S connects to A, and sends it messages with immediate data;
 * then B connects to S through a relay of its own that keeps a copy of
 * every descriptor S passes, and reads all of each (as an attacker would:
 * ferry's own checks do not stand in its way).  Before the pools, S's
 * HELLO passed B the arena that held every connection's queues and every
 * PD's table: B read A's region, the immediate data S sent A, and the key
 * and address of the memory region S registered for A in another PD.
 */
#define HM_IMM_A	0xa5a5c3e1u	/* what S sends A with each message */
#define HM_IMM_B	0xb6b6d4f2u	/* and B */
#define HM_MSGS_A	4
#define HM_CAUGHT_MAX	32

/* What to look for of one connection of S's. */
struct hm_marks {
	uint32_t qpn;		/* S's QP: the head of its region */
	uint32_t imm;		/* immediate data S sent on it */
	uint32_t rkey;		/* the MR S registered for it, in its own PD */
	uint32_t pad;
	uint64_t addr, len;
};
#define HM_SEEN_REGION	1u	/* magic, version, qp_num: a region's head */
#define HM_SEEN_IMM	2u
#define HM_SEEN_MR	4u	/* key, access, address, length: an MR entry */
#define HM_SEEN_ADDR	8u	/* the address alone */
#define HM_SEEN_ALL	15u

/* Which of @k's marks lie in @buf (@n bytes, 8-aligned data). */
static uint32_t hm_scan_buf(const uint8_t *buf, size_t n, const struct hm_marks *k)
{
	uint32_t seen = 0, w[3];
	uint64_t d[2];

	for (size_t i = 0; i + 24 <= n; i += 4) {
		memcpy(w, buf + i, sizeof(w));
		if (w[0] == k->imm)
			seen |= HM_SEEN_IMM;
		if (w[0] == SHM_MAGIC && w[1] == SHM_VERSION && w[2] == k->qpn)
			seen |= HM_SEEN_REGION;
		if (i % 8)
			continue;
		memcpy(d, buf + i + 8, sizeof(d));
		if (w[0] == k->rkey && w[1] == TU_ACCESS_ALL && d[0] == k->addr && d[1] == k->len)
			seen |= HM_SEEN_MR;
		memcpy(d, buf + i, 8);
		if (d[0] == k->addr)
			seen |= HM_SEEN_ADDR;
	}
	return seen;
}

/*
 * Which of @k's marks lie anywhere in the file @fd.  Read, not mapped: a
 * read through a mapping would allocate every hole it touches in S's
 * files (256 MiB each), where read() returns zeros; and only the parts
 * that hold data (SEEK_DATA) are read at all.
 */
static uint32_t hm_scan_fd(int fd, const struct hm_marks *k)
{
	enum { CHUNK = 1 << 20, OVERLAP = 64 };
	static uint8_t buf[CHUNK + OVERLAP];
	uint32_t seen = 0;
	off_t pos = 0, end;

	while ((pos = lseek(fd, pos, SEEK_DATA)) >= 0) {
		end = lseek(fd, pos, SEEK_HOLE);
		TU_CHILD_CHECK(end > pos);
		while (pos < end) {
			size_t want = (size_t)(end - pos) < sizeof(buf) ? (size_t)(end - pos) :
				      sizeof(buf);
			ssize_t n = pread(fd, buf, want, pos);

			TU_CHILD_CHECK(n > 0);
			seen |= hm_scan_buf(buf, (size_t)n, k);
			pos += n > CHUNK ? CHUNK : n;	/* the overlap is read again */
		}
	}
	return seen;
}

/* B's relay between S (@outer) and its own QP (@inner). */
struct hm_relay {
	int outer, inner;
	int caught[HM_CAUGHT_MAX];	/* a copy of every descriptor S passed */
	int ncaught;
	/* Nonzero: say so in every record's credentials, both ways (see
	 * hm_b_child), else the kernel's own go with them. */
	uid_t as_uid;
};

/* Move one record, descriptors and all, @from -> @to; S's descriptors
 * copied into @r when @catch.  1: moved; 0: none waiting. */
static int hm_relay_one(struct hm_relay *r, int from, int to, bool catch)
{
	union {
		char buf[CMSG_SPACE(8 * sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} ctl;
	uint8_t rec[512];
	struct iovec iov = { .iov_base = rec, .iov_len = sizeof(rec) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm;
	int fds[8], nfds = 0;
	ssize_t n = recvmsg(from, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	if (n < 0 && errno == EAGAIN)
		return 0;
	TU_CHILD_CHECK(n > 0 && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)));
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			nfds = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(cm), sizeof(int) * (size_t)nfds);
		}
	iov.iov_len = (size_t)n;
	memset(&ctl, 0, sizeof(ctl));	/* what we send is all set (valgrind) */
	mh.msg_control = nfds || r->as_uid ? ctl.buf : NULL;
	mh.msg_controllen = (nfds ? CMSG_SPACE(sizeof(int) * (size_t)nfds) : 0) +
			    (r->as_uid ? CMSG_SPACE(sizeof(struct ucred)) : 0);
	cm = mh.msg_control ? CMSG_FIRSTHDR(&mh) : NULL;
	if (nfds) {
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
		cm = CMSG_NXTHDR(&mh, cm);
	}
	if (r->as_uid) {
		struct ucred uc = { getpid(), r->as_uid, getegid() };

		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_CREDENTIALS;
		cm->cmsg_len = CMSG_LEN(sizeof(uc));
		memcpy(CMSG_DATA(cm), &uc, sizeof(uc));
	}
	TU_CHILD_CHECK(sendmsg(to, &mh, MSG_NOSIGNAL) == n);
	for (int i = 0; i < nfds; i++) {
		if (catch && r->ncaught < HM_CAUGHT_MAX)
			r->caught[r->ncaught++] = fds[i];
		else
			close(fds[i]);
	}
	return 1;
}

/* Connect B's QP (in INIT) to S through the relay, the QP on @sock (the
 * other end of r->inner): the exchange in steps, records moved between. */
static void hm_relay_connect(struct hm_relay *r, struct ferry_qp *qp, int sock)
{
	uint64_t end = tu_now_ms() + TU_WAIT_MS;
	uint32_t peer_qpn;

	TU_CHILD_CHECK(ferry_qp_exchange_begin(qp, sock) == 0);
	for (;;) {
		struct pollfd p[2] = { { .fd = r->outer, .events = POLLIN },
				       { .fd = r->inner, .events = POLLIN } };

		while (hm_relay_one(r, r->outer, r->inner, true) ||
		       hm_relay_one(r, r->inner, r->outer, false))
			;
		if (ferry_qp_exchange_step(qp, &peer_qpn) == 0)
			break;
		TU_CHILD_CHECK(errno == EAGAIN && tu_now_ms() < end);
		poll(p, 2, 10);
	}
	/* The step that completed ours may have sent our READY, which S
	 * still waits for: S's READY can come before ours has left. */
	while (hm_relay_one(r, r->inner, r->outer, false))
		;
	TU_CHILD_CHECK(tu_qp_to_rtr(qp, peer_qpn, 0) == 0);
	TU_CHILD_CHECK(tu_qp_to_rts(qp, 7) == 0);
}

/* A: takes HM_MSGS_A messages from S, says so, waits to be let go. */
static int hm_a_child(int sock, int ctl, void *arg)
{
	struct tu_remote peer;
	struct ferry_wc wc[HM_MSGS_A];
	struct tu_end e;
	uint32_t go;
	int n;

	(void)arg;
	tu_child_connect(&e, &(struct tu_opts){ 0 }, sock, &peer);
	for (int i = 0; i < HM_MSGS_A; i++)
		TU_CHILD_CHECK(tu_post_recv1(e.qp, 10 + i, e.buf + 64 * i, 64, e.mr->lkey) == 0);
	TU_CHILD_CHECK(tu_send_u32(ctl, 1) == 0);	/* ready */
	n = tu_child_poll(e.recv_cq, wc, HM_MSGS_A, TU_WAIT_MS);
	for (int i = 0; i < n; i++)
		TU_CHILD_CHECK(wc[i].status == FERRY_WC_SUCCESS && (wc[i].wc_flags & FERRY_WC_WITH_IMM) &&
			       wc[i].imm_data == HM_IMM_A);
	TU_CHILD_CHECK(tu_send_u32(ctl, (uint32_t)n) == 0);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &go, TU_WAIT_MS) == 0);
	tu_child_end_close(&e);
	return 0;
}

struct hm_spy_arg {
	uid_t uid;		/* become this user first (0: stay) */
};

/* B: connects through its relay, takes S's message, scans every
 * descriptor S passed for S's marks of A's connection and of its own. */
static int hm_b_child(int sock, int ctl, void *arg)
{
	const struct hm_spy_arg *sa = arg;
	struct hm_relay r = { .outer = sock };
	struct hm_marks marks[2];	/* A's connection, ours */
	struct tu_remote peer, mine;
	uint32_t seen[2] = { 0, 0 }, go;
	struct ferry_wc wc;
	struct tu_end e;
	int ip[2];

	/*
	 * Another user to S, by the credentials its records carry.  Its real
	 * uid stays root, for its own QP behind the relay to see S as of
	 * another user too (the relay's records, not S's, reach that QP):
	 * both ends then agree that the connection is between two users.
	 */
	if (sa->uid) {
		TU_CHILD_CHECK(setresgid(sa->uid, sa->uid, sa->uid) == 0 &&
			       setresuid(0, sa->uid, 0) == 0);
		r.as_uid = sa->uid;
	}
	tu_child_end_open(&e, &(struct tu_opts){ 0 });
	mine = (struct tu_remote){ (uintptr_t)e.buf, e.len, e.mr->rkey, e.qp->qp_num,
				   0, 0, 0, 0 };
	TU_CHILD_CHECK(tu_msg_send(sock, &mine, sizeof(mine)) == 0);
	TU_CHILD_CHECK(tu_msg_recv(sock, &peer, sizeof(peer), TU_WAIT_MS) == 0);
	TU_CHILD_CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ip) == 0);
	r.inner = ip[1];
	/* As ferry sets it on its own socket: S's HELLO carries our credentials. */
	TU_CHILD_CHECK(setsockopt(sock, SOL_SOCKET, SO_PASSCRED, &(int){ 1 }, sizeof(int)) == 0);
	TU_CHILD_CHECK(tu_qp_to_init(e.qp, TU_QP_ACCESS_ALL) == 0);
	TU_CHILD_CHECK(tu_post_recv1(e.qp, 1, e.buf, 64, e.mr->lkey) == 0);
	hm_relay_connect(&r, e.qp, ip[0]);
	TU_CHILD_CHECK(tu_child_poll(e.recv_cq, &wc, 1, TU_WAIT_MS) == 1);
	TU_CHILD_CHECK(wc.status == FERRY_WC_SUCCESS && wc.imm_data == HM_IMM_B);

	TU_CHILD_CHECK(tu_msg_recv(ctl, marks, sizeof(marks), TU_WAIT_MS) == 0);
	TU_CHILD_CHECK(r.ncaught > 0);
	for (int i = 0; i < r.ncaught; i++) {
		seen[0] |= hm_scan_fd(r.caught[i], &marks[0]);
		seen[1] |= hm_scan_fd(r.caught[i], &marks[1]);
		close(r.caught[i]);
	}
	TU_CHILD_CHECK(tu_msg_send(ctl, seen, sizeof(seen)) == 0);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &go, TU_WAIT_MS) == 0);
	tu_child_end_close(&e);
	close(ip[0]);
	close(ip[1]);
	return 0;
}

/* A SEND of @len bytes of @e's buffer with immediate data @imm; its completion. */
static void hm_send_imm(struct tu_end *e, uint64_t wr_id, uint32_t len, uint32_t imm)
{
	struct ferry_sge sge = { (uintptr_t)e->buf, len, e->mr->lkey };
	struct ferry_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				    .opcode = FERRY_WR_SEND_WITH_IMM, .imm_data = imm };
	struct ferry_send_wr *bad = NULL;
	struct ferry_wc wc;

	ck_assert_int_eq(ferry_post_send(e->qp, &wr, &bad), 0);
	tu_poll1(e->send_cq, &wc);
	ck_assert_int_eq(wc.status, FERRY_WC_SUCCESS);
}

/* S's marks of its end @e of a connection. */
static struct hm_marks hm_marks_of(const struct tu_end *e, uint32_t imm)
{
	return (struct hm_marks){ .qpn = e->qp->qp_num, .imm = imm, .rkey = e->mr->rkey,
				  .addr = (uintptr_t)e->buf, .len = e->len };
}

/* S, with A connected, lets B (as @uid) in: B's findings, ours and A's. */
static void hm_spy_run(uid_t uid, uint32_t *seen_a_p, uint32_t *seen_b_p)
{
	struct hm_spy_arg arg = { uid };
	struct hm_marks marks[2];
	struct tu_end ea, eb;
	uint32_t got, seen[2];
	pid_t pa, pb;
	int ca, cb;

	pa = hm_connect(hm_a_child, NULL, &ea, &ca, NULL, NULL);
	ck_assert_int_eq(tu_recv_u32(ca, &got, TU_WAIT_MS), 0);
	for (int i = 0; i < HM_MSGS_A; i++)
		hm_send_imm(&ea, 20 + i, 48, HM_IMM_A);
	ck_assert_int_eq(tu_recv_u32(ca, &got, TU_WAIT_MS), 0);
	ck_assert_uint_eq(got, HM_MSGS_A);

	pb = hm_connect(hm_b_child, &arg, &eb, &cb, NULL, NULL);
	hm_send_imm(&eb, 30, 32, HM_IMM_B);
	marks[0] = hm_marks_of(&ea, HM_IMM_A);
	marks[1] = hm_marks_of(&eb, HM_IMM_B);
	ck_assert_int_eq(tu_msg_send(cb, marks, sizeof(marks)), 0);
	ck_assert_int_eq(tu_msg_recv(cb, seen, sizeof(seen), 60000), 0);
	*seen_a_p = seen[0];
	*seen_b_p = seen[1];
	/* What B reads is its process's pool: not the one A's process reads. */
	ck_assert_ptr_ne(to_sqp(ea.qp)->conn->pool, to_sqp(eb.qp)->conn->pool);
	ck_assert_ptr_ne(to_sqp(ea.qp)->region_piece.seg, to_sqp(eb.qp)->region_piece.seg);

	ck_assert_int_eq(tu_send_u32(cb, 1), 0);
	ck_assert_int_eq(tu_send_u32(ca, 1), 0);
	ck_assert_int_eq(tu_wait_child(pb, TU_WAIT_MS), 0);
	ck_assert_int_eq(tu_wait_child(pa, TU_WAIT_MS), 0);
	close(ca);
	close(cb);
	tu_end_close(&eb);
	tu_end_close(&ea);
}

static void hm_spy_check(const char *name, uid_t uid)
{
	uint32_t seen_a, seen_b;

	hm_spy_run(uid, &seen_a, &seen_b);
	printf("%s: of its own connection B saw %#x, of A's %#x (of %#x)\n", name, seen_b, seen_a,
	       HM_SEEN_ALL);
	/* Its own connection's state is there to see (and the scan finds it). */
	ck_assert_uint_eq(seen_b, HM_SEEN_ALL);
	ck_assert_msg(seen_a == 0, "a peer read another connection's state in the memory passed to "
		      "it:%s%s%s%s", seen_a & HM_SEEN_REGION ? " its region" : "",
		      seen_a & HM_SEEN_IMM ? " its immediate data" : "",
		      seen_a & HM_SEEN_MR ? " an MR entry of its PD" : "",
		      seen_a & HM_SEEN_ADDR ? " the address of its MR" : "");
}

START_TEST(test_other_connections_unseen)
{
	if (!tu_on_shm())
		HM_SKIP("test_other_connections_unseen", "the arena is the shm transport's");
	hm_spy_check("test_other_connections_unseen", 0);
}
END_TEST

START_TEST(test_other_connections_unseen_other_user)
{
	if (!tu_on_shm())
		HM_SKIP("test_other_connections_unseen_other_user",
			"the arena is the shm transport's");
	if (geteuid() != 0)
		HM_SKIP("test_other_connections_unseen_other_user",
			"needs root to run a peer as nobody");
	hm_spy_check("test_other_connections_unseen_other_user", 65534);
}
END_TEST

/* --- the second connection between two processes --- */

/* Segments of a peer's pool this process has mapped (read-only, shared). */
static int hm_peer_pool_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512], perms[8];
	int n = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n += sscanf(line, "%*s %7s", perms) == 1 && strcmp(perms, "r--s") == 0 &&
		     strstr(line, "memfd:ferry-shm-pool") != NULL;
	fclose(f);
	return n;
}

struct hm_twice_arg {
	int sock2;		/* the child's end of the second connection */
};

/* Connects twice; reports its mappings of our pool after each. */
static int hm_twice_child(int sock, int ctl, void *arg)
{
	const struct hm_twice_arg *ta = arg;
	uint32_t maps[2], go;
	struct tu_remote peer;
	struct tu_end e1, e2;

	tu_child_connect(&e1, &(struct tu_opts){ 0 }, sock, &peer);
	maps[0] = (uint32_t)hm_peer_pool_maps();
	tu_child_connect(&e2, &(struct tu_opts){ 0 }, ta->sock2, &peer);
	maps[1] = (uint32_t)hm_peer_pool_maps();
	TU_CHILD_CHECK(tu_msg_send(ctl, maps, sizeof(maps)) == 0);
	TU_CHILD_CHECK(tu_recv_u32(ctl, &go, TU_WAIT_MS) == 0);
	tu_child_end_close(&e2);
	tu_child_end_close(&e1);
	return 0;
}

/*
 * Isolation costs the second connection between two processes nothing:
 * it finds their pool, its region comes from the same segment, and
 * neither side maps anything it had not mapped for the first.
 */
START_TEST(test_pair_shares_pool)
{
	struct shm_qp *q1, *q2;
	struct tu_end e1, e2;
	int ctl, sock, sp[2], pools, mine;
	uint32_t maps[2];
	pid_t pid;

	if (!tu_on_shm())
		HM_SKIP("test_pair_shares_pool", "the arena is the shm transport's");
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	pid = tu_fork(hm_twice_child, &(struct hm_twice_arg){ sp[1] }, &sock, &ctl);
	close(sp[1]);
	hm_connect_sock(&e1, sock, NULL, NULL);
	pools = shm_arena_test_pools(NULL);
	mine = hm_peer_pool_maps();
	hm_connect_sock(&e2, sp[0], NULL, NULL);
	ck_assert_int_eq(tu_msg_recv(ctl, maps, sizeof(maps), TU_WAIT_MS), 0);

	q1 = to_sqp(e1.qp);
	q2 = to_sqp(e2.qp);
	ck_assert_ptr_nonnull(q1->conn->pool);
	ck_assert_ptr_eq(q1->conn->pool, q2->conn->pool);
	ck_assert_ptr_eq(q1->region_piece.seg, q2->region_piece.seg);
	ck_assert_int_eq(shm_arena_test_pools(NULL), pools);
	ck_assert_int_ge(mine, 1);
	ck_assert_int_eq(hm_peer_pool_maps(), mine);
	ck_assert_uint_ge(maps[0], 1);
	ck_assert_uint_eq(maps[1], maps[0]);

	ck_assert_int_eq(tu_send_u32(ctl, 1), 0);
	ck_assert_int_eq(tu_wait_child(pid, TU_WAIT_MS), 0);
	close(ctl);
	tu_end_close(&e2);
	tu_end_close(&e1);
}
END_TEST

Suite *hostile_mem_suite(void)
{
	Suite *s = suite_create("hostile_mem");
	TCase *tc = tcase_create("hostile_mem");

	tcase_set_timeout(tc, TU_TCASE_TIMEOUT);
	tcase_add_test(tc, test_grown_memfd);
	tcase_add_test(tc, test_pid_reuse);
	tcase_add_test(tc, test_plain_memory_same_user);
	tcase_add_test(tc, test_plain_memory_other_user);
	tcase_add_test(tc, test_other_connections_unseen);
	tcase_add_test(tc, test_other_connections_unseen_other_user);
	tcase_add_test(tc, test_pair_shares_pool);
	suite_add_tcase(s, tc);
	return s;
}
