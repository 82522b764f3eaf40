/*
 * ferry/verbs.h - the verbs-style API: devices, protection domains, memory
 * regions, completion queues and channels, reliable-connection queue pairs.
 *
 * Types and values mirror libibverbs so that an RDMA program ports by renaming
 * ibv_ to ferry_ and IBV_ to FERRY_.  Numeric values of every enum equal the
 * ibverbs ones.
 *
 * Error convention (one for the whole family):
 *   - constructors (ferry_open_device, ferry_alloc_pd, ferry_reg_mr, ...)
 *     return NULL and set errno;
 *   - every other call returns 0 on success and -1 with errno set on failure,
 *     except ferry_poll_cq, which returns the number of completions (>= 0)
 *     or -1 with errno set, and ferry_post_send / ferry_post_recv, which also
 *     store the first rejected work request in *bad_wr_p.
 * (libibverbs returns errno values directly from some calls; ferry does not.)
 */
#ifndef FERRY_VERBS_H
#define FERRY_VERBS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ferry_device;
struct ferry_provider;
struct ferry_async_queue;

/*
 * An open device (struct ibv_context's public part): async_fd polls
 * readable while an asynchronous event waits for ferry_get_async_event.
 * It is blocking, as ibverbs' is: make it non-blocking with fcntl(2)
 * (O_NONBLOCK), and ferry_get_async_event fails with EAGAIN instead of
 * waiting.  The other members are ferry's own.
 */
struct ferry_context {
	struct ferry_device *device;
	const struct ferry_provider *provider;
	int async_fd;
	struct ferry_async_queue *async;	/* ferry's own queue, or NULL */
};

/* Memory access rights of a memory region (ibv_access_flags). */
enum ferry_access_flags {
	FERRY_ACCESS_LOCAL_WRITE   = 1 << 0, /* local WC may write (RECV, READ dst) */
	FERRY_ACCESS_REMOTE_WRITE  = 1 << 1, /* peer may RDMA WRITE into it */
	FERRY_ACCESS_REMOTE_READ   = 1 << 2, /* peer may RDMA READ from it */
	FERRY_ACCESS_REMOTE_ATOMIC = 1 << 3, /* peer may run atomics on it */
};

struct ferry_pd {
	struct ferry_context *context;
	uint32_t handle;
};

struct ferry_mr {
	struct ferry_context *context;
	struct ferry_pd *pd;
	void *addr;
	size_t length;
	uint32_t handle;
	uint32_t lkey;
	uint32_t rkey;
};

/* A completion channel: fd polls readable when a CQ bound to it has an event. */
struct ferry_comp_channel {
	struct ferry_context *context;
	int fd;
	int refcnt;
};

struct ferry_cq {
	struct ferry_context *context;
	struct ferry_comp_channel *channel;
	void *cq_context;
	int cqe;
};

enum ferry_wc_status {
	FERRY_WC_SUCCESS,
	FERRY_WC_LOC_LEN_ERR,
	FERRY_WC_LOC_QP_OP_ERR,
	FERRY_WC_LOC_EEC_OP_ERR,
	FERRY_WC_LOC_PROT_ERR,
	FERRY_WC_WR_FLUSH_ERR,
	FERRY_WC_MW_BIND_ERR,
	FERRY_WC_BAD_RESP_ERR,
	FERRY_WC_LOC_ACCESS_ERR,
	FERRY_WC_REM_INV_REQ_ERR,
	FERRY_WC_REM_ACCESS_ERR,
	FERRY_WC_REM_OP_ERR,
	FERRY_WC_RETRY_EXC_ERR,
	FERRY_WC_RNR_RETRY_EXC_ERR,
	FERRY_WC_LOC_RDD_VIOL_ERR,
	FERRY_WC_REM_INV_RD_REQ_ERR,
	FERRY_WC_REM_ABORT_ERR,
	FERRY_WC_INV_EECN_ERR,
	FERRY_WC_INV_EEC_STATE_ERR,
	FERRY_WC_FATAL_ERR,
	FERRY_WC_RESP_TIMEOUT_ERR,
	FERRY_WC_GENERAL_ERR,
};

