/*
 * shim_find.h - where the LD_PRELOAD shim (libferry-preload.so) is, and how
 * to put it into LD_PRELOAD: shared by ferry-run, which execs a program
 * under it, and ferry-perf, whose tcp+preload rows exec their workers
 * under it.
 *
 * The places are compiled in (tools/Makefile.inc): FERRY_PRELOAD_INSTALLED
 * ($(pkglibdir)), FERRY_PRELOAD_BUILT (the build tree's preload/.libs) and
 * FERRY_BUILD_TOOLS_DIR (this build tree's tools/).
 */
#ifndef FERRY_TOOLS_SHIM_FIND_H
#define FERRY_TOOLS_SHIM_FIND_H

#include <stddef.h>

/*
 * The shim to preload: $FERRY_PRELOAD_LIB; else, when the calling program
 * runs from its build tree, the shim built beside it; else the installed
 * one if it exists; else the build tree's.  Returns @buf holding an
 * absolute path, or NULL with the reason in @why (no trailing newline).
 */
const char *shim_find(char *buf, size_t size, char *why, size_t why_len);

/* Append @shim to LD_PRELOAD unless it is there already; 0, or -1 and errno. */
int shim_add_to_preload(const char *shim);

#endif /* FERRY_TOOLS_SHIM_FIND_H */
