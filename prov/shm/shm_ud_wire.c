/*
 * shm_ud_wire.c - what a UD datagram of the shm transport is on the wire
 * (docs/wire.md, section 5): the names of UD QPs' sockets, and the checks
 * of a datagram's header before anything of it is used.  Alone in a file,
 * with nothing to call but libc, so that tests/fuzz_shm_ud.c can run it
 * under libFuzzer.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "shm-ud.h"

#define SHM_UD_NAME_PREFIX	"ferry/shm/ud/v1/"

socklen_t shm_ud_name(uint16_t lid, uint32_t qpn, struct sockaddr_un *un)
{
	int n;

	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	n = snprintf(un->sun_path + 1, sizeof(un->sun_path) - 1, SHM_UD_NAME_PREFIX "%u/%u",
		     lid, qpn);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/*
 * The kernel gives the sender's name as it was bound, any bytes at all:
 * it names a UD QP only if it is exactly what shm_ud_name makes of some
 * LID and QPN in range (so "007" or a trailing NUL is nobody's).
 */
bool shm_ud_name_parse(const struct sockaddr_un *un, socklen_t len, uint16_t *lid_p,
		       uint32_t *qpn_p)
{
	const size_t head = offsetof(struct sockaddr_un, sun_path);
	struct sockaddr_un want;
	char text[sizeof(un->sun_path)];
	unsigned int lid, qpn;
	size_t n;

	if (len <= head + 1 + strlen(SHM_UD_NAME_PREFIX) || len > sizeof(*un) ||
	    un->sun_family != AF_UNIX || un->sun_path[0] != '\0')
		return false;
	n = len - head - 1;
	memcpy(text, un->sun_path + 1, n);
	text[n] = '\0';
	if (strlen(text) != n ||
	    sscanf(text, SHM_UD_NAME_PREFIX "%5u/%8u", &lid, &qpn) != 2 ||
	    lid == 0 || lid > SHM_UD_LID_MAX || qpn > SHM_UD_QPN_MAX)
		return false;
	if (shm_ud_name((uint16_t)lid, qpn, &want) != len ||
	    memcmp(want.sun_path, un->sun_path, n + 1) != 0)
		return false;
	*lid_p = (uint16_t)lid;
	*qpn_p = qpn;
	return true;
}

const char *shm_ud_hdr_check(const struct shm_ud_hdr *h, size_t len, bool truncated)
{
	if (truncated || len > sizeof(*h) + SHM_UD_MTU)
		return "larger than the MTU";
	if (len < sizeof(*h))
		return "shorter than its header";
	if (h->magic != SHM_UD_MAGIC || h->version != SHM_UD_VERSION)
		return "not ferry's UD format";
	if (h->flags & ~SHM_UD_F_ALL)
		return "unknown flags";
	if (h->payload_len != len - sizeof(*h))
		return "a length that is not the datagram's";
	return NULL;
}
