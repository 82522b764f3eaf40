/*
 * conf.c - the shim's selection rules: FERRY_PRELOAD, FERRY_EXCLUDE_PORTS,
 * FERRY_EXCLUDE_PROGRAMS and the configuration file (man/ferry.conf.5).
 *
 * Two kinds of rule, each list read first match wins:
 *   program rules   "exclude program PATTERN" / "include program PATTERN":
 *                   decided once, at load, against this program's names;
 *                   they set whether the shim works at all.
 *   connection rules "exclude|include [program P] [address A[/N]] [port N[-M]]"
 *                   or "... all": kept in an array and matched against
 *                   each address connect() or listen() is given.  A
 *                   program qualifier is settled at load: a rule for
 *                   another program is not kept.
 * Nothing matches: ferry is allowed.  Rules from the environment come
 * before the file's, so they win.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fnmatch.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "conf.h"
#include "sock-export.h"

#define FP_CONF_LINE_MAX	1024	/* longer lines are reported and skipped */
#define FP_CONF_TOKENS_MAX	12
#define FP_PROGRAM_NAME_MAX	256

/* One connection rule; the address is stored masked to its prefix. */
struct fp_rule {
	bool exclude;
	bool has_address;	/* false: any address of either family */
	int family;		/* AF_INET or AF_INET6, when has_address */
	unsigned int prefix;	/* bits of addr that must match */
	uint8_t addr[16];	/* IPv4 in the first 4 bytes */
	uint16_t port_lo;	/* inclusive range; 0-65535 when no port given */
	uint16_t port_hi;
};

/* Everything that was loaded: written once, read by any thread after. */
static struct {
	bool enabled;			/* FERRY_PRELOAD and the program rules */
	bool program_decided;		/* a program rule matched already */
	int program_rules;		/* program rules read (matching or not) */
	struct fp_rule *rules;
	int nrules, cap;
	char exe[FP_PROGRAM_NAME_MAX];	/* basename of /proc/self/exe */
	char invoked[FP_PROGRAM_NAME_MAX]; /* program_invocation_short_name */
} fp_conf = { .enabled = true };

static pthread_once_t fp_conf_once = PTHREAD_ONCE_INIT;

/* --- the program's names --- */

static void fp_conf_copy_name(char *dst, const char *src)
{
	const char *slash = strrchr(src, '/');

	size_t n;

	if (slash)
		src = slash + 1;
	n = strnlen(src, FP_PROGRAM_NAME_MAX - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
}

static void fp_conf_find_program(void)
{
	char path[4096];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);

	fp_conf.exe[0] = fp_conf.invoked[0] = '\0';
	if (n > 0) {
		path[n] = '\0';
		fp_conf_copy_name(fp_conf.exe, path);
	}
	if (program_invocation_short_name)
		fp_conf_copy_name(fp_conf.invoked, program_invocation_short_name);
}

static bool fp_conf_program_matches(const char *pattern)
{
	return (fp_conf.exe[0] && fnmatch(pattern, fp_conf.exe, 0) == 0) ||
	       (fp_conf.invoked[0] && fnmatch(pattern, fp_conf.invoked, 0) == 0);
}

/* --- parsing the parts of a rule --- */

/* A decimal number in [0, @max], the whole of @s. */
static bool fp_conf_number(const char *s, unsigned long max, unsigned long *v_p)
{
	unsigned long v = 0;

	if (!*s)
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		v = v * 10 + (unsigned long)(*s - '0');
		if (v > max)
			return false;
	}
	*v_p = v;
	return true;
}

/* "N" or "N-M" with 0 <= N <= M <= 65535. */
static bool fp_conf_ports(const char *s, struct fp_rule *r)
{
	char lo[8], *dash = strchr(s, '-');
	unsigned long a, b;
	size_t n = dash ? (size_t)(dash - s) : strlen(s);

	if (n == 0 || n >= sizeof(lo))
		return false;
	memcpy(lo, s, n);
	lo[n] = '\0';
	if (!fp_conf_number(lo, 65535, &a))
		return false;
	b = a;
	if (dash && !fp_conf_number(dash + 1, 65535, &b))
		return false;
	if (b < a)
		return false;
	r->port_lo = (uint16_t)a;
	r->port_hi = (uint16_t)b;
	return true;
}

static const uint8_t fp_v4mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

