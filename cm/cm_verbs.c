/*
 * cm_verbs.c - the verbs transport of the CM: librdmacm drives connections
 * between RDMA devices.
 *
 * One rdma_event_channel per process; its fd is one more libevent event in
 * the CM thread, whose callback reads every pending rdma_cm event, copies
 * what it needs, acks it (so rdma_destroy_id can never wait on an event we
 * hold), then reports the ferry event.  Each ferry id of this transport owns
 * one rdma_cm_id whose context points back at the per-id state.
 *
 * QPs.  The CM core creates the id's QP with ferry_create_qp on a PD of
 * id->verbs, which wraps librdmacm's own ibv_context (prov/verbs takes its
 * devices from rdma_get_devices), so the QP lives on the device the
 * rdma_cm_id uses.  The QP is "user managed" in rdma_cm's terms: its
 * number travels in the conn_param, and every transition takes its
 * attributes from rdma_init_qp_attr:
 *
 *   client                              server
 *   rdma_connect(qp_num) ------------>  CONNECT_REQUEST event
 *                                       INIT->RTR->RTS, rdma_accept
 *   CONNECT_RESPONSE  <---------------
 *   RTR->RTS, rdma_establish
 *   ESTABLISHED  -------- RTU ------->  (rdma_cm's ESTABLISHED)
 *
 * The server reports ESTABLISHED at accept, before the IB CM is
 * established (the RTU may still be on its way).  Until then the IB CM
 * can send no DREQ: a ferry_disconnect in that window is kept and done
 * when rdma_cm's ESTABLISHED arrives.  A REJECTED that reaches an id the
 * user saw established (the client died before its RTU) is DISCONNECTED.
 *
 * iWARP.  On an RNIC (Linux siw, or an iWARP NIC) the kernel's iw_cm
 * moves the QP to RTS itself, in rdma_accept and before the client's
 * ESTABLISHED: ferry takes the QP to INIT only, and notes RTS once iw_cm
 * did its part (prov/verbs keeps the state: siw reports none).  The client
 * gets ESTABLISHED straight away (no CONNECT_RESPONSE, no RTU), with the
 * server's private data (MPA's reply).  IRD/ORD travel in the MPA v2 header
 * and the driver refuses values over its limits: they are clamped to the
 * device's.  There are no RNR retries (rnr_retry_count is 0, as iw_cm
 * reports), and nothing of the IB CM's reject reasons: siw reports a
 * consumer's reject (an MPA reply with R set) as ECONNRESET, and a TCP
 * connect nobody listens to fails rdma_connect itself with ECONNREFUSED.
 *
 * Statuses.  rdma_cm reports negative errno values, and in REJECTED the
 * IB CM's reject reason; ferry's events carry positive errno values
 * (vcm_status).  A destination rdma_cm refuses at once (no RDMA device
 * routes to it) is an ADDR_ERROR event, as on every transport, not a
 * failed call.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <dirent.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "cm-internal.h"
#include "verbs-export.h"

/* How long reaches() lets rdma_cm look for a route to a destination. */
#define VCM_REACH_TIMEOUT_MS 500

/* Reject reasons of the IB CM (IBA table 112) that ferry translates. */
#define VCM_REJ_INVALID_SERVICE_ID	8	/* nothing listens on that port */

/* Per-id state. */
struct vcm_id {
	struct cm_id_priv *id;
	struct rdma_cm_id *rid;
	bool passive;			/* made for an incoming request */
	bool established;		/* the IB CM is: DREQs can be sent */
	bool disconnect_pending;	/* ferry_disconnect came before that */
};

/*
 * The process's rdma_cm event channel and its libevent event.  A child of
 * fork() inherits the parent's channel, whose ids and events are the
 * parent's and whose event lives in the parent's loop: the child closes
 * its copy of the descriptor (else the parent's ids would outlive the
 * parent while the child runs) and makes its own channel on first use.
 */
static struct {
	pthread_mutex_t lock;
	struct rdma_event_channel *ch;
	struct event *ev;
	struct rdma_event_channel *inherited;	/* the parent's, in a child */
} vcm = { PTHREAD_MUTEX_INITIALIZER, NULL, NULL, NULL };
static pthread_once_t vcm_once = PTHREAD_ONCE_INIT;

