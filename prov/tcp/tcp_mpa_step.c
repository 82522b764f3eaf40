/*
 * tcp_mpa_step.c - the MPA exchange step by step on a non-blocking
 * socket, for the CM thread (cm/cm_tcp.c), which must never wait for a
 * peer: the CM reads when its loop says the socket is readable, and
 * keeps the deadline itself.  Same frames and rules as tcp_mpa.c's
 * blocking form, and the same care: every read takes exactly the
 * frame's bytes, never one past it (what follows is the peer's first
 * FPDU and belongs to the QP).
 *
 * Private data of a frame: the CM's, then ferry's 8 bytes (tcp_mpa.c),
 * so that a siw peer's ULP finds its own data first.  A peer without
 * ferry's (siw) gets its whole private data to the CM.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp-internal.h"
#include "tcp-export.h"

#define TCP_MPA_STEP_MAX	(TCPW_MPA_HDR_LEN + TCPW_MPA_PD_MAX)

_Static_assert(FERRY_TCP_CM_PDATA_MAX + TCP_PD_LEN + TCPW_MPA_V2_LEN <= TCPW_MPA_PD_MAX,
	       "the CM's private data must fit MPA's with ferry's and the IRD/ORD block");

struct ferry_tcp_mpa {
	bool initiator;
	uint8_t rnr_retry;
	struct tcpw_mpa_local local;
	uint8_t sent_pd[TCP_PD_LEN + FERRY_TCP_CM_PDATA_MAX];	/* our Request's */
	uint16_t sent_pd_len;
	uint8_t buf[TCP_MPA_STEP_MAX];	/* the peer's frame, as it comes */
	size_t have, want;		/* want: 0 until the header is in */
	struct tcpw_mpa_frame peer;	/* decoded; pd points into buf */
	size_t ulp_pd_len;		/* of peer.pd, less ferry's 8 bytes */
	struct tcp_attach conn;		/* on success */
};

struct ferry_tcp_mpa *ferry_tcp_mpa_new(bool initiator, uint8_t rnr_retry)
{
	struct ferry_tcp_mpa *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->initiator = initiator;
	m->rnr_retry = rnr_retry > 7 ? 7 : rnr_retry;
	ferry_tcp_mpa_local_default(&m->local);
	return m;
}

void ferry_tcp_mpa_free(struct ferry_tcp_mpa *m)
{
	free(m);
}

/* @pd then ferry's 8 bytes, in @out (len + TCP_PD_LEN bytes). */
static uint16_t tcp_mpa_step_pd(const struct ferry_tcp_mpa *m, const void *pd, size_t len,
				uint8_t *out)
{
	if (len)
		memcpy(out, pd, len);
	tcp_mpa_pd_put(out + len, m->rnr_retry);
	return (uint16_t)(len + TCP_PD_LEN);
}

static int tcp_mpa_step_send(int fd, const struct tcpw_mpa_frame *f)
{
	uint8_t buf[TCP_MPA_STEP_MAX];
	size_t len;
	ssize_t n;

	if (tcpw_mpa_encode(f, buf, sizeof(buf), &len) < 0)
		return ERR(EINVAL);
	do
		n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EPIPE ? ERR(ECONNRESET) : -1;
	return (size_t)n == len ? 0 : ERR(EIO);	/* an empty buffer takes it all */
}

int ferry_tcp_mpa_send_request(struct ferry_tcp_mpa *m, int fd, const void *pd, size_t len)
{
	struct tcpw_mpa_frame req;

	if (!m->initiator || len > FERRY_TCP_CM_PDATA_MAX || (len && !pd))
		return ERR(EINVAL);
	m->sent_pd_len = tcp_mpa_step_pd(m, pd, len, m->sent_pd);
	tcpw_mpa_request(&m->local, m->sent_pd, m->sent_pd_len, &req);
	return tcp_mpa_step_send(fd, &req);
}

/* Read up to @want bytes in all: 1 when there, 0 for EAGAIN, -1. */
static int tcp_mpa_step_fill(struct ferry_tcp_mpa *m, int fd, size_t want)
{
	while (m->have < want) {
		ssize_t n = recv(fd, m->buf + m->have, want - m->have, MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n < 0)
			return errno == ECONNRESET ? -1 : ERR(ECONNRESET);
		if (n == 0)
			return ERR(ECONNRESET);	/* the peer closed before its frame */
		m->have += (size_t)n;
	}
	return 1;
}

