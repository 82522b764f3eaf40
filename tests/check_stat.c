/*
 * check_stat.c - the statistics segment (sock/sock_stat.c) and its
 * reader (tools/stat_scan.c, ferry-stat): rows of two processes with known
 * byte counts, state changes to the end of a connection, the ferry-stat
 * binary's table and JSON, hostile segments, torn reads, fork and exec,
 * and the FERRY_RBUF/FERRY_SBUF ring defaults.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ferry/socket.h>

#include "sock-internal.h"
#include "stat_scan.h"
#include "testutil.h"
#include "check_suites.h"

#define ST_N1	100000u		/* client -> server, read by the server */
#define ST_N2	50000u		/* server -> client, read by the client */
#define ST_N3	3000u		/* client -> server, left unread */

/* --- helpers --- */

static void st_addr(struct sockaddr_in *sin, uint16_t port)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin->sin_port = htons(port);
}

static int st_listen(uint16_t *port_p)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	int l = ferry_socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(l, 0);
	st_addr(&sin, 0);
	ck_assert_int_eq(ferry_sock_bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(ferry_sock_listen(l, 8), 0);
	ck_assert_int_eq(ferry_sock_getsockname(l, (struct sockaddr *)&sin, &len), 0);
	*port_p = ntohs(sin.sin_port);
	return l;
}

/* Send @n bytes of the pattern starting at @seed; false on error. */
static bool st_send_all(int fd, size_t n, unsigned int seed)
{
	unsigned char buf[8192];
	size_t done = 0, i;

	while (done < n) {
		size_t k = n - done < sizeof(buf) ? n - done : sizeof(buf);
		ssize_t r;

		for (i = 0; i < k; i++)
			buf[i] = (unsigned char)(seed + done + i);
		r = ferry_sock_send(fd, buf, k, MSG_NOSIGNAL);
		if (r <= 0)
			return false;
		done += (size_t)r;
	}
	return true;
}

/* Receive exactly @n bytes and check the pattern; false on error. */
static bool st_recv_all(int fd, size_t n, unsigned int seed)
{
	unsigned char buf[8192];
	size_t done = 0, i;

	while (done < n) {
		size_t k = n - done < sizeof(buf) ? n - done : sizeof(buf);
		ssize_t r = ferry_sock_recv(fd, buf, k, 0);

		if (r <= 0)
			return false;
		for (i = 0; i < (size_t)r; i++)
			if (buf[i] != (unsigned char)(seed + done + i))
				return false;
		done += (size_t)r;
	}
	return true;
}

/* The rows of @pid's sockets (fresh scan into @rows). */
static void st_scan(pid_t pid, struct stat_rows *rows)
{
	struct stat_scan_notes notes = { 0 };

	stat_rows_free(rows);
	ck_assert_int_eq(stat_scan(pid, rows, &notes), 0);
	ck_assert_int_eq(notes.bad_segments, 0);
	ck_assert_int_eq(notes.bad_slots, 0);
}

/* The row of @rows with these ports (0: any) and state, or NULL. */
static const struct stat_row *st_find(const struct stat_rows *rows, unsigned int state,
				      uint16_t local_port, uint16_t peer_port)
{
	size_t i;

	for (i = 0; i < rows->n; i++) {
		const struct stat_row *r = &rows->v[i];

		if (r->state == state && (!local_port || r->local.port == local_port) &&
		    (!peer_port || r->peer.port == peer_port))
			return r;
	}
	return NULL;
}

/* The row transport of a loopback connection: shm's, unless forced. */
static uint32_t st_transport_expected(void)
{
	const char *forced = getenv("FERRY_TRANSPORT");

	if (forced && strcmp(forced, "tcp") == 0)
		return SOCK_STAT_TP_TCP;
	if (forced && strcmp(forced, "verbs") == 0)
		return SOCK_STAT_TP_VERBS;
	return SOCK_STAT_TP_SHM;
}

static void st_assert_loopback(const struct sock_stat_addr *a, uint16_t port)
{
	static const uint8_t lo[4] = { 127, 0, 0, 1 };

	ck_assert_uint_eq(a->family, AF_INET);
	ck_assert_uint_eq(a->port, port);
	ck_assert_mem_eq(a->addr, lo, 4);
}

