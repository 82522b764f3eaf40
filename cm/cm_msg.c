/*
 * cm_msg.c - encoding and strict parsing of the CM handshake messages
 * (format in cm_msg.h).  Nothing here trusts the peer: every byte of a
 * received record is accounted for before anything is used.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>

#include "cm_msg.h"

#define CM_MSG_FAMILY_IPV4	4
#define CM_MSG_FAMILY_IPV6	6
#define CM_MSG_MAX_RETRY	7

/* Private data limits, as rdma_cm's on InfiniBand (see <ferry/cm.h>). */
size_t cm_msg_pdata_max(enum cm_msg_type type)
{
	switch (type) {
	case CM_MSG_CONNECT_REQ:
		return 56;
	case CM_MSG_ACCEPT:
		return 196;
	case CM_MSG_REJECT:
		return 148;
	}
	return 0;
}

static size_t cm_msg_body_size(enum cm_msg_type type)
{
	switch (type) {
	case CM_MSG_CONNECT_REQ:
		return 2 * CM_MSG_ADDR_SIZE + CM_MSG_PARAM_SIZE;
	case CM_MSG_ACCEPT:
		return CM_MSG_PARAM_SIZE;
	case CM_MSG_REJECT:
		return 0;
	}
	return 0;
}

const char *cm_msg_type_str(enum cm_msg_type type)
{
	switch (type) {
	case CM_MSG_CONNECT_REQ:
		return "CONNECT_REQ";
	case CM_MSG_ACCEPT:
		return "ACCEPT";
	case CM_MSG_REJECT:
		return "REJECT";
	}
	return "unknown";
}

static void cm_put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void cm_put_be32(uint8_t *p, uint32_t v)
{
	cm_put_be16(p, (uint16_t)(v >> 16));
	cm_put_be16(p + 2, (uint16_t)v);
}

static uint16_t cm_get_be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t cm_get_be32(const uint8_t *p)
{
	return (uint32_t)cm_get_be16(p) << 16 | cm_get_be16(p + 2);
}


static bool cm_all_zero(const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* --- encoding --- */

static int cm_addr_encode(const struct sockaddr_storage *ss, uint8_t *p)
{
	memset(p, 0, CM_MSG_ADDR_SIZE);
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;

		p[0] = CM_MSG_FAMILY_IPV4;
		cm_put_be16(p + 2, ntohs(sin->sin_port));
		memcpy(p + 4, &sin->sin_addr, 4);
		return 0;
	}
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;

		p[0] = CM_MSG_FAMILY_IPV6;
		cm_put_be16(p + 2, ntohs(sin6->sin6_port));
		memcpy(p + 4, &sin6->sin6_addr, 16);
		return 0;
	}
	errno = EINVAL;
	return -1;
}

static bool cm_param_valid(const struct cm_msg_param *prm)
{
	return prm->flow_control <= 1 && prm->retry_count <= CM_MSG_MAX_RETRY &&
	       prm->rnr_retry_count <= CM_MSG_MAX_RETRY;
}

static void cm_param_encode(const struct cm_msg_param *prm, uint8_t *p)
{
	memset(p, 0, CM_MSG_PARAM_SIZE);
	p[0] = prm->responder_resources;
	p[1] = prm->initiator_depth;
	p[2] = prm->flow_control;
	p[3] = prm->retry_count;
	p[4] = prm->rnr_retry_count;
}

ssize_t cm_msg_encode(const struct cm_msg *msg, void *buf, size_t len)
{
	size_t body = cm_msg_body_size(msg->type);
	size_t total = CM_MSG_HEADER_SIZE + body + msg->pdata_len;
	uint8_t *p = buf;

	if (!cm_msg_pdata_max(msg->type) || msg->pdata_len > cm_msg_pdata_max(msg->type)) {
		errno = EINVAL;
		return -1;
	}
	if (total > len) {
		errno = EMSGSIZE;
		return -1;
	}
	cm_put_be32(p, CM_MSG_MAGIC);
	p[4] = CM_MSG_VERSION;
	p[5] = (uint8_t)msg->type;
	p[6] = msg->pdata_len;
	p[7] = 0;
	p += CM_MSG_HEADER_SIZE;
	if (msg->type == CM_MSG_CONNECT_REQ) {
		if (cm_addr_encode(&msg->src, p) < 0 ||
		    cm_addr_encode(&msg->dst, p + CM_MSG_ADDR_SIZE) < 0)
			return -1;
		p += 2 * CM_MSG_ADDR_SIZE;
	}
	if (msg->type != CM_MSG_REJECT) {
		if (!cm_param_valid(&msg->param)) {
			errno = EINVAL;
			return -1;
		}
		cm_param_encode(&msg->param, p);
		p += CM_MSG_PARAM_SIZE;
	}
	memcpy(p, msg->pdata, msg->pdata_len);
	return (ssize_t)total;
}

/* --- parsing --- */

static int cm_addr_parse(const uint8_t *p, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (p[1] != 0)
		return -1;
	if (p[0] == CM_MSG_FAMILY_IPV4) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		if (!cm_all_zero(p + 8, 12))
			return -1;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(cm_get_be16(p + 2));
		memcpy(&sin->sin_addr, p + 4, 4);
		return 0;
	}
	if (p[0] == CM_MSG_FAMILY_IPV6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(cm_get_be16(p + 2));
		memcpy(&sin6->sin6_addr, p + 4, 16);
		return 0;
	}
	return -1;
}

static int cm_param_parse(const uint8_t *p, struct cm_msg_param *prm)
{
	prm->responder_resources = p[0];
	prm->initiator_depth = p[1];
	prm->flow_control = p[2];
	prm->retry_count = p[3];
	prm->rnr_retry_count = p[4];
	if (!cm_all_zero(p + 5, CM_MSG_PARAM_SIZE - 5) || !cm_param_valid(prm))
		return -1;
	return 0;
}

/* Header checks: magic, version, known type, reserved byte, exact length. */
static int cm_header_parse(const uint8_t *p, size_t len, struct cm_msg *msg)
{
	enum cm_msg_type type;

	if (len < CM_MSG_HEADER_SIZE || cm_get_be32(p) != CM_MSG_MAGIC ||
	    p[4] != CM_MSG_VERSION || p[7] != 0)
		return -1;
	type = (enum cm_msg_type)p[5];
	if (!cm_msg_pdata_max(type) || p[6] > cm_msg_pdata_max(type))
		return -1;
	if (len != CM_MSG_HEADER_SIZE + cm_msg_body_size(type) + p[6])
		return -1;
	msg->type = type;
	msg->pdata_len = p[6];
	return 0;
}

int cm_msg_parse(const void *buf, size_t len, struct cm_msg *msg_p)
{
	const uint8_t *p = buf;

	memset(msg_p, 0, sizeof(*msg_p));
	if (!buf || cm_header_parse(p, len, msg_p) < 0)
		goto err_bad;
	p += CM_MSG_HEADER_SIZE;
	if (msg_p->type == CM_MSG_CONNECT_REQ) {
		if (cm_addr_parse(p, &msg_p->src) < 0 ||
		    cm_addr_parse(p + CM_MSG_ADDR_SIZE, &msg_p->dst) < 0)
			goto err_bad;
		p += 2 * CM_MSG_ADDR_SIZE;
	}
	if (msg_p->type != CM_MSG_REJECT) {
		if (cm_param_parse(p, &msg_p->param) < 0)
			goto err_bad;
		p += CM_MSG_PARAM_SIZE;
	}
	memcpy(msg_p->pdata, p, msg_p->pdata_len);
	return 0;

err_bad:
	errno = EBADMSG;
	return -1;
}
