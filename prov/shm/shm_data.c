/*
 * shm_data.c - the shm data path: post_send executes work requests at once
 * (one-sided copies, receive consumption, deliveries), post_recv publishes
 * receives, shm_poll_recv turns the peer's deliveries into completions.
 *
 * Trust: the peer's MR table, region and notify word are read through
 * read-only mappings and may change under us at any time, so each value is
 * loaded once into a local, checked, and only the local is used.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "shm-internal.h"
#include "shm-ud.h"

/* Internal verdicts of shm_execute beside the ferry_wc_status values. */
#define SHM_EXEC_RNR		(-1)	/* no receive posted: wait and retry */
#define SHM_EXEC_WAIT		(-2)	/* the peer's staging ring is full: wait for room,
					 * keeping what was staged (qp->bounce_done) */
/* A WR of ferry_post_send_direct: done whole at once, or not at all. */
#define SHM_SWQE_WHOLE		(1u << 30)

/* A piece of memory: here (ptr) or in the peer, reached through shm_peer.c (vaddr). */
struct shm_seg {
	uint8_t *ptr;
	uint64_t vaddr;
	uint64_t len;
};

/* --- copying --- */

/*
 * Payloads up to this size are stored into the target byte by byte once,
 * in address order (shm_store_once); larger ones with memcpy.
 */
#define SHM_STORE_ONCE_MAX	64

/*
 * shm_store_once - copy a small payload into memory a peer may be reading
 * and writing at the same time, storing each byte exactly once, in address
 * order, 8 bytes at a time.
 *
 * memcpy may store a byte twice: glibc's copies of 16 to 31 bytes load the
 * first and the last 16 and store both, and for 16 exactly both stores
 * cover the whole of it.  rsocket's target SGL entry is such a payload: the
 * receiver RDMA-writes {addr, key, length} into the sender's memory, the
 * sender sees the new length, writes into the buffer and moves the entry
 * on (addr += n, length -= n) in that same memory.  When the writer was
 * preempted between its two stores, the second one landed after the
 * sender's update and put the entry back as published: the sender's next
 * write went over the data it had just written there, and every byte after
 * it sat one write earlier in the ring than the receiver looked for it (a
 * socat relay received a file of the right length with an 8 KiB piece gone
 * at a ring boundary and stale ring bytes at the end).  Stored once, in
 * order, the last word (the entry's key and length) goes last and nothing
 * follows it.
 */
typedef uint64_t __attribute__((aligned(1), may_alias)) shm_u64_any;	/* any address */

static void shm_store_once(uint8_t *dst, const uint8_t *src, size_t len)
{
	size_t i = 0;
	uint64_t w;

	/* One volatile store per word (a ring position need not be aligned);
	 * the fences keep them in address order. */
	for (; i + 8 <= len; i += 8) {
		memcpy(&w, src + i, 8);
		atomic_thread_fence(memory_order_release);
		*(volatile shm_u64_any *)(void *)(dst + i) = w;
	}
	for (; i < len; i++) {
		atomic_thread_fence(memory_order_release);
		*(volatile uint8_t *)(dst + i) = src[i];
	}
}

/*
 * shm_store_nocache - copy a payload with stores that go past our caches
 * to memory, invalidating every cached copy of the lines on their way, and
 * make them visible before anything stored after (the completion).  For a
 * stream whose reader runs on a CPU far from ours, a plain store must first
 * take each line back from the reader's cache, one round trip at a time;
 * these do not wait for that (see ferry_post_send_direct).  Where there
 * are no such stores (not x86-64: SSE2 is part of that), plain ones.
 */
static void shm_store_nocache(uint8_t *dst, const uint8_t *src, size_t len)
{
#if defined(__x86_64__)
	size_t head = (16 - ((uintptr_t)dst & 15)) & 15, i;

	if (head > len)
		head = len;
	memcpy(dst, src, head);
	dst += head;
	src += head;
	len -= head;
	for (i = 0; i + 64 <= len; i += 64) {
		__m128i a = _mm_loadu_si128((const void *)(src + i));
		__m128i b = _mm_loadu_si128((const void *)(src + i + 16));
		__m128i c = _mm_loadu_si128((const void *)(src + i + 32));
		__m128i d = _mm_loadu_si128((const void *)(src + i + 48));

		_mm_stream_si128((void *)(dst + i), a);
		_mm_stream_si128((void *)(dst + i + 16), b);
		_mm_stream_si128((void *)(dst + i + 32), c);
		_mm_stream_si128((void *)(dst + i + 48), d);
	}
	memcpy(dst + i, src + i, len - i);
	_mm_sfence();	/* streaming stores are not ordered with later ones */
#else
	memcpy(dst, src, len);
#endif
}

/* Copy @len bytes of a payload into mapped target memory. */
static inline void shm_store(uint8_t *dst, const uint8_t *src, size_t len, bool nocache)
{
	if (len <= SHM_STORE_ONCE_MAX)
		shm_store_once(dst, src, len);
	else if (nocache)
		shm_store_nocache(dst, src, len);
	else
		memcpy(dst, src, len);
}

/*
 * shm_copy - move bytes between local segments and target segments (mapped
 * here, or in @conn's peer process: shm_peer.c).  @to_target: local ->
 * target, else the reverse; @nocache: stores into mapped targets go past
 * our caches (shm_store).  Returns 0, or an errno (EPERM: the peer's memory
 * is out of reach; ESRCH: it exited).
 */
