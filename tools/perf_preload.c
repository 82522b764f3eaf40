/*
 * perf_preload.c - the tcp+preload stream rows: the tcp rows' code, an
 * unmodified BSD-socket program, run in worker processes that were exec'd
 * with the preload shim (libferry-preload.so) in LD_PRELOAD, so that the
 * shim carries their TCP connections over ferry.
 *
 * Why exec: LD_PRELOAD only acts when a program starts.  The spawner's
 * child (perf_spawn.c) sets the row's environment, adds the shim to
 * LD_PRELOAD and execs ferry-perf itself (/proc/self/exe) in its hidden
 * worker mode, "ferry-perf --stream-worker server|client FD", where FD is
 * the inherited channel to the session; the row is the channel's first
 * message.  Both ends run under the shim: it only uses ferry when a ferry
 * listener answers, which a listener under the shim provides.
 *
 * Why check: the shim falls back to kernel TCP silently when ferry refuses
 * (a program rule, a full backlog, a shim that did not load).  Each
 * connection is asked for FERRY_TRANSPORT_OPT, which only a ferry socket
 * answers; a row with a connection that did not run on ferry is skipped,
 * never reported as a preload figure.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ferry/socket.h>

#include "perf.h"
#include "shim_find.h"

#define PERF_SELF_EXE "/proc/self/exe"

#ifdef __SANITIZE_ADDRESS__
#include <link.h>

/* dl_iterate_phdr: the path of the ASan runtime this process runs with. */
static int perf_preload_asan_path(struct dl_phdr_info *info, size_t size,
				  void *path)
{
	(void)size;
	if (!info->dlpi_name || !strstr(info->dlpi_name, "/libasan.so"))
		return 0;
	snprintf(path, PATH_MAX, "%s", info->dlpi_name);
	return 1;
}

/*
 * A sanitizer build: the exec'd worker is ASan-built too, and ASan refuses
 * to start unless its runtime comes before every other library, the
 * preloaded shim included.  So it goes at the head of LD_PRELOAD.
 */
static int perf_preload_asan_first(void)
{
	char path[PATH_MAX] = "", *value;
	const char *old = getenv("LD_PRELOAD");
	int ret;

	dl_iterate_phdr(perf_preload_asan_path, path);
	if (!path[0] || (old && strncmp(old, path, strlen(path)) == 0))
		return 0;
	if (asprintf(&value, "%s%s%s", path, old && *old ? ":" : "",
		     old ? old : "") < 0)
		return -1;
	ret = setenv("LD_PRELOAD", value, 1);
	free(value);
	return ret;
}
#else
static int perf_preload_asan_first(void)
{
	return 0;
}
#endif

bool perf_preload_find(char *path, size_t len, char *note, size_t note_len)
{
	char why[PATH_MAX + 160];

	if (shim_find(path, len, why, sizeof(why)))
		return true;
	snprintf(note, note_len, "skipped: %s", why);
	return false;
}

bool perf_preload_on_ferry(int fd, char *note, size_t note_len)
{
	char tp[16] = "";
	socklen_t len = sizeof(tp);

	/* getsockopt is the shim's: it answers SOL_FERRY for its ferry fds */
	if (getsockopt(fd, SOL_FERRY, FERRY_TRANSPORT_OPT, tp, &len) == 0) {
		if (strcmp(tp, "shm") == 0)
			return true;
		snprintf(note, note_len, "skipped: the shim's socket runs on \"%s\", not shm",
			 tp);
	} else if (errno == EOPNOTSUPP || errno == ENOPROTOOPT) {
		/* the kernel's answer to SOL_FERRY: this is a TCP socket */
		snprintf(note, note_len, "skipped: fell back to kernel TCP (not a ferry socket)");
	} else {
		snprintf(note, note_len, "skipped: getsockopt FERRY_TRANSPORT_OPT: %s",
			 strerror(errno));
	}
	return false;
}

void perf_preload_exec(bool server, int chan_fd, char *note, size_t note_len)
{
	char shim[PATH_MAX], fd_arg[16];
	char *argv[] = { PERF_PROG, PERF_WORKER_OPT, server ? "server" : "client",
			 fd_arg, NULL };

	if (!perf_preload_find(shim, sizeof(shim), note, note_len))
		return;
	if (shim_add_to_preload(shim) < 0 || perf_preload_asan_first() < 0) {
		snprintf(note, note_len, "skipped: setting LD_PRELOAD: %s", strerror(errno));
		return;
	}
	/* the channel was received close-on-exec: this one must survive */
	if (fcntl(chan_fd, F_SETFD, 0) < 0) {
		snprintf(note, note_len, "skipped: fcntl (worker channel): %s",
			 strerror(errno));
		return;
	}
	snprintf(fd_arg, sizeof(fd_arg), "%d", chan_fd);
	fflush(NULL);
	execv(PERF_SELF_EXE, argv);
	snprintf(note, note_len, "skipped: exec %s under the shim: %s", PERF_SELF_EXE,
		 strerror(errno));
}

bool perf_preload_worker_args(int argc, char **argv, bool *server_p, int *chan_fd_p)
{
	char *end;
	long fd;

	if (argc != 4 || strcmp(argv[1], PERF_WORKER_OPT) != 0)
		return false;
	if (strcmp(argv[2], "server") != 0 && strcmp(argv[2], "client") != 0)
		perf_die("%s: expected server or client, got '%s'", PERF_WORKER_OPT,
			 argv[2]);
	errno = 0;
	fd = strtol(argv[3], &end, 10);
	if (errno || end == argv[3] || *end || fd < 0 || fd > INT_MAX ||
	    fcntl((int)fd, F_GETFD) < 0)
		perf_die("%s: '%s' is not an open channel", PERF_WORKER_OPT, argv[3]);
	*server_p = argv[2][0] == 's';
	*chan_fd_p = (int)fd;
	return true;
}