/* Clear the bits of @addr past @prefix. */
static void fp_conf_mask(uint8_t *addr, unsigned int prefix, size_t bytes)
{
	size_t i;

	for (i = 0; i < bytes; i++) {
		if (prefix >= 8) {
			prefix -= 8;
			continue;
		}
		addr[i] &= (uint8_t)(0xff00u >> prefix);
		prefix = 0;
	}
}

/* "ADDR" or "ADDR/PREFIX", IPv4 or IPv6; IPv4-mapped ranges become IPv4. */
static bool fp_conf_address(const char *s, struct fp_rule *r)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(s, '/');
	size_t n = slash ? (size_t)(slash - s) : strlen(s);
	unsigned long prefix;

	if (n == 0 || n >= sizeof(host))
		return false;
	memcpy(host, s, n);
	host[n] = '\0';
	memset(r->addr, 0, sizeof(r->addr));
	if (inet_pton(AF_INET, host, r->addr) == 1)
		r->family = AF_INET;
	else if (inet_pton(AF_INET6, host, r->addr) == 1)
		r->family = AF_INET6;
	else
		return false;
	prefix = r->family == AF_INET ? 32 : 128;
	if (slash && !fp_conf_number(slash + 1, prefix, &prefix))
		return false;
	r->prefix = (unsigned int)prefix;
	if (r->family == AF_INET6 && r->prefix >= 96 &&
	    memcmp(r->addr, fp_v4mapped_prefix, sizeof(fp_v4mapped_prefix)) == 0) {
		memmove(r->addr, r->addr + 12, 4);
		memset(r->addr + 4, 0, 12);
		r->family = AF_INET;
		r->prefix -= 96;
	}
	fp_conf_mask(r->addr, r->prefix, r->family == AF_INET ? 4 : 16);
	r->has_address = true;
	return true;
}

/* --- rules --- */

static bool fp_conf_push(const struct fp_rule *r)
{
	if (fp_conf.nrules == fp_conf.cap) {
		int cap = fp_conf.cap ? fp_conf.cap * 2 : 16;
		struct fp_rule *rules = realloc(fp_conf.rules, (size_t)cap * sizeof(*rules));

		if (!rules)
			return false;
		fp_conf.rules = rules;
		fp_conf.cap = cap;
	}
	fp_conf.rules[fp_conf.nrules++] = *r;
	return true;
}

/* A program rule: the first one that matches this program decides. */
static void fp_conf_program_rule(bool exclude, const char *pattern)
{
	fp_conf.program_rules++;
	if (fp_conf.program_decided || !fp_conf_program_matches(pattern))
		return;
	fp_conf.program_decided = true;
	if (exclude) {
		fp_conf.enabled = false;
		ferry_info("preload: program %s is excluded (rule \"%s\"): ferry is off",
			   fp_conf.invoked[0] ? fp_conf.invoked : fp_conf.exe, pattern);
	}
}

/* Split @line (modified) into words; '#' starts a comment.  -1: too many. */
static int fp_conf_split(char *line, char *tok[FP_CONF_TOKENS_MAX])
{
	int n = 0;
	char *p = line;

	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
			p++;
		if (!*p || *p == '#')
			return n;
		if (n == FP_CONF_TOKENS_MAX)
			return -1;
		tok[n++] = p;
		while (*p && *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n' && *p != '#')
			p++;
		if (*p == '#') {
			*p = '\0';
			return n;
		}
		if (*p)
			*p++ = '\0';
	}
}

