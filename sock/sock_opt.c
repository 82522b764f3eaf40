/*
 * sock_opt.c - socket options, fcntl and ioctl, and the keepalive service.
 *
 * Options that size the connection (SO_SNDBUF, SO_RCVBUF and SOL_FERRY's
 * queue sizes) take effect when the connection is set up: set them before
 * connect, or on the listener for the sockets it accepts.
 *
 * Keepalive.  One service thread per process, started with the first
 * connection, visits every connected socket a few times a second: it takes
 * the completions nobody is there to take (so that a peer's KEEPALIVE is
 * answered with a credit update even while the application is busy
 * elsewhere) and, on sockets with SO_KEEPALIVE, sends a KEEPALIVE control
 * message after TCP_KEEPIDLE seconds without a message from the peer, then
 * every TCP_KEEPINTVL seconds.  A probe is answered by any message from the
 * peer, or on the verbs transport by its own successful completion (the
 * remote NIC's acknowledgement, which is what an rsocket peer gives).
 * After TCP_KEEPCNT unanswered probes the connection fails with ETIMEDOUT.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "sock-internal.h"

/*
 * A ring size from the environment (FERRY_RBUF, FERRY_SBUF): bytes, with
 * an optional k, m or g suffix (powers of 1024), clamped to the limits.
 * Read once per variable; an unusable value is reported and ignored.
 */
static uint32_t sock_env_size(const char *name, _Atomic uint32_t *cache)
{
	uint32_t v = atomic_load_explicit(cache, memory_order_relaxed);
	const char *env;
	unsigned long long n;
	char *end;

	if (v)
		return v;
	v = SOCK_DEF_BUF_SIZE;
	env = getenv(name);
	if (env && *env) {
		unsigned int shift = 0;
		bool digits;

		errno = 0;
		n = strtoull(env, &end, 10);
		digits = end != env;
		if (*end && strchr("kK", *end))
			shift = 10;
		else if (*end && strchr("mM", *end))
			shift = 20;
		else if (*end && strchr("gG", *end))
			shift = 30;
		end += shift ? 1 : 0;
		if (errno || *end || !digits || env[0] == '-' || n > (1ull << 40) >> shift) {
			ferry_warn("%s=%s is not a size in bytes (k, m, g suffixes): using %u",
				   name, env, v);
		} else {
			n <<= shift;
			v = n < SOCK_MIN_BUF_SIZE ? SOCK_MIN_BUF_SIZE :
			    n > SOCK_MAX_BUF_SIZE ? SOCK_MAX_BUF_SIZE : (uint32_t)n;
		}
	}
	atomic_store_explicit(cache, v, memory_order_relaxed);
	return v;
}

void sock_opt_defaults(struct ferry_sock *s)
{
	static _Atomic uint32_t env_sbuf, env_rbuf;

	s->sbuf_size = sock_env_size("FERRY_SBUF", &env_sbuf);
	s->rbuf_size = sock_env_size("FERRY_RBUF", &env_rbuf);
	s->sq_size = SOCK_DEF_QP_SIZE;
	s->rq_size = SOCK_DEF_QP_SIZE;
	s->inline_size = SOCK_DEF_INLINE;
	s->keepidle = 7200;
	s->keepintvl = 75;
	s->keepcnt = 9;
}

static int opt_int(const void *optval, socklen_t optlen, int *v)
{
	if (!optval || optlen < sizeof(int))
		return ERR(EINVAL);
	memcpy(v, optval, sizeof(int));
	return 0;
}

static int opt_put_int(void *optval, socklen_t *optlen, int v)
{
	if (!optval || !optlen || *optlen < sizeof(int))
		return ERR(EINVAL);
	memcpy(optval, &v, sizeof(int));
	*optlen = sizeof(int);
	return 0;
}

static uint32_t clamp_u32(int v, uint32_t lo, uint32_t hi)
{
	return v < (int)lo ? lo : (uint32_t)v > hi ? hi : (uint32_t)v;
}

