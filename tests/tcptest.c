/*
 * tcptest.c - helpers of the tcp provider's suite (tcptest.h).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <check.h>
#include <ferry/verbs.h>

#include "tcptest.h"
#include "testutil.h"

void tt_end_open(struct tt_end *e, const struct tt_opts *o)
{
	struct ferry_qp_init_attr attr = {
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 4,
			 .max_recv_sge = 4, .max_inline_data = 256 },
		.qp_type = FERRY_QPT_RC,
	};

	memset(e, 0, sizeof(*e));
	e->ctx = ferry_open_transport("tcp");
	ck_assert_msg(e->ctx, "no tcp device: %s", strerror(errno));
	e->pd = ferry_alloc_pd(e->ctx);
	ck_assert(e->pd);
	if (o->channel) {
		e->ch = ferry_create_comp_channel(e->ctx);
		ck_assert(e->ch);
	}
	e->cq = ferry_create_cq(e->ctx, 1024, NULL, e->ch, 0);
	ck_assert(e->cq);
	e->len = o->buf_len ? o->buf_len : 65536;
	e->buf = aligned_alloc(4096, (e->len + 4095) & ~(size_t)4095);
	ck_assert(e->buf);
	memset(e->buf, 0, e->len);
	e->mr = ferry_reg_mr(e->pd, e->buf, e->len, o->mr_access ? o->mr_access : TU_ACCESS_ALL);
	ck_assert(e->mr);
	attr.send_cq = attr.recv_cq = e->cq;
	e->qp = ferry_create_qp(e->pd, &attr);
	ck_assert(e->qp);
}

void tt_end_close(struct tt_end *e)
{
	if (e->qp)
		ck_assert_int_eq(ferry_destroy_qp(e->qp), 0);
	ck_assert_int_eq(ferry_dereg_mr(e->mr), 0);
	ck_assert_int_eq(ferry_destroy_cq(e->cq), 0);
	if (e->ch)
		ck_assert_int_eq(ferry_destroy_comp_channel(e->ch), 0);
	ck_assert_int_eq(ferry_dealloc_pd(e->pd), 0);
	ck_assert_int_eq(ferry_close_device(e->ctx), 0);
	free(e->buf);
}

void tt_tcp_pair(int *a_p, int *b_p, uint32_t mss)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	int l, a, b, v = (int)mss;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert(l >= 0 && a >= 0);
	/* Set before the handshake, on both: the MSS each side announces. */
	if (mss) {
		ck_assert_int_eq(setsockopt(l, IPPROTO_TCP, TCP_MAXSEG, &v, sizeof(v)), 0);
		ck_assert_int_eq(setsockopt(a, IPPROTO_TCP, TCP_MAXSEG, &v, sizeof(v)), 0);
	}
	ck_assert_int_eq(bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(listen(l, 1), 0);
	ck_assert_int_eq(getsockname(l, (struct sockaddr *)&sin, &len), 0);
	ck_assert_int_eq(connect(a, (struct sockaddr *)&sin, sizeof(sin)), 0);
	b = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	ck_assert(b >= 0);
	close(l);
	*a_p = a;
	*b_p = b;
}

void tt_join(struct tt_end *e, int fd, const struct tcp_attach *conn, const struct tt_opts *o)
{
	socklen_t len = sizeof(e->mss);

	ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &e->mss, &len), 0);
	ck_assert_int_eq(tu_qp_to_init(e->qp, TU_QP_ACCESS_ALL), 0);
	ck_assert_msg(ferry_tcp_qp_attach(e->qp, fd, conn) == 0, "attach: %s", strerror(errno));
	ck_assert_int_eq(tu_qp_to_rtr(e->qp, 0, o->min_rnr_timer), 0);
	ck_assert_int_eq(tu_qp_to_rts(e->qp, o->rnr_retry), 0);
}

void tt_pair(struct tt_end *a, struct tt_end *b, const struct tt_opts *o)
{
	struct tcpw_mpa_local local;
	struct tcp_attach ca, cb;
	struct tt_opts ob = *o;
	int fa, fb;

	tt_end_open(a, o);
	tt_end_open(b, o);
	tt_tcp_pair(&fa, &fb, o->mss);
	ferry_tcp_mpa_local_default(&local);
	local.want_crc = !o->no_crc;
	/* Sequential in one thread: each frame fits the socket buffers. */
	ck_assert_int_eq(ferry_tcp_mpa_request(fa, &local, o->rnr_retry), 0);
	ck_assert_int_eq(ferry_tcp_mpa_respond(fb, &local, 7, &cb), 0);
	ck_assert_int_eq(ferry_tcp_mpa_finish(fa, &local, o->rnr_retry, &ca), 0);
	ck_assert_int_eq(ca.mpa.crc, !o->no_crc);
	ck_assert_int_eq(cb.mpa.crc, !o->no_crc);
	ck_assert(ca.rfc7306 && cb.rfc7306);
	ck_assert_int_eq(cb.peer_rnr_retry, o->rnr_retry);
	if (o->no_rfc7306)
		ca.rfc7306 = cb.rfc7306 = ca.fence_reads = cb.fence_reads = false;
	ob.rnr_retry = 7;
	tt_join(a, fa, &ca, o);
	tt_join(b, fb, &cb, &ob);
}

void tt_pair_close(struct tt_end *a, struct tt_end *b)
{
	tt_end_close(a);
	tt_end_close(b);
}

/* --- the raw peer --- */

static void tt_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		ck_assert_msg(n > 0, "raw send: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

static void tt_read_all(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, 0);

		ck_assert_msg(n > 0, "raw recv: %s", n ? strerror(errno) : "EOF");
		p += n;
		len -= (size_t)n;
	}
}

