/*
 * shm_pingpong - the bare shared-memory yardstick of ferry-perf on its own:
 * two processes (pinned to two CPUs when there are two), one shared mapping,
 * each copies a payload into the other's area and bumps a sequence number the
 * other spins on.  Then memcpy bandwidth of the same size in one process.
 *
 * Usage: shm_pingpong [-n ITERS] [-j] [SIZE...]   (default size 64)
 * The same code runs inside `ferry-perf --local` (tools/perf_yardstick.c).
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perf.h"

static void pp_usage(void)
{
	fprintf(stderr, "usage: shm_pingpong [-n ITERS] [-j] [SIZE...]\n");
	exit(2);
}

static void pp_fill_row(struct perf_row *row, enum perf_test test,
			enum perf_transport tr, size_t size, uint64_t iters)
{
	memset(row, 0, sizeof(*row));
	row->test = test;
	row->op = test == PERF_TEST_LAT ? PERF_OP_WRITE : PERF_OP_COPY;
	row->transport = tr;
	row->mode = PERF_MODE_BUSY;
	row->size = size;
	row->iters = iters;
	row->warmup = iters / 10 + 1;
	row->bytes = 2ull << 30;
	row->seconds = 0.5;
}

int main(int argc, char **argv)
{
	size_t sizes[PERF_MAX_SIZES], max_size = 64;
	int nsizes = 0, cpus[2], ncpus, sv[2], i, c, status;
	uint64_t iters = 100000;
	bool json = false;
	struct perf_bare *bare;
	struct perf_result res;
	struct perf_row row;
	void *map, *buf, *dst;
	size_t map_size;
	pid_t pid;

	while ((c = getopt(argc, argv, "n:jh")) != -1) {
		if (c == 'n')
			iters = strtoull(optarg, NULL, 10);
		else if (c == 'j')
			json = true;
		else
			pp_usage();
	}
	for (; optind < argc && nsizes < PERF_MAX_SIZES; optind++) {
		unsigned long long v = strtoull(argv[optind], NULL, 0);

		if (v < 1 || v > PERF_MAX_SIZE)
			pp_usage();
		sizes[nsizes++] = v;
		if (v > max_size)
			max_size = v;
	}
	if (nsizes == 0)
		sizes[nsizes++] = 64;
	if (iters == 0)
		pp_usage();

	map_size = perf_bare_map_size(max_size);
	map = mmap(NULL, map_size, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	/* page-aligned like ferry_alloc: no 4K aliasing between buf and dst */
	buf = aligned_alloc(4096, map_size);
	dst = aligned_alloc(4096, map_size);
	if (map == MAP_FAILED || !buf || !dst)
		perf_die_errno("mmap/aligned_alloc");
	memset(buf, 1, map_size);
	memset(dst, 0, map_size);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		perf_die_errno("socketpair");
	bare = perf_bare_attach(map, max_size);
	ncpus = perf_cpus_allowed(cpus, 2);
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		perf_die_errno("fork");
	if (pid == 0) {
		perf_role_name = "server";
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(sv[0]);
		if (ncpus >= 2)
			perf_pin_self(cpus[1]);
		for (i = 0; i < nsizes; i++) {
			struct perf_msg msg;

			pp_fill_row(&row, PERF_TEST_LAT, PERF_TR_BARE, sizes[i], iters);
			perf_msg_recv(sv[1], &msg, PERF_MSG_TEST, NULL);
			perf_bare_server(bare, &row, buf, sv[1]);
		}
		_exit(0);
	}
	perf_child_pid = pid;
	close(sv[1]);
	if (ncpus >= 2)
		perf_pin_self(cpus[0]);
	perf_report_begin(json, ncpus >= 2 ? "shm_pingpong: pinned to two cpus" :
			  "shm_pingpong: one cpu, not pinned",
			  ncpus >= 2 ? "pinned" : "none");
	for (i = 0; i < nsizes; i++) {
		struct perf_msg msg = { .type = PERF_MSG_TEST };

		pp_fill_row(&row, PERF_TEST_LAT, PERF_TR_BARE, sizes[i], iters);
		memset(&res, 0, sizeof(res));
		res.test = row.test; res.op = row.op; res.transport = row.transport;
		res.mode = row.mode; res.size = row.size;
		perf_bare_prepare(bare);
		perf_msg_send(sv[0], &msg, -1);
		perf_watchdog_arm(60, "shm ping-pong");
		perf_bare_client(bare, &row, buf, sv[0], &res);
		perf_report_row(&res);
	}
	perf_watchdog_disarm();
	for (i = 0; i < nsizes; i++) {
		pp_fill_row(&row, PERF_TEST_BW, PERF_TR_MEMCPY, sizes[i], iters);
		memset(&res, 0, sizeof(res));
		res.test = row.test; res.op = row.op; res.transport = row.transport;
		res.mode = row.mode; res.size = row.size;
		perf_memcpy_bw(dst, buf, &row, &res);
		perf_report_row(&res);
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0)
		perf_die("the ping-pong partner failed");
	perf_bare_detach(bare);
	munmap(map, map_size);
	free(dst);
	free(buf);
	return 0;
}
