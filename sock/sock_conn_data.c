/*
 * sock_conn_data.c - the private data of rsocket's connect request and
 * accept reply (docs/wire.md, "Connect data": 40 bytes, big-endian): what
 * a socket offers the peer (credits, its target SGL, the first half of its
 * ring, its iomap slots) and what it takes of the peer's, checked.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <endian.h>
#include <string.h>

#include "sock-internal.h"

static void rs_put_sge(uint8_t *p, uint64_t addr, uint32_t key, uint32_t length)
{
	uint64_t a = htobe64(addr);
	uint32_t k = htobe32(key), l = htobe32(length);

	memcpy(p, &a, 8);
	memcpy(p + 8, &k, 4);
	memcpy(p + 12, &l, 4);
}

static struct rs_sge rs_get_sge(const uint8_t *p)
{
	struct rs_sge sge;

	memcpy(&sge.addr, p, 8);
	memcpy(&sge.key, p + 8, 4);
	memcpy(&sge.length, p + 12, 4);
	sge.addr = be64toh(sge.addr);
	sge.key = be32toh(sge.key);
	sge.length = be32toh(sge.length);
	return sge;
}

void sock_conn_data_build(struct ferry_sock *s, uint8_t pd[RS_PRIVATE_DATA_LEN])
{
	uint16_t credits = htobe16((uint16_t)s->credit_window);

	memset(pd, 0, RS_PRIVATE_DATA_LEN);
	pd[0] = RS_VERSION;
	pd[1] = __BYTE_ORDER == __BIG_ENDIAN ? RS_CONN_FLAG_NET : 0;
	if (s->target_iomap_size)
		pd[1] |= RS_CONN_FLAG_IOMAP;
	memcpy(pd + 2, &credits, 2);
	pd[7] = (uint8_t)s->target_iomap_size;	/* <= SOCK_MAX_IOMAP: unscaled */
	rs_put_sge(pd + 8, (uintptr_t)s->target_sgl, s->rmr->rkey, RS_SGL_SIZE);
	rs_put_sge(pd + 24, (uintptr_t)s->rbuf, s->rmr->rkey, s->rbuf_size / 2);
}

/* Take the peer's private data: credits, its target SGL, our first buffer. */
int sock_conn_data_take(struct ferry_sock *s, const void *data, uint8_t len)
{
	const uint8_t *pd = data;
	uint16_t credits;
	struct rs_sge buf;

	if (!pd || len < RS_PRIVATE_DATA_LEN || pd[0] != RS_VERSION) {
		ferry_info("sock: peer's private data is not rsocket v1 (%u bytes)", len);
		return ERR(EPROTO);
	}
	memcpy(&credits, pd + 2, 2);
	credits = be16toh(credits);
	s->remote_sgl = rs_get_sge(pd + 8);
	buf = rs_get_sge(pd + 24);
	if (!credits || s->remote_sgl.length < 1 || !buf.length) {
		ferry_info("sock: peer offered no credits or buffers");
		return ERR(EPROTO);
	}
	s->peer_swap = !!(pd[1] & RS_CONN_FLAG_NET) != (__BYTE_ORDER == __BIG_ENDIAN);
	memset(&s->remote_iomap, 0, sizeof(s->remote_iomap));
	if ((pd[1] & RS_CONN_FLAG_IOMAP) && pd[7]) {
		/* Larger sizes are scaled; using no more than 128 slots is safe. */
		s->remote_iomap.addr = s->remote_sgl.addr +
				       (uint64_t)s->remote_sgl.length * sizeof(struct rs_sge);
		s->remote_iomap.key = s->remote_sgl.key;
		s->remote_iomap.length = pd[7] <= SOCK_MAX_IOMAP ? pd[7] : SOCK_MAX_IOMAP;
	}
	atomic_store(&s->sseq_comp, credits);
	s->sseq_no = 0;
	/* target_sgl, in a fresh ferry_alloc block, reads zero until the
	 * peer writes its first update into entry 1. */
	s->first_target = buf;
	s->target_idx = -1;
	s->remote_idx = 1;	/* entry 0 holds the buffer given in the exchange */
	return 0;
}
