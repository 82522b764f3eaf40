/*
 * ping_wire.c - rping's wire format: the 16-byte buffer advertisement and
 * the text of each ping.
 */
#include "config.h"

#include <endian.h>
#include <stdio.h>
#include <string.h>

#include "ping.h"

/* The characters rping rotates through: 'A' (65) to 'z' (122). */
#define PING_CHAR_FIRST 'A'
#define PING_CHAR_LAST 'z'
#define PING_CHAR_SPAN (PING_CHAR_LAST - PING_CHAR_FIRST + 1)

void ping_advert_encode(const struct ping_advert *advert,
			uint8_t out[PING_ADVERT_LEN])
{
	uint64_t addr = htobe64(advert->addr);
	uint32_t rkey = htobe32(advert->rkey);
	uint32_t size = htobe32(advert->size);

	memcpy(out, &addr, 8);
	memcpy(out + 8, &rkey, 4);
	memcpy(out + 12, &size, 4);
}

void ping_advert_decode(const uint8_t in[PING_ADVERT_LEN],
			struct ping_advert *advert_p)
{
	uint64_t addr;
	uint32_t rkey, size;

	memcpy(&addr, in, 8);
	memcpy(&rkey, in + 8, 4);
	memcpy(&size, in + 12, 4);
	advert_p->addr = be64toh(addr);
	advert_p->rkey = be32toh(rkey);
	advert_p->size = be32toh(size);
}

/*
 * "rdma-ping-N: " then characters counting up from a start that moves one
 * step per ping, wrapping from 'z' back to 'A'; the last byte is NUL.  This
 * is what rping sends, so -v output and -V validation read the same.
 */
void ping_pattern_fill(char *buf, size_t size, unsigned long ping)
{
	int len = snprintf(buf, size, "rdma-ping-%lu: ", ping);
	size_t i = len < 0 ? 0 : (size_t)len;
	int c = PING_CHAR_FIRST + (int)(ping % PING_CHAR_SPAN);

	for (; i < size; i++) {
		buf[i] = (char)c;
		if (++c > PING_CHAR_LAST)
			c = PING_CHAR_FIRST;
	}
	buf[size - 1] = '\0';
}
