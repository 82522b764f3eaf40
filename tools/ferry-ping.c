/*
 * ferry-ping - connectivity and round-trip latency over ferry, speaking
 * rping's protocol (see ping.h and man/ferry-ping.1).
 *
 * This file: the command line, signals, messages and addresses.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "ping.h"

/* Exit statuses. */
#define PING_EXIT_USAGE 2

struct ping_opts ping_opts = {
	.port = PING_DEFAULT_PORT,
	.size = PING_DEFAULT_SIZE,
};
volatile sig_atomic_t ping_interrupted;

void ping_error(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s: ", PING_PROG);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void ping_debug(const char *fmt, ...)
{
	va_list ap;

	if (!ping_opts.debug)
		return;
	fprintf(stderr, "%s: ", PING_PROG);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

const char *ping_addr_str(const struct sockaddr *sa)
{
	static char str[INET6_ADDRSTRLEN + 16];
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned int port = 0;

	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
		port = ntohs(sin->sin_port);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
		port = ntohs(sin6->sin6_port);
	}
	snprintf(str, sizeof(str), "%s port %u", host, port);
	return str;
}

int ping_addr_parse(const char *host, uint16_t port, bool passive,
		    struct sockaddr_storage *ss_p)
{
	struct addrinfo hints, *res;
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = passive ? AI_PASSIVE : 0;
	rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc) {
		ping_error("cannot resolve address '%s': %s", host ? host : "(any)",
			   gai_strerror(rc));
		return -1;
	}
	memset(ss_p, 0, sizeof(*ss_p));
	memcpy(ss_p, res->ai_addr, res->ai_addrlen);
	if (ss_p->ss_family == AF_INET)
		((struct sockaddr_in *)ss_p)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss_p)->sin6_port = htons(port);
	freeaddrinfo(res);
	return 0;
}

static void ping_usage(FILE *out)
{
	fprintf(out,
		"usage: %s -s [-vVdPq] [-S size] [-C count] [-a addr] [-p port]\n"
		"       %s -c [-vVdq] [-S size] [-C count] [-I addr] -a addr [-p port]\n"
		"  -s        server\n"
		"  -c        client\n"
		"  -a addr   server: address to listen on (default: any IPv4; -a ::0 for IPv6)\n"
		"            client: the server's address\n"
		"  -I addr   client: source address to bind to\n"
		"  -p port   port (default %d)\n"
		"  -C count  pings per connection (default or 0: until interrupted)\n"
		"  -S size   bytes per ping, %d to %d (default %d)\n"
		"  -v        print each ping's data\n"
		"  -V        validate each ping's data\n"
		"  -d        debug output on stderr\n"
		"  -P        server: persistent, serve clients one after another\n"
		"  -q        print only the summary\n"
		"  -h        this help\n"
		"The transport is chosen by ferry (shm on this host);\n"
		"FERRY_TRANSPORT=shm|verbs forces one.\n",
		PING_PROG, PING_PROG, PING_DEFAULT_PORT, PING_MIN_SIZE,
		PING_MAX_SIZE, PING_DEFAULT_SIZE);
}

static void __attribute__((noreturn)) ping_bad_usage(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", PING_PROG);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	ping_usage(stderr);
	exit(PING_EXIT_USAGE);
}

/* A whole decimal number in [min, max], or a usage error naming @flag. */
static unsigned long ping_parse_num(const char *arg, char flag,
				    unsigned long min, unsigned long max)
{
	unsigned long value;
	char *end;

	errno = 0;
	value = strtoul(arg, &end, 10);
	if (errno || end == arg || *end || arg[0] == '-' || value < min || value > max)
		ping_bad_usage("invalid -%c '%s' (valid range is %lu to %lu)", flag,
			       arg, min, max);
	return value;
}

static void ping_parse_args(int argc, char **argv)
{
	bool client = false;
	int c;

	opterr = 0;
	while ((c = getopt(argc, argv, ":sca:I:p:C:S:vVdPqh")) != -1) {
		switch (c) {
		case 's': ping_opts.server = true; break;
		case 'c': client = true; break;
		case 'a': ping_opts.addr = optarg; break;
		case 'I': ping_opts.src_addr = optarg; break;
		case 'p':
			ping_opts.port = (uint16_t)ping_parse_num(optarg, 'p', 1, 65535);
			break;
		case 'C':
			ping_opts.count = ping_parse_num(optarg, 'C', 0, LONG_MAX);
			break;
		case 'S':
			ping_opts.size = ping_parse_num(optarg, 'S', PING_MIN_SIZE,
							PING_MAX_SIZE);
			break;
		case 'v': ping_opts.verbose = true; break;
		case 'V': ping_opts.validate = true; break;
		case 'd': ping_opts.debug = true; break;
		case 'P': ping_opts.persistent = true; break;
		case 'q': ping_opts.quiet = true; break;
		case 'h': ping_usage(stdout); exit(0);
		case ':': ping_bad_usage("option -%c needs an argument", optopt);
		default: ping_bad_usage("unknown option -%c", optopt);
		}
	}
	if (optind < argc)
		ping_bad_usage("unexpected argument '%s'", argv[optind]);
	if (ping_opts.server == client)
		ping_bad_usage("give exactly one of -s (server) and -c (client)");
	if (client && !ping_opts.addr)
		ping_bad_usage("the client needs the server's address (-a addr)");
	if (client && ping_opts.persistent)
		ping_bad_usage("-P is for the server");
	if (ping_opts.server && ping_opts.src_addr)
		ping_bad_usage("-I is for the client");
	if (ping_opts.quiet)
		ping_opts.verbose = false;
}

static void ping_on_signal(int sig)
{
	(void)sig;
	ping_interrupted = 1;
}

int main(int argc, char **argv)
{
	struct sigaction sa;

	ping_parse_args(argc, argv);
	/* No SA_RESTART: a sleeping poll(2) must return to see the flag. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = ping_on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* Lines reach a pipe as they are printed, as a terminal sees them. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	return ping_opts.server ? ping_server_run() : ping_client_run();
}
