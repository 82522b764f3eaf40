/*
 * check_cm.c - the connection manager's API on its transport (shm, or the
 * one FERRY_TRANSPORT forces, at the address cmt_addr gives): event
 * channels, connecting over IPv4 and IPv6 with private data both ways and
 * data flowing over the QPs the CM connected, reject, refusal where nothing
 * listens, argument limits, binds, disconnects, synchronous ids, address
 * errors, and destroy's wait for acks.  Robustness is in check_cm_robust.c.
 */
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <check.h>

#include "check_suites.h"
#include "core-export.h"
#include "cm_shm.h"
#include "cmtest.h"
#include "testutil.h"

static const char cm_hello[] = "hello from the client";

/* --- channels and names --- */

START_TEST(test_event_str)
{
	ck_assert_str_eq(ferry_event_str(FERRY_CM_EVENT_ADDR_RESOLVED),
			 "FERRY_CM_EVENT_ADDR_RESOLVED");
	ck_assert_str_eq(ferry_event_str(FERRY_CM_EVENT_TIMEWAIT_EXIT),
			 "FERRY_CM_EVENT_TIMEWAIT_EXIT");
	ck_assert_str_eq(ferry_event_str((enum ferry_cm_event_type)99), "UNKNOWN EVENT");
}
END_TEST

START_TEST(test_channel_empty)
{
	struct ferry_event_channel *ch = ferry_create_event_channel();
	struct pollfd pfd = { .events = POLLIN };
	struct ferry_cm_event *ev;

	ck_assert_ptr_nonnull(ch);
	pfd.fd = ch->fd;
	ck_assert_int_eq(poll(&pfd, 1, 0), 0);
	ck_assert_int_eq(fcntl(ch->fd, F_SETFL, O_NONBLOCK), 0);
	ck_assert_int_eq(ferry_get_cm_event(ch, &ev), -1);
	ck_assert_int_eq(errno, EAGAIN);
	ck_assert_int_eq(ferry_get_cm_event(NULL, &ev), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_destroy_event_channel(ch), 0);
}
END_TEST

START_TEST(test_channel_busy)
{
	struct ferry_event_channel *ch = ferry_create_event_channel();
	struct ferry_cm_id *id;

	ck_assert_int_eq(ferry_create_id(ch, &id, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_destroy_event_channel(ch), -1);
	ck_assert_int_eq(errno, EBUSY);
	ck_assert_int_eq(ferry_destroy_id(id), 0);
	ck_assert_int_eq(ferry_destroy_event_channel(ch), 0);
	ck_assert_int_eq(ferry_create_id(NULL, &id, NULL, (enum ferry_port_space)1), -1);
	ck_assert_int_eq(errno, EINVAL);
}
END_TEST

/*
 * ferry_migrate_id: an event queued before the move goes along with the id,
 * later ones arrive on the new channel, the old one is free to go.
 */
START_TEST(test_migrate_id)
{
	struct ferry_event_channel *a = ferry_create_event_channel();
	struct ferry_event_channel *b = ferry_create_event_channel();
	struct pollfd pfd = { .events = POLLIN };
	struct sockaddr_storage dst;
	struct ferry_cm_id *id, *sync_id;
	uint16_t port = 0;
	struct cmt_end l;

	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	cmt_addr(&dst, AF_INET, port);
	ck_assert_int_eq(ferry_create_id(a, &id, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_resolve_addr(id, NULL, (struct sockaddr *)&dst, 100), 0);
	pfd.fd = a->fd;
	ck_assert_int_eq(poll(&pfd, 1, 5000), 1);	/* ADDR_RESOLVED, on a */
	ck_assert_int_eq(ferry_migrate_id(id, b), 0);
	ck_assert_ptr_eq(id->channel, b);
	pfd.fd = a->fd;
	ck_assert_int_eq(poll(&pfd, 1, 0), 0);
	ck_assert_int_eq(ferry_destroy_event_channel(a), 0);	/* no id, no event */
	ck_assert_int_eq(cmt_wait_ack(b, FERRY_CM_EVENT_ADDR_RESOLVED), 0);
	ck_assert_int_eq(ferry_resolve_route(id, 100), 0);
	ck_assert_int_eq(cmt_wait_ack(b, FERRY_CM_EVENT_ROUTE_RESOLVED), 0);
	ck_assert_int_eq(ferry_destroy_event_channel(b), -1);
	ck_assert_int_eq(errno, EBUSY);
	ck_assert_int_eq(ferry_destroy_id(id), 0);
	ck_assert_int_eq(ferry_destroy_event_channel(b), 0);
	/* A synchronous id has no channel to leave. */
	b = ferry_create_event_channel();
	ck_assert_int_eq(ferry_create_id(NULL, &sync_id, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_migrate_id(sync_id, b), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_migrate_id(NULL, b), -1);
	ck_assert_int_eq(ferry_destroy_id(sync_id), 0);
	ck_assert_int_eq(ferry_destroy_event_channel(b), 0);
	cmt_close(&l);
}
END_TEST

/* --- connecting --- */

/* Connect over @family's test address, check events, addresses, data. */
static void cm_connect_family(int family)
{
	struct cmt_end l, c, s;
	struct sockaddr_storage dst;
	struct ferry_cm_event *ev;
	struct cmt_remote remote;
	uint16_t port;

	ck_assert_int_eq(cmt_listen(&l, family, &port), 0);
	ck_assert_uint_ne(port, 0);
	cmt_addr(&dst, family, port);
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, cm_hello, sizeof(cm_hello)), 0);

	/* The request carries the client's private data and addresses. */
	ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev), 0);
	ck_assert(cmt_pdata_is(&ev->param.conn, cm_hello, sizeof(cm_hello)));
	/* iWARP has no RNR retries: iw_cm passes on none, so 0. */
	ck_assert_int_eq(ev->param.conn.rnr_retry_count, tu_on_iwarp() ? 0 : 7);
	memset(&s, 0, sizeof(s));
	s.id = ev->id;
	ck_assert_ptr_eq(s.id->verbs, c.id->verbs);
	ck_assert_int_eq(ferry_get_local_addr(s.id)->sa_family, family);
	ck_assert_uint_eq(ferry_get_src_port(s.id), port);
	ck_assert_uint_eq(ferry_get_dst_port(s.id), ferry_get_src_port(c.id));
	ck_assert_uint_eq(ferry_get_dst_port(c.id), port);
	ferry_ack_cm_event(ev);

	ck_assert_int_eq(cmt_create_qp(s.id), 0);
	ck_assert_int_eq(cmt_reg_buf(&s, 65536), 0);
	ck_assert_int_eq(tu_post_recv1(s.id->qp, 1, s.buf, 4096, s.mr->lkey), 0);
	remote = (struct cmt_remote){ (uintptr_t)s.buf, s.mr->rkey, CMT_MAGIC };
	{
		struct ferry_conn_param p = {
			.private_data = &remote, .private_data_len = sizeof(remote),
			.responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7,
		};

		ck_assert_int_eq(ferry_accept(s.id, &p), 0);
	}
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert_int_eq(cmt_wait(c.ch, FERRY_CM_EVENT_ESTABLISHED, &ev), 0);
	ck_assert_int_ge(ev->param.conn.private_data_len, sizeof(remote));
	memcpy(&remote, ev->param.conn.private_data, sizeof(remote));
	ck_assert(cmt_pdata_is(&ev->param.conn, &remote, sizeof(remote)));
	ferry_ack_cm_event(ev);
	/* An established shm client keeps nothing of its request. */
	if (to_cm_id(c.id)->tp == &cm_shm_transport)
		ck_assert_ptr_null(shm_cm_state(to_cm_id(c.id))->request);

	ck_assert_int_eq(tu_qp_state(c.id->qp), FERRY_QPS_RTS);
	ck_assert_int_eq(tu_qp_state(s.id->qp), FERRY_QPS_RTS);
	ck_assert_int_eq(cmt_data_flow(&c, &s, &remote), 0);

	cmt_close(&c);
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_DISCONNECTED), 0);
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_TIMEWAIT_EXIT), 0);
	cmt_close(&s);
	cmt_close(&l);
}

