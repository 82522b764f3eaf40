/*
 * check_cm_msg.c - the CM's handshake message parser on every `make check`:
 * round trips, every truncation, oversized records, every single-byte
 * mutation, and a bounded run of random and mutated inputs (the libFuzzer
 * target tests/fuzz_cm_msg.c does the same property at scale).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "cm_msg.h"

/* Random inputs per run: enough to matter, fast enough for every run. */
#define MSG_RANDOM_ITERATIONS 200000

static void msg_sample(struct cm_msg *m, enum cm_msg_type type, uint8_t pdata_len)
{
	struct sockaddr_in *src = (struct sockaddr_in *)&m->src;
	struct sockaddr_in6 *dst = (struct sockaddr_in6 *)&m->dst;
	unsigned int i;

	memset(m, 0, sizeof(*m));
	m->type = type;
	if (type == CM_MSG_CONNECT_REQ) {
		src->sin_family = AF_INET;
		src->sin_port = htons(40000);
		src->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		dst->sin6_family = AF_INET6;
		dst->sin6_port = htons(7471);
		dst->sin6_addr = in6addr_loopback;
	}
	if (type != CM_MSG_REJECT)
		m->param = (struct cm_msg_param){ 4, 3, 1, 7, 6 };
	m->pdata_len = pdata_len;
	for (i = 0; i < pdata_len; i++)
		m->pdata[i] = (uint8_t)(i * 7 + 1);
}

/* A parsed message encodes back to exactly the bytes it came from. */
static void msg_assert_canonical(const uint8_t *buf, size_t len)
{
	uint8_t again[CM_MSG_MAX_SIZE];
	struct cm_msg m;
	ssize_t n;

	if (cm_msg_parse(buf, len, &m) < 0) {
		ck_assert_int_eq(errno, EBADMSG);
		return;
	}
	n = cm_msg_encode(&m, again, sizeof(again));
	ck_assert_int_eq(n, (ssize_t)len);
	ck_assert(memcmp(again, buf, len) == 0);
}

START_TEST(test_msg_round_trip)
{
	static const enum cm_msg_type types[] = {
		CM_MSG_CONNECT_REQ, CM_MSG_ACCEPT, CM_MSG_REJECT,
	};
	uint8_t buf[CM_MSG_MAX_SIZE];
	struct cm_msg in, out;
	unsigned int t;

	for (t = 0; t < 3; t++) {
		uint8_t len = (uint8_t)cm_msg_pdata_max(types[t]);
		ssize_t n;

		msg_sample(&in, types[t], len);
		n = cm_msg_encode(&in, buf, sizeof(buf));
		ck_assert_int_gt(n, 0);
		ck_assert_int_eq(cm_msg_parse(buf, (size_t)n, &out), 0);
		ck_assert_int_eq(out.type, types[t]);
		ck_assert_int_eq(out.pdata_len, len);
		ck_assert(memcmp(out.pdata, in.pdata, len) == 0);
		ck_assert(memcmp(&out.param, &in.param, sizeof(in.param)) == 0);
		ck_assert(memcmp(&out.src, &in.src, sizeof(in.src)) == 0);
		ck_assert(memcmp(&out.dst, &in.dst, sizeof(in.dst)) == 0);
	}
}
END_TEST

START_TEST(test_msg_encode_limits)
{
	uint8_t buf[CM_MSG_MAX_SIZE];
	struct cm_msg m;

	msg_sample(&m, CM_MSG_CONNECT_REQ, 57);	/* over the 56-byte limit */
	ck_assert_int_eq(cm_msg_encode(&m, buf, sizeof(buf)), -1);
	ck_assert_int_eq(errno, EINVAL);
	msg_sample(&m, CM_MSG_REJECT, 149);
	ck_assert_int_eq(cm_msg_encode(&m, buf, sizeof(buf)), -1);
	msg_sample(&m, CM_MSG_ACCEPT, 196);
	ck_assert_int_eq(cm_msg_encode(&m, buf, 20), -1);
	ck_assert_int_eq(errno, EMSGSIZE);
	msg_sample(&m, CM_MSG_ACCEPT, 0);
	m.param.rnr_retry_count = 8;
	ck_assert_int_eq(cm_msg_encode(&m, buf, sizeof(buf)), -1);
	msg_sample(&m, CM_MSG_CONNECT_REQ, 0);
	m.src.ss_family = AF_UNIX;
	ck_assert_int_eq(cm_msg_encode(&m, buf, sizeof(buf)), -1);
	m.type = (enum cm_msg_type)9;
	ck_assert_int_eq(cm_msg_encode(&m, buf, sizeof(buf)), -1);
}
END_TEST

