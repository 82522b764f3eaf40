/*
 * ferry-run - run an unmodified program with ferry's LD_PRELOAD shim, so
 * that its TCP connections to ferry peers go over ferry (man/ferry-run.1).
 *
 * It only sets the environment and execs: LD_PRELOAD gains the shim, and
 * each option becomes the FERRY_* variable the library reads.  Nothing of
 * ferry-run stays in the process.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "shim_find.h"

/* Exit statuses of env(1) and nice(1): ours, not the program's. */
#define RUN_EXIT_USAGE		125	/* ferry-run itself failed */
#define RUN_EXIT_CANNOT_EXEC	126	/* the program exists but would not run */
#define RUN_EXIT_NOT_FOUND	127	/* no such program */

#define RUN_PRELOAD_NAME	"libferry-preload.so"

/* Every FERRY_* variable ferry reads, for --help (tests/ferry-run.sh
 * checks this list against the getenv calls of the sources). */
static const struct run_var {
	const char *name;
	const char *help;
} run_vars[] = {
	{ "FERRY_PRELOAD", "off|0|no|false: the shim passes every call to libc" },
	{ "FERRY_CONF", "rule file of the shim (default /etc/ferry.conf; ferry.conf(5))" },
	{ "FERRY_EXCLUDE_PORTS", "ports and ranges kept on kernel TCP: 22,6000-6010" },
	{ "FERRY_EXCLUDE_PROGRAMS", "program name patterns the shim leaves alone" },
	{ "FERRY_LOG", "error|warn|info|debug: what ferry reports on stderr (warn)" },
	{ "FERRY_POLL_US", "microseconds a socket busy-polls before it sleeps (10; 200 under the shim)" },
	{ "FERRY_RBUF", "receive ring of each socket, bytes, k/m/g (shim 512k, API 128k)" },
	{ "FERRY_SBUF", "send ring of each socket, bytes, k/m/g (shim 512k, API 128k)" },
	{ "FERRY_SHARE_LISTENERS", "1: a listener shared by fork serves ferry clients in every process" },
	{ "FERRY_STREAM_COPY", "auto|cached|nocache: stores of large shm writes (auto)" },
	{ "FERRY_TRANSPORT", "shm|verbs: use only this transport" },
	{ "FERRY_PRELOAD_LIB", "the shim to preload (ferry-run, ferry-perf)" },
};

struct run_opts {
	const char *rbuf, *sbuf, *log, *poll_us, *conf, *transport;
	const char *exclude_ports;
	bool off, dry_run;
};

static void run_usage(FILE *f)
{
	size_t i;

	fprintf(f,
		"Usage: ferry-run [OPTION]... [--] PROGRAM [ARG]...\n"
		"Run PROGRAM with ferry's LD_PRELOAD shim: its TCP connections to ferry\n"
		"peers go over ferry, the others stay on kernel TCP.\n"
		"\n"
		"  -r, --rbuf=SIZE          receive ring of each socket (FERRY_RBUF)\n"
		"  -s, --sbuf=SIZE          send ring of each socket (FERRY_SBUF)\n"
		"  -l, --log=LEVEL          error, warn, info or debug (FERRY_LOG)\n"
		"  -p, --poll-us=US         busy-poll time before sleeping (FERRY_POLL_US)\n"
		"  -c, --conf=FILE          rule file, see ferry.conf(5) (FERRY_CONF)\n"
		"  -x, --exclude-port=LIST  keep these ports on TCP (FERRY_EXCLUDE_PORTS)\n"
		"  -t, --transport=NAME     shm or verbs only (FERRY_TRANSPORT)\n"
		"      --off                load the shim but keep it off (FERRY_PRELOAD=off)\n"
		"  -n, --dry-run            print the environment and command, run nothing\n"
		"  -h, --help               this help\n"
		"  -V, --version            the version\n"
		"\n"
		"SIZE is in bytes, with an optional k, m or g suffix (powers of 1024).\n"
		"The shim: $FERRY_PRELOAD_LIB, else %s, else\n"
		"%s.\n"
		"\n"
		"Environment variables ferry reads (the options above set some):\n",
		FERRY_PRELOAD_INSTALLED, FERRY_PRELOAD_BUILT);
	for (i = 0; i < sizeof(run_vars) / sizeof(run_vars[0]); i++)
		fprintf(f, "  %-24s %s\n", run_vars[i].name, run_vars[i].help);
	fprintf(f, "\nExit status: PROGRAM's; 125 when ferry-run fails, 126 when PROGRAM\n"
		   "cannot be run, 127 when it is not found.\n");
}

