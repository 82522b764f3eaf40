/*
 * idle-conns - benchmark (not a test): the memory N idle connections cost,
 * ferry stream sockets over shm beside kernel TCP loopback.
 *
 * For each kind, a server process accepts N connections from a client
 * process; once all are up and idle, the memory of the two processes is
 * taken together:
 *
 *   total = Pss(client) + Pss(server)            (/proc/PID/smaps_rollup)
 *           - Pss of their memfd mappings        (/proc/PID/smaps)
 *           + the pages of every memfd either holds, counted once
 *             (st_blocks of each distinct memfd, open or mapped)
 *
 * Pss already shares a page mapped by both among them; the correction adds
 * the shared memory ferry keeps in memfds that a process holds open but has
 * not mapped (or has mapped only in part), so that nothing ferry allocated
 * is missed and nothing is counted twice.  Kernel memory (socket buffers,
 * struct sock, epoll and eventfd objects) is in neither figure.
 *
 * Descriptors are counted in /proc/PID/fd of each process, before and
 * after, and given per connection ("fds/c"): the hard limit on them, not
 * memory, is what bounds the connections a process can hold.
 *
 * Usage: idle-conns [-n N] [-k ferry|tcp|both]   (default 10000, both)
 * Raises RLIMIT_NOFILE as far as the hard limit allows.
 */
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ferry/socket.h>

#include "monotime.h"

#define IC_PROG "idle-conns"
#define IC_TARGET_MB 200.0		/* issue 4: 10,000 ferry connections */
#define IC_MAX_INODES 262144

/* The calls of one kind of connection. */
struct ic_api {
	const char *name;
	int (*socket)(int domain, int type, int protocol);
	int (*bind)(int fd, const struct sockaddr *addr, socklen_t len);
	int (*listen)(int fd, int backlog);
	int (*accept)(int fd, struct sockaddr *addr, socklen_t *len_p);
	int (*connect)(int fd, const struct sockaddr *addr, socklen_t len);
	int (*getsockname)(int fd, struct sockaddr *addr, socklen_t *len_p);
};

static int ic_k_bind(int fd, const struct sockaddr *a, socklen_t l) { return bind(fd, a, l); }
static int ic_k_accept(int fd, struct sockaddr *a, socklen_t *l) { return accept(fd, a, l); }
static int ic_k_connect(int fd, const struct sockaddr *a, socklen_t l) { return connect(fd, a, l); }
static int ic_k_getsockname(int fd, struct sockaddr *a, socklen_t *l) { return getsockname(fd, a, l); }

static const struct ic_api ic_tcp = {
	"tcp", socket, ic_k_bind, listen, ic_k_accept, ic_k_connect,
	ic_k_getsockname,
};

static const struct ic_api ic_ferry = {
	"ferry-shm", ferry_socket, ferry_sock_bind, ferry_sock_listen,
	ferry_sock_accept, ferry_sock_connect, ferry_sock_getsockname,
};

__attribute__((noreturn, format(printf, 1, 2)))
static void ic_die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", IC_PROG);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* RLIMIT_NOFILE up to the hard limit; returns the soft limit now in force. */
static rlim_t ic_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		ic_die("getrlimit: %s", strerror(errno));
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			ic_die("setrlimit (NOFILE %llu): %s",
			       (unsigned long long)rl.rlim_max, strerror(errno));
	}
	return rl.rlim_cur;
}

static void ic_write_full(int fd, const void *buf, size_t len)
{
	if (write(fd, buf, len) != (ssize_t)len)
		ic_die("write (pipe): %s", strerror(errno));
}

static void ic_read_full(int fd, void *buf, size_t len, const char *what)
{
	ssize_t n = read(fd, buf, len);

	if (n != (ssize_t)len)
		ic_die("the %s process ended early (see its message above)", what);
}

/* --- memory --- */