enum ferry_wc_opcode {
	FERRY_WC_SEND,
	FERRY_WC_RDMA_WRITE,
	FERRY_WC_RDMA_READ,
	FERRY_WC_COMP_SWAP,
	FERRY_WC_FETCH_ADD,
	/* Receive opcodes have this bit set: test with (opcode & FERRY_WC_RECV). */
	FERRY_WC_RECV = 1 << 7,
	FERRY_WC_RECV_RDMA_WITH_IMM,
};

enum ferry_wc_flags {
	FERRY_WC_GRH      = 1 << 0, /* UD: the receive's first 40 bytes hold a GRH */
	FERRY_WC_WITH_IMM = 1 << 1, /* imm_data is valid */
};

struct ferry_wc {
	uint64_t wr_id;
	enum ferry_wc_status status;
	enum ferry_wc_opcode opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm_data;	/* network byte order, as the sender posted it */
	uint32_t qp_num;
	uint32_t src_qp;
	unsigned int wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t sl;
	uint8_t dlid_path_bits;
};

enum ferry_qp_type {
	FERRY_QPT_RC = 2,	/* reliable connection: every transport */
	FERRY_QPT_UC = 3,	/* unreliable connection: shm and verbs (no READ,
				 * no atomics, no acknowledgements) */
	FERRY_QPT_UD = 4,	/* unreliable datagram: shm and verbs, not tcp */
};

/*
 * UD: every receive buffer starts with room for a Global Route Header;
 * byte_len counts it (ferry_create_ah(3)).
 */
#define FERRY_GRH_BYTES 40

enum ferry_qp_state {
	FERRY_QPS_RESET,
	FERRY_QPS_INIT,
	FERRY_QPS_RTR,
	FERRY_QPS_RTS,
	FERRY_QPS_SQD,
	FERRY_QPS_SQE,
	FERRY_QPS_ERR,
	FERRY_QPS_UNKNOWN
};

enum ferry_mtu {
	FERRY_MTU_256  = 1,
	FERRY_MTU_512  = 2,
	FERRY_MTU_1024 = 3,
	FERRY_MTU_2048 = 4,
	FERRY_MTU_4096 = 5
};

/* Bits of the attr_mask argument of ferry_modify_qp (ibv_qp_attr_mask). */
enum ferry_qp_attr_mask {
	FERRY_QP_STATE              = 1 << 0,
	FERRY_QP_CUR_STATE          = 1 << 1,
	FERRY_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2,
	FERRY_QP_ACCESS_FLAGS       = 1 << 3,
	FERRY_QP_PKEY_INDEX         = 1 << 4,
	FERRY_QP_PORT               = 1 << 5,
	FERRY_QP_QKEY               = 1 << 6,
	FERRY_QP_AV                 = 1 << 7,
	FERRY_QP_PATH_MTU           = 1 << 8,
	FERRY_QP_TIMEOUT            = 1 << 9,
	FERRY_QP_RETRY_CNT          = 1 << 10,
	FERRY_QP_RNR_RETRY          = 1 << 11,
	FERRY_QP_RQ_PSN             = 1 << 12,
	FERRY_QP_MAX_QP_RD_ATOMIC   = 1 << 13,
	FERRY_QP_ALT_PATH           = 1 << 14,
	FERRY_QP_MIN_RNR_TIMER      = 1 << 15,
	FERRY_QP_SQ_PSN             = 1 << 16,
	FERRY_QP_MAX_DEST_RD_ATOMIC = 1 << 17,
	FERRY_QP_PATH_MIG_STATE     = 1 << 18,
	FERRY_QP_CAP                = 1 << 19,
	FERRY_QP_DEST_QPN           = 1 << 20,
};

