/*
 * check_config.c - the preload shim's selection rules (preload/conf.c):
 * parsing of the file format, the messages bad lines give, matching of
 * ports, addresses and prefixes, program rules, and the environment.
 *
 * Each test runs in its own process (CK_FORK), so the once-only load
 * starts fresh in every test.
 */
#include "config.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

#include "conf.h"
#include "check_suites.h"

/* --- helpers --- */

static struct sockaddr_storage cc_ss;

/* An address for the queries: "1.2.3.4" or "::1", and a port. */
static const struct sockaddr *cc_addr(const char *host, unsigned int port, socklen_t *len_p)
{
	memset(&cc_ss, 0, sizeof(cc_ss));
	if (strchr(host, ':')) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&cc_ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		ck_assert_int_eq(inet_pton(AF_INET6, host, &sin6->sin6_addr), 1);
		*len_p = sizeof(*sin6);
	} else {
		struct sockaddr_in *sin = (struct sockaddr_in *)&cc_ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		ck_assert_int_eq(inet_pton(AF_INET, host, &sin->sin_addr), 1);
		*len_p = sizeof(*sin);
	}
	return (const struct sockaddr *)&cc_ss;
}

static bool cc_allow(const char *host, unsigned int port)
{
	socklen_t len;
	const struct sockaddr *sa = cc_addr(host, port, &len);

	return fp_config_allow(sa, len);
}

static void cc_rules(const char *const *lines)
{
	int i;

	for (i = 0; lines[i]; i++)
		ck_assert_msg(fp_config_add_line(lines[i], "test", i + 1), "line %d: %s", i + 1,
			      lines[i]);
}

/*
 * Run @line through the parser with stderr captured; the line must be
 * refused with a message naming "where:lineno" and containing @expect.
 */
static void cc_refused(const char *line, const char *expect)
{
	char msg[2048];
	FILE *tmp = tmpfile();
	int saved = dup(STDERR_FILENO), rules = fp_config_rule_count();
	size_t n;
	bool ok;

	ck_assert_ptr_nonnull(tmp);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_eq(dup2(fileno(tmp), STDERR_FILENO), STDERR_FILENO);
	ok = fp_config_add_line(line, "bad.conf", 7);
	dup2(saved, STDERR_FILENO);
	close(saved);
	rewind(tmp);
	n = fread(msg, 1, sizeof(msg) - 1, tmp);
	msg[n] = '\0';
	fclose(tmp);
	ck_assert_msg(!ok, "accepted: %s", line);
	ck_assert_int_eq(fp_config_rule_count(), rules);
	ck_assert_msg(strstr(msg, "bad.conf:7: ") != NULL, "no location for \"%s\": %s", line,
		      msg);
	ck_assert_msg(strstr(msg, expect) != NULL, "\"%s\" gave \"%s\", wanted \"%s\"", line,
		      msg, expect);
	ck_assert_msg(strstr(msg, "line ignored") != NULL, "%s", msg);
}

/* --- parsing --- */

START_TEST(test_parse_valid)
{
	static const char *const lines[] = {
		"",
		"   # only a comment",
		"exclude port 22",
		"exclude port 6000-6010   # X11",
		"include address 10.1.0.0/16",
		"exclude address 10.0.0.0/8 port 80",
		"\texclude\taddress fe80::/10\r\n",
		"exclude address ::1",
		"include all",
		"exclude port 5#comment glued to a word",
		NULL,
	};

	fp_config_reset("tester");
	cc_rules(lines);
	ck_assert_int_eq(fp_config_rule_count(), 8);
}
END_TEST

START_TEST(test_parse_errors)
{
	fp_config_reset("tester");
	cc_refused("allow port 22", "\"allow\" is not \"exclude\" or \"include\"");
	cc_refused("exclude", "needs what it applies to");
	cc_refused("exclude port", "\"port\" needs a value");
	cc_refused("exclude port 70000", "\"70000\" is not a port");
	cc_refused("exclude port 90-80", "\"90-80\" is not a port");
	cc_refused("exclude port 1-", "\"1-\" is not a port");
	cc_refused("exclude port -5", "\"-5\" is not a port");
	cc_refused("exclude port 2x", "\"2x\" is not a port");
	cc_refused("exclude port 22 port 23", "\"port\" given twice");
	cc_refused("exclude address 300.1.1.1", "\"300.1.1.1\" is not an IPv4 or IPv6");
	cc_refused("exclude address 10.0.0.0/33", "\"10.0.0.0/33\" is not an IPv4");
	cc_refused("exclude address ::/129", "\"::/129\" is not an IPv4");
	cc_refused("exclude address 10.0.0.0/", "\"10.0.0.0/\" is not an IPv4");
	cc_refused("exclude address localhost", "\"localhost\" is not an IPv4");
	cc_refused("exclude all port 80", "\"all\" cannot go with");
	cc_refused("exclude all all", "\"all\" given twice");
	cc_refused("exclude program", "\"program\" needs a value");
	cc_refused("exclude program a program b", "\"program\" given twice");
	cc_refused("exclude host 10.0.0.1", "unknown word \"host\"");
	cc_refused("exclude port 1 port 2 port 3 port 4 port 5 port 6 port 7",
		   "more than 12 words");
	ck_assert_int_eq(fp_config_rule_count(), 0);
	/* Nothing was kept: everything is still allowed. */
	ck_assert(cc_allow("10.0.0.1", 22));
}
END_TEST

