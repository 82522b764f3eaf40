/*
 * cmtest.c - helpers of the CM suites (see cmtest.h).
 */
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmtest.h"
#include "testutil.h"

#define CMT_FAIL(...) do { \
	fprintf(stderr, "cmtest: %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); \
	fputc('\n', stderr); \
	return -1; \
	} while (0)

void cmt_addr(struct sockaddr_storage *ss, int family, uint16_t port)
{
	const char *name = getenv(family == AF_INET ? "FERRY_TEST_ADDR" : "FERRY_TEST_ADDR6");

	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (name && *name && inet_pton(AF_INET, name, &sin->sin_addr) != 1) {
			fprintf(stderr, "cmtest: FERRY_TEST_ADDR=%s is no IPv4 address\n", name);
			abort();
		}
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		sin6->sin6_addr = in6addr_loopback;
		if (name && *name && inet_pton(AF_INET6, name, &sin6->sin6_addr) != 1) {
			fprintf(stderr, "cmtest: FERRY_TEST_ADDR6=%s is no IPv6 address\n", name);
			abort();
		}
	}
}

int cmt_wait(struct ferry_event_channel *ch, enum ferry_cm_event_type want,
	     struct ferry_cm_event **ev_p)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct ferry_cm_event *ev;
	int r;

	do
		r = poll(&pfd, 1, TU_WAIT_MS);
	while (r < 0 && errno == EINTR);
	if (r != 1)
		CMT_FAIL("no event in %d ms (want %s)", TU_WAIT_MS, ferry_event_str(want));
	if (ferry_get_cm_event(ch, &ev) < 0)
		CMT_FAIL("ferry_get_cm_event: %s", strerror(errno));
	if (ev->event != want) {
		fprintf(stderr, "cmtest: got %s (status %d), want %s\n",
			ferry_event_str(ev->event), ev->status, ferry_event_str(want));
		ferry_ack_cm_event(ev);
		return -1;
	}
	*ev_p = ev;
	return 0;
}

bool cmt_pdata_is(const struct ferry_conn_param *p, const void *data, size_t len)
{
	const uint8_t *got = p->private_data;

	if (p->private_data_len < len || (tu_on_shm() && p->private_data_len != len))
		return false;
	if (len && memcmp(got, data, len) != 0)
		return false;
	return tu_all_bytes(got + len, p->private_data_len - len, 0);
}

int cmt_wait_ack(struct ferry_event_channel *ch, enum ferry_cm_event_type want)
{
	struct ferry_cm_event *ev;

	if (cmt_wait(ch, want, &ev) < 0)
		return -1;
	return ferry_ack_cm_event(ev);
}

int cmt_listen(struct cmt_end *l, int family, uint16_t *port_p)
{
	struct sockaddr_storage ss;

	memset(l, 0, sizeof(*l));
	cmt_addr(&ss, family, 0);
	l->ch = ferry_create_event_channel();
	if (!l->ch)
		CMT_FAIL("ferry_create_event_channel: %s", strerror(errno));
	if (ferry_create_id(l->ch, &l->id, l, FERRY_PS_TCP) < 0 ||
	    ferry_bind_addr(l->id, (struct sockaddr *)&ss) < 0 ||
	    ferry_listen(l->id, 16) < 0)
		CMT_FAIL("listener: %s", strerror(errno));
	*port_p = ferry_get_src_port(l->id);
	return 0;
}

int cmt_create_qp(struct ferry_cm_id *id)
{
	struct ferry_qp_init_attr attr = {
		.qp_type = FERRY_QPT_RC,
		.sq_sig_all = 1,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};

	if (ferry_cm_create_qp(id, NULL, &attr) < 0)
		CMT_FAIL("ferry_cm_create_qp: %s", strerror(errno));
	return 0;
}

int cmt_connect(struct cmt_end *c, const struct sockaddr *dst,
		const void *pdata, uint8_t pdata_len)
{
	struct ferry_conn_param param = {
		.private_data = pdata, .private_data_len = pdata_len,
		.responder_resources = 1, .initiator_depth = 1,
		.retry_count = 7, .rnr_retry_count = 7,
	};

	memset(c, 0, sizeof(*c));
	c->ch = ferry_create_event_channel();
	if (!c->ch || ferry_create_id(c->ch, &c->id, c, FERRY_PS_TCP) < 0)
		CMT_FAIL("client id: %s", strerror(errno));
	if (ferry_resolve_addr(c->id, NULL, (struct sockaddr *)dst, 2000) < 0 ||
	    cmt_wait_ack(c->ch, FERRY_CM_EVENT_ADDR_RESOLVED) < 0)
		CMT_FAIL("resolve_addr");
	if (ferry_resolve_route(c->id, 2000) < 0 ||
	    cmt_wait_ack(c->ch, FERRY_CM_EVENT_ROUTE_RESOLVED) < 0)
		CMT_FAIL("resolve_route");
	if (cmt_create_qp(c->id) < 0)
		return -1;
	if (ferry_connect(c->id, &param) < 0)
		CMT_FAIL("ferry_connect: %s", strerror(errno));
	return 0;
}