struct ferry_qp_cap {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
};

/* --- shared receive queues (struct ibv_srq and its attributes) --- */

struct ferry_srq {
	struct ferry_context *context;
	void *srq_context;
	struct ferry_pd *pd;
	uint32_t handle;
	int qp_refs;		/* ferry's own: QPs created on it */
};

/* Bits of the attr_mask argument of ferry_modify_srq (ibv_srq_attr_mask). */
enum ferry_srq_attr_mask {
	FERRY_SRQ_MAX_WR = 1 << 0,	/* resize to max_wr */
	FERRY_SRQ_LIMIT  = 1 << 1,	/* arm the limit event at srq_limit */
};

struct ferry_srq_attr {
	uint32_t max_wr;	/* WRs it holds at most */
	uint32_t max_sge;	/* SGEs per WR */
	uint32_t srq_limit;	/* armed limit; 0: not armed */
};

struct ferry_srq_init_attr {
	void *srq_context;
	struct ferry_srq_attr attr;	/* srq_limit is ignored, as in ibverbs */
};

struct ferry_qp_init_attr {
	void *qp_context;
	struct ferry_cq *send_cq;
	struct ferry_cq *recv_cq;
	struct ferry_srq *srq;	/* receives come from it (NULL: the QP's own) */
	struct ferry_qp_cap cap;
	enum ferry_qp_type qp_type;
	int sq_sig_all;		/* every send WR generates a completion */
};

/*
 * A GID (union ibv_gid): 128 bits, network byte order.  What it names on
 * each transport: ferry(7), ADDRESSING.
 */
union ferry_gid {
	uint8_t raw[16];
	struct {
		uint64_t subnet_prefix;	/* big-endian */
		uint64_t interface_id;	/* big-endian */
	} global;
};

/* The GRH at the head of a UD receive (struct ibv_grh), network byte order. */
struct ferry_grh {
	uint32_t version_tclass_flow;	/* 6 << 28 | traffic class << 20 | flow label */
	uint16_t paylen;		/* bytes after the GRH */
	uint8_t next_hdr;		/* 0x1b on InfiniBand */
	uint8_t hop_limit;
	union ferry_gid sgid;
	union ferry_gid dgid;
};

/* The GRH half of an address vector (struct ibv_global_route). */
struct ferry_global_route {
	union ferry_gid dgid;
	uint32_t flow_label;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
};

/*
 * Address vector (struct ibv_ah_attr).  The verbs transport passes it to
 * the device; shm keeps what it was given and returns it from
 * ferry_query_qp (it finds its peer through the QP exchange instead).
 * An address handle (ferry_create_ah) is one made into an object for UD
 * sends: dlid (and port_num 1) say where; is_global asks for a GRH.
 */
struct ferry_ah_attr {
	struct ferry_global_route grh;	/* valid when is_global */
	uint16_t dlid;
	uint8_t sl;
	uint8_t src_path_bits;
	uint8_t static_rate;
	uint8_t is_global;
	uint8_t port_num;
};

/* An address handle: where a UD send goes (struct ibv_ah). */
struct ferry_ah {
	struct ferry_context *context;
	struct ferry_pd *pd;
	uint32_t handle;
};

struct ferry_qp_attr {
	enum ferry_qp_state qp_state;
	enum ferry_qp_state cur_qp_state;
	enum ferry_mtu path_mtu;
	uint32_t qkey;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qp_num;
	unsigned int qp_access_flags;
	struct ferry_qp_cap cap;
	struct ferry_ah_attr ah_attr;
	uint16_t pkey_index;
	uint8_t en_sqd_async_notify;
	uint8_t sq_draining;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint8_t min_rnr_timer;	/* IB encoding: 0 = 655.36 ms, 1 = 0.01 ms ... 31 = 491.52 ms */
	uint8_t port_num;
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t rnr_retry;	/* 0..6 retries, 7 = retry forever */
};

