/*
 * stat_scan.c - ferry-stat's reader (stat_scan.h).
 *
 * Segments are found as /proc/PID/fd links named "/memfd:ferry-stat
 * (deleted)", opened through /proc read-only (which needs the same rights
 * over the process as reading its fds) and mapped read-only.  A mapping of
 * a sealed memfd cannot shrink under us, so reading it never faults; an
 * unsealed one is refused.  The owner may change any byte at any time:
 * every value is checked after a consistent copy is taken.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stat_scan.h"

#define STAT_LINK_NAME		"/memfd:" SOCK_STAT_NAME " (deleted)"
#define STAT_READ_TRIES		1000	/* copies of a slot tried before giving up */
#define STAT_RING_MAX		(1u << 30)	/* larger ring sizes are not believed */

/* --- slots --- */

/* Copy @len bytes (a multiple of 8) with whole-word atomic loads. */
static void stat_copy_words(void *dst, const void *src, size_t len)
{
	const uint64_t *s = src;
	uint64_t *d = dst;
	size_t i;

	for (i = 0; i < len / sizeof(uint64_t); i++)
		d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

static bool stat_addr_ok(const struct sock_stat_addr *a)
{
	return a->family == 0 || a->family == AF_INET || a->family == AF_INET6;
}

/* b - a, or 0 when a is ahead (counters read a moment apart), at most @max. */
static uint64_t stat_gap(uint64_t a, uint64_t b, uint64_t max)
{
	uint64_t d = b > a ? b - a : 0;

	return d < max ? d : max;
}

bool stat_slot_read(const struct sock_stat_slot *slot, struct stat_row *row,
		    struct stat_scan_notes *notes)
{
	struct sock_stat_slot c = { 0 };
	uint32_t seq;
	int tries;

	for (tries = 0; tries < STAT_READ_TRIES; tries++) {
		seq = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);
		if (seq & 1) {
			sched_yield();	/* the owner is writing it */
			continue;
		}
		stat_copy_words(&c, slot, sizeof(c));
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&slot->seq, __ATOMIC_RELAXED) == seq)
			break;
	}
	if (tries == STAT_READ_TRIES) {
		notes->busy_slots++;
		return false;
	}
	if (c.state == SOCK_STAT_FREE)
		return false;
	if (c.state >= SOCK_STAT_NSTATES || c.transport >= SOCK_STAT_NTRANSPORTS ||
	    !stat_addr_ok(&c.local) || !stat_addr_ok(&c.peer) ||
	    c.rbuf_size > STAT_RING_MAX || c.sbuf_size > STAT_RING_MAX) {
		notes->bad_slots++;
		return false;
	}
	memset(row, 0, sizeof(*row));
	row->fd = c.fd;
	row->state = c.state;
	row->transport = c.transport;
	row->flags = c.flags;
	row->local = c.local;
	row->peer = c.peer;
	row->rbuf_size = c.rbuf_size;
	row->sbuf_size = c.sbuf_size;
	row->tx_bytes = c.tx_bytes;
	row->rx_bytes = c.rx_bytes;
	row->rx_unread = stat_gap(c.rx_bytes, c.rx_ring_in, c.rbuf_size);
	row->tx_in_flight = stat_gap(c.tx_ring_out, c.tx_ring_in, c.sbuf_size);
	row->tx_nocache = c.tx_nocache;
	return true;
}

/* --- segments --- */

static int stat_rows_push(struct stat_rows *rows, const struct stat_row *row)
{
	if (rows->n == rows->cap) {
		size_t cap = rows->cap ? rows->cap * 2 : 64;
		struct stat_row *v = realloc(rows->v, cap * sizeof(*v));

		if (!v)
			return -1;
		rows->v = v;
		rows->cap = cap;
	}
	rows->v[rows->n++] = *row;
	return 0;
}

void stat_rows_free(struct stat_rows *rows)
{
	free(rows->v);
	rows->v = NULL;
	rows->n = rows->cap = 0;
	free(rows->procs);
	rows->procs = NULL;
	rows->nprocs = rows->procs_cap = 0;
}

/* The header's counts of connects, as they are now: any value is one. */
static int stat_procs_push(struct stat_rows *rows, const struct sock_stat_header *hdr,
			   pid_t pid, const char *comm)
{
	struct stat_proc *p;
	size_t i;

	if (rows->nprocs == rows->procs_cap) {
		size_t cap = rows->procs_cap ? rows->procs_cap * 2 : 16;
		struct stat_proc *v = realloc(rows->procs, cap * sizeof(*v));

		if (!v)
			return -1;
		rows->procs = v;
		rows->procs_cap = cap;
	}
	p = &rows->procs[rows->nprocs++];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	snprintf(p->comm, sizeof(p->comm), "%s", comm);
	for (i = 0; i < SOCK_STAT_NROUTES; i++)
		p->connects[i] = __atomic_load_n(&hdr->connects[i], __ATOMIC_RELAXED);
	return 0;
}

/* The header, checked against the file; false when it is not one of ours. */
static bool stat_header_ok(int fd, const struct sock_stat_header *h, size_t *map_len_p)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	uint64_t need;

	if (fstat(fd, &st) < 0 || seals < 0 || !(seals & F_SEAL_SHRINK))
		return false;
	if (h->magic != SOCK_STAT_MAGIC || h->version != SOCK_STAT_VERSION ||
	    h->header_size != SOCK_STAT_HEADER_SIZE ||
	    h->slot_size != sizeof(struct sock_stat_slot) || h->nslots == 0 ||
	    h->nslots > SOCK_STAT_SLOTS_MAX)
		return false;
	need = (uint64_t)h->header_size + (uint64_t)h->nslots * h->slot_size;
	if ((uint64_t)st.st_size < need)
		return false;
	*map_len_p = (size_t)need;
	return true;
}

