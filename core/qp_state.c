/*
 * qp_state.c - the state machine of an RC or UC queue pair, as ibverbs has it.
 *
 * The table says, for every legal (current, next) pair, which attribute-mask
 * bits a modify must carry and which it may carry; it is the IB_QPT_RC column
 * of the Linux kernel's table behind ib_modify_qp_is_ok() (drivers/infiniband/
 * core/verbs.c), so that a program whose modify_qp calls pass on ferry's soft
 * transport also pass on a real NIC, and the other way round.
 *
 * Two consequences of following the kernel that may surprise:
 *  - SQE -> RTS allows no attribute but FERRY_QP_STATE for RC (the kernel
 *    lists CUR_STATE/ACCESS_FLAGS only for UC and UD: an RC QP whose send
 *    queue fails goes to ERR, never SQE).
 *  - RTR -> RTR and SQE -> SQE are not legal, so a modify without
 *    FERRY_QP_STATE fails in RTR and SQE.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdbool.h>

#include "core-export.h"

/* One (current, next) cell of the table. */
struct qp_transition {
	bool legal;
	int required;	/* bits the mask must contain (besides FERRY_QP_STATE) */
	int optional;	/* bits the mask may contain */
};

#define QPS_COUNT (FERRY_QPS_ERR + 1)

/* A legal transition with its required and optional attributes. */
#define LEGAL(req, opt) { .legal = true, .required = (req), .optional = (opt) }
/* A legal transition that takes nothing but FERRY_QP_STATE. */
#define BARE LEGAL(0, 0)

/* Shorter names for the table only. */
#define S_CUR		FERRY_QP_CUR_STATE
#define S_SQD_NOTIFY	FERRY_QP_EN_SQD_ASYNC_NOTIFY
#define S_ACCESS	FERRY_QP_ACCESS_FLAGS
#define S_PKEY		FERRY_QP_PKEY_INDEX
#define S_PORT		FERRY_QP_PORT
#define S_AV		FERRY_QP_AV
#define S_MTU		FERRY_QP_PATH_MTU
#define S_TIMEOUT	FERRY_QP_TIMEOUT
#define S_RETRY		FERRY_QP_RETRY_CNT
#define S_RNR_RETRY	FERRY_QP_RNR_RETRY
#define S_RQ_PSN	FERRY_QP_RQ_PSN
#define S_RD_ATOMIC	FERRY_QP_MAX_QP_RD_ATOMIC
#define S_ALT_PATH	FERRY_QP_ALT_PATH
#define S_RNR_TIMER	FERRY_QP_MIN_RNR_TIMER
#define S_SQ_PSN	FERRY_QP_SQ_PSN
#define S_DEST_RD_ATOMIC FERRY_QP_MAX_DEST_RD_ATOMIC
#define S_MIG_STATE	FERRY_QP_PATH_MIG_STATE
#define S_DEST_QPN	FERRY_QP_DEST_QPN

/*
 * rc_transitions[cur][next].  Cells left out are illegal.  Every state may go
 * to RESET and to ERR with FERRY_QP_STATE alone.
 */
static const struct qp_transition rc_transitions[QPS_COUNT][QPS_COUNT] = {
	[FERRY_QPS_RESET] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_INIT]  = LEGAL(S_PKEY | S_PORT | S_ACCESS, 0),
		[FERRY_QPS_ERR]   = BARE,
	},
	[FERRY_QPS_INIT] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_INIT]  = LEGAL(0, S_PKEY | S_PORT | S_ACCESS),
		[FERRY_QPS_RTR]   = LEGAL(S_AV | S_MTU | S_DEST_QPN | S_RQ_PSN |
					  S_DEST_RD_ATOMIC | S_RNR_TIMER,
					  S_ALT_PATH | S_ACCESS | S_PKEY),
		[FERRY_QPS_ERR]   = BARE,
	},
	[FERRY_QPS_RTR] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_RTS]   = LEGAL(S_SQ_PSN | S_TIMEOUT | S_RETRY |
					  S_RNR_RETRY | S_RD_ATOMIC,
					  S_CUR | S_ALT_PATH | S_ACCESS |
					  S_RNR_TIMER | S_MIG_STATE),
		[FERRY_QPS_ERR]   = BARE,
	},
	[FERRY_QPS_RTS] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_RTS]   = LEGAL(0, S_CUR | S_ACCESS | S_ALT_PATH |
					     S_MIG_STATE | S_RNR_TIMER),
		[FERRY_QPS_SQD]   = LEGAL(0, S_SQD_NOTIFY),
		[FERRY_QPS_ERR]   = BARE,
	},
	[FERRY_QPS_SQD] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_RTS]   = LEGAL(0, S_CUR | S_ALT_PATH | S_ACCESS |
					     S_RNR_TIMER | S_MIG_STATE),
		[FERRY_QPS_SQD]   = LEGAL(0, S_PORT | S_AV | S_TIMEOUT | S_RETRY |
					     S_RNR_RETRY | S_RD_ATOMIC |
					     S_DEST_RD_ATOMIC | S_ALT_PATH |
					     S_ACCESS | S_PKEY | S_RNR_TIMER |
					     S_MIG_STATE),
		[FERRY_QPS_ERR]   = BARE,
	},
	[FERRY_QPS_SQE] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_RTS]   = BARE,	/* RC: see the top of the file */
		[FERRY_QPS_ERR]   = BARE,
	},
	[FERRY_QPS_ERR] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_ERR]   = BARE,
	},
};

