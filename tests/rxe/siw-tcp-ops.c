/*
 * siw-tcp-ops.c - what ferry's tcp transport must refuse towards the
 * kernel's siw, checked against siw itself: connected over FERRY_TRANSPORT=
 * tcp to an rping server on siw0, it posts WRITE_WITH_IMM, SEND_WITH_IMM
 * and both atomics (siw has no RFC 7306: it would answer them with a
 * Terminate) and wants each refused at post time with EOPNOTSUPP, nothing
 * sent.  Then it shows the QP untouched: rping's first step, a SEND
 * advertising a buffer that rping READs (siw reads our memory, and prints
 * what it read with -v) and the SEND that acknowledges it.
 *
 *   siw-tcp-ops ADDR PORT        (tests/rxe/interop-siw-tcp.sh runs it)
 *
 * Exit status 0 when all held, 1 otherwise; it says which check failed.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ferry/cm.h>
#include <ferry/verbs.h>

#define OPS_BUF_LEN	64
#define OPS_ADVERT_LEN	16	/* rping's struct rping_rdma_info */
#define OPS_WAIT_MS	20000

/* What rping prints of the buffer it READs from us ("server ping data"). */
static const char ops_data[] = "siw-tcp-ops: read by siw";

struct ops_conn {
	struct ferry_cm_id *id;
	uint8_t *buf;			/* [0, 64): advertised; [64, 80): advert; [80, 96): recv */
	struct ferry_mr *mr;
};

static int ops_fail(const char *what)
{
	fprintf(stderr, "siw-tcp-ops: FAIL: %s: %s\n", what, strerror(errno));
	return -1;
}

static int ops_connect(struct ops_conn *c, const char *addr, int port)
{
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct ferry_qp_init_attr attr = { .qp_type = FERRY_QPT_RC };
	struct ferry_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					  .retry_count = 7, .rnr_retry_count = 7 };

	if (inet_pton(AF_INET, addr, &dst.sin_addr) != 1)
		return errno = EINVAL, ops_fail("the address");
	if (ferry_create_id(NULL, &c->id, NULL, FERRY_PS_TCP))
		return ops_fail("ferry_create_id");
	if (ferry_resolve_addr(c->id, NULL, (struct sockaddr *)&dst, OPS_WAIT_MS) ||
	    ferry_resolve_route(c->id, OPS_WAIT_MS))
		return ops_fail("resolving the address");
	attr.cap = (struct ferry_qp_cap){ .max_send_wr = 8, .max_recv_wr = 2,
					  .max_send_sge = 1, .max_recv_sge = 1 };
	if (ferry_cm_create_qp(c->id, NULL, &attr))
		return ops_fail("ferry_cm_create_qp");
	c->buf = calloc(1, 128);
	if (!c->buf)
		return ops_fail("calloc");
	c->mr = ferry_reg_mr(c->id->pd, c->buf, 128, FERRY_ACCESS_LOCAL_WRITE |
			     FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
	if (!c->mr)
		return ops_fail("ferry_reg_mr");
	if (ferry_connect(c->id, &param))
		return ops_fail("ferry_connect to rping -s");
	return 0;
}

/* Post one WR of @opcode; 0 when it was refused with EOPNOTSUPP. */
static int ops_refused(struct ops_conn *c, enum ferry_wr_opcode opcode, const char *name)
{
	struct ferry_sge sge = { .addr = (uintptr_t)c->buf, .length = 8, .lkey = c->mr->lkey };
	struct ferry_send_wr wr = { .wr_id = opcode, .sg_list = &sge, .num_sge = 1,
				    .opcode = opcode, .send_flags = FERRY_SEND_SIGNALED,
				    .imm_data = htonl(7) }, *bad = NULL;

	/* rping's buffers are not ours to name: our own will do, no WR leaves. */
	wr.wr.rdma.remote_addr = (uintptr_t)c->buf;
	wr.wr.rdma.rkey = c->mr->rkey;
	if (opcode == FERRY_WR_ATOMIC_CMP_AND_SWP || opcode == FERRY_WR_ATOMIC_FETCH_AND_ADD)
		wr.wr.atomic = (typeof(wr.wr.atomic)){ .remote_addr = (uintptr_t)c->buf,
						       .compare_add = 1, .rkey = c->mr->rkey };
	if (ferry_post_send(c->id->qp, &wr, &bad) == 0) {
		fprintf(stderr, "siw-tcp-ops: FAIL: %s towards siw was taken\n", name);
		return -1;
	}
	if (errno != EOPNOTSUPP || bad != &wr) {
		fprintf(stderr, "siw-tcp-ops: FAIL: %s: %s, not EOPNOTSUPP\n", name,
			strerror(errno));
		return -1;
	}
	printf("siw-tcp-ops: %s towards siw: refused at post time (EOPNOTSUPP)\n", name);
	return 0;
}

