/*
 * examples/pingpong.c - the out-of-band address exchange of the ping-pong
 * examples (pingpong.h): the message format, its strict parser, and the
 * client's and server's halves of the conversation over TCP.
 */
#include "pingpong.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Offsets of the fields in "LLLL:QQQQQQ:PPPPPP:G*32". */
enum {
	PP_LID_AT = 0, PP_LID_LEN = 4,
	PP_QPN_AT = 5, PP_QPN_LEN = 6,
	PP_PSN_AT = 12, PP_PSN_LEN = 6,
	PP_GID_AT = 19, PP_GID_LEN = 32,
};

/* A peer that stops talking mid-exchange must not hold us forever. */
#define PP_IO_TIMEOUT_S 30
/* How long a client keeps dialling a server that is not listening yet. */
#define PP_DIAL_TRIES 50
#define PP_DIAL_PAUSE_NS (100 * 1000 * 1000)

static const char pp_done[] = "done";

void pp_dest_format(const struct pp_dest *dest, char msg[PP_MSG_SIZE])
{
	int i;
	int n;

	n = snprintf(msg, PP_MSG_SIZE, "%04x:%06x:%06x:", dest->lid,
		     dest->qpn & 0xffffffu, dest->psn & 0xffffffu);
	for (i = 0; i < 16; i++)
		n += snprintf(msg + n, PP_MSG_SIZE - n, "%02x", dest->gid.raw[i]);
}

/* Value of a hex digit, -1 for anything else (uppercase too, as sscanf). */
static int pp_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int pp_hex_field(const char *text, int len, uint32_t *value_p)
{
	uint32_t value = 0;
	int digit;
	int i;

	for (i = 0; i < len; i++) {
		digit = pp_hex_digit(text[i]);
		if (digit < 0)
			return -1;
		value = value << 4 | (uint32_t)digit;
	}
	*value_p = value;
	return 0;
}

int pp_dest_parse(const char msg[PP_MSG_SIZE], struct pp_dest *dest_p)
{
	struct pp_dest dest;
	uint32_t value;
	int i;

	if (msg[PP_QPN_AT - 1] != ':' || msg[PP_PSN_AT - 1] != ':' ||
	    msg[PP_GID_AT - 1] != ':' || msg[PP_MSG_SIZE - 1] != '\0')
		return -1;
	if (pp_hex_field(msg + PP_LID_AT, PP_LID_LEN, &value) < 0)
		return -1;
	dest.lid = (uint16_t)value;
	if (pp_hex_field(msg + PP_QPN_AT, PP_QPN_LEN, &dest.qpn) < 0 ||
	    pp_hex_field(msg + PP_PSN_AT, PP_PSN_LEN, &dest.psn) < 0)
		return -1;
	for (i = 0; i < 16; i++) {
		if (pp_hex_field(msg + PP_GID_AT + 2 * i, 2, &value) < 0)
			return -1;
		dest.gid.raw[i] = (uint8_t)value;
	}
	*dest_p = dest;
	return 0;
}

void pp_gid_str(const union ferry_gid *gid, char buf[PP_GID_STRLEN])
{
	if (!inet_ntop(AF_INET6, gid->raw, buf, PP_GID_STRLEN))
		snprintf(buf, PP_GID_STRLEN, "?");
}

