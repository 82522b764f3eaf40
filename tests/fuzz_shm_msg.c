/*
 * fuzz_shm_msg.c - libFuzzer target over the checks of the shm exchange's
 * messages (prov/shm/shm_msg.c: HELLO, REGION, BLOCK, TABLE, READY), built
 * and run by `make fuzz` beside the CM's parser target.
 *
 * Input: one byte of descriptor count and one of the types wanted, then
 * the message as a peer would send it (any length).  Property: the checks
 * never crash or read out of bounds (ASan, UBSan), and what they accept
 * is safe to use as shm_conn.c uses it: every piece named lies inside one
 * arena segment, aligned for what it holds, in one of the descriptors the
 * message came with, each of which holds one; the queue depths and the
 * table are in range; the region layout built from a HELLO's depths does
 * not overflow and fits a segment.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shm-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fz_assert(bool ok)
{
	if (!ok)
		abort();
}

static void fz_hello(const struct shm_msg *m, int nfds)
{
	size_t stride = 8 + (size_t)m->rq_sge * sizeof(struct shm_rsge);
	struct shm_region_layout l;

	fz_assert(nfds == 0);
	fz_assert(m->rq_size >= 1 && m->rq_size <= SHM_MAX_QP_WR);
	fz_assert(m->wake.len <= SHM_WAKE_NAME_MAX && m->kick.len <= SHM_WAKE_NAME_MAX);
	/* Our region for this peer (its depth as our DQ's), and the peer's
	 * as we would expect it (our depth the most we allow). */
	l = shm_region_layout(SHM_MAX_QP_WR, stride, m->rq_size, m->qp_num & 1);
	fz_assert(l.head_off < l.size && l.size <= SHM_ARENA_SEG_SIZE);
	l = shm_region_layout(m->rq_size, stride, SHM_MAX_QP_WR, m->qp_num & 1);
	fz_assert(l.head_off < l.size && l.size <= SHM_ARENA_SEG_SIZE);
	l = shm_region_layout(SHM_MAX_QP_WR, stride, m->rq_size, m->qp_num & 1);
	fz_assert(l.head_off % 64 == 0);	/* the head's alignment */
}

/* A REGION accepted against the layout @want, with @nfds descriptors. */
static void fz_region(const struct shm_msg *m, int nfds, const struct shm_region_layout *want)
{
	uint64_t table = (uint64_t)m->table_entries * sizeof(struct shm_mr_entry);
	uint32_t used = 0;
	int i;

	fz_assert(nfds >= 1 && nfds <= SHM_MSG_FDS);
	for (i = 0; i < SHM_RP_PIECES; i++) {
		fz_assert(m->fdi[i] < (uint32_t)nfds);
		used |= 1u << m->fdi[i];
	}
	fz_assert(used == (1u << nfds) - 1);	/* no descriptor for nothing */
	fz_assert(m->off[SHM_RP_REGION] % 64 == 0 &&
		  m->off[SHM_RP_REGION] + want->size <= SHM_ARENA_SEG_SIZE);
	fz_assert(m->table_entries >= SHM_MR_TABLE_MIN &&
		  m->table_entries <= SHM_MR_TABLE_ENTRIES);
	fz_assert(m->off[SHM_RP_TABLE] % _Alignof(struct shm_mr_entry) == 0 &&
		  m->off[SHM_RP_TABLE] + table <= SHM_ARENA_SEG_SIZE);
	fz_assert(m->off[SHM_RP_NOTIFY] % _Alignof(struct shm_notify) == 0 &&
		  m->off[SHM_RP_NOTIFY] + sizeof(struct shm_notify) <= SHM_ARENA_SEG_SIZE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct shm_msg m;
	struct shm_region_layout want;
	uint32_t types;
	size_t len;
	int nfds;

	if (size < 2)
		return 0;
	nfds = data[0] % 4;
	types = (uint32_t)data[1] << 1;	/* bit 0 is no type */
	len = size - 2;
	memset(&m, 0, sizeof(m));
	memcpy(&m, data + 2, len < sizeof(m) ? len : sizeof(m));
	if (!shm_msg_shape_ok(&m, len, nfds, types))
		return 0;
	fz_assert(len == sizeof(m) && m.magic == SHM_MAGIC && m.version == SHM_VERSION);
	fz_assert(nfds >= shm_msg_nfds(m.type) && nfds <= SHM_MSG_FDS &&
		  (types & SHM_MSG_BIT(m.type)));
	fz_assert(m.type == SHM_MSG_REGION || nfds == shm_msg_nfds(m.type));
	switch (m.type) {
	case SHM_MSG_HELLO:
		if (shm_hello_ok(&m))
			fz_hello(&m, nfds);
		break;
	case SHM_MSG_REGION:
		/* As the exchange checks it: against the layout it expects. */
		want = shm_region_layout(1u << (m.qp_num % 16), 8 + sizeof(struct shm_rsge),
					 1u << (m.psn % 16), m.qp_num & 0x10000);
		if (shm_region_msg_ok(&m, nfds, &want))
			fz_region(&m, nfds, &want);
		break;
	case SHM_MSG_TABLE:
		if (shm_table_msg_ok(m.off[0]))
			fz_assert(m.off[0] % _Alignof(struct shm_mr_entry) == 0 &&
				  m.off[0] + SHM_MR_TABLE_ENTRIES * sizeof(struct shm_mr_entry) <=
				  SHM_ARENA_SEG_SIZE);
		break;
	default:
		break;
	}
	return 0;
}
