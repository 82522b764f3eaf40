/*
 * shim_find.c - find libferry-preload.so and add it to LD_PRELOAD (see
 * shim_find.h).  No output: the callers say what went wrong their own way.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim_find.h"

static bool shim_is_file(const char *path)
{
	return path && *path && access(path, R_OK) == 0;
}

/* Does the running program live in this build tree's tools/ (or .libs/)? */
static bool shim_from_build_tree(void)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return false;
	self[n] = '\0';
	return strncmp(self, FERRY_BUILD_TOOLS_DIR "/",
		       strlen(FERRY_BUILD_TOOLS_DIR) + 1) == 0;
}

const char *shim_find(char *buf, size_t size, char *why, size_t why_len)
{
	const char *env = getenv("FERRY_PRELOAD_LIB");
	char real[PATH_MAX];
	bool from_build;

	if (env && *env) {
		if (!shim_is_file(env) || !realpath(env, real)) {
			snprintf(why, why_len, "FERRY_PRELOAD_LIB=%s: %s", env,
				 strerror(errno));
			return NULL;
		}
		snprintf(buf, size, "%s", real);
		return buf;
	}
	from_build = shim_from_build_tree();
	if (!from_build && shim_is_file(FERRY_PRELOAD_INSTALLED))
		snprintf(buf, size, "%s", FERRY_PRELOAD_INSTALLED);
	else if (shim_is_file(FERRY_PRELOAD_BUILT))
		snprintf(buf, size, "%s", FERRY_PRELOAD_BUILT);
	else if (shim_is_file(FERRY_PRELOAD_INSTALLED))
		snprintf(buf, size, "%s", FERRY_PRELOAD_INSTALLED);
	else {
		snprintf(why, why_len, "cannot find the shim: neither %s nor %s exists "
			 "(set FERRY_PRELOAD_LIB)",
			 FERRY_PRELOAD_INSTALLED, FERRY_PRELOAD_BUILT);
		return NULL;
	}
	return buf;
}

int shim_add_to_preload(const char *shim)
{
	const char *old = getenv("LD_PRELOAD");
	size_t len = strlen(shim);
	const char *p;
	char *value;
	int ret;

	for (p = old; p && *p;) {
		size_t n = strcspn(p, ": ");

		if (n == len && strncmp(p, shim, len) == 0)
			return 0;
		p += n;
		p += strspn(p, ": ");
	}
	if (!old || !*old)
		return setenv("LD_PRELOAD", shim, 1);
	if (asprintf(&value, "%s:%s", old, shim) < 0)
		return -1;
	ret = setenv("LD_PRELOAD", value, 1);
	free(value);
	return ret;
}
