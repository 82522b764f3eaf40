/*
 * rsock-peer.c - one end of the rsocket interop test, written against
 * rsocket's API.  Built twice: with <rdma/rsocket.h> and -lrdmacm
 * (librdmacm's rsocket) and with <ferry/rsocket.h> and libferry (ferry's
 * stream sockets), so that each can face the other over Soft-RoCE.
 *
 *   rsock-peer -s [-a ADDR] [-p PORT]             serve one client: echo
 *   rsock-peer -c ADDR [-p PORT] [-b BYTES]       send BYTES in writes of
 *                                                 random sizes, read the echo
 *                                                 back and compare
 *
 * Exit status 0 when the bytes came back intact, 1 otherwise.
 */
#include <errno.h>
#include <netdb.h>
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

static int client(const char *host, const char *port, uint64_t bytes)
{
	static uint8_t out[CHUNK_MAX], in[CHUNK_MAX];
	uint64_t sent = 0, got = 0;
	struct addrinfo *ai;
	unsigned int seed = 1;
	int s;

	if (peer_addr(host, port, &ai) < 0)
		return 1;
	s = rsocket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || rconnect(s, ai->ai_addr, ai->ai_addrlen) < 0) {
		perror("rsock-peer: connect");
		return 1;
	}
	freeaddrinfo(ai);
	/* Lock-step: a write of random size, then read its echo in full. */
	while (sent < bytes) {
		size_t len = 1 + (size_t)rand_r(&seed) % CHUNK_MAX, i;
		uint64_t start = sent;

		if (len > bytes - sent)
			len = (size_t)(bytes - sent);
		for (i = 0; i < len; i++)
			out[i] = pattern(start + i);
		for (i = 0; i < len;) {
			ssize_t k = rsend(s, out + i, len - i, 0);

			if (k <= 0) {
				perror("rsock-peer: send");
				return 1;
			}
			i += (size_t)k;
		}
		sent += len;
		while (got < sent) {
			ssize_t k = rrecv(s, in, (size_t)(sent - got), 0);

			if (k <= 0) {
				fprintf(stderr, "rsock-peer: recv: %s\n", k ? strerror(errno) : "EOF");
				return 1;
			}
			for (i = 0; i < (size_t)k; i++) {
				if (in[i] != pattern(got + i)) {
					fprintf(stderr, "rsock-peer: byte %llu differs\n",
						(unsigned long long)(got + i));
					return 1;
				}
			}
			got += (uint64_t)k;
		}
	}
	rshutdown(s, SHUT_WR);
	if (rrecv(s, in, 1, 0) != 0) {
		fprintf(stderr, "rsock-peer: no EOF after the echo\n");
		return 1;
	}
	rclose(s);
	printf("rsock-peer(%s): %llu bytes echoed intact\n", PEER_NAME,
	       (unsigned long long)got);
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