/* "Pss:" of /proc/PID/smaps_rollup, in kB. */
static uint64_t ic_pss_kb(pid_t pid)
{
	char path[64], line[256];
	unsigned long long kb = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	f = fopen(path, "r");
	if (!f)
		ic_die("%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Pss: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* The distinct memfds of the run, with their allocated size. */
struct ic_memfds {
	ino_t inodes[IC_MAX_INODES];
	int n;
	uint64_t bytes;			/* allocated pages, counted once */
	bool truncated;
};

static void ic_memfd_add(struct ic_memfds *m, const char *path)
{
	struct stat st;
	int i;

	if (stat(path, &st) < 0)
		return;
	for (i = 0; i < m->n; i++)
		if (m->inodes[i] == st.st_ino)
			return;
	if (m->n == IC_MAX_INODES) {
		m->truncated = true;
		return;
	}
	m->inodes[m->n++] = st.st_ino;
	m->bytes += (uint64_t)st.st_blocks * 512;
}

/* How many descriptors @pid holds. */
static int ic_fd_count(pid_t pid)
{
	char dirpath[64];
	struct dirent *de;
	DIR *dir;
	int n = 0;

	snprintf(dirpath, sizeof(dirpath), "/proc/%d/fd", (int)pid);
	dir = opendir(dirpath);
	if (!dir)
		ic_die("%s: %s", dirpath, strerror(errno));
	while ((de = readdir(dir)) != NULL)
		n += de->d_name[0] != '.';
	closedir(dir);
	return n;
}

/* The memfds @pid holds open. */
static void ic_memfds_open(struct ic_memfds *m, pid_t pid)
{
	char dirpath[64], path[320], target[256];
	struct dirent *de;
	DIR *dir;
	ssize_t n;

	snprintf(dirpath, sizeof(dirpath), "/proc/%d/fd", (int)pid);
	dir = opendir(dirpath);
	if (!dir)
		ic_die("%s: %s", dirpath, strerror(errno));
	while ((de = readdir(dir)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dirpath, de->d_name);
		n = readlink(path, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = 0;
		if (strncmp(target, "/memfd:", 7) == 0)
			ic_memfd_add(m, path);
	}
	closedir(dir);
}

/*
 * The memfds @pid has mapped (through /proc/PID/map_files, which needs
 * CAP_SYS_ADMIN; without it, only open memfds are found) and the Pss of
 * those mappings, in kB.
 */
static uint64_t ic_memfds_mapped(struct ic_memfds *m, pid_t pid)
{
	char path[64], line[512], file[320], range[64];
	unsigned long long kb, pss_kb = 0;
	bool in_memfd = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	f = fopen(path, "r");
	if (!f)
		ic_die("%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "Pss: %llu kB", &kb) == 1) {
			if (in_memfd)
				pss_kb += kb;
			continue;
		}
		/* field lines start with a capital; a mapping's header is
		 * "start-end perms offset dev inode path" in lower-case hex */
		if (!strchr("0123456789abcdef", line[0]) ||
		    sscanf(line, "%63s", range) != 1 || !strchr(range, '-'))
			continue;
		in_memfd = strstr(line, "/memfd:") != NULL;
		if (in_memfd) {
			snprintf(file, sizeof(file), "/proc/%d/map_files/%s", (int)pid, range);
			ic_memfd_add(m, file);
		}
	}
	fclose(f);
	return pss_kb;
}

struct ic_memory {
	uint64_t pss_kb[2];		/* client, server */
	int fds[2];			/* descriptors open: client, server */
	uint64_t memfd_pss_kb;		/* both: Pss of memfd mappings */
	uint64_t memfd_bytes;		/* distinct memfds, allocated */
	int memfds;
	double total_mb;
};

static void ic_measure(pid_t client, pid_t server, struct ic_memory *mem)
{
	static struct ic_memfds m;

	memset(&m, 0, sizeof(m));
	mem->pss_kb[0] = ic_pss_kb(client);
	mem->pss_kb[1] = ic_pss_kb(server);
	mem->fds[0] = ic_fd_count(client);
	mem->fds[1] = ic_fd_count(server);
	mem->memfd_pss_kb = ic_memfds_mapped(&m, client) + ic_memfds_mapped(&m, server);
	ic_memfds_open(&m, client);
	ic_memfds_open(&m, server);
	mem->memfd_bytes = m.bytes;
	mem->memfds = m.n;
	if (m.truncated)
		fprintf(stderr, "%s: more than %d memfds: the count is a floor\n",
			IC_PROG, IC_MAX_INODES);
	mem->total_mb = ((double)(mem->pss_kb[0] + mem->pss_kb[1] -
				  mem->memfd_pss_kb) * 1024 + (double)m.bytes) / 1e6;
}

/* --- the two processes (the coordinator never touches ferry) --- */

/* A child at the end of two pipes. */
struct ic_child {
	pid_t pid;
	int to, from;		/* coordinator's ends */
};

typedef void (*ic_child_fn)(const struct ic_api *api, int n, int to_parent,
			    int from_parent);

static void ic_fork(struct ic_child *ch, ic_child_fn fn, const struct ic_api *api,
		    int n)
{
	int up[2], down[2];

	if (pipe(up) < 0 || pipe(down) < 0)
		ic_die("pipe: %s", strerror(errno));
	fflush(NULL);
	ch->pid = fork();
	if (ch->pid < 0)
		ic_die("fork: %s", strerror(errno));
	if (ch->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(up[0]);
		close(down[1]);
		fn(api, n, up[1], down[0]);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	ch->from = up[0];
	ch->to = down[1];
}

static void ic_child_end(struct ic_child *ch)
{
	close(ch->to);		/* EOF: the child exits */
	close(ch->from);
	waitpid(ch->pid, NULL, 0);
}

/* Server: listen, say the port, accept @n, say so, hold until EOF. */
static void ic_server(const struct ic_api *api, int n, int to_parent, int from_parent)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	char go;
	int lfd, i;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = api->socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || api->bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
	    api->listen(lfd, 1024) < 0 ||
	    api->getsockname(lfd, (struct sockaddr *)&sin, &len) < 0)
		ic_die("server (%s): listen: %s", api->name, strerror(errno));
	ic_write_full(to_parent, &sin.sin_port, sizeof(sin.sin_port));
	for (i = 0; i < n; i++)
		if (api->accept(lfd, NULL, NULL) < 0)
			ic_die("server (%s): accept #%d: %s", api->name, i + 1,
			       strerror(errno));
	ic_write_full(to_parent, &n, sizeof(n));
	while (read(from_parent, &go, 1) > 0)
		;
}

/* Client: wait for the port, connect @n, say so, hold until EOF. */
static void ic_client(const struct ic_api *api, int n, int to_parent, int from_parent)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	char go;
	int i, fd;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ic_read_full(from_parent, &sin.sin_port, sizeof(sin.sin_port), "parent");
	for (i = 0; i < n; i++) {
		fd = api->socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || api->connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
			ic_die("client (%s): connection #%d: %s", api->name, i + 1,
			       strerror(errno));
	}
	ic_write_full(to_parent, &n, sizeof(n));
	while (read(from_parent, &go, 1) > 0)
		;
}

