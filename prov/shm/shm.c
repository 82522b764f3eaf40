/*
 * shm.c - the shm provider: its operations table.  Each operation lives in
 * its object's file: the device and a context in shm_device.c, PDs and
 * their MR tables in shm_pd.c, MRs in shm_mr.c, CQs in shm_cq.c,
 * completion channels in shm_channel.c, QPs in shm_qp.c, shared receive
 * queues in shm_srq.c, the data path in shm_data.c and shm_recv.c,
 * connections and the monitor thread in shm_conn.c and shm_monitor.c,
 * mappings of peers' files in shm_map.c.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "shm-internal.h"
#include "shm-ops.h"
#include "shm-ud.h"

static int shm_qp_exchange_op(struct ferry_qp *qp, int sock, uint32_t *peer_qpn)
{
	return shm_qp_exchange(qp, sock, peer_qpn);
}

static int shm_qp_exchange_begin_op(struct ferry_qp *qp, int sock)
{
	return shm_qp_exchange_begin(qp, sock);
}

static int shm_qp_exchange_step_op(struct ferry_qp *qp, uint32_t *peer_qpn)
{
	return shm_qp_exchange_step(qp, peer_qpn);
}

const struct ferry_provider ferry_shm_provider = {
	.name = "shm",
	.qp_types = 1u << FERRY_QPT_UC | 1u << FERRY_QPT_UD,
	.get_devices = shm_get_devices,
	.open_device = shm_open_device,
	.close_device = shm_close_device,
	.query_device = shm_query_device,
	.query_device_ex = shm_query_device_ex,
	.query_port = shm_query_port,
	.query_gid = shm_query_gid,
	.query_pkey = shm_query_pkey,
	.alloc_pd = shm_alloc_pd,
	.alloc_pd_small = shm_alloc_pd_small,
	.dealloc_pd = shm_dealloc_pd,
	.detach_pd = shm_detach_pd,
	.detach_cq = shm_detach_cq,
	.disarm_cq = shm_disarm_cq,
	.fork_child = shm_monitor_fork_child,
	.reg_mr = shm_reg_mr,
	.dereg_mr = shm_dereg_mr,
	.create_comp_channel = shm_create_comp_channel,
	.create_comp_channel_single = shm_create_comp_channel_single,
	.destroy_comp_channel = shm_destroy_comp_channel,
	.renumber_comp_channel = shm_renumber_comp_channel,
	.comp_channel_on_conn = shm_comp_channel_on_conn,
	.cq_sleep_prepare = shm_cq_sleep_prepare,
	.cq_sleep = shm_cq_sleep,
	.cq_sleep_cancel = shm_cq_sleep_cancel,
	.get_cq_event = shm_get_cq_event,
	.poll_cq_event = shm_poll_cq_event,
	.create_cq = shm_create_cq,
	.destroy_cq = shm_destroy_cq,
	.req_notify_cq = shm_req_notify_cq,
	.ack_cq_events = shm_ack_cq_events,
	.poll_cq = shm_poll_cq,
	.create_ah = shm_create_ah,
	.destroy_ah = shm_destroy_ah,
	.create_qp = shm_create_qp,
	.modify_qp = shm_modify_qp,
	.query_qp = shm_query_qp,
	.destroy_qp = shm_destroy_qp,
	.post_send = shm_post_send,
	.post_send_direct = shm_post_send_direct,
	.post_recv = shm_post_recv,
	.create_srq = shm_create_srq,
	.modify_srq = shm_modify_srq,
	.query_srq = shm_query_srq,
	.destroy_srq = shm_destroy_srq,
	.post_srq_recv = shm_post_srq_recv,
	.qp_exchange = shm_qp_exchange_op,
	.qp_exchange_begin = shm_qp_exchange_begin_op,
	.qp_exchange_step = shm_qp_exchange_step_op,
	.qp_exchange_abort = shm_qp_exchange_abort,
};