static void vcm_atfork_child(void)
{
	pthread_mutex_init(&vcm.lock, NULL);
	if (vcm.ch)
		vcm.inherited = vcm.ch;
	vcm.ch = NULL;
	vcm.ev = NULL;
}

static void vcm_init_once(void)
{
	pthread_atfork(NULL, NULL, vcm_atfork_child);
}

static struct vcm_id *vcm_state(struct cm_id_priv *id)
{
	return *cm_tp_data(id, &cm_verbs_transport);
}

/* Is the id's device an RNIC, where iw_cm drives the QP? (see above) */
static bool vcm_iwarp(const struct vcm_id *st)
{
	return st->rid->verbs && st->rid->verbs->device->transport_type == IBV_TRANSPORT_IWARP;
}

static void vcm_on_events(evutil_socket_t fd, short what, void *arg);

/* The event channel, made (and watched by the CM thread) on first use. */
static struct rdma_event_channel *vcm_channel(void)
{
	struct rdma_event_channel *ch;

	pthread_once(&vcm_once, vcm_init_once);
	pthread_mutex_lock(&vcm.lock);
	if (vcm.inherited) {
		rdma_destroy_event_channel(vcm.inherited);
		vcm.inherited = NULL;
	}
	if (!vcm.ch) {
		ch = rdma_create_event_channel();
		if (!ch) {
			ferry_debug("cm: rdma_create_event_channel: %m");
			goto out;
		}
		evutil_make_socket_nonblocking(ch->fd);
		vcm.ev = event_new(cm_thread_base(), ch->fd, EV_READ | EV_PERSIST,
				   vcm_on_events, NULL);
		if (!vcm.ev || event_add(vcm.ev, NULL) < 0) {
			if (vcm.ev)
				event_free(vcm.ev);
			vcm.ev = NULL;
			rdma_destroy_event_channel(ch);
			errno = ENOMEM;
			goto out;
		}
		vcm.ch = ch;
	}
out:
	ch = vcm.ch;
	pthread_mutex_unlock(&vcm.lock);
	return ch;
}

/* The state of @id with a fresh rdma_cm_id, or NULL + errno. */
static struct vcm_id *vcm_state_new(struct cm_id_priv *id, struct rdma_cm_id *rid)
{
	void **slot = cm_tp_data(id, &cm_verbs_transport);
	struct vcm_id *st = *slot;
	struct rdma_event_channel *ch;

	if (st)
		return st;
	st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	st->id = id;
	if (rid) {
		st->rid = rid;
		st->passive = true;
		rid->context = st;
	} else {
		ch = vcm_channel();
		if (!ch || verbs_ret_errno(rdma_create_id(ch, &st->rid, st, RDMA_PS_TCP))) {
			free(st);
			return NULL;
		}
	}
	*slot = st;
	return st;
}

static void vcm_destroy(struct cm_id_priv *id)
{
	void **slot = cm_tp_data(id, &cm_verbs_transport);
	struct vcm_id *st = *slot;

	if (!st)
		return;
	/* Sends a DREQ to a connected peer, which then sees DISCONNECTED. */
	if (st->rid)
		rdma_destroy_id(st->rid);
	free(st);
	*slot = NULL;
}

/* --- QP transitions with rdma_cm's attributes --- */