/* Sizes can change only before the connection has its resources. */
static bool sock_sizes_open(struct ferry_sock *s)
{
	return s->state == SOCK_INIT || s->state == SOCK_LISTENING;
}

static int sock_set_socket(struct ferry_sock *s, int name, const void *optval, socklen_t optlen)
{
	struct linger lg;
	int v;

	if (name == SO_LINGER) {
		if (!optval || optlen < sizeof(lg))
			return ERR(EINVAL);
		memcpy(&lg, optval, sizeof(lg));
		s->linger_on = !!lg.l_onoff;
		s->linger_s = lg.l_linger < 0 ? 0 : lg.l_linger;
		return 0;
	}
	if (opt_int(optval, optlen, &v) < 0)
		return -1;
	switch (name) {
	case SO_RCVBUF:
	case SO_SNDBUF:
		if (!sock_sizes_open(s))
			return 0;	/* as TCP: too late is not an error */
		if (name == SO_RCVBUF)
			s->rbuf_size = clamp_u32(v, SOCK_MIN_BUF_SIZE, SOCK_MAX_BUF_SIZE);
		else
			s->sbuf_size = clamp_u32(v, SOCK_MIN_BUF_SIZE, SOCK_MAX_BUF_SIZE);
		/* The program chose its send buffer: no backlog beyond it, as
		 * TCP's buffer stops growing once SO_SNDBUF is set. */
		s->sbuf_fixed |= name == SO_SNDBUF;
		return 0;
	case SO_KEEPALIVE:
		s->keepalive = !!v;
		atomic_store(&s->last_rx_ns, monotime_ns());
		sock_ka_update(s);
		return 0;
	case SO_REUSEADDR:
		s->reuseaddr = !!v;
		return 0;
	case SO_REUSEPORT:
	case SO_OOBINLINE:
	case SO_RCVLOWAT:
	case SO_SNDLOWAT:
		return 0;	/* accepted, no effect */
	}
	return ERR(ENOPROTOOPT);
}

static int sock_set_tcp(struct ferry_sock *s, int name, const void *optval, socklen_t optlen)
{
	int v;

	if (opt_int(optval, optlen, &v) < 0)
		return -1;
	switch (name) {
	case TCP_NODELAY:
		s->nodelay = !!v;	/* every write goes out at once anyway */
		return 0;
	case TCP_KEEPIDLE:
	case TCP_KEEPINTVL:
	case TCP_KEEPCNT:
		if (v < 1 || v > 32767)
			return ERR(EINVAL);
		if (name == TCP_KEEPIDLE)
			s->keepidle = v;
		else if (name == TCP_KEEPINTVL)
			s->keepintvl = v;
		else
			s->keepcnt = v;
		return 0;
	case TCP_QUICKACK:
	case TCP_CORK:
		return 0;
	}
	return ERR(ENOPROTOOPT);
}

static int sock_set_ferry(struct ferry_sock *s, int name, const void *optval, socklen_t optlen)
{
	int v;

	if (name == FERRY_ROUTE)
		return ERR(ENOPROTOOPT);
	if (opt_int(optval, optlen, &v) < 0)
		return -1;
	if (!sock_sizes_open(s))
		return ERR(EINVAL);
	switch (name) {
	case FERRY_SQSIZE:
		s->sq_size = clamp_u32(v, SOCK_MIN_QP_SIZE, SOCK_MAX_QP_SIZE);
		return 0;
	case FERRY_RQSIZE:
		s->rq_size = clamp_u32(v, SOCK_MIN_QP_SIZE, SOCK_MAX_QP_SIZE);
		return 0;
	case FERRY_INLINE:
		s->inline_size = clamp_u32(v, sizeof(struct rs_sge), 256);
		return 0;
	case FERRY_SNDRING:
		s->sbuf_size = clamp_u32(v, SOCK_MIN_BUF_SIZE, SOCK_MAX_BUF_SIZE);
		return 0;
	case FERRY_IOMAPSIZE:
		s->target_iomap_size = clamp_u32(v, 0, SOCK_MAX_IOMAP);
		return 0;
	}
	return ERR(ENOPROTOOPT);
}

