/*
 * sock_iomap.c - direct data placement (rsocket's riomap / riounmap /
 * riowrite).
 *
 * ferry offers no target iomap in its connect data (size 0), so a peer
 * never gets an iomap to write to and every call here fails the way
 * rsocket fails on a socket whose iomap size is 0.  The calls exist so
 * that programs written for rsocket build and take their fallback path.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "sock-internal.h"

off_t ferry_sock_iomap(int fd, void *buf, size_t len, int prot, int flags, off_t offset)
{
	(void)prot;
	(void)flags;
	(void)offset;
	if (!sock_get(fd))
		return -1;
	if (!buf || !len)
		return ERR(EINVAL);
	return ERR(ENOMEM);	/* no iomap entries: FERRY_IOMAPSIZE is 0 */
}

int ferry_sock_iounmap(int fd, void *buf, size_t len)
{
	(void)buf;
	(void)len;
	if (!sock_get(fd))
		return -1;
	return ERR(EINVAL);
}

size_t ferry_sock_iowrite(int fd, const void *buf, size_t count, off_t offset, int flags)
{
	(void)buf;
	(void)count;
	(void)offset;
	(void)flags;
	if (!sock_get(fd))
		return (size_t)-1;
	errno = EINVAL;	/* the peer has mapped nothing at any offset */
	return (size_t)-1;
}