static int vcm_qp_modify(struct vcm_id *st, enum ibv_qp_state state, uint8_t rd_atomic)
{
	struct ferry_qp *qp = st->id->id.qp;
	struct ibv_qp_attr attr;
	int mask = 0;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = state;
	if (verbs_ret_errno(rdma_init_qp_attr(st->rid, &attr, &mask))) {
		/*
		 * A request the IB CM dropped: its client went away (rdma_cm
		 * reports nothing for a request not yet accepted; "the accept
		 * will just fail later", says the kernel's ucma).
		 */
		if (st->passive && !st->established && errno == EINVAL) {
			ferry_info("cm: the client of this request went away");
			return ERR(ECONNRESET);
		}
		return -1;
	}
	if (state == IBV_QPS_INIT)
		attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				       IBV_ACCESS_REMOTE_ATOMIC;
	if (state == IBV_QPS_RTR && rd_atomic)
		attr.max_dest_rd_atomic = rd_atomic;
	if (state == IBV_QPS_RTS && rd_atomic)
		attr.max_rd_atomic = rd_atomic;
	if (verbs_ret(ibv_modify_qp(verbs_ibv_qp(qp), &attr, mask))) {
		ferry_info("cm: QP %u to state %d: %m", qp->qp_num, (int)state);
		return -1;
	}
	if (vcm_iwarp(st)) {
		verbs_qp_set_state(qp, (enum ferry_qp_state)state);	/* siw cannot tell */
		return 0;
	}
	return verbs_qp_sync_state(qp);
}

static int vcm_qp_init(struct cm_id_priv *id)
{
	struct vcm_id *st = vcm_state(id);

	if (!st || !verbs_is_context(id->id.qp->context))
		return ERR(EINVAL);
	if (vcm_qp_modify(st, IBV_QPS_INIT, 0) == 0)
		return 0;
	/* The QP is still good for nothing but a failing accept: as on shm. */
	return errno == ECONNRESET ? cm_qp_to_init_default(id) : -1;
}

/* --- statuses --- */

/* Does this errno of rdma_resolve_addr/route mean "no way there"? */
static bool vcm_unreachable_errno(int err)
{
	return err == ENODEV || err == EADDRNOTAVAIL || err == ENETUNREACH ||
	       err == EHOSTUNREACH || err == EAFNOSUPPORT;
}

/*
 * The status of a ferry event for an rdma_cm event's: REJECTED keeps the
 * consumer's reason (FERRY_CM_REJ_CONSUMER_DEFINED) and is ECONNREFUSED
 * when nothing listens, as on shm; an address nobody answers for (ARP
 * timed out, no route, no device) is ADDR_ERROR with EHOSTUNREACH, as on
 * every transport; other errno values just become positive.
 */
static int vcm_status(const struct vcm_id *st, enum rdma_cm_event_type type, int status)
{
	int err = status < 0 ? -status : status;

	if (type == RDMA_CM_EVENT_REJECTED && vcm_iwarp(st))
		return err == ECONNRESET ? FERRY_CM_REJ_CONSUMER_DEFINED : err;
	if (type == RDMA_CM_EVENT_REJECTED && status == VCM_REJ_INVALID_SERVICE_ID)
		return ECONNREFUSED;
	if (type == RDMA_CM_EVENT_ADDR_ERROR &&
	    (vcm_unreachable_errno(err) || err == ETIMEDOUT || err == ENODATA))
		return EHOSTUNREACH;
	return err;
}

/* --- resolution --- */

/* The verbs transport's address rule (core's table): rdma_cm routes to it. */
bool vcm_reaches(const struct sockaddr *dst)
{
	struct rdma_cm_id *rid;
	bool ok;

	if (rdma_create_id(NULL, &rid, NULL, RDMA_PS_TCP))
		return false;	/* no RDMA device, or no rdma_cm */
	ok = rdma_resolve_addr(rid, NULL, (struct sockaddr *)dst, VCM_REACH_TIMEOUT_MS) == 0;
	rdma_destroy_id(rid);
	return ok;
}

/*
 * Has this host an RDMA device?  rdma_cm finds none without reading sysfs
 * and failing, which a probe of every connect to a remote destination
 * would pay; the answer is kept VCM_DEVICES_TTL_MS (a device added is
 * used within that time).
 */
#define VCM_DEVICES_TTL_MS	1000

static bool vcm_devices_present(void)
{
	static _Atomic uint64_t until_ms;
	static atomic_bool present;
	uint64_t now;
	struct dirent *de;
	DIR *d;
	bool any = false;

	now = monotime_coarse_ms();	/* vDSO: no system call */
	if (now < atomic_load(&until_ms))
		return atomic_load(&present);
	d = opendir("/sys/class/infiniband");
	while (d && !any && (de = readdir(d)))
		any = de->d_name[0] != '.';
	if (d)
		closedir(d);
	atomic_store(&present, any);
	atomic_store(&until_ms, now + VCM_DEVICES_TTL_MS);
	return any;
}