START_TEST(test_msg_truncated_and_oversized)
{
	uint8_t buf[CM_MSG_MAX_SIZE + 8];
	struct cm_msg m;
	ssize_t n;
	size_t len;

	msg_sample(&m, CM_MSG_CONNECT_REQ, 56);
	n = cm_msg_encode(&m, buf, sizeof(buf));
	ck_assert_int_gt(n, 0);
	for (len = 0; len < (size_t)n; len++) {
		ck_assert_int_eq(cm_msg_parse(buf, len, &m), -1);
		ck_assert_int_eq(errno, EBADMSG);
	}
	memset(buf + n, 0, 8);
	for (len = (size_t)n + 1; len <= (size_t)n + 8; len++)
		ck_assert_int_eq(cm_msg_parse(buf, len, &m), -1);
	ck_assert_int_eq(cm_msg_parse(NULL, 10, &m), -1);
}
END_TEST

START_TEST(test_msg_every_byte_mutated)
{
	static const enum cm_msg_type types[] = {
		CM_MSG_CONNECT_REQ, CM_MSG_ACCEPT, CM_MSG_REJECT,
	};
	uint8_t buf[CM_MSG_MAX_SIZE];
	unsigned int t, v;
	struct cm_msg m;
	size_t i;

	for (t = 0; t < 3; t++) {
		ssize_t n;

		msg_sample(&m, types[t], 5);
		n = cm_msg_encode(&m, buf, sizeof(buf));
		ck_assert_int_gt(n, 0);
		for (i = 0; i < (size_t)n; i++) {
			uint8_t orig = buf[i];

			for (v = 0; v < 256; v++) {
				buf[i] = (uint8_t)v;
				msg_assert_canonical(buf, (size_t)n);
			}
			buf[i] = orig;
		}
	}
}
END_TEST

/* Header bytes that must be rejected whatever follows. */
START_TEST(test_msg_bad_headers)
{
	uint8_t buf[CM_MSG_MAX_SIZE];
	struct cm_msg m;
	ssize_t n;

	msg_sample(&m, CM_MSG_ACCEPT, 3);
	n = cm_msg_encode(&m, buf, sizeof(buf));
	buf[0] ^= 1;					/* magic */
	ck_assert_int_eq(cm_msg_parse(buf, (size_t)n, &m), -1);
	buf[0] ^= 1;
	buf[4] = 2;					/* version */
	ck_assert_int_eq(cm_msg_parse(buf, (size_t)n, &m), -1);
	buf[4] = 1;
	buf[7] = 1;					/* reserved */
	ck_assert_int_eq(cm_msg_parse(buf, (size_t)n, &m), -1);
	buf[7] = 0;
	buf[6] = 4;					/* pdata_len vs length */
	ck_assert_int_eq(cm_msg_parse(buf, (size_t)n, &m), -1);
	buf[6] = 3;
	ck_assert_int_eq(cm_msg_parse(buf, (size_t)n, &m), 0);
}
END_TEST

START_TEST(test_msg_random_inputs)
{
	uint8_t seedmsg[CM_MSG_MAX_SIZE], buf[CM_MSG_MAX_SIZE + 16];
	unsigned int seed = 12345, it;
	struct cm_msg m;
	ssize_t n;

	msg_sample(&m, CM_MSG_CONNECT_REQ, 20);
	n = cm_msg_encode(&m, seedmsg, sizeof(seedmsg));
	for (it = 0; it < MSG_RANDOM_ITERATIONS; it++) {
		size_t len, k, flips;

		if (it & 1) {	/* mutate a valid message: more interesting */
			len = (size_t)n;
			memcpy(buf, seedmsg, len);
			flips = 1 + (size_t)rand_r(&seed) % 4;
			for (k = 0; k < flips; k++)
				buf[(size_t)rand_r(&seed) % len] = (uint8_t)rand_r(&seed);
			if (rand_r(&seed) % 8 == 0)
				len = (size_t)rand_r(&seed) % sizeof(buf);
		} else {
			len = (size_t)rand_r(&seed) % sizeof(buf);
			for (k = 0; k < len; k++)
				buf[k] = (uint8_t)rand_r(&seed);
			if (len >= 8) {	/* a valid header now and then */
				memcpy(buf, seedmsg, 5);
				buf[7] = 0;
			}
		}
		msg_assert_canonical(buf, len);
	}
}
END_TEST

Suite *cm_msg_suite(void)
{
	Suite *s = suite_create("cm_msg");
	TCase *tc = tcase_create("parser");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_msg_round_trip);
	tcase_add_test(tc, test_msg_encode_limits);
	tcase_add_test(tc, test_msg_truncated_and_oversized);
	tcase_add_test(tc, test_msg_every_byte_mutated);
	tcase_add_test(tc, test_msg_bad_headers);
	tcase_add_test(tc, test_msg_random_inputs);
	suite_add_tcase(s, tc);
	return s;
}
