/*
 * cm_tcp.h - the tcp transport of the CM, between its two files:
 * cm_tcp.c (address rule, resolution, the active side, disconnect and
 * the end of a connection) and cm_tcp_listen.c (bind, listen, requests,
 * accept, reject).
 *
 * Every call runs in the CM thread (calls_inline false, no unloop, as
 * the verbs transport): the id's socket events are libevent events of
 * the CM thread's base, created, added and freed there alone.
 */
#ifndef FERRY_CM_TCP_H
#define FERRY_CM_TCP_H

#include "cm-internal.h"
#include "tcp-export.h"

/* How long a connect waits for the TCP handshake and the MPA Reply
 * (siw's 10 s for the Initiator), unless ferry_cm_connect_timeout says. */
#define TCM_CONNECT_TIMEOUT_MS	10000
/* How long an accepted socket has to deliver its MPA Request (siw: 5 s). */
#define TCM_REQUEST_TIMEOUT_MS	5000

/* Where an id of this transport stands. */
enum tcm_phase {
	TCM_BOUND,		/* a listener not yet listening */
	TCM_LISTENING,		/* takes connections */
	TCM_CONNECTING,		/* client: TCP handshake under way */
	TCM_WAIT_REPLY,		/* client: Request sent */
	TCM_REQUESTED,		/* server: Request reported, accept/reject to come */
	TCM_ATTACHED,		/* the QP owns the socket */
	TCM_CLOSED,		/* over: no socket */
};

struct tcm_pending;

/* Per-id state. */
struct tcm_id {
	struct cm_id_priv *id;
	enum tcm_phase phase;
	int fd;				/* listening or connection socket, -1 */
	/* The listener's port is held by the shm transport's TCP socket,
	 * which hands us the TCP clients it accepts (cm_tcp_take). */
	bool port_via_shm;
	/* The caller's socket holds it (the shim, with tcp forced), which
	 * offers us the clients it accepts (ferry_cm_offer_tcp). */
	bool port_via_caller;
	struct event *ev;		/* fd's readiness, with the phase's deadline */
	struct event *down_ev;		/* the QP went to ERR (made active by the hook) */
	struct ferry_qp *qp;		/* whose hook is set (the id's QP at attach) */
	struct ferry_tcp_mpa *mpa;	/* the exchange, until attached */
	uint8_t req_pd[FERRY_MAX_PRIVATE_DATA_CONNECT];	/* client: for the Request */
	uint8_t req_pd_len;
	uint64_t deadline_ms;		/* of the phase, CLOCK_MONOTONIC */
	struct tcm_pending *pending;	/* listener: accepted, Request not in yet */
	unsigned int npending;		/* ... how many */
	struct event *backoff_ev;	/* listener: accept() out of descriptors */
};

struct tcm_id *tcm_state(struct cm_id_priv *id);
/* A fresh state for @id (with @fd), NULL + errno. */
struct tcm_id *tcm_state_new(struct cm_id_priv *id, int fd);
/* Aim st->ev at st->fd for @what until st->deadline_ms. */
int tcm_arm(struct tcm_id *st, short what, event_callback_fn cb);
/* The QP of the id to RTS on st->fd; the hook set.  0 or -1 with errno. */
int tcm_attach(struct tcm_id *st, const struct cm_qp_param *param);
/* Close the id's socket and its events (not the listener's pendings). */
void tcm_close(struct tcm_id *st);
/* The TCP socket's own addresses into the id's route. */
void tcm_addrs_from_socket(struct cm_id_priv *id, int fd);

int tcm_bind(struct cm_id_priv *id);
int tcm_listen(struct cm_id_priv *id, int backlog);
int tcm_accept_begin(struct cm_id_priv *id, const struct ferry_conn_param *param);
int tcm_accept(struct cm_id_priv *id, const struct ferry_conn_param *param);
int tcm_reject(struct cm_id_priv *id, const void *pdata, uint8_t len);
void tcm_listen_destroy(struct tcm_id *st);

#endif /* FERRY_CM_TCP_H */
