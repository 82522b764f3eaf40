#!/usr/bin/env bash
# srq_pingpong.sh - ferry's srq_pingpong (examples/), server and client on
# this host over shm: several RC QPs on each side take their receives from
# one shared receive queue, joined out of band the ibverbs way (one
# LID, QPN, PSN per QP traded over TCP in rdma-core's text format); each
# message is answered on the QP its completion names.  Polling and
# sleeping on events, by LID and by GID, and an SRQ barely deeper than the
# QPs are many.  Exit 0 when every pair did all its iterations.  (Against
# Debian's ibv_srq_pingpong: tests/rxe/interop-srq-pingpong.sh in the
# Soft-RoCE VM.)
set -u

prog=srq_pingpong.sh
skip() { echo "$prog: SKIP: $*"; exit 77; }
failed=0

[ -x ./examples/srq_pingpong ] || skip "examples/srq_pingpong is not built"
# Joining QPs out of band (RTR with dest_qp_num alone) came with the
# rc_pingpong example: without it the shm transport cannot run this one.
[ -x ./examples/rc_pingpong ] ||
	skip "QPs joined out of band (examples/rc_pingpong's feature) are not in this build"
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

# pair NAME ITERS OPTS...: server and client with OPTS, bounded by
# timeout(1) (a hang fails, it does not stall make check).
pair() {
	local name=$1 iters=$2 srv cli
	shift 2
	port=$(pick_port)
	timeout 120 ./examples/srq_pingpong -p "$port" -n "$iters" "$@" >"$tmp/$name.srv" 2>&1 &
	srv=$!
	pids+=("$srv")
	timeout 120 ./examples/srq_pingpong -p "$port" -n "$iters" "$@" localhost \
		>"$tmp/$name.cli" 2>&1
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

pair default 1000
pair events-gid 500 -e -g 0 -s 64
pair shallow 2000 -q 8 -r 9 -s 1
pair many 300 -q 64 -r 128 -s 256
exit $failed