/* Exactly len bytes, or -1 (a short read is the peer hanging up). */
static int pp_read_full(int fd, void *buf, size_t len)
{
	size_t done = 0;
	ssize_t n;

	while (done < len) {
		n = read(fd, (char *)buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}

static int pp_write_full(int fd, const void *buf, size_t len)
{
	size_t done = 0;
	ssize_t n;

	while (done < len) {
		n = write(fd, (const char *)buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}

static void pp_sock_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = PP_IO_TIMEOUT_S };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int pp_dest_send(int fd, const struct pp_dest *mine)
{
	char msg[PP_MSG_SIZE];

	pp_dest_format(mine, msg);
	if (pp_write_full(fd, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "Couldn't send local address: %m\n");
		return -1;
	}
	return 0;
}

static int pp_dest_recv(int fd, struct pp_dest *peer_p)
{
	char msg[PP_MSG_SIZE];

	if (pp_read_full(fd, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "Couldn't read remote address\n");
		return -1;
	}
	if (pp_dest_parse(msg, peer_p) < 0) {
		fprintf(stderr, "Remote address is malformed\n");
		return -1;
	}
	return 0;
}

/* One connect to each address of host:port; -1 with errno of the last. */
static int pp_dial_once(const struct addrinfo *list)
{
	const struct addrinfo *ai;
	int saved = ECONNREFUSED;
	int fd;

	for (ai = list; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			return fd;
		saved = errno;
		close(fd);
	}
	errno = saved;
	return -1;
}

/*
 * Dial, retrying a refused connection for a few seconds: unlike rdma-core's
 * client, which gives up at once, so that a script may start both sides
 * together.
 */
static int pp_dial(const char *host, int port)
{
	const struct timespec pause = { .tv_nsec = PP_DIAL_PAUSE_NS };
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *list;
	char service[16];
	int tries;
	int fd = -1;
	int rc;

	snprintf(service, sizeof(service), "%d", port);
	rc = getaddrinfo(host, service, &hints, &list);
	if (rc != 0) {
		fprintf(stderr, "%s for %s:%d\n", gai_strerror(rc), host, port);
		return -1;
	}
	for (tries = 0; tries < PP_DIAL_TRIES; tries++) {
		fd = pp_dial_once(list);
		if (fd >= 0 || errno != ECONNREFUSED)
			break;
		nanosleep(&pause, NULL);
	}
	freeaddrinfo(list);
	if (fd < 0)
		fprintf(stderr, "Couldn't connect to %s:%d: %m\n", host, port);
	return fd;
}

int pp_exchange_client(const char *host, int port, const struct pp_dest *mine,
		       struct pp_dest *peer_p)
{
	struct pp_dest peer;
	int fd;

	fd = pp_dial(host, port);
	if (fd < 0)
		return -1;
	pp_sock_timeouts(fd);
	if (pp_dest_send(fd, mine) < 0 || pp_dest_recv(fd, &peer) < 0)
		goto err_close_fd;
	if (pp_write_full(fd, pp_done, sizeof(pp_done)) < 0) {
		fprintf(stderr, "Couldn't send \"done\": %m\n");
		goto err_close_fd;
	}
	close(fd);
	*peer_p = peer;
	return 0;

err_close_fd:
	close(fd);
	return -1;
}

/* A listening socket on port, any address (IPv6 first, as getaddrinfo says). */
static int pp_listen(int port)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE, .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM };
	struct addrinfo *list, *ai;
	char service[16];
	int one = 1;
	int fd = -1;
	int rc;

	snprintf(service, sizeof(service), "%d", port);
	rc = getaddrinfo(NULL, service, &hints, &list);
	if (rc != 0) {
		fprintf(stderr, "%s for port %d\n", gai_strerror(rc), port);
		return -1;
	}
	for (ai = list; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1) == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(list);
	if (fd < 0)
		fprintf(stderr, "Couldn't listen to port %d: %m\n", port);
	return fd;
}

int pp_server_accept(int port, struct pp_dest *peer_p)
{
	int listen_fd;
	int fd;

	listen_fd = pp_listen(port);
	if (listen_fd < 0)
		return -1;
	do
		fd = accept(listen_fd, NULL, NULL);
	while (fd < 0 && errno == EINTR);
	close(listen_fd);
	if (fd < 0) {
		fprintf(stderr, "accept() failed: %m\n");
		return -1;
	}
	pp_sock_timeouts(fd);
	if (pp_dest_recv(fd, peer_p) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int pp_server_reply(int fd, const struct pp_dest *mine)
{
	char done[sizeof(pp_done)];
	int rc = -1;

	if (pp_dest_send(fd, mine) < 0)
		goto out_close_fd;
	if (pp_read_full(fd, done, sizeof(done)) < 0 ||
	    memcmp(done, pp_done, sizeof(done)) != 0) {
		fprintf(stderr, "Couldn't read \"done\" from the client\n");
		goto out_close_fd;
	}
	rc = 0;
out_close_fd:
	close(fd);
	return rc;
}

int pp_exchange_server(int port, const struct pp_dest *mine,
		       struct pp_dest *peer_p)
{
	int fd;

	fd = pp_server_accept(port, peer_p);
	if (fd < 0)
		return -1;
	return pp_server_reply(fd, mine);
}

/* --- @n addresses each way, for ping-pongs over several QPs --- */

static int pp_dests_send(int fd, const struct pp_dest *mine, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (pp_dest_send(fd, &mine[i]) < 0)
			return -1;
	return 0;
}

static int pp_dests_recv(int fd, struct pp_dest *peer, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (pp_dest_recv(fd, &peer[i]) < 0)
			return -1;
	return 0;
}

int pp_exchange_client_n(const char *host, int port, const struct pp_dest *mine,
			 struct pp_dest *peer, int n)
{
	int fd = pp_dial(host, port);

	if (fd < 0)
		return -1;
	pp_sock_timeouts(fd);
	if (pp_dests_send(fd, mine, n) < 0 || pp_dests_recv(fd, peer, n) < 0)
		goto err_close_fd;
	if (pp_write_full(fd, pp_done, sizeof(pp_done)) < 0) {
		fprintf(stderr, "Couldn't send \"done\": %m\n");
		goto err_close_fd;
	}
	close(fd);
	return 0;

err_close_fd:
	close(fd);
	return -1;
}

int pp_server_accept_n(int port, struct pp_dest *peer, int n)
{
	int fd = pp_server_accept(port, &peer[0]);

	if (fd < 0)
		return -1;
	if (n > 1 && pp_dests_recv(fd, peer + 1, n - 1) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int pp_server_reply_n(int fd, const struct pp_dest *mine, int n)
{
	if (n > 1 && pp_dests_send(fd, mine, n - 1) < 0) {
		close(fd);
		return -1;
	}
	return pp_server_reply(fd, &mine[n - 1]);
}

/* --- what the examples share besides the exchange --- */

long pp_number(const char *what, const char *text, long lo, long hi)
{
	char *end;
	long v = strtol(text, &end, 0);

	if (*text == '\0' || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "bad %s: %s\n", what, text);
		return -1;
	}
	return v;
}

enum ferry_mtu pp_mtu_of(long mtu)
{
	switch (mtu) {
	case 256: return FERRY_MTU_256;
	case 512: return FERRY_MTU_512;
	case 1024: return FERRY_MTU_1024;
	case 2048: return FERRY_MTU_2048;
	case 4096: return FERRY_MTU_4096;
	default: return 0;
	}
}

struct ferry_context *pp_open_device(const char *devname)
{
	struct ferry_device **list = ferry_get_device_list(NULL);
	struct ferry_context *context = NULL;
	int i;

	if (!list) {
		perror("Failed to get devices list");
		return NULL;
	}
	for (i = 0; list[i]; i++)
		if (!devname || strcmp(ferry_get_device_name(list[i]), devname) == 0)
			break;
	if (!list[i])
		fprintf(stderr, devname ? "Device %s not found\n" : "No devices found\n",
			devname);
	else if (!(context = ferry_open_device(list[i])))
		fprintf(stderr, "Couldn't get context for %s\n", ferry_get_device_name(list[i]));
	ferry_free_device_list(list);
	return context;
}

int pp_wait_cq_event(struct ferry_comp_channel *channel, struct ferry_cq *cq,
		     unsigned int *events_p)
{
	struct ferry_cq *ev_cq;
	void *ev_ctx;

	if (ferry_get_cq_event(channel, &ev_cq, &ev_ctx) < 0) {
		perror("Failed to get cq_event");
		return -1;
	}
	(*events_p)++;
	if (ev_cq != cq) {
		fprintf(stderr, "CQ event for unknown CQ %p\n", (void *)ev_cq);
		return -1;
	}
	if (ferry_req_notify_cq(cq, 0) < 0) {
		perror("Couldn't request CQ notification");
		return -1;
	}
	return 0;
}

void pp_report(unsigned int size, unsigned int iters, const struct timeval *start,
	       const struct timeval *end)
{
	double usec = (double)(end->tv_sec - start->tv_sec) * 1e6 +
		      (double)(end->tv_usec - start->tv_usec);
	long long bytes = (long long)size * iters * 2;

	printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1e6,
	       (double)bytes * 8. / usec);
	printf("%u iters in %.2f seconds = %.2f usec/iter\n", iters, usec / 1e6,
	       usec / iters);
}