int cmt_reg_buf(struct cmt_end *e, size_t len)
{
	e->buf = ferry_alloc(len);
	if (!e->buf)
		CMT_FAIL("ferry_alloc: %s", strerror(errno));
	memset(e->buf, 0, len);
	e->len = len;
	e->mr = ferry_reg_mr(e->id->pd, e->buf, len, TU_ACCESS_ALL);
	if (!e->mr)
		CMT_FAIL("ferry_reg_mr: %s", strerror(errno));
	return 0;
}

int cmt_accept(struct cmt_end *l, struct cmt_end *s)
{
	struct ferry_conn_param param = {
		.responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7,
	};
	struct ferry_cm_event *ev;
	struct cmt_remote remote;

	memset(s, 0, sizeof(*s));
	if (cmt_wait(l->ch, FERRY_CM_EVENT_CONNECT_REQUEST, &ev) < 0)
		return -1;
	s->id = ev->id;
	if (ev->listen_id != l->id || s->id->context != l)
		CMT_FAIL("CONNECT_REQUEST: wrong listen_id or context");
	ferry_ack_cm_event(ev);
	if (cmt_create_qp(s->id) < 0 || cmt_reg_buf(s, 65536) < 0)
		return -1;
	if (tu_post_recv1(s->id->qp, 1, s->buf, 4096, s->mr->lkey) < 0)
		CMT_FAIL("post_recv: %s", strerror(errno));
	remote = (struct cmt_remote){ (uintptr_t)s->buf, s->mr->rkey, CMT_MAGIC };
	param.private_data = &remote;
	param.private_data_len = sizeof(remote);
	if (ferry_accept(s->id, &param) < 0)
		CMT_FAIL("ferry_accept: %s", strerror(errno));
	return cmt_wait_ack(l->ch, FERRY_CM_EVENT_ESTABLISHED);
}

int cmt_data_flow(struct cmt_end *c, struct cmt_end *s, const struct cmt_remote *remote)
{
	struct ferry_wc wc[2];

	if (remote->magic != CMT_MAGIC)
		CMT_FAIL("bad cmt_remote in the private data");
	if (!c->buf && cmt_reg_buf(c, 65536) < 0)
		return -1;
	tu_fill(c->buf, 8192, 7);
	if (tu_post_send1(c->id->qp, 10, FERRY_WR_RDMA_WRITE, 0, c->buf, 4096,
			  c->mr->lkey, remote->addr + 8192, remote->rkey) < 0 ||
	    tu_post_send1(c->id->qp, 11, FERRY_WR_SEND, 0, c->buf + 4096, 4096,
			  c->mr->lkey, 0, 0) < 0)
		CMT_FAIL("post_send: %s", strerror(errno));
	if (tu_child_poll(c->id->send_cq, wc, 2, TU_WAIT_MS) != 2 ||
	    wc[0].status != FERRY_WC_SUCCESS || wc[1].status != FERRY_WC_SUCCESS)
		CMT_FAIL("send completions");
	if (tu_child_poll(s->id->recv_cq, wc, 1, TU_WAIT_MS) != 1 ||
	    wc[0].status != FERRY_WC_SUCCESS || wc[0].byte_len != 4096)
		CMT_FAIL("receive completion");
	if (!tu_check(s->buf + 8192, 4096, 7) || memcmp(s->buf, c->buf + 4096, 4096) != 0)
		CMT_FAIL("data differ");
	return 0;
}

void cmt_close(struct cmt_end *e)
{
	if (e->mr)
		ferry_dereg_mr(e->mr);
	if (e->buf)
		ferry_free(e->buf);
	if (e->id) {
		ferry_cm_destroy_qp(e->id);
		ferry_destroy_id(e->id);
	}
	if (e->ch)
		ferry_destroy_event_channel(e->ch);
	memset(e, 0, sizeof(*e));
}

int cmt_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}
