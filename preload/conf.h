/*
 * conf.h - which programs and which addresses the preload shim moves onto
 * ferry: FERRY_PRELOAD, FERRY_EXCLUDE_PORTS, FERRY_EXCLUDE_PROGRAMS and the
 * rules of the configuration file (man/ferry.conf.5).
 *
 * (Named conf.h, not config.h: the shim's sources include autoconf's
 * "config.h", which a config.h beside them would shadow.)
 *
 * The rules are read once; the queries after that only compare integers
 * and bytes: no allocation, no locale, no lock, no system call, so they
 * may run inside connect() and listen() on any thread.
 */
#ifndef FERRY_PRELOAD_CONF_H
#define FERRY_PRELOAD_CONF_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/socket.h>

/* The file read when FERRY_CONF is not set (skipped when absent). */
#define FP_CONF_DEFAULT_PATH	"/etc/ferry.conf"

/*
 * fp_config_load - read the environment and the configuration file
 * ($FERRY_CONF, else /etc/ferry.conf when it exists).  Runs once per
 * process, whoever calls first; the queries call it themselves, so a
 * socket opened by another library's constructor before the shim's own
 * is judged by the same rules.  Lines that cannot be used are reported
 * with ferry_warn and skipped.
 */
void fp_config_load(void);

/*
 * fp_config_enabled - may this program use ferry at all?  False when
 * FERRY_PRELOAD is off|0|no|false, or when the program (the basename of
 * /proc/self/exe or program_invocation_short_name) is excluded.
 */
bool fp_config_enabled(void);

/*
 * fp_config_allow - may ferry carry a connection to this peer (connect) or
 * on this local address (listen)?  Non-INET families are never allowed.
 * IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
 */
bool fp_config_allow(const struct sockaddr *addr, socklen_t len);

/* --- for the unit tests (tests/check_config.c) --- */

/* Forget every rule and mark the configuration loaded: the environment
 * and the file are not read any more.  @program: the name program rules
 * are matched against (NULL: this process's). */
void fp_config_reset(const char *program);
/* Add one line of the file format; @where and @lineno only name it in
 * messages.  Returns false (after a warning) when the line was skipped. */
bool fp_config_add_line(const char *line, const char *where, int lineno);
/* Add every line of @f; returns the number of lines skipped. */
int fp_config_add_file(FILE *f, const char *where);
/* Rules held now (program rules and connection rules). */
int fp_config_rule_count(void);

#endif /* FERRY_PRELOAD_CONF_H */
