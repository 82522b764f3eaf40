#!/usr/bin/env bash
# ferry-stat.sh - ferry-stat on two unmodified programs (python3 sockets)
# started with ferry-run: once they have traded known byte counts and hold
# the connection open, ferry-stat (table and JSON) must show both ends,
# with the right addresses, transport, state and bytes each way; after
# they exit, their rows are gone.  Skips without python3 or the shim.
set -u

prog=ferry-stat.sh
run=./tools/ferry-run
stat=./tools/ferry-stat
shim=preload/.libs/libferry-preload.so
n1=300000	# client -> server
n2=70000	# server -> client

skip() { echo "$prog: SKIP: $*"; exit 77; }
fail() { echo "$prog: FAIL: $*"; failed=1; }
failed=0

[ -x "$run" ] && [ -x "$stat" ] || skip "ferry-run or ferry-stat is not built"
[ -f "$shim" ] || skip "the shim $shim is not built"
# An ASan-built shim cannot load into programs built without ASan (sh,
# python3) unless the ASan runtime is preloaded first; the plain build runs
# this script, and tests/check_preload.sh covers the shim under ASan.
ldd "$shim" 2>/dev/null | grep -q libasan &&
	skip "the shim is built with the sanitizers; the plain build runs this test"
py=$(command -v python3) || skip "python3 is not installed"

tmp=$(mktemp -d)
pids=()
# shellcheck disable=SC2317
cleanup() {
	local pid
	exec 5>&- 6>&- 7>&- 8>&- 2>/dev/null
	for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
unset FERRY_PRELOAD FERRY_CONF FERRY_EXCLUDE_PORTS FERRY_EXCLUDE_PROGRAMS LD_PRELOAD
export FERRY_TRANSPORT=shm FERRY_CONF=

# The server: accept, read n1, write n2, say so, hold until stdin closes.
cat > "$tmp/server.py" <<'EOF'
import os, socket, sys
n1, n2, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.bind(("127.0.0.1", 0))
l.listen(4)
st = open(out, "w", buffering=1)
st.write("%d %d\n" % (os.getpid(), l.getsockname()[1]))
c, peer = l.accept()
got = 0
while got < n1:
    b = c.recv(65536)
    if not b:
        sys.exit("server: early EOF after %d bytes" % got)
    got += len(b)
c.sendall(b"s" * n2)
st.write("%d\n" % peer[1])
sys.stdin.read()
EOF
# The client: connect, write n1, read n2, say so, hold until stdin closes.
cat > "$tmp/client.py" <<'EOF'
import os, socket, sys
port, n1, n2, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
c = socket.create_connection(("127.0.0.1", port))
c.sendall(b"c" * n1)
got = 0
while got < n2:
    b = c.recv(65536)
    if not b:
        sys.exit("client: early EOF after %d bytes" % got)
    got += len(b)
with open(out, "w") as st:
    st.write("%d %d\n" % (os.getpid(), c.getsockname()[1]))
sys.stdin.read()
EOF

# Each program reports on a fifo of its own; the reads wait for those
# lines (60 s without one is a hang, not slowness).
mkfifo "$tmp/in-server" "$tmp/in-client" "$tmp/server" "$tmp/client"
exec 5<> "$tmp/server" 6<> "$tmp/client"
"$run" "$py" "$tmp/server.py" $n1 $n2 "$tmp/server" < "$tmp/in-server" 2> "$tmp/server.err" &
pids+=($!)
exec 7> "$tmp/in-server"
read -r -t 60 -u 5 spid port || { fail "the server did not start: $(cat "$tmp/server.err")"; exit 1; }
"$run" "$py" "$tmp/client.py" "$port" $n1 $n2 "$tmp/client" < "$tmp/in-client" \
	2> "$tmp/client.err" &
pids+=($!)
exec 8> "$tmp/in-client"
if ! read -r -t 60 -u 6 cpid cport || ! read -r -t 60 -u 5 speer; then
	fail "the transfer did not finish: $(cat "$tmp/server.err" "$tmp/client.err")"
	exit 1
fi
[ "$speer" = "$cport" ] || fail "the server's peer port $speer is not the client's $cport"

# The table: one row per end, numeric.
"$stat" -n > "$tmp/table" || fail "ferry-stat exited $?"
head -1 "$tmp/table" | grep -q '^State  *Transport  *Local Address:Port  *Peer Address:Port  *Sent  *Received  *Rx-ring  *Tx-ring  *Process$' ||
	fail "header: $(head -1 "$tmp/table")"
row() { grep -E "^ESTAB +shm +127\.0\.0\.1:$1 +127\.0\.0\.1:$2 +$3 +$4 +0/[0-9]+ +[0-9]+/[0-9]+ +users:\(\(\"[^\"]*\",pid=$5,fd=[0-9]+\)\)$" "$tmp/table"; }
row "$port" "$cport" $n2 $n1 "$spid" >/dev/null ||
	fail "no server row $port -> $cport, sent $n2, received $n1: $(cat "$tmp/table")"
row "$cport" "$port" $n1 $n2 "$cpid" >/dev/null ||
	fail "no client row $cport -> $port, sent $n1, received $n2: $(cat "$tmp/table")"

# JSON, checked by python's parser; -l shows the listener only.
"$stat" -j > "$tmp/json" || fail "ferry-stat -j exited $?"
"$py" - "$tmp/json" "$spid" "$cpid" "$port" "$cport" $n1 $n2 <<'EOF' || fail "JSON rows: $(cat "$tmp/json")"
import json, sys
rows = json.load(open(sys.argv[1]))
spid, cpid, port, cport, n1, n2 = map(int, sys.argv[2:])
def one(pid, lport, pport, sent, received):
    m = [r for r in rows if r["pid"] == pid and r["local"]["port"] == lport]
    assert len(m) == 1, m
    r = m[0]
    assert r["state"] == "ESTAB" and r["transport"] == "shm", r
    assert r["local"]["address"] == "127.0.0.1" and r["peer"] == {"address": "127.0.0.1", "port": pport}, r
    assert r["sent"] == sent and r["received"] == received, r
    assert r["rx_ring"]["unread"] == 0 and 0 < r["rx_ring"]["size"], r
    assert 0 <= r["tx_ring"]["in_flight"] <= r["tx_ring"]["size"], r
    assert r["flags"] == [], r
one(spid, port, cport, n2, n1)
one(cpid, cport, port, n1, n2)
EOF
"$stat" -l -n -p "$spid" > "$tmp/listen" || fail "ferry-stat -l exited $?"
grep -qE "^LISTEN +- +127\.0\.0\.1:$port +\*:\* " "$tmp/listen" || fail "listener: $(cat "$tmp/listen")"
[ "$(wc -l < "$tmp/listen")" = 2 ] || fail "-l shows more than the listener: $(cat "$tmp/listen")"

# Both end: nothing of theirs is left.
exec 7>&- 8>&-
wait "${pids[@]}" || fail "a program failed: $(cat "$tmp/server.err" "$tmp/client.err")"
pids=()
"$stat" -a -n -H -p "$spid" > "$tmp/after"
"$stat" -a -n -H -p "$cpid" >> "$tmp/after"
[ ! -s "$tmp/after" ] || fail "rows after exit: $(cat "$tmp/after")"
# Usage errors.
"$stat" -p x > /dev/null 2>&1; [ $? = 2 ] || fail "-p x did not exit 2"
"$stat" extra > /dev/null 2>&1; [ $? = 2 ] || fail "an extra argument did not exit 2"

[ $failed = 0 ] && echo "$prog: PASS"
exit $failed
