#!/usr/bin/env bash
# ud-pingpong.sh - examples/ud_pingpong against itself on this host, over
# the shm transport: ping-pongs that check every payload (-c), without and
# with a GRH (-g 0), of one byte and of the port's MTU; a size over the MTU
# refused before anything is sent; and, when both programs are there and
# an RDMA device is (the Soft-RoCE VM: tests/rxe/rxe-vm.sh), ferry's
# against Debian's ibv_ud_pingpong, each as the server of the other.
set -u

prog=ud-pingpong.sh
pp=./examples/ud_pingpong

skip() { echo "$prog: SKIP: $*"; exit 77; }
fail() { echo "$prog: FAIL: $*"; failed=1; }
failed=0
[ -x "$pp" ] || skip "$pp is not built"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Each pair on a port no socket here uses (not an ephemeral one).
# shellcheck source=tests/port-lib.sh
. "$(dirname "$0")/port-lib.sh"

# listening PORT PID: wait (30 s at most) until PID listens on TCP PORT --
# slow to start in the emulated VM -- or has exited.
listening() {
	local i
	for i in $(seq 300); do
		if command -v ss >/dev/null; then
			ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return
		elif [ "$i" -ge 5 ]; then
			return
		fi
		kill -0 "$2" 2>/dev/null || return
		sleep 0.1
	done
}

# pair NAME SERVER_CMD... -- CLIENT_CMD...: both must exit 0 and report.
pair() {
	local name=$1 scmd=() ccmd=() spid rc_s rc_c
	shift
	while [ "$1" != -- ]; do scmd+=("$1"); shift; done
	shift
	ccmd=("$@")
	port=$(pick_port)
	timeout 120 "${scmd[@]}" -p "$port" > "$tmp/$name.s" 2>&1 &
	spid=$!
	listening "$port" "$spid"
	timeout 120 "${ccmd[@]}" -p "$port" 127.0.0.1 > "$tmp/$name.c" 2>&1
	rc_c=$?
	wait "$spid"
	rc_s=$?
	if [ "$rc_s" != 0 ] || [ "$rc_c" != 0 ]; then
		fail "$name: server $rc_s, client $rc_c"
		sed 's/^/  server: /' "$tmp/$name.s"
		sed 's/^/  client: /' "$tmp/$name.c"
		return
	fi
	if ! grep -q "iters in" "$tmp/$name.s" || ! grep -q "iters in" "$tmp/$name.c"; then
		fail "$name: no summary line"
		return
	fi
	echo "$prog: PASS: $name: $(grep 'iters in' "$tmp/$name.c")"
}

shm=(env FERRY_TRANSPORT=shm "$pp")
pair "shm 2048 B" "${shm[@]}" -c -n 200 -- "${shm[@]}" -c -n 200
pair "shm 1 B, GRH" "${shm[@]}" -c -n 100 -s 1 -g 0 -- "${shm[@]}" -c -n 100 -s 1 -g 0
pair "shm MTU" "${shm[@]}" -c -n 100 -s 4096 -- "${shm[@]}" -c -n 100 -s 4096

if FERRY_TRANSPORT=shm "$pp" -s 4097 > "$tmp/big" 2>&1; then
	fail "a size over the MTU was not refused"
elif ! grep -q "larger than the port's MTU" "$tmp/big"; then
	fail "a size over the MTU: $(cat "$tmp/big")"
fi

# Against rdma-core's, on a device that has UD (rxe): GID index 1 is the
# RoCE v2 GID of the VM's IPv4 address on rxe0 (check-rxe.sh sets it up).
if [ -n "${FERRY_UDPP_INTEROP:-}" ]; then
	ibv=$(command -v ibv_ud_pingpong) || skip "no ibv_ud_pingpong"
	dev=${FERRY_UDPP_DEV:-rxe0}
	gid=${FERRY_UDPP_GID:-1}
	fv=(env FERRY_TRANSPORT=verbs "$pp" -g "$gid" -s 1024 -n 200)
	iv=("$ibv" -d "$dev" -g "$gid" -s 1024 -n 200)
	pair "ferry server, ibv client" "${fv[@]}" -- "${iv[@]}"
	pair "ibv server, ferry client" "${iv[@]}" -- "${fv[@]}"
fi
exit "$failed"
