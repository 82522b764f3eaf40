#!/usr/bin/env bash
# tcp-netns.sh - benchmark (not a test): ferry's tcp transport between two
# hosts, beside kernel TCP on the same path, in the same run.  Two network
# namespaces joined by a veth pair (10.80.0.1/24, 10.80.0.2/24), a
# `ferry-perf -s -a` in one and a `ferry-perf -c -a` in the other: 64 B
# WRITE_WITH_IMM, SEND and READ round trips beside a TCP ping-pong, 64 KiB
# WRITE and READ streams beside a TCP stream, both ends' CPU time per GB,
# and issue 16's ratios (round trip at most 1.3x TCP's, streams at least
# 0.8x).  Keeps the table with a note of the machine and the commit, and
# prints it.
#
# Usage: bench/tcp-netns.sh [-o DIR] [-b BUILDDIR] [-- FERRY-PERF-OPTIONS]
#   -o DIR        where to keep results (default: ./perf-results)
#   -b BUILDDIR   where tools/ferry-perf was built (default: the source tree)
#   FERRY-PERF-OPTIONS are the client's, after the defaults
#   (-t lat,bw -o write_imm,send,read,write), e.g. --block, -n 50000.
# Needs root and ip(8) with netns.  Each run is limited to 900 s (busy
# polling on a small, loaded machine makes rows slow: see README).
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=$srcdir
outdir=./perf-results

while [ $# -gt 0 ]; do
	case $1 in
	-o) [ $# -ge 2 ] || { echo "tcp-netns.sh: -o needs a directory" >&2; exit 2; }
	    outdir=$2; shift ;;
	-b) [ $# -ge 2 ] || { echo "tcp-netns.sh: -b needs a directory" >&2; exit 2; }
	    builddir=$2; shift ;;
	-h|--help) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 0 ;;
	--) shift; break ;;
	*) echo "tcp-netns.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
	shift
done

perf=$(realpath "${FERRY_PERF:-$builddir/tools/ferry-perf}" 2>/dev/null || true)
if [ ! -x "$perf" ]; then
	echo "tcp-netns.sh: ferry-perf not found: build first (make) or set FERRY_PERF" >&2
	exit 1
fi
[ "$(id -u)" = 0 ] || { echo "tcp-netns.sh: needs root (network namespaces)" >&2; exit 1; }

ns1="ferry-bn1-$$" ns2="ferry-bn2-$$" if1="fb1-$$" if2="fb2-$$"
a1=10.80.0.1 a2=10.80.0.2 port=7480
spid=
cleanup() {
	[ -n "$spid" ] && kill -9 "$spid" 2>/dev/null
	ip netns del "$ns1" 2>/dev/null || true
	ip netns del "$ns2" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns1" && ip netns add "$ns2" &&
ip link add "$if1" type veth peer name "$if2" &&
ip link set "$if1" netns "$ns1" && ip link set "$if2" netns "$ns2" &&
ip -n "$ns1" addr add "$a1/24" dev "$if1" && ip -n "$ns2" addr add "$a2/24" dev "$if2" &&
ip -n "$ns1" link set "$if1" up && ip -n "$ns2" link set "$if2" up &&
ip -n "$ns1" link set lo up && ip -n "$ns2" link set lo up ||
	{ echo "tcp-netns.sh: cannot make the namespaces and the veth pair" >&2; exit 1; }
unset FERRY_TRANSPORT

mkdir -p "$outdir"
stamp=$(date +%Y%m%d-%H%M%S)
table=$outdir/tcp-netns-$stamp.txt
rev=$(git -C "$srcdir" rev-parse --short HEAD 2>/dev/null || echo unknown)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
{
	echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) ferry $rev on $(uname -n), $(uname -r)"
	echo "# $(nproc) cpus: ${cpu:-unknown}; load: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# two namespaces over veth: ferry-perf -s -a $a1 | -c -a $a1 -t lat,bw" \
		"-o write_imm,send,read,write $*"
} >"$table"

ip netns exec "$ns1" timeout 900 "$perf" -s -a "$a1" -P "$port" 2>"$table.server" &
spid=$!
status=0
ip netns exec "$ns2" timeout 900 "$perf" -c -a "$a1" -P "$port" -t lat,bw \
	-o write_imm,send,read,write "$@" >>"$table" || status=$?
wait "$spid" || status=${status:-1}
spid=
cat "$table"
if [ "$status" -ne 0 ]; then
	echo "tcp-netns.sh: ferry-perf failed (status $status); the server said:" >&2
	cat "$table.server" >&2
	exit "$status"
fi
rm -f "$table.server"
echo "tcp-netns.sh: kept in $table"
