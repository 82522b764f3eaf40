/*
 * sock_shim.c - what the preload shim asks of sockets beyond the public
 * calls (sock-export.h): sleeping on them beside the kernel's
 * descriptors, its acceptor's visits to listeners, what fork needs.
 *
 * Each call takes a socket's number, as the shim holds it, and does in one
 * call what the shim used to do with a lookup and its own reads of the
 * socket: the socket's struct and its locks stay sock/'s.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "sock-internal.h"

/* --- sleeping --- */

int sock_shim_wait_fd(int fd)
{
	struct ferry_sock *s = sock_get(fd);

	return s ? s->fd : -1;
}

int sock_shim_sleep_prepare(int fd, bool *led_p)
{
	struct ferry_sock *s = sock_get(fd);

	*led_p = false;
	if (!s)
		return -1;
	*led_p = sock_wait_lead(s);
	if (*led_p)
		sock_wait_arm(s);
	return s->fd;
}

void sock_shim_sleep_done(int fd)
{
	struct ferry_sock *s = sock_get(fd);

	if (s) {
		sock_wait_drain(s);
		sock_wait_release(s);
	}
}

void sock_shim_drain(int fd)
{
	struct ferry_sock *s = sock_get(fd);

	if (s && sock_wait_lead(s)) {
		sock_wait_drain(s);
		sock_wait_release(s);
	}
}

int sock_shim_arm(int fd, unsigned int *gen_p)
{
	struct ferry_sock *s = sock_get(fd);

	if (!s)
		return -1;
	*gen_p = atomic_load(&s->drain_gen);
	sock_wait_arm(s);
	return 0;
}

bool sock_shim_armed_since(int fd, unsigned int gen)
{
	struct ferry_sock *s = sock_get(fd);

	return s && atomic_load(&s->drain_gen) == gen;
}

void sock_shim_disarm(int fd)
{
	struct ferry_sock *s = sock_get(fd);

	if (s)
		sock_wait_disarm(s);
}

/* --- listeners --- */

bool sock_shim_listen_visit(int fd)
{
	struct ferry_sock *s = sock_get(fd);
	bool ready;

	if (!s)
		return false;
	pthread_mutex_lock(&s->cm_lock);
	sock_conn_process(s);
	ready = s->ready != NULL;
	pthread_mutex_unlock(&s->cm_lock);
	return ready;
}

/* The ready queue's head is written under cm_lock; a look needs no lock. */
int sock_shim_listen_ready(int fd)
{
	struct ferry_sock *s = sock_get(fd);

	if (!s)
		return -1;
	return __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != NULL;
}

/* --- what TCP would say --- */

int sock_shim_outq(int fd, int *bytes_p)
{
	struct ferry_sock *s = sock_get(fd);

	if (!s || !bytes_p)
		return ERR(s ? EFAULT : EBADF);
	*bytes_p = s->sbuf_size ? (int)(s->sbuf_size - atomic_load(&s->sbuf_free)) : 0;
	return 0;
}

int sock_shim_tcp_view(int fd, struct sock_shim_tcp *view_p)
{
	struct ferry_sock *s = sock_get(fd);

	if (!s)
		return -1;
	view_p->connected = sock_is_connected(s);
	view_p->rbuf_size = s->rbuf_size;
	view_p->sq_size = s->sq_size;
	return 0;
}

/* --- fork --- */

/*
 * The send count is plock's; taking it here, before fork(), with no other
 * lock held, keeps the order of sock-internal.h, and it is released before
 * the fork: the child never inherits it held.
 */
int sock_shim_fork_quiet(int fd, struct sock_fork_mark *mark_p)
{
	struct ferry_sock *s = sock_get(fd);

	if (!s)
		return -1;
	sock_ka_forget(s);
	pthread_mutex_lock(&s->plock);
	mark_p->sseq = s->sseq_no;
	pthread_mutex_unlock(&s->plock);
	mark_p->rseq = atomic_load(&s->rseq_no);
	return 0;
}

bool sock_shim_fork_drove(int fd, const struct sock_fork_mark *mark)
{
	struct ferry_sock *s = sock_get(fd);

	return s && (__atomic_load_n(&s->sseq_no, __ATOMIC_RELAXED) != mark->sseq ||
		     atomic_load(&s->rseq_no) != mark->rseq);
}
