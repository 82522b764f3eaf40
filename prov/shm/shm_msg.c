/*
 * shm_msg.c - what a message of the shm exchange must be before anything
 * in it is used: its shape (size, magic, version, type, the descriptors
 * its type carries) and its values (queue depths, table sizes, wake
 * names, where the pieces it names lie).  Pure functions of the bytes,
 * so that the fuzzer (tests/fuzz_shm_msg.c) runs exactly what the
 * exchange runs (shm_conn.c), without sockets or mappings.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "shm-internal.h"

int shm_msg_nfds(uint32_t type)
{
	switch (type) {
	case SHM_MSG_HELLO:
	case SHM_MSG_READY:
		return 0;
	default:
		return 1;	/* REGION (at least), BLOCK, TABLE */
	}
}

/* The most descriptors a message of @type carries. */
static int shm_msg_nfds_max(uint32_t type)
{
	return type == SHM_MSG_REGION ? SHM_MSG_FDS : shm_msg_nfds(type);
}

bool shm_msg_shape_ok(const struct shm_msg *m, size_t len, int nfds, uint32_t types)
{
	return len == sizeof(*m) && m->magic == SHM_MAGIC && m->version == SHM_VERSION &&
	       m->type < 32 && (types & SHM_MSG_BIT(m->type)) &&
	       nfds >= shm_msg_nfds(m->type) && nfds <= shm_msg_nfds_max(m->type);
}

bool shm_piece_ok(uint64_t off, uint64_t size, uint64_t align)
{
	return size != 0 && (off & (align - 1)) == 0 && off <= SHM_ARENA_SEG_SIZE &&
	       size <= SHM_ARENA_SEG_SIZE - off;
}

bool shm_hello_ok(const struct shm_msg *m)
{
	return m->rq_size >= 1 && m->rq_size <= SHM_MAX_QP_WR &&
	       (m->rq_size & (m->rq_size - 1)) == 0 &&
	       m->rq_sge >= 1 && m->rq_sge <= SHM_MAX_SGE &&
	       m->qp_num != 0 && m->qp_num <= 0xffffff && shm_wake_name_ok(&m->wake) &&
	       shm_wake_name_ok(&m->kick);
}

bool shm_table_msg_ok(uint64_t off)
{
	return shm_piece_ok(off, (uint64_t)SHM_MR_TABLE_ENTRIES * sizeof(struct shm_mr_entry),
			    _Alignof(struct shm_mr_entry));
}

/*
 * Each piece in one of the @nfds descriptors, and each descriptor holding
 * one: a descriptor passed for nothing is a malformed message, not one to
 * map (or to keep open) in case.
 */
static bool shm_region_fds_ok(const struct shm_msg *m, int nfds)
{
	uint32_t used = 0;
	int i;

	if (nfds < 1 || nfds > SHM_MSG_FDS)
		return false;
	for (i = 0; i < SHM_RP_PIECES; i++) {
		if (m->fdi[i] >= (uint32_t)nfds)
			return false;
		used |= 1u << m->fdi[i];
	}
	return used == (1u << nfds) - 1;
}

bool shm_region_msg_ok(const struct shm_msg *m, int nfds, const struct shm_region_layout *want)
{
	uint32_t n = m->table_entries;

	return m->value == want->size && n >= SHM_MR_TABLE_MIN && n <= SHM_MR_TABLE_ENTRIES &&
	       (n & (n - 1)) == 0 && shm_region_fds_ok(m, nfds) &&
	       shm_piece_ok(m->off[SHM_RP_REGION], want->size, 64) &&
	       shm_piece_ok(m->off[SHM_RP_TABLE], (uint64_t)n * sizeof(struct shm_mr_entry),
			    _Alignof(struct shm_mr_entry)) &&
	       shm_piece_ok(m->off[SHM_RP_NOTIFY], sizeof(struct shm_notify),
			    _Alignof(struct shm_notify));
}
