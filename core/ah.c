/*
 * ah.c - address handles, the destinations of UD sends: the checks that
 * need no provider, then the provider's create_ah / destroy_ah.  A
 * provider without them has no UD at all (tcp), and says so with
 * EOPNOTSUPP here and at ferry_create_qp.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stddef.h>

#include "core-export.h"

/* InfiniBand's unicast LIDs: 0x0001-0xbfff (0 is reserved, above: multicast). */
#define AH_LID_UNICAST_MAX 0xbfff

/**
 * ferry_create_ah - an address handle for UD sends to @attr on @pd.
 *
 * EINVAL for a missing @pd or @attr, port 0, or a multicast LID without a
 * GRH (ferry has no multicast groups); EOPNOTSUPP where the transport has
 * no UD.  The provider checks the rest (a port it has, a LID it can reach).
 */
struct ferry_ah *ferry_create_ah(struct ferry_pd *pd, struct ferry_ah_attr *attr)
{
	const struct ferry_provider *prov;

	if (!pd || !attr || attr->port_num == 0 ||
	    (attr->dlid > AH_LID_UNICAST_MAX && !attr->is_global)) {
		errno = EINVAL;
		return NULL;
	}
	prov = pd->context->provider;
	if (!prov->create_ah) {
		ferry_info("%s: no address handles (no UD) on this transport", prov->name);
		errno = EOPNOTSUPP;
		return NULL;
	}
	return prov->create_ah(pd, attr);
}

int ferry_destroy_ah(struct ferry_ah *ah)
{
	if (!ah)
		return ERR(EINVAL);
	return ah->context->provider->destroy_ah(ah);
}

bool ferry_ud_wr_ok(const struct ferry_qp *qp, const struct ferry_send_wr *wr)
{
	if (wr->opcode != FERRY_WR_SEND && wr->opcode != FERRY_WR_SEND_WITH_IMM)
		return false;
	return wr->wr.ud.ah && wr->wr.ud.ah->context == qp->context;
}