/* Wait for the completion of @wr_id on @cq. */
static int ops_wait(struct ferry_cq *cq, uint64_t wr_id, const char *what)
{
	struct timespec pause = { 0, 1000000 };
	struct ferry_wc wc;
	int i, n;

	for (i = 0; i < OPS_WAIT_MS; i++) {
		n = ferry_poll_cq(cq, 1, &wc);
		if (n < 0)
			return ops_fail("ferry_poll_cq");
		if (n == 1 && (wc.wr_id != wr_id || wc.status != FERRY_WC_SUCCESS)) {
			fprintf(stderr, "siw-tcp-ops: FAIL: %s: completion %llu, %s\n", what,
				(unsigned long long)wc.wr_id, ferry_wc_status_str(wc.status));
			return -1;
		}
		if (n == 1)
			return 0;
		nanosleep(&pause, NULL);
	}
	errno = ETIMEDOUT;
	return ops_fail(what);
}

/* rping's first step: advertise our buffer; siw READs it, then SENDs. */
static int ops_still_works(struct ops_conn *c)
{
	struct ferry_sge rsge = { .addr = (uintptr_t)c->buf + 80, .length = OPS_ADVERT_LEN,
				  .lkey = c->mr->lkey };
	struct ferry_sge ssge = { .addr = (uintptr_t)c->buf + 64, .length = OPS_ADVERT_LEN,
				  .lkey = c->mr->lkey };
	struct ferry_recv_wr rwr = { .wr_id = 100, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	struct ferry_send_wr swr = { .wr_id = 101, .sg_list = &ssge, .num_sge = 1,
				     .opcode = FERRY_WR_SEND, .send_flags = FERRY_SEND_SIGNALED },
			     *sbad;
	uint64_t addr = htobe64((uintptr_t)c->buf);
	uint32_t rkey = htonl(c->mr->rkey), size = htonl(OPS_BUF_LEN);

	memcpy(c->buf, ops_data, sizeof(ops_data));
	memcpy(c->buf + 64, &addr, 8);
	memcpy(c->buf + 72, &rkey, 4);
	memcpy(c->buf + 76, &size, 4);
	if (ferry_post_recv(c->id->qp, &rwr, &rbad) || ferry_post_send(c->id->qp, &swr, &sbad))
		return ops_fail("posting rping's buffer advertisement");
	if (ops_wait(c->id->send_cq, 101, "the SEND of the advertisement") ||
	    ops_wait(c->id->recv_cq, 100, "rping's SEND after its READ"))
		return -1;
	printf("siw-tcp-ops: then a SEND, siw's READ of our buffer and siw's SEND: completed\n");
	return 0;
}

int main(int argc, char **argv)
{
	struct ops_conn c = { 0 };
	int rc = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: siw-tcp-ops ADDR PORT\n");
		return 2;
	}
	if (ops_connect(&c, argv[1], atoi(argv[2])) == 0 &&
	    ops_refused(&c, FERRY_WR_RDMA_WRITE_WITH_IMM, "WRITE_WITH_IMM") == 0 &&
	    ops_refused(&c, FERRY_WR_SEND_WITH_IMM, "SEND_WITH_IMM") == 0 &&
	    ops_refused(&c, FERRY_WR_ATOMIC_CMP_AND_SWP, "ATOMIC_CMP_AND_SWP") == 0 &&
	    ops_refused(&c, FERRY_WR_ATOMIC_FETCH_AND_ADD, "ATOMIC_FETCH_AND_ADD") == 0 &&
	    ops_still_works(&c) == 0)
		rc = 0;
	if (c.id && c.id->qp)
		ferry_disconnect(c.id);
	if (c.mr)
		ferry_dereg_mr(c.mr);
	if (c.id) {
		ferry_cm_destroy_qp(c.id);
		ferry_destroy_id(c.id);
	}
	free(c.buf);
	return rc;
}
