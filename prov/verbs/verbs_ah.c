/*
 * verbs_ah.c - address handles of the verbs provider, and the UD part of
 * its send work requests: both passed through to libibverbs (ibv_ah,
 * wr.ud), with ferry's enums and layouts equal to ibverbs' so that only
 * the AH pointer needs translating.  A UD QP itself is an ibv QP of type
 * IBV_QPT_UD (verbs_qp.c); what the device does with datagrams (GRH on
 * RoCE, MTU checks, Q_Key drops) is the device's.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include "verbs-internal.h"

_Static_assert((int)FERRY_QPT_UD == (int)IBV_QPT_UD, "QP types differ from ibverbs");
_Static_assert((int)FERRY_WC_GRH == (int)IBV_WC_GRH, "WC flags differ from ibverbs");
_Static_assert(sizeof(struct ferry_grh) == sizeof(struct ibv_grh) &&
	       sizeof(struct ferry_grh) == FERRY_GRH_BYTES, "GRH layout differs from ibverbs");

struct verbs_ah {
	struct ferry_ah ah;
	struct ibv_ah *ibv;
};

static inline struct verbs_ah *to_vah(struct ferry_ah *ah)
{
	return container_of(ah, struct verbs_ah, ah);
}

/*
 * An address vector in libibverbs' form: an AH's, or a QP's joined out of
 * band (@default_port where the caller named none; 0 keeps it 0).
 */
void verbs_ah_to_ibv(struct ibv_ah_attr *out, const struct ferry_ah_attr *in,
			    uint8_t default_port)
{
	memset(out, 0, sizeof(*out));
	memcpy(&out->grh.dgid, &in->grh.dgid, sizeof(out->grh.dgid));
	out->grh.flow_label = in->grh.flow_label;
	out->grh.sgid_index = in->grh.sgid_index;
	out->grh.hop_limit = in->grh.hop_limit;
	out->grh.traffic_class = in->grh.traffic_class;
	out->dlid = in->dlid;
	out->sl = in->sl;
	out->src_path_bits = in->src_path_bits;
	out->static_rate = in->static_rate;
	out->is_global = in->is_global;
	out->port_num = in->port_num ? in->port_num : default_port;
}

/* The reverse, for ferry_query_qp. */
void verbs_ah_from_ibv(struct ferry_ah_attr *out, const struct ibv_ah_attr *in)
{
	memcpy(&out->grh.dgid, &in->grh.dgid, sizeof(out->grh.dgid));
	out->grh.flow_label = in->grh.flow_label;
	out->grh.sgid_index = in->grh.sgid_index;
	out->grh.hop_limit = in->grh.hop_limit;
	out->grh.traffic_class = in->grh.traffic_class;
	out->dlid = in->dlid;
	out->sl = in->sl;
	out->src_path_bits = in->src_path_bits;
	out->static_rate = in->static_rate;
	out->is_global = in->is_global;
	out->port_num = in->port_num;
}

struct ferry_ah *verbs_create_ah(struct ferry_pd *pd, struct ferry_ah_attr *attr)
{
	struct ibv_ah_attr ia;
	struct verbs_ah *vah = calloc(1, sizeof(*vah));

	if (!vah)
		return NULL;
	verbs_ah_to_ibv(&ia, attr, 0);
	errno = 0;
	vah->ibv = verbs_ptr(ibv_create_ah(to_vpd(pd)->ibv, &ia), EINVAL);
	if (!vah->ibv) {
		ferry_debug("verbs: ibv_create_ah: %m");
		free(vah);
		return NULL;
	}
	vah->ah.context = pd->context;
	vah->ah.pd = pd;
	vah->ah.handle = vah->ibv->handle;
	return &vah->ah;
}

int verbs_destroy_ah(struct ferry_ah *ah)
{
	struct verbs_ah *vah = to_vah(ah);

	if (verbs_ret(ibv_destroy_ah(vah->ibv)))
		return -1;
	free(vah);
	return 0;
}

void verbs_ud_wr_to_ibv(const struct ferry_send_wr *in, struct ibv_send_wr *out)
{
	out->wr.ud.ah = to_vah(in->wr.ud.ah)->ibv;
	out->wr.ud.remote_qpn = in->wr.ud.remote_qpn;
	out->wr.ud.remote_qkey = in->wr.ud.remote_qkey;
}
