#!/usr/bin/env bash
# run-preload.sh - benchmark (not a test): unmodified programs with both
# ends under the preload shim beside the same programs over plain TCP, in
# the same run, and the ratio ferry/TCP:
#   iperf3       one stream for -t SECONDS, the receiver's Gbit/s
#   redis        redis-benchmark -q -n REQUESTS -t get,set, requests/s
# and the fallback case, where only the client is under the shim:
#   wrk          wrk -H 'Connection: close' (a connection per request) for
#                -t SECONDS against a plain nginx, requests/s: every
#                connect of the preloaded run goes to TCP; target >= 0.95
# Each pair is measured REPEAT times, TCP and ferry in turn; the table
# shows the median of each.
#
# Usage: bench/run-preload.sh [-b BUILDDIR] [-t SECONDS] [-n REQUESTS] [-r REPEAT]
#   -b BUILDDIR   where ferry was built (default: ./build of the source tree)
#   -t SECONDS    iperf3's and wrk's run time (default 5)
#   -n REQUESTS   redis-benchmark's requests per test (default 200000)
#   -r REPEAT     measurements of each pair (default 1)
# It starts its own servers on random ports of 127.0.0.1 (a system redis is
# left alone) and exits 77 when a program or the shim is missing (without
# wrk or nginx only the fallback row is left out).
set -u

srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=$srcdir/build
seconds=5
requests=200000
repeat=1

usage() { sed -n '2,21s/^# \{0,1\}//p' "$0"; }
while [ $# -gt 0 ]; do
	case $1 in
	-b|-t|-n|-r)
		[ $# -ge 2 ] || { echo "run-preload.sh: $1 needs a value" >&2; exit 2; }
		case $1 in
		-b) builddir=$2 ;;
		-t) seconds=$2 ;;
		-n) requests=$2 ;;
		-r) repeat=$2 ;;
		esac
		shift ;;
	-h|--help) usage; exit 0 ;;
	*) echo "run-preload.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
	shift
done

cd "$builddir" || exit 1
prog=run-preload.sh
# The tests' helpers: servers, ports, cleanup, and ferry_prefix, the one
# place that knows how to put a program under the preload.
# shellcheck source=tests/preload/lib.sh
. "$srcdir/tests/preload/lib.sh"
need iperf3 redis-server redis-benchmark python3
py=$(python3_bin)
# The fallback row needs wrk and nginx (Debian: wrk, nginx-light); without
# them it is left out, and the run says so.
nginx=$(command -v nginx || command -v /usr/sbin/nginx)
if ! command -v wrk >/dev/null || [ -z "$nginx" ]; then
	echo "run-preload.sh: wrk or nginx is not installed: no fallback row" >&2
	nginx=
fi
# info: the shim says when a connection falls back to TCP (once per
# connection, nothing per call), and such a run is left out.
ferry_log=info

# fell_back MODE WHAT FILE: true (and says so) when a connection of a ferry
# run went over TCP after all.
fell_back() {
	[ "$1" = ferry ] || return 1
	grep -Eq "connect to 127\.0\.0\.1:$port: .*: TCP\$" "$3" || return 1
	echo "run-preload.sh: $2 fell back to TCP, left out:" \
		"$(grep -Em 1 "connect to 127\.0\.0\.1:$port: .*: TCP\$" "$3")" >&2
}

# iperf3_gbps MODE: one iperf3 run; prints the receiver's Gbit/s.
iperf3_gbps() {
	local mode=$1
	serve "iperf3-$mode" "$mode" iperf3 -s -1 -B 127.0.0.1 -p @PORT@ >&2 || return 1
	client "$mode" $(( seconds + 60 )) iperf3 -c 127.0.0.1 -p "$port" -t "$seconds" -J \
		>"$tmp/iperf3.json" 2>"$tmp/iperf3.err"
	reap "$server_pid" 30
	if [ $rc != 0 ]; then
		echo "run-preload.sh: iperf3 ($(describe "$mode")) exited with $rc:" \
			"$(head -c 300 "$tmp/iperf3.json") $(cat "$tmp/iperf3.err")" >&2
		return 1
	fi
	fell_back "$mode" iperf3 "$tmp/iperf3.err" && return 1
	"$py" -c 'import json, sys
print("%.2f" % (json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e9))' \
		"$tmp/iperf3.json"
}

# redis_rps MODE: one redis-benchmark run; prints "SET-rate GET-rate".
redis_rps() {
	local mode=$1 set get
	mkdir -p "$tmp/redis"
	serve "redis-$mode" "$mode" redis-server --port @PORT@ --bind 127.0.0.1 \
		--save '' --appendonly no --protected-mode no --daemonize no \
		--dir "$tmp/redis" --logfile "$tmp/redis/log" >&2 || return 1
	client "$mode" 600 redis-benchmark -h 127.0.0.1 -p "$port" -q -n "$requests" -t get,set \
		>"$tmp/bench.out" 2>"$tmp/bench.err"
	kill -TERM "$server_pid"
	reap "$server_pid" 30
	set=$(tr '\r' '\n' <"$tmp/bench.out" | sed -n 's/^SET: \([0-9.]*\) requests per second.*/\1/p')
	get=$(tr '\r' '\n' <"$tmp/bench.out" | sed -n 's/^GET: \([0-9.]*\) requests per second.*/\1/p')
	if [ $rc != 0 ] || [ -z "$set" ] || [ -z "$get" ]; then
		echo "run-preload.sh: redis-benchmark ($(describe "$mode")) exited with $rc:" \
			"$(tr '\r' '\n' <"$tmp/bench.out" | tail -n 3) $(cat "$tmp/bench.err")" >&2
		return 1
	fi
	fell_back "$mode" redis-benchmark "$tmp/bench.err" && return 1
	echo "$set $get"
}