/* Without a device nothing is reached; with one, only rdma_cm can tell. */
static enum ferry_cm_probe vcm_probe(const struct sockaddr *dst)
{
	return vcm_devices_present() ? FERRY_CM_PROBE_MAYBE : FERRY_CM_PROBE_UNREACHED;
}

static int vcm_bind(struct cm_id_priv *id)
{
	struct sockaddr *src = (struct sockaddr *)&id->id.route.addr.src_addr;
	struct vcm_id *st = vcm_state_new(id, NULL);

	if (!st)
		return -1;
	if (verbs_ret_errno(rdma_bind_addr(st->rid, src))) {
		int err = errno;

		vcm_destroy(id);
		return ERR(err);
	}
	if (cm_addr_port(src) == 0)
		cm_addr_set_port(src, ntohs(rdma_get_src_port(st->rid)));
	return 0;
}

static int vcm_listen(struct cm_id_priv *id, int backlog)
{
	struct vcm_id *st = vcm_state(id);

	if (!st)
		return ERR(EINVAL);
	return verbs_ret_errno(rdma_listen(st->rid, backlog));
}

/*
 * The source: the caller's, else rdma_cm's choice (a bound rdma_cm id has
 * its own already).  The core's derived default, the destination itself,
 * is an address of this host only for shm.  ADDR_RESOLVED stores the
 * source rdma_cm settled on.
 */
static int vcm_resolve_addr(struct cm_id_priv *id, int timeout_ms)
{
	struct vcm_id *st = vcm_state_new(id, NULL);
	struct sockaddr *src = (struct sockaddr *)&id->id.route.addr.src_addr;
	char buf[INET6_ADDRSTRLEN];
	int err;

	if (!st)
		return -1;
	if (rdma_resolve_addr(st->rid, id->src_given ? src : NULL,
			      (struct sockaddr *)&id->id.route.addr.dst_addr, timeout_ms) == 0)
		return 0;
	err = errno ? errno : EIO;
	if (!vcm_unreachable_errno(err))
		return ERR(err);
	ferry_info("cm: no RDMA device routes to %s: %s",
		   cm_addr_ntop((struct sockaddr *)&id->id.route.addr.dst_addr, buf, sizeof(buf)),
		   strerror(err));
	cm_event_report(id, NULL, FERRY_CM_EVENT_ADDR_ERROR, EHOSTUNREACH, NULL);
	return 0;
}

static int vcm_resolve_route(struct cm_id_priv *id, int timeout_ms)
{
	struct vcm_id *st = vcm_state(id);
	int err;

	if (!st)
		return ERR(EINVAL);
	if (rdma_resolve_route(st->rid, timeout_ms) == 0)
		return 0;
	err = errno ? errno : EIO;
	if (!vcm_unreachable_errno(err))
		return ERR(err);
	ferry_info("cm: rdma_resolve_route: %s", strerror(err));
	cm_event_report(id, NULL, FERRY_CM_EVENT_ROUTE_ERROR, EHOSTUNREACH, NULL);
	return 0;
}

/* --- connecting --- */

static void vcm_param_to_rdma(struct rdma_conn_param *out, const struct ferry_conn_param *in,
			      uint32_t qp_num)
{
	memset(out, 0, sizeof(*out));
	out->private_data = in->private_data;
	out->private_data_len = in->private_data_len;
	out->responder_resources = in->responder_resources;
	out->initiator_depth = in->initiator_depth;
	out->flow_control = in->flow_control;
	out->retry_count = in->retry_count;
	out->rnr_retry_count = in->rnr_retry_count;
	out->qp_num = qp_num;
}

static void vcm_param_from_rdma(struct ferry_conn_param *out, const struct rdma_conn_param *in,
				uint8_t *pdata, size_t cap)
{
	size_t len = in->private_data_len < cap ? in->private_data_len : cap;

	memset(out, 0, sizeof(*out));
	if (in->private_data && len)
		memcpy(pdata, in->private_data, len);
	out->private_data = len ? pdata : NULL;
	out->private_data_len = (uint8_t)len;
	out->responder_resources = in->responder_resources;
	out->initiator_depth = in->initiator_depth;
	out->flow_control = in->flow_control;
	out->retry_count = in->retry_count;
	out->rnr_retry_count = in->rnr_retry_count;
}

