/*
 * echo-client.c - the client of an echo server, for tests/preload/fork.sh.
 *
 *   echo-client PORT BYTES SEED
 *
 * Connects to 127.0.0.1:PORT and sends BYTES bytes of a stream that SEED
 * determines, while reading the echo and comparing it with what was sent,
 * byte for byte; after the last byte it half-closes (shutdown SHUT_WR) and
 * reads on until the server's EOF.  Exits 0 when exactly BYTES came back
 * intact, 1 otherwise (saying where they differ).
 *
 * Sending and receiving are interleaved with poll() over a non-blocking
 * socket, so that the echo never deadlocks however little the buffers hold
 * (a client that wrote everything before reading would wait on a server
 * waiting on it).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *me = "echo-client";

/* The stream repeats a block of this many bytes: prime, so that it slides
 * against every power-of-two buffer size. */
#define PATTERN_LEN 1048573

static unsigned char pattern[PATTERN_LEN];

/* Fill the pattern from @seed (xorshift64*). */
static void pattern_fill(uint64_t seed)
{
	uint64_t x = seed * 2654435761u + 88172645463325252ull;
	size_t i;

	for (i = 0; i < PATTERN_LEN; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		pattern[i] = (unsigned char)((x * 2685821657736338717ull) >> 56);
	}
}

/* Copy @len bytes of the stream, from offset @off, into @buf. */
static void stream_at(unsigned long long off, unsigned char *buf, size_t len)
{
	while (len > 0) {
		size_t at = (size_t)(off % PATTERN_LEN);
		size_t n = PATTERN_LEN - at < len ? PATTERN_LEN - at : len;

		memcpy(buf, pattern + at, n);
		buf += n;
		off += n;
		len -= n;
	}
}

static int connect_to(int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	int fd;

	sin.sin_port = htons((unsigned short)port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0) {
		fprintf(stderr, "%s: socket: %m\n", me);
		return -1;
	}
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
		fprintf(stderr, "%s: connect to 127.0.0.1:%d: %m\n", me, port);
		close(fd);
		return -1;
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
		fprintf(stderr, "%s: O_NONBLOCK: %m\n", me);
		close(fd);
		return -1;
	}
	return fd;
}

/* Send what fits of the stream from offset *@sent; -1 on error. */
static int send_some(int fd, unsigned long long *sent, unsigned long long bytes)
{
	unsigned char buf[65536];
	size_t len = bytes - *sent < sizeof(buf) ? (size_t)(bytes - *sent) : sizeof(buf);
	ssize_t n;

	stream_at(*sent, buf, len);
	n = send(fd, buf, len, MSG_NOSIGNAL);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
	*sent += (unsigned long long)n;
	return 0;
}

/* Read what is there and check it against the stream from *@got: 1 at
 * EOF, 0 for more, -1 on error or a difference. */
static int receive_some(int fd, unsigned long long *got, unsigned long long sent)
{
	unsigned char buf[65536], want[65536];
	ssize_t n, i;

	n = recv(fd, buf, sizeof(buf), 0);
	if (n == 0)
		return 1;
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return 0;
		fprintf(stderr, "%s: recv after %llu bytes: %m\n", me, *got);
		return -1;
	}
	if (*got + (unsigned long long)n > sent) {
		fprintf(stderr, "%s: %llu bytes came back, only %llu were sent\n", me,
			*got + (unsigned long long)n, sent);
		return -1;
	}
	stream_at(*got, want, (size_t)n);
	for (i = 0; i < n; i++) {
		if (buf[i] != want[i]) {
			fprintf(stderr, "%s: byte %llu came back as 0x%02x, sent 0x%02x\n", me,
				*got + (unsigned long long)i, buf[i], want[i]);
			return -1;
		}
	}
	*got += (unsigned long long)n;
	return 0;
}

int main(int argc, char **argv)
{
	unsigned long long bytes, sent = 0, got = 0;
	int fd, port, eof = 0, shut = 0;

	if (argc != 4 || (port = atoi(argv[1])) <= 0 || port > 65535) {
		fprintf(stderr, "usage: %s PORT BYTES SEED\n", me);
		return 2;
	}
	bytes = strtoull(argv[2], NULL, 0);
	pattern_fill(strtoull(argv[3], NULL, 0));
	fd = connect_to(port);
	if (fd < 0)
		return 1;
	while (!eof) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };

		if (sent == bytes && !shut) {
			if (shutdown(fd, SHUT_WR) < 0) {
				fprintf(stderr, "%s: shutdown: %m\n", me);
				return 1;
			}
			shut = 1;
		}
		if (sent < bytes)
			pfd.events |= POLLOUT;
		if (poll(&pfd, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "%s: poll: %m\n", me);
			return 1;
		}
		if (pfd.revents & POLLNVAL) {
			fprintf(stderr, "%s: poll says the socket is not open\n", me);
			return 1;
		}
		if ((pfd.revents & POLLOUT) && send_some(fd, &sent, bytes) < 0) {
			fprintf(stderr, "%s: send after %llu bytes: %m\n", me, sent);
			return 1;
		}
		if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
			eof = receive_some(fd, &got, sent);
			if (eof < 0)
				return 1;
		}
	}
	close(fd);
	if (got != bytes || sent != bytes) {
		fprintf(stderr, "%s: sent %llu bytes, %llu came back before EOF\n", me, sent, got);
		return 1;
	}
	printf("%s: %llu bytes echoed intact\n", me, got);
	return 0;
}