START_TEST(test_connect_ipv4)
{
	cm_connect_family(AF_INET);
}
END_TEST

START_TEST(test_connect_ipv6)
{
	cm_connect_family(AF_INET6);
}
END_TEST

/* A wildcard listener serves its family; an IPv6 one serves IPv4 too. */
START_TEST(test_wildcard_listeners)
{
	static const int families[] = { AF_INET, AF_INET6 };
	unsigned int i;

	for (i = 0; i < 2; i++) {
		struct sockaddr_storage any, dst;
		struct cmt_end l = { 0 }, c, s;
		struct ferry_cm_event *ev;
		uint16_t port;

		/*
		 * siw's IPv6 wildcard listener takes the IPv4 connection, but
		 * the kernel's rdma_cm finds no device for its v4-mapped local
		 * address (rdma_translate_ip) and iw_cm rejects the request.
		 */
		if (families[i] == AF_INET6 && tu_on_iwarp()) {
			printf("SKIP test_wildcard_listeners (IPv6 serving IPv4) on iWARP: "
			       "rdma_cm rejects a v4-mapped request\n");
			continue;
		}
		memset(&any, 0, sizeof(any));
		any.ss_family = (sa_family_t)families[i];
		if (families[i] == AF_INET6)
			((struct sockaddr_in6 *)&any)->sin6_addr = in6addr_any;
		l.ch = ferry_create_event_channel();
		ck_assert_int_eq(ferry_create_id(l.ch, &l.id, &l, FERRY_PS_TCP), 0);
		ck_assert_int_eq(ferry_bind_addr(l.id, (struct sockaddr *)&any), 0);
		ck_assert_int_eq(ferry_listen(l.id, 4), 0);
		port = ferry_get_src_port(l.id);
		cmt_addr(&dst, AF_INET, port);	/* IPv4 both times */
		ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, NULL, 0), 0);
		ck_assert_int_eq(cmt_accept(&l, &s), 0);
		ck_assert_int_eq(cmt_wait(c.ch, FERRY_CM_EVENT_ESTABLISHED, &ev), 0);
		ferry_ack_cm_event(ev);
		/* The request id's local address is the one the client asked for. */
		ck_assert_int_eq(ferry_get_local_addr(s.id)->sa_family, AF_INET);
		cmt_close(&c);
		cmt_close(&s);
		cmt_close(&l);
	}
}
END_TEST

START_TEST(test_reject_private_data)
{
	static const char why[] = "go away";
	struct cmt_end l, c;
	struct sockaddr_storage dst;
	struct ferry_cm_event *ev;
	struct ferry_cm_id *req;
	uint16_t port;

	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	cmt_addr(&dst, AF_INET, port);
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, NULL, 0), 0);
	ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev), 0);
	req = ev->id;
	ck_assert(cmt_pdata_is(&ev->param.conn, NULL, 0));
	ferry_ack_cm_event(ev);
	ck_assert_int_eq(ferry_reject(req, why, sizeof(why)), 0);
	ck_assert_int_eq(cmt_wait(c.ch, FERRY_CM_EVENT_REJECTED, &ev), 0);
	ck_assert_int_eq(ev->status, FERRY_CM_REJ_CONSUMER_DEFINED);
	ck_assert(cmt_pdata_is(&ev->param.conn, why, sizeof(why)));
	ferry_ack_cm_event(ev);
	ck_assert_int_eq(ferry_destroy_id(req), 0);
	cmt_close(&c);
	cmt_close(&l);
}
END_TEST

/*
 * On iWARP only iw_cm binds a QP to its TCP stream: ferry_qp_exchange,
 * made for a manual RTR, refuses a QP there with EOPNOTSUPP, and a CM QP
 * reads INIT (ferry's own record: siw reports no state) until connected.
 */
