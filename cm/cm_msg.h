/*
 * cm_msg.h - the handshake messages of the shm transport of the CM.
 *
 * One message per SOCK_SEQPACKET record, all integers big-endian:
 *
 *   0  magic u32 "FCM1"   4 version u8 (1)   5 type u8   6 pdata_len u8
 *   7  reserved u8 (0)    8 body (fixed size per type)   then pdata
 *
 *   CONNECT_REQ  body 48: src address (20), dst address (20), params (8)
 *   ACCEPT       body 8:  params
 *   REJECT       body 0
 *
 *   address: family u8 (4 or 6), reserved u8, port u16, addr[16] (an IPv4
 *            address fills the first 4 bytes; the other 12 are zero)
 *   params:  responder_resources, initiator_depth, flow_control (0/1),
 *            retry_count (0..7), rnr_retry_count (0..7), then 3 zero bytes
 *
 * The parser is strict: the record length must be exactly header + body +
 * pdata_len; every reserved byte zero; every value in range; pdata_len
 * within the type's limit.  So a message that parses encodes back to the
 * very same bytes (the fuzz target checks this).
 */
#ifndef FERRY_CM_MSG_H
#define FERRY_CM_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#define CM_MSG_MAGIC		0x46434d31u	/* "FCM1" */
#define CM_MSG_VERSION		1u
#define CM_MSG_HEADER_SIZE	8u
#define CM_MSG_ADDR_SIZE	20u
#define CM_MSG_PARAM_SIZE	8u
#define CM_MSG_PDATA_MAX	196u	/* the largest limit, ACCEPT's */
/* No valid message is longer: receive buffers are one byte larger. */
#define CM_MSG_MAX_SIZE	(CM_MSG_HEADER_SIZE + 2 * CM_MSG_ADDR_SIZE + \
			 CM_MSG_PARAM_SIZE + CM_MSG_PDATA_MAX)

enum cm_msg_type {
	CM_MSG_CONNECT_REQ = 1,	/* client -> listener */
	CM_MSG_ACCEPT = 2,	/* listener -> client, then the QP exchange */
	CM_MSG_REJECT = 3,	/* listener -> client, then close */
};

/* Connection parameters that travel (struct ferry_conn_param's subset). */
struct cm_msg_param {
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t flow_control;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
};

/* A message, decoded. */
struct cm_msg {
	enum cm_msg_type type;
	struct sockaddr_storage src;	/* CONNECT_REQ: AF_INET or AF_INET6 */
	struct sockaddr_storage dst;	/* CONNECT_REQ */
	struct cm_msg_param param;	/* CONNECT_REQ, ACCEPT */
	uint8_t pdata_len;
	uint8_t pdata[CM_MSG_PDATA_MAX];
};

/* Private data limit of a message type (0 for an unknown type). */
size_t cm_msg_pdata_max(enum cm_msg_type type);

/*
 * cm_msg_encode - write @msg into @buf (@len bytes).  Returns the encoded
 * length, or -1 with errno EINVAL (bad type, address family or value) or
 * EMSGSIZE (@buf too small).
 */
ssize_t cm_msg_encode(const struct cm_msg *msg, void *buf, size_t len);

/*
 * cm_msg_parse - decode and validate one received record.  Fills *msg_p
 * and returns 0, or returns -1 with errno EBADMSG; *msg_p is then
 * unspecified.
 */
int cm_msg_parse(const void *buf, size_t len, struct cm_msg *msg_p);

const char *cm_msg_type_str(enum cm_msg_type type);

#endif /* FERRY_CM_MSG_H */