int ferry_sock_setsockopt(int fd, int level, int optname, const void *optval,
			  socklen_t optlen)
{
	struct ferry_sock *s = sock_get(fd);
	int ret;

	if (!s)
		return -1;
	pthread_mutex_lock(&s->cm_lock);
	switch (level) {
	case SOL_SOCKET:
		ret = sock_set_socket(s, optname, optval, optlen);
		break;
	case IPPROTO_TCP:
		ret = sock_set_tcp(s, optname, optval, optlen);
		break;
	case SOL_FERRY:
		ret = sock_set_ferry(s, optname, optval, optlen);
		break;
	default:
		ret = ERR(ENOPROTOOPT);
	}
	pthread_mutex_unlock(&s->cm_lock);
	return ret;
}

static int sock_get_socket(struct ferry_sock *s, int name, void *optval, socklen_t *optlen)
{
	struct linger lg;
	int err;

	switch (name) {
	case SO_ERROR:
		sock_conn_process(s);
		err = s->so_error;
		s->so_error = 0;
		return opt_put_int(optval, optlen, err);
	case SO_RCVBUF:
		return opt_put_int(optval, optlen, (int)s->rbuf_size);
	case SO_SNDBUF:
		return opt_put_int(optval, optlen, (int)s->sbuf_size);
	case SO_KEEPALIVE:
		return opt_put_int(optval, optlen, s->keepalive);
	case SO_REUSEADDR:
		return opt_put_int(optval, optlen, s->reuseaddr);
	case SO_TYPE:
		return opt_put_int(optval, optlen, SOCK_STREAM);
	case SO_DOMAIN:
		return opt_put_int(optval, optlen, s->domain);
	case SO_PROTOCOL:
		return opt_put_int(optval, optlen, IPPROTO_TCP);
	case SO_ACCEPTCONN:
		return opt_put_int(optval, optlen, s->state == SOCK_LISTENING);
	case SO_LINGER:
		if (!optval || !optlen || *optlen < sizeof(lg))
			return ERR(EINVAL);
		lg.l_onoff = s->linger_on;
		lg.l_linger = s->linger_s;
		memcpy(optval, &lg, sizeof(lg));
		*optlen = sizeof(lg);
		return 0;
	}
	return ERR(ENOPROTOOPT);
}

static int sock_get_other(struct ferry_sock *s, int level, int name, void *optval,
			  socklen_t *optlen)
{
	if (level == IPPROTO_TCP) {
		switch (name) {
		case TCP_NODELAY:
			return opt_put_int(optval, optlen, s->nodelay);
		case TCP_KEEPIDLE:
			return opt_put_int(optval, optlen, s->keepidle);
		case TCP_KEEPINTVL:
			return opt_put_int(optval, optlen, s->keepintvl);
		case TCP_KEEPCNT:
			return opt_put_int(optval, optlen, s->keepcnt);
		}
		return ERR(ENOPROTOOPT);
	}
	switch (name) {
	case FERRY_SQSIZE:
		return opt_put_int(optval, optlen, (int)s->sq_size);
	case FERRY_RQSIZE:
		return opt_put_int(optval, optlen, (int)s->rq_size);
	case FERRY_INLINE:
		return opt_put_int(optval, optlen, (int)s->inline_size);
	case FERRY_IOMAPSIZE:
		return opt_put_int(optval, optlen, (int)s->target_iomap_size);
	case FERRY_SNDRING:
		return opt_put_int(optval, optlen, (int)s->sbuf_size);
	case FERRY_TRANSPORT_OPT: {
		const char *tp = s->ctx ? ferry_get_device_transport(s->ctx->device) : "";
		size_t n = strlen(tp) + 1;

		if (!optval || !optlen || *optlen < n)
			return ERR(EINVAL);
		memcpy(optval, tp, n);
		*optlen = (socklen_t)n;
		return 0;
	}
	}
	return ERR(ENOPROTOOPT);
}

