/*
 * verbs-export.h - what the verbs provider offers the CM's verbs transport
 * (cm/cm_verbs.c), which drives connections with librdmacm on the QPs this
 * provider made: the helpers that map ibverbs' and librdmacm's error
 * conventions onto ferry's, and three calls on ferry objects.  Nothing of
 * the provider's structs: connection setup is no hot path, so what the CM
 * reads of a QP it reads through a call.
 */
#ifndef FERRY_VERBS_EXPORT_H
#define FERRY_VERBS_EXPORT_H

#include <stdbool.h>

#include "core-export.h"

struct ibv_qp;

/* --- error translation: the one place ibverbs' conventions are mapped --- */

/*
 * verbs_ret - for calls that return 0 or an errno value (ibv_modify_qp,
 * ibv_destroy_*, ibv_post_*, ...).  Providers return it positive or negative.
 */
static inline int verbs_ret(int ret)
{
	if (likely(ret == 0))
		return 0;
	errno = ret < 0 ? -ret : ret;
	return -1;
}

/*
 * verbs_ret_errno - for calls that return -1 (or any nonzero) with errno
 * set (ibv_get_cq_event, rdma_*).  A missing errno becomes EIO.
 */
static inline int verbs_ret_errno(int ret)
{
	if (likely(ret == 0))
		return 0;
	if (errno == 0)
		errno = EIO;
	return -1;
}

/* verbs_ptr - for constructors returning NULL (errno maybe unset). */
static inline void *verbs_ptr(void *obj, int fallback_errno)
{
	if (!obj && errno == 0)
		errno = fallback_errno;
	return obj;
}

/* --- ferry objects of this provider --- */

/* Is @ctx a context of the verbs provider (its PDs, CQs, QPs are verbs ones)? */
bool verbs_is_context(const struct ferry_context *ctx);
/* The ibv QP behind @qp, a QP of a verbs context (verbs_is_context). */
struct ibv_qp *verbs_ibv_qp(struct ferry_qp *qp);
/*
 * Refresh qp->state from the ibv QP (librdmacm moves CM QPs itself).  On
 * iWARP the device cannot tell: qp->state is kept as it is.
 */
int verbs_qp_sync_state(struct ferry_qp *qp);
/*
 * verbs_qp_set_state - note a state the kernel gave @qp without ferry_modify_qp
 * (iWARP: RTS once iw_cm connected it).  Only for devices that cannot
 * report it: verbs_qp_sync_state serves the others.
 */
void verbs_qp_set_state(struct ferry_qp *qp, enum ferry_qp_state state);

#endif /* FERRY_VERBS_EXPORT_H */
