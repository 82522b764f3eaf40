/*
 * tcp_mpa.c - the MPA Request/Reply exchange (RFC 5044 s7, RFC 6581) on
 * a connected socket, with the codec's frames and rules, and ferry's own
 * private data behind the ULP's: a version, capabilities (RFC 7306
 * opcodes), the sender's rnr_retry (tcp-internal.h says why the receiver
 * needs it), a magic.  A peer without it (siw) gets none of ferry's
 * extensions.
 *
 * Blocking, with a deadline per exchange (TCP_MPA_TIMEOUT_MS, siw's 10 s
 * for the Initiator): for tests and the CM's own threads.  Every read
 * takes exactly the frame's bytes, never one past it: what follows is the
 * peer's first FPDU and belongs to the QP.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp-internal.h"

#define TCP_MPA_TIMEOUT_MS	10000
#define TCP_MPA_MAX		(TCPW_MPA_HDR_LEN + TCPW_MPA_PD_MAX)

void ferry_tcp_mpa_local_default(struct tcpw_mpa_local *local_p)
{
	*local_p = (struct tcpw_mpa_local){
		.want_crc = true,
		.ird = TCP_MAX_RD,
		.ord = TCP_MAX_RD,
		.p2p = true,
		.rtr = TCPW_RTR_WRITE | TCPW_RTR_READ,
	};
}

void tcp_mpa_pd_put(uint8_t out[TCP_PD_LEN], uint8_t rnr_retry)
{
	out[0] = 1;
	out[1] = TCP_CAP_RFC7306;
	out[2] = rnr_retry > 7 ? 7 : rnr_retry;
	out[3] = 0;
	tcpw_put32(out + 4, TCP_PD_MAGIC);
}

size_t tcp_mpa_pd_peer(const uint8_t *pd, size_t len, struct tcp_attach *conn)
{
	const uint8_t *ours = len >= TCP_PD_LEN ? pd + len - TCP_PD_LEN : NULL;

	conn->rfc7306 = conn->fence_reads = false;
	conn->peer_rnr_retry = 7;
	if (!ours || tcpw_get32(ours + 4) != TCP_PD_MAGIC || ours[0] < 1) {
		ferry_debug("tcp: the peer is not ferry (no ferry private data): "
			    "no RFC 7306 opcodes, no READ fences");
		return len;
	}
	conn->fence_reads = true;
	conn->rfc7306 = ours[1] & TCP_CAP_RFC7306;
	conn->peer_rnr_retry = ours[2] > 7 ? 7 : ours[2];
	return len - TCP_PD_LEN;
}

static int tcp_mpa_io(int fd, void *buf, size_t len, bool out, int timeout_ms)
{
	size_t done = 0;

	while (done < len) {
		struct pollfd pfd = { .fd = fd, .events = out ? POLLOUT : POLLIN };
		ssize_t n;
		int rc = poll(&pfd, 1, timeout_ms);

		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			return -1;
		if (rc == 0)
			return ERR(ETIMEDOUT);
		if (out)
			n = send(fd, (uint8_t *)buf + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
		else
			n = recv(fd, (uint8_t *)buf + done, len - done, MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return ERR(ECONNRESET);
		done += (size_t)n;
	}
	return 0;
}

static int tcp_mpa_send(int fd, const struct tcpw_mpa_frame *f)
{
	uint8_t buf[TCP_MPA_MAX];
	size_t len;

	if (tcpw_mpa_encode(f, buf, sizeof(buf), &len) < 0)
		return ERR(EINVAL);
	return tcp_mpa_io(fd, buf, len, true, TCP_MPA_TIMEOUT_MS);
}

/* Read one frame of @kind into @buf and decode it. */
static int tcp_mpa_recv(int fd, enum tcpw_mpa_kind kind, uint8_t buf[TCP_MPA_MAX],
			struct tcpw_mpa_frame *f_p)
{
	size_t len;
	int rc;

	if (tcp_mpa_io(fd, buf, TCPW_MPA_HDR_LEN, false, TCP_MPA_TIMEOUT_MS) < 0)
		return -1;
	rc = tcpw_mpa_frame_len(buf, kind, &len);
	if (rc == 0 && len > TCPW_MPA_HDR_LEN &&
	    tcp_mpa_io(fd, buf + TCPW_MPA_HDR_LEN, len - TCPW_MPA_HDR_LEN, false,
		       TCP_MPA_TIMEOUT_MS) < 0)
		return -1;
	if (rc == 0)
		rc = tcpw_mpa_decode(buf, len, kind, f_p);
	if (rc < 0) {
		ferry_info("tcp: MPA %s refused: %s", kind == TCPW_MPA_REQ ? "Request" : "Reply",
			   tcpw_strerror(rc));
		return ERR(EPROTO);
	}
	return 0;
}

int ferry_tcp_mpa_request(int fd, const struct tcpw_mpa_local *local, uint8_t rnr_retry)
{
	struct tcpw_mpa_frame req;
	uint8_t pd[TCP_PD_LEN];

	tcp_mpa_pd_put(pd, rnr_retry);
	tcpw_mpa_request(local, pd, sizeof(pd), &req);
	return tcp_mpa_send(fd, &req);
}

int ferry_tcp_mpa_respond(int fd, const struct tcpw_mpa_local *local, uint8_t rnr_retry,
			  struct tcp_attach *conn_p)
{
	struct tcpw_mpa_frame req, rep;
	struct tcpw_mpa_params params;
	uint8_t buf[TCP_MPA_MAX], pd[TCP_PD_LEN];
	int rc;

	if (tcp_mpa_recv(fd, TCPW_MPA_REQ, buf, &req) < 0)
		return -1;
	tcp_mpa_pd_put(pd, rnr_retry);
	rc = tcpw_mpa_answer(&req, local, pd, sizeof(pd), &rep, &params);
	if (tcp_mpa_send(fd, &rep) < 0)
		return -1;
	if (rc < 0) {
		ferry_info("tcp: MPA Request rejected: %s", tcpw_strerror(rc));
		return ERR(ECONNREFUSED);
	}
	memset(conn_p, 0, sizeof(*conn_p));
	conn_p->mpa = params;
	conn_p->initiator = false;
	tcp_mpa_pd_peer(req.pd, req.pd_len, conn_p);
	return 0;
}

int ferry_tcp_mpa_finish(int fd, const struct tcpw_mpa_local *local, uint8_t rnr_retry,
			 struct tcp_attach *conn_p)
{
	struct tcpw_mpa_frame req, rep;
	struct tcpw_mpa_params params;
	uint8_t buf[TCP_MPA_MAX], pd[TCP_PD_LEN];
	int rc;

	if (tcp_mpa_recv(fd, TCPW_MPA_REP, buf, &rep) < 0)
		return -1;
	tcp_mpa_pd_put(pd, rnr_retry);
	tcpw_mpa_request(local, pd, sizeof(pd), &req);	/* what we sent */
	rc = tcpw_mpa_check_reply(&req, &rep, &params);
	if (rc < 0) {
		ferry_info("tcp: MPA Reply refused: %s", tcpw_strerror(rc));
		return ERR(rc == TCPW_ERR_MPA_REJECTED ? ECONNREFUSED : EPROTO);
	}
	memset(conn_p, 0, sizeof(*conn_p));
	conn_p->mpa = params;
	conn_p->initiator = true;
	tcp_mpa_pd_peer(rep.pd, rep.pd_len, conn_p);
	return 0;
}