START_TEST(test_parse_long_line)
{
	char line[1500];

	fp_config_reset("tester");
	memset(line, ' ', sizeof(line) - 1);
	line[sizeof(line) - 1] = '\0';
	memcpy(line, "exclude port 22", 15);
	cc_refused(line, "line longer than 1023 bytes");
}
END_TEST

START_TEST(test_parse_file)
{
	static const char text[] =
		"# ferry.conf for a test\n"
		"exclude port 22\n"
		"exclude portt 23\n"
		"\n"
		"exclude address 192.168.0.0/16\n"
		"include\n"
		"exclude port 25";	/* no newline at the end */
	FILE *f = fmemopen((void *)text, sizeof(text) - 1, "r");
	FILE *tmp = tmpfile();
	int saved = dup(STDERR_FILENO), skipped;
	char msg[2048];
	size_t n;

	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(tmp);
	fp_config_reset("tester");
	dup2(fileno(tmp), STDERR_FILENO);
	skipped = fp_config_add_file(f, "t.conf");
	dup2(saved, STDERR_FILENO);
	close(saved);
	fclose(f);
	rewind(tmp);
	n = fread(msg, 1, sizeof(msg) - 1, tmp);
	msg[n] = '\0';
	fclose(tmp);
	ck_assert_int_eq(skipped, 2);
	ck_assert_int_eq(fp_config_rule_count(), 3);
	ck_assert_msg(strstr(msg, "t.conf:3: ") && strstr(msg, "t.conf:6: "), "%s", msg);
	ck_assert(!cc_allow("127.0.0.1", 22));
	ck_assert(cc_allow("127.0.0.1", 23));
	ck_assert(!cc_allow("127.0.0.1", 25));
	ck_assert(!cc_allow("192.168.3.4", 80));
}
END_TEST

START_TEST(test_parse_file_long_line)
{
	char text[3000];
	FILE *f;
	int saved = dup(STDERR_FILENO);
	FILE *tmp = tmpfile();

	/* line 1 too long, line 2 a rule: line numbers stay right after it. */
	memset(text, 'x', sizeof(text));
	memcpy(text + 2000, "\nexclude port 9\nbogus\n", 23);
	f = fmemopen(text, 2022, "r");
	ck_assert_ptr_nonnull(f);
	fp_config_reset("tester");
	dup2(fileno(tmp), STDERR_FILENO);
	ck_assert_int_eq(fp_config_add_file(f, "l.conf"), 2);
	dup2(saved, STDERR_FILENO);
	close(saved);
	fclose(f);
	{
		char msg[2048];
		size_t n;

		rewind(tmp);
		n = fread(msg, 1, sizeof(msg) - 1, tmp);
		msg[n] = '\0';
		ck_assert_msg(strstr(msg, "l.conf:1: line longer") && strstr(msg, "l.conf:3: "),
			      "%s", msg);
	}
	fclose(tmp);
	ck_assert_int_eq(fp_config_rule_count(), 1);
	ck_assert(!cc_allow("1.2.3.4", 9));
}
END_TEST

/* --- matching --- */

START_TEST(test_match_ports)
{
	static const char *const lines[] = {
		"exclude port 22",
		"exclude port 6000-6010",
		NULL,
	};

	fp_config_reset("tester");
	cc_rules(lines);
	ck_assert(!cc_allow("127.0.0.1", 22));
	ck_assert(cc_allow("127.0.0.1", 21));
	ck_assert(cc_allow("127.0.0.1", 23));
	ck_assert(cc_allow("127.0.0.1", 5999));
	ck_assert(!cc_allow("127.0.0.1", 6000));
	ck_assert(!cc_allow("::1", 6005));
	ck_assert(!cc_allow("127.0.0.1", 6010));
	ck_assert(cc_allow("127.0.0.1", 6011));
}
END_TEST