struct ferry_qp {
	struct ferry_context *context;
	void *qp_context;
	struct ferry_pd *pd;
	struct ferry_cq *send_cq;
	struct ferry_cq *recv_cq;
	uint32_t handle;
	uint32_t qp_num;
	enum ferry_qp_state state;
	enum ferry_qp_type qp_type;
	struct ferry_srq *srq;	/* the SRQ it was created on, or NULL */
};

enum ferry_wr_opcode {
	FERRY_WR_RDMA_WRITE,
	FERRY_WR_RDMA_WRITE_WITH_IMM,
	FERRY_WR_SEND,
	FERRY_WR_SEND_WITH_IMM,
	FERRY_WR_RDMA_READ,
	FERRY_WR_ATOMIC_CMP_AND_SWP,
	FERRY_WR_ATOMIC_FETCH_AND_ADD,
};

enum ferry_send_flags {
	FERRY_SEND_FENCE     = 1 << 0, /* wait for earlier READs/atomics */
	FERRY_SEND_SIGNALED  = 1 << 1, /* generate a completion */
	FERRY_SEND_SOLICITED = 1 << 2, /* wake a peer armed for solicited events */
	FERRY_SEND_INLINE    = 1 << 3, /* copy the payload at post time */
};

struct ferry_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct ferry_send_wr {
	uint64_t wr_id;
	struct ferry_send_wr *next;
	struct ferry_sge *sg_list;
	int num_sge;
	enum ferry_wr_opcode opcode;
	unsigned int send_flags;
	uint32_t imm_data;	/* network byte order */
	union {
		struct {
			uint64_t remote_addr;
			uint32_t rkey;
		} rdma;
		struct {
			uint64_t remote_addr;
			uint64_t compare_add;
			uint64_t swap;
			uint32_t rkey;
		} atomic;
		/* UD: the destination QP; a remote_qkey with its high bit
		 * set means the sending QP's own Q_Key (as ibverbs). */
		struct {
			struct ferry_ah *ah;
			uint32_t remote_qpn;
			uint32_t remote_qkey;
		} ud;
	} wr;
};

struct ferry_recv_wr {
	uint64_t wr_id;
	struct ferry_recv_wr *next;
	struct ferry_sge *sg_list;
	int num_sge;
};

/* How atomic the device's atomics are (enum ibv_atomic_cap). */
enum ferry_atomic_cap {
	FERRY_ATOMIC_NONE,	/* no atomics */
	FERRY_ATOMIC_HCA,	/* atomic among the device's own operations */
	FERRY_ATOMIC_GLOB,	/* atomic with the CPU's too */
};

/* Bits of ferry_device_attr.device_cap_flags (enum ibv_device_cap_flags). */
enum ferry_device_cap_flags {
	FERRY_DEVICE_RESIZE_MAX_WR	= 1 << 0,
	FERRY_DEVICE_BAD_PKEY_CNTR	= 1 << 1,
	FERRY_DEVICE_BAD_QKEY_CNTR	= 1 << 2,
	FERRY_DEVICE_RAW_MULTI		= 1 << 3,
	FERRY_DEVICE_AUTO_PATH_MIG	= 1 << 4,
	FERRY_DEVICE_CHANGE_PHY_PORT	= 1 << 5,
	FERRY_DEVICE_UD_AV_PORT_ENFORCE	= 1 << 6,
	FERRY_DEVICE_CURR_QP_STATE_MOD	= 1 << 7,
	FERRY_DEVICE_SHUTDOWN_PORT	= 1 << 8,
	FERRY_DEVICE_INIT_TYPE		= 1 << 9,
	FERRY_DEVICE_PORT_ACTIVE_EVENT	= 1 << 10,
	FERRY_DEVICE_SYS_IMAGE_GUID	= 1 << 11,
	FERRY_DEVICE_RC_RNR_NAK_GEN	= 1 << 12, /* RNR NAKs and retries */
	FERRY_DEVICE_SRQ_RESIZE		= 1 << 13,
	FERRY_DEVICE_N_NOTIFY_CQ	= 1 << 14,
	FERRY_DEVICE_MEM_WINDOW		= 1 << 17,
	FERRY_DEVICE_UD_IP_CSUM		= 1 << 18,
	FERRY_DEVICE_XRC		= 1 << 20,
	FERRY_DEVICE_MEM_MGT_EXTENSIONS	= 1 << 21,
};

