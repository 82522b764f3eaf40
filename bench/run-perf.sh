#!/bin/sh
# run-perf.sh - benchmark (not a test): run `ferry-perf --local`, keep the
# table (and with --json the JSON lines too) with a note of the machine and
# the commit, and print the table.
#
# Usage: bench/run-perf.sh [--json] [-o DIR] [-b BUILDDIR] [-- FERRY-PERF-OPTIONS]
#   --json        also run once more with --json and keep perf-*.json
#   -o DIR        where to keep results (default: ./perf-results)
#   -b BUILDDIR   where tools/ferry-perf was built (default: the source tree)
#   FERRY_PERF=/path/to/ferry-perf overrides both.
# Each run is limited to 120 s.
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=$srcdir
outdir=./perf-results
json=no

while [ $# -gt 0 ]; do
	case $1 in
	--json) json=yes ;;
	-o) [ $# -ge 2 ] || { echo "run-perf.sh: -o needs a directory" >&2; exit 2; }
	    outdir=$2; shift ;;
	-b) [ $# -ge 2 ] || { echo "run-perf.sh: -b needs a directory" >&2; exit 2; }
	    builddir=$2; shift ;;
	-h|--help) sed -n '2,13s/^# \{0,1\}//p' "$0"; exit 0 ;;
	--) shift; break ;;
	*) echo "run-perf.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
	shift
done

perf=${FERRY_PERF:-$builddir/tools/ferry-perf}
if [ ! -x "$perf" ]; then
	echo "run-perf.sh: $perf not found: build first (make) or set FERRY_PERF" >&2
	exit 1
fi

mkdir -p "$outdir"
stamp=$(date +%Y%m%d-%H%M%S)
table=$outdir/perf-$stamp.txt
rev=$(git -C "$srcdir" rev-parse --short HEAD 2>/dev/null || echo unknown)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)

{
	echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) ferry $rev on $(uname -n), $(uname -r)"
	echo "# $(nproc) cpus: ${cpu:-unknown}; load: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# ferry-perf --local $*"
} >"$table"

status=0
timeout 120 "$perf" --local "$@" >>"$table" || status=$?
cat "$table"
if [ "$status" -ne 0 ]; then
	echo "run-perf.sh: ferry-perf failed (status $status); partial results in $table" >&2
	exit "$status"
fi

if [ "$json" = yes ]; then
	jsonfile=$outdir/perf-$stamp.json
	timeout 120 "$perf" --local --json "$@" >"$jsonfile" || status=$?
	echo "# JSON lines in $jsonfile"
fi
echo "# table in $table"
exit "$status"