START_TEST(test_match_ipv4_prefix)
{
	static const char *const lines[] = {
		"exclude address 10.0.0.0/8",
		"exclude address 192.168.1.77/30",	/* host bits are ignored */
		"exclude address 172.16.5.4",
		"exclude address 0.0.0.0/0 port 25",
		NULL,
	};

	fp_config_reset("tester");
	cc_rules(lines);
	ck_assert(!cc_allow("10.0.0.1", 80));
	ck_assert(!cc_allow("10.255.255.255", 80));
	ck_assert(cc_allow("11.0.0.1", 80));
	ck_assert(cc_allow("9.255.255.255", 80));
	ck_assert(!cc_allow("192.168.1.76", 80));
	ck_assert(!cc_allow("192.168.1.79", 80));
	ck_assert(cc_allow("192.168.1.75", 80));
	ck_assert(cc_allow("192.168.1.80", 80));
	ck_assert(!cc_allow("172.16.5.4", 1));
	ck_assert(cc_allow("172.16.5.5", 1));
	ck_assert(!cc_allow("1.2.3.4", 25));
	/* An IPv4 rule does not apply to IPv6 peers. */
	ck_assert(cc_allow("2001:db8::1", 25));
}
END_TEST

START_TEST(test_match_ipv6_prefix)
{
	static const char *const lines[] = {
		"exclude address 2001:db8::/33",
		"exclude address fe80::/10",
		"exclude address ::1/128 port 8080",
		NULL,
	};

	fp_config_reset("tester");
	cc_rules(lines);
	ck_assert(!cc_allow("2001:db8::1", 80));
	ck_assert(!cc_allow("2001:db8:7fff:ffff::1", 80));
	ck_assert(cc_allow("2001:db8:8000::1", 80));
	ck_assert(!cc_allow("fe80::1", 80));
	ck_assert(!cc_allow("febf::1", 80));
	ck_assert(cc_allow("fec0::1", 80));
	ck_assert(!cc_allow("::1", 8080));
	ck_assert(cc_allow("::1", 8081));
	ck_assert(cc_allow("10.0.0.1", 80));
}
END_TEST

START_TEST(test_match_v4mapped)
{
	static const char *const lines[] = {
		"exclude address 10.0.0.0/8",
		"exclude address ::ffff:192.168.0.0/112",
		NULL,
	};

	fp_config_reset("tester");
	cc_rules(lines);
	/* A mapped peer is judged as IPv4, and a mapped rule is an IPv4 rule. */
	ck_assert(!cc_allow("::ffff:10.1.2.3", 80));
	ck_assert(cc_allow("::ffff:11.1.2.3", 80));
	ck_assert(!cc_allow("192.168.7.7", 80));
	ck_assert(!cc_allow("::ffff:192.168.7.7", 80));
	ck_assert(cc_allow("192.169.0.1", 80));
}
END_TEST

START_TEST(test_match_first_wins)
{
	static const char *const lines[] = {
		"include port 6379",
		"include address 127.0.0.0/8 port 8000-8999",
		"exclude all",
		"include port 22",	/* never reached */
		NULL,
	};

	fp_config_reset("tester");
	cc_rules(lines);
	ck_assert(cc_allow("10.0.0.1", 6379));
	ck_assert(cc_allow("127.0.0.1", 8080));
	ck_assert(!cc_allow("10.0.0.1", 8080));
	ck_assert(!cc_allow("127.0.0.1", 22));
	ck_assert(!cc_allow("::1", 80));
}
END_TEST

START_TEST(test_match_default_and_families)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct sockaddr_in sin = { .sin_family = AF_INET };
	const struct sockaddr *sa;
	socklen_t len = 0;

	fp_config_reset("tester");
	ck_assert(fp_config_enabled());
	ck_assert(cc_allow("127.0.0.1", 1));
	ck_assert(cc_allow("::", 0));
	ck_assert(!fp_config_allow((struct sockaddr *)&sun, sizeof(sun)));
	ck_assert(!fp_config_allow((struct sockaddr *)&sin, sizeof(sin) - 1));
	ck_assert(!fp_config_allow(NULL, 0));
	sa = cc_addr("::1", 80, &len);
	ck_assert(!fp_config_allow(sa, len - 1));
}
END_TEST

/* --- programs --- */

START_TEST(test_program_excluded)
{
	fp_config_reset("redis-server");
	ck_assert(fp_config_add_line("exclude program redis-*", "test", 1));
	ck_assert(!fp_config_enabled());
	ck_assert(!cc_allow("127.0.0.1", 6379));
}
END_TEST

START_TEST(test_program_first_wins)
{
	static const char *const lines[] = {
		"exclude program sshd",
		"include program redis-server",
		"exclude program *",
		NULL,
	};

	fp_config_reset("redis-server");
	cc_rules(lines);
	ck_assert(fp_config_enabled());
	fp_config_reset("iperf3");
	cc_rules(lines);
	ck_assert(!fp_config_enabled());
	fp_config_reset("sshd");
	cc_rules(lines);
	ck_assert(!fp_config_enabled());
}
END_TEST