int ferry_sock_getsockopt(int fd, int level, int optname, void *optval, socklen_t *optlen)
{
	struct ferry_sock *s = sock_get(fd);
	int ret;

	if (!s)
		return -1;
	pthread_mutex_lock(&s->cm_lock);
	if (level == SOL_SOCKET)
		ret = sock_get_socket(s, optname, optval, optlen);
	else if (level == IPPROTO_TCP || level == SOL_FERRY)
		ret = sock_get_other(s, level, optname, optval, optlen);
	else
		ret = ERR(ENOPROTOOPT);
	pthread_mutex_unlock(&s->cm_lock);
	return ret;
}

int ferry_sock_fcntl(int fd, int cmd, ...)
{
	struct ferry_sock *s = sock_get(fd);
	va_list ap;
	long arg;

	if (!s)
		return -1;
	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	switch (cmd) {
	case F_GETFL:
		return O_RDWR | (atomic_load(&s->nonblock) ? O_NONBLOCK : 0);
	case F_SETFL:
		atomic_store(&s->nonblock, !!(arg & O_NONBLOCK));
		return 0;
	case F_GETFD:
		return fcntl(fd, F_GETFD);
	case F_SETFD:
		return fcntl(fd, F_SETFD, (int)arg);
	}
	return ERR(EINVAL);
}

int ferry_sock_ioctl(int fd, unsigned long request, ...)
{
	struct ferry_sock *s = sock_get(fd);
	va_list ap;
	int *argp;

	if (!s)
		return -1;
	va_start(ap, request);
	argp = va_arg(ap, int *);
	va_end(ap);
	if (!argp)
		return ERR(EFAULT);
	switch (request) {
	case FIONREAD:
		sock_progress(s);
		*argp = (int)(sock_readable_bytes(s) > INT32_MAX ? INT32_MAX :
			      sock_readable_bytes(s));
		return 0;
	case FIONBIO:
		atomic_store(&s->nonblock, !!*argp);
		return 0;
	}
	return ERR(ENOTTY);
}

/* --- the keepalive service --- */

static pthread_mutex_t ka_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ka_cond = PTHREAD_COND_INITIALIZER;
static struct ferry_sock *ka_list;
static bool ka_started;
static pid_t ka_pid;

static void sock_ka_dead(struct ferry_sock *s)
{
	ferry_info("sock %d: %d keepalive probes unanswered: connection timed out",
		   s->fd, s->ka_unanswered);
	atomic_fetch_or(&s->closed, SOCK_TIMEDOUT | SOCK_RESET);
	sock_wait_wake(s);
}

/* One visit of the service to @s; ka_lock held. */
static void sock_ka_visit(struct ferry_sock *s, uint64_t now)
{
	uint64_t last;

	if (pthread_mutex_trylock(&s->rlock) == 0) {
		sock_progress(s);
		pthread_mutex_unlock(&s->rlock);
	}
	/* For a program blocked elsewhere while its written data waits. */
	if (sock_backlog_bytes(s) || atomic_load(&s->bl_ctrl) >= 0)
		sock_backlog_kick(s);
	if (!s->keepalive || (atomic_load(&s->closed) & (SOCK_RESET | SOCK_PEER_GONE)))
		return;
	last = atomic_load(&s->last_rx_ns);
	if (s->ka_unanswered || s->ka_next_ns) {
		if (last != s->ka_probe_rx_ns || s->ka_probe_acked) {
			s->ka_unanswered = 0;
			s->ka_next_ns = 0;
		} else if (now >= s->ka_next_ns) {
			if (++s->ka_unanswered >= s->keepcnt) {
				sock_ka_dead(s);
				return;
			}
		} else {
			return;
		}
	}
	if (!s->ka_next_ns && now - last < (uint64_t)s->keepidle * 1000000000u)
		return;
	if (s->ka_next_ns && now < s->ka_next_ns)
		return;
	/* No SQ slot (sock_send_ctrl): probe on a later visit. */
	if (!sock_ctrl_avail(s))
		return;
	s->ka_probe_rx_ns = last;
	s->ka_probe_acked = false;
	s->ka_next_ns = now + (uint64_t)s->keepintvl * 1000000000u;
	sock_send_ctrl(s, RS_CTRL_KEEPALIVE, 0);
}

