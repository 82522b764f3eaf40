#!/usr/bin/env bash
# ferry-ping.sh - ferry-ping's server and client on this host, over the shm
# transport: 100 validated pings with the data rping would send, the
# summary lines, -q, -S limits, a persistent server serving two clients,
# argument errors, a refused connect that fails fast, and a peer killed in
# the middle of a run (the survivor reports and exits).
set -u

prog=ferry-ping.sh
ping=./tools/ferry-ping

skip() { echo "$prog: SKIP: $*"; exit 77; }
fail() { echo "$prog: FAIL: $*"; failed=1; }
failed=0

[ -x "$ping" ] || skip "$ping is not built"
if [ -f .libs/libferry.so ] && command -v nm >/dev/null &&
   ! nm -D --defined-only .libs/libferry.so | grep -qw ferry_listen; then
	skip "libferry has no connection manager (ferry_listen) yet"
fi

tmp=$(mktemp -d)
pids=()
# shellcheck disable=SC2317
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
export FERRY_TRANSPORT=shm

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# spawn OUT ERR COMMAND...: COMMAND in the background, its own pid in
# $spawned (not that of a timeout(1) wrapper: the test kills it), and a
# watchdog that kills it after 120 s so that nothing outlives a hung test.
spawn() {
	local out=$1 err=$2
	shift 2
	"$@" >"$out" 2>"$err" &
	spawned=$!
	(timeout 120 tail --pid="$spawned" -f /dev/null || kill -9 "$spawned") \
		>/dev/null 2>&1 &
	pids+=("$spawned")
}
# A port picked at random, so that parallel runs do not meet.
# Below the kernel's ephemeral ports: one of them may be the local end of
# some other test's connection, and a listener cannot take it.
read -r eph_low _ < /proc/sys/net/ipv4/ip_local_port_range || eph_low=32768
[ "$eph_low" -gt 12000 ] || eph_low=61000
port=$(( 10000 + (RANDOM * 32768 + RANDOM) % (eph_low - 10000) ))

# start_server NAME ARGS...: a server in the background whose pid is in
# $server_pid, once it listens (its -d output says so).
start_server() {
	local name=$1 _
	shift
	spawn "$tmp/$name.out" "$tmp/$name.err" "$ping" -s -a 127.0.0.1 -p "$port" -d "$@"
	server_pid=$spawned
	for _ in $(seq 100); do
		grep -q "listening on" "$tmp/$name.err" && return 0
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.05
	done
	fail "server $name did not start listening:"
	cat "$tmp/$name.err"
	return 1
}

# The line rping prints for ping N of SIZE bytes with -v.
# shellcheck disable=SC2046
# Wait (bounded) until server @name has its client connected: a kill before
# that tests nothing (the server rightly waits on for a client), and under
# load a client takes any time to get there.
wait_established() {
	local name=$1 _
	for _ in $(seq 400); do
		grep -q "established" "$tmp/$name.err" && return 0
		sleep 0.05
	done
	fail "server $name saw no connection established:"
	cat "$tmp/$name.err"
	return 1
}