START_TEST(test_iwarp_exchange_refused)
{
	struct sockaddr_storage dst;
	struct cmt_end c;
	uint32_t peer;
	int sv[2];

	if (!tu_on_iwarp()) {
		printf("SKIP test_iwarp_exchange_refused on %s: no iWARP device\n", tu_transport());
		return;
	}
	cmt_addr(&dst, AF_INET, 7);	/* only resolved, never connected */
	memset(&c, 0, sizeof(c));
	c.ch = ferry_create_event_channel();
	ck_assert_int_eq(ferry_create_id(c.ch, &c.id, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_resolve_addr(c.id, NULL, (struct sockaddr *)&dst, 100), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ADDR_RESOLVED), 0);
	ck_assert_int_eq(cmt_create_qp(c.id), 0);
	ck_assert_int_eq(tu_qp_state(c.id->qp), FERRY_QPS_INIT);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(ferry_qp_exchange(c.id->qp, sv[0], &peer), -1);
	ck_assert_int_eq(errno, EOPNOTSUPP);
	ck_assert_int_eq(tu_qp_state(c.id->qp), FERRY_QPS_INIT);
	close(sv[0]);
	close(sv[1]);
	cmt_close(&c);
}
END_TEST

/*
 * On iWARP IRD/ORD above the device's limits are cut to them, not refused:
 * a connect and an accept asking for 255 of each connect, and the request
 * carries no more than the device has.
 */
START_TEST(test_iwarp_depths_clamped)
{
	struct ferry_conn_param p = { .responder_resources = 255, .initiator_depth = 255 };
	struct sockaddr_storage dst;
	struct ferry_device_attr dev;
	struct ferry_cm_event *ev;
	struct cmt_end l, c, s;
	uint16_t port;

	if (!tu_on_iwarp()) {
		printf("SKIP test_iwarp_depths_clamped on %s: no iWARP device "
		       "(elsewhere rdma_cm refuses such depths)\n", tu_transport());
		return;
	}
	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	cmt_addr(&dst, AF_INET, port);
	memset(&c, 0, sizeof(c));
	c.ch = ferry_create_event_channel();
	ck_assert_int_eq(ferry_create_id(c.ch, &c.id, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_resolve_addr(c.id, NULL, (struct sockaddr *)&dst, 100), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ADDR_RESOLVED), 0);
	ck_assert_int_eq(ferry_resolve_route(c.id, 100), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ROUTE_RESOLVED), 0);
	ck_assert_int_eq(cmt_create_qp(c.id), 0);
	ck_assert_int_eq(ferry_query_device(c.id->verbs, &dev), 0);
	ck_assert_int_lt(dev.max_qp_rd_atom, 255);
	ck_assert_int_eq(ferry_connect(c.id, &p), 0);

	ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev), 0);
	ck_assert_int_le(ev->param.conn.responder_resources, dev.max_qp_rd_atom);
	ck_assert_int_le(ev->param.conn.initiator_depth, dev.max_qp_init_rd_atom);
	memset(&s, 0, sizeof(s));
	s.id = ev->id;
	ferry_ack_cm_event(ev);
	ck_assert_int_eq(cmt_create_qp(s.id), 0);
	ck_assert_int_eq(ferry_accept(s.id, &p), 0);
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert_int_eq(tu_qp_state(c.id->qp), FERRY_QPS_RTS);
	cmt_close(&c);
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_DISCONNECTED), 0);
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_TIMEWAIT_EXIT), 0);
	cmt_close(&s);
	cmt_close(&l);
}
END_TEST

START_TEST(test_no_listener_refused)
{
	struct sockaddr_storage dst;
	struct ferry_cm_event *ev;
	struct cmt_end l, c;
	uint16_t port;

	/* A port that was free a moment ago: nothing listens there now. */
	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	cmt_close(&l);
	cmt_addr(&dst, AF_INET, port);
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, NULL, 0), 0);
	ck_assert_int_eq(cmt_wait(c.ch, FERRY_CM_EVENT_REJECTED, &ev), 0);
	ck_assert_int_eq(ev->status, ECONNREFUSED);
	ferry_ack_cm_event(ev);
	cmt_close(&c);
}
END_TEST

/* A kernel TCP socket listening on @dst's address and port. */
static int cm_tcp_listen(const struct sockaddr_storage *dst)
{
	int on = 1, fd = socket(dst->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)), 0);
	ck_assert_int_eq(bind(fd, (const struct sockaddr *)dst, sizeof(struct sockaddr_in)), 0);
	ck_assert_int_eq(listen(fd, 4), 0);
	return fd;
}

/* Has this host an RDMA device (then a remote address is the verbs transport's)? */
static bool cm_rdma_device_present(void)
{
	DIR *d = opendir("/sys/class/infiniband");
	struct dirent *de;
	bool any = false;

	while (d && !any && (de = readdir(d)))
		any = de->d_name[0] != '.';
	if (d)
		closedir(d);
	return any;
}

/*
 * ferry_cm_probe: an address of no host here is REMOTE, a port nobody
 * listens on NO_LISTENER, a ferry listener's MAYBE; a plain TCP listener
 * is MAYBE until a connect finds no ferry listener behind it, NO_FERRY
 * after; a new socket listening on that port is looked at again once the
 * quick memory (100 ms, cm/cm_shm_probe.c) is past.
 */
