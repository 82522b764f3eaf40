#!/usr/bin/env bash
# pingpong.sh - ferry's rc_pingpong, uc_pingpong and srq_pingpong
# (examples/), server and client on this host over shm: QPs joined out of
# band the ibverbs way (LID, QPN, PSN traded over TCP in rdma-core's text
# format), polling and sleeping on events, by LID and by GID.  In
# srq_pingpong several RC QPs on each side take their receives from one
# shared receive queue and each message is answered on the QP its
# completion names; one SRQ is barely deeper than its QPs are many.  Exit
# 0 when every pair did all its iterations.  (Against Debian's
# ibv_rc_pingpong, ibv_uc_pingpong and ibv_srq_pingpong:
# tests/rxe/check-rxe.sh, stage pingpong, in the Soft-RoCE VM.)
set -u

prog=pingpong.sh
skip() { echo "$prog: SKIP: $*"; exit 77; }
failed=0

[ -x ./examples/rc_pingpong ] && [ -x ./examples/uc_pingpong ] &&
	[ -x ./examples/srq_pingpong ] ||
	skip "examples/rc_pingpong, uc_pingpong and srq_pingpong are not built"
export FERRY_TRANSPORT=shm

tmp=$(mktemp -d)
pids=()
# shellcheck disable=SC2317
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT

# Each pair on a port no socket here uses (not an ephemeral one).
# shellcheck source=tests/port-lib.sh
. "$(dirname "$0")/port-lib.sh"

# pair NAME PROG ITERS OPTS...: server and client of PROG with -n ITERS
# and OPTS, bounded by timeout(1) (a hang fails, it does not stall make
# check).
pair() {
	local name=$1 bin=$2 iters=$3 srv cli
	shift 3
	port=$(pick_port)
	timeout 120 "$bin" -p "$port" -n "$iters" "$@" >"$tmp/$name.srv" 2>&1 &
	srv=$!
	pids+=("$srv")
	timeout 120 "$bin" -p "$port" -n "$iters" "$@" localhost >"$tmp/$name.cli" 2>&1
	cli=$?
	wait "$srv"
	srv=$?
	if [ "$cli" -ne 0 ] || [ "$srv" -ne 0 ] ||
	   ! grep -q "^$iters iters in" "$tmp/$name.cli" ||
	   ! grep -q "^$iters iters in" "$tmp/$name.srv"; then
		echo "$prog: FAIL: $name (client $cli, server $srv)"
		sed "s/^/  client: /" "$tmp/$name.cli"
		sed "s/^/  server: /" "$tmp/$name.srv"
		failed=1
		return
	fi
	echo "$prog: ok: $name: $(grep "iters in" "$tmp/$name.cli")"
}

pair rc ./examples/rc_pingpong 1000 -s 4096
pair rc-events-gid ./examples/rc_pingpong 1000 -s 64 -e -g 0
pair uc-events ./examples/uc_pingpong 1000 -s 4096 -e
pair uc-gid ./examples/rc_pingpong 1000 --uc -s 1 -g 0
pair srq ./examples/srq_pingpong 1000
pair srq-events-gid ./examples/srq_pingpong 500 -e -g 0 -s 64
pair srq-shallow ./examples/srq_pingpong 2000 -q 8 -r 9 -s 1
pair srq-many ./examples/srq_pingpong 300 -q 64 -r 128 -s 256
exit $failed
