/*
 * perf_spawn.c - the worker processes of the stream rows.
 *
 * Why workers: the socket layer reads FERRY_POLL_US (and the CM reads
 * FERRY_TRANSPORT) once per process, and a busy row and a blocking row want
 * different values.  So every stream row runs in a fresh process on each
 * side, started with the environment of its row.
 *
 * Why a spawner: the session process has ferry's verbs objects open (and
 * so ferry's threads) when the stream rows come.  Forking from there would
 * copy that state into the worker.  Instead, each side forks a spawner at
 * the start of the session, before anything touches ferry; the spawner
 * never calls ferry itself and forks one worker per row on request.
 *
 * Plumbing: the session sends the spawner the row as a TEST message,
 * passing one end of a fresh socketpair with it, and writes the row again
 * as the first message of that socketpair; the worker reads it there,
 * talks to the session over the socketpair (struct perf_worker_report) and
 * exits.  A worker or spawner whose parent dies is killed
 * (PR_SET_PDEATHSIG, kept across exec), so the watchdog of the session
 * covers them.
 *
 * tcp+preload rows: the forked worker execs ferry-perf itself under the
 * preload shim, handing the socketpair down (perf_preload.c); the exec'd
 * program reads the row from it and goes on as a forked worker would.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perf.h"

struct perf_spawner {
	pid_t pid;		/* the spawner process */
	int fd;			/* session end of the spawner's socket */
	int worker_fd;		/* server: the worker of the current row */
};

/* What a worker tells the session (one SEQPACKET message each time). */
struct perf_worker_report {
	uint32_t port;		/* server, first report: listening port, 0: none */
	uint64_t bytes;		/* server, last report: bytes received */
	struct perf_result res;	/* client: the row; server: res.note */
};

static void perf_worker_send(int fd, const struct perf_worker_report *rep)
{
	if (send(fd, rep, sizeof(*rep), MSG_NOSIGNAL) != (ssize_t)sizeof(*rep))
		perf_die_errno("send (to the session)");
}