/*
 * What a device reports (struct ibv_device_attr, same members in the same
 * order, then ferry's own).  Members about objects ferry does not have yet
 * (memory windows, multicast, EE contexts) are 0.
 */
struct ferry_device_attr {
	char fw_ver[64];
	uint64_t node_guid;		/* big-endian */
	uint64_t sys_image_guid;	/* big-endian */
	uint64_t max_mr_size;
	uint64_t page_size_cap;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	uint32_t hw_ver;
	int max_qp;
	int max_qp_wr;
	unsigned int device_cap_flags;	/* FERRY_DEVICE_* bits */
	int max_sge;
	int max_sge_rd;
	int max_cq;
	int max_cqe;
	int max_mr;
	int max_pd;
	int max_qp_rd_atom;
	int max_ee_rd_atom;
	int max_res_rd_atom;
	int max_qp_init_rd_atom;
	int max_ee_init_rd_atom;
	enum ferry_atomic_cap atomic_cap;
	int max_ee;
	int max_rdd;
	int max_mw;
	int max_raw_ipv6_qp;
	int max_raw_ethy_qp;
	int max_mcast_grp;
	int max_mcast_qp_attach;
	int max_total_mcast_qp_attach;
	int max_ah;
	int max_fmr;
	int max_map_per_fmr;
	int max_srq;
	int max_srq_wr;
	int max_srq_sge;
	uint16_t max_pkeys;
	uint8_t local_ca_ack_delay;
	uint8_t phys_port_cnt;
	/* ferry's own: the largest max_inline_data a QP may ask for. */
	uint32_t max_inline_data;
};

/* Input of ferry_query_device_ex (struct ibv_query_device_ex_input). */
struct ferry_query_device_ex_input {
	uint32_t comp_mask;	/* must be 0 */
};

/* On-demand paging (struct ibv_odp_caps): ferry reports none. */
struct ferry_odp_caps {
	uint64_t general_caps;
	struct {
		uint32_t rc_odp_caps;
		uint32_t uc_odp_caps;
		uint32_t ud_odp_caps;
	} per_transport_caps;
};

/*
 * The extended attributes (struct ibv_device_attr_ex) as far as they mean
 * something for ferry: its members up to device_cap_flags_ex in ibverbs'
 * order, then xrc_odp_caps and phys_port_cnt_ex.  ibverbs' TSO, RSS,
 * packet pacing, tag matching, CQ moderation, device memory and PCI
 * atomic capabilities are not there.
 */
struct ferry_device_attr_ex {
	struct ferry_device_attr orig_attr;
	uint32_t comp_mask;
	struct ferry_odp_caps odp_caps;
	uint64_t completion_timestamp_mask;
	uint64_t hca_core_clock;	/* kHz */
	uint64_t device_cap_flags_ex;
	uint32_t xrc_odp_caps;
	uint32_t phys_port_cnt_ex;
};

/* --- ports and their addresses --- */

enum ferry_port_state {
	FERRY_PORT_NOP		= 0,
	FERRY_PORT_DOWN		= 1,
	FERRY_PORT_INIT		= 2,
	FERRY_PORT_ARMED	= 3,
	FERRY_PORT_ACTIVE	= 4,
	FERRY_PORT_ACTIVE_DEFER	= 5,
};

