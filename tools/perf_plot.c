/*
 * perf_plot.c - --plot FILE.png: the stream rows of the run drawn against
 * message size with gnuplot, one panel for the round trip (p50) and one
 * for the throughput, one line per transport and mode.
 *
 * The data and the script go to a private temporary directory; gnuplot runs
 * as a child process on the script.  Without gnuplot the run still succeeds
 * as far as the measurements go, and says why there is no picture.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perf.h"

#define PLOT_MAX_SERIES (PERF_TR_COUNT * PERF_MODE_COUNT)

/* One line of a panel: the rows of one test, transport and mode. */
struct plot_series {
	enum perf_test test;
	enum perf_transport transport;
	enum perf_mode mode;
	int points;
	char path[512];
};

struct plot_state {
	const char *dir;		/* made by mkdtemp */
	struct plot_series series[2 * PLOT_MAX_SERIES];
	int nseries;
};

static struct plot_series *plot_series_get(struct plot_state *st,
					   const struct perf_result *r)
{
	struct plot_series *ps;
	int i;

	for (i = 0; i < st->nseries; i++) {
		ps = &st->series[i];
		if (ps->test == r->test && ps->transport == r->transport &&
		    ps->mode == r->mode)
			return ps;
	}
	if (st->nseries == (int)(sizeof(st->series) / sizeof(st->series[0])))
		return NULL;
	ps = &st->series[st->nseries++];
	ps->test = r->test;
	ps->transport = r->transport;
	ps->mode = r->mode;
	ps->points = 0;
	snprintf(ps->path, sizeof(ps->path), "%s/%s-%s-%s.dat", st->dir,
		 perf_test_name(r->test), perf_transport_name(r->transport),
		 perf_mode_name(r->mode));
	return ps;
}

/* Append the stream lat and bw rows to one data file per series. */
static int plot_write_data(struct plot_state *st)
{
	const struct perf_result *rows;
	struct plot_series *ps;
	int n, i;
	FILE *f;

	rows = perf_report_rows(&n);
	for (i = 0; i < n; i++) {
		const struct perf_result *r = &rows[i];

		if (r->op != PERF_OP_STREAM || r->skipped ||
		    (r->test != PERF_TEST_LAT && r->test != PERF_TEST_BW))
			continue;
		ps = plot_series_get(st, r);
		if (!ps)
			continue;
		f = fopen(ps->path, "a");
		if (!f) {
			fprintf(stderr, "%s: --plot: %s: %s\n", PERF_PROG, ps->path,
				strerror(errno));
			return -1;
		}
		fprintf(f, "%zu %.4f\n", r->size,
			r->test == PERF_TEST_LAT ? r->p50_us : r->gbit_s);
		fclose(f);
		ps->points++;
	}
	return 0;
}

/* The plot command of one panel. */
static void plot_panel(FILE *f, const struct plot_state *st, enum perf_test test)
{
	const char *sep = "plot ";
	int i;

	for (i = 0; i < st->nseries; i++) {
		const struct plot_series *ps = &st->series[i];

		if (ps->test != test || ps->points == 0)
			continue;
		fprintf(f, "%s'%s' using 1:2 with linespoints lw 2 pt 7 ps 0.8 title '%s %s'",
			sep, ps->path, perf_transport_name(ps->transport),
			perf_mode_name(ps->mode));
		sep = ", \\\n     ";
	}
	if (*sep == 'p')	/* no series: an empty panel, said so */
		fprintf(f, "set label 1 'no rows' at graph 0.5, graph 0.5 center\n"
			   "plot 1/0 notitle\nunset label 1");
	fputc('\n', f);
}

static int plot_write_script(const struct plot_state *st, const char *png,
			     const char *script)
{
	FILE *f = fopen(script, "w");

	if (!f) {
		fprintf(stderr, "%s: --plot: %s: %s\n", PERF_PROG, script,
			strerror(errno));
		return -1;
	}
	fprintf(f,
		"if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
		"  set terminal pngcairo size 1400,560 font 'sans,10'\n"
		"} else {\n"
		"  set terminal png size 1400,560\n"
		"}\n"
		"set output '%s'\n"
		"set multiplot layout 1,2 title 'ferry-perf --local: stream sockets against message size (this run)'\n"
		"set logscale xy\n"
		"set grid\n"
		"set key top left\n"
		"set xlabel 'message size (bytes)'\n"
		"set xtics ('8' 8, '64' 64, '512' 512, '4K' 4096, '32K' 32768, "
		"'256K' 262144, '2M' 2097152)\n"
		"set title 'round trip, p50 (lower is better)'\n"
		"set ylabel 'microseconds'\n", png);
	plot_panel(f, st, PERF_TEST_LAT);
	fprintf(f,
		"set title 'streaming throughput (higher is better)'\n"
		"set ylabel 'Gbit/s'\n");
	plot_panel(f, st, PERF_TEST_BW);
	fprintf(f, "unset multiplot\n");
	if (fclose(f) != 0) {
		fprintf(stderr, "%s: --plot: %s: %s\n", PERF_PROG, script,
			strerror(errno));
		return -1;
	}
	return 0;
}

/* Run gnuplot on @script; 0 on success. */
static int plot_run_gnuplot(const char *script)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "%s: --plot: fork: %s\n", PERF_PROG, strerror(errno));
		return -1;
	}
	if (pid == 0) {
		execlp("gnuplot", "gnuplot", script, (char *)NULL);
		_exit(errno == ENOENT ? 127 : 126);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
		fprintf(stderr, "%s: --plot: gnuplot is not installed (not in PATH): no plot drawn\n",
			PERF_PROG);
		return -1;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "%s: --plot: gnuplot failed (status %d): no plot drawn\n",
			PERF_PROG, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		return -1;
	}
	return 0;
}

static void plot_cleanup(const struct plot_state *st, const char *script)
{
	int i;

	for (i = 0; i < st->nseries; i++)
		unlink(st->series[i].path);
	unlink(script);
	rmdir(st->dir);
}

int perf_plot_write(const char *png)
{
	static struct plot_state st;
	static char dir[256];
	char script[300];
	const char *tmp = getenv("TMPDIR");
	int rc;

	if (strchr(png, '\'')) {
		fprintf(stderr, "%s: --plot: the file name may not contain a quote\n",
			PERF_PROG);
		return 1;
	}
	snprintf(dir, sizeof(dir), "%s/ferry-perf-plot.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		fprintf(stderr, "%s: --plot: mkdtemp %s: %s\n", PERF_PROG, dir,
			strerror(errno));
		return 1;
	}
	st.dir = dir;
	snprintf(script, sizeof(script), "%s/plot.gp", st.dir);
	rc = plot_write_data(&st);
	if (rc == 0)
		rc = plot_write_script(&st, png, script);
	if (rc == 0)
		rc = plot_run_gnuplot(script);
	plot_cleanup(&st, script);
	if (rc == 0 && !perf_report_is_json())
		printf("# plot: %s\n", png);
	return rc == 0 ? 0 : 1;
}