static double ic_now_s(void)
{
	return monotime_ns() / 1e9;
}

/* One kind: baseline, @n connections, measure; false on failure. */
static bool ic_run(const struct ic_api *api, int n, struct ic_memory *mem,
		   struct ic_memory *base)
{
	struct ic_child server, client;
	uint16_t port;
	int done;
	double t0;
	bool ok;

	ic_fork(&server, ic_server, api, n);
	ic_fork(&client, ic_client, api, n);
	ic_read_full(server.from, &port, sizeof(port), "server");
	ic_measure(client.pid, server.pid, base);
	t0 = ic_now_s();
	ic_write_full(client.to, &port, sizeof(port));
	ok = read(client.from, &done, sizeof(done)) == (ssize_t)sizeof(done) &&
	     read(server.from, &done, sizeof(done)) == (ssize_t)sizeof(done);
	if (ok) {
		fprintf(stderr, "%s: %s: %d connections up in %.1f s\n", IC_PROG,
			api->name, n, ic_now_s() - t0);
		sleep(1);	/* idle: let lazy set-up and timers settle */
		ic_measure(client.pid, server.pid, mem);
	} else {
		kill(server.pid, SIGKILL);	/* it may wait in accept */
	}
	ic_child_end(&client);
	ic_child_end(&server);
	return ok;
}