static void perf_worker_recv(int fd, struct perf_worker_report *rep)
{
	ssize_t n;

	do
		n = recv(fd, rep, sizeof(*rep), 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		perf_die_errno("recv (stream worker)");
	if (n != (ssize_t)sizeof(*rep))
		perf_die("the stream worker exited without a result (see its message above)");
}

/* In the worker: read the row from the channel, run it, report, exit. */
__attribute__((noreturn))
static void perf_worker_main(const struct perf_opts *opts, bool server,
			     int chan_fd)
{
	struct perf_worker_report rep;
	struct perf_msg job;
	struct perf_row row;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	perf_child_pid = 0;
	perf_role_name = server ? "server, stream worker" : "client, stream worker";
	signal(SIGCHLD, SIG_DFL);
	perf_msg_recv(chan_fd, &job, PERF_MSG_TEST, NULL);
	perf_msg_to_row(&job, PERF_MAX_SIZE, &row);
	perf_stream_setenv(&row);
	if (server) {
		perf_stream_serve(opts, &row, chan_fd);
	} else {
		memset(&rep, 0, sizeof(rep));
		perf_stream_run(opts, &row, (uint16_t)job.tcp_port, &rep.res);
		perf_worker_send(chan_fd, &rep);
	}
	fflush(NULL);
	_exit(0);
}

/* A worker that cannot run its row says so the way the session expects. */
__attribute__((noreturn))
static void perf_worker_skip(bool server, const struct perf_row *row,
			     int chan_fd, const char *note)
{
	struct perf_worker_report rep;

	if (server) {		/* the session prints the note */
		perf_stream_report_port(chan_fd, 0, note);
	} else {
		memset(&rep, 0, sizeof(rep));
		rep.res.test = row->test;
		rep.res.op = row->op;
		rep.res.transport = row->transport;
		rep.res.mode = row->mode;
		rep.res.size = row->size;
		rep.res.skipped = true;
		snprintf(rep.res.note, sizeof(rep.res.note), "%s", note);
		perf_worker_send(chan_fd, &rep);
	}
	_exit(0);
}

/* A tcp+preload worker: the row's environment, the shim, exec. */
__attribute__((noreturn))
static void perf_worker_exec(bool server, const struct perf_msg *job, int chan_fd)
{
	struct perf_row row;
	char note[96];

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	perf_child_pid = 0;
	perf_role_name = server ? "server, stream worker" : "client, stream worker";
	perf_msg_to_row(job, PERF_MAX_SIZE, &row);
	perf_stream_setenv(&row);
	perf_preload_exec(server, chan_fd, note, sizeof(note));
	perf_worker_skip(server, &row, chan_fd, note);
}

void perf_stream_worker_main(bool server, int chan_fd)
{
	static struct perf_opts opts;	/* the rows under the shim need none */

	perf_worker_main(&opts, server, chan_fd);
}

/* The spawner: one worker per job until the session closes the socket. */
__attribute__((noreturn))
static void perf_spawner_main(const struct perf_opts *opts, bool server, int fd)
{
	struct perf_msg job;
	ssize_t n;
	int chan_fd;

	signal(SIGCHLD, SIG_IGN);	/* workers are reaped by the kernel */
	for (;;) {
		n = recv(fd, &job, sizeof(job), MSG_PEEK);
		if (n == 0 || (n < 0 && errno != EINTR))
			_exit(0);	/* the session is over */
		if (n < 0)
			continue;
		perf_msg_recv(fd, &job, PERF_MSG_TEST, &chan_fd);
		if (chan_fd < 0)
			perf_die("protocol error: a job without a channel");
		switch (fork()) {
		case -1:
			perf_die_errno("fork (stream worker)");
		case 0:
			close(fd);
			if (job.transport == PERF_TR_PRELOAD)
				perf_worker_exec(server, &job, chan_fd);
			perf_worker_main(opts, server, chan_fd);
		default:
			close(chan_fd);
		}
	}
}

struct perf_spawner *perf_spawner_start(const struct perf_opts *opts,
					const int *close_fds, int nclose)
{
	struct perf_spawner *sp = calloc(1, sizeof(*sp));
	bool server = strcmp(perf_role_name, "server") == 0;
	pid_t parent = getpid();
	int pair[2], i;

	if (!sp)
		perf_die("out of memory");
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
		perf_die_errno("socketpair (spawner)");
	fflush(NULL);
	sp->pid = fork();
	if (sp->pid < 0)
		perf_die_errno("fork (spawner)");
	if (sp->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		perf_child_pid = 0;
		perf_role_name = server ? "server, spawner" : "client, spawner";
		close(pair[0]);
		/* the peer must see the session's sockets close when it ends */
		for (i = 0; i < nclose; i++)
			if (close_fds[i] >= 0)
				close(close_fds[i]);
		perf_spawner_main(opts, server, pair[1]);
	}
	close(pair[1]);
	sp->fd = pair[0];
	sp->worker_fd = -1;
	return sp;
}

void perf_spawner_stop(struct perf_spawner *sp)
{
	if (!sp)
		return;
	if (sp->worker_fd >= 0)
		close(sp->worker_fd);
	close(sp->fd);			/* the spawner exits on EOF */
	while (waitpid(sp->pid, NULL, 0) < 0 && errno == EINTR)
		;
	free(sp);
}

/* Start a worker for @row; returns the session's end of its channel. */
static int perf_spawn_worker(struct perf_spawner *sp, const struct perf_row *row,
			     uint16_t port)
{
	struct perf_msg job;
	int chan[2];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, chan) < 0)
		perf_die_errno("socketpair (stream worker)");
	perf_row_to_msg(row, &job);
	job.tcp_port = port;
	perf_msg_send(chan[0], &job, -1);	/* the worker reads it there */
	perf_msg_send(sp->fd, &job, chan[1]);
	close(chan[1]);
	return chan[0];
}

uint16_t perf_stream_server_start(struct perf_spawner *sp,
				  const struct perf_row *row, char *note,
				  size_t note_len)
{
	struct perf_worker_report rep;

	if (sp->worker_fd >= 0)
		close(sp->worker_fd);
	sp->worker_fd = perf_spawn_worker(sp, row, 0);
	perf_worker_recv(sp->worker_fd, &rep);
	if (rep.port == 0) {
		snprintf(note, note_len, "%s", rep.res.note);
		close(sp->worker_fd);
		sp->worker_fd = -1;
	}
	return (uint16_t)rep.port;
}

uint64_t perf_stream_server_wait(struct perf_spawner *sp)
{
	struct perf_worker_report rep;

	if (sp->worker_fd < 0)
		return 0;		/* skipped row: no worker */
	perf_worker_recv(sp->worker_fd, &rep);
	close(sp->worker_fd);
	sp->worker_fd = -1;
	return rep.bytes;
}

void perf_stream_client(struct perf_spawner *sp, const struct perf_row *row,
			uint16_t port, struct perf_result *res)
{
	struct perf_worker_report rep;
	int fd = perf_spawn_worker(sp, row, port);

	perf_worker_recv(fd, &rep);
	close(fd);
	*res = rep.res;
}

/* Server worker side of the reports (perf_stream.c calls these). */
void perf_stream_report_port(int chan_fd, uint16_t port, const char *note)
{
	struct perf_worker_report rep;

	memset(&rep, 0, sizeof(rep));
	rep.port = port;
	if (note)
		snprintf(rep.res.note, sizeof(rep.res.note), "%s", note);
	perf_worker_send(chan_fd, &rep);
}

void perf_stream_report_bytes(int chan_fd, uint64_t bytes)
{
	struct perf_worker_report rep;

	memset(&rep, 0, sizeof(rep));
	rep.bytes = bytes;
	perf_worker_send(chan_fd, &rep);
}
