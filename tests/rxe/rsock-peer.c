/*
 * rsock-peer.c - one end of the rsocket interop test, written against
 * rsocket's API.  Built twice: with <rdma/rsocket.h> and -lrdmacm
 * (librdmacm's rsocket) and with <ferry/rsocket.h> and libferry (ferry's
 * stream sockets), so that each can face the other over Soft-RoCE.
 *
 *   rsock-peer -s [-a ADDR] [-p PORT]             serve one client: echo
 *   rsock-peer -c ADDR [-p PORT] [-b BYTES]       send BYTES in writes of
 *                                                 random sizes, read the echo
 *                                                 back in reads of random
 *                                                 sizes and compare
 *
 * The client writes and reads in turn without blocking (see client()), in
 * one thread, as an echo client with large writes must.
 *
 * Exit status 0 when the bytes came back intact, 1 otherwise.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef RSOCK_PEER_RDMACM
#include <rdma/rsocket.h>
#define PEER_NAME "rdmacm"
#else
#include <ferry/rsocket.h>
#define PEER_NAME "ferry"
#endif

#define CHUNK_MAX (200 * 1024)

static int peer_addr(const char *host, const char *port, struct addrinfo **ai_p)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				  .ai_flags = host ? 0 : AI_PASSIVE };
	int err = getaddrinfo(host, port, &hints, ai_p);

	if (err)
		fprintf(stderr, "rsock-peer(%s): %s: %s\n", PEER_NAME, host ? host : "*",
			gai_strerror(err));
	return err ? -1 : 0;
}

static uint8_t pattern(uint64_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13);
}

static int serve(const char *host, const char *port)
{
	struct addrinfo *ai;
	static uint8_t buf[CHUNK_MAX];
	int l, s, on = 1;
	uint64_t total = 0;
	ssize_t n;

	if (peer_addr(host, port, &ai) < 0)
		return 1;
	l = rsocket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || rsetsockopt(l, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) < 0 ||
	    rbind(l, ai->ai_addr, ai->ai_addrlen) < 0 || rlisten(l, 4) < 0) {
		perror("rsock-peer: listen");
		return 1;
	}
	freeaddrinfo(ai);
	printf("rsock-peer(%s): listening\n", PEER_NAME);
	fflush(stdout);
	s = raccept(l, NULL, NULL);
	if (s < 0) {
		perror("rsock-peer: accept");
		return 1;
	}
	while ((n = rrecv(s, buf, sizeof(buf), 0)) > 0) {
		ssize_t put = 0;

		while (put < n) {
			ssize_t k = rsend(s, buf + put, (size_t)(n - put), 0);

			if (k <= 0) {
				perror("rsock-peer: send");
				return 1;
			}
			put += k;
		}
		total += (uint64_t)n;
	}
	printf("rsock-peer(%s): echoed %llu bytes, then %s\n", PEER_NAME,
	       (unsigned long long)total, n == 0 ? "EOF" : strerror(errno));
	rclose(s);
	rclose(l);
	return n == 0 ? 0 : 1;
}

/* The client: what it has written and read back so far. */
struct echo_client {
	int fd;
	uint64_t bytes;		/* to send, and to get back */
	uint64_t sent, got;
	uint8_t out[CHUNK_MAX];	/* the write under way */
	size_t out_len, out_done;
	unsigned int wseed, rseed;
};

/* Write what it can without blocking: 1 progressed, 0 would block, -1 failed. */
static int client_write_some(struct echo_client *c)
{
	ssize_t k;
	size_t i;

	if (c->out_done == c->out_len) {
		c->out_len = 1 + (size_t)rand_r(&c->wseed) % CHUNK_MAX;
		if (c->out_len > c->bytes - c->sent)
			c->out_len = (size_t)(c->bytes - c->sent);
		for (i = 0; i < c->out_len; i++)
			c->out[i] = pattern(c->sent + i);
		c->out_done = 0;
	}
	k = rsend(c->fd, c->out + c->out_done, c->out_len - c->out_done, MSG_DONTWAIT);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (k <= 0) {
		fprintf(stderr, "rsock-peer: send after %llu bytes: %s\n",
			(unsigned long long)c->sent, k ? strerror(errno) : "sent nothing");
		return -1;
	}
	c->out_done += (size_t)k;
	c->sent += (uint64_t)k;
	if (c->sent == c->bytes && rshutdown(c->fd, SHUT_WR) < 0) {
		perror("rsock-peer: shutdown");
		return -1;
	}
	return 1;
}