enum {
	FERRY_LINK_LAYER_UNSPECIFIED,
	FERRY_LINK_LAYER_INFINIBAND,
	FERRY_LINK_LAYER_ETHERNET,
};

/* A port (struct ibv_port_attr, same members in the same order). */
struct ferry_port_attr {
	enum ferry_port_state state;
	enum ferry_mtu max_mtu;
	enum ferry_mtu active_mtu;
	int gid_tbl_len;
	uint32_t port_cap_flags;
	uint32_t max_msg_sz;
	uint32_t bad_pkey_cntr;
	uint32_t qkey_viol_cntr;
	uint16_t pkey_tbl_len;
	uint16_t lid;
	uint16_t sm_lid;
	uint8_t lmc;
	uint8_t max_vl_num;
	uint8_t sm_sl;
	uint8_t subnet_timeout;
	uint8_t init_type_reply;
	uint8_t active_width;
	uint8_t active_speed;
	uint8_t phys_state;
	uint8_t link_layer;	/* FERRY_LINK_LAYER_* */
	uint8_t flags;
	uint16_t port_cap_flags2;
};

/* --- devices and contexts --- */

/**
 * ferry_get_device_list - the devices of every built provider, shm first.
 * @num_devices_p: if not NULL, receives the number of devices.
 * Returns a NULL-terminated array to release with ferry_free_device_list.
 */
struct ferry_device **ferry_get_device_list(int *num_devices_p);
void ferry_free_device_list(struct ferry_device **list);
const char *ferry_get_device_name(struct ferry_device *device);
/** ferry_get_device_transport - provider name: "shm" or "verbs". */
const char *ferry_get_device_transport(struct ferry_device *device);

struct ferry_context *ferry_open_device(struct ferry_device *device);
/**
 * ferry_open_transport - open the first device of the named provider
 * ("shm", "verbs"), or the first device of all when @name is NULL.
 */
struct ferry_context *ferry_open_transport(const char *name);
int ferry_close_device(struct ferry_context *context);
int ferry_query_device(struct ferry_context *context,
		       struct ferry_device_attr *attr_p);
/** ferry_query_device_ex - @input may be NULL; its comp_mask must be 0. */
int ferry_query_device_ex(struct ferry_context *context,
			  const struct ferry_query_device_ex_input *input,
			  struct ferry_device_attr_ex *attr_p);
/**
 * ferry_query_port, ferry_query_gid, ferry_query_pkey - port @port_num's
 * attributes, GID table entry @index and P_Key table entry @index (the
 * P_Key in network byte order, as ibv_query_pkey gives it).  Ports count
 * from 1.  On shm the first query claims the process's LID (ferry(7)).
 */
int ferry_query_port(struct ferry_context *context, uint8_t port_num,
		     struct ferry_port_attr *port_attr_p);
int ferry_query_gid(struct ferry_context *context, uint8_t port_num, int index,
		    union ferry_gid *gid_p);
int ferry_query_pkey(struct ferry_context *context, uint8_t port_num, int index,
		     uint16_t *pkey_p);
const char *ferry_port_state_str(enum ferry_port_state state);

/* --- protection domains and memory --- */

struct ferry_pd *ferry_alloc_pd(struct ferry_context *context);
int ferry_dealloc_pd(struct ferry_pd *pd);

/**
 * ferry_alloc - allocate page-aligned memory that peers of this host can map.
 * Memory registered from it is reached by one-sided WRITE, READ and atomics
 * with plain loads and stores on the soft transport; other registered memory
 * goes through process_vm_readv/writev and does not support atomics.
 * Returns NULL with errno set on failure.  Release with ferry_free.
 */
void *ferry_alloc(size_t size);
void ferry_free(void *addr);

struct ferry_mr *ferry_reg_mr(struct ferry_pd *pd, void *addr, size_t length,
			      int access);
