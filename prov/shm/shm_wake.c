/*
 * shm_wake.c - how one process wakes a CQ of another (or its own): a
 * datagram to the CQ's named socket, not a write to its eventfd.
 *
 * A CQ's event descriptor is an AF_UNIX datagram socket with an abstract
 * name the kernel picks (autobind).  Whoever wants the CQ's channel to poll
 * readable sends one byte to that name; the channel's reader takes what is
 * queued.  A peer therefore needs the name, which HELLO carries, and no
 * descriptor of ours: with an eventfd it kept one per connection, for as
 * long as the connection lived.  A name reaches whichever processes hold
 * the socket, so a CQ inherited across fork() is woken as before.
 *
 * Every process sends from one unbound socket of its own.  A datagram
 * queued at a receiver is charged to the sending socket until it is read,
 * so when many receivers hold unread wake-ups the sender's buffer can be
 * full while the receiver it aims at has none queued; that send goes
 * again from a socket made for it (which a process out of descriptors
 * cannot make: the sender's buffer is made large to keep that far off).  A receiver whose queue is full
 * (net.unix.max_dgram_qlen) is readable already: nothing is lost.
 *
 * A CQ whose channel is its one QP's connection (a stream socket's, see
 * ferry_comp_channel_on_conn) has no wake socket: the peer sends a record
 * on the connection instead (shm_conn_wake), and SHM_NOTIFY_CONN in the
 * CQ's arm word tells it so.  The wake socket it had is kept for the next
 * one (shm_wake_socket_put): a stream socket makes its channel before it
 * connects, and making, naming and closing a socket per connection was
 * four system calls on each side.  A spare may hold a wake-up meant for
 * the CQ it served (a peer that read the arm word before the change):
 * like a stranger's, it costs its next CQ one look at an empty queue.
 *
 * Anyone on the host may send to an abstract name.  What a wake-up says is
 * never read: a stranger's datagram costs the CQ's owner one spurious look
 * at an empty CQ, no more.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "shm-internal.h"

#define SHM_WAKE_SNDBUF	(16 << 20)
/* Wake sockets kept for the next CQ: a connection in flight needs one,
 * and each kept is a descriptor a process near its limit may miss. */
#define SHM_WAKE_SPARES	4

static atomic_int shm_wake_sender = -1;

static struct {
	pthread_mutex_t lock;
	pid_t pid;		/* whose: a child of fork shares its parent's */
	int n;
	int fd[SHM_WAKE_SPARES];
	struct shm_wake_name name[SHM_WAKE_SPARES];
} shm_wake_spares = { .lock = PTHREAD_MUTEX_INITIALIZER };
FERRY_FORK_SAFE(shm_wake_spares, shm_wake_spares.lock)

/*
 * The spares are this process's (lock held).  A child's copies are its
 * parent's sockets too: handed to a CQ on each side, the one would drain
 * the other's wake-ups.  So the child closes its copies.
 */
static void shm_wake_spares_adopt_locked(void)
{
	if (shm_wake_spares.pid == ferry_pid())
		return;
	while (shm_wake_spares.n > 0)
		close(shm_wake_spares.fd[--shm_wake_spares.n]);
	shm_wake_spares.pid = ferry_pid();
}

/* A spare wake socket and its name, or -1. */
static int shm_wake_spare_take(struct shm_wake_name *name)
{
	int fd = -1;

	pthread_mutex_lock(&shm_wake_spares.lock);
	shm_wake_spares_adopt_locked();
	if (shm_wake_spares.n > 0) {
		fd = shm_wake_spares.fd[--shm_wake_spares.n];
		*name = shm_wake_spares.name[shm_wake_spares.n];
	}
	pthread_mutex_unlock(&shm_wake_spares.lock);
	return fd;
}

void shm_wake_socket_put(int fd, const struct shm_wake_name *name)
{
	pthread_mutex_lock(&shm_wake_spares.lock);
	shm_wake_spares_adopt_locked();
	if (shm_wake_spares.n < SHM_WAKE_SPARES) {
		shm_wake_spares.fd[shm_wake_spares.n] = fd;
		shm_wake_spares.name[shm_wake_spares.n++] = *name;
		fd = -1;
	}
	pthread_mutex_unlock(&shm_wake_spares.lock);
	if (fd >= 0)
		close(fd);
}