# nginx_start: a plain nginx (one worker, no log) answering every request
# with a few bytes, on a fresh port ($port, $nginx_pid); 1 when it fails.
# Its configuration is written for the port serve picks (serve fills in
# @PORT@ in the arguments, so the template says %PORT%).
nginx_start() {
	mkdir -p "$tmp/nginx"
	cat >"$tmp/nginx/conf.in" <<'EOF'
daemon off;
worker_processes 1;
pid %DIR%/pid;
error_log %DIR%/error.log;
events { worker_connections 1024; }
http {
	access_log off;
	client_body_temp_path %DIR%;
	server { listen 127.0.0.1:%PORT%; location / { return 200 "ok\n"; } }
}
EOF
	# shellcheck disable=SC2016	# expanded by that sh, from its arguments
	serve nginx tcp sh -c 'sed "s|%PORT%|$1|; s|%DIR%|$2|g" "$2/conf.in" >"$2/conf" &&
		exec "$3" -p "$2" -c "$2/conf"' sh @PORT@ "$tmp/nginx" "$nginx" >&2 || return 1
	nginx_pid=$server_pid
}

# wrk_rps MODE: one wrk run in close mode against the plain nginx, wrk
# plain (tcp) or under the preload (ferry); prints its requests/s.  The
# shim logs at its default level: a line per connect would be measured.
wrk_rps() {
	local mode=$1 cmode=tcp ferry_log=warn r
	[ "$mode" = ferry ] && cmode=cli
	client "$cmode" $(( seconds + 60 )) wrk -t 1 -c 10 -d "${seconds}s" \
		-H 'Connection: close' "http://127.0.0.1:$port/" >"$tmp/wrk.out" 2>"$tmp/wrk.err"
	r=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$tmp/wrk.out")
	if [ $rc != 0 ] || [ -z "$r" ] || grep -q 'Socket errors' "$tmp/wrk.out"; then
		echo "run-preload.sh: wrk ($(describe "$cmode")) exited with $rc:" \
			"$(tail -n 3 "$tmp/wrk.out") $(cat "$tmp/wrk.err")" >&2
		return 1
	fi
	echo "$r"
}

# median: the median of the numbers on stdin ("-" when there are none).
median() {
	sort -g | awk '{ v[NR] = $1 } END {
		if (NR == 0) print "-"
		else if (NR % 2) print v[(NR + 1) / 2]
		else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

: >"$tmp/results"
for _ in $(seq "$repeat"); do
	for mode in tcp ferry; do
		if r=$(iperf3_gbps "$mode"); then
			echo "iperf3 $mode $r" >>"$tmp/results"
		fi
		if r=$(redis_rps "$mode"); then
			echo "set $mode ${r% *}" >>"$tmp/results"
			echo "get $mode ${r#* }" >>"$tmp/results"
		fi
	done
done
# The fallback row: one nginx, the two wrk runs in turn.
if [ -n "$nginx" ] && nginx_start; then
	for _ in $(seq "$repeat"); do
		for mode in tcp ferry; do
			if r=$(wrk_rps "$mode"); then
				echo "wrk $mode $r" >>"$tmp/results"
			fi
		done
	done
	kill -TERM "$nginx_pid"
	reap "$nginx_pid" 30
fi

rev=$(git -C "$srcdir" rev-parse --short HEAD 2>/dev/null || echo unknown)
ferry_prefix
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) ferry $rev on $(uname -n), $(nproc) cpus," \
	"load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# ferry: both ends under: ${wrap[*]}; median of $repeat"
echo "# tcp: both ends plain; iperf3: the receiver's rate; redis-benchmark -q -t get,set (50 clients)"
echo "# fallback: wrk -t 1 -c 10 -H 'Connection: close' against a plain nginx, the client" \
	"plain (tcp) or under the preload (ferry, every connect to TCP); target ferry/tcp >= 0.95"
printf '%-40s %12s %12s %10s\n' test tcp ferry ferry/tcp
row() {
	local key=$1 label=$2 tcp ferry ratio
	tcp=$(awk -v k="$key" '$1 == k && $2 == "tcp" { print $3 }' "$tmp/results" | median)
	ferry=$(awk -v k="$key" '$1 == k && $2 == "ferry" { print $3 }' "$tmp/results" | median)
	ratio=$(awk -v a="$ferry" -v b="$tcp" 'BEGIN {
		if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }')
	printf '%-40s %12s %12s %10s\n' "$label" "$tcp" "$ferry" "$ratio"
}
row iperf3 "iperf3 -t $seconds, 1 stream (Gbit/s)"
row set "redis-benchmark -n $requests SET (req/s)"
row get "redis-benchmark -n $requests GET (req/s)"
[ -n "$nginx" ] && row wrk "fallback: wrk close, plain nginx (req/s)"
if [ "$repeat" -gt 1 ]; then
	echo "# every measurement:"
	awk '{ v[$1 " " $2] = v[$1 " " $2] " " $3 } END { for (k in v) print "#   " k ":" v[k] }' \
		"$tmp/results" | sort
fi