static int shm_copy(struct shm_conn *conn, const struct shm_seg *loc, int nloc,
		    const struct shm_seg *tgt, int ntgt, bool to_target, bool nocache)
{
	int li = 0, ti;
	uint64_t loff = 0;

	/* The common case: one piece each side, the target mapped here. */
	if (nloc == 1 && ntgt == 1 && tgt[0].ptr && loc[0].len == tgt[0].len) {
		if (to_target)
			shm_store(tgt[0].ptr, loc[0].ptr, loc[0].len, nocache);
		else
			memcpy(loc[0].ptr, tgt[0].ptr, loc[0].len);
		return 0;
	}

	for (ti = 0; ti < ntgt; ti++) {
		uint64_t toff = 0;

		while (toff < tgt[ti].len && li < nloc) {
			struct iovec liov[SHM_MAX_SGE];
			int n = 0;
			uint64_t chunk = 0;

			/* Pieces of local memory that fill this target segment. */
			while (li < nloc && toff + chunk < tgt[ti].len && n < (int)SHM_MAX_SGE) {
				uint64_t take = loc[li].len - loff;

				if (take > tgt[ti].len - toff - chunk)
					take = tgt[ti].len - toff - chunk;
				liov[n].iov_base = loc[li].ptr + loff;
				liov[n++].iov_len = take;
				chunk += take;
				loff += take;
				if (loff == loc[li].len) {
					li++;
					loff = 0;
				}
			}
			if (tgt[ti].ptr) {
				uint8_t *t = tgt[ti].ptr + toff;
				int k;

				for (k = 0; k < n; k++) {
					if (to_target)
						shm_store(t, liov[k].iov_base, liov[k].iov_len,
							  nocache);
					else
						memcpy(liov[k].iov_base, t, liov[k].iov_len);
					t += liov[k].iov_len;
				}
			} else if (chunk) {
				ssize_t r;

				r = shm_peer_rw(conn, to_target, liov, n, tgt[ti].vaddr + toff);
				if (r != (ssize_t)chunk)
					return r < 0 ? errno : EFAULT;
			}
			toff += chunk;
		}
	}
	return 0;
}

/* --- keys --- */

/* Does @op carry a payload from the initiator (so INLINE applies)? */
static inline bool shm_op_carries_data(enum ferry_wr_opcode op)
{
	return op <= FERRY_WR_SEND_WITH_IMM;
}

/*
 * The initiator's memory of @s: its inline copy, or the SGEs @sge (the
 * slot's, or the caller's own list when executed straight from post_send).
 * An inline payload's lkeys are not checked, as in ibverbs.
 */
static enum ferry_wc_status shm_local_segs(struct shm_qp *qp, const struct shm_swqe *s,
					   const struct ferry_sge *sge, bool write,
					   struct shm_seg *segs, uint64_t *total_p)
{
	struct shm_pd *spd = to_spd(qp->qp.pd);
	bool check = !((s->flags & FERRY_SEND_INLINE) && shm_op_carries_data(s->opcode));
	uint64_t total = 0;
	uint32_t i;

	if (s->inline_len) {
		segs[0] = (struct shm_seg){ .ptr = shm_swqe_inline(qp, s), .len = s->inline_len };
		*total_p = s->inline_len;
		return FERRY_WC_SUCCESS;
	}
	for (i = 0; i < s->num_sge; i++) {
		const struct ferry_sge *g = &sge[i];
		const struct shm_mr_entry *e;

		segs[i] = (struct shm_seg){ .ptr = (uint8_t *)(uintptr_t)g->addr, .len = g->length };
		total += g->length;
		if (g->length == 0 || !check)
			continue;
		e = shm_mr_lookup_local(spd, g->lkey);
		if (!e || g->addr < e->addr || g->addr - e->addr > e->length ||
		    g->length > e->length - (g->addr - e->addr) ||
		    (write && !(e->access & FERRY_ACCESS_LOCAL_WRITE)))
			return FERRY_WC_LOC_PROT_ERR;
	}
	if (total > 0x80000000ull)
		return FERRY_WC_LOC_LEN_ERR;
	*total_p = total;
	return FERRY_WC_SUCCESS;
}

/*
 * shm_remote_resolve - check @rkey, bounds and @need access against the
 * peer's MR table and say where [raddr, raddr+len) is.
 */
static enum ferry_wc_status shm_remote_resolve(struct shm_conn *conn, uint32_t rkey,
					       uint64_t raddr, uint64_t len, uint32_t need,
					       struct shm_seg *seg)
{
	const struct shm_region *pr = conn->peer_region;

	const struct shm_mr_entry *e = shm_conn_peer_entry(conn, SHM_KEY_INDEX(rkey));
	uint64_t addr, length, block_id, block_off, off;
	uint32_t access;
	struct shm_mapping *map;

	if (!e)
		return FERRY_WC_REM_ACCESS_ERR;
	/* The rkey we used last: still registered (its slot still holds it)? */
	if (rkey == conn->rkey_cached &&
	    atomic_load_explicit(&e->rkey, memory_order_acquire) == rkey &&
	    (atomic_load_explicit(&pr->qp_access, memory_order_relaxed) & need) == need) {
		if (raddr < conn->rkey_addr || raddr - conn->rkey_addr > conn->rkey_length ||
		    len > conn->rkey_length - (raddr - conn->rkey_addr) ||
		    (conn->rkey_access & need) != need)
			return FERRY_WC_REM_ACCESS_ERR;
		seg->len = len;
		seg->ptr = conn->rkey_base + (raddr - conn->rkey_addr);
		return FERRY_WC_SUCCESS;
	}

