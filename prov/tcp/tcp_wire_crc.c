/*
 * tcp_wire_crc.c - CRC-32C (Castagnoli), the CRC of MPA FPDUs (and of
 * iSCSI, whose RFC 3720 gives the test vectors).  Reflected polynomial
 * 0x82F63B78, initial value and final XOR all ones.
 *
 * Two ways to compute it, one result: slice-by-8 tables in software, and
 * the SSE4.2 crc32 instruction, chosen at run time because a build for
 * generic x86-64 cannot assume it.  Every FPDU byte passes through here
 * when CRC is negotiated (hardware iWARP peers ask for it by default), so
 * speed matters: the instruction folds 8 bytes per step, and slice-by-8
 * replaces the bytewise table's chain of 8 dependent lookups per 8 bytes
 * by 8 independent ones.
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

/* Compiled for SSE4.2 alone; called only when the CPU has it. */
__attribute__((target("sse4.2")))
uint32_t tcpw_crc32c_hw(uint32_t crc, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	uint64_t c = ~crc;

	for (; n >= 8; n -= 8, p += 8) {
		uint64_t v;

		memcpy(&v, p, sizeof(v));	/* unaligned; x86 is little-endian */
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
