/*
 * cmtest.h - helpers of the CM suites (check_cm.c, check_cm_robust.c):
 * the test addresses, bounded event waits (through poll() on the
 * channel's fd), listeners, clients and servers in the usual sequence,
 * a registered buffer on an id's PD, and fd counting.
 *
 * They return 0 / -1 and print why on stderr instead of asserting, so that
 * forked children can use them too; tests wrap them in ck_assert.
 */
#ifndef FERRY_CMTEST_H
#define FERRY_CMTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ferry/cm.h>

/* One CM end: its channel (NULL for a synchronous id), id, buffer. */
struct cmt_end {
	struct ferry_event_channel *ch;
	struct ferry_cm_id *id;
	char *buf;		/* ferry_alloc'ed, registered on id->pd */
	size_t len;
	struct ferry_mr *mr;
};

/* What a server tells its client in ACCEPT's private data. */
struct cmt_remote {
	uint64_t addr;
	uint32_t rkey;
	uint32_t magic;
};

#define CMT_MAGIC 0xfe77e123u

/*
 * cmt_addr - the address of this host the CM suites use, with @port:
 * 127.0.0.1 or ::1, unless FERRY_TEST_ADDR (IPv4) or FERRY_TEST_ADDR6
 * (IPv6) names another.  rdma_cm cannot route loopback through an RDMA
 * device, so runs on verbs (tests/rxe/check-rxe.sh) set them to the
 * addresses of the Soft-RoCE interface.
 */
void cmt_addr(struct sockaddr_storage *ss, int family, uint16_t port);
/*
 * cmt_wait - wait (poll on ch->fd, bounded) for the next event; 0 if it is
 * @want (then *ev_p holds it, unacked), else -1 (the event is acked).
 */
int cmt_wait(struct ferry_event_channel *ch, enum ferry_cm_event_type want,
	     struct ferry_cm_event **ev_p);
/*
 * cmt_pdata_is - are @p's private data @len bytes equal to @data?  On
 * shm exactly.  rdma_cm over IB and RoCE delivers the whole fixed-size
 * field of the CM message ("may be larger than that requested",
 * rdma_connect(3)): on verbs longer is right when the rest is zero.
 */
bool cmt_pdata_is(const struct ferry_conn_param *p, const void *data, size_t len);
/* Wait for @want and ack it. */
int cmt_wait_ack(struct ferry_event_channel *ch, enum ferry_cm_event_type want);
/* A listener with its own channel on the loopback of @family, port 0. */
int cmt_listen(struct cmt_end *l, int family, uint16_t *port_p);
/* RC QP with 16 WRs each way on the id's own PD and CQs. */
int cmt_create_qp(struct ferry_cm_id *id);
/* Channel, id, resolve, route, QP, connect; does not wait for the answer. */
int cmt_connect(struct cmt_end *c, const struct sockaddr *dst,
		const void *pdata, uint8_t pdata_len);
/*
 * cmt_accept - wait for a CONNECT_REQUEST on @l, give the new id a QP and
 * a registered buffer with a receive posted, accept it with a cmt_remote
 * as private data, and wait for ESTABLISHED.  @s->ch stays NULL (the new
 * id shares l->ch).
 */
int cmt_accept(struct cmt_end *l, struct cmt_end *s);
/* ferry_alloc + ferry_reg_mr of @len bytes on the id's PD. */
int cmt_reg_buf(struct cmt_end *e, size_t len);
/*
 * cmt_data_flow - from established client @c to server @s (whose cmt_remote
 * came in ESTABLISHED's private data @remote): RDMA WRITE then SEND;
 * check what arrived.
 */
int cmt_data_flow(struct cmt_end *c, struct cmt_end *s, const struct cmt_remote *remote);
/* Deregister, destroy QP and id, then the channel if any. */
void cmt_close(struct cmt_end *e);
/* Open descriptors of this process. */
int cmt_count_fds(void);

#endif /* FERRY_CMTEST_H */