/* Report why line @lineno of @where is skipped; returns false. */
static bool fp_conf_bad(const char *where, int lineno, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static bool fp_conf_bad(const char *where, int lineno, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	ferry_warn("%s:%d: %s; line ignored", where, lineno, why);
	return false;
}

#define FP_CONF_BAD(...) return fp_conf_bad(where, lineno, __VA_ARGS__)

/* What the words after the action asked for. */
struct fp_conf_parsed {
	struct fp_rule rule;
	const char *program;	/* NULL: any */
	bool all, has_port;
};

/* The conditions of a rule, tok[1..n-1], into @p; false after a warning. */
static bool fp_conf_conditions(char **tok, int n, struct fp_conf_parsed *p,
			       const char *where, int lineno)
{
	int i;

	for (i = 1; i < n; i++) {
		const char *key = tok[i], *val = i + 1 < n ? tok[i + 1] : NULL;

		if (strcmp(key, "all") == 0) {
			if (p->all)
				FP_CONF_BAD("\"all\" given twice");
			p->all = true;
			continue;
		}
		if (strcmp(key, "program") && strcmp(key, "address") && strcmp(key, "port"))
			FP_CONF_BAD("unknown word \"%s\" (expected all, program, address or port)",
				    key);
		if (!val)
			FP_CONF_BAD("\"%s\" needs a value", key);
		i++;
		if (strcmp(key, "program") == 0) {
			if (p->program)
				FP_CONF_BAD("\"program\" given twice");
			p->program = val;
		} else if (strcmp(key, "address") == 0) {
			if (p->rule.has_address)
				FP_CONF_BAD("\"address\" given twice");
			if (!fp_conf_address(val, &p->rule))
				FP_CONF_BAD("\"%s\" is not an IPv4 or IPv6 address with an optional "
					    "/prefix", val);
		} else {
			if (p->has_port)
				FP_CONF_BAD("\"port\" given twice");
			if (!fp_conf_ports(val, &p->rule))
				FP_CONF_BAD("\"%s\" is not a port or a range N-M within 0-65535",
					    val);
			p->has_port = true;
		}
	}
	if (p->all && (p->rule.has_address || p->has_port))
		FP_CONF_BAD("\"all\" cannot go with \"address\" or \"port\"");
	return true;
}

bool fp_config_add_line(const char *line, const char *where, int lineno)
{
	char buf[FP_CONF_LINE_MAX], *tok[FP_CONF_TOKENS_MAX];
	struct fp_conf_parsed p = { .rule = { .port_lo = 0, .port_hi = 65535 } };
	int n;

	if (strlen(line) >= sizeof(buf))
		FP_CONF_BAD("line longer than %d bytes", FP_CONF_LINE_MAX - 1);
	strcpy(buf, line);
	n = fp_conf_split(buf, tok);
	if (n == 0)
		return true;	/* blank or comment */
	if (n < 0)
		FP_CONF_BAD("more than %d words", FP_CONF_TOKENS_MAX);
	if (strcmp(tok[0], "exclude") == 0)
		p.rule.exclude = true;
	else if (strcmp(tok[0], "include") != 0)
		FP_CONF_BAD("\"%s\" is not \"exclude\" or \"include\"", tok[0]);
	if (n == 1)
		FP_CONF_BAD("\"%s\" needs what it applies to (all, program, address, port)",
			    tok[0]);
	if (!fp_conf_conditions(tok, n, &p, where, lineno))
		return false;
	if (!p.all && !p.rule.has_address && !p.has_port) {
		/* Only a program: a program rule. */
		fp_conf_program_rule(p.rule.exclude, p.program);
		return true;
	}
	if (p.program && !fp_conf_program_matches(p.program))
		return true;	/* a valid rule for another program */
	if (!fp_conf_push(&p.rule))
		FP_CONF_BAD("no memory for the rule");
	return true;
}

int fp_config_add_file(FILE *f, const char *where)
{
	char line[FP_CONF_LINE_MAX + 1];
	int lineno = 0, skipped = 0;
	bool too_long = false;

	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);
		bool whole = len > 0 && line[len - 1] == '\n';

		if (!too_long)
			lineno++;
		if (too_long) {
			/* The rest of a line already reported. */
			too_long = !whole;
			continue;
		}
		if (!whole && !feof(f)) {
			ferry_warn("%s:%d: line longer than %d bytes; line ignored", where,
				   lineno, FP_CONF_LINE_MAX - 1);
			skipped++;
			too_long = true;
			continue;
		}
		if (!fp_config_add_line(line, where, lineno))
			skipped++;
	}
	if (ferror(f))
		ferry_warn("%s: reading: %m", where);
	return skipped;
}

/* --- the environment --- */

/* FERRY_EXCLUDE_PORTS=22,6000-6010 or FERRY_EXCLUDE_PROGRAMS=sshd,curl. */
static void fp_conf_env_list(const char *var, const char *key)
{
	const char *value = getenv(var), *p;
	char line[FP_CONF_LINE_MAX];
	int item = 0;

	if (!value)
		return;
	for (p = value; *p;) {
		size_t n = strcspn(p, ",");

		item++;
		if (n > 0 && n < 256) {
			snprintf(line, sizeof(line), "exclude %s %.*s", key, (int)n, p);
			fp_config_add_line(line, var, item);
		} else if (n > 0) {
			ferry_warn("%s: item %d is too long; ignored", var, item);
		}
		p += n;
		if (*p == ',')
			p++;
	}
}

