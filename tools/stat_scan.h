/*
 * stat_scan.h - ferry-stat's reader: find the statistics segments of the
 * processes in this network namespace and take consistent, checked
 * copies of their sockets' slots (sock/export/sock_stat.h).
 */
#ifndef FERRY_STAT_SCAN_H
#define FERRY_STAT_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sock_stat.h"

/* One socket, as read. */
struct stat_row {
	pid_t pid;			/* as this process sees it */
	char comm[17];			/* /proc/PID/comm */
	int fd;
	unsigned int state;		/* enum sock_stat_state, checked */
	unsigned int transport;		/* enum sock_stat_transport, checked */
	unsigned int flags;		/* SOCK_STAT_F_* */
	struct sock_stat_addr local, peer;	/* family checked */
	uint64_t tx_bytes, rx_bytes;	/* stream bytes sent and read */
	uint64_t rx_unread;		/* receive ring: arrived, not read */
	uint64_t tx_in_flight;		/* send ring: written, not completed */
	uint64_t tx_nocache;		/* sent with non-temporal stores */
	uint32_t rbuf_size, sbuf_size;
};

/* One process's connects under the shim, by route (sock_stat_header). */
struct stat_proc {
	pid_t pid;
	char comm[17];
	uint64_t connects[SOCK_STAT_NROUTES];	/* by enum sock_stat_route */
};

struct stat_rows {
	struct stat_row *v;
	size_t n, cap;
	struct stat_proc *procs;	/* one per segment read */
	size_t nprocs, procs_cap;
};

/* What a scan could not read, for the user to be told. */
struct stat_scan_notes {
	int denied;		/* processes whose fds or namespace we may not see */
	int bad_segments;	/* segments that failed the checks */
	int bad_slots;		/* slots that failed the checks */
	int busy_slots;		/* slots that never held still to be read */
};

/*
 * stat_scan - append the sockets of every process in this network
 * namespace (only @pid's if @pid > 0) to @rows.  Each segment is read
 * once, through the process that created it when several hold it.
 * Returns 0, or -1 with errno when /proc cannot be read.
 */
int stat_scan(pid_t pid, struct stat_rows *rows, struct stat_scan_notes *notes);

/*
 * stat_segment_read - append the sockets of the segment open as @fd,
 * found in process @pid named @comm, and its counts of connects to
 * @rows->procs.  Returns 0, or -1 (notes->bad_segments
 * counted) when the segment fails the checks.
 */
int stat_segment_read(int fd, pid_t pid, const char *comm, struct stat_rows *rows,
		      struct stat_scan_notes *notes);

/*
 * stat_slot_read - a consistent copy of @slot checked into @row: false
 * when it is free, fails the checks (notes->bad_slots) or kept changing
 * (notes->busy_slots).
 */
bool stat_slot_read(const struct sock_stat_slot *slot, struct stat_row *row,
		    struct stat_scan_notes *notes);

void stat_rows_free(struct stat_rows *rows);

#endif /* FERRY_STAT_SCAN_H */