START_TEST(test_program_qualified_rule)
{
	static const char *const lines[] = {
		"exclude program nginx port 80",
		"exclude program curl address 10.0.0.0/8",
		NULL,
	};

	fp_config_reset("nginx");
	cc_rules(lines);
	ck_assert(fp_config_enabled());
	ck_assert(!cc_allow("127.0.0.1", 80));
	ck_assert(cc_allow("10.0.0.1", 81));
	fp_config_reset("curl");
	cc_rules(lines);
	ck_assert(cc_allow("127.0.0.1", 80));
	ck_assert(!cc_allow("10.0.0.1", 81));
}
END_TEST

/* --- the environment and the file, through fp_config_load --- */

START_TEST(test_env_off)
{
	static const char *const offs[] = { "off", "0", "no", "FALSE", NULL };
	const char *v = offs[_i];

	if (!v)
		return;
	setenv("FERRY_PRELOAD", v, 1);
	setenv("FERRY_CONF", "", 1);
	fp_config_load();
	ck_assert_msg(!fp_config_enabled(), "FERRY_PRELOAD=%s", v);
	ck_assert(!cc_allow("127.0.0.1", 80));
}
END_TEST

START_TEST(test_env_lists_and_file)
{
	char path[] = "/tmp/ferry-conf-XXXXXX";
	int fd = mkstemp(path);
	static const char text[] = "exclude address 10.0.0.0/8\ninclude port 7000\n"
				   "exclude port 7000-7100\n";

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, sizeof(text) - 1), (ssize_t)sizeof(text) - 1);
	close(fd);
	setenv("FERRY_PRELOAD", "on", 1);
	setenv("FERRY_CONF", path, 1);
	setenv("FERRY_EXCLUDE_PORTS", "22,7000,9000-9001", 1);
	setenv("FERRY_EXCLUDE_PROGRAMS", "no-such-program-here", 1);
	fp_config_load();
	unlink(path);
	ck_assert(fp_config_enabled());
	ck_assert(!cc_allow("127.0.0.1", 22));
	/* The environment comes first: its 7000 wins over the file's include. */
	ck_assert(!cc_allow("127.0.0.1", 7000));
	ck_assert(!cc_allow("127.0.0.1", 7050));
	ck_assert(!cc_allow("127.0.0.1", 9001));
	ck_assert(cc_allow("127.0.0.1", 9002));
	ck_assert(!cc_allow("10.9.9.9", 80));
}
END_TEST

START_TEST(test_env_program_self)
{
	/* This process is check_ferry (or lt-check_ferry under libtool). */
	setenv("FERRY_CONF", "", 1);
	setenv("FERRY_EXCLUDE_PROGRAMS", "nothing,*check_ferry", 1);
	fp_config_load();
	ck_assert(!fp_config_enabled());
}
END_TEST

START_TEST(test_env_missing_file)
{
	FILE *tmp = tmpfile();
	int saved = dup(STDERR_FILENO);
	char msg[1024];
	size_t n;

	setenv("FERRY_CONF", "/nonexistent/ferry.conf", 1);
	dup2(fileno(tmp), STDERR_FILENO);
	fp_config_load();
	dup2(saved, STDERR_FILENO);
	close(saved);
	rewind(tmp);
	n = fread(msg, 1, sizeof(msg) - 1, tmp);
	msg[n] = '\0';
	fclose(tmp);
	ck_assert_msg(strstr(msg, "/nonexistent/ferry.conf") != NULL, "%s", msg);
	ck_assert(fp_config_enabled());
	ck_assert(cc_allow("127.0.0.1", 80));
}
END_TEST

Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("parse");

	tcase_add_test(tc, test_parse_valid);
	tcase_add_test(tc, test_parse_errors);
	tcase_add_test(tc, test_parse_long_line);
	tcase_add_test(tc, test_parse_file);
	tcase_add_test(tc, test_parse_file_long_line);
	suite_add_tcase(s, tc);

	tc = tcase_create("match");
	tcase_add_test(tc, test_match_ports);
	tcase_add_test(tc, test_match_ipv4_prefix);
	tcase_add_test(tc, test_match_ipv6_prefix);
	tcase_add_test(tc, test_match_v4mapped);
	tcase_add_test(tc, test_match_first_wins);
	tcase_add_test(tc, test_match_default_and_families);
	suite_add_tcase(s, tc);

	tc = tcase_create("program");
	tcase_add_test(tc, test_program_excluded);
	tcase_add_test(tc, test_program_first_wins);
	tcase_add_test(tc, test_program_qualified_rule);
	suite_add_tcase(s, tc);

	tc = tcase_create("env");
	tcase_add_loop_test(tc, test_env_off, 0, 4);
	tcase_add_test(tc, test_env_lists_and_file);
	tcase_add_test(tc, test_env_program_self);
	tcase_add_test(tc, test_env_missing_file);
	suite_add_tcase(s, tc);
	return s;
}
