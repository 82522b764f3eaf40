#!/usr/bin/env bash
# interop-rsocket.sh - ferry's stream sockets against librdmacm's rsocket,
# both directions: a ferry server with an rsocket client, and an rsocket
# server with a ferry client.  The client writes RXE_RSOCK_BYTES in writes
# of random sizes, the server echoes, the client compares every byte and
# checks EOF after shutdown.  On siw0 both ends speak rsocket's iWARP mode
# (librdmacm by the device's transport type, ferry by its QP's:
# ferry_qp_write_imm_ok).  Run INSIDE the Soft-RoCE or SoftiWARP VM, from
# the top of the build tree:
#
#   tests/rxe/rxe-vm.sh [--siw] -- tests/rxe/interop-rsocket.sh [verbs|tcp]
#
# The argument is ferry's transport (default verbs: ferry on the device
# through libibverbs).  tcp is ferry's own user-space iWARP over a kernel
# TCP socket against rsocket on siw0, so it needs siw; lo's MTU is
# Ethernet's meanwhile (RXE_RSOCK_MTU, 1500), so that messages are cut
# into FPDUs as between two hosts (interop-siw-tcp.sh does the same), and
# ferry's debug log must say it took siw for a stranger (no RFC 7306:
# rsocket's WRITE + SEND mode, no READ fences).
#
# Environment: RXE_ADDR (default 10.0.2.15), RXE_RSOCK_BYTES (default 16 MiB),
# RXE_RSOCK_MTU (tcp only, default 1500).
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

transport=${1:-verbs}
case $transport in
verbs) ;;
tcp) ibv_devices 2>/dev/null | grep -q siw ||
	skip "no siw device: the tcp transport speaks iWARP, which rxe (RoCE) does not; run this inside tests/rxe/rxe-vm.sh --siw" ;;
*) echo "usage: $0 [verbs|tcp]" >&2; exit 2 ;;
esac
export FERRY_TRANSPORT=$transport
# The tcp transport's debug log says whether MPA found a ferry peer; the
# data path logs nothing per message, so it stays small.
[ "$transport" = tcp ] && export FERRY_LOG=debug
tmp=$(mktemp -d)
server_pid=
old_mtu=
# shellcheck disable=SC2317
cleanup() {
	[ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null
	[ -n "$old_mtu" ] && ip link set lo mtu "$old_mtu" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
if [ "$transport" = tcp ]; then
	old_mtu=$(cat /sys/class/net/lo/mtu 2>/dev/null)
	ip link set lo mtu "${RXE_RSOCK_MTU:-1500}" 2>/dev/null ||
		echo "$prog: note: cannot set lo's MTU to ${RXE_RSOCK_MTU:-1500}"
fi

# check_stranger FILE: ferry's end (tcp) knew rsocket on siw for no ferry.
check_stranger() {
	[ "$transport" = tcp ] || return 0
	grep -q "the peer is not ferry" "$1" ||
		fail "$1: ferry (tcp) did not take siw for a stranger (RFC 7306 and READ fences off)"
}

# run_pair NAME SERVER CLIENT PORT FERRY_END: FERRY_END (server or client)
# names the end that is ferry, whose output tells what MPA found.
run_pair() {
	local name=$1 server=$2 client=$3 port=$4 ferry_end=$5 i
	"$server" -s -a "$addr" -p "$port" >"$tmp/$name.server" 2>&1 &
	server_pid=$!
	# up to 60 s: a program can take long to start in the emulated VM
	for i in $(seq 600); do
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
	check_stranger "$tmp/$name.$ferry_end"
	grep -v ' debug: ' "$tmp/$name.client" "$tmp/$name.server"
}

# Ports apart per transport: a run right after the other finds no
# listener left in TIME_WAIT on its port.
if [ "$transport" = tcp ]; then base=7481; else base=7471; fi
run_pair ferry-server-rsocket-client "$ferry" "$rdmacm" $base server
run_pair rsocket-server-ferry-client "$rdmacm" "$ferry" $((base + 1)) client

[ $failed = 0 ] && echo "$prog: PASS ($transport: $bytes bytes each way, both directions)"
exit $failed
