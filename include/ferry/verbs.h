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
struct ferry_context;

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
	FERRY_WC_GRH      = 1 << 0, /* never set by ferry */
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
	FERRY_QPT_RC = 2,	/* the only type ferry supports */
};

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

struct ferry_qp_init_attr {
	void *qp_context;
	struct ferry_cq *send_cq;
	struct ferry_cq *recv_cq;
	void *srq;		/* must be NULL: no SRQ yet */
	struct ferry_qp_cap cap;
	enum ferry_qp_type qp_type;
	int sq_sig_all;		/* every send WR generates a completion */
};

/* Address vector; the soft transport ignores it but keeps what it was given. */
struct ferry_ah_attr {
	uint16_t dlid;
	uint8_t sl;
	uint8_t src_path_bits;
	uint8_t static_rate;
	uint8_t is_global;
	uint8_t port_num;
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
	} wr;
};

struct ferry_recv_wr {
	uint64_t wr_id;
	struct ferry_recv_wr *next;
	struct ferry_sge *sg_list;
	int num_sge;
};

/* Limits a device reports (subset of ibv_device_attr). */
struct ferry_device_attr {
	uint64_t max_mr_size;
	uint32_t max_qp;
	uint32_t max_qp_wr;
	uint32_t max_sge;
	uint32_t max_cq;
	uint32_t max_cqe;
	uint32_t max_mr;
	uint32_t max_pd;
	uint32_t max_inline_data;
	uint8_t max_qp_rd_atom;
	uint8_t atomic_cap;	/* 1: atomics are atomic between all processes of the host */
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
