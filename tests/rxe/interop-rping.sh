#!/usr/bin/env bash
# interop-rping.sh - ferry-ping against rdma-core's rping over the verbs
# transport, in both directions, with -V validation: ferry-ping -s with
# rping -c, and rping -s with ferry-ping -c.  Run INSIDE the Soft-RoCE VM
# or the SoftiWARP one (tests/rxe/rxe-vm.sh [--siw]), from the top of the
# build tree:
#
#   tests/rxe/rxe-vm.sh [--siw] -- tests/rxe/interop-rping.sh
#
# Environment: RXE_ADDR (default 10.0.2.15, the VM's address on rxe0/siw0),
# FERRY_PING (default ./tools/ferry-ping), RXE_PING_COUNT (default 50).
# Exit status: 0 all passed, 1 a check failed, 77 skipped (the reason is
# printed).
set -u

prog=interop-rping
addr=${RXE_ADDR:-10.0.2.15}
ping=${FERRY_PING:-./tools/ferry-ping}
count=${RXE_PING_COUNT:-50}

skip() { echo "$prog: SKIP: $*"; exit 77; }
fail() { echo "$prog: FAIL: $*"; failed=1; }
failed=0

[ -x "$ping" ] || skip "$ping is not built"
command -v rping >/dev/null || skip "rping (rdmacm-utils) is not installed"
command -v ibv_devices >/dev/null && ! ibv_devices 2>/dev/null | grep -qE 'rxe|siw' &&
	skip "no rxe or siw device: run this inside the VM of tests/rxe/rxe-vm.sh [--siw]"

export FERRY_TRANSPORT=verbs
tmp=$(mktemp -d)
pids=()
# shellcheck disable=SC2317
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT

# rping's data for ping N of SIZE bytes, as -v prints it.
# shellcheck disable=SC2046
alphabet=$(printf '%b' "$(printf '\\%03o' $(seq 65 122))")
expected_line() {
	local n=$1 size=$2 prefix="rdma-ping-$1: " run=""
	local len=$(( size - 1 - ${#prefix} ))
	while [ ${#run} -lt $(( len + 58 )) ]; do run+=$alphabet; done
	printf '%s%s\n' "$prefix" "${run:$(( n % 58 )):$len}"
}

# check_data FILE PREFIX SIZE: COUNT lines "PREFIXrdma-ping-N: ...", each right.
check_data() {
	local file=$1 prefix=$2 size=$3 n=0 line
	# (a file, not <(...): the VM has no /dev/fd)
	grep "^${prefix}rdma-ping-" "$file" >"$tmp/lines"
	while IFS= read -r line; do
		[ "$line" = "$prefix$(expected_line $n "$size")" ] ||
			{ fail "$file: line $n is '$line'"; return; }
		n=$(( n + 1 ))
	done <"$tmp/lines"
	[ $n = "$count" ] || fail "$file: $n ping lines, not $count"
}

# wait_for FILE PATTERN PID: until FILE has PATTERN (a server listens).
wait_for() {
	local _
	for _ in $(seq 200); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		kill -0 "$3" 2>/dev/null || break
		sleep 0.1
	done
	fail "server never got ready ($2 not in $1):"
	cat "$1"
	return 1
}

# reap PID: the server's exit status once its client is done; a server
# still running 30 s later is killed (status 124), as a server whose client
# failed to connect would wait for ever.
reap() {
	local _
	for _ in $(seq 300); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$1" 2>/dev/null; then
		kill -9 "$1"
		wait "$1" 2>/dev/null
		return 124
	fi
	wait "$1"
}

# rping prints its debug lines with stdio: unbuffer them to see "rdma_listen".
linebuf=()
command -v stdbuf >/dev/null && linebuf=(stdbuf -oL -eL)

for size in 64 4096; do
	# --- ferry-ping server, rping client ---
	port=$(( 7174 + size ))
	timeout 300 "$ping" -s -a "$addr" -p "$port" -v -d \
		>"$tmp/fs.out" 2>"$tmp/fs.err" &
	server=$!
	pids+=("$server")
	if wait_for "$tmp/fs.err" "listening on" "$server"; then
		timeout 300 rping -c -a "$addr" -p "$port" -C "$count" -S "$size" -v -V \
			>"$tmp/rc.out" 2>"$tmp/rc.err"
		rc=$?
		[ $rc = 0 ] || { fail "rping -c -S $size against ferry-ping -s exited with $rc:"; cat "$tmp/rc.err"; }
		check_data "$tmp/rc.out" "ping data: " "$size"
		reap "$server"
		rc=$?
		[ $rc = 0 ] || { fail "ferry-ping -s exited with $rc:"; cat "$tmp/fs.err"; }
		check_data "$tmp/fs.out" "server ping data: " "$size"
		grep "^ferry-ping: served" "$tmp/fs.out" | sed "s/^/$prog: -S $size rping -c with /"
		grep -q "^ferry-ping: served $count pings" "$tmp/fs.out" ||
			fail "ferry-ping -s did not serve $count pings: $(tail -n 1 "$tmp/fs.out")"
	fi

	# --- rping server, ferry-ping client ---
	port=$(( 7175 + size ))
	timeout 300 "${linebuf[@]}" rping -s -a "$addr" -p "$port" -S "$size" -v -d \
		>"$tmp/rs.out" 2>"$tmp/rs.err" &
	server=$!
	pids+=("$server")
	if [ ${#linebuf[@]} = 0 ]; then sleep 3; else wait_for "$tmp/rs.out" "rdma_listen" "$server"; fi
	timeout 300 "$ping" -c -a "$addr" -p "$port" -C "$count" -S "$size" -v -V \
		>"$tmp/fc.out" 2>"$tmp/fc.err"
	rc=$?
	[ $rc = 0 ] || { fail "ferry-ping -c -S $size against rping -s exited with $rc:"; cat "$tmp/fc.err"; }
	check_data "$tmp/fc.out" "ping data: " "$size"
	if grep -Eq "^ferry-ping: $count pings, rtt min/p50/p99/max = [0-9./]+ us$" "$tmp/fc.out"; then
		echo "$prog: -S $size ferry-ping -c with rping -s: $(tail -n 1 "$tmp/fc.out")"
	else
		fail "ferry-ping -c printed no summary: $(tail -n 1 "$tmp/fc.out")"
	fi
	reap "$server"
	rc=$?
	[ $rc = 0 ] || { fail "rping -s exited with $rc:"; tail -n 20 "$tmp/rs.out" "$tmp/rs.err"; }
	check_data "$tmp/rs.out" "server ping data: " "$size"
done

[ $failed = 0 ] && echo "$prog: PASS (ferry-ping <-> rping, $count pings each way, -V)"
exit $failed