int ferry_dereg_mr(struct ferry_mr *mr);

/* --- completion channels and queues --- */

struct ferry_comp_channel *ferry_create_comp_channel(struct ferry_context *context);
int ferry_destroy_comp_channel(struct ferry_comp_channel *channel);

struct ferry_cq *ferry_create_cq(struct ferry_context *context, int cqe,
				 void *cq_context,
				 struct ferry_comp_channel *channel,
				 int comp_vector);
int ferry_destroy_cq(struct ferry_cq *cq);

/**
 * ferry_req_notify_cq - arm @cq: the next completion added to it (the next
 * solicited or error completion when @solicited_only) raises one event on its
 * channel.  Poll the CQ after arming to catch completions that came before.
 */
int ferry_req_notify_cq(struct ferry_cq *cq, int solicited_only);

/**
 * ferry_get_cq_event - wait for an event on @channel (or fail with EAGAIN
 * when its fd is non-blocking) and return the CQ and its context.
 * Each event must be acknowledged with ferry_ack_cq_events before the CQ
 * is destroyed.
 */
int ferry_get_cq_event(struct ferry_comp_channel *channel,
		       struct ferry_cq **cq_p, void **cq_context_p);
void ferry_ack_cq_events(struct ferry_cq *cq, unsigned int nevents);

int ferry_poll_cq(struct ferry_cq *cq, int num_entries, struct ferry_wc *wc);

/* --- address handles (UD) --- */

/**
 * ferry_create_ah - an address handle on @pd for UD sends to @attr's
 * destination.  NULL with errno: EINVAL (no such port, a LID out of the
 * unicast range), EOPNOTSUPP where the transport has no UD (tcp).
 * ferry_destroy_ah - release it; 0, or -1 with errno.
 */
struct ferry_ah *ferry_create_ah(struct ferry_pd *pd, struct ferry_ah_attr *attr);
int ferry_destroy_ah(struct ferry_ah *ah);

/* --- shared receive queues --- */

/**
 * ferry_create_srq - a shared receive queue on @pd holding up to
 * attr.max_wr receives of attr.max_sge SGEs each (attr is updated with
 * what was granted).  QPs created with init_attr.srq set take their
 * receives from it; ferry_post_recv on them fails with EINVAL.
 */
struct ferry_srq *ferry_create_srq(struct ferry_pd *pd,
				   struct ferry_srq_init_attr *init_attr);
/**
 * ferry_modify_srq - FERRY_SRQ_LIMIT arms the limit event: once the number
 * of WRs posted to @srq drops below attr->srq_limit, one
 * FERRY_EVENT_SRQ_LIMIT_REACHED is raised and the limit goes back to 0
 * until armed again.  EINVAL when srq_limit > max_wr.  FERRY_SRQ_MAX_WR
 * resizes it (where FERRY_DEVICE_SRQ_RESIZE is set).
 */
int ferry_modify_srq(struct ferry_srq *srq, struct ferry_srq_attr *attr,
		     int attr_mask);
int ferry_query_srq(struct ferry_srq *srq, struct ferry_srq_attr *attr_p);
/** ferry_destroy_srq - EBUSY while QPs created on it exist. */
int ferry_destroy_srq(struct ferry_srq *srq);
int ferry_post_srq_recv(struct ferry_srq *srq, struct ferry_recv_wr *wr,
			struct ferry_recv_wr **bad_wr_p);

/* --- asynchronous events (enum ibv_event_type, same values) --- */

