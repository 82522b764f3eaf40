#!/usr/bin/env bash
# ferry-perf-connect.sh - ferry-perf's connect test over ferry sockets (shm),
# a few times: connections made and closed one after another between two
# processes pinned to a CPU each, busy-polling, every one of them working.
# Its rate is not looked at (benchmarks measure speed, not tests).  Under
# these conditions, and only these so far, the shm monitor once reset a
# fresh connection, taking the hang-up of the one closed before it (its QP
# had been at the same address) for its own: about one run in five failed.
set -u

prog=ferry-perf-connect.sh
perf=./tools/ferry-perf
runs=${FERRY_CONNECT_RUNS:-8}

skip() { echo "$prog: SKIP: $*"; exit 77; }
[ -x "$perf" ] || skip "$perf is not built"
while IFS= read -r v; do unset "$v"; done < <(env | sed -n 's/^\(FERRY_[A-Z0-9_]*\)=.*/\1/p')
unset LD_PRELOAD

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 "$runs"); do
	# -D 0.25: a quarter of a second of connections (some hundreds).
	if ! timeout 120 "$perf" --local -o stream -t connect -T ferry -D 0.25 --timeout 60 \
		>"$tmp/out" 2>"$tmp/err"; then
		echo "$prog: FAIL: run $i of $runs: $(cat "$tmp/err")"
		exit 1
	fi
	grep -q '^connect *stream *ferry-shm' "$tmp/out" ||
		{ echo "$prog: FAIL: run $i: no ferry-shm connect row: $(cat "$tmp/out")"; exit 1; }
done
echo "$prog: $runs runs of ferry-perf -t connect, every connection working"
