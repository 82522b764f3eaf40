/*
 * transport.h - the table of transports (core/transport.c).
 *
 * A transport is what FERRY_TRANSPORT names ("shm", "verbs"): a provider
 * (the verbs objects, struct ferry_provider), the connection manager's
 * part (struct cm_transport, which core only forward-declares: core never
 * looks inside it), and the address rule -- which destinations it serves.
 * ferry_transports[] lists them once, in order of preference; the device
 * list, ferry_open_transport and the CM's choice of a transport for a
 * destination all walk it, and FERRY_TRANSPORT is read in one place,
 * ferry_transport_forced.  How to add one: see core/transport.c.
 */
#ifndef FERRY_CORE_TRANSPORT_H
#define FERRY_CORE_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>

struct ferry_provider;
struct cm_transport;		/* the CM's (cm/cm-internal.h) */
struct sockaddr;

struct ferry_transport {
	const char *name;			/* as FERRY_TRANSPORT names it */
	const struct ferry_provider *prov;	/* its verbs objects */
	/* Its connection manager; NULL while the CM does not serve it yet
	 * (the CM skips such an entry; reaches is NULL then too). */
	const struct cm_transport *cm;
	/*
	 * Does this transport serve @dst?  The CM picks the first transport
	 * of the table whose rule says yes.  Quick and synchronous, any
	 * thread; it may keep state (a cache of this host's addresses).
	 */
	bool (*reaches)(const struct sockaddr *dst);
	/*
	 * Not in the default device list (FERRY_TRANSPORT or
	 * ferry_open_transport name it), and picked for an address only
	 * when no other entry serves it (tcp: hosts nothing else reaches,
	 * which ferry could not reach at all before).  A new transport
	 * starts so, that it cannot change what existing programs get.
	 */
	bool by_name_only;
};

/* The most transports a build can have: the CM keeps a slot per transport
 * in every id (shm, verbs, tcp, one to spare). */
#define FERRY_TRANSPORTS_MAX 4

/* In order of preference; every member of every entry is set (but see cm). */
extern const struct ferry_transport ferry_transports[];
extern const size_t ferry_transports_count;

/*
 * ferry_transport_forced - the transport FERRY_TRANSPORT names, in *@tp_p
 * (NULL when the variable is unset or empty); -1 with errno ENODEV when it
 * names none of this build (the caller says so, in its own words).  Read
 * at every call: a program may change the variable between two calls.
 */
int ferry_transport_forced(const struct ferry_transport **tp_p);
/* The transport called @name, NULL if none is. */
const struct ferry_transport *ferry_transport_named(const char *name);
/* The first transport whose address rule serves @dst (a by_name_only one
 * only when no other does), NULL if none. */
const struct ferry_transport *ferry_transport_reaching(const struct sockaddr *dst);
/* The index in ferry_transports[] of the entry whose CM part is @cm
 * (ferry_transports_count if none). */
size_t ferry_transport_index_of_cm(const struct cm_transport *cm);

/*
 * What the entries name, defined by the providers and the CM: declared
 * here so that adding a transport touches the table alone.
 */
extern const struct ferry_provider ferry_shm_provider;
extern const struct cm_transport cm_shm_transport;
bool shm_cm_reaches(const struct sockaddr *dst);	/* an address of this host */
#ifdef HAVE_VERBS
extern const struct ferry_provider ferry_verbs_provider;
extern const struct cm_transport cm_verbs_transport;
bool vcm_reaches(const struct sockaddr *dst);		/* an RDMA device routes to it */
#endif
extern const struct ferry_provider ferry_tcp_provider;
extern const struct cm_transport cm_tcp_transport;
bool tcp_cm_reaches(const struct sockaddr *dst);	/* the kernel routes to it */

#endif /* FERRY_CORE_TRANSPORT_H */
