/*
 * tcp_wire_crc.c - CRC-32C (Castagnoli), the CRC of MPA FPDUs (and of
 * iSCSI, whose RFC 3720 gives the test vectors).  Reflected polynomial
 * 0x82F63B78, initial value and final XOR all ones.
 *
 * Two ways to compute it, one result: slice-by-8 tables in software, and
 * the SSE4.2 crc32 instruction, chosen at run time because a build for
 * generic x86-64 cannot assume it.  Every FPDU byte passes through here
 * when CRC is negotiated (hardware iWARP peers ask for it by default), so
 * speed matters: the instruction folds 8 bytes per step, over three
 * interleaved streams on long buffers (below), and slice-by-8 replaces
 * the bytewise table's chain of 8 dependent lookups per 8 bytes by 8
 * independent ones.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <pthread.h>
#include <string.h>

#include "tcp_wire.h"

#define CRC32C_POLY 0x82F63B78u	/* 0x1EDC6F41 bit-reversed */

/*
 * crc_table[0] is the bytewise table; crc_table[k][b] is the CRC of byte b
 * followed by k zero bytes, so that eight table lookups advance the CRC
 * by eight bytes at once.
 */
static uint32_t crc_table[8][256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void crc_table_fill(void)
{
	for (uint32_t b = 0; b < 256; b++) {
		uint32_t c = b;

		for (int bit = 0; bit < 8; bit++)
			c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
		crc_table[0][b] = c;
	}
	for (uint32_t b = 0; b < 256; b++)
		for (int k = 1; k < 8; k++)
			crc_table[k][b] = (crc_table[k - 1][b] >> 8) ^
					  crc_table[0][crc_table[k - 1][b] & 0xff];
}

/* Little-endian load whatever the alignment, so that the eight bytes fold
 * in the order the reflected CRC consumes them. */
static uint64_t load_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

uint32_t tcpw_crc32c_sw(uint32_t crc, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	uint32_t c = ~crc;

	pthread_once(&crc_table_once, crc_table_fill);
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t v = load_le64(p) ^ c;

		c = crc_table[7][v & 0xff] ^ crc_table[6][(v >> 8) & 0xff] ^
		    crc_table[5][(v >> 16) & 0xff] ^ crc_table[4][(v >> 24) & 0xff] ^
		    crc_table[3][(v >> 32) & 0xff] ^ crc_table[2][(v >> 40) & 0xff] ^
		    crc_table[1][(v >> 48) & 0xff] ^ crc_table[0][v >> 56];
	}
	while (n--)
		c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
	return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>

bool tcpw_crc32c_hw_available(void)
{
	return __builtin_cpu_supports("sse4.2");
}

/*
 * One crc32q has a latency of three cycles but the CPU can start one per
 * cycle, so a single chain runs at a third of the speed the unit has.  A
 * long buffer is cut into three streams of the same length, each folded
 * from a zero state, interleaved so the three chains overlap; the raw
 * states then combine as the CRC algebra says:
 *	raw(s, A || B) = shift_|B|(raw(s, A)) ^ raw(0, B)
 * where shift_L (feeding L zero bytes) is linear in the 32-bit state, so
 * four 256-entry tables per stream length apply it in four lookups.
 */
#define CRC_LONG  1024	/* bytes per stream while three of them fit */
#define CRC_SHORT 128	/* then this, for FPDUs of a few hundred bytes */

static uint32_t shift_long[4][256], shift_short[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

__attribute__((target("sse4.2")))
static void shift_fill_one(uint32_t t[4][256], size_t len)
{
	for (int k = 0; k < 4; k++) {
		for (uint32_t b = 0; b < 256; b++) {
			uint64_t c = (uint64_t)b << (8 * k);

			for (size_t i = 0; i < len; i += 8)
				c = _mm_crc32_u64(c, 0);
			t[k][b] = (uint32_t)c;
		}
	}
}

static void shift_fill(void)
{
	shift_fill_one(shift_long, CRC_LONG);
	shift_fill_one(shift_short, CRC_SHORT);
}

static uint64_t shift(uint32_t t[4][256], uint64_t c)
{
	return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^
	       t[2][(c >> 16) & 0xff] ^ t[3][(c >> 24) & 0xff];
}

/* Folds three streams of len bytes from p on from raw state c. */
__attribute__((target("sse4.2")))
static uint64_t crc3(uint64_t c, const uint8_t *p, size_t len, uint32_t t[4][256])
{
	uint64_t c1 = 0, c2 = 0;

	for (size_t i = 0; i < len; i += 8) {
		uint64_t v0, v1, v2;

		memcpy(&v0, p + i, 8);	/* unaligned; x86 is little-endian */
		memcpy(&v1, p + len + i, 8);
		memcpy(&v2, p + 2 * len + i, 8);
		c = _mm_crc32_u64(c, v0);
		c1 = _mm_crc32_u64(c1, v1);
		c2 = _mm_crc32_u64(c2, v2);
	}
	return shift(t, shift(t, c) ^ c1) ^ c2;
}

/* Compiled for SSE4.2 alone; called only when the CPU has it. */
__attribute__((target("sse4.2")))
uint32_t tcpw_crc32c_hw(uint32_t crc, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	uint64_t c = ~crc;

	if (n >= 3 * CRC_SHORT)
		pthread_once(&shift_once, shift_fill);
	for (; n >= 3 * CRC_LONG; n -= 3 * CRC_LONG, p += 3 * CRC_LONG)
		c = crc3(c, p, CRC_LONG, shift_long);
	for (; n >= 3 * CRC_SHORT; n -= 3 * CRC_SHORT, p += 3 * CRC_SHORT)
		c = crc3(c, p, CRC_SHORT, shift_short);
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t v;

		memcpy(&v, p, sizeof(v));
		c = _mm_crc32_u64(c, v);
	}
	while (n--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}
#else
bool tcpw_crc32c_hw_available(void)
{
	return false;
}

uint32_t tcpw_crc32c_hw(uint32_t crc, const void *buf, size_t n)
{
	return tcpw_crc32c_sw(crc, buf, n);
}
#endif

uint32_t tcpw_crc32c(uint32_t crc, const void *buf, size_t n)
{
	if (tcpw_crc32c_hw_available())
		return tcpw_crc32c_hw(crc, buf, n);
	return tcpw_crc32c_sw(crc, buf, n);
}