int stat_segment_read(int fd, pid_t pid, const char *comm, struct stat_rows *rows,
		      struct stat_scan_notes *notes)
{
	struct sock_stat_header h;
	const struct sock_stat_slot *slots;
	struct stat_row row;
	size_t map_len;
	uint32_t used, i;
	void *map;

	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    !stat_header_ok(fd, &h, &map_len)) {
		notes->bad_segments++;
		return -1;
	}
	map = mmap(NULL, map_len, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		notes->bad_segments++;
		return -1;
	}
	stat_procs_push(rows, map, pid, comm);
	slots = (const struct sock_stat_slot *)((const uint8_t *)map + SOCK_STAT_HEADER_SIZE);
	/* Only slots handed out were ever touched; reading others would
	 * allocate pages of the owner's memfd. */
	used = __atomic_load_n(&((const struct sock_stat_header *)map)->used, __ATOMIC_ACQUIRE);
	if (used > h.nslots)
		used = h.nslots;
	for (i = 0; i < used; i++) {
		if (!stat_slot_read(&slots[i], &row, notes))
			continue;
		row.pid = pid;
		snprintf(row.comm, sizeof(row.comm), "%s", comm);
		if (stat_rows_push(rows, &row) < 0)
			break;
	}
	munmap(map, map_len);
	return 0;
}

/* --- /proc --- */

/* A segment found in a process: several processes may hold one (fork). */
struct stat_found {
	dev_t dev;
	ino_t ino;
	pid_t pid;
	bool owner;		/* the header names this pid */
	int fd;
	char comm[17];
};

struct stat_found_list {
	struct stat_found *v;
	size_t n, cap;
};

static void stat_comm(pid_t pid, char comm[17])
{
	char path[64];
	ssize_t n;
	size_t i;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	strcpy(comm, "?");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, comm, 16);
	close(fd);
	if (n <= 0) {
		strcpy(comm, "?");
		return;
	}
	comm[n] = '\0';
	comm[strcspn(comm, "\n")] = '\0';
	for (i = 0; comm[i]; i++)
		if (!isprint((unsigned char)comm[i]))
			comm[i] = '?';
}

/* Keep @f unless its segment is known already; the owner's copy wins. */
static void stat_found_add(struct stat_found_list *l, struct stat_found *f)
{
	size_t i;

	for (i = 0; i < l->n; i++) {
		if (l->v[i].dev != f->dev || l->v[i].ino != f->ino)
			continue;
		if (f->owner && !l->v[i].owner) {
			close(l->v[i].fd);
			l->v[i] = *f;
		} else {
			close(f->fd);
		}
		return;
	}
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct stat_found *v = realloc(l->v, cap * sizeof(*v));

		if (!v) {
			close(f->fd);
			return;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = *f;
}

/* Is @pid in the network namespace @self_ns?  -1 when we may not know. */
static int stat_same_netns(pid_t pid, const struct stat *self_ns)
{
	char path[64];
	struct stat st;

	if (!self_ns)
		return 1;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	if (stat(path, &st) < 0)
		return errno == ENOENT ? 0 : -1;
	return st.st_dev == self_ns->st_dev && st.st_ino == self_ns->st_ino;
}

/* The segments process @pid holds, into @l. */
static void stat_scan_pid(pid_t pid, const struct stat *self_ns, struct stat_found_list *l,
			  struct stat_scan_notes *notes)
{
	char path[64], link[64];
	struct dirent *de;
	DIR *d;
	int same = stat_same_netns(pid, self_ns);

	if (same <= 0) {
		if (same < 0)
			notes->denied++;
		return;
	}
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d) {
		if (errno == EACCES || errno == EPERM)
			notes->denied++;
		return;
	}
	while ((de = readdir(d))) {
		struct stat_found f = { .pid = pid };
		struct sock_stat_header h;
		struct stat st;
		ssize_t n;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		n = readlinkat(dirfd(d), de->d_name, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (strcmp(link, STAT_LINK_NAME) != 0)
			continue;
		f.fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC);
		if (f.fd < 0) {
			if (errno == EACCES || errno == EPERM)
				notes->denied++;
			continue;
		}
		if (fstat(f.fd, &st) < 0) {
			close(f.fd);
			continue;
		}
		f.dev = st.st_dev;
		f.ino = st.st_ino;
		f.owner = pread(f.fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) && h.pid == pid;
		stat_comm(pid, f.comm);
		stat_found_add(l, &f);
	}
	closedir(d);
}

int stat_scan(pid_t pid, struct stat_rows *rows, struct stat_scan_notes *notes)
{
	struct stat_found_list found = { 0 };
	struct stat self_ns;
	struct dirent *de;
	bool have_ns = stat("/proc/self/ns/net", &self_ns) == 0;
	size_t i;
	DIR *proc;

	if (pid > 0) {
		stat_scan_pid(pid, have_ns ? &self_ns : NULL, &found, notes);
	} else {
		proc = opendir("/proc");
		if (!proc)
			return -1;
		while ((de = readdir(proc))) {
			char *end;
			long p = strtol(de->d_name, &end, 10);

			if (*end || p <= 0)
				continue;
			stat_scan_pid((pid_t)p, have_ns ? &self_ns : NULL, &found, notes);
		}
		closedir(proc);
	}
	for (i = 0; i < found.n; i++) {
		stat_segment_read(found.v[i].fd, found.v[i].pid, found.v[i].comm, rows, notes);
		close(found.v[i].fd);
	}
	free(found.v);
	return 0;
}