START_TEST(test_probe)
{
	struct sockaddr_in remote = { .sin_family = AF_INET, .sin_port = htons(9) };
	struct sockaddr *d;
	struct sockaddr_storage dst;
	struct ferry_cm_event *ev;
	struct cmt_end l, c;
	uint16_t port;
	int tcp;

	if (!tu_on_shm()) {
		printf("SKIP test_probe on %s: shm's listeners\n", tu_transport());
		return;
	}
	inet_pton(AF_INET, "192.0.2.1", &remote.sin_addr);	/* TEST-NET-1 */
	ck_assert_int_eq(ferry_cm_probe((struct sockaddr *)&remote),
			 cm_rdma_device_present() ? FERRY_CM_PROBE_MAYBE : FERRY_CM_PROBE_REMOTE);

	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	cmt_addr(&dst, AF_INET, port);
	d = (struct sockaddr *)&dst;
	ck_assert_int_eq(ferry_cm_probe(d), FERRY_CM_PROBE_MAYBE);
	cmt_close(&l);
	ck_assert_int_eq(ferry_cm_probe(d), FERRY_CM_PROBE_NO_LISTENER);

	tcp = cm_tcp_listen(&dst);
	ck_assert_int_eq(ferry_cm_probe(d), FERRY_CM_PROBE_MAYBE);
	ck_assert_int_eq(cmt_connect(&c, d, NULL, 0), 0);
	ck_assert_int_eq(cmt_wait(c.ch, FERRY_CM_EVENT_REJECTED, &ev), 0);
	ck_assert_int_eq(ev->status, ECONNREFUSED);
	ferry_ack_cm_event(ev);
	cmt_close(&c);
	ck_assert_int_eq(ferry_cm_probe(d), FERRY_CM_PROBE_NO_FERRY);

	/* The server restarts: another socket, found past the quick memory. */
	close(tcp);
	tcp = cm_tcp_listen(&dst);
	usleep(150 * 1000);
	ck_assert_int_eq(ferry_cm_probe(d), FERRY_CM_PROBE_MAYBE);
	close(tcp);
}
END_TEST

/*
 * The owner a probe found serves the connect right behind it, once, for
 * that destination only, and only while fresh (50 ms): cm/cm_shm_probe.c.
 */
START_TEST(test_probe_owner_reuse)
{
	struct shm_cm_owner want, got;
	struct sockaddr_storage dst, other;
	struct sockaddr *d = (struct sockaddr *)&dst;
	struct cmt_end l, l2, c, s;
	uint16_t port, port2;

	if (!tu_on_shm()) {
		printf("SKIP test_probe_owner_reuse on %s: shm's listeners\n", tu_transport());
		return;
	}
	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	ck_assert_int_eq(cmt_listen(&l2, AF_INET, &port2), 0);
	cmt_addr(&dst, AF_INET, port);
	cmt_addr(&other, AF_INET, port2);
	ck_assert_int_eq(shm_cm_owner_of(d, &want), 0);

	ck_assert_int_eq(ferry_cm_probe(d), FERRY_CM_PROBE_MAYBE);
	ck_assert(!shm_cm_probe_owner_take((struct sockaddr *)&other, &got));
	ck_assert(shm_cm_probe_owner_take(d, &got));
	ck_assert_uint_eq(got.inode, want.inode);
	ck_assert_uint_eq(got.cookie, want.cookie);
	ck_assert_uint_eq(got.uid, want.uid);
	ck_assert(!shm_cm_probe_owner_take(d, &got));	/* once */

	ck_assert_int_eq(ferry_cm_probe(d), FERRY_CM_PROBE_MAYBE);
	usleep(120 * 1000);
	ck_assert(!shm_cm_probe_owner_take(d, &got));	/* stale */

	/* A connect behind a probe takes it and connects. */
	ck_assert_int_eq(ferry_cm_probe(d), FERRY_CM_PROBE_MAYBE);
	ck_assert_int_eq(cmt_connect(&c, d, NULL, 0), 0);
	ck_assert_int_eq(cmt_accept(&l, &s), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert(!shm_cm_probe_owner_take(d, &got));
	cmt_close(&c);
	cmt_close(&s);
	cmt_close(&l2);
	cmt_close(&l);
}
END_TEST

START_TEST(test_private_data_limits)
{
	uint8_t big[256] = { 0 };
	struct ferry_conn_param p = { .private_data = big };
	struct sockaddr_storage dst;
	struct ferry_cm_event *ev;
	struct cmt_end l, c;
	struct ferry_cm_id *req;
	uint16_t port;

	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	cmt_addr(&dst, AF_INET, port);
	memset(&c, 0, sizeof(c));
	c.ch = ferry_create_event_channel();
	ck_assert_int_eq(ferry_create_id(c.ch, &c.id, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_resolve_addr(c.id, NULL, (struct sockaddr *)&dst, 100), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ADDR_RESOLVED), 0);
	ck_assert_int_eq(ferry_resolve_route(c.id, 100), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ROUTE_RESOLVED), 0);
	ck_assert_int_eq(cmt_create_qp(c.id), 0);
	p.private_data_len = FERRY_MAX_PRIVATE_DATA_CONNECT + 1;
	ck_assert_int_eq(ferry_connect(c.id, &p), -1);
	ck_assert_int_eq(errno, EINVAL);
	p.private_data_len = FERRY_MAX_PRIVATE_DATA_CONNECT;
	p.rnr_retry_count = 7;
	ck_assert_int_eq(ferry_connect(c.id, &p), 0);
	ck_assert_int_eq(ferry_connect(c.id, &p), -1);	/* already connecting */
	ck_assert_int_eq(errno, EINVAL);

	ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev), 0);
	ck_assert_int_eq(ev->param.conn.private_data_len, FERRY_MAX_PRIVATE_DATA_CONNECT);
	req = ev->id;
	ferry_ack_cm_event(ev);
	ck_assert_int_eq(cmt_create_qp(req), 0);
	p.private_data_len = FERRY_MAX_PRIVATE_DATA_ACCEPT + 1;
	ck_assert_int_eq(ferry_accept(req, &p), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_reject(req, big, FERRY_MAX_PRIVATE_DATA_REJECT + 1), -1);
	ck_assert_int_eq(errno, EINVAL);
	p.private_data_len = FERRY_MAX_PRIVATE_DATA_ACCEPT;
	ck_assert_int_eq(ferry_accept(req, &p), 0);
	ck_assert_int_eq(cmt_wait(c.ch, FERRY_CM_EVENT_ESTABLISHED, &ev), 0);
	ck_assert_int_eq(ev->param.conn.private_data_len, FERRY_MAX_PRIVATE_DATA_ACCEPT);
	ferry_ack_cm_event(ev);
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ferry_cm_destroy_qp(req);
	ck_assert_int_eq(ferry_destroy_id(req), 0);
	cmt_close(&c);
	cmt_close(&l);
}
END_TEST

