/*
 * fuzz_cm_msg.c - libFuzzer target over the CM's handshake parser
 * (cm/cm_msg.c), built and run by `make fuzz`.
 *
 * Property: parsing never crashes or reads out of bounds (ASan, UBSan),
 * and whatever parses encodes back to exactly the input bytes, so the
 * parser accepts only canonical messages and drops nothing it accepted.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cm_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t again[CM_MSG_MAX_SIZE];
	struct cm_msg msg;
	ssize_t n;

	if (cm_msg_parse(data, size, &msg) < 0)
		return 0;
	n = cm_msg_encode(&msg, again, sizeof(again));
	if (n != (ssize_t)size || memcmp(again, data, size) != 0)
		abort();
	return 0;
}
