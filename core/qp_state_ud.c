/*
 * qp_state_ud.c - the state machine of an unreliable-datagram QP, as
 * ibverbs has it: the IB_QPT_UD column of the Linux kernel's table behind
 * ib_modify_qp_is_ok() (drivers/infiniband/core/verbs.c).  A UD QP has no
 * peer, so none of RC's path, PSN-of-the-peer, timer or retry attributes
 * belong here; what it has is a Q_Key, which every receive checks.
 *
 * Kept apart from qp_state.c (RC) so that each file is one table; the
 * rules on top of the table (a change of state carries FERRY_QP_STATE,
 * nothing beyond required and optional bits) are the same.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdbool.h>

#include "core-export.h"

struct ud_transition {
	bool legal;
	int required;	/* bits the mask must contain (besides FERRY_QP_STATE) */
	int optional;	/* bits the mask may contain */
};

#define UD_QPS_COUNT (FERRY_QPS_ERR + 1)
#define UD_LEGAL(req, opt) { .legal = true, .required = (req), .optional = (opt) }
#define UD_BARE UD_LEGAL(0, 0)

#define U_CUR	FERRY_QP_CUR_STATE
#define U_PKEY	FERRY_QP_PKEY_INDEX
#define U_PORT	FERRY_QP_PORT
#define U_QKEY	FERRY_QP_QKEY

/* ud_transitions[cur][next]; cells left out are illegal. */
static const struct ud_transition ud_transitions[UD_QPS_COUNT][UD_QPS_COUNT] = {
	[FERRY_QPS_RESET] = {
		[FERRY_QPS_RESET] = UD_BARE,
		[FERRY_QPS_INIT]  = UD_LEGAL(U_PKEY | U_PORT | U_QKEY, 0),
		[FERRY_QPS_ERR]   = UD_BARE,
	},
	[FERRY_QPS_INIT] = {
		[FERRY_QPS_RESET] = UD_BARE,
		[FERRY_QPS_INIT]  = UD_LEGAL(0, U_PKEY | U_PORT | U_QKEY),
		[FERRY_QPS_RTR]   = UD_LEGAL(0, U_PKEY | U_QKEY),
		[FERRY_QPS_ERR]   = UD_BARE,
	},
	[FERRY_QPS_RTR] = {
		[FERRY_QPS_RESET] = UD_BARE,
		[FERRY_QPS_RTS]   = UD_LEGAL(FERRY_QP_SQ_PSN, U_CUR | U_QKEY),
		[FERRY_QPS_ERR]   = UD_BARE,
	},
	[FERRY_QPS_RTS] = {
		[FERRY_QPS_RESET] = UD_BARE,
		[FERRY_QPS_RTS]   = UD_LEGAL(0, U_CUR | U_QKEY),
		[FERRY_QPS_SQD]   = UD_LEGAL(0, FERRY_QP_EN_SQD_ASYNC_NOTIFY),
		[FERRY_QPS_ERR]   = UD_BARE,
	},
	[FERRY_QPS_SQD] = {
		[FERRY_QPS_RESET] = UD_BARE,
		[FERRY_QPS_RTS]   = UD_LEGAL(0, U_CUR | U_QKEY),
		[FERRY_QPS_SQD]   = UD_LEGAL(0, U_PKEY | U_QKEY),
		[FERRY_QPS_ERR]   = UD_BARE,
	},
	[FERRY_QPS_SQE] = {
		[FERRY_QPS_RESET] = UD_BARE,
		[FERRY_QPS_RTS]   = UD_LEGAL(0, U_CUR | U_QKEY),
		[FERRY_QPS_ERR]   = UD_BARE,
	},
	[FERRY_QPS_ERR] = {
		[FERRY_QPS_RESET] = UD_BARE,
		[FERRY_QPS_ERR]   = UD_BARE,
	},
};

bool ferry_ud_transition_ok(enum ferry_qp_state cur, enum ferry_qp_state next, int mask)
{
	const struct ud_transition *t;
	unsigned int bits = (unsigned int)mask;

	if ((unsigned int)cur >= UD_QPS_COUNT || (unsigned int)next >= UD_QPS_COUNT)
		return false;
	if (next != cur && !(bits & FERRY_QP_STATE))
		return false;
	t = &ud_transitions[cur][next];
	if (!t->legal)
		return false;
	if ((bits & (unsigned int)t->required) != (unsigned int)t->required)
		return false;
	return !(bits & ~(unsigned int)(t->required | t->optional | FERRY_QP_STATE));
}