static bool run_is_file(const char *path)
{
	return path && *path && access(path, R_OK) == 0;
}

/* A size as the library takes it: digits and one optional k/m/g. */
static bool run_valid_size(const char *s)
{
	size_t digits = strspn(s, "0123456789");

	if (!digits)
		return false;
	s += digits;
	return !*s || (strchr("kKmMgG", *s) && !s[1]);
}

static bool run_valid_level(const char *s)
{
	static const char *const levels[] = { "error", "warn", "info", "debug" };
	size_t i;

	for (i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
		if (strcasecmp(s, levels[i]) == 0)
			return true;
	return false;
}

/* Check what each option was given; a message and false when unusable. */
static bool run_check_opts(const struct run_opts *o)
{
	if (o->rbuf && !run_valid_size(o->rbuf)) {
		fprintf(stderr, "ferry-run: --rbuf %s: not a size (bytes, k, m, g)\n", o->rbuf);
		return false;
	}
	if (o->sbuf && !run_valid_size(o->sbuf)) {
		fprintf(stderr, "ferry-run: --sbuf %s: not a size (bytes, k, m, g)\n", o->sbuf);
		return false;
	}
	if (o->log && !run_valid_level(o->log)) {
		fprintf(stderr, "ferry-run: --log %s: not error, warn, info or debug\n", o->log);
		return false;
	}
	if (o->poll_us && (!*o->poll_us || o->poll_us[strspn(o->poll_us, "0123456789")])) {
		fprintf(stderr, "ferry-run: --poll-us %s: not a number of microseconds\n",
			o->poll_us);
		return false;
	}
	if (o->exclude_ports && (!*o->exclude_ports ||
				 o->exclude_ports[strspn(o->exclude_ports, "0123456789,-")])) {
		fprintf(stderr, "ferry-run: --exclude-port %s: not a list like 22,6000-6010\n",
			o->exclude_ports);
		return false;
	}
	if (o->conf && !run_is_file(o->conf)) {
		fprintf(stderr, "ferry-run: --conf %s: %s\n", o->conf, strerror(errno));
		return false;
	}
	return true;
}

/* Put each option into the environment. */
static int run_set_env(const struct run_opts *o)
{
	char conf[PATH_MAX];
	int ret = 0;

	if (o->rbuf)
		ret |= setenv("FERRY_RBUF", o->rbuf, 1);
	if (o->sbuf)
		ret |= setenv("FERRY_SBUF", o->sbuf, 1);
	if (o->log)
		ret |= setenv("FERRY_LOG", o->log, 1);
	if (o->poll_us)
		ret |= setenv("FERRY_POLL_US", o->poll_us, 1);
	if (o->transport)
		ret |= setenv("FERRY_TRANSPORT", o->transport, 1);
	if (o->off)
		ret |= setenv("FERRY_PRELOAD", "off", 1);
	if (o->conf)	/* absolute: the program may change directory */
		ret |= setenv("FERRY_CONF", realpath(o->conf, conf) ? conf : o->conf, 1);
	if (o->exclude_ports) {
		const char *old = getenv("FERRY_EXCLUDE_PORTS");
		char *v;

		if (old && *old) {
			if (asprintf(&v, "%s,%s", old, o->exclude_ports) < 0)
				return -1;
			ret |= setenv("FERRY_EXCLUDE_PORTS", v, 1);
			free(v);
		} else {
			ret |= setenv("FERRY_EXCLUDE_PORTS", o->exclude_ports, 1);
		}
	}
	return ret;
}

/* Print @word so that a POSIX shell reads it back as one word. */
static void run_print_word(const char *word)
{
	const char *p;

	if (*word && !word[strspn(word, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
					"0123456789_./=:,+-@%")]) {
		fputs(word, stdout);
		return;
	}
	putchar('\'');
	for (p = word; *p; p++) {
		if (*p == '\'')
			fputs("'\\''", stdout);
		else
			putchar(*p);
	}
	putchar('\'');
}

/* --dry-run: the variables that matter and the command, one per line
 * (variables) and on the last line (command), quoted for a shell. */
static void run_print(char **argv)
{
	extern char **environ;
	char **e;

	for (e = environ; *e; e++) {
		if (strncmp(*e, "FERRY_", 6) == 0 || strncmp(*e, "LD_PRELOAD=", 11) == 0) {
			run_print_word(*e);
			putchar('\n');
		}
	}
	for (; *argv; argv++) {
		run_print_word(*argv);
		putchar(argv[1] ? ' ' : '\n');
	}
}

int main(int argc, char **argv)
{
	enum { OPT_OFF = 256 };
	static const struct option longopts[] = {
		{ "rbuf", required_argument, NULL, 'r' },
		{ "sbuf", required_argument, NULL, 's' },
		{ "log", required_argument, NULL, 'l' },
		{ "poll-us", required_argument, NULL, 'p' },
		{ "conf", required_argument, NULL, 'c' },
		{ "exclude-port", required_argument, NULL, 'x' },
		{ "transport", required_argument, NULL, 't' },
		{ "off", no_argument, NULL, OPT_OFF },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct run_opts o = { 0 };
	char shim[PATH_MAX], why[PATH_MAX + 128];
	int c;

	/* '+': the first word that is not an option is the program. */
	while ((c = getopt_long(argc, argv, "+r:s:l:p:c:x:t:nhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'r': o.rbuf = optarg; break;
		case 's': o.sbuf = optarg; break;
		case 'l': o.log = optarg; break;
		case 'p': o.poll_us = optarg; break;
		case 'c': o.conf = optarg; break;
		case 'x': o.exclude_ports = optarg; break;
		case 't': o.transport = optarg; break;
		case OPT_OFF: o.off = true; break;
		case 'n': o.dry_run = true; break;
		case 'h':
			run_usage(stdout);
			return 0;
		case 'V':
			printf("ferry-run (ferry) %s\n", PACKAGE_VERSION);
			return 0;
		default:
			fprintf(stderr, "Try 'ferry-run --help'.\n");
			return RUN_EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "ferry-run: no program to run\nTry 'ferry-run --help'.\n");
		return RUN_EXIT_USAGE;
	}
	if (!run_check_opts(&o))
		return RUN_EXIT_USAGE;
	if (!shim_find(shim, sizeof(shim), why, sizeof(why))) {
		fprintf(stderr, "ferry-run: %s\n", why);
		return RUN_EXIT_USAGE;
	}
	if (run_set_env(&o) < 0 || shim_add_to_preload(shim) < 0) {
		perror("ferry-run: setting the environment");
		return RUN_EXIT_USAGE;
	}
	if (o.dry_run) {
		run_print(argv + optind);
		return 0;
	}
	execvp(argv[optind], argv + optind);
	c = errno;
	fprintf(stderr, "ferry-run: %s: %s\n", argv[optind], strerror(c));
	return c == ENOENT ? RUN_EXIT_NOT_FOUND : RUN_EXIT_CANNOT_EXEC;
}