static void ic_print(const char *name, int n, const struct ic_memory *m,
		     const struct ic_memory *base)
{
	printf("%-10s %6d %10.1f %10.1f %10.1f %8d %10.1f %10.1f %8.2f %8.2f\n", name, n,
	       m->pss_kb[0] / 1024.0, m->pss_kb[1] / 1024.0,
	       m->memfd_bytes / 1048576.0, m->memfds, m->total_mb,
	       n ? (m->total_mb - base->total_mb) * 1e6 / n / 1024 : 0.0,
	       (double)(m->fds[0] - base->fds[0]) / n,
	       (double)(m->fds[1] - base->fds[1]) / n);
}

int main(int argc, char **argv)
{
	struct ic_memory mem, base;
	bool do_ferry = true, do_tcp = true, ok = true;
	int n = 10000, c;
	rlim_t nofile;

	while ((c = getopt(argc, argv, "n:k:h")) != -1) {
		switch (c) {
		case 'n': n = atoi(optarg); break;
		case 'k':
			do_ferry = !strcmp(optarg, "ferry") || !strcmp(optarg, "both");
			do_tcp = !strcmp(optarg, "tcp") || !strcmp(optarg, "both");
			break;
		default:
			fprintf(stderr, "Usage: %s [-n N] [-k ferry|tcp|both]\n", IC_PROG);
			return c == 'h' ? 0 : 2;
		}
	}
	if (n <= 0 || (!do_ferry && !do_tcp)) {
		fprintf(stderr, "%s: -n must be positive and -k ferry, tcp or both\n", IC_PROG);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	nofile = ic_raise_nofile();
	printf("# %s: %d idle connections between two processes; RLIMIT_NOFILE %llu\n",
	       IC_PROG, n, (unsigned long long)nofile);
	if (nofile < (rlim_t)n + 64)
		printf("# the fd limit (hard limit %llu) is below what %d connections need: "
		       "raise it (ulimit -Hn) or use -n\n", (unsigned long long)nofile, n);
	printf("# total = Pss of both (smaps_rollup) with ferry's memfds counted once; "
	       "kernel memory not included\n");
	printf("%-10s %6s %10s %10s %10s %8s %10s %10s %8s %8s\n", "kind", "conns",
	       "client MiB", "server MiB", "memfd MiB", "memfds", "total MB",
	       "KiB/conn", "fds/c cl", "fds/c sv");
	fflush(stdout);
	if (do_ferry && (ok = ic_run(&ic_ferry, n, &mem, &base))) {
		ic_print(ic_ferry.name, n, &mem, &base);
		if (n == 10000)
			printf("# ferry-shm target: %.0f MB in all for 10000 connections: %s\n",
			       IC_TARGET_MB, mem.total_mb <= IC_TARGET_MB ? "met" : "MISSED");
		else	/* what was measured, carried to 10000 at its own rate */
			printf("# ferry-shm target: %.0f MB in all for 10000 connections: "
			       "not measured (%d connections); at this run's rate, "
			       "10000 would take %.1f MB\n", IC_TARGET_MB, n,
			       base.total_mb + (mem.total_mb - base.total_mb) * 10000 / n);
	}
	fflush(stdout);
	if (do_tcp && ic_run(&ic_tcp, n, &mem, &base))
		ic_print(ic_tcp.name, n, &mem, &base);
	else if (do_tcp)
		ok = false;
	return ok ? 0 : 1;
}
