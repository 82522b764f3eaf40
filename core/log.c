/*
 * log.c - ferry's diagnostics on stderr, filtered by FERRY_LOG.
 *
 * Every message goes out in one write(2) so that lines from several threads
 * (or from a parent and its forked child) never interleave, and errno is left
 * as the caller had it, so that "%m" reports the caller's error and logging
 * on an error path does not clobber what the caller is about to return.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core-export.h"

/* Longest line written; longer messages are cut and end in "...". */
#define LOG_LINE_MAX 1024

static const char *const log_level_names[] = {
	[FERRY_LOG_ERROR] = "error",
	[FERRY_LOG_WARN]  = "warn",
	[FERRY_LOG_INFO]  = "info",
	[FERRY_LOG_DEBUG] = "debug",
};

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static enum ferry_log_level log_configured = FERRY_LOG_WARN;

/* Write all of @buf, retrying after signals and short writes. */
static void log_write_all(const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDERR_FILENO, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;	/* nowhere left to report it */
		}
		buf += n;
		len -= (size_t)n;
	}
}

/*
 * Format "ferry[pid]: <level>: message\n" into one buffer and write it.
 * errno must already hold the caller's value (for %m).
 */
static void log_emit(enum ferry_log_level level, const char *fmt, va_list ap)
{
	static const char ellipsis[] = "...\n";
	char line[LOG_LINE_MAX];
	size_t len;
	int n;

	n = snprintf(line, sizeof(line), "ferry[%ld]: %s: ",
		     (long)getpid(), log_level_names[level]);
	if (n < 0)
		return;
	len = (size_t)n;

	n = vsnprintf(line + len, sizeof(line) - len, fmt, ap);
	if (n < 0)
		return;
	len += (size_t)n;

	if (len >= sizeof(line)) {
		/* vsnprintf cut the message: end it with a visible marker. */
		len = sizeof(line) - (sizeof(ellipsis) - 1);
		memcpy(line + len, ellipsis, sizeof(ellipsis) - 1);
		len = sizeof(line);
	} else if (line[len - 1] != '\n') {
		/* The NUL need not be kept: write() takes a length. */
		line[len++] = '\n';
	}
	log_write_all(line, len);
}

static void log_emit_direct(enum ferry_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* log_emit with its own va_list, for use before the level is known. */
static void log_emit_direct(enum ferry_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit(level, fmt, ap);
	va_end(ap);
}

/* pthread_once routine: parse FERRY_LOG once per process. */
static void log_init(void)
{
	const char *value = getenv("FERRY_LOG");
	size_t i;

	if (!value || !*value)
		return;

	for (i = 0; i < FERRY_ARRAY_SIZE(log_level_names); i++) {
		if (strcasecmp(value, log_level_names[i]) == 0) {
			log_configured = (enum ferry_log_level)i;
			return;
		}
	}
	/* ferry_log would re-enter pthread_once and deadlock: emit directly. */
	log_emit_direct(FERRY_LOG_WARN,
			"FERRY_LOG=%s is not one of error|warn|info|debug; using warn",
			value);
}

enum ferry_log_level ferry_log_level(void)
{
	int saved_errno = errno;

	pthread_once(&log_once, log_init);
	errno = saved_errno;
	return log_configured;
}

/**
 * ferry_log - print "ferry[pid]: <level>: message" on stderr when @level is
 * at or above the importance FERRY_LOG selects.  A trailing newline in @fmt
 * is optional.  errno is preserved, so @fmt may use %m.
 */
void ferry_log(enum ferry_log_level level, const char *fmt, ...)
{
	int saved_errno = errno;
	va_list ap;

	if ((unsigned int)level > FERRY_LOG_DEBUG)
		level = FERRY_LOG_DEBUG;
	if (level > ferry_log_level())
		goto out;

	va_start(ap, fmt);
	errno = saved_errno;	/* what %m must print */
	log_emit(level, fmt, ap);
	va_end(ap);
out:
	errno = saved_errno;
}
