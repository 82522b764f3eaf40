#!/usr/bin/env bash
# interop-siw-tcp.sh - ferry's user-space iWARP (the tcp transport) on the
# wire with the kernel's SoftiWARP: ferry-ping over tcp against rdma-core's
# rping over siw0, both directions, with -V (rping checks the data too).
# Run INSIDE the SoftiWARP VM, from the top of the build tree:
#
#   tests/rxe/rxe-vm.sh --siw -- tests/rxe/interop-siw-tcp.sh
#
# Both programs run in the one VM, at its address: ferry's TCP connect
# reaches siw's kernel listener and siw's connect reaches ferry's listening
# socket, over the loopback device (the kernel routes a local address
# there; siw takes such connections).  While it runs, lo's MTU is
# Ethernet's (SIW_TCP_MTU, 1500), so that the MSS is 1448 as between two
# hosts and a 65000-byte ping is cut into 45 FPDUs by each side (on lo's
# own 64 KiB MTU every message would be one FPDU).
#
# Besides the pings' data, it checks that ferry knew siw for a stranger
# (no RFC 7306 opcodes, no READ fences: docs/tcp-wire.md), that what siw
# cannot take (WRITE_WITH_IMM, SEND_WITH_IMM, atomics) is refused at post
# time with EOPNOTSUPP and the QP still works (tests/rxe/siw-tcp-ops.c,
# against rping -s), and that siw logged no complaint (dmesg: a Terminate
# it got, an MPA error).
#
# Environment: RXE_ADDR (default: eth0's address, else 10.0.2.15),
# FERRY_PING (default ./tools/ferry-ping), SIW_TCP_OPS (default
# ./tests/rxe/siw-tcp-ops), RXE_PING_COUNT (default 10),
# SIW_TCP_SIZES (default "64 65000"), SIW_TCP_MTU (default 1500).
# Exit status: 0 all passed, 1 a check failed, 77 skipped (reason printed).
set -u

prog=interop-siw-tcp
addr=${RXE_ADDR:-$(ip -4 -o addr show dev eth0 2>/dev/null |
	sed -n 's/.* inet \([0-9.]*\).*/\1/p' | head -n 1)}
addr=${addr:-10.0.2.15}
ping=${FERRY_PING:-./tools/ferry-ping}
count=${RXE_PING_COUNT:-10}
sizes=${SIW_TCP_SIZES:-64 65000}
mtu=${SIW_TCP_MTU:-1500}

skip() { echo "$prog: SKIP: $*"; exit 77; }
fail() { echo "$prog: FAIL: $*"; failed=1; }
failed=0

[ -x "$ping" ] || skip "$ping is not built"
command -v rping >/dev/null || skip "rping (rdmacm-utils) is not installed"
devices=$(ibv_devices 2>/dev/null)
echo "$devices" | grep -q siw ||
	skip "no siw device: the tcp transport speaks iWARP, which rxe (RoCE) does not; run this inside tests/rxe/rxe-vm.sh --siw"

tmp=$(mktemp -d)
pids=()
old_mtu=$(cat /sys/class/net/lo/mtu 2>/dev/null)
# shellcheck disable=SC2317
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
	[ -n "$old_mtu" ] && ip link set lo mtu "$old_mtu" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
ip link set lo mtu "$mtu" 2>/dev/null || echo "$prog: note: cannot set lo's MTU to $mtu"

