/*
 * transport.c - the table of transports, and FERRY_TRANSPORT.
 *
 * One entry per transport, in order of preference: shm first (it serves
 * only this host, and serves it best), then verbs, then tcp (any host the
 * kernel routes to: what the others do not serve).  The device list
 * (core.c) walks the entries' providers; the CM (cm/cm_addr.c) asks
 * ferry_transport_reaching which entry serves a destination and keeps a
 * per-id slot for each entry, by its index here.
 *
 * How to add a transport (the tcp one, say):
 *   1. its provider, in prov/<name>/: a `const struct ferry_provider
 *      ferry_<name>_provider` (core-export.h says what each member does);
 *   2. its CM part, in cm/cm_<name>*.c: a `const struct cm_transport
 *      cm_<name>_transport` (cm-internal.h), and its address rule, a
 *      `bool <prefix>_reaches(const struct sockaddr *dst)` (quick; any
 *      thread);
 *   3. their three declarations in transport.h, beside shm's, and one
 *      entry below, where its preference puts it, under the configure
 *      conditional that builds it (as HAVE_VERBS for verbs).
 * Nothing else names the transports: FERRY_TRANSPORT, ferry-run -t and
 * FERRY_TRANSPORT_OPT go by the entry's name.  A build holds at most
 * FERRY_TRANSPORTS_MAX (the compiler checks).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "core-export.h"

const struct ferry_transport ferry_transports[] = {
	{
		.name = "shm",
		.prov = &ferry_shm_provider,
		.cm = &cm_shm_transport,
		.reaches = shm_cm_reaches,
	},
#ifdef HAVE_VERBS
	{
		.name = "verbs",
		.prov = &ferry_verbs_provider,
		.cm = &cm_verbs_transport,
		.reaches = vcm_reaches,
	},
#endif
	{
		/* iWARP over kernel TCP: any host the kernel routes to, last. */
		.name = "tcp",
		.prov = &ferry_tcp_provider,
		.cm = &cm_tcp_transport,
		.reaches = tcp_cm_reaches,
		.by_name_only = true,
	},
};
const size_t ferry_transports_count = FERRY_ARRAY_SIZE(ferry_transports);

_Static_assert(FERRY_ARRAY_SIZE(ferry_transports) <= FERRY_TRANSPORTS_MAX,
	       "more transports than FERRY_TRANSPORTS_MAX: raise it");

const struct ferry_transport *ferry_transport_named(const char *name)
{
	size_t i;

	for (i = 0; i < ferry_transports_count; i++)
		if (strcmp(ferry_transports[i].name, name) == 0)
			return &ferry_transports[i];
	return NULL;
}

int ferry_transport_forced(const struct ferry_transport **tp_p)
{
	const char *name = getenv("FERRY_TRANSPORT");

	*tp_p = NULL;
	if (!name || !*name)
		return 0;
	*tp_p = ferry_transport_named(name);
	return *tp_p ? 0 : ERR(ENODEV);
}

/* The first entry serving @dst among those with (or without) by_name_only. */
static const struct ferry_transport *ferry_transport_first(const struct sockaddr *dst,
							   bool by_name_only)
{
	size_t i;

	for (i = 0; i < ferry_transports_count; i++)
		if (ferry_transports[i].by_name_only == by_name_only &&
		    ferry_transports[i].reaches && ferry_transports[i].reaches(dst))
			return &ferry_transports[i];
	return NULL;
}

const struct ferry_transport *ferry_transport_reaching(const struct sockaddr *dst)
{
	const struct ferry_transport *tp = ferry_transport_first(dst, false);

	return tp ? tp : ferry_transport_first(dst, true);
}

size_t ferry_transport_index_of_cm(const struct cm_transport *cm)
{
	size_t i;

	for (i = 0; i < ferry_transports_count; i++)
		if (cm && ferry_transports[i].cm == cm)
			break;
	return i;
}
