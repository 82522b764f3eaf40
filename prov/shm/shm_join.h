/*
 * shm_join.h - between the join thread (shm_join.c) and its messages
 * (shm_join_msg.c): the rendezvous of QPs joined out of band.
 *
 * The rendezvous (docs/wire.md, "Joining out of band"): of the two QPs,
 * the one with the lower (LID, QPN) dials the peer's LID name, the
 * process's listening AF_UNIX SOCK_SEQPACKET socket (shm_port.c), and
 * asks for the peer's QP with a JOIN; the peer's join thread checks that
 * the dialler is the process holding the LID it claims, finds the QP in
 * RTR or RTS towards the dialler's (LID, QPN), and answers ACCEPT (or
 * REFUSE, then closes).  Both then run the QP exchange over that socket
 * (shm_conn.c), as ferry_qp_exchange does.
 */
#ifndef FERRY_SHM_JOIN_H
#define FERRY_SHM_JOIN_H

#include <stdbool.h>
#include <stdint.h>

#define SHM_JOIN_MAGIC		0x46525941u	/* "FRYA": the rendezvous */
#define SHM_JOIN_VERSION	1u

enum shm_join_msg_type {
	SHM_JOIN_REQ = 1,	/* dialler: join my QP src to your QP dst */
	SHM_JOIN_ACCEPT = 2,	/* listener: yes; the exchange follows */
	SHM_JOIN_REFUSE = 3,	/* listener: no (reason), then it closes */
};

/* One message of the rendezvous: a whole SEQPACKET record, no fds. */
struct shm_join_msg {
	uint32_t magic;
	uint16_t version;
	uint16_t type;		/* enum shm_join_msg_type */
	uint32_t qp_type;	/* FERRY_QPT_RC or FERRY_QPT_UC: both ends alike */
	uint16_t src_lid;	/* the sender's */
	uint16_t dst_lid;	/* the receiver's */
	uint32_t src_qpn;
	uint32_t dst_qpn;
	uint32_t rq_psn;	/* the sender QP's rq_psn: what it expects first */
	uint32_t reason;	/* REFUSE: an errno (ENOENT: no such QP waiting) */
};

/* Send @m (magic and version filled in); 0 or -1 + errno.  Never waits. */
int shm_join_msg_send(int sock, struct shm_join_msg *m);
/*
 * Take one message from @sock, never waiting: 0; -1 + EAGAIN (none yet),
 * ECONNRESET (the peer closed), EPROTO (not a well-formed message of this
 * version: wrong size, magic, type or field out of range; any descriptor
 * passed along is closed).
 */
int shm_join_msg_recv(int sock, struct shm_join_msg *m);
/* A non-blocking connection to LID @lid's listener; fd or -1 + errno. */
int shm_join_msg_dial(uint16_t lid);
/*
 * Is the process at the other end of @sock (SO_PEERCRED) the one that
 * listens on LID @lid's name?  Asks the kernel for the second by a
 * connection to that name, closed at once (the listener's thread sees it
 * close before a byte).  Anyone may claim to be anyone in a JOIN.
 */
bool shm_join_msg_peer_holds(int sock, uint16_t lid);

#endif /* FERRY_SHM_JOIN_H */
