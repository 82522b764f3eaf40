#!/usr/bin/env bash
# interop-rsocket.sh - ferry's stream sockets (verbs transport) against
# librdmacm's rsocket, both directions: a ferry server with an rsocket
# client, and an rsocket server with a ferry client.  The client writes
# RXE_RSOCK_BYTES in writes of random sizes, the server echoes, the client
# compares every byte and checks EOF after shutdown.  On siw0 both ends
# speak rsocket's iWARP mode (librdmacm by the device's transport type,
# ferry by its QP's: ferry_qp_write_imm_ok).  Run INSIDE the Soft-RoCE or
# SoftiWARP VM, from the top of the build tree:
#
#   tests/rxe/rxe-vm.sh [--siw] -- tests/rxe/interop-rsocket.sh
#
# Environment: RXE_ADDR (default 10.0.2.15), RXE_RSOCK_BYTES (default 16 MiB).
# Exit status: 0 passed, 1 a check failed, 77 skipped (reason printed).
set -u

prog=interop-rsocket
addr=${RXE_ADDR:-10.0.2.15}
bytes=${RXE_RSOCK_BYTES:-16777216}
ferry=./tests/rxe/rsock-peer-ferry
rdmacm=./tests/rxe/rsock-peer-rdmacm

skip() { echo "$prog: SKIP: $*"; exit 77; }
failed=0
fail() { echo "$prog: FAIL: $*"; failed=1; }

[ -x "$ferry" ] && [ -x "$rdmacm" ] ||
	skip "$ferry / $rdmacm are not built (make check with libibverbs and librdmacm)"
command -v ibv_devices >/dev/null && ! ibv_devices 2>/dev/null | grep -qE 'rxe|siw' &&
	skip "no rxe or siw device: run this inside the VM (tests/rxe/rxe-vm.sh [--siw])"

export FERRY_TRANSPORT=verbs
tmp=$(mktemp -d)
server_pid=
# shellcheck disable=SC2317
cleanup() {
	[ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# run_pair NAME SERVER CLIENT PORT
run_pair() {
	local name=$1 server=$2 client=$3 port=$4 i
	"$server" -s -a "$addr" -p "$port" >"$tmp/$name.server" 2>&1 &
	server_pid=$!
	for i in $(seq 50); do
		grep -q listening "$tmp/$name.server" && break
		sleep 0.1
	done
	if ! timeout 120 "$client" -c "$addr" -p "$port" -b "$bytes" >"$tmp/$name.client" 2>&1; then
		fail "$name: client failed:"; cat "$tmp/$name.client" "$tmp/$name.server"
	fi
	if ! timeout 30 tail --pid="$server_pid" -f /dev/null; then
		fail "$name: server did not end"
	elif ! wait "$server_pid"; then
		fail "$name: server failed:"; cat "$tmp/$name.server"
	fi
	server_pid=
	cat "$tmp/$name.client" "$tmp/$name.server"
}

run_pair ferry-server-rsocket-client "$ferry" "$rdmacm" 7471
run_pair rsocket-server-ferry-client "$rdmacm" "$ferry" 7472

[ $failed = 0 ] && echo "$prog: PASS ($bytes bytes each way, both directions)"
exit $failed