/* Read what is there, in a read of random size, and check it. */
static int client_read_some(struct echo_client *c)
{
	static uint8_t in[CHUNK_MAX];
	size_t len = 1 + (size_t)rand_r(&c->rseed) % CHUNK_MAX, i;
	ssize_t k;

	if (len > c->bytes - c->got)
		len = (size_t)(c->bytes - c->got);
	k = rrecv(c->fd, in, len, MSG_DONTWAIT);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (k <= 0) {
		fprintf(stderr, "rsock-peer: recv after %llu bytes: %s\n",
			(unsigned long long)c->got, k ? strerror(errno) : "EOF");
		return -1;
	}
	for (i = 0; i < (size_t)k; i++) {
		if (in[i] != pattern(c->got + i)) {
			fprintf(stderr, "rsock-peer: byte %llu differs\n",
				(unsigned long long)(c->got + i));
			return -1;
		}
	}
	c->got += (uint64_t)k;
	return 1;
}

static int client(const char *host, const char *port, uint64_t bytes)
{
	static struct echo_client c = { .wseed = 1, .rseed = 2 };
	struct addrinfo *ai;
	uint8_t end;
	int w = 0, r;

	if (peer_addr(host, port, &ai) < 0)
		return 1;
	c.fd = rsocket(AF_INET, SOCK_STREAM, 0);
	if (c.fd < 0 || rconnect(c.fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		perror("rsock-peer: connect");
		return 1;
	}
	freeaddrinfo(ai);
	c.bytes = bytes;
	if (!bytes && rshutdown(c.fd, SHUT_WR) < 0)
		return 1;
	/*
	 * Write and read in turn, blocking only when neither can go on: a
	 * client that wrote a whole chunk before reading its echo deadlocked,
	 * against rsocket as against ferry, whenever the chunk was more than
	 * the two receive rings could hold -- as little as 128 KiB with the
	 * default rings, which rsocket publishes to the writer half by half.
	 * (Reading on a thread of its own is no way out: rsocket's rrecv and
	 * rsend race on the receive ring's free count.)
	 */
	while (c.got < bytes) {
		if (c.sent < bytes && (w = client_write_some(&c)) < 0)
			return 1;
		if ((r = client_read_some(&c)) < 0)
			return 1;
		if (w <= 0 && r == 0) {
			struct pollfd p = { .fd = c.fd, .events = POLLIN };

			if (c.sent < bytes)
				p.events |= POLLOUT;
			if (rpoll(&p, 1, -1) < 0) {
				perror("rsock-peer: poll");
				return 1;
			}
		}
		w = 0;
	}
	if (rrecv(c.fd, &end, 1, 0) != 0) {
		fprintf(stderr, "rsock-peer: no EOF after the echo\n");
		return 1;
	}
	rclose(c.fd);
	printf("rsock-peer(%s): %llu bytes echoed intact\n", PEER_NAME,
	       (unsigned long long)c.got);
	return 0;
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *port = "7471";
	uint64_t bytes = 16u << 20;
	int opt, server = 0;

	while ((opt = getopt(argc, argv, "sc:a:p:b:")) != -1) {
		switch (opt) {
		case 's': server = 1; break;
		case 'c': addr = optarg; break;
		case 'a': addr = optarg; break;
		case 'p': port = optarg; break;
		case 'b': bytes = strtoull(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: %s -s [-a ADDR] [-p PORT] | -c ADDR [-p PORT] [-b BYTES]\n",
				argv[0]);
			return 2;
		}
	}
	if (!server && !addr) {
		fprintf(stderr, "rsock-peer: -s or -c ADDR\n");
		return 2;
	}
	return server ? serve(addr, port) : client(addr, port, bytes);
}
