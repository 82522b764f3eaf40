/*
 * ferry/cm.h - the connection manager: rdma_cm's shape with ferry_ names.
 *
 * An RDMA programmer ports by renaming rdma_ to ferry_ (and RDMA_ to
 * FERRY_), with one exception: rdma_create_qp / rdma_destroy_qp are
 * ferry_cm_create_qp / ferry_cm_destroy_qp, because ferry_create_qp is the
 * verbs-style call of <ferry/verbs.h> (ibv_create_qp's counterpart).
 *
 * The CM picks the transport during address resolution: a destination on
 * this host goes over the shm provider, one reached through an RDMA device
 * over the verbs provider (librdmacm); FERRY_TRANSPORT=shm|verbs forces one.
 *
 * Error convention: as <ferry/verbs.h>: 0 or -1 with errno set; NULL with
 * errno for constructors.  Asynchronous outcomes arrive as events on the
 * id's event channel, with event->status 0 or a positive errno value
 * (REJECTED by the peer's application: FERRY_CM_REJ_CONSUMER_DEFINED).
 * An id created without a channel is synchronous: each call blocks until
 * its event and reports failure through its return value (REJECTED ->
 * ECONNREFUSED, others -> the event's status); that event stays in
 * id->event until the id's next call or destroy.  Arguments are checked
 * at the call: private data over the limit is EINVAL, a call in the wrong
 * state of the id EINVAL.  ferry_destroy_id blocks until the id's
 * retrieved events are acked.
 */
#ifndef FERRY_CM_H
#define FERRY_CM_H

#include <stdint.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <ferry/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Values equal rdma_cm's enum rdma_cm_event_type. */
enum ferry_cm_event_type {
	FERRY_CM_EVENT_ADDR_RESOLVED,
	FERRY_CM_EVENT_ADDR_ERROR,
	FERRY_CM_EVENT_ROUTE_RESOLVED,
	FERRY_CM_EVENT_ROUTE_ERROR,
	FERRY_CM_EVENT_CONNECT_REQUEST,
	FERRY_CM_EVENT_CONNECT_RESPONSE,	/* never generated: ferry ids always have a QP model */
	FERRY_CM_EVENT_CONNECT_ERROR,
	FERRY_CM_EVENT_UNREACHABLE,
	FERRY_CM_EVENT_REJECTED,
	FERRY_CM_EVENT_ESTABLISHED,
	FERRY_CM_EVENT_DISCONNECTED,
	FERRY_CM_EVENT_DEVICE_REMOVAL,
	FERRY_CM_EVENT_MULTICAST_JOIN,		/* not generated */
	FERRY_CM_EVENT_MULTICAST_ERROR,		/* not generated */
	FERRY_CM_EVENT_ADDR_CHANGE,		/* not generated */
	FERRY_CM_EVENT_TIMEWAIT_EXIT,
};

/* Port spaces (rdma_port_space values). */
enum ferry_port_space {
	FERRY_PS_TCP = 0x0106,	/* reliable connected, the only one ferry has */
};

/* Private data limits, as rdma_cm's on InfiniBand. */
#define FERRY_MAX_PRIVATE_DATA_CONNECT	56
#define FERRY_MAX_PRIVATE_DATA_ACCEPT	196
#define FERRY_MAX_PRIVATE_DATA_REJECT	148

/* event->status of REJECTED when the peer's application rejected (IB's value). */
#define FERRY_CM_REJ_CONSUMER_DEFINED	28

/* An fd that polls readable while events are queued. */
struct ferry_event_channel {
	int fd;
};

struct ferry_cm_addr {
	struct sockaddr_storage src_addr;
	struct sockaddr_storage dst_addr;
};

struct ferry_cm_route {
	struct ferry_cm_addr addr;
};

struct ferry_cm_event;