	/* The target QP must allow the operation, as must the MR. */
	if ((atomic_load_explicit(&pr->qp_access, memory_order_relaxed) & need) != need)
		return FERRY_WC_REM_ACCESS_ERR;
	if (atomic_load_explicit(&e->rkey, memory_order_acquire) != rkey)
		return FERRY_WC_REM_ACCESS_ERR;
	access = __atomic_load_n(&e->access, __ATOMIC_RELAXED);
	addr = __atomic_load_n(&e->addr, __ATOMIC_RELAXED);
	length = __atomic_load_n(&e->length, __ATOMIC_RELAXED);
	block_id = __atomic_load_n(&e->block_id, __ATOMIC_RELAXED);
	block_off = __atomic_load_n(&e->block_offset, __ATOMIC_RELAXED);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&e->rkey, memory_order_relaxed) != rkey)
		return FERRY_WC_REM_ACCESS_ERR;	/* deregistered meanwhile */
	if (raddr < addr || raddr - addr > length || len > length - (raddr - addr) ||
	    (access & need) != need)
		return FERRY_WC_REM_ACCESS_ERR;
	seg->len = len;
	if (!block_id) {
		seg->ptr = NULL;
		seg->vaddr = raddr;
		return FERRY_WC_SUCCESS;
	}
	map = shm_conn_peer_block(conn, block_id);
	off = block_off + (raddr - addr);
	if (!map || off < block_off || off > map->size || len > map->size - off) {
		ferry_info("rkey 0x%x: the peer's memory window %llu is not mapped here",
			   rkey, (unsigned long long)block_id);
		return FERRY_WC_REM_ACCESS_ERR;
	}
	/* The peer decides what it lets us map writable, whatever its table says. */
	if (!(map->prot & PROT_WRITE)) {
		access &= FERRY_ACCESS_REMOTE_READ;
		if (need != FERRY_ACCESS_REMOTE_READ) {
			ferry_info("rkey 0x%x: the peer's window %llu is read-only", rkey,
				   (unsigned long long)block_id);
			return FERRY_WC_REM_ACCESS_ERR;
		}
	}
	seg->ptr = (uint8_t *)map->addr + off;
	/* Cache only what the window mapping fully covers. */
	if (block_off <= map->size && length <= map->size - block_off) {
		conn->rkey_cached = rkey;
		conn->rkey_access = access;
		conn->rkey_addr = addr;
		conn->rkey_length = length;
		conn->rkey_base = (uint8_t *)map->addr + block_off;
	}
	return FERRY_WC_SUCCESS;
}

/* --- the peer's receives --- */

/*
 * How many receives the peer has posted that we have not consumed; -1:
 * bogus.  The peer's counter is read only when the credits we already know
 * of run out: its cache line is the one the peer writes on every post_recv.
 */
static int64_t shm_peer_recvs(struct shm_qp *qp, struct shm_conn *conn)
{
	const struct shm_region *pr = conn->peer_region;
	uint64_t avail = qp->peer_rq_known - qp->dq_seq;

	if (avail)
		return (int64_t)avail;
	qp->peer_rq_known = atomic_load_explicit(&pr->rq_prod, memory_order_acquire);
	avail = qp->peer_rq_known - qp->dq_seq;
	if (avail > conn->peer_rq_size) {
		qp->peer_rq_known = qp->dq_seq;
		return -1;
	}
	return (int64_t)avail;
}

/*
 * Translate the peer's receive number qp->dq_seq into target segments; a
 * bounced one (*bounce_p) has lengths only: its bytes go through our
 * staging ring (shm_bounce_stage), on a connection that has one.
 */
static enum ferry_wc_status shm_peer_recv_segs(struct shm_qp *qp, struct shm_conn *conn,
					       struct shm_seg *segs, int *nseg_p,
					       uint64_t *cap_p, bool *bounce_p)
{
	uint8_t *ent = shm_rq_entry((uint8_t *)conn->peer_region, conn->peer_rq_stride,
				    conn->peer_rq_size, qp->dq_seq);
	uint32_t count = __atomic_load_n((uint32_t *)ent, __ATOMIC_RELAXED), i;
	const struct shm_rsge *rs = (const struct shm_rsge *)(ent + 8);
	uint64_t cap = 0;

	*bounce_p = count & SHM_RQ_BOUNCE;
	count &= ~SHM_RQ_BOUNCE;
	if (count > conn->peer_rq_sge || (*bounce_p && !qp->bounce))
		return FERRY_WC_REM_OP_ERR;
	for (i = 0; i < count; i++) {
		struct shm_rsge g;
		struct shm_mapping *map;

		memcpy(&g, &rs[i], sizeof(g));
		if (g.length > 0x80000000ull)
			return FERRY_WC_REM_OP_ERR;
		segs[i] = (struct shm_seg){ .vaddr = g.addr, .len = g.length };
		cap += g.length;
		if (!g.block_id || !g.length || *bounce_p)
			continue;
		map = shm_conn_peer_block(conn, g.block_id);
		if (!map || !(map->prot & PROT_WRITE) || g.addr > map->size ||
		    g.length > map->size - g.addr)
			return FERRY_WC_REM_OP_ERR;
		segs[i].ptr = (uint8_t *)map->addr + g.addr;
	}
	*nseg_p = (int)count;
	*cap_p = cap;
	return FERRY_WC_SUCCESS;
}