/* Run ferry-stat with @args; its standard output into @out. */
static void st_run_tool(const char *args, char *out, size_t len)
{
	char cmd[512], drain[4096];
	size_t n = 0;
	FILE *p;

	ck_assert_msg(access(FERRY_STAT_BIN, X_OK) == 0, "%s is not built", FERRY_STAT_BIN);
	snprintf(cmd, sizeof(cmd), "%s %s", FERRY_STAT_BIN, args);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	while (n < len - 1) {
		size_t k = fread(out + n, 1, len - 1 - n, p);

		if (k == 0)
			break;
		n += k;
	}
	out[n] = '\0';
	/* The rest is read too: without -p the tool lists every ferry socket
	 * of the host, other programs' as well, and one whose output we
	 * stopped reading gets EPIPE (SIGPIPE is ignored here) and exits 1. */
	while (fread(drain, 1, sizeof(drain), p) > 0)
		;
	ck_assert_int_eq(pclose(p), 0);
}

/* The child of the two-process test: connect, trade the known byte
 * counts, say so, and hold the connection until told to close it. */
static int st_client(uint16_t port, int ready_fd, int quit_fd)
{
	struct sockaddr_in sin;
	char c = 'r';
	int fd = ferry_socket(AF_INET, SOCK_STREAM, 0);

	/* Its writes store past the caches, which its row counts. */
	if (setenv("FERRY_STREAM_COPY", "nocache", 1) < 0)
		return 9;
	st_addr(&sin, port);
	if (fd < 0 || ferry_sock_connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		return 10;
	if (!st_send_all(fd, ST_N1, 1))
		return 11;
	if (!st_recv_all(fd, ST_N2, 2))
		return 12;
	if (!st_send_all(fd, ST_N3, 3))
		return 13;
	if (write(ready_fd, &c, 1) != 1 || read(quit_fd, &c, 1) != 1)
		return 14;
	return ferry_sock_close(fd) == 0 ? 0 : 15;
}

/* Peek until @n bytes have arrived on @fd (they were sent already). */
static void st_wait_unread(int fd, size_t n)
{
	char buf[ST_N3];
	int rounds;

	for (rounds = 0; rounds < 100000; rounds++) {
		ssize_t r = ferry_sock_recv(fd, buf, n, MSG_PEEK);

		ck_assert_int_gt(r, 0);
		if ((size_t)r == n)
			return;
		sched_yield();
	}
	ck_abort_msg("the last %zu bytes never arrived", n);
}

/* --- rows of a connection between two processes --- */

START_TEST(test_rows_two_processes)
{
	struct stat_rows rows = { 0 };
	const struct stat_row *r;
	struct sockaddr_in peer;
	socklen_t plen = sizeof(peer);
	int ready[2], quit[2], l, a, status;
	uint16_t port, cport;
	char out[8192], want[256], c;
	pid_t child;

	l = st_listen(&port);
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(quit), 0);
	child = tu_fork_quiet();
	ck_assert_int_ge(child, 0);
	if (child == 0)
		_exit(st_client(port, ready[1], quit[0]));
	a = ferry_sock_accept(l, NULL, NULL);
	ck_assert_int_ge(a, 0);
	ck_assert_int_eq(ferry_sock_getpeername(a, (struct sockaddr *)&peer, &plen), 0);
	cport = ntohs(peer.sin_port);
	ck_assert(st_recv_all(a, ST_N1, 1));
	ck_assert(st_send_all(a, ST_N2, 2));
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	st_wait_unread(a, ST_N3);

	/* The server: its listener and the connection. */
	st_scan(getpid(), &rows);
	r = st_find(&rows, SOCK_STAT_LISTEN, port, 0);
	ck_assert_msg(r != NULL, "no LISTEN row on port %u", port);
	st_assert_loopback(&r->local, port);
	ck_assert_uint_eq(r->peer.family, 0);
	ck_assert_int_eq(r->fd, l);
	r = st_find(&rows, SOCK_STAT_ESTAB, port, cport);
	ck_assert_msg(r != NULL, "no ESTAB row %u -> %u", port, cport);
	st_assert_loopback(&r->local, port);
	st_assert_loopback(&r->peer, cport);
	ck_assert_int_eq(r->pid, getpid());
	ck_assert_int_eq(r->fd, a);
	ck_assert_uint_eq(r->transport, st_transport_expected());
	ck_assert_uint_eq(r->rx_bytes, ST_N1);
	ck_assert_uint_eq(r->tx_bytes, ST_N2);
	ck_assert_uint_eq(r->rx_unread, ST_N3);
	ck_assert_uint_gt(r->rbuf_size, ST_N3);
	ck_assert_uint_le(r->tx_in_flight, r->sbuf_size);
	ck_assert_uint_eq(r->tx_nocache, 0);	/* 8 KiB writes: plain stores */
	ck_assert_uint_eq(r->flags, 0);

	/* The client, in the other process. */
	st_scan(child, &rows);
	ck_assert_uint_eq(rows.n, 1);
	r = &rows.v[0];
	ck_assert_uint_eq(r->state, SOCK_STAT_ESTAB);
	ck_assert_int_eq(r->pid, child);
	st_assert_loopback(&r->local, cport);
	st_assert_loopback(&r->peer, port);
	ck_assert_uint_eq(r->transport, st_transport_expected());
	ck_assert_uint_eq(r->tx_bytes, ST_N1 + ST_N3);
	ck_assert_uint_eq(r->rx_bytes, ST_N2);
	ck_assert_uint_eq(r->rx_unread, 0);
	ck_assert_uint_le(r->tx_in_flight, r->sbuf_size);
	/* FERRY_STREAM_COPY=nocache: its direct writes (all but pieces of
	 * 64 bytes or less at a ring boundary) */
	ck_assert_uint_ge(r->tx_nocache, ST_N1 / 2);
	ck_assert_uint_le(r->tx_nocache, r->tx_bytes);

	/* The same through the tool: table and JSON. */
	snprintf(want, sizeof(want), "-n -p %d", (int)child);
	st_run_tool(want, out, sizeof(out));
	ck_assert_msg(strncmp(out, "State ", 6) == 0, "no header: %s", out);
	snprintf(want, sizeof(want), "127.0.0.1:%u", cport);
	ck_assert_msg(strstr(out, want) && strstr(out, "ESTAB ") && strstr(out, " shm "),
		      "%s", out);
	/* One row and no header: no padding between the cells. */
	snprintf(want, sizeof(want), "-n -H -p %d", (int)child);
	st_run_tool(want, out, sizeof(out));
	snprintf(want, sizeof(want), "ESTAB shm 127.0.0.1:%u 127.0.0.1:%u %u %u 0/", cport,
		 port, ST_N1 + ST_N3, ST_N2);
	ck_assert_msg(strncmp(out, want, strlen(want)) == 0, "no '%s' in: %s", want, out);
	snprintf(want, sizeof(want), "users:((\"%s\",pid=%d,fd=", rows.v[0].comm, (int)child);
	ck_assert_msg(strstr(out, want), "no '%s' in: %s", want, out);
	snprintf(want, sizeof(want), "-j -p %d", (int)getpid());
	st_run_tool(want, out, sizeof(out));
	snprintf(want, sizeof(want),
		 "\"state\":\"ESTAB\",\"transport\":\"shm\",\"local\":{\"address\":\"127.0.0.1\","
		 "\"port\":%u},\"peer\":{\"address\":\"127.0.0.1\",\"port\":%u},\"sent\":%u,"
		 "\"received\":%u,\"rx_ring\":{\"unread\":%u,", port, cport, ST_N2, ST_N1, ST_N3);
	ck_assert_msg(strstr(out, want), "no '%s' in: %s", want, out);
	ck_assert_msg(strstr(out, "\"sent_nocache\":0,"), "no sent_nocache: %s", out);
	ck_assert_msg(!strstr(out, "LISTEN"), "listener without -l: %s", out);
	/* Of this process only: every listener of the host (other programs'
	 * under ferry) could run past the buffer. */
	snprintf(want, sizeof(want), "-l -n -H -p %d", (int)getpid());
	st_run_tool(want, out, sizeof(out));
	snprintf(want, sizeof(want), "LISTEN ");
	ck_assert_msg(strncmp(out, want, strlen(want)) == 0, "-l -H: %s", out);

	/* The client closes: the server sees the end, then closes too. */
	ck_assert_int_eq(write(quit[1], "q", 1), 1);
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "client: status %#x",
		      status);
	ck_assert(st_recv_all(a, ST_N3, 3));
	ck_assert_int_eq(ferry_sock_recv(a, &c, 1, 0), 0);
	st_scan(getpid(), &rows);
	r = st_find(&rows, SOCK_STAT_ESTAB, port, cport);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->flags & SOCK_STAT_F_PEER_SHUT_WR, SOCK_STAT_F_PEER_SHUT_WR);
	ck_assert_uint_eq(r->rx_bytes, ST_N1 + ST_N3);
	ck_assert_uint_eq(r->rx_unread, 0);
	ck_assert_int_eq(ferry_sock_close(a), 0);
	st_scan(getpid(), &rows);
	ck_assert_ptr_null(st_find(&rows, SOCK_STAT_ESTAB, port, cport));
	ck_assert_uint_eq(rows.n, 1);
	ck_assert_int_eq(ferry_sock_close(l), 0);
	st_scan(getpid(), &rows);
	ck_assert_uint_eq(rows.n, 0);
	stat_rows_free(&rows);
}
END_TEST

