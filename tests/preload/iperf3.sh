#!/usr/bin/env bash
# iperf3.sh - iperf3 under the preload: forward, reverse (-R) and four
# streams (-P 4), each a fixed 200 MiB (-n, not -t: no clock in the test),
# and UDP (-u, 10 MiB at 200 Mbit/s: the control connection is TCP, so
# ferry's, the data UDP, which the shim passes through), with plain TCP,
# both ends under the preload, and each end alone under it (mixed: still
# works, over TCP).  Every run: both ends exit 0, neither JSON report has
# an error, the sender sent all its bytes, the receiver got some and no
# more than was sent, the client reports the streams it asked for, and the
# server's own byte counts are those the client reports for it (what the
# server measured reached the client over the control connection intact).
# UDP may lose datagrams, so there only "some" is asked of the receiver.
#
# The receiver's count may be short of the sender's, over TCP too: iperf3
# stops counting when the control connection says the test ended, and
# bytes still buffered are not counted.  What is buffered is bounded by the
# socket buffers (or ferry's rings), far below half the transfer.
set -u
prog=iperf3.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
need iperf3 python3
py=$(python3_bin)

bytes=$(( 200 * 1048576 ))
udp_bytes=$(( 10 * 1048576 ))

# check_reports WHAT CLIENT.json SERVER.json STREAMS REVERSE UDP BYTES: the
# checks above, done by python3; prints what is wrong, one line each.
check_reports() {
	"$py" - "$@" <<'EOF'
import json, sys

what, cpath, spath, streams, reverse, udp, want = sys.argv[1:8]
streams, reverse, udp, want = int(streams), reverse == "yes", udp == "yes", int(want)
bad = []

def load(path, side):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        bad.append(f"{side} JSON unreadable: {e}")
        return None

c, s = load(cpath, "client"), load(spath, "server")
for side, rep in (("client", c), ("server", s)):
    if rep is not None and "error" in rep:
        bad.append(f"{side} reports an error: {rep['error']}")
if c is not None and s is not None and not bad:
    cend, send = c["end"], s["end"]
    # In the client's report, sum_sent is what the sender sent and
    # sum_received what the receiver got, whichever end each was.
    sent, got = cend["sum_sent"]["bytes"], cend["sum_received"]["bytes"]
    if sent < want:
        bad.append(f"the sender sent {sent} bytes, not {want}")
    if not 0 < got <= sent:
        bad.append(f"the receiver got {got} bytes of {sent} sent")
    elif got < want // 2 and not udp:
        bad.append(f"the receiver got only {got} bytes of {sent}")
    n = len(cend["streams"])
    if n != streams or c["start"]["test_start"]["num_streams"] != streams:
        bad.append(f"the client ran {n} streams, not {streams}")
    # The server measured one side: what it sent with -R, else what it got.
    key, role = ("sum_sent", "sender") if reverse else ("sum_received", "receiver")
    if send[key]["bytes"] != cend[key]["bytes"]:
        bad.append(f"the server counted {send[key]['bytes']} bytes as {role},"
                   f" the client says it counted {cend[key]['bytes']}")
    # (UDP streams report one "udp" summary each, not sender and receiver.)
    mine = sorted(st[role]["bytes"] for st in send["streams"] if not udp)
    told = sorted(st[role]["bytes"] for st in cend["streams"] if not udp)
    if mine != told:
        bad.append(f"per stream the server counted {mine}, the client says {told}")
for line in bad:
    print(f"{what}: {line}")
EOF
}

# run MODE NAME ARGS...: one iperf3 test of MODE with client ARGS.
run() {
	local mode=$1 name=$2 what problems reverse=no udp=no streams=1 size=$bytes a
	local failed_before=$failed
	shift 2
	for a in "$@"; do
		[ "$a" = -R ] && reverse=yes
		[ "$a" = -u ] && udp=yes size=$udp_bytes
	done
	what="iperf3 -n $size${*:+ $*} ($(describe "$mode"))"
	[ "${1:-}" = -P ] && streams=$2
	serve "server-$mode-$name" "$mode" iperf3 -s -1 -J -B 127.0.0.1 -p @PORT@ || return
	client "$mode" 60 iperf3 -c 127.0.0.1 -p "$port" -n "$size" -J "$@" \
		>"$tmp/client-$mode-$name.json" 2>"$tmp/client-$mode-$name.err"
	[ $rc = 0 ] || fail "$what: the client exited with $rc: $(cat "$tmp/client-$mode-$name.err")"
	reap "$server_pid" 30
	[ "$reaped" = 0 ] ||
		fail "$what: the server exited with $reaped: $(cat "$tmp/server-$mode-$name.err")"
	problems=$(check_reports "$what" "$tmp/client-$mode-$name.json" \
		"$tmp/server-$mode-$name.out" "$streams" "$reverse" "$udp" "$size")
	[ -z "$problems" ] || fail "$problems"
	for a in client server; do
		no_ferry_errors "$what, $a" "$tmp/$a-$mode-$name.err"
	done
	client_transport "$what" "$mode" "$tmp/client-$mode-$name.err"
	server_transport "$what" "$mode" "$tmp/server-$mode-$name.err"
	[ "$failed" != "$failed_before" ] || note "ok: $what"
}

for mode in $modes; do
	run "$mode" fwd
	run "$mode" rev -R
	run "$mode" p4 -P 4
	run "$mode" udp -u -b 200M
done
finish