START_TEST(test_bind_addrinuse_and_port0)
{
	struct sockaddr_storage a, any;
	struct ferry_cm_id *id1, *id2, *id3;
	uint16_t port;

	cmt_addr(&a, AF_INET6, 0);
	ck_assert_int_eq(ferry_create_id(NULL, &id1, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_create_id(NULL, &id2, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_create_id(NULL, &id3, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_bind_addr(id1, (struct sockaddr *)&a), 0);
	port = ferry_get_src_port(id1);
	ck_assert_uint_ge(port, 32768);
	ck_assert_int_eq(ferry_listen(id1, 1), 0);
	cmt_addr(&a, AF_INET6, port);
	ck_assert_int_eq(ferry_bind_addr(id2, (struct sockaddr *)&a), -1);
	ck_assert_int_eq(errno, EADDRINUSE);
	/* The same port on another address is another name. */
	cmt_addr(&a, AF_INET, port);
	ck_assert_int_eq(ferry_bind_addr(id2, (struct sockaddr *)&a), 0);
	ck_assert_int_eq(ferry_bind_addr(id2, (struct sockaddr *)&a), -1);	/* bound */
	ck_assert_int_eq(errno, EINVAL);
	/* Not an address of this host. */
	memset(&any, 0, sizeof(any));
	((struct sockaddr_in *)&any)->sin_family = AF_INET;
	((struct sockaddr_in *)&any)->sin_addr.s_addr = inet_addr("192.0.2.1");
	ck_assert_int_eq(ferry_bind_addr(id3, (struct sockaddr *)&any), -1);
	ck_assert_int_eq(errno, EADDRNOTAVAIL);
	ck_assert_int_eq(ferry_destroy_id(id1), 0);
	/* Free again once its holder is gone. */
	cmt_addr(&a, AF_INET6, port);
	ck_assert_int_eq(ferry_bind_addr(id3, (struct sockaddr *)&a), 0);
	ck_assert_int_eq(ferry_destroy_id(id2), 0);
	ck_assert_int_eq(ferry_destroy_id(id3), 0);
}
END_TEST

/* Established pair @l/@c/@s on the IPv4 test address. */
static void cm_pair(struct cmt_end *l, struct cmt_end *c, struct cmt_end *s)
{
	struct sockaddr_storage dst;
	uint16_t port;

	ck_assert_int_eq(cmt_listen(l, AF_INET, &port), 0);
	cmt_addr(&dst, AF_INET, port);
	ck_assert_int_eq(cmt_connect(c, (struct sockaddr *)&dst, NULL, 0), 0);
	ck_assert_int_eq(cmt_accept(l, s), 0);
	ck_assert_int_eq(cmt_wait_ack(c->ch, FERRY_CM_EVENT_ESTABLISHED), 0);
}

START_TEST(test_disconnect_both_sides)
{
	struct cmt_end l, c, s;
	int who;

	for (who = 0; who < 2; who++) {
		struct cmt_end *first, *second;
		struct ferry_event_channel *fch, *sch;

		cm_pair(&l, &c, &s);
		first = who ? &s : &c;
		second = who ? &c : &s;
		fch = who ? l.ch : c.ch;
		sch = who ? c.ch : l.ch;
		ck_assert_int_eq(ferry_disconnect(first->id), 0);
		ck_assert_int_eq(tu_qp_state(first->id->qp), FERRY_QPS_ERR);
		ck_assert_int_eq(cmt_wait_ack(fch, FERRY_CM_EVENT_DISCONNECTED), 0);
		ck_assert_int_eq(cmt_wait_ack(fch, FERRY_CM_EVENT_TIMEWAIT_EXIT), 0);
		ck_assert_int_eq(cmt_wait_ack(sch, FERRY_CM_EVENT_DISCONNECTED), 0);
		ck_assert_int_eq(cmt_wait_ack(sch, FERRY_CM_EVENT_TIMEWAIT_EXIT), 0);
		ck_assert(tu_wait_qp_state(second->id->qp, FERRY_QPS_ERR, TU_WAIT_MS));
		/* The usual answer to DISCONNECTED is harmless. */
		ck_assert_int_eq(ferry_disconnect(second->id), 0);
		ck_assert_int_eq(ferry_disconnect(first->id), 0);
		cmt_close(&c);
		cmt_close(&s);
		cmt_close(&l);
	}
}
END_TEST

/*
 * A quiet listener's connections (ferry_cm_quiet, as stream sockets ask)
 * get no DISCONNECTED when the peer goes, since the shm CM does not watch
 * them; their QP still goes to ERR (the provider's monitor sees the
 * hang-up), and disconnecting or destroying them still works.  The same
 * pair without quiet does get the event (test_disconnect_both_sides).
 */
START_TEST(test_quiet_ids)
{
	struct sockaddr_storage dst;
	struct cmt_end l, c, s;
	struct pollfd p;
	uint16_t port;

	if (!tu_on_shm()) {
		printf("SKIP test_quiet_ids on %s: librdmacm reports every DISCONNECTED\n",
		       tu_transport());
		return;
	}
	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	ferry_cm_quiet(l.id);
	cmt_addr(&dst, AF_INET, port);
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, NULL, 0), 0);
	ck_assert_int_eq(cmt_accept(&l, &s), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert_int_eq(ferry_disconnect(c.id), 0);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_DISCONNECTED), 0);
	ck_assert(tu_wait_qp_state(s.id->qp, FERRY_QPS_ERR, TU_WAIT_MS));
	/* An event would be on its way by now; give it a moment anyway. */
	p = (struct pollfd){ .fd = l.ch->fd, .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, 200), 0);
	ck_assert_int_eq(ferry_disconnect(s.id), 0);
	cmt_close(&c);
	cmt_close(&s);
	cmt_close(&l);
}
END_TEST