/*
 * uc_transitions[cur][next]: the kernel's IB_QPT_UC column.  UC has no
 * responder resources, acknowledgements or RNR NAKs, so RTR and RTS take
 * none of the attributes that tune them (MAX_DEST_RD_ATOMIC,
 * MIN_RNR_TIMER, TIMEOUT, RETRY_CNT, RNR_RETRY, MAX_QP_RD_ATOMIC), and a
 * UC send queue may fail into SQE and come back (SQE -> RTS).
 */
static const struct qp_transition uc_transitions[QPS_COUNT][QPS_COUNT] = {
	[FERRY_QPS_RESET] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_INIT]  = LEGAL(S_PKEY | S_PORT | S_ACCESS, 0),
		[FERRY_QPS_ERR]   = BARE,
	},
	[FERRY_QPS_INIT] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_INIT]  = LEGAL(0, S_PKEY | S_PORT | S_ACCESS),
		[FERRY_QPS_RTR]   = LEGAL(S_AV | S_MTU | S_DEST_QPN | S_RQ_PSN,
					  S_ALT_PATH | S_ACCESS | S_PKEY),
		[FERRY_QPS_ERR]   = BARE,
	},
	[FERRY_QPS_RTR] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_RTS]   = LEGAL(S_SQ_PSN,
					  S_CUR | S_ALT_PATH | S_ACCESS | S_MIG_STATE),
		[FERRY_QPS_ERR]   = BARE,
	},
	[FERRY_QPS_RTS] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_RTS]   = LEGAL(0, S_CUR | S_ACCESS | S_ALT_PATH | S_MIG_STATE),
		[FERRY_QPS_SQD]   = LEGAL(0, S_SQD_NOTIFY),
		[FERRY_QPS_ERR]   = BARE,
	},
	[FERRY_QPS_SQD] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_RTS]   = LEGAL(0, S_CUR | S_ALT_PATH | S_ACCESS | S_MIG_STATE),
		[FERRY_QPS_SQD]   = LEGAL(0, S_PKEY | S_AV | S_ALT_PATH | S_ACCESS |
					     S_MIG_STATE),
		[FERRY_QPS_ERR]   = BARE,
	},
	[FERRY_QPS_SQE] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_RTS]   = LEGAL(0, S_CUR | S_ACCESS),
		[FERRY_QPS_ERR]   = BARE,
	},
	[FERRY_QPS_ERR] = {
		[FERRY_QPS_RESET] = BARE,
		[FERRY_QPS_ERR]   = BARE,
	},
};

static bool qp_state_valid(enum ferry_qp_state state)
{
	return (unsigned int)state < QPS_COUNT;
}

/**
 * ferry_qp_transition_ok - may an RC QP in @cur be modified to @next with
 * attribute mask @mask?
 *
 * Legal when the table has the transition, @mask holds all its required bits
 * and nothing beyond its required and optional bits and FERRY_QP_STATE.
 * A change of state (@next != @cur) must carry FERRY_QP_STATE.  Whether a
 * given FERRY_QP_CUR_STATE value matches @cur is ferry_qp_next_state's
 * business; here the bit is only allowed or not.  Does not touch errno.
 */
bool ferry_qp_transition_ok(enum ferry_qp_state cur, enum ferry_qp_state next,
			    int mask)
{
	return ferry_qp_type_transition_ok(FERRY_QPT_RC, cur, next, mask);
}

/* ferry_qp_transition_ok for a QP of @type: false for a type not known. */
bool ferry_qp_type_transition_ok(enum ferry_qp_type type, enum ferry_qp_state cur,
				 enum ferry_qp_state next, int mask)
{
	const struct qp_transition *t;
	unsigned int bits = (unsigned int)mask;

	if (type == FERRY_QPT_UD)
		return ferry_ud_transition_ok(cur, next, mask);
	if (!qp_state_valid(cur) || !qp_state_valid(next))
		return false;
	if (next != cur && !(bits & FERRY_QP_STATE))
		return false;
	if (type == FERRY_QPT_RC)
		t = &rc_transitions[cur][next];
	else if (type == FERRY_QPT_UC)
		t = &uc_transitions[cur][next];
	else
		return false;
	if (!t->legal)
		return false;
	if ((bits & (unsigned int)t->required) != (unsigned int)t->required)
		return false;
	if (bits & ~(unsigned int)(t->required | t->optional | FERRY_QP_STATE))
		return false;
	return true;
}

/**
 * ferry_qp_next_state - the state a modify of a QP in @cur aims at.
 *
 * attr->qp_state when @mask has FERRY_QP_STATE, else @cur.  Returns false
 * with errno EINVAL when FERRY_QP_CUR_STATE is in @mask and
 * attr->cur_qp_state is not @cur (the caller's idea of the state is stale),
 * when a state given is out of range, or when @attr is NULL but needed.
 * *@next_p is written only on success.
 */
bool ferry_qp_next_state(enum ferry_qp_state cur, const struct ferry_qp_attr *attr,
			 int mask, enum ferry_qp_state *next_p)
{
	enum ferry_qp_state next = cur;

	if (!qp_state_valid(cur))
		goto err_invalid;
	if (mask & (FERRY_QP_STATE | FERRY_QP_CUR_STATE)) {
		if (!attr)
			goto err_invalid;
		if ((mask & FERRY_QP_CUR_STATE) && attr->cur_qp_state != cur)
			goto err_invalid;
		if (mask & FERRY_QP_STATE)
			next = attr->qp_state;
		if (!qp_state_valid(next))
			goto err_invalid;
	}
	*next_p = next;
	return true;

err_invalid:
	errno = EINVAL;
	return false;
}