/*
 * iWARP: IRD (responder_resources) and ORD (initiator_depth) cut to the
 * device's limits (siw: 128 each).  librdmacm refuses larger values and
 * siw's accept refuses them again; over MPA v2 they are only offers that
 * the two drivers reconcile (siw's "relaxed" negotiation), so a request
 * for more than the device has is served with what it has.
 */
static void vcm_iwarp_clamp_depths(const struct vcm_id *st, struct rdma_conn_param *rp)
{
	struct ibv_device_attr attr;

	if (ibv_query_device(st->rid->verbs, &attr))
		return;	/* the driver will say what it refuses */
	if (rp->responder_resources > attr.max_qp_rd_atom)
		rp->responder_resources = (uint8_t)attr.max_qp_rd_atom;
	if (rp->initiator_depth > attr.max_qp_init_rd_atom)
		rp->initiator_depth = (uint8_t)attr.max_qp_init_rd_atom;
}

/*
 * iWARP's rdma_connect makes the TCP connection itself (siw: a blocking
 * connect in the kernel), so "nothing listens" and "no way there" come
 * back from the call: reported as the events other transports give.
 */
static int vcm_iwarp_connect(struct cm_id_priv *id, struct vcm_id *st,
			     struct rdma_conn_param *rp)
{
	int err;

	vcm_iwarp_clamp_depths(st, rp);
	if (rdma_connect(st->rid, rp) == 0)
		return 0;
	err = errno ? errno : EIO;
	if (err == ECONNREFUSED) {
		cm_event_report(id, NULL, FERRY_CM_EVENT_REJECTED, ECONNREFUSED, NULL);
		return 0;
	}
	if (vcm_unreachable_errno(err) || err == ETIMEDOUT) {
		cm_event_report(id, NULL, FERRY_CM_EVENT_UNREACHABLE, EHOSTUNREACH, NULL);
		return 0;
	}
	return ERR(err);
}

static int vcm_connect(struct cm_id_priv *id, const struct ferry_conn_param *param)
{
	struct vcm_id *st = vcm_state(id);
	struct rdma_conn_param rp;

	if (!st || !id->id.qp)
		return ERR(EINVAL);
	vcm_param_to_rdma(&rp, param, id->id.qp->qp_num);
	if (vcm_iwarp(st))
		return vcm_iwarp_connect(id, st, &rp);
	return verbs_ret_errno(rdma_connect(st->rid, &rp));
}

/* librdmacm's events reach an id any time: it stays the loop's. */
static int vcm_unloop(struct cm_id_priv *id)
{
	return ERR(ENOTSUP);
}

static void vcm_reloop(struct cm_id_priv *id)
{
}

/* CM thread: nothing to do before vcm_accept. */
static int vcm_accept_begin(struct cm_id_priv *id, const struct ferry_conn_param *param)
{
	return 0;
}

/*
 * Caller's thread: QP to RTS, then accept; ESTABLISHED is reported here.
 * On iWARP the QP stays in INIT: rdma_accept moves it to RTS, and
 * ESTABLISHED waits for rdma_cm's (vcm_on_iwarp_established): with MPA's
 * ready-to-receive the client takes no FPDU before its RTR has gone out --
 * siw fails a connect whose Reply has anything behind it (EPROTO in
 * siw_recv_mpa_rr, CONNECT_ERROR EINVAL) -- and rdma_cm's ESTABLISHED on
 * this side is the RTR's arrival.  A server that sent at accept lost
 * clients (a stream socket that sends at once and closes).
 */