static void fp_conf_env_switch(void)
{
	static const char *const off[] = { "off", "0", "no", "false" };
	static const char *const on[] = { "on", "1", "yes", "true", "" };
	const char *value = getenv("FERRY_PRELOAD");
	size_t i;

	if (!value)
		return;
	for (i = 0; i < FERRY_ARRAY_SIZE(off); i++) {
		if (strcasecmp(value, off[i]) == 0) {
			fp_conf.enabled = false;
			fp_conf.program_decided = true;
			ferry_info("preload: FERRY_PRELOAD=%s: ferry is off", value);
			return;
		}
	}
	for (i = 0; i < FERRY_ARRAY_SIZE(on); i++)
		if (strcasecmp(value, on[i]) == 0)
			return;
	ferry_warn("FERRY_PRELOAD=%s is not one of on|off (or 1|0, yes|no): taken as on",
		   value);
}

static void fp_conf_read_file(void)
{
	const char *path = getenv("FERRY_CONF");
	bool named = path != NULL;
	FILE *f;

	if (named && !*path)
		return;	/* FERRY_CONF= : no file */
	if (!named)
		path = FP_CONF_DEFAULT_PATH;
	f = fopen(path, "re");
	if (!f) {
		if (named || errno != ENOENT)
			ferry_warn("configuration file %s: %m; no rules read from it", path);
		return;
	}
	fp_config_add_file(f, path);
	fclose(f);
}

/* pthread_once routine: everything, in the order it takes precedence. */
static void fp_conf_load_once(void)
{
	fp_conf_find_program();
	fp_conf_env_switch();
	fp_conf_env_list("FERRY_EXCLUDE_PROGRAMS", "program");
	fp_conf_env_list("FERRY_EXCLUDE_PORTS", "port");
	fp_conf_read_file();
}

void fp_config_load(void)
{
	int saved_errno = errno;

	pthread_once(&fp_conf_once, fp_conf_load_once);
	errno = saved_errno;
}

/* --- queries --- */

bool fp_config_enabled(void)
{
	fp_config_load();
	return fp_conf.enabled;
}

static bool fp_rule_matches(const struct fp_rule *r, int family, const uint8_t *addr,
			    uint16_t port)
{
	unsigned int full, rest;

	if (port < r->port_lo || port > r->port_hi)
		return false;
	if (!r->has_address)
		return true;
	if (r->family != family)
		return false;
	full = r->prefix / 8;
	rest = r->prefix % 8;
	if (memcmp(r->addr, addr, full) != 0)
		return false;
	return !rest || ((addr[full] ^ r->addr[full]) & (uint8_t)(0xff00u >> rest)) == 0;
}

bool fp_config_allow(const struct sockaddr *sa, socklen_t len)
{
	const uint8_t *addr;
	uint16_t port;
	int family, i;

	if (!fp_config_enabled() || !sa)
		return false;
	if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

		family = AF_INET;
		addr = (const uint8_t *)&sin->sin_addr;
		port = ntohs(sin->sin_port);
	} else if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;

		family = AF_INET6;
		addr = (const uint8_t *)&sin6->sin6_addr;
		port = ntohs(sin6->sin6_port);
		if (memcmp(addr, fp_v4mapped_prefix, sizeof(fp_v4mapped_prefix)) == 0) {
			family = AF_INET;
			addr += 12;
		}
	} else {
		return false;
	}
	for (i = 0; i < fp_conf.nrules; i++)
		if (fp_rule_matches(&fp_conf.rules[i], family, addr, port))
			return !fp_conf.rules[i].exclude;
	return true;
}

/* --- tests --- */

void fp_config_reset(const char *program)
{
	pthread_once(&fp_conf_once, fp_conf_find_program);
	free(fp_conf.rules);
	fp_conf.rules = NULL;
	fp_conf.nrules = fp_conf.cap = 0;
	fp_conf.enabled = true;
	fp_conf.program_decided = false;
	fp_conf.program_rules = 0;
	if (program) {
		fp_conf_copy_name(fp_conf.exe, program);
		fp_conf_copy_name(fp_conf.invoked, program);
	}
}

int fp_config_rule_count(void)
{
	return fp_conf.program_rules + fp_conf.nrules;
}