START_TEST(test_rows_states)
{
	struct stat_rows rows = { 0 };
	struct sockaddr_in sin;
	int s = ferry_socket(AF_INET, SOCK_STREAM, 0);
	int c = ferry_socket(AF_INET6, SOCK_STREAM, 0);
	uint16_t port;
	int l = st_listen(&port);

	/* A fresh socket is UNCONN, with nothing to say about addresses. */
	ck_assert_int_ge(s, 0);
	st_scan(getpid(), &rows);
	ck_assert_uint_eq(rows.n, 3);
	ck_assert_ptr_nonnull(st_find(&rows, SOCK_STAT_UNCONN, 0, 0));
	ck_assert_ptr_nonnull(st_find(&rows, SOCK_STAT_LISTEN, port, 0));
	/* A refused connect ends FAILED. */
	ck_assert_int_eq(ferry_sock_close(l), 0);
	st_addr(&sin, port);
	ck_assert_int_eq(ferry_sock_connect(s, (struct sockaddr *)&sin, sizeof(sin)), -1);
	st_scan(getpid(), &rows);
	ck_assert_uint_eq(rows.n, 2);
	ck_assert_ptr_nonnull(st_find(&rows, SOCK_STAT_FAILED, 0, port));
	ck_assert_ptr_nonnull(st_find(&rows, SOCK_STAT_UNCONN, 0, 0));
	ck_assert_int_eq(ferry_sock_close(s), 0);
	ck_assert_int_eq(ferry_sock_close(c), 0);
	st_scan(getpid(), &rows);
	ck_assert_uint_eq(rows.n, 0);
	stat_rows_free(&rows);
}
END_TEST

