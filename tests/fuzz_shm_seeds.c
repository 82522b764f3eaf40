/*
 * fuzz_shm_seeds.c - write well-formed shm exchange messages (HELLO,
 * REGION, TABLE, BLOCK, READY) into a directory, as the seed corpus of
 * tests/fuzz_shm_msg: the fuzzer mutates from messages that pass the
 * shape check instead of having to find our magic and version first.
 * Each file is fuzz_shm_msg's input: a descriptor count, a type mask, the
 * message.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>

#include "shm-internal.h"

static int seed(const char *dir, const char *name, const struct shm_msg *m, int nfds)
{
	unsigned char head[2] = { (unsigned char)nfds,
				  (unsigned char)(SHM_MSG_BIT(m->type) >> 1) };
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(head, 1, 2, f) != 2 || fwrite(m, sizeof(*m), 1, f) != 1) {
		perror(path);
		return 1;
	}
	return fclose(f) != 0;
}

int main(int argc, char **argv)
{
	struct shm_msg m = { .magic = SHM_MAGIC, .version = SHM_VERSION };
	int bad = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	m.type = SHM_MSG_HELLO;
	m.qp_num = 17;
	m.rq_size = 16;
	m.rq_sge = 1;
	m.table_entries = 4;
	m.wake.len = m.kick.len = 6;
	memcpy(m.wake.bytes, "\0abcde", 6);
	memcpy(m.kick.bytes, "\0fghij", 6);
	bad |= seed(argv[1], "hello", &m, 0);
	memset(&m.qp_num, 0, sizeof(m) - offsetof(struct shm_msg, qp_num));
	/* A REGION the fuzzer's check accepts as it is (qp_num and psn 0: both
	 * queues one deep), its pieces in one segment, as ours are. */
	m.type = SHM_MSG_REGION;
	m.value = shm_region_layout(1, 8 + sizeof(struct shm_rsge), 1, false).size;
	m.table_entries = 4;
	m.off[SHM_RP_REGION] = 65536;
	m.off[SHM_RP_TABLE] = 4096;
	m.off[SHM_RP_NOTIFY] = 8192;
	bad |= seed(argv[1], "region", &m, 1);
	/* The same in three segments. */
	m.fdi[SHM_RP_TABLE] = 1;
	m.fdi[SHM_RP_NOTIFY] = 2;
	bad |= seed(argv[1], "region3", &m, 3);
	memset(&m.qp_num, 0, sizeof(m) - offsetof(struct shm_msg, qp_num));
	m.type = SHM_MSG_TABLE;
	m.off[0] = 65536;
	bad |= seed(argv[1], "table", &m, 1);
	m.type = SHM_MSG_BLOCK;
	m.value = 3;
	m.off[0] = 0;
	bad |= seed(argv[1], "block", &m, 1);
	m.type = SHM_MSG_READY;
	m.value = 0;
	bad |= seed(argv[1], "ready", &m, 0);
	return bad;
}