/* --- steps taken by the caller --- */

/* The CM thread, held in a call: it says so on @held, and waits for a
 * byte on @go (10 s at most). */
struct cm_stall {
	int held[2], go[2];
	pthread_t thread;
};

static int cm_stall_op(void *arg)
{
	struct cm_stall *st = arg;
	struct pollfd p = { .fd = st->go[0], .events = POLLIN };

	if (write(st->held[1], "h", 1) != 1)
		return -1;
	return poll(&p, 1, 10000) == 1 ? 0 : -1;
}

static void *cm_stall_main(void *arg)
{
	cm_thread_call(cm_stall_op, arg);
	return NULL;
}

/* Is an event waiting on @ch right now? */
static bool cm_event_queued(struct ferry_event_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

/*
 * ferry_cm_progress takes every step of a connect and its accept in the
 * caller's thread, while the CM thread is held elsewhere: the request at
 * the rendezvous, the listener's answer, both halves of the exchange; and
 * takes none (0) while nothing has come.
 */
START_TEST(test_progress_in_caller)
{
	struct ferry_conn_param p = { .responder_resources = 1, .initiator_depth = 1,
				      .rnr_retry_count = 7 };
	struct sockaddr_storage dst;
	struct ferry_cm_event *ev;
	struct cmt_end l, c, s;
	struct cm_stall stall;
	uint16_t port;
	char byte;

	if (!tu_on_shm()) {
		printf("SKIP test_progress_in_caller on %s: shm steps only\n", tu_transport());
		return;
	}
	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	ck_assert_int_eq(pipe(stall.held), 0);
	ck_assert_int_eq(pipe(stall.go), 0);
	ck_assert_int_eq(pthread_create(&stall.thread, NULL, cm_stall_main, &stall), 0);
	ck_assert_int_eq(read(stall.held[0], &byte, 1), 1);	/* the loop is held */
	ck_assert_int_eq(ferry_cm_progress(l.id), 0);
	cmt_addr(&dst, AF_INET, port);
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, NULL, 0), 0);
	ck_assert_int_eq(ferry_cm_progress(c.id), 0);	/* no answer yet */

	ck_assert_int_eq(ferry_cm_progress(l.id), 1);
	ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev), 0);
	s = (struct cmt_end){ .id = ev->id };
	ferry_ack_cm_event(ev);
	ck_assert_int_eq(cmt_create_qp(s.id), 0);
	ck_assert_int_eq(ferry_accept(s.id, &p), 0);
	ck_assert_int_eq(ferry_cm_progress(s.id), 0);	/* the client's half not in yet */

	ck_assert_int_eq(ferry_cm_progress(c.id), 1);	/* ACCEPT, and our half out */
	ck_assert(!cm_event_queued(c.ch));		/* not before the listener's READY */
	ck_assert_int_eq(ferry_cm_progress(s.id), 1);
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert_int_eq(ferry_cm_progress(c.id), 1);
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert_int_eq(tu_qp_state(c.id->qp), FERRY_QPS_RTS);
	ck_assert_int_eq(tu_qp_state(s.id->qp), FERRY_QPS_RTS);
	ck_assert_int_eq(ferry_cm_progress(c.id), 0);	/* established: no steps left */

	ck_assert_int_eq(write(stall.go[1], "g", 1), 1);
	ck_assert_int_eq(pthread_join(stall.thread, NULL), 0);
	close(stall.held[0]);
	close(stall.held[1]);
	close(stall.go[0]);
	close(stall.go[1]);
	cmt_close(&c);
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_DISCONNECTED), 0);
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_TIMEWAIT_EXIT), 0);
	cmt_close(&s);
	cmt_close(&l);
}
END_TEST

/* Hold @id's step, sleep on its socket (bounded), release: what release said. */
static int cm_hold_sleep_release(struct ferry_cm_id *id)
{
	int ms = 5000, fd = ferry_cm_hold(id, &ms);
	struct pollfd p = { .fd = fd, .events = POLLIN };

	ck_assert_int_ge(fd, 0);
	ck_assert_int_gt(ms, 0);
	ck_assert_int_le(ms, 5000);
	ck_assert_int_eq(ferry_cm_hold(id, &ms), -1);	/* held already */
	ck_assert_int_eq(poll(&p, 1, ms), 1);
	return ferry_cm_release(id);
}

/*
 * ferry_cm_hold gives the caller the descriptor a step waits on and its
 * deadline; ferry_cm_release after the sleep runs the step (1), or gives
 * it back to the loop when nothing came (0), from which a later hold takes
 * it again: with the CM thread held, the connect and its accept complete
 * through hold and release alone (and progress, for the rendezvous).
 */