/* The whole frame, decoded: the Request checked we can serve it. */
static int tcp_mpa_step_done(struct ferry_tcp_mpa *m, int fd)
{
	enum tcpw_mpa_kind kind = m->initiator ? TCPW_MPA_REP : TCPW_MPA_REQ;
	struct tcpw_mpa_frame req, rep;
	int rc = tcpw_mpa_decode(m->buf, m->have, kind, &m->peer);

	if (rc < 0)
		goto err_proto;
	memset(&m->conn, 0, sizeof(m->conn));
	m->conn.initiator = m->initiator;
	m->ulp_pd_len = tcp_mpa_pd_peer(m->peer.pd, m->peer.pd_len, &m->conn);
	if (m->initiator) {
		tcpw_mpa_request(&m->local, m->sent_pd, m->sent_pd_len, &req);
		rc = tcpw_mpa_check_reply(&req, &m->peer, &m->conn.mpa);
		if (rc == TCPW_ERR_MPA_REJECTED)
			return ERR(ECONNREFUSED);
	} else {
		rc = tcpw_mpa_answer(&m->peer, &m->local, NULL, 0, &rep, &m->conn.mpa);
		if (rc < 0)
			tcp_mpa_step_send(fd, &rep);	/* R set: the peer learns why */
	}
	if (rc < 0)
		goto err_proto;
	return 1;

err_proto:
	ferry_info("tcp: MPA %s refused: %s", kind == TCPW_MPA_REQ ? "Request" : "Reply",
		   tcpw_strerror(rc));
	return ERR(EPROTO);
}

int ferry_tcp_mpa_read(struct ferry_tcp_mpa *m, int fd)
{
	enum tcpw_mpa_kind kind = m->initiator ? TCPW_MPA_REP : TCPW_MPA_REQ;
	int rc;

	if (!m->want) {
		rc = tcp_mpa_step_fill(m, fd, TCPW_MPA_HDR_LEN);
		if (rc <= 0)
			return rc;
		rc = tcpw_mpa_frame_len(m->buf, kind, &m->want);
		if (rc < 0 || m->want > sizeof(m->buf)) {
			ferry_info("tcp: MPA %s refused: %s",
				   kind == TCPW_MPA_REQ ? "Request" : "Reply",
				   rc < 0 ? tcpw_strerror(rc) : "too long");
			return ERR(EPROTO);
		}
	}
	rc = tcp_mpa_step_fill(m, fd, m->want);
	if (rc <= 0)
		return rc;
	return tcp_mpa_step_done(m, fd);
}

const uint8_t *ferry_tcp_mpa_pdata(const struct ferry_tcp_mpa *m, size_t *len_p)
{
	*len_p = m->peer.pd ? m->ulp_pd_len : 0;
	return *len_p ? m->peer.pd : NULL;
}

int ferry_tcp_mpa_send_reply(struct ferry_tcp_mpa *m, int fd, const void *pd, size_t len,
			     bool reject)
{
	uint8_t out[TCP_PD_LEN + FERRY_TCP_CM_PDATA_MAX];
	struct tcpw_mpa_frame rep;
	uint16_t out_len;

	if (m->initiator || !m->want || len > FERRY_TCP_CM_PDATA_MAX || (len && !pd))
		return ERR(EINVAL);
	out_len = tcp_mpa_step_pd(m, pd, len, out);
	if (reject)
		tcpw_mpa_reject(&m->peer, out, out_len, &rep);
	else if (tcpw_mpa_answer(&m->peer, &m->local, out, out_len, &rep, &m->conn.mpa) < 0)
		return ERR(EPROTO);	/* checked as the Request came in: cannot be */
	return tcp_mpa_step_send(fd, &rep);
}

int ferry_tcp_mpa_attach(struct ferry_tcp_mpa *m, struct ferry_qp *qp, int fd)
{
	return ferry_tcp_qp_attach(qp, fd, &m->conn);
}