alphabet=$(printf '%b' "$(printf '\\%03o' $(seq 65 122))")
expected_line() {
	local n=$1 size=$2 prefix="rdma-ping-$1: " run=""
	local len=$(( size - 1 - ${#prefix} ))
	while [ ${#run} -lt $(( len + 58 )) ]; do run+=$alphabet; done
	printf 'ping data: %s%s\n' "$prefix" "${run:$(( n % 58 )):$len}"
}

summary_re='^ferry-ping: ([0-9]+) pings, rtt min/p50/p99/max = ([0-9.]+)/([0-9.]+)/([0-9.]+)/([0-9.]+) us$'

# check_summary FILE COUNT: the client's last line, with ordered times.
check_summary() {
	local line
	line=$(tail -n 1 "$1")
	if [[ ! $line =~ $summary_re ]]; then
		fail "no summary line in $1: '$line'"
		return
	fi
	[ "${BASH_REMATCH[1]}" = "$2" ] || fail "summary counts ${BASH_REMATCH[1]} pings, not $2"
	awk -v a="${BASH_REMATCH[2]}" -v b="${BASH_REMATCH[3]}" -v c="${BASH_REMATCH[4]}" \
	    -v d="${BASH_REMATCH[5]}" 'BEGIN { exit !(a > 0 && a <= b && b <= c && c <= d) }' ||
		fail "times out of order: $line"
}

# --- 100 validated pings, as rping would print them ---
start_server one -V -v || exit 1
timeout 60 "$ping" -c -a 127.0.0.1 -p "$port" -V -v -C 100 >"$tmp/c1.out" 2>"$tmp/c1.err"
rc=$?
[ $rc = 0 ] || { fail "client exited with $rc:"; cat "$tmp/c1.err"; }
[ "$(grep -c '^ping data: ' "$tmp/c1.out")" = 100 ] || fail "not 100 'ping data' lines"
for n in 0 1 57 58 99; do
	want=$(expected_line $n 64)
	got=$(grep '^ping data: ' "$tmp/c1.out" | sed -n "$(( n + 1 ))p")
	[ "$got" = "$want" ] || fail "ping $n: got '$got', want '$want'"
done
check_summary "$tmp/c1.out" 100
wait "$server_pid"
rc=$?
[ $rc = 0 ] || { fail "server exited with $rc:"; cat "$tmp/one.err"; }
grep -q '^ferry-ping: served 100 pings to 127.0.0.1 port [0-9]*$' "$tmp/one.out" ||
	fail "server summary missing: $(tail -n 1 "$tmp/one.out")"
[ "$(grep -c '^server ping data: rdma-ping-' "$tmp/one.out")" = 100 ] ||
	fail "server -v did not print 100 lines"

# --- a persistent server, two clients one after the other, -q and -S ---
start_server persistent -P -q || exit 1
for size in 23 65536; do
	timeout 60 "$ping" -c -a 127.0.0.1 -p "$port" -V -q -C 20 -S $size \
		>"$tmp/q$size.out" 2>"$tmp/q$size.err"
	rc=$?
	[ $rc = 0 ] || { fail "-S $size client exited with $rc:"; cat "$tmp/q$size.err"; }
	[ "$(wc -l <"$tmp/q$size.out")" = 1 ] || fail "-q printed more than the summary"
	check_summary "$tmp/q$size.out" 20
done
kill -0 "$server_pid" 2>/dev/null || fail "the -P server ended after its clients"
kill -TERM "$server_pid"
wait "$server_pid"
rc=$?
[ $rc = 0 ] || fail "the -P server exited with $rc on SIGTERM"
[ "$(grep -c '^ferry-ping: served 20 pings' "$tmp/persistent.out")" = 2 ] ||
	fail "the -P server did not serve both clients"

# --- nobody listening: a clear error, fast ---
start=$(now_ms)
timeout 20 "$ping" -c -a 127.0.0.1 -p $(( port + 1 )) -C 1 >"$tmp/refused.out" 2>"$tmp/refused.err"
rc=$?
took=$(( $(now_ms) - start ))
[ $rc = 1 ] || fail "a client with no server exited with $rc, not 1"
grep -Eq 'refused|unreachable' "$tmp/refused.err" ||
	fail "no clear error without a server: $(cat "$tmp/refused.err")"
[ $took -lt 5000 ] || fail "a client with no server took $took ms to fail"

# --- bad arguments: usage, exit 2 ---
for args in "-c" "-s -c" "-c -a 127.0.0.1 -S 22" "-s -S 65537" "-s -x" "-s -p 0" "-c -a 127.0.0.1 -C x"; do
	# shellcheck disable=SC2086
	"$ping" $args >/dev/null 2>"$tmp/usage.err"
	rc=$?
	[ $rc = 2 ] || fail "'ferry-ping $args' exited with $rc, not 2"
	grep -q '^usage:' "$tmp/usage.err" || fail "'ferry-ping $args' printed no usage"
done
"$ping" -h | grep -q '^usage:' || fail "-h printed no usage"

# --- the server dies in the middle of a run: the client reports it ---
start_server victim -q || exit 1
spawn "$tmp/orphan.out" "$tmp/orphan.err" "$ping" -c -a 127.0.0.1 -p "$port" -q
client_pid=$spawned
wait_established victim
disown "$server_pid"	# no "Killed" notice from bash
kill -9 "$server_pid"
start=$(now_ms)
wait "$client_pid"
rc=$?
took=$(( $(now_ms) - start ))
[ $rc = 1 ] || fail "client of a killed server exited with $rc, not 1"
grep -q 'lost during ping' "$tmp/orphan.err" ||
	fail "client of a killed server said: $(cat "$tmp/orphan.err")"
[ $took -lt 5000 ] || fail "client of a killed server took $took ms to notice"

# --- the client dies: the server reports what it served and ends ---
start_server survivor || exit 1
spawn /dev/null /dev/null "$ping" -c -a 127.0.0.1 -p "$port" -q
client_pid=$spawned
wait_established survivor
disown "$client_pid"
kill -9 "$client_pid"
start=$(now_ms)
wait "$server_pid"
rc=$?
took=$(( $(now_ms) - start ))
[ $rc = 0 ] || [ $rc = 1 ] || fail "server of a killed client exited with $rc"
grep -q '^ferry-ping: served [0-9]* pings' "$tmp/survivor.out" ||
	fail "server of a killed client printed no summary"
[ $took -lt 5000 ] || fail "server of a killed client took $took ms to notice"

[ $failed = 0 ] && echo "$prog: PASS"
exit $failed