/* --- hostile segments --- */

/* A memfd as ferry makes it (sealed unless @unsealed), header filled in. */
static int st_fake_segment(uint32_t nslots, size_t file_slots, bool unsealed,
			   struct sock_stat_header **hdr_p)
{
	size_t size = SOCK_STAT_HEADER_SIZE + file_slots * sizeof(struct sock_stat_slot);
	int fd = memfd_create(SOCK_STAT_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	struct sock_stat_header *h;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	if (!unsealed)
		ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(h, MAP_FAILED);
	h->magic = SOCK_STAT_MAGIC;
	h->version = SOCK_STAT_VERSION;
	h->header_size = SOCK_STAT_HEADER_SIZE;
	h->slot_size = sizeof(struct sock_stat_slot);
	h->nslots = nslots;
	h->pid = 1;
	*hdr_p = h;
	return fd;
}

static struct sock_stat_slot *st_slot(struct sock_stat_header *h, uint32_t i)
{
	return (struct sock_stat_slot *)((uint8_t *)h + SOCK_STAT_HEADER_SIZE) + i;
}

START_TEST(test_hostile_headers)
{
	struct stat_scan_notes notes = { 0 };
	struct stat_rows rows = { 0 };
	struct sock_stat_header *h;
	int fd;

	fd = st_fake_segment(4, 4, true, &h);
	h->used = 1;
	st_slot(h, 0)->state = SOCK_STAT_ESTAB;
	ck_assert_int_eq(stat_segment_read(fd, 1, "x", &rows, &notes), -1);
	close(fd);

	fd = st_fake_segment(4, 4, false, &h);
	h->used = 1;
	st_slot(h, 0)->state = SOCK_STAT_ESTAB;
	ck_assert_int_eq(stat_segment_read(fd, 1, "x", &rows, &notes), 0);
	ck_assert_uint_eq(rows.n, 1);
	h->magic ^= 1;
	ck_assert_int_eq(stat_segment_read(fd, 1, "x", &rows, &notes), -1);
	h->magic ^= 1;
	h->version = SOCK_STAT_VERSION + 1;
	ck_assert_int_eq(stat_segment_read(fd, 1, "x", &rows, &notes), -1);
	h->version = SOCK_STAT_VERSION;
	h->slot_size = 128;
	ck_assert_int_eq(stat_segment_read(fd, 1, "x", &rows, &notes), -1);
	h->slot_size = sizeof(struct sock_stat_slot);
	h->nslots = 5;	/* more than the file holds */
	ck_assert_int_eq(stat_segment_read(fd, 1, "x", &rows, &notes), -1);
	h->nslots = 0xffffffffu;
	ck_assert_int_eq(stat_segment_read(fd, 1, "x", &rows, &notes), -1);
	h->nslots = 4;
	h->used = 0xffffffffu;	/* clamped to nslots: three free slots follow */
	ck_assert_int_eq(stat_segment_read(fd, 1, "x", &rows, &notes), 0);
	ck_assert_uint_eq(rows.n, 2);
	ck_assert_int_eq(notes.bad_segments, 6);
	close(fd);
	stat_rows_free(&rows);
}
END_TEST

START_TEST(test_hostile_slots)
{
	struct stat_scan_notes notes = { 0 };
	struct stat_rows rows = { 0 };
	struct sock_stat_header *h;
	struct sock_stat_slot *s;
	int fd = st_fake_segment(16, 16, false, &h);
	uint32_t i;

	h->used = 9;
	for (i = 0; i < 9; i++) {
		s = st_slot(h, i);
		s->state = SOCK_STAT_ESTAB;
		s->fd = (int)i;
		s->rbuf_size = s->sbuf_size = 4096;
	}
	st_slot(h, 1)->state = SOCK_STAT_NSTATES;		/* bad */
	st_slot(h, 2)->transport = 77;				/* bad */
	st_slot(h, 3)->peer.family = 77;			/* bad */
	st_slot(h, 4)->rbuf_size = 0x80000000u;			/* bad */
	st_slot(h, 5)->seq = 3;					/* a writer never done */
	st_slot(h, 6)->state = SOCK_STAT_FREE;			/* skipped */
	s = st_slot(h, 7);					/* read ahead of arrived */
	s->rx_bytes = 100;
	s->rx_ring_in = 50;
	s->tx_ring_in = 10;
	s->tx_ring_out = 20;
	s = st_slot(h, 8);					/* more than the ring */
	s->rx_ring_in = 1u << 20;
	s->tx_ring_in = 1u << 20;
	ck_assert_int_eq(stat_segment_read(fd, 42, "victim", &rows, &notes), 0);
	ck_assert_int_eq(notes.bad_slots, 4);
	ck_assert_int_eq(notes.busy_slots, 1);
	ck_assert_uint_eq(rows.n, 3);
	ck_assert_int_eq(rows.v[0].fd, 0);
	ck_assert_int_eq(rows.v[0].pid, 42);
	ck_assert_str_eq(rows.v[0].comm, "victim");
	ck_assert_int_eq(rows.v[1].fd, 7);
	ck_assert_uint_eq(rows.v[1].rx_unread, 0);
	ck_assert_uint_eq(rows.v[1].tx_in_flight, 0);
	ck_assert_int_eq(rows.v[2].fd, 8);
	ck_assert_uint_eq(rows.v[2].rx_unread, 4096);
	ck_assert_uint_eq(rows.v[2].tx_in_flight, 4096);
	close(fd);
	stat_rows_free(&rows);
}
END_TEST

/* --- torn reads: a writer flips between two self-consistent identities --- */

struct st_flipper {
	struct sock_stat_slot *slot;
	atomic_bool stop;
};

static void *st_flip(void *arg)
{
	struct st_flipper *f = arg;
	struct sock_stat_slot *s = f->slot;
	uint32_t v = 0, flips = 0;

	while (!atomic_load(&f->stop)) {
		/* Now and then let the reader run: under valgrind, which runs
		 * one thread at a time, a writer that never yields starves it
		 * for whole time slices (the test then takes many minutes). */
		if (v == 1000 && !(++flips & 63))
			sched_yield();
		v = v == 1000 ? 2000 : 1000;
		__atomic_store_n(&s->seq, s->seq + 1, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_RELEASE);
		__atomic_store_n(&s->fd, (int32_t)v, __ATOMIC_RELAXED);
		__atomic_store_n(&s->rbuf_size, v, __ATOMIC_RELAXED);
		__atomic_store_n(&s->local.port, (uint16_t)v, __ATOMIC_RELAXED);
		__atomic_store_n(&s->peer.port, (uint16_t)v, __ATOMIC_RELAXED);
		__atomic_store_n(&s->sbuf_size, v, __ATOMIC_RELAXED);
		__atomic_store_n(&s->seq, s->seq + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

START_TEST(test_torn_reads)
{
	struct st_flipper f = { 0 };
	struct stat_scan_notes notes = { 0 };
	struct stat_row row;
	pthread_t t;
	int i, got = 0;

	f.slot = aligned_alloc(64, sizeof(*f.slot));
	ck_assert_ptr_nonnull(f.slot);
	memset(f.slot, 0, sizeof(*f.slot));
	f.slot->state = SOCK_STAT_ESTAB;
	f.slot->fd = 1000;
	f.slot->rbuf_size = f.slot->sbuf_size = 1000;
	f.slot->local.port = f.slot->peer.port = 1000;
	ck_assert_int_eq(pthread_create(&t, NULL, st_flip, &f), 0);
	for (i = 0; i < 200000; i++) {
		if (!stat_slot_read(f.slot, &row, &notes))
			continue;
		got++;
		ck_assert_msg(row.fd == (int)row.rbuf_size && row.rbuf_size == row.sbuf_size &&
			      row.local.port == row.rbuf_size && row.peer.port == row.rbuf_size,
			      "torn read: fd %d rbuf %u sbuf %u ports %u %u", row.fd,
			      row.rbuf_size, row.sbuf_size, row.local.port, row.peer.port);
	}
	atomic_store(&f.stop, true);
	pthread_join(t, NULL);
	ck_assert_int_gt(got, 0);
	free(f.slot);
}
END_TEST

/* --- the descriptor: close-on-exec, out of the way, one per process --- */

/* Segments this process holds a descriptor of; the pid of the last. */
static int st_count_segments(pid_t *pid_p)
{
	char path[64], link[128];
	int fd, n = 0;

	for (fd = 0; fd < 1024; fd++) {
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		len = readlink(path, link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = '\0';
		if (strcmp(link, "/memfd:ferry-stat (deleted)") == 0) {
			struct sock_stat_header h;

			n++;
			if (pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h))
				*pid_p = h.pid;
		}
	}
	return n;
}

START_TEST(test_segment_fd)
{
	struct rlimit rl;
	pid_t owner = 0;
	int s, fd, low = 512;

	ck_assert_int_eq(sock_stat_fd(), -1);
	ck_assert_int_eq(st_count_segments(&owner), 0);
	s = ferry_socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(s, 0);
	fd = sock_stat_fd();
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur / 2 < (rlim_t)low)
		low = (int)(rl.rlim_cur / 2);
	ck_assert_int_ge(fd, low);
	ck_assert_int_eq(st_count_segments(&owner), 1);
	ck_assert_int_eq(owner, getpid());
	/* A second socket shares the segment. */
	ck_assert_int_ge(ferry_socket(AF_INET, SOCK_STREAM, 0), 0);
	ck_assert_int_eq(st_count_segments(&owner), 1);
}
END_TEST

START_TEST(test_segment_renumber)
{
	struct stat_rows rows = { 0 };
	int s = ferry_socket(AF_INET, SOCK_STREAM, 0);
	int to = open("/dev/null", O_RDONLY | O_CLOEXEC);

	ck_assert_int_ge(s, 0);
	ck_assert_int_ge(to, 0);
	/* The shim moves a socket onto the number the application holds. */
	ck_assert_int_eq(sock_renumber(s, to), 0);
	st_scan(getpid(), &rows);
	ck_assert_uint_eq(rows.n, 1);
	ck_assert_int_eq(rows.v[0].fd, to);
	stat_rows_free(&rows);
}
END_TEST

START_TEST(test_segment_fork)
{
	struct stat_rows rows = { 0 };
	pid_t child, owner = 0;
	int s = ferry_socket(AF_INET, SOCK_STREAM, 0), status;

	ck_assert_int_ge(s, 0);
	child = tu_fork_quiet();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		/* The parent's segment is not the child's; its first socket
		 * makes one of its own. */
		if (st_count_segments(&owner) != 0)
			_exit(1);
		if (ferry_socket(AF_INET, SOCK_STREAM, 0) < 0)
			_exit(2);
		if (st_count_segments(&owner) != 1 || owner != getpid())
			_exit(3);
		/* Closing the inherited socket leaves the parent's slot alone. */
		ferry_sock_close(s);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %#x",
		      status);
	st_scan(getpid(), &rows);
	ck_assert_uint_eq(rows.n, 1);
	ck_assert_int_eq(rows.v[0].fd, s);
	ck_assert_int_eq(st_count_segments(&owner), 1);
	ck_assert_int_eq(owner, getpid());
	stat_rows_free(&rows);
}
END_TEST

START_TEST(test_segment_exec)
{
	char out[64] = "";
	FILE *p;

	ck_assert_int_ge(ferry_socket(AF_INET, SOCK_STREAM, 0), 0);
	/* A program exec'd from here holds no descriptor of the segment. */
	p = popen("ls -l /proc/self/fd | grep -c 'memfd:ferry-stat'", "r");
	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_nonnull(fgets(out, sizeof(out), p));
	pclose(p);
	ck_assert_str_eq(out, "0\n");
}
END_TEST

/* --- FERRY_RBUF / FERRY_SBUF --- */

static int st_getopt_int(int fd, int name)
{
	socklen_t len = sizeof(int);
	int v = -1;

	ck_assert_int_eq(ferry_sock_getsockopt(fd, SOL_SOCKET, name, &v, &len), 0);
	return v;
}

START_TEST(test_ring_env)
{
	int s;

	setenv("FERRY_RBUF", "64k", 1);
	setenv("FERRY_SBUF", "16384", 1);
	s = ferry_socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(s, 0);
	ck_assert_int_eq(st_getopt_int(s, SO_RCVBUF), 65536);
	ck_assert_int_eq(st_getopt_int(s, SO_SNDBUF), 16384);
}
END_TEST

START_TEST(test_ring_env_limits)
{
	int s;

	FILE *tmp = tmpfile();
	int saved = dup(STDERR_FILENO);
	char msg[512];
	size_t n;

	setenv("FERRY_RBUF", "12q", 1);	/* unusable: the default, with a warning */
	setenv("FERRY_SBUF", "1", 1);	/* too small: the minimum */
	ck_assert_ptr_nonnull(tmp);
	dup2(fileno(tmp), STDERR_FILENO);
	s = ferry_socket(AF_INET, SOCK_STREAM, 0);
	dup2(saved, STDERR_FILENO);
	close(saved);
	rewind(tmp);
	n = fread(msg, 1, sizeof(msg) - 1, tmp);
	msg[n] = '\0';
	fclose(tmp);
	ck_assert_msg(strstr(msg, "FERRY_RBUF=12q is not a size"), "%s", msg);
	ck_assert_msg(!strstr(msg, "FERRY_SBUF"), "%s", msg);
	ck_assert_int_ge(s, 0);
	ck_assert_int_eq(st_getopt_int(s, SO_RCVBUF), SOCK_DEF_BUF_SIZE);
	ck_assert_int_eq(st_getopt_int(s, SO_SNDBUF), SOCK_MIN_BUF_SIZE);
}
END_TEST

Suite *stat_suite(void)
{
	Suite *s = suite_create("stat");
	TCase *tc = tcase_create("rows");

	tcase_add_test(tc, test_rows_two_processes);
	tcase_add_test(tc, test_rows_states);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);

	tc = tcase_create("hostile");
	tcase_add_test(tc, test_hostile_headers);
	tcase_add_test(tc, test_hostile_slots);
	tcase_add_test(tc, test_torn_reads);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);

	tc = tcase_create("segment");
	tcase_add_test(tc, test_segment_fd);
	tcase_add_test(tc, test_segment_renumber);
	tcase_add_test(tc, test_segment_fork);
	tcase_add_test(tc, test_segment_exec);
	suite_add_tcase(s, tc);

	tc = tcase_create("ring-env");
	tcase_add_test(tc, test_ring_env);
	tcase_add_test(tc, test_ring_env_limits);
	suite_add_tcase(s, tc);
	return s;
}
