/*
 * tcp-export.h - what the CM's tcp transport (cm/cm_tcp*.c) may call in
 * the tcp provider: a stepwise MPA exchange for a non-blocking socket,
 * joining a QP to the socket once it is over, and a hook telling the CM
 * that the QP's connection went down.  Nothing of the wire format.
 *
 * Errors: -1 with errno (socket-style), as the rest of the provider.
 */
#ifndef FERRY_TCP_EXPORT_H
#define FERRY_TCP_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ferry_qp;
struct ferry_tcp_mpa;		/* one MPA Request/Reply exchange */

/*
 * The most private data of the CM's own in a Request or Reply: MPA's
 * 512 less the IRD/ORD block (4) and ferry's 8 bytes.
 */
#define FERRY_TCP_CM_PDATA_MAX 500

/* A new exchange: @initiator sends the Request; @rnr_retry goes in ferry's
 * private data.  NULL + ENOMEM. */
struct ferry_tcp_mpa *ferry_tcp_mpa_new(bool initiator, uint8_t rnr_retry);
void ferry_tcp_mpa_free(struct ferry_tcp_mpa *m);

/*
 * Initiator: send the Request carrying @pd (at most
 * FERRY_TCP_CM_PDATA_MAX bytes) on @fd, connected and non-blocking.  The
 * frame (at most 532 bytes) fits an empty send buffer: a short write is
 * an error (EIO), never a wait.
 */
int ferry_tcp_mpa_send_request(struct ferry_tcp_mpa *m, int fd, const void *pd, size_t len);
/*
 * Read what has come of the peer's frame (Request for the Responder,
 * Reply for the Initiator), never a byte past it.  1: complete and
 * acceptable; 0: more to come (EAGAIN); -1 with ECONNRESET (the peer
 * closed or reset), EPROTO (not a valid frame, or a Request we cannot
 * serve: its rejecting Reply was sent), ECONNREFUSED (a Reply with R
 * set: the peer's private data are still there, ferry_tcp_mpa_pdata).
 */
int ferry_tcp_mpa_read(struct ferry_tcp_mpa *m, int fd);
/* The peer's private data less ferry's 8 bytes, once its frame is in. */
const uint8_t *ferry_tcp_mpa_pdata(const struct ferry_tcp_mpa *m, size_t *len_p);
/* Responder, after the Request: the accepting or (@reject) rejecting Reply. */
int ferry_tcp_mpa_send_reply(struct ferry_tcp_mpa *m, int fd, const void *pd, size_t len,
			     bool reject);
/* Both, once accepted: ferry_tcp_qp_attach of @qp (in INIT) to @fd with
 * what the exchange settled.  The QP owns @fd from then on, also on failure. */
int ferry_tcp_mpa_attach(struct ferry_tcp_mpa *m, struct ferry_qp *qp, int fd);

/*
 * ferry_tcp_qp_on_down - call @cb(@arg) once when @qp goes to ERR (the
 * peer's FIN or reset, a Terminate, a local error or modify).  @cb runs
 * with the QP's lock held, in whichever thread took it there (often the
 * progress thread): it must only hand the news on (libevent's
 * event_active).  @cb NULL: no more calls; once this returns, none runs.
 */
void ferry_tcp_qp_on_down(struct ferry_qp *qp, void (*cb)(void *arg), void *arg);

#endif /* FERRY_TCP_EXPORT_H */
