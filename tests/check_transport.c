/*
 * check_transport.c - the table of transports (core/transport.c): every
 * entry complete and named as its provider, FERRY_TRANSPORT read by the
 * one function, destinations given to the transport whose address rule
 * serves them, and the CM's choice made from the same table.
 *
 * Each test runs in its own process (CK_FORK) and puts FERRY_TRANSPORT
 * back as it found it (the Soft-RoCE run sets it to verbs).
 */
#include "config.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "core-export.h"
#include "cm-internal.h"
#include "check_suites.h"

static struct sockaddr_storage ct_ss;

/* "127.0.0.1" or "::1" as a sockaddr (port 0). */
static const struct sockaddr *ct_addr(const char *host)
{
	memset(&ct_ss, 0, sizeof(ct_ss));
	if (strchr(host, ':')) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ct_ss;

		sin6->sin6_family = AF_INET6;
		ck_assert_int_eq(inet_pton(AF_INET6, host, &sin6->sin6_addr), 1);
	} else {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ct_ss;

		sin->sin_family = AF_INET;
		ck_assert_int_eq(inet_pton(AF_INET, host, &sin->sin_addr), 1);
	}
	return (const struct sockaddr *)&ct_ss;
}

/* FERRY_TRANSPORT as the test found it (a fixture saves and restores it). */
static char *ct_saved_env;

static void ct_env_set(const char *value)
{
	if (value)
		setenv("FERRY_TRANSPORT", value, 1);
	else
		unsetenv("FERRY_TRANSPORT");
}

static void ct_env_save(void)
{
	const char *v = getenv("FERRY_TRANSPORT");

	ct_saved_env = v ? strdup(v) : NULL;
}

static void ct_env_restore(void)
{
	ct_env_set(ct_saved_env);
	free(ct_saved_env);
	ct_saved_env = NULL;
}

START_TEST(test_table_complete)
{
	size_t i, j;

	ck_assert_uint_ge(ferry_transports_count, 1);
	ck_assert_uint_le(ferry_transports_count, FERRY_TRANSPORTS_MAX);
	/* shm is always built, and preferred */
	ck_assert_str_eq(ferry_transports[0].name, "shm");
	ck_assert_ptr_eq(ferry_transports[0].prov, &ferry_shm_provider);
	ck_assert_ptr_eq(ferry_transports[0].cm, &cm_shm_transport);
	for (i = 0; i < ferry_transports_count; i++) {
		const struct ferry_transport *tp = &ferry_transports[i];

		ck_assert_ptr_nonnull(tp->name);
		ck_assert_ptr_nonnull(tp->prov);
		/* ferry_get_device_transport reports the provider's name, and
		 * FERRY_TRANSPORT matches the entry's: they must be one */
		ck_assert_str_eq(tp->name, tp->prov->name);
		ck_assert_ptr_eq(ferry_transport_named(tp->name), tp);
		for (j = 0; j < i; j++)
			ck_assert_str_ne(ferry_transports[j].name, tp->name);
		/* Only a transport used by name alone may lack the CM's part
		 * (tcp, for now); one that may be picked has both. */
		if (!tp->cm) {
			ck_assert(tp->by_name_only);
			continue;
		}
		ck_assert_ptr_nonnull(tp->reaches);
		ck_assert_uint_eq(ferry_transport_index_of_cm(tp->cm), i);
		for (j = 0; j < i; j++)
			ck_assert_ptr_ne(ferry_transports[j].cm, tp->cm);
	}
	ck_assert_ptr_null(ferry_transport_named("nosuch"));
	ck_assert_ptr_null(ferry_transport_named(""));
	ck_assert_uint_eq(ferry_transport_index_of_cm(NULL), ferry_transports_count);
}
END_TEST

START_TEST(test_forced)
{
	const struct ferry_transport *tp = &ferry_transports[0];
	size_t i;

	ct_env_set(NULL);
	ck_assert_int_eq(ferry_transport_forced(&tp), 0);
	ck_assert_ptr_null(tp);
	ct_env_set("");
	tp = &ferry_transports[0];
	ck_assert_int_eq(ferry_transport_forced(&tp), 0);
	ck_assert_ptr_null(tp);
	for (i = 0; i < ferry_transports_count; i++) {
		ct_env_set(ferry_transports[i].name);
		ck_assert_int_eq(ferry_transport_forced(&tp), 0);
		ck_assert_ptr_eq(tp, &ferry_transports[i]);
	}
	/* read at every call: a change in between is seen */
	ct_env_set("nosuch");
	errno = 0;
	ck_assert_int_eq(ferry_transport_forced(&tp), -1);
	ck_assert_int_eq(errno, ENODEV);
	ck_assert_ptr_null(tp);
	ct_env_set("SHM");	/* names are exact */
	ck_assert_int_eq(ferry_transport_forced(&tp), -1);
}
END_TEST

/* This host's addresses are shm's, by the table and by the CM. */
START_TEST(test_reaching_local)
{
	static const char *const hosts[] = { "127.0.0.1", "127.1.2.3", "::1", "0.0.0.0" };
	size_t i;

	ct_env_set(NULL);
	for (i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
		const struct sockaddr *dst = ct_addr(hosts[i]);

		ck_assert_ptr_eq(ferry_transport_reaching(dst), &ferry_transports[0]);
		ck_assert_ptr_eq(cm_transport_for(dst), &cm_shm_transport);
	}
}
END_TEST