static int vcm_accept(struct cm_id_priv *id, const struct ferry_conn_param *param)
{
	struct vcm_id *st = vcm_state(id);
	struct rdma_conn_param rp;
	bool iwarp;

	if (!st || !id->id.qp)
		return ERR(EINVAL);
	iwarp = vcm_iwarp(st);
	if (id->id.qp->state == FERRY_QPS_RESET && vcm_qp_modify(st, IBV_QPS_INIT, 0))
		return -1;
	if (!iwarp && (vcm_qp_modify(st, IBV_QPS_RTR, param->responder_resources) ||
		       vcm_qp_modify(st, IBV_QPS_RTS, param->initiator_depth)))
		return -1;
	vcm_param_to_rdma(&rp, param, id->id.qp->qp_num);
	if (iwarp)
		vcm_iwarp_clamp_depths(st, &rp);
	if (verbs_ret_errno(rdma_accept(st->rid, &rp)))
		return -1;
	if (iwarp) {
		verbs_qp_set_state(id->id.qp, FERRY_QPS_RTS);
		return 0;
	}
	cm_event_report(id, NULL, FERRY_CM_EVENT_ESTABLISHED, 0, NULL);
	return 0;
}

static int vcm_reject(struct cm_id_priv *id, const void *pdata, uint8_t len)
{
	struct vcm_id *st = vcm_state(id);

	if (!st)
		return ERR(EINVAL);
	return verbs_ret_errno(rdma_reject(st->rid, pdata, len));
}

static int vcm_disconnect(struct cm_id_priv *id)
{
	struct vcm_id *st = vcm_state(id);

	if (!st)
		return ERR(EINVAL);
	if (!st->established) {
		st->disconnect_pending = true;	/* done at rdma_cm's ESTABLISHED */
		return 0;
	}
	return verbs_ret_errno(rdma_disconnect(st->rid));
}

/* --- events (CM thread) --- */

/* A new ferry id for an incoming request on the listener @lst. */
static void vcm_on_request(struct vcm_id *lst, struct rdma_cm_id *rid,
			   const struct ferry_conn_param *param)
{
	struct cm_id_priv *id = cm_id_new_request(lst->id, &cm_verbs_transport);
	struct vcm_id *st;

	if (!id || !(st = vcm_state_new(id, rid))) {
		ferry_warn("cm: dropping an RDMA connection request: %m");
		rdma_reject(rid, NULL, 0);
		rdma_destroy_id(rid);
		if (id)
			cm_id_free_unreported(id);
		return;
	}
	memcpy(&id->id.route.addr.src_addr, rdma_get_local_addr(rid),
	       cm_addr_len(rdma_get_local_addr(rid)));
	memcpy(&id->id.route.addr.dst_addr, rdma_get_peer_addr(rid),
	       cm_addr_len(rdma_get_peer_addr(rid)));
	id->peer.max_rd_atomic = param->initiator_depth;
	id->peer.max_dest_rd_atomic = param->responder_resources;
	id->peer.retry_count = param->retry_count;
	id->peer.rnr_retry_count = param->rnr_retry_count;
	cm_event_report(id, lst->id, FERRY_CM_EVENT_CONNECT_REQUEST, 0, param);
}

/* The client's QP to RTS once the server accepted, then the RTU. */
static void vcm_on_response(struct vcm_id *st, const struct ferry_conn_param *param)
{
	struct cm_id_priv *id = st->id;

	if (vcm_qp_modify(st, IBV_QPS_RTR, 0) || vcm_qp_modify(st, IBV_QPS_RTS, 0) ||
	    verbs_ret_errno(rdma_establish(st->rid))) {
		int err = errno;

		ferry_info("cm: completing an RDMA connection: %m");
		rdma_reject(st->rid, NULL, 0);
		cm_event_report(id, NULL, FERRY_CM_EVENT_CONNECT_ERROR, err, NULL);
		return;
	}
	st->established = true;
	cm_event_report(id, NULL, FERRY_CM_EVENT_ESTABLISHED, 0, param);
}

/*
 * iWARP: iw_cm moved the QP to RTS before this ESTABLISHED; on the server
 * it means the client's RTR came (see vcm_accept).
 */
