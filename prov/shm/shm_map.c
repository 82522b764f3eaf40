/*
 * shm_map.c - mappings of peers' files (their arena segments, regions and
 * windows): checked before they are mapped, shared by every connection
 * that maps the same file, and a few kept mapped while unused, since a
 * peer's next connection maps its segment again.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "shm-internal.h"

/* What a peer's file must be sealed with before we map it: a fixed size. */
#define SHM_PEER_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_mapping *maps;
static uint64_t maps_clock;	/* orders the kept mappings' last uses */
static int maps_idle_kept;	/* kept mappings nobody uses now */
FERRY_FORK_SAFE(maps, maps_lock)

struct shm_mapping *shm_map_fd(int fd, size_t min_size, int prot)
{
	struct stat st;

	if (fstat(fd, &st) < 0) {
		errno = EINVAL;
		return NULL;
	}
	return shm_map_fd_stat(fd, &st, min_size, prot);
}

struct shm_mapping *shm_map_fd_stat(int fd, const struct stat *stp, size_t min_size, int prot)
{
	const struct stat st = *stp;
	struct shm_mapping *m;
	int seals;

	if (!S_ISREG(st.st_mode))
		goto err_inval;
	if ((uint64_t)st.st_size < min_size || st.st_size == 0) {
		ferry_warn("peer passed a %lld-byte file, %zu needed",
			   (long long)st.st_size, min_size);
		goto err_inval;
	}

	pthread_mutex_lock(&maps_lock);
	for (m = maps; m; m = m->next) {
		if (m->dev == st.st_dev && m->ino == st.st_ino && m->prot == prot) {
			/* Its seals were checked and none ever goes, so the file
			 * cannot have changed size; what counts is still the
			 * mapping we have, not what fstat says now. */
			if (m->size < min_size) {
				pthread_mutex_unlock(&maps_lock);
				ferry_warn("peer named %zu bytes of a file mapped with %zu",
					   min_size, m->size);
				goto err_inval;
			}
			if (m->refs++ == 0)
				maps_idle_kept--;	/* only kept ones stay at zero */
			pthread_mutex_unlock(&maps_lock);
			return m;
		}
	}
	/* Sealed both ways: a file that could grow would have fstat and our
	 * mapping disagree, and one that could shrink would fault under us. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & SHM_PEER_SEALS) != SHM_PEER_SEALS) {
		pthread_mutex_unlock(&maps_lock);
		ferry_warn("peer passed a file that is not a memfd sealed against "
			   "shrinking and growing");
		goto err_inval;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		goto err_unlock;
	m->addr = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
	if (m->addr == MAP_FAILED) {
		ferry_warn("mapping a peer's %lld-byte file: %m", (long long)st.st_size);
		free(m);
		goto err_unlock;
	}
	m->size = (size_t)st.st_size;
	m->dev = st.st_dev;
	m->ino = st.st_ino;
	m->prot = prot;
	m->refs = 1;
	m->prev = NULL;
	m->next = maps;
	if (maps)
		maps->prev = m;
	maps = m;
	pthread_mutex_unlock(&maps_lock);
	return m;

err_unlock:
	pthread_mutex_unlock(&maps_lock);
	errno = ENOMEM;
	return NULL;
err_inval:
	errno = EINVAL;
	return NULL;
}

struct shm_mapping *shm_map_ref(struct shm_mapping *m, size_t min_size)
{
	if (m->size < min_size) {
		ferry_warn("peer named %zu bytes of a file mapped with %zu", min_size, m->size);
		errno = EINVAL;
		return NULL;
	}
	pthread_mutex_lock(&maps_lock);
	m->refs++;	/* the caller holds one: never 0 here */
	pthread_mutex_unlock(&maps_lock);
	return m;
}

void shm_map_keep(struct shm_mapping *m)
{
	pthread_mutex_lock(&maps_lock);
	m->keep = true;
	pthread_mutex_unlock(&maps_lock);
}

static void shm_mapping_unlink_locked(struct shm_mapping *m)
{
	if (m->next)
		m->next->prev = m->prev;
	if (m->prev)
		m->prev->next = m->next;
	else
		maps = m->next;
}

void shm_unmap(struct shm_mapping *m)
{
	struct shm_mapping *old = NULL, *v;

	if (!m)
		return;
	pthread_mutex_lock(&maps_lock);
	if (--m->refs > 0) {
		pthread_mutex_unlock(&maps_lock);
		return;
	}
	if (!m->keep) {
		shm_mapping_unlink_locked(m);
		old = m;
	} else if (++maps_idle_kept > SHM_KEEP_IDLE) {
		/* Too many kept: the one unused the longest goes (rare: a peer
		 * process per kept segment, and most of them gone). */
		for (v = maps; v; v = v->next)
			if (v->keep && v->refs == 0 && v != m &&
			    (!old || v->idle_since < old->idle_since))
				old = v;
		if (old) {
			shm_mapping_unlink_locked(old);
			maps_idle_kept--;
		}
	}
	m->idle_since = ++maps_clock;
	pthread_mutex_unlock(&maps_lock);
	if (old) {
		munmap(old->addr, old->size);
		free(old);
	}
}