/*
 * Visits while some socket has a send backlog: often enough that a program
 * blocked elsewhere still sees its data move at ring speed per visit
 * (128 KiB a visit, 6 MB/s), rarely enough to cost nothing measurable.
 */
#define SOCK_BACKLOG_VISIT_NS	20000000

static void *sock_ka_thread(void *arg)
{
	(void)arg;
	ferry_own_thread = true;
	pthread_mutex_lock(&ka_lock);
	for (;;) {
		struct timespec ts;
		struct ferry_sock *s;
		uint64_t now = monotime_ns();
		bool any_ka = false, any_backlog = false;

		for (s = ka_list; s; s = s->ka_next) {
			sock_ka_visit(s, now);
			any_ka |= s->keepalive;
			any_backlog |= sock_backlog_bytes(s) > 0;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += any_backlog ? SOCK_BACKLOG_VISIT_NS : any_ka ? 200000000 : 500000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&ka_cond, &ka_lock, &ts);
	}
	return NULL;
}

/* Put a connected socket under the service (idempotent). */
/*
 * fork: the service thread visits sockets holding ka_lock, and their own
 * locks inside.  Holding ka_lock across fork() means it is not in a visit
 * then, so a child never inherits a socket lock it took (a child reading
 * an inherited connection would wait for it forever).
 */
static void sock_ka_atfork_prepare(void)
{
	pthread_mutex_lock(&ka_lock);
}

static void sock_ka_atfork_parent(void)
{
	pthread_mutex_unlock(&ka_lock);
}

static void sock_ka_atfork_child(void)
{
	pthread_mutex_unlock(&ka_lock);
	pthread_cond_init(&ka_cond, NULL);	/* its waiter is the parent's */
}

static void sock_ka_atfork_register(void)
{
	pthread_atfork(sock_ka_atfork_prepare, sock_ka_atfork_parent, sock_ka_atfork_child);
}

void sock_ka_update(struct ferry_sock *s)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_t th;
	pthread_attr_t attr;

	if (!sock_is_connected(s))
		return;
	pthread_once(&once, sock_ka_atfork_register);
	pthread_mutex_lock(&ka_lock);
	if (!s->in_ka_list) {
		s->ka_next = ka_list;
		ka_list = s;
		s->in_ka_list = true;
	}
	if (!ka_started || ka_pid != sock_pid()) {
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &attr, sock_ka_thread, NULL) == 0) {
			ka_started = true;
			ka_pid = sock_pid();
		}
		pthread_attr_destroy(&attr);
	}
	/* Its next round comes within half a second anyway; only keepalive
	 * may want it sooner (and waking it for every connection costs two
	 * thread switches). */
	if (s->keepalive)
		pthread_cond_signal(&ka_cond);
	pthread_mutex_unlock(&ka_lock);
}

void sock_ka_forget(struct ferry_sock *s)
{
	struct ferry_sock **pp;

	pthread_mutex_lock(&ka_lock);
	for (pp = &ka_list; *pp; pp = &(*pp)->ka_next) {
		if (*pp == s) {
			*pp = s->ka_next;
			break;
		}
	}
	s->in_ka_list = false;
	pthread_mutex_unlock(&ka_lock);
}
