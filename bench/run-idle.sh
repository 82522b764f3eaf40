#!/bin/sh
# run-idle.sh - benchmark (not a test): the memory of N idle ferry stream
# connections (shm) beside N kernel TCP connections, both processes counted
# together (see bench/idle-conns.c).  Issue 4's target: at most 200 MB in
# all for 10,000 ferry connections.
#
# Usage: bench/run-idle.sh [-b BUILDDIR] [-- IDLE-CONNS-OPTIONS]
#   -b BUILDDIR   where bench/idle-conns was built (default: the source tree)
#   IDLE-CONNS-OPTIONS: -n N (default 10000), -k ferry|tcp|both
# Limited to 280 s.
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=$srcdir

while [ $# -gt 0 ]; do
	case $1 in
	-b) [ $# -ge 2 ] || { echo "run-idle.sh: -b needs a directory" >&2; exit 2; }
	    builddir=$2; shift ;;
	-h|--help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
	--) shift; break ;;
	*) echo "run-idle.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
	shift
done

prog=$builddir/bench/idle-conns
if [ ! -x "$prog" ]; then
	echo "run-idle.sh: $prog not found: build first (make)" >&2
	exit 1
fi
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) ferry $(git -C "$srcdir" rev-parse --short HEAD 2>/dev/null || echo unknown) on $(uname -n); fd hard limit $(ulimit -Hn)"
exec timeout 280 "$prog" "$@"