START_TEST(test_hold_release)
{
	struct ferry_conn_param p = { .responder_resources = 1, .initiator_depth = 1,
				      .rnr_retry_count = 7 };
	struct sockaddr_storage dst;
	struct ferry_cm_event *ev;
	struct cmt_end l, c, s;
	struct cm_stall stall;
	uint16_t port;
	char byte;
	int ms = -1;

	if (!tu_on_shm()) {
		printf("SKIP test_hold_release on %s: shm steps only\n", tu_transport());
		return;
	}
	ck_assert_int_eq(cmt_listen(&l, AF_INET, &port), 0);
	ck_assert_int_eq(ferry_cm_hold(l.id, &ms), -1);	/* a listener has no such step */
	ck_assert_int_eq(pipe(stall.held), 0);
	ck_assert_int_eq(pipe(stall.go), 0);
	ck_assert_int_eq(pthread_create(&stall.thread, NULL, cm_stall_main, &stall), 0);
	ck_assert_int_eq(read(stall.held[0], &byte, 1), 1);
	cmt_addr(&dst, AF_INET, port);
	ck_assert_int_eq(cmt_connect(&c, (struct sockaddr *)&dst, NULL, 0), 0);
	ck_assert_int_ge(ferry_cm_hold(c.id, &ms), 0);
	ck_assert_int_gt(ms, 0);		/* the connect timeout's rest */
	ck_assert_int_eq(ferry_cm_release(c.id), 0);	/* nothing came: back to the loop */

	ck_assert_int_eq(ferry_cm_progress(l.id), 1);
	ck_assert_int_eq(cmt_wait(l.ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev), 0);
	s = (struct cmt_end){ .id = ev->id };
	ferry_ack_cm_event(ev);
	ck_assert_int_eq(cmt_create_qp(s.id), 0);
	ck_assert_int_eq(ferry_accept(s.id, &p), 0);
	ck_assert_int_eq(cm_hold_sleep_release(c.id), 1);	/* ACCEPT */
	ck_assert_int_eq(cm_hold_sleep_release(s.id), 1);	/* the client's half */
	ck_assert_int_eq(cmt_wait_ack(l.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert_int_eq(cm_hold_sleep_release(c.id), 1);	/* READY */
	ck_assert_int_eq(cmt_wait_ack(c.ch, FERRY_CM_EVENT_ESTABLISHED), 0);
	ck_assert_int_eq(ferry_cm_hold(c.id, &ms), -1);	/* nothing left to wait for */

	ck_assert_int_eq(write(stall.go[1], "g", 1), 1);
	ck_assert_int_eq(pthread_join(stall.thread, NULL), 0);
	close(stall.held[0]);
	close(stall.held[1]);
	close(stall.go[0]);
	close(stall.go[1]);
	ck_assert_int_eq(tu_qp_state(c.id->qp), FERRY_QPS_RTS);
	ck_assert_int_eq(tu_qp_state(s.id->qp), FERRY_QPS_RTS);
	cmt_close(&c);
	cmt_close(&s);
	cmt_close(&l);
}
END_TEST

/* --- synchronous ids --- */

struct cm_sync_server {
	struct ferry_cm_id *listen;
	struct ferry_cm_id *conn;
	int result;
};

static void *cm_sync_server_main(void *arg)
{
	struct cm_sync_server *srv = arg;
	struct ferry_conn_param p = { .rnr_retry_count = 7, .private_data = "ok",
				      .private_data_len = 3 };

	srv->result = -1;
	if (ferry_get_request(srv->listen, &srv->conn) < 0)
		return NULL;
	if (!cmt_pdata_is(&srv->conn->event->param.conn, cm_hello, sizeof(cm_hello))) {
		ferry_reject(srv->conn, NULL, 0);	/* fail the client now, not at its timeout */
		return NULL;
	}
	if (cmt_create_qp(srv->conn) < 0 || ferry_accept(srv->conn, &p) < 0)
		return NULL;
	srv->result = 0;
	return NULL;
}

START_TEST(test_sync_ids)
{
	struct ferry_conn_param p = { .private_data = cm_hello,
				      .private_data_len = sizeof(cm_hello),
				      .rnr_retry_count = 7 };
	struct cm_sync_server srv = { 0 };
	struct sockaddr_storage a;
	struct ferry_cm_id *cid;
	pthread_t thr;

	cmt_addr(&a, AF_INET, 0);
	ck_assert_int_eq(ferry_create_id(NULL, &srv.listen, NULL, FERRY_PS_TCP), 0);
	ck_assert_ptr_null(srv.listen->channel);
	ck_assert_int_eq(ferry_bind_addr(srv.listen, (struct sockaddr *)&a), 0);
	ck_assert_int_eq(ferry_listen(srv.listen, 4), 0);
	cmt_addr(&a, AF_INET, ferry_get_src_port(srv.listen));
	ck_assert_int_eq(pthread_create(&thr, NULL, cm_sync_server_main, &srv), 0);

	ck_assert_int_eq(ferry_create_id(NULL, &cid, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_resolve_addr(cid, NULL, (struct sockaddr *)&a, 1000), 0);
	ck_assert_int_eq(cid->event->event, FERRY_CM_EVENT_ADDR_RESOLVED);
	ck_assert_int_eq(ferry_resolve_route(cid, 1000), 0);
	ck_assert_int_eq(cmt_create_qp(cid), 0);
	ck_assert_int_eq(ferry_connect(cid, &p), 0);
	ck_assert_int_eq(cid->event->event, FERRY_CM_EVENT_ESTABLISHED);
	ck_assert_str_eq(cid->event->param.conn.private_data, "ok");
	pthread_join(thr, NULL);
	ck_assert_int_eq(srv.result, 0);
	ck_assert_int_eq(tu_qp_state(srv.conn->qp), FERRY_QPS_RTS);

	/* A synchronous call that fails says why in errno. */
	ck_assert_int_eq(ferry_get_request(cid, &srv.conn), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_disconnect(cid), 0);
	ck_assert(tu_wait_qp_state(srv.conn->qp, FERRY_QPS_ERR, TU_WAIT_MS));
	ck_assert_int_eq(ferry_destroy_id(cid), 0);
	ck_assert_int_eq(ferry_destroy_id(srv.conn), 0);
	ck_assert_int_eq(ferry_destroy_id(srv.listen), 0);
}
END_TEST

START_TEST(test_sync_refused)
{
	struct sockaddr_storage a;
	struct ferry_cm_id *cid, *tmp;

	ck_assert_int_eq(ferry_create_id(NULL, &tmp, NULL, FERRY_PS_TCP), 0);
	cmt_addr(&a, AF_INET, 0);
	ck_assert_int_eq(ferry_bind_addr(tmp, (struct sockaddr *)&a), 0);
	cmt_addr(&a, AF_INET, ferry_get_src_port(tmp));
	ck_assert_int_eq(ferry_destroy_id(tmp), 0);

	ck_assert_int_eq(ferry_create_id(NULL, &cid, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_resolve_addr(cid, NULL, (struct sockaddr *)&a, 1000), 0);
	ck_assert_int_eq(ferry_resolve_route(cid, 1000), 0);
	ck_assert_int_eq(cmt_create_qp(cid), 0);
	ck_assert_int_eq(ferry_connect(cid, NULL), -1);
	ck_assert_int_eq(errno, ECONNREFUSED);
	ck_assert_int_eq(cid->event->event, FERRY_CM_EVENT_REJECTED);
	ck_assert_int_eq(ferry_destroy_id(cid), 0);
}
END_TEST

/* --- resolution --- */

START_TEST(test_addr_error_unreachable)
{
	struct ferry_event_channel *ch = ferry_create_event_channel();
	struct sockaddr_in far = { .sin_family = AF_INET, .sin_port = htons(7471) };
	struct ferry_cm_event *ev;
	struct ferry_cm_id *id;

	/* Multicast: no transport serves it (tcp serves any routed unicast
	 * address, so TEST-NET-1 behind a default route would be tcp's).  But
	 * rdma_cm resolves a multicast address (for joins): on verbs,
	 * TEST-NET-1, which the VM routes nowhere (tests/rxe/check-rxe.sh). */
	far.sin_addr.s_addr = inet_addr(strcmp(tu_transport(), "verbs") == 0 ? "192.0.2.1" :
					"224.0.0.1");
	ck_assert_int_eq(ferry_create_id(ch, &id, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_resolve_addr(id, NULL, (struct sockaddr *)&far, 100), 0);
	ck_assert_int_eq(cmt_wait(ch, FERRY_CM_EVENT_ADDR_ERROR, &ev), 0);
	ck_assert_int_eq(ev->status, EHOSTUNREACH);
	ferry_ack_cm_event(ev);
	ck_assert_ptr_null(id->verbs);
	ck_assert_int_eq(ferry_resolve_route(id, 100), -1);	/* no address */
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ferry_destroy_id(id), 0);

	/* Forcing a transport the CM does not have fails resolution too. */
	setenv("FERRY_TRANSPORT", "nosuch", 1);
	ck_assert_int_eq(ferry_create_id(ch, &id, NULL, FERRY_PS_TCP), 0);
	far.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(ferry_resolve_addr(id, NULL, (struct sockaddr *)&far, 100), 0);
	ck_assert_int_eq(cmt_wait(ch, FERRY_CM_EVENT_ADDR_ERROR, &ev), 0);
	ck_assert_int_eq(ev->status, ENODEV);
	ferry_ack_cm_event(ev);
	ck_assert_int_eq(ferry_destroy_id(id), 0);
	unsetenv("FERRY_TRANSPORT");
	ck_assert_int_eq(ferry_destroy_event_channel(ch), 0);
}
END_TEST

/* --- destroy waits for acks --- */

struct cm_destroyer {
	struct ferry_cm_id *id;
	volatile int done;
};

static void *cm_destroy_main(void *arg)
{
	struct cm_destroyer *d = arg;

	ferry_destroy_id(d->id);
	d->done = 1;
	return NULL;
}

START_TEST(test_destroy_waits_for_ack)
{
	struct ferry_event_channel *ch = ferry_create_event_channel();
	struct sockaddr_storage a;
	struct ferry_cm_event *ev;
	struct cm_destroyer d = { 0 };
	pthread_t thr;

	cmt_addr(&a, AF_INET, 5);
	ck_assert_int_eq(ferry_create_id(ch, &d.id, NULL, FERRY_PS_TCP), 0);
	ck_assert_int_eq(ferry_resolve_addr(d.id, NULL, (struct sockaddr *)&a, 100), 0);
	ck_assert_int_eq(cmt_wait(ch, FERRY_CM_EVENT_ADDR_RESOLVED, &ev), 0);
	ck_assert_int_eq(pthread_create(&thr, NULL, cm_destroy_main, &d), 0);
	tu_sleep_ms(50);
	ck_assert_int_eq(d.done, 0);	/* still waiting for our ack */
	ck_assert_int_eq(ferry_ack_cm_event(ev), 0);
	pthread_join(thr, NULL);
	ck_assert_int_eq(d.done, 1);
	ck_assert_int_eq(ferry_destroy_event_channel(ch), 0);
}
END_TEST

Suite *cm_suite(void)
{
	Suite *s = suite_create("cm");
	TCase *api = tcase_create("api");
	TCase *conn = tcase_create("connect");
	TCase *sync = tcase_create("sync");

	tcase_set_timeout(api, TU_TCASE_TIMEOUT);
	tcase_add_test(api, test_event_str);
	tcase_add_test(api, test_channel_empty);
	tcase_add_test(api, test_channel_busy);
	tcase_add_test(api, test_migrate_id);
	tcase_add_test(api, test_bind_addrinuse_and_port0);
	tcase_add_test(api, test_addr_error_unreachable);
	tcase_add_test(api, test_destroy_waits_for_ack);
	suite_add_tcase(s, api);

	tcase_set_timeout(conn, TU_TCASE_TIMEOUT);
	tcase_add_test(conn, test_connect_ipv4);
	tcase_add_test(conn, test_connect_ipv6);
	tcase_add_test(conn, test_wildcard_listeners);
	tcase_add_test(conn, test_reject_private_data);
	tcase_add_test(conn, test_no_listener_refused);
	tcase_add_test(conn, test_iwarp_exchange_refused);
	tcase_add_test(conn, test_iwarp_depths_clamped);
	tcase_add_test(conn, test_probe);
	tcase_add_test(conn, test_probe_owner_reuse);
	tcase_add_test(conn, test_private_data_limits);
	tcase_add_test(conn, test_disconnect_both_sides);
	tcase_add_test(conn, test_quiet_ids);
	tcase_add_test(conn, test_progress_in_caller);
	tcase_add_test(conn, test_hold_release);
	suite_add_tcase(s, conn);

	tcase_set_timeout(sync, TU_TCASE_TIMEOUT);
	tcase_add_test(sync, test_sync_ids);
	tcase_add_test(sync, test_sync_refused);
	suite_add_tcase(s, sync);
	return s;
}
