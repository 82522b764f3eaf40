/*
 * fuzz_shm_ud.c - libFuzzer target over what a shm UD receiver reads of a
 * datagram before it uses it (prov/shm/shm_ud_wire.c): the name of the
 * socket it came from, and its header.  Run by `make fuzz`.
 *
 * Input: one byte choosing the check (even: the name, odd: the header,
 * with the byte's bit 1 as the truncation flag), then the bytes a hostile
 * sender controls.  Property: neither check crashes or reads out of
 * bounds (ASan, UBSan); a name accepted is exactly the one ferry makes of
 * the LID and QPN it gives, both in range; a header accepted says its
 * datagram's true length and at most the MTU, with only known flags.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "shm-ud.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fz_assert(bool ok)
{
	if (!ok)
		abort();
}

static void fz_name(const uint8_t *data, size_t size)
{
	struct sockaddr_un un, again;
	socklen_t len;
	uint32_t qpn;
	uint16_t lid;

	memset(&un, 0, sizeof(un));
	un.sun_family = AF_UNIX;
	if (size > sizeof(un.sun_path))
		size = sizeof(un.sun_path);
	memcpy(un.sun_path, data, size);
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + size);
	if (!shm_ud_name_parse(&un, len, &lid, &qpn))
		return;
	fz_assert(lid >= 1 && lid <= SHM_UD_LID_MAX && qpn <= SHM_UD_QPN_MAX);
	fz_assert(shm_ud_name(lid, qpn, &again) == len);
	fz_assert(memcmp(again.sun_path, un.sun_path, size) == 0);
}

static void fz_hdr(const uint8_t *data, size_t size, bool truncated)
{
	struct shm_ud_hdr h;

	memset(&h, 0, sizeof(h));
	memcpy(&h, data, size < sizeof(h) ? size : sizeof(h));
	if (shm_ud_hdr_check(&h, size, truncated))
		return;
	fz_assert(!truncated && size >= sizeof(h));
	fz_assert(h.payload_len == size - sizeof(h) && h.payload_len <= SHM_UD_MTU);
	fz_assert(h.magic == SHM_UD_MAGIC && !(h.flags & ~SHM_UD_F_ALL));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 1)
		fz_hdr(data + 1, size - 1, data[0] & 2);
	else
		fz_name(data + 1, size - 1);
	return 0;
}