/* The Responder's side of MPA, by hand; with no private data for a stranger. */
static bool tt_raw_answer(int fd, bool ferry_pd)
{
	struct tcpw_mpa_frame req, rep;
	struct tcpw_mpa_params params;
	struct tcpw_mpa_local local;
	struct tcp_attach conn;
	uint8_t buf[TCPW_MPA_HDR_LEN + TCPW_MPA_PD_MAX];
	size_t len;

	ferry_tcp_mpa_local_default(&local);
	if (ferry_pd) {
		ck_assert_int_eq(ferry_tcp_mpa_respond(fd, &local, 7, &conn), 0);
		return conn.mpa.crc;
	}
	tt_read_all(fd, buf, TCPW_MPA_HDR_LEN);
	ck_assert_int_eq(tcpw_mpa_frame_len(buf, TCPW_MPA_REQ, &len), 0);
	tt_read_all(fd, buf + TCPW_MPA_HDR_LEN, len - TCPW_MPA_HDR_LEN);
	ck_assert_int_eq(tcpw_mpa_decode(buf, len, TCPW_MPA_REQ, &req), 0);
	ck_assert_int_eq(tcpw_mpa_answer(&req, &local, NULL, 0, &rep, &params), 0);
	ck_assert_int_eq(tcpw_mpa_encode(&rep, buf, sizeof(buf), &len), 0);
	tt_write_all(fd, buf, len);
	return params.crc;
}

void tt_raw_pair(struct tt_end *e, struct tt_raw *r, const struct tt_opts *o, bool ferry_pd)
{
	struct tcpw_mpa_local local;
	struct tcp_attach conn;
	struct tcpw_seg s;
	int fa;

	memset(r, 0, sizeof(*r));
	tt_end_open(e, o);
	tt_tcp_pair(&fa, &r->fd, o->mss);
	ferry_tcp_mpa_local_default(&local);
	ck_assert_int_eq(ferry_tcp_mpa_request(fa, &local, o->rnr_retry), 0);
	r->crc = tt_raw_answer(r->fd, ferry_pd);
	ck_assert_int_eq(ferry_tcp_mpa_finish(fa, &local, o->rnr_retry, &conn), 0);
	ck_assert_int_eq(conn.rfc7306, ferry_pd);
	r->pbuf = malloc(tcpw_fpdu_len(TCPW_ULPDU_MAX));
	ck_assert(r->pbuf);
	ck_assert_int_eq(tcpw_fpdu_parser_init(&r->parser, r->pbuf, tcpw_fpdu_len(TCPW_ULPDU_MAX),
					       TCPW_ULPDU_MAX, r->crc), 0);
	tt_join(e, fa, &conn, o);
	/* The Initiator's first FPDU is its RTR: a zero-length WRITE. */
	ck_assert_int_eq(tt_raw_recv(r, &s), 1);
	ck_assert_int_eq(s.opcode, TCPW_OP_WRITE);
	ck_assert_int_eq(s.payload_len, 0);
}

void tt_raw_close(struct tt_raw *r)
{
	close(r->fd);
	free(r->pbuf);
}

void tt_raw_send(struct tt_raw *r, struct tcpw_seg *s, const void *payload, size_t len,
		 bool corrupt)
{
	static uint8_t out[TCPW_FPDU_LEN_SIZE + TCPW_ULPDU_MAX + 8];
	uint8_t hdr[128];
	size_t hl, fl;

	s->payload_len = len;
	if (!tcpw_op_tagged(s->opcode)) {
		s->qn = tcpw_op_qn(s->opcode);
		if (!s->msn)
			s->msn = ++r->msn[s->qn];
	}
	ck_assert_int_eq(tcpw_seg_encode(s, hdr, sizeof(hdr), &hl), 0);
	ck_assert_int_eq(tcpw_fpdu_build(hdr, hl, payload, len, r->crc, out, sizeof(out), &fl), 0);
	if (corrupt)
		out[fl - 1] ^= 0x01;
	tt_write_all(r->fd, out, fl);
}

int tt_raw_recv(struct tt_raw *r, struct tcpw_seg *s_p)
{
	for (;;) {
		struct pollfd pfd = { .fd = r->fd, .events = POLLIN };
		size_t used;
		ssize_t n;
		int rc;

		while (r->in_off < r->in_len) {
			rc = tcpw_fpdu_parser_feed(&r->parser, r->in + r->in_off,
						   r->in_len - r->in_off, &used, &r->last);
			r->in_off += used;
			if (rc < 0)
				return -1;
			if (rc == 1)
				return tcpw_seg_decode(r->last.ulpdu, r->last.ulpdu_len, s_p) < 0 ?
				       -1 : 1;
		}
		if (poll(&pfd, 1, TU_WAIT_MS) != 1)
			return -1;
		n = recv(r->fd, r->in, sizeof(r->in), 0);
		if (n <= 0)
			return n == 0 ? 0 : -1;
		r->in_len = (size_t)n;
		r->in_off = 0;
	}
}

int tt_raw_wait_term(struct tt_raw *r, struct tcpw_term_code *code_p)
{
	struct tcpw_seg s;

	while (tt_raw_recv(r, &s) == 1) {
		if (s.opcode == TCPW_OP_TERMINATE) {
			*code_p = (struct tcpw_term_code){ s.u.term.layer, s.u.term.etype,
							   s.u.term.ecode };
			return 1;
		}
	}
	return 0;
}

bool tt_raw_wait_eof(struct tt_raw *r)
{
	struct tcpw_seg s;
	int rc;

	while ((rc = tt_raw_recv(r, &s)) == 1)
		;
	return rc == 0;
}