enum ferry_event_type {
	FERRY_EVENT_CQ_ERR,
	FERRY_EVENT_QP_FATAL,
	FERRY_EVENT_QP_REQ_ERR,
	FERRY_EVENT_QP_ACCESS_ERR,
	FERRY_EVENT_COMM_EST,
	FERRY_EVENT_SQ_DRAINED,
	FERRY_EVENT_PATH_MIG,
	FERRY_EVENT_PATH_MIG_ERR,
	FERRY_EVENT_DEVICE_FATAL,
	FERRY_EVENT_PORT_ACTIVE,
	FERRY_EVENT_PORT_ERR,
	FERRY_EVENT_LID_CHANGE,
	FERRY_EVENT_PKEY_CHANGE,
	FERRY_EVENT_SM_CHANGE,
	FERRY_EVENT_SRQ_ERR,
	FERRY_EVENT_SRQ_LIMIT_REACHED,
	FERRY_EVENT_QP_LAST_WQE_REACHED,
	FERRY_EVENT_CLIENT_REREGISTER,
	FERRY_EVENT_GID_CHANGE,
	FERRY_EVENT_WQ_FATAL,
};

struct ferry_async_event {
	union {
		struct ferry_cq *cq;
		struct ferry_qp *qp;
		struct ferry_srq *srq;
		int port_num;
	} element;
	enum ferry_event_type event_type;
};

/**
 * ferry_get_async_event - the next asynchronous event of @context: waits
 * for one while its async_fd is blocking, else fails with EAGAIN.  Each
 * event is acknowledged with ferry_ack_async_event.  Destroying an object
 * drops its events not yet got.
 */
int ferry_get_async_event(struct ferry_context *context,
			  struct ferry_async_event *event);
void ferry_ack_async_event(struct ferry_async_event *event);
/** ferry_event_type_str - the text libibverbs gives the same event. */
const char *ferry_event_type_str(enum ferry_event_type event);

/* --- queue pairs --- */

struct ferry_qp *ferry_create_qp(struct ferry_pd *pd,
				 struct ferry_qp_init_attr *init_attr);
int ferry_modify_qp(struct ferry_qp *qp, struct ferry_qp_attr *attr,
		    int attr_mask);
int ferry_query_qp(struct ferry_qp *qp, struct ferry_qp_attr *attr,
		   int attr_mask, struct ferry_qp_init_attr *init_attr);
int ferry_destroy_qp(struct ferry_qp *qp);

int ferry_post_send(struct ferry_qp *qp, struct ferry_send_wr *wr,
		    struct ferry_send_wr **bad_wr_p);
int ferry_post_recv(struct ferry_qp *qp, struct ferry_recv_wr *wr,
		    struct ferry_recv_wr **bad_wr_p);

/**
 * ferry_qp_exchange - connect @qp to the QP at the other end of @sock, an
 * AF_UNIX SOCK_SEQPACKET socket, by exchanging QP numbers, PSNs, keys and
 * shared-memory and eventfd descriptors (SCM_RIGHTS).  Both ends call it with
 * their QP in INIT; afterwards each end moves its QP to RTR (dest_qp_num = the
 * peer's QP number, stored in *peer_qp_num_p) and RTS as ibverbs requires.
 * ferry keeps @sock (a dup of it) open for the life of the QP: its hang-up is
 * how a dead peer is noticed.  The shm provider passes shared memory and
 * eventfds over it; the verbs provider passes QP number, PSN, LID, GID and
 * MTU (both ends on one host, as in the Soft-RoCE tests).  Across hosts,
 * use the connection manager (<ferry/cm.h>).
 */
int ferry_qp_exchange(struct ferry_qp *qp, int sock, uint32_t *peer_qp_num_p);

/**
 * ferry_qp_connect_sock - convenience: ferry_qp_exchange, then the INIT ->
 * RTR -> RTS transitions with ferry's defaults (rnr_retry 7, min_rnr_timer
 * 1).  A QP in RESET is first moved to INIT with @access as its access
 * flags; a QP already in INIT keeps its own.
 */
int ferry_qp_connect_sock(struct ferry_qp *qp, int sock, int access);

const char *ferry_wc_status_str(enum ferry_wc_status status);
const char *ferry_qp_state_str(enum ferry_qp_state state);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_VERBS_H */