struct ferry_cm_id {
	struct ferry_context *verbs;	/* device chosen by resolution / bind / request */
	struct ferry_event_channel *channel;	/* NULL: synchronous id */
	void *context;			/* the user's */
	struct ferry_qp *qp;		/* from ferry_cm_create_qp */
	struct ferry_cm_route route;
	enum ferry_port_space ps;
	uint8_t port_num;
	/* Set by ferry_cm_create_qp when it makes the PD/CQs itself. */
	struct ferry_pd *pd;
	struct ferry_cq *send_cq;
	struct ferry_cq *recv_cq;
	/* Synchronous ids: the event of the last call (its private data). */
	struct ferry_cm_event *event;
};

struct ferry_conn_param {
	const void *private_data;
	uint8_t private_data_len;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t flow_control;
	uint8_t retry_count;		/* 0..7 */
	uint8_t rnr_retry_count;	/* 0..7, 7 = forever */
	uint8_t srq;			/* must be 0 */
	uint32_t qp_num;		/* ignored: the id's QP is used */
};

struct ferry_cm_event {
	struct ferry_cm_id *id;
	struct ferry_cm_id *listen_id;	/* CONNECT_REQUEST: the listener */
	enum ferry_cm_event_type event;
	int status;			/* 0, or a positive errno / reject reason */
	union {
		struct ferry_conn_param conn;	/* private data of the peer */
	} param;
};

struct ferry_event_channel *ferry_create_event_channel(void);
int ferry_destroy_event_channel(struct ferry_event_channel *channel);

/**
 * ferry_create_id - a new CM id on @channel (NULL: synchronous id) for
 * port space @ps (FERRY_PS_TCP).  *id_p is set only on success.
 */
int ferry_create_id(struct ferry_event_channel *channel, struct ferry_cm_id **id_p,
		    void *context, enum ferry_port_space ps);
int ferry_destroy_id(struct ferry_cm_id *id);
/**
 * ferry_migrate_id - move @id to @channel: its events still queued on the
 * old one move along, in order, and all later ones arrive on @channel.
 */
int ferry_migrate_id(struct ferry_cm_id *id, struct ferry_event_channel *channel);

int ferry_bind_addr(struct ferry_cm_id *id, struct sockaddr *addr);
int ferry_resolve_addr(struct ferry_cm_id *id, struct sockaddr *src_addr,
		       struct sockaddr *dst_addr, int timeout_ms);
int ferry_resolve_route(struct ferry_cm_id *id, int timeout_ms);
int ferry_listen(struct ferry_cm_id *id, int backlog);

/**
 * ferry_get_request - on a synchronous listening id, wait for the next
 * connection request and return its new id (rdma_get_request).
 */
int ferry_get_request(struct ferry_cm_id *listen, struct ferry_cm_id **id_p);

/**
 * ferry_cm_create_qp - create an RC QP for @id on @pd (NULL: the id makes a
 * PD and, when @qp_init_attr has no CQs, CQs of its own) and let the CM move
 * it through INIT, RTR and RTS as the connection is set up.
 */
int ferry_cm_create_qp(struct ferry_cm_id *id, struct ferry_pd *pd,
		       struct ferry_qp_init_attr *qp_init_attr);
void ferry_cm_destroy_qp(struct ferry_cm_id *id);

int ferry_connect(struct ferry_cm_id *id, struct ferry_conn_param *conn_param);
int ferry_accept(struct ferry_cm_id *id, struct ferry_conn_param *conn_param);
int ferry_reject(struct ferry_cm_id *id, const void *private_data,
		 uint8_t private_data_len);
int ferry_disconnect(struct ferry_cm_id *id);

int ferry_get_cm_event(struct ferry_event_channel *channel,
		       struct ferry_cm_event **event_p);
int ferry_ack_cm_event(struct ferry_cm_event *event);

struct sockaddr *ferry_get_local_addr(struct ferry_cm_id *id);
struct sockaddr *ferry_get_peer_addr(struct ferry_cm_id *id);
uint16_t ferry_get_src_port(struct ferry_cm_id *id);	/* host order */
uint16_t ferry_get_dst_port(struct ferry_cm_id *id);	/* host order */

const char *ferry_event_str(enum ferry_cm_event_type event);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_CM_H */
