#!/usr/bin/env bash
# interop-pingpong.sh - ferry's rc_pingpong / uc_pingpong / srq_pingpong
# (examples/) against rdma-core's ibv_rc_pingpong / ibv_uc_pingpong /
# ibv_srq_pingpong over the verbs transport, each as the server of the
# other: QPs joined out of band (16 RC QPs a side on one SRQ for
# srq_pingpong), the addresses traded over TCP in rdma-core's text format.  Run INSIDE the
# Soft-RoCE VM (tests/rxe/rxe-vm.sh), from the top of the build tree:
#
#   tests/rxe/rxe-vm.sh -- tests/rxe/interop-pingpong.sh
#
# RoCE has no LIDs: both sides give a GID, the index of rxe0's RoCE v2
# GID of the VM's IPv4 address (::ffff:a.b.c.d, found in sysfs; RXE_GIDX
# to force).  Not on siw: iWARP QPs are connected by iw_cm only, never
# joined out of band (and iWARP has no UC).
# Environment: RXE_PP_ITERS (default 200).  Exit status: 0 all passed,
# 1 a check failed, 77 skipped (the reason is printed).
set -u

prog=interop-pingpong
iters=${RXE_PP_ITERS:-200}

skip() { echo "$prog: SKIP: $*"; exit 77; }
failed=0

[ -x ./examples/rc_pingpong ] && [ -x ./examples/uc_pingpong ] &&
	[ -x ./examples/srq_pingpong ] ||
	skip "examples/rc_pingpong, uc_pingpong and srq_pingpong are not built"
command -v ibv_rc_pingpong >/dev/null && command -v ibv_srq_pingpong >/dev/null ||
	skip "ibv_rc_pingpong and ibv_srq_pingpong (ibverbs-utils) are not installed"
dev=$(ibv_devices 2>/dev/null | awk '/rxe/ { print $1; exit }')
[ -n "$dev" ] || skip "no rxe device: run this inside the VM of tests/rxe/rxe-vm.sh"

# The index of the RoCE v2 GID that carries an IPv4 address.
gidx=${RXE_GIDX:-}
if [ -z "$gidx" ]; then
	for f in /sys/class/infiniband/"$dev"/ports/1/gids/*; do
		i=${f##*/}
		type=$(cat "/sys/class/infiniband/$dev/ports/1/gid_attrs/types/$i" 2>/dev/null)
		case "$(cat "$f" 2>/dev/null):$type" in
		0000:0000:0000:0000:0000:ffff:*:"RoCE v2") gidx=$i; break ;;
		esac
	done
fi
[ -n "$gidx" ] || skip "$dev has no RoCE v2 GID of an IPv4 address"
echo "$prog: $dev, GID index $gidx"

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
port=$(( 19000 + ($$ % 1000) ))

# Until something listens on TCP port $1 (rdma-core's client dials once
# and gives up; a server under emulation takes seconds to open its device,
# and to make srq_pingpong's 16 QPs).
wait_listen() {
	local i
	for i in $(seq 1 100); do
		ss -ltnH "sport = :$1" 2>/dev/null | grep -q . && return 0
		sleep 0.2
	done
	return 1
}

# pair NAME "SERVER CMD" "CLIENT CMD": both must finish all iterations.
pair() {
	local name=$1 srv_cmd=$2 cli_cmd=$3 srv cli
	port=$((port + 1))
	# shellcheck disable=SC2086
	timeout 180 $srv_cmd -p "$port" -g "$gidx" -n "$iters" >"$tmp/$name.srv" 2>&1 &
	srv=$!
	pids+=("$srv")
	wait_listen "$port"
	# shellcheck disable=SC2086
	timeout 180 $cli_cmd -p "$port" -g "$gidx" -n "$iters" 127.0.0.1 >"$tmp/$name.cli" 2>&1
	cli=$?
	wait "$srv"
	srv=$?
	if [ "$cli" -ne 0 ] || [ "$srv" -ne 0 ] ||
	   ! grep -q "^$iters iters in" "$tmp/$name.cli" ||
	   ! grep -q "^$iters iters in" "$tmp/$name.srv"; then
		echo "$prog: FAIL: $name (client $cli, server $srv)"
		grep -v "address:" "$tmp/$name.cli" | tail -n 5 | sed "s/^/  client: /"
		grep -v "address:" "$tmp/$name.srv" | tail -n 5 | sed "s/^/  server: /"
		failed=1
		return
	fi
	echo "$prog: ok: $name: $(grep "iters in" "$tmp/$name.cli")"
}

pair "rc ferry server, ibv client" "./examples/rc_pingpong" "ibv_rc_pingpong -d $dev"
pair "rc ibv server, ferry client" "ibv_rc_pingpong -d $dev" "./examples/rc_pingpong"
pair "uc ferry server, ibv client" "./examples/uc_pingpong" "ibv_uc_pingpong -d $dev"
pair "uc ibv server, ferry client" "ibv_uc_pingpong -d $dev" "./examples/uc_pingpong"
pair "rc ferry both, events" "./examples/rc_pingpong -e" "./examples/rc_pingpong -e"
srq=./examples/srq_pingpong
pair "srq ferry server, ibv client" "$srq" "ibv_srq_pingpong -d $dev"
pair "srq ibv server, ferry client" "ibv_srq_pingpong -d $dev" "$srq"
pair "srq ferry server, ibv client, events" "$srq -e" "ibv_srq_pingpong -d $dev -e"
pair "srq ferry both" "$srq -q 8 -r 64" "$srq -q 8 -r 64"
[ "$failed" -eq 0 ] && echo "$prog: all passed"
exit $failed