# rping's data for ping N of SIZE bytes, as -v prints it: a window into
# the alphabet repeated (built once: bash is slow in the emulated VM).
# shellcheck disable=SC2046
alphabet=$(printf '%b' "$(printf '\\%03o' $(seq 65 122))")
run=$alphabet
while [ ${#run} -lt 65536 ]; do run+=$run; done
expected_line() {
	local n=$1 size=$2 prefix="rdma-ping-$1: "
	printf '%s%s\n' "$prefix" "${run:$(( n % 58 )):$(( size - 1 - ${#prefix} ))}"
}

# check_data FILE PREFIX SIZE: COUNT lines "PREFIXrdma-ping-N: ...", each right.
check_data() {
	local file=$1 prefix=$2 size=$3 n=0 line
	grep -a "^${prefix}rdma-ping-" "$file" >"$tmp/lines"
	while IFS= read -r line; do
		[ "$line" = "$prefix$(expected_line $n "$size")" ] ||
			{ fail "$file: line $n is wrong: $(echo "$line" | cut -c1-80)..."; return; }
		n=$(( n + 1 ))
	done <"$tmp/lines"
	[ $n = "$count" ] || fail "$file: $n ping lines, not $count"
}

# wait_for FILE PATTERN PID: until FILE has PATTERN (a server listens);
# up to 60 s, as a program can take tens of seconds to start in the
# emulated VM on a loaded host.
wait_for() {
	local _
	for _ in $(seq 600); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		kill -0 "$3" 2>/dev/null || break
		sleep 0.1
	done
	fail "server never got ready ($2 not in $1):"
	cat "$1"
	return 1
}

# reap PID: the server's exit status; one still running 30 s after its
# client is done is killed (124).
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

# ferry knew the peer for siw: its debug log says so (tcp_mpa.c).
check_stranger() {
	grep -q "the peer is not ferry" "$1" ||
		fail "$1: ferry did not take siw for a stranger (RFC 7306 and READ fences off)"
}

linebuf=()
command -v stdbuf >/dev/null && linebuf=(stdbuf -oL -eL)
dmesg_before=$(dmesg | grep -c siw)

for size in $sizes; do
	# --- ferry-ping (tcp) server, rping (siw) client ---
	port=$(( 7300 + size % 1000 ))
	FERRY_TRANSPORT=tcp FERRY_LOG=debug timeout 200 "$ping" -s -a "$addr" -p "$port" -v -d \
		>"$tmp/fs.out" 2>"$tmp/fs.err" &
	server=$!
	pids+=("$server")
	if wait_for "$tmp/fs.err" "listening on" "$server"; then
		timeout 200 rping -c -a "$addr" -p "$port" -C "$count" -S "$size" -v -V \
			>"$tmp/rc.out" 2>"$tmp/rc.err"
		rc=$?
		[ $rc = 0 ] || { fail "rping -c -S $size against ferry-ping -s (tcp) exited with $rc:"; cat "$tmp/rc.err"; }
		check_data "$tmp/rc.out" "ping data: " "$size"
		reap "$server"
		rc=$?
		[ $rc = 0 ] || { fail "ferry-ping -s (tcp) exited with $rc:"; grep -v debug "$tmp/fs.err" | tail -n 20; }
		check_data "$tmp/fs.out" "server ping data: " "$size"
		check_stranger "$tmp/fs.err"
		if grep -q "^ferry-ping: served $count pings" "$tmp/fs.out"; then
			echo "$prog: ${SECONDS}s: -S $size rping -c (siw) with ferry-ping -s (tcp): $(grep '^ferry-ping: served' "$tmp/fs.out")"
		else
			fail "ferry-ping -s did not serve $count pings: $(tail -n 1 "$tmp/fs.out")"
		fi
	fi

	# --- rping (siw) server, ferry-ping (tcp) client ---
	port=$(( 7301 + size % 1000 ))
	timeout 200 "${linebuf[@]}" rping -s -a "$addr" -p "$port" -S "$size" -v -d \
		>"$tmp/rs.out" 2>"$tmp/rs.err" &
	server=$!
	pids+=("$server")
	if [ ${#linebuf[@]} = 0 ]; then sleep 3; else wait_for "$tmp/rs.out" "rdma_listen" "$server"; fi
	FERRY_TRANSPORT=tcp FERRY_LOG=debug timeout 200 "$ping" -c -a "$addr" -p "$port" \
		-C "$count" -S "$size" -v -V >"$tmp/fc.out" 2>"$tmp/fc.err"
	rc=$?
	[ $rc = 0 ] || { fail "ferry-ping -c -S $size (tcp) against rping -s (siw) exited with $rc:"; grep -v debug "$tmp/fc.err" | tail -n 20; }
	check_data "$tmp/fc.out" "ping data: " "$size"
	check_stranger "$tmp/fc.err"
	if grep -Eq "^ferry-ping: $count pings, rtt min/p50/p99/max = [0-9./]+ us$" "$tmp/fc.out"; then
		echo "$prog: ${SECONDS}s: -S $size ferry-ping -c (tcp) with rping -s (siw): $(tail -n 1 "$tmp/fc.out")"
	else
		fail "ferry-ping -c printed no summary: $(tail -n 1 "$tmp/fc.out")"
	fi
	reap "$server"
	rc=$?
	[ $rc = 0 ] || { fail "rping -s exited with $rc:"; tail -n 20 "$tmp/rs.out" "$tmp/rs.err"; }
	check_data "$tmp/rs.out" "server ping data: " "$size"
done

# --- what siw cannot take, refused at post time (siw-tcp-ops.c) ---
ops=${SIW_TCP_OPS:-./tests/rxe/siw-tcp-ops}
if [ -x "$ops" ]; then
	port=7399
	timeout 200 "${linebuf[@]}" rping -s -a "$addr" -p "$port" -v -d \
		>"$tmp/ors.out" 2>"$tmp/ors.err" &
	server=$!
	pids+=("$server")
	if [ ${#linebuf[@]} = 0 ]; then sleep 3; else wait_for "$tmp/ors.out" "rdma_listen" "$server"; fi
	FERRY_TRANSPORT=tcp timeout 100 "$ops" "$addr" "$port" >"$tmp/ops.out" 2>"$tmp/ops.err"
	rc=$?
	sed "s/^/$prog: ${SECONDS}s: /" "$tmp/ops.out"
	[ $rc = 0 ] || { fail "siw-tcp-ops exited with $rc:"; cat "$tmp/ops.err"; }
	reap "$server"	# rping -s fails: its client leaves after one step
	grep -q "^server ping data: siw-tcp-ops: read by siw" "$tmp/ors.out" ||
		fail "rping -s did not READ siw-tcp-ops's buffer: $(tail -n 3 "$tmp/ors.out")"
else
	fail "$ops is not built (make tests/rxe/siw-tcp-ops)"
fi

# siw says what it did not like in the kernel log (a Terminate it got, an
# MPA frame it refused); the module's loading lines are not complaints.
dmesg | grep siw | tail -n +$(( dmesg_before + 1 )) | grep -v -e 'taints kernel' \
	-e 'module verification' >"$tmp/dmesg"
if [ -s "$tmp/dmesg" ]; then
	fail "siw complained:"
	cat "$tmp/dmesg"
fi

[ $failed = 0 ] &&
	echo "$prog: PASS (ferry-ping over tcp <-> rping over siw, $count pings of each of $sizes bytes each way, -V)"
exit $failed
