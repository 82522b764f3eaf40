/*
 * real.c - libc's own functions, for the shim to call: dlsym(RTLD_NEXT)
 * finds the definition after the shim's in the lookup order.
 *
 * Resolved once, in the first call of any interposer or in the shim's
 * constructor, whichever comes first (another library's constructor may
 * open a socket before ours runs).
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"

struct fp_real fp_real;
__thread int fp_depth __attribute__((tls_model("initial-exec")));

static void *fp_sym(const char *name, bool required)
{
	void *p = dlsym(RTLD_NEXT, name);

	/* Nothing after the shim defines it when libc itself comes first in
	 * LD_PRELOAD (then libc's definitions win and the shim is bypassed
	 * anyway): ask libc directly. */
	if (!p) {
		void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);

		if (libc) {
			p = dlsym(libc, name);
			dlclose(libc);
		}
	}

	if (!p && required) {
		/* Nothing else can work: say so on stderr without libc stdio. */
		static const char msg[] = "ferry preload: libc lacks ";

		(void)!write(2, msg, sizeof(msg) - 1);
		(void)!write(2, name, strlen(name));
		(void)!write(2, "\n", 1);
		abort();
	}
	return p;
}

#define REAL(name) (fp_real.name = (__typeof__(fp_real.name))fp_sym(#name, true))
#define REAL_OPT(name) (fp_real.name = (__typeof__(fp_real.name))fp_sym(#name, false))

static void fp_real_resolve(void)
{
	REAL(socket);
	REAL(bind);
	REAL(listen);
	REAL(accept);
	REAL(accept4);
	REAL(connect);
	REAL(shutdown);
	REAL(close);
	REAL(read);
	REAL(readv);
	REAL(write);
	REAL(writev);
	REAL(recv);
	REAL(recvfrom);
	REAL(recvmsg);
	REAL(recvmmsg);
	REAL(send);
	REAL(sendto);
	REAL(sendmsg);
	REAL(sendmmsg);
	REAL(sendfile);
	REAL(sendfile64);
	REAL(splice);
	REAL(poll);
	REAL(ppoll);
	REAL(select);
	REAL(pselect);
	REAL(epoll_create);
	REAL(epoll_create1);
	REAL(epoll_ctl);
	REAL(epoll_wait);
	REAL(epoll_pwait);
	REAL_OPT(epoll_pwait2);	/* glibc 2.35 */
	REAL(fcntl);
	REAL_OPT(fcntl64);
	REAL(ioctl);
	REAL(dup);
	REAL(dup2);
	REAL(dup3);
	REAL(getsockopt);
	REAL(setsockopt);
	REAL(getpeername);
	REAL(getsockname);
	REAL(fork);
}

void fp_real_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, fp_real_resolve);
}