static int shm_wake_dgram(void)
{
	return socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
}

static int shm_wake_sender_get(void)
{
	int fd = atomic_load_explicit(&shm_wake_sender, memory_order_acquire), none = -1;

	if (fd >= 0)
		return fd;
	fd = ferry_fd_park(shm_wake_dgram());
	if (fd < 0)
		return -1;
	/* Room for many unread wake-ups (each holds some 700 bytes of the
	 * sender's buffer until it is read): beyond the default's few
	 * hundred where the limit lets us (root), to net.core.wmem_max
	 * elsewhere. */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &(int){ SHM_WAKE_SNDBUF },
		       sizeof(int)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &(int){ SHM_WAKE_SNDBUF }, sizeof(int));
	if (!atomic_compare_exchange_strong(&shm_wake_sender, &none, fd)) {
		close(fd);	/* another thread's came first */
		fd = none;
	}
	return fd;
}

int shm_wake_test_sender(void)
{
	return shm_wake_sender_get();
}

int shm_wake_socket(struct shm_wake_name *name)
{
	struct sockaddr_un un;
	socklen_t len = sizeof(sa_family_t);
	int fd = shm_wake_spare_take(name);

	if (fd >= 0)
		return fd;
	fd = shm_wake_dgram();
	if (fd < 0)
		return -1;
	/* The sender comes with the first CQ, not with its first event: a
	 * process's descriptors do not grow later, when it is busy. */
	shm_wake_sender_get();
	memset(&un, 0, sizeof(un));
	un.sun_family = AF_UNIX;
	if (bind(fd, (struct sockaddr *)&un, len) < 0)	/* autobind */
		goto err;
	len = sizeof(un);
	if (getsockname(fd, (struct sockaddr *)&un, &len) < 0)
		goto err;
	if (len <= offsetof(struct sockaddr_un, sun_path) + 1 ||
	    len - offsetof(struct sockaddr_un, sun_path) > SHM_WAKE_NAME_MAX ||
	    un.sun_path[0] != '\0') {
		errno = EPROTO;	/* not an abstract name we can carry */
		goto err;
	}
	name->len = (uint32_t)(len - offsetof(struct sockaddr_un, sun_path));
	memcpy(name->bytes, un.sun_path, name->len);
	return ferry_fd_park(fd);

err:
	{
		int e = errno;

		close(fd);
		errno = e;
	}
	return -1;
}


static ssize_t shm_wake_sendto(int fd, const struct sockaddr_un *un, socklen_t len)
{
	static const char byte = 'w';
	ssize_t n;

	do
		n = sendto(fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)un,
			   len);
	while (n < 0 && errno == EINTR);
	return n;
}

void shm_wake(const struct shm_wake_name *name)
{
	struct sockaddr_un un;
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + name->len);
	int fd = shm_wake_sender_get();

	un.sun_family = AF_UNIX;
	memcpy(un.sun_path, name->bytes, name->len);
	if (fd >= 0 && shm_wake_sendto(fd, &un, len) == 1)
		return;
	if (fd >= 0 && errno != EAGAIN) {
		/* ECONNREFUSED: the CQ is gone, nobody waits on it. */
		if (errno != ECONNREFUSED)
			ferry_debug("waking a CQ: %m");
		return;
	}
	/* Our buffer is full of wake-ups others have not read, or the
	 * receiver's queue is: a socket of its own tells which. */
	fd = shm_wake_dgram();
	if (fd < 0) {
		ferry_warn("waking a CQ: no socket to send from: %m");
		return;
	}
	if (shm_wake_sendto(fd, &un, len) < 0 && errno != EAGAIN && errno != ECONNREFUSED)
		ferry_debug("waking a CQ: %m");
	close(fd);
}

int shm_wake_drain(int fd)
{
	char buf[16];
	ssize_t n;

	/* One: an arm gives one wake-up, and what a stranger adds keeps the
	 * socket readable for the next look (a system call saved per sleep,
	 * and no loop a sender without pause could keep us in). */
	do
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n >= 0)
		return 1;
	return errno == EAGAIN ? 0 : -1;
}