/* A destination of no transport: the CM says EHOSTUNREACH. */
START_TEST(test_reaching_remote)
{
	const struct sockaddr *dst = ct_addr("192.0.2.1");	/* TEST-NET-1 */
	const struct ferry_transport *tp;

	ct_env_set(NULL);
	tp = ferry_transport_reaching(dst);
	ck_assert_ptr_ne(tp, &ferry_transports[0]);
	if (!tp) {
		errno = 0;
		ck_assert_ptr_null(cm_transport_for(dst));
		ck_assert_int_eq(errno, EHOSTUNREACH);
	}
}
END_TEST

/*
 * tcp takes what nothing else serves, when the kernel routes there; never
 * multicast.  The shim still sees a host across the network as remote.
 */
START_TEST(test_reaching_tcp)
{
	const struct ferry_transport *tp;
	struct sockaddr_storage far_ss;
	const struct sockaddr *far = (const struct sockaddr *)&far_ss;
	enum ferry_cm_probe mcast;

	ct_env_set(NULL);
	ck_assert_ptr_null(ferry_transport_reaching(ct_addr("224.0.0.1")));
	mcast = ferry_cm_probe(ct_addr("224.0.0.1"));
	ck_assert_ptr_null(ferry_transport_reaching(ct_addr("255.255.255.255")));
	ck_assert_ptr_null(ferry_transport_reaching(ct_addr("ff02::1")));
	memcpy(&far_ss, ct_addr("192.0.2.1"), sizeof(far_ss));	/* TEST-NET-1 */
	ck_assert_int_eq(ferry_cm_probe(far), mcast);	/* REMOTE: the shim's TCP */
	tp = ferry_transport_reaching(far);
	if (!tcp_cm_reaches(far)) {
		printf("SKIP test_reaching_tcp: no route to 192.0.2.1 here\n");
		return;
	}
	ck_assert_ptr_nonnull(tp);
	if (tp != &ferry_transports[ferry_transports_count - 1])
		return;	/* an RDMA device routes there: verbs serves it */
	ck_assert_str_eq(tp->name, "tcp");
	ck_assert_ptr_eq(cm_transport_for(far), &cm_tcp_transport);
}
END_TEST

/*
 * FERRY_TRANSPORT=tcp makes the probe say MAYBE for a host across the
 * network, so that the shim tries ferry's tcp there; an unroutable or
 * multicast address stays the kernel's.
 */
START_TEST(test_probe_forced_tcp)
{
	struct sockaddr_storage far_ss;
	const struct sockaddr *far = (const struct sockaddr *)&far_ss;

	memcpy(&far_ss, ct_addr("192.0.2.1"), sizeof(far_ss));	/* TEST-NET-1 */
	ct_env_set("tcp");
	ck_assert_int_eq(ferry_cm_probe(ct_addr("224.0.0.1")), FERRY_CM_PROBE_REMOTE);
	if (!tcp_cm_reaches(far)) {
		ck_assert_int_eq(ferry_cm_probe(far), FERRY_CM_PROBE_REMOTE);
		printf("SKIP test_probe_forced_tcp: no route to 192.0.2.1 here\n");
		ct_env_set(NULL);
		return;
	}
	ck_assert_int_eq(ferry_cm_probe(far), FERRY_CM_PROBE_MAYBE);
	ct_env_set(NULL);
	if (ferry_transport_reaching(far) == &ferry_transports[ferry_transports_count - 1])
		ck_assert_int_eq(ferry_cm_probe(far), FERRY_CM_PROBE_REMOTE);
}
END_TEST

/* FERRY_TRANSPORT forces the CM's choice whatever the address rule says. */
START_TEST(test_cm_forced)
{
	const struct cm_transport *tp = &cm_shm_transport;
	struct ferry_device **list;

	ct_env_set("shm");
	ck_assert_int_eq(cm_transport_forced(&tp), 0);
	ck_assert_ptr_eq(tp, &cm_shm_transport);
	ck_assert_ptr_eq(cm_transport_for(ct_addr("192.0.2.1")), &cm_shm_transport);
	ct_env_set("nosuch");
	errno = 0;
	ck_assert_int_eq(cm_transport_forced(&tp), -1);
	ck_assert_int_eq(errno, ENODEV);
	ck_assert_ptr_null(tp);
	errno = 0;
	ck_assert_ptr_null(cm_transport_for(ct_addr("127.0.0.1")));
	ck_assert_int_eq(errno, ENODEV);
	/* the device list and ferry_open_transport go by the same table */
	list = ferry_get_device_list(NULL);
	ck_assert_ptr_nonnull(list);
	ck_assert_ptr_null(list[0]);
	ferry_free_device_list(list);
	errno = 0;
	ck_assert_ptr_null(ferry_open_transport(NULL));
	ck_assert_int_eq(errno, ENODEV);
	errno = 0;
	ck_assert_ptr_null(ferry_open_transport("nosuch"));
	ck_assert_int_eq(errno, ENODEV);
}
END_TEST

Suite *transport_suite(void)
{
	Suite *s = suite_create("transport");
	TCase *tc = tcase_create("table");

	tcase_add_checked_fixture(tc, ct_env_save, ct_env_restore);
	tcase_add_test(tc, test_table_complete);
	tcase_add_test(tc, test_forced);
	tcase_add_test(tc, test_reaching_local);
	tcase_add_test(tc, test_reaching_remote);
	tcase_add_test(tc, test_reaching_tcp);
	tcase_add_test(tc, test_probe_forced_tcp);
	tcase_add_test(tc, test_cm_forced);
	suite_add_tcase(s, tc);
	return s;
}