/* Tell the peer's CQ, if it is armed for this kind of completion. */
static void shm_notify_peer(struct shm_qp *qp, struct shm_conn *conn, bool solicited_or_error)
{
	const struct shm_notify *n = conn->peer_notify;
	bool chan, futex;
	uint64_t w;
	uint32_t mode;

	/* Pairs with the seq_cst store of ferry_req_notify_cq: either we see the
	 * arm, or the peer's poll after arming sees our delivery. */
	atomic_thread_fence(memory_order_seq_cst);
	w = atomic_load_explicit(&n->word, memory_order_relaxed);
	mode = SHM_NOTIFY_MODE(w);
	chan = mode == SHM_NOTIFY_ALL || (mode == SHM_NOTIFY_SOLICITED && solicited_or_error);
	futex = w & SHM_NOTIFY_FUTEX;
	if ((!chan && !futex) || SHM_NOTIFY_GEN(w) == conn->last_signalled_gen)
		return;
	conn->last_signalled_gen = SHM_NOTIFY_GEN(w);
	if (futex && qp->region) {
		atomic_fetch_add(&qp->region->wake_seq, 1);
		syscall(SYS_futex, &qp->region->wake_seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	}
	if (chan && (w & SHM_NOTIFY_CONN))
		shm_conn_wake(conn);
	else if (chan)
		shm_wake(&conn->peer_wake);
}

/* Record that we consumed the peer's receive qp->dq_seq. */
static void shm_deliver_as(struct shm_qp *qp, struct shm_conn *conn, uint32_t opcode,
			   uint32_t status, uint32_t byte_len, const struct shm_swqe *s,
			   uint32_t flags)
{
	struct shm_delivery *d = conn->my_dq - (qp->dq_seq & (conn->peer_rq_size - 1));
	bool with_imm = s->opcode == FERRY_WR_SEND_WITH_IMM ||
			s->opcode == FERRY_WR_RDMA_WRITE_WITH_IMM;
	bool solicited = s->flags & FERRY_SEND_SOLICITED;

	d->opcode = opcode;
	d->status = status;
	d->byte_len = byte_len;
	d->imm_data = s->imm_data;
	d->flags = (with_imm ? SHM_DELIVERY_IMM : 0) | (solicited ? SHM_DELIVERY_SOLICITED : 0) |
		   flags;
	atomic_store_explicit(&d->seq, ++qp->dq_seq, memory_order_release);
	shm_notify_peer(qp, conn, solicited || status != FERRY_WC_SUCCESS);
}

static inline void shm_deliver(struct shm_qp *qp, struct shm_conn *conn, uint32_t opcode,
			       uint32_t status, uint32_t byte_len, const struct shm_swqe *s)
{
	shm_deliver_as(qp, conn, opcode, status, byte_len, s, 0);
}

/* --- bounced SENDs: staging --- */

/* Copy bytes [@off, @off + @len) of the payload in @loc to @dst. */
static void shm_segs_gather(uint8_t *dst, const struct shm_seg *loc, int nloc, uint64_t off,
			    uint64_t len)
{
	int i;

	for (i = 0; i < nloc && len; i++) {
		uint64_t take;

		if (off >= loc[i].len) {
			off -= loc[i].len;
			continue;
		}
		take = loc[i].len - off;
		if (take > len)
			take = len;
		memcpy(dst, loc[i].ptr + off, take);
		dst += take;
		len -= take;
		off = 0;
	}
}

static inline uint64_t shm_bounce_rec_size(uint64_t len)
{
	return sizeof(struct shm_bounce_rec) + ((len + 15) & ~15ull);
}

/*
 * Stage one record of the payload from qp->bounce_done on, in the room
 * the ring has before its end (a record never wraps; one that would have
 * no room for a byte there takes what is left, empty, and the next starts
 * over at the beginning).  false: no room for a record now.
 */
static bool shm_bounce_put(struct shm_qp *qp, const struct shm_seg *loc, int nloc,
			   uint64_t total, uint64_t room)
{
	uint64_t pos = qp->bounce_prod & (SHM_BOUNCE_SIZE - 1);
	uint64_t tail = SHM_BOUNCE_SIZE - pos, fit = room < tail ? room : tail;
	struct shm_bounce_rec h = { .recv = qp->dq_seq, .off = (uint32_t)qp->bounce_done };
	uint64_t n = total - qp->bounce_done;

	if (fit <= sizeof(h) && !(fit == sizeof(h) && tail == sizeof(h)))
		return false;
	if (n > fit - sizeof(h))
		n = fit - sizeof(h);
	h.len = (uint32_t)n;
	memcpy(qp->bounce_ring + pos, &h, sizeof(h));
	shm_segs_gather(qp->bounce_ring + pos + sizeof(h), loc, nloc, qp->bounce_done, n);
	qp->bounce_done += n;
	qp->bounce_prod += n ? shm_bounce_rec_size(n) : tail;
	return true;
}

/*
 * shm_bounce_stage - put the rest of @s's payload (from qp->bounce_done
 * on) in records in our staging ring, for the peer to copy into its
 * receive qp->dq_seq.  FERRY_WC_SUCCESS once all of it is staged;
 * SHM_EXEC_WAIT when the ring fills first (the peer has not taken enough
 * yet); SHM_EXEC_RNR with nothing done for a WR that must go whole
 * (SHM_SWQE_WHOLE) and does not fit now.
 */
static int shm_bounce_stage(struct shm_qp *qp, struct shm_conn *conn, const struct shm_swqe *s,
			    const struct shm_seg *loc, int nloc, uint64_t total)
{
	uint64_t cons = atomic_load_explicit(&conn->peer_region->bounce_cons, memory_order_acquire);
	uint64_t start = qp->bounce_prod, used = qp->bounce_prod - cons;

	if (used > SHM_BOUNCE_SIZE)
		return FERRY_WC_REM_OP_ERR;	/* the peer took more than we put */
	if ((s->flags & SHM_SWQE_WHOLE) && qp->bounce_done == 0 &&
	    shm_bounce_rec_size(total) + sizeof(struct shm_bounce_rec) > SHM_BOUNCE_SIZE - used)
		return SHM_EXEC_RNR;
	while (qp->bounce_done < total &&
	       shm_bounce_put(qp, loc, nloc, total, SHM_BOUNCE_SIZE - (qp->bounce_prod - cons)))
		;
	if (qp->bounce_prod != start) {
		atomic_store_explicit(&qp->region->bounce_prod, qp->bounce_prod,
				      memory_order_release);
		qp->bounce_retry_ns = 0;	/* the peer takes: look again soon */
	}
	return qp->bounce_done < total ? SHM_EXEC_WAIT : FERRY_WC_SUCCESS;
}

/* --- execution --- */

static int shm_exec_send(struct shm_qp *qp, struct shm_conn *conn, const struct shm_swqe *s,
			 const struct shm_seg *loc, int nloc, uint64_t total)
{
	struct shm_seg tgt[SHM_MAX_SGE];
	uint64_t cap;
	int ntgt, err;
	enum ferry_wc_status st;
	bool bounce;

	st = shm_peer_recv_segs(qp, conn, tgt, &ntgt, &cap, &bounce);
	if (st != FERRY_WC_SUCCESS)
		return st;
	if (total > cap) {
		shm_deliver(qp, conn, FERRY_WC_RECV, FERRY_WC_LOC_LEN_ERR, 0, s);
		return FERRY_WC_REM_INV_REQ_ERR;
	}
	if (bounce) {
		err = shm_bounce_stage(qp, conn, s, loc, nloc, total);
		if (err != FERRY_WC_SUCCESS)
			return err;
		shm_deliver_as(qp, conn, FERRY_WC_RECV, FERRY_WC_SUCCESS, (uint32_t)total, s,
			       SHM_DELIVERY_BOUNCE);
		return FERRY_WC_SUCCESS;
	}
	err = shm_copy(conn, loc, nloc, tgt, ntgt, true, s->flags & SHM_SWQE_NOCACHE);
	if (err) {
		ferry_info("QP %u: SEND into the peer's receive failed: %s",
			   qp->qp.qp_num, strerror(err));
		return err == ESRCH ? FERRY_WC_RETRY_EXC_ERR : FERRY_WC_REM_OP_ERR;
	}
	shm_deliver(qp, conn, FERRY_WC_RECV, FERRY_WC_SUCCESS, (uint32_t)total, s);
	return FERRY_WC_SUCCESS;
}

static int shm_exec_rdma(struct shm_qp *qp, struct shm_conn *conn, const struct shm_swqe *s,
			 const struct shm_seg *loc, int nloc, uint64_t total)
{
	bool read = s->opcode == FERRY_WR_RDMA_READ;
	struct shm_seg tgt;
	enum ferry_wc_status st;
	int err;

	if (total == 0)
		return FERRY_WC_SUCCESS;	/* zero-length: no key check, as IB */
	st = shm_remote_resolve(conn, s->rkey, s->remote_addr, total,
				read ? FERRY_ACCESS_REMOTE_READ : FERRY_ACCESS_REMOTE_WRITE, &tgt);
	if (st != FERRY_WC_SUCCESS)
		return st;
	err = shm_copy(conn, loc, nloc, &tgt, 1, !read, s->flags & SHM_SWQE_NOCACHE);
	if (err) {
		ferry_info("QP %u: RDMA %s at 0x%llx in pid %d: %s", qp->qp.qp_num,
			   read ? "READ" : "WRITE", (unsigned long long)s->remote_addr,
			   (int)conn->peer_pid, strerror(err));
		return err == ESRCH ? FERRY_WC_RETRY_EXC_ERR : FERRY_WC_REM_ACCESS_ERR;
	}
	return FERRY_WC_SUCCESS;
}

static int shm_exec_atomic(struct shm_qp *qp, struct shm_conn *conn, const struct shm_swqe *s,
			   const struct shm_seg *loc, uint64_t total)
{
	struct shm_seg tgt;
	enum ferry_wc_status st;
	uint64_t old;

	if (total != 8)
		return FERRY_WC_LOC_LEN_ERR;
	if (s->remote_addr & 7)
		return FERRY_WC_REM_INV_REQ_ERR;
	st = shm_remote_resolve(conn, s->rkey, s->remote_addr, 8, FERRY_ACCESS_REMOTE_ATOMIC, &tgt);
	if (st != FERRY_WC_SUCCESS)
		return st;
	if (!tgt.ptr) {
		ferry_info("QP %u: atomic target is not ferry_alloc memory: the shm "
			   "transport cannot make it atomic", qp->qp.qp_num);
		return FERRY_WC_REM_OP_ERR;
	}
	if (s->opcode == FERRY_WR_ATOMIC_FETCH_AND_ADD) {
		old = __atomic_fetch_add((uint64_t *)tgt.ptr, s->compare_add, __ATOMIC_SEQ_CST);
	} else {
		old = s->compare_add;
		__atomic_compare_exchange_n((uint64_t *)tgt.ptr, &old, s->swap, false,
					    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	}
	memcpy(loc[0].ptr, &old, 8);
	return FERRY_WC_SUCCESS;
}

/*
 * shm_execute - carry out @s (gathering from @sge unless it is inline).
 * Returns a ferry_wc_status, or SHM_EXEC_RNR when it needs a receive the
 * peer has not posted yet (nothing was done then).
 */
static int shm_execute(struct shm_qp *qp, const struct shm_swqe *s,
		       const struct ferry_sge *sge, uint64_t *total_p)
{
	struct shm_conn *conn = qp->conn;
	const struct shm_region *pr;
	struct shm_seg loc[SHM_MAX_SGE];
	bool atomic = s->opcode == FERRY_WR_ATOMIC_CMP_AND_SWP ||
		      s->opcode == FERRY_WR_ATOMIC_FETCH_AND_ADD;
	bool needs_recv = s->opcode == FERRY_WR_SEND || s->opcode == FERRY_WR_SEND_WITH_IMM ||
			  s->opcode == FERRY_WR_RDMA_WRITE_WITH_IMM;
	int nloc = s->inline_len ? 1 : (int)s->num_sge;
	enum ferry_wc_status st;
	int64_t avail;
	int ret;

	if (!conn || conn->dead)
		return FERRY_WC_RETRY_EXC_ERR;
	pr = conn->peer_region;
	if (atomic_load_explicit(&pr->in_error, memory_order_relaxed))
		return FERRY_WC_RETRY_EXC_ERR;
	st = shm_local_segs(qp, s, sge, s->opcode == FERRY_WR_RDMA_READ || atomic, loc, total_p);
	if (st != FERRY_WC_SUCCESS)
		return st;
	if (needs_recv) {
		avail = shm_peer_recvs(qp, conn);
		if (avail < 0)
			return FERRY_WC_REM_OP_ERR;
		if (avail == 0)
			return SHM_EXEC_RNR;
	}
	switch (s->opcode) {
	case FERRY_WR_SEND:
	case FERRY_WR_SEND_WITH_IMM:
		return shm_exec_send(qp, conn, s, loc, nloc, *total_p);
	case FERRY_WR_RDMA_WRITE_WITH_IMM:
		ret = shm_exec_rdma(qp, conn, s, loc, nloc, *total_p);
		if (ret == FERRY_WC_SUCCESS)
			shm_deliver(qp, conn, FERRY_WC_RECV_RDMA_WITH_IMM, FERRY_WC_SUCCESS,
				    (uint32_t)*total_p, s);
		return ret;
	case FERRY_WR_RDMA_WRITE:
	case FERRY_WR_RDMA_READ:
		return shm_exec_rdma(qp, conn, s, loc, nloc, *total_p);
	default:
		return shm_exec_atomic(qp, conn, s, loc, *total_p);
	}
}

void shm_sq_complete(struct shm_qp *qp, uint64_t seq, const struct shm_swqe *s,
		     enum ferry_wc_status status, uint32_t byte_len)
{
	struct shm_cq *scq = to_scq(qp->qp.send_cq);
	struct shm_lwc c = { .qp = qp, .sq_seq = seq, .is_send = 1 };

	c.wc.wr_id = s->wr_id;
	c.wc.status = status;
	c.wc.opcode = ferry_wc_opcode_of(s->opcode);
	c.wc.byte_len = byte_len;
	c.wc.qp_num = qp->qp.qp_num;
	c.wc.src_qp = qp->conn ? qp->conn->peer_qpn : 0;
	ferry_lock(&scq->lock);
	shm_cq_add_local(scq, &c);
	ferry_unlock(&scq->lock);
}

/* The head WR found no receive; sq_lock held.  Returns true to keep waiting. */
static bool shm_sq_rnr(struct shm_qp *qp)
{
	const struct shm_region *pr = qp->conn->peer_region;
	uint64_t now = shm_now_ns();

	if (qp->rnr_pending && now < qp->rnr_deadline_ns)
		return true;	/* woken early by some other receive: keep the timer */
	if (qp->rnr_left == 0)
		return false;
	if (qp->rnr_retry != 7)
		qp->rnr_left--;
	qp->rnr_pending = true;
	qp->rnr_deadline_ns = now + shm_rnr_delay_ns(atomic_load(&pr->min_rnr_timer));
	atomic_store(&qp->region->rnr_wait, 1);
	/* The receive may have come between our check and rnr_wait: the peer
	 * kicks only if it sees rnr_wait, so look once more. */
	atomic_thread_fence(memory_order_seq_cst);
	if (shm_peer_recvs(qp, qp->conn) != 0)
		qp->rnr_deadline_ns = now;
	shm_monitor_rnr(qp);
	/* A peer on an SRQ tops our window up when its monitor is told. */
	if (atomic_load_explicit(&pr->srq_kick, memory_order_relaxed))
		shm_wake(&qp->conn->peer_kick);
	return true;
}

/*
 * The head WR waits for room in our staging ring; sq_lock held.  Not an
 * RNR wait: no retry is used up, the peer is there and takes what we
 * staged when it polls.  A sleeping peer is woken to do so; when it has,
 * it kicks us (rnr_wait), and the monitor looks again meanwhile too, less
 * and less often while the peer takes nothing (one that never polls costs
 * ten looks a second, not a thousand).
 */
#define SHM_BOUNCE_RETRY_NS	1000000ull	/* 1 ms, doubled ... */
#define SHM_BOUNCE_RETRY_MAX_NS	100000000ull	/* ... up to 100 ms */
static void shm_sq_wait_room(struct shm_qp *qp)
{
	struct shm_conn *conn = qp->conn;
	uint64_t now = shm_now_ns();

	qp->bounce_retry_ns = qp->bounce_retry_ns ? 2 * qp->bounce_retry_ns : SHM_BOUNCE_RETRY_NS;
	if (qp->bounce_retry_ns > SHM_BOUNCE_RETRY_MAX_NS)
		qp->bounce_retry_ns = SHM_BOUNCE_RETRY_MAX_NS;
	qp->rnr_pending = true;
	qp->rnr_deadline_ns = now + qp->bounce_retry_ns;
	atomic_store(&qp->region->rnr_wait, 1);
	atomic_thread_fence(memory_order_seq_cst);
	if (SHM_BOUNCE_SIZE - (qp->bounce_prod - atomic_load_explicit(
		&conn->peer_region->bounce_cons, memory_order_acquire)) >
	    2 * sizeof(struct shm_bounce_rec))
		qp->rnr_deadline_ns = now;	/* it took some meanwhile */
	shm_notify_peer(qp, conn, true);
	shm_monitor_rnr(qp);
}

/*
 * shm_sq_finish - account for @s, executed as SQ entry @seq with verdict
 * @st: its completion if it needs one, and ERR on failure.  sq_lock held;
 * returns false when the QP went to ERR.
 */
static bool shm_sq_finish(struct shm_qp *qp, uint64_t seq, const struct shm_swqe *s,
			  int st, uint64_t total)
{
	if (unlikely(qp->rnr_pending)) {
		qp->rnr_pending = false;
		atomic_store_explicit(&qp->region->rnr_wait, 0, memory_order_relaxed);
	}
	qp->rnr_left = qp->rnr_retry;
	qp->bounce_done = 0;
	if (unlikely(st != FERRY_WC_SUCCESS)) {
		shm_sq_complete(qp, seq, s, st, 0);
		shm_qp_set_error(qp, ferry_wc_status_str(st));
		return false;
	}
	if (qp->sq_sig_all || (s->flags & FERRY_SEND_SIGNALED))
		shm_sq_complete(qp, seq, s, FERRY_WC_SUCCESS, (uint32_t)total);
	return true;
}

/*
 * Before a thread sleeps on a CQ whose channel is the connection, which
 * the monitor cannot raise when it completes a send after an RNR wait:
 * such a send is retried here if the peer has posted a receive since, and
 * one the monitor retries right now is waited for (sq_lock), so that its
 * completion is in the CQ before the caller's last look.  A send still
 * waiting has rnr_wait up in our region, and the receive the peer posts
 * for it wakes this channel as well as the monitor (shm_post_recv).
 */
void shm_sq_settle_rnr(struct shm_qp *qp)
{
	ferry_lock(&qp->sq_lock);
	if (qp->rnr_pending && qp->conn && shm_peer_recvs(qp, qp->conn) != 0)
		shm_sq_progress(qp);
	ferry_unlock(&qp->sq_lock);
}

/*
 * What a UC sender learns of @st: nothing of the far side.  No receive
 * posted, a bad rkey, a peer gone or in error: the message is dropped
 * there and the send completes here.  Local errors stay errors.
 */
static int shm_uc_verdict(int st)
{
	switch (st) {
	case SHM_EXEC_RNR:
	case FERRY_WC_RETRY_EXC_ERR:
	case FERRY_WC_REM_ACCESS_ERR:
	case FERRY_WC_REM_INV_REQ_ERR:
	case FERRY_WC_REM_OP_ERR:
		return FERRY_WC_SUCCESS;
	default:
		return st;
	}
}

/* Execute what the SQ holds, in order; sq_lock held. */
void shm_sq_progress(struct shm_qp *qp)
{
	if (atomic_load_explicit(&qp->async_error, memory_order_relaxed))
		shm_qp_set_error(qp, NULL);	/* the receive side said why */
	if (qp->qp.state == FERRY_QPS_ERR) {
		shm_qp_flush_sq(qp);
		return;
	}
	if (qp->qp.state != FERRY_QPS_RTS)
		return;		/* SQD: hold new work */
	if (unlikely(qp->join_wait) && shm_join_sq_hold(qp))
		return;		/* joined out of band: no peer yet */
	while (qp->sq_exec < qp->sq_head) {
		struct shm_swqe *s = shm_sq_slot(qp, qp->sq_exec);
		uint64_t total = 0;
		int st = shm_execute(qp, s, shm_swqe_sge(s), &total);

		if (unlikely(qp->qp.qp_type == FERRY_QPT_UC))
			st = shm_uc_verdict(st);

		if (st == SHM_EXEC_WAIT) {
			shm_sq_wait_room(qp);
			return;
		}
		if (st == SHM_EXEC_RNR) {
			if (shm_sq_rnr(qp))
				return;
			st = FERRY_WC_RNR_RETRY_EXC_ERR;
		}
		if (!shm_sq_finish(qp, qp->sq_exec++, s, st, total))
			return;
	}
}

/* Can @wr be queued?  sq_lock held.  Returns 0 or an errno. */
static int shm_sq_check(struct shm_qp *qp, const struct ferry_send_wr *wr)
{
	uint64_t total = 0;
	int i;

	if (qp->sq_head - atomic_load_explicit(&qp->sq_retired, memory_order_acquire) >=
	    qp->cap.max_send_wr)
		return ENOMEM;
	if ((uint32_t)wr->num_sge > qp->cap.max_send_sge)
		return EINVAL;
	if ((wr->opcode == FERRY_WR_ATOMIC_CMP_AND_SWP ||
	     wr->opcode == FERRY_WR_ATOMIC_FETCH_AND_ADD) && wr->num_sge != 1)
		return EINVAL;
	if ((wr->send_flags & FERRY_SEND_INLINE) && shm_op_carries_data(wr->opcode)) {
		for (i = 0; i < wr->num_sge; i++)
			total += wr->sg_list[i].length;
		if (total > qp->cap.max_inline_data)
			return EINVAL;
	}
	return 0;
}

/* The scalar fields of @wr (everything but the SGEs and inline bytes). */
static inline void shm_swqe_fill(struct shm_swqe *s, const struct ferry_send_wr *wr)
{
	s->wr_id = wr->wr_id;
	s->opcode = wr->opcode;
	s->flags = wr->send_flags;
	s->imm_data = wr->imm_data;
	s->num_sge = (uint32_t)wr->num_sge;
	s->inline_len = 0;
	if (wr->opcode >= FERRY_WR_ATOMIC_CMP_AND_SWP) {
		s->remote_addr = wr->wr.atomic.remote_addr;
		s->rkey = wr->wr.atomic.rkey;
		s->compare_add = wr->wr.atomic.compare_add;
		s->swap = wr->wr.atomic.swap;
	} else {
		s->remote_addr = wr->wr.rdma.remote_addr;
		s->rkey = wr->wr.rdma.rkey;
	}
}

/* Copy a checked WR into the SQ, inline payload included; sq_lock held. */
static void shm_sq_put(struct shm_qp *qp, const struct ferry_send_wr *wr)
{
	struct shm_swqe *s = shm_sq_slot(qp, qp->sq_head);
	int i;

	shm_swqe_fill(s, wr);
	if ((wr->send_flags & FERRY_SEND_INLINE) && shm_op_carries_data(wr->opcode)) {
		uint8_t *p = shm_swqe_inline(qp, s);

		for (i = 0; i < wr->num_sge; i++) {
			memcpy(p, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			p += wr->sg_list[i].length;
		}
		s->inline_len = (uint32_t)(p - shm_swqe_inline(qp, s));
	} else if (wr->num_sge) {
		memcpy(shm_swqe_sge(s), wr->sg_list, sizeof(struct ferry_sge) * (size_t)wr->num_sge);
	}
	qp->sq_head++;
}

/*
 * Execute @wr at once as the next entry of an idle SQ, from its SGEs (and
 * with @flags added to its own); sq_lock held, @wr checked.  Returns
 * SHM_EXEC_RNR, with nothing done, when the peer has no receive for it.
 */
static int shm_sq_run_now(struct shm_qp *qp, const struct ferry_send_wr *wr,
			  unsigned int flags)
{
	struct shm_swqe s;
	uint64_t total = 0;
	int st;

	shm_swqe_fill(&s, wr);
	s.flags |= flags;
	st = shm_execute(qp, &s, wr->sg_list, &total);
	if (unlikely(qp->qp.qp_type == FERRY_QPT_UC))
		st = shm_uc_verdict(st);
	if (st == SHM_EXEC_RNR || st == SHM_EXEC_WAIT)
		return SHM_EXEC_RNR;	/* queued, and taken up from where it is */
	qp->sq_head++;
	shm_sq_finish(qp, qp->sq_exec++, &s, st, total);
	return 0;
}

/* Is @qp's SQ idle, in RTS, with nothing to report?  sq_lock held. */
static inline bool shm_sq_idle(struct shm_qp *qp)
{
	return qp->qp.state == FERRY_QPS_RTS && qp->sq_exec == qp->sq_head &&
	       likely(!qp->join_wait) &&
	       !atomic_load_explicit(&qp->async_error, memory_order_relaxed);
}

/*
 * The common case: one WR on an idle SQ.  Execute it straight from the
 * caller's WR, without copying it into a slot; only a WR that must wait
 * for a receive (RNR) is queued.  sq_lock held.
 */
static int shm_post_send_now(struct shm_qp *qp, const struct ferry_send_wr *wr)
{
	int err = shm_sq_check(qp, wr);

	if (err)
		return err;
	if (shm_sq_run_now(qp, wr, 0) == SHM_EXEC_RNR) {
		shm_sq_put(qp, wr);
		shm_sq_progress(qp);	/* takes the RNR path */
	}
	return 0;
}

/*
 * ferry_post_send_direct on shm: every WR that finds the SQ idle is
 * executed inside post_send anyway, so its payload can come from any
 * memory of ours, as an inline one does (no lkey is looked at).  One
 * that would have to wait in the SQ is not taken: its SGEs must stay
 * valid until it runs, which only registered memory promises.
 */
int shm_post_send_direct(struct ferry_qp *fqp, struct ferry_send_wr *wr, unsigned int how)
{
	struct shm_qp *qp = to_sqp(fqp);
	unsigned int flags = FERRY_SEND_INLINE | SHM_SWQE_WHOLE;
	int err = EAGAIN;

	if (qp->ud)
		return ERR(EOPNOTSUPP);	/* the stream sockets' call: RC only */
	if (how & FERRY_DIRECT_NOCACHE)
		flags |= SHM_SWQE_NOCACHE;
	ferry_lock(&qp->sq_lock);
	if (shm_sq_idle(qp)) {
		err = shm_sq_check(qp, wr);
		if (!err && shm_sq_run_now(qp, wr, flags) == SHM_EXEC_RNR)
			err = EAGAIN;
	}
	ferry_unlock(&qp->sq_lock);
	return err ? ERR(err) : 0;
}

int shm_post_send(struct ferry_qp *fqp, struct ferry_send_wr *wr, struct ferry_send_wr **bad)
{
	struct shm_qp *qp = to_sqp(fqp);
	enum ferry_qp_state state;
	int err = 0;

	if (qp->ud)
		return shm_ud_post_send(qp, wr, bad);	/* shm_ud_data.c */
	ferry_lock(&qp->sq_lock);
	state = qp->qp.state;
	if (state == FERRY_QPS_RESET || state == FERRY_QPS_INIT || state == FERRY_QPS_RTR) {
		err = EINVAL;
	} else if (likely(!wr->next && shm_sq_idle(qp))) {
		err = shm_post_send_now(qp, wr);
	} else {
		for (; wr; wr = wr->next) {
			err = shm_sq_check(qp, wr);
			if (err)
				break;
			shm_sq_put(qp, wr);
		}
		if (!qp->rnr_pending)
			shm_sq_progress(qp);
	}
	ferry_unlock(&qp->sq_lock);
	if (err) {
		*bad = wr;
		return ERR(err);
	}
	return 0;
}

/* --- receives --- */
