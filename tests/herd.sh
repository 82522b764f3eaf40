#!/usr/bin/env bash
# herd.sh - bench/herd (the HERD-style key-value server: requests WRITten
# over UC, responses SENT over UD, beside the same server over TCP) in a
# small run on this host: it exits nonzero on any wrong, lost or missing
# response, and `timeout 120` turns a hang into a failure.  Then a run
# with malformed requests mixed in (--hostile), which the server must
# refuse without harm to its table, and a window of 16 (UD may lose;
# herd resends).  HERD_TRANSPORT picks the transport
# (default shm) and HERD_GID a GID index (RoCE needs one): in the
# Soft-RoCE VM, HERD_TRANSPORT=verbs HERD_GID=1 (rxe0's RoCE v2 GID).
set -u

prog=herd.sh
herd=./bench/herd

skip() { echo "$prog: SKIP: $*"; exit 77; }
[ -x "$herd" ] || skip "$herd is not built"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
export FERRY_TRANSPORT=${HERD_TRANSPORT:-shm}
gid=()
[ -n "${HERD_GID:-}" ] && gid=(-g "$HERD_GID")

# run NAME ARGS...: both rows present, exit 0.
run() {
	local name=$1 kind=both rc
	shift
	case " $* " in *" -k ferry "*) kind=ferry ;; esac
	timeout 120 "$herd" --local "${gid[@]}" "$@" > "$tmp/out" 2>&1
	rc=$?
	if [ "$rc" != 0 ]; then
		echo "$prog: FAIL: $name: exit $rc"
		sed 's/^/  /' "$tmp/out"
		failed=1
		return
	fi
	if ! grep -q "^herd   uc-write " "$tmp/out" ||
	   { [ "$kind" = both ] && ! grep -q "^herd   tcp-rr " "$tmp/out"; }; then
		echo "$prog: FAIL: $name: a row is missing"
		sed 's/^/  /' "$tmp/out"
		failed=1
		return
	fi
	echo "$prog: PASS: $name"
	grep "^herd " "$tmp/out" | sed 's/^/  /'
}

run "20000 requests per client" -n 20000
run "malformed requests refused" -n 5000 --hostile -w 8
# A window over the 10 datagrams a shm UD QP's socket holds: responses
# may be lost there, and must be resent until every one is answered.
run "window 16 (losses resent)" -n 10000 -w 16 -k ferry
if "$herd" --local -w 17 > "$tmp/big" 2>&1; then
	echo "$prog: FAIL: a window over the slots' 16 was taken"
	failed=1
fi
exit $failed