static void vcm_on_iwarp_established(struct vcm_id *st, const struct ferry_conn_param *param)
{
	struct cm_id_priv *id = st->id;

	st->established = true;
	if (id->id.qp)
		verbs_qp_set_state(id->id.qp, FERRY_QPS_RTS);
	cm_event_report(id, NULL, FERRY_CM_EVENT_ESTABLISHED, 0, param);
	if (st->disconnect_pending && rdma_disconnect(st->rid))
		ferry_info("cm: a delayed rdma_disconnect: %m");
}

/* One rdma_cm event, already acked: everything needed was copied. */
static void vcm_dispatch(struct vcm_id *st, struct rdma_cm_id *rid,
			 enum rdma_cm_event_type type, int status,
			 const struct ferry_conn_param *param)
{
	struct cm_id_priv *id = st->id;

	status = vcm_status(st, type, status);
	switch (type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		memcpy(&id->id.route.addr.src_addr, rdma_get_local_addr(rid),
		       cm_addr_len(rdma_get_local_addr(rid)));
		cm_event_report(id, NULL, FERRY_CM_EVENT_ADDR_RESOLVED, 0, NULL);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		cm_event_report(id, NULL, (enum ferry_cm_event_type)type, status, NULL);
		break;
	case RDMA_CM_EVENT_REJECTED:
		/*
		 * On a request not yet established the client gave up (its
		 * process died, or it destroyed its id): as on shm, that is
		 * CONNECT_ERROR with ECONNRESET, and ferry_accept fails.
		 */
		if (id->state == CM_CONNECT_REQ || id->state == CM_ACCEPTING)
			cm_event_report(id, NULL, FERRY_CM_EVENT_CONNECT_ERROR, ECONNRESET, NULL);
		else if (id->state == CM_ESTABLISHED)
			cm_id_disconnected(id);
		else if (id->state != CM_DISCONNECT)
			cm_event_report(id, NULL, FERRY_CM_EVENT_REJECTED, status, param);
		break;
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		vcm_on_request(st, rid, param);
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		vcm_on_response(st, param);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (vcm_iwarp(st)) {
			vcm_on_iwarp_established(st, param);
			break;
		}
		/* the server reported it at accept; now the IB CM can disconnect */
		st->established = true;
		if (st->disconnect_pending && rdma_disconnect(rid))
			ferry_info("cm: a delayed rdma_disconnect: %m");
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (id->state == CM_ESTABLISHED)
			cm_id_disconnected(id);
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		cm_event_report(id, NULL, FERRY_CM_EVENT_DEVICE_REMOVAL, 0, NULL);
		break;
	default:
		break;	/* TIMEWAIT_EXIT: the core reports its own; others unused */
	}
}

static void vcm_on_events(evutil_socket_t fd, short what, void *arg)
{
	struct rdma_cm_event *ev;
	uint8_t pdata[FERRY_MAX_PRIVATE_DATA_ACCEPT];

	while (vcm.ch && rdma_get_cm_event(vcm.ch, &ev) == 0) {
		enum rdma_cm_event_type type = ev->event;
		struct rdma_cm_id *rid = ev->id;
		struct vcm_id *st = type == RDMA_CM_EVENT_CONNECT_REQUEST ?
				    ev->listen_id->context : ev->id->context;
		struct ferry_conn_param param;
		int status = ev->status;

		vcm_param_from_rdma(&param, &ev->param.conn, pdata, sizeof(pdata));
		ferry_debug("cm: rdma_cm event %s (status %d)", rdma_event_str(type), status);
		rdma_ack_cm_event(ev);
		if (st)
			vcm_dispatch(st, rid, type, status, &param);
	}
}

const struct cm_transport cm_verbs_transport = {
	.calls_inline = false,	/* librdmacm's events reach ids any time */
	.probe = vcm_probe,
	.bind = vcm_bind,
	.listen = vcm_listen,
	.resolve_addr = vcm_resolve_addr,
	.resolve_route = vcm_resolve_route,
	.qp_init = vcm_qp_init,
	.connect = vcm_connect,
	.unloop = vcm_unloop,
	.reloop = vcm_reloop,
	.accept_begin = vcm_accept_begin,
	.accept = vcm_accept,
	.reject = vcm_reject,
	.disconnect = vcm_disconnect,
	.destroy = vcm_destroy,
};
