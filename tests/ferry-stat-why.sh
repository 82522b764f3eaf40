#!/usr/bin/env bash
# ferry-stat-why.sh - ferry-stat -s says where a program's connects went
# and why: a python3 client under ferry-run connects to a plain server
# (and once more without blocking), to a ferry server, to a port where
# nothing listens, to a port excluded by FERRY_EXCLUDE_PORTS, with TCP
# Fast Open (sendto) and to an address of no interface here; ferry-stat -s (table and JSON) must count
# each by its route.  Then the plain server is replaced by a ferry server
# on the same port, and the client's next connect there must go over
# ferry: the shim's memory of "no ferry listener here" gives way to a new
# listening socket within its bound (100 ms, cm/cm_shm_probe.c).  Skips
# without python3 or the shim.
set -u

prog="ferry-stat-why.sh"
run=./tools/ferry-run
stat=./tools/ferry-stat
shim=preload/.libs/libferry-preload.so

skip() { echo "$prog: SKIP: $*"; exit 77; }
fail() { echo "$prog: FAIL: $*"; failed=1; }
failed=0

[ -x "$run" ] && [ -x "$stat" ] || skip "ferry-run or ferry-stat is not built"
[ -f "$shim" ] || skip "the shim $shim is not built"
# As ferry-stat.sh: an ASan shim does not load into python3.
ldd "$shim" 2>/dev/null | grep -q libasan &&
	skip "the shim is built with the sanitizers; the plain build runs this test"
py=$(command -v python3) || skip "python3 is not installed"
py=$("$py" -c 'import sys; print(sys.executable)')

tmp=$(mktemp -d)
pids=()
# shellcheck disable=SC2317
cleanup() {
	local pid
	exec 5>&- 6>&- 7>&- 2>/dev/null
	for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
unset FERRY_PRELOAD FERRY_CONF FERRY_EXCLUDE_PORTS FERRY_EXCLUDE_PROGRAMS LD_PRELOAD
export FERRY_TRANSPORT=shm FERRY_CONF=

# A server: listen on PORT (0: any), say the port, close what it accepts.
cat > "$tmp/server.py" <<'EOF'
import socket, sys
l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(16)
print(l.getsockname()[1], flush=True)
while True:
    l.accept()[0].close()
EOF
# Two ports nothing listens on, held bound (never listening) by a python
# of this script's for the whole run: let go, another test running beside
# this one could listen there, or a connect take one as its own source
# port and so connect to itself (CI saw "Success" for such a port).
# Bound without SO_REUSEADDR, no one else can bind them, and the kernel
# takes no bound port as a connect's source.
mkfifo "$tmp/held"
"$py" -c '
import signal, socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s], flush=True)
signal.pause()' > "$tmp/held" &
pids+=($!)
read -r -t 30 none excl < "$tmp/held" || { fail "no ports held"; exit 1; }
# The client: the connects of the description, each checked as TCP would
# answer; its pid on the fifo, then one more connect to the plain port
# once told that a ferry server holds it.
cat > "$tmp/client.py" <<'EOF'
import errno, os, select, socket, sys, time
plain, ferry, none, excl, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def conn(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.close()
for _ in range(4):
    conn(plain)
s = socket.socket()
s.setblocking(False)
e = s.connect_ex(("127.0.0.1", plain))
assert e in (0, errno.EINPROGRESS), "non-blocking connect: %s" % os.strerror(e)
assert select.select([], [s], [], 30)[1], "non-blocking connect never completed"
assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
s.close()
for _ in range(3):
    conn(ferry)
for port in (none, excl):
    s = socket.socket()
    e = s.connect_ex(("127.0.0.1", port))
    assert e == errno.ECONNREFUSED, "port %d: %s" % (port, os.strerror(e))
    s.close()
s = socket.socket()
try:	# TCP Fast Open: connected by the kernel inside sendto
    s.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", plain))
except OSError:
    pass
s.close()
s = socket.socket()
s.setblocking(False)
e = s.connect_ex(("192.0.2.1", 9))	# TEST-NET-1: no host's address
assert e in (errno.EINPROGRESS, errno.ENETUNREACH, errno.EHOSTUNREACH), os.strerror(e)
s.close()
st = open(out, "w", buffering=1)
st.write("%d\n" % os.getpid())
sys.stdin.readline()
time.sleep(0.3)		# past the 100 ms the shim goes by its memory unlooked
conn(plain)
st.write("done\n")
sys.stdin.read()
EOF

# serve NAME PORT [PREFIX...]: a server in the background; its port in $port.
serve() {
	local name=$1 want=$2
	shift 2
	"$@" "$py" "$tmp/server.py" "$want" > "$tmp/$name.port" 2> "$tmp/$name.err" &
	server_pid=$!
	pids+=("$server_pid")
	for _ in $(seq 600); do
		port=$(head -1 "$tmp/$name.port")
		[ -n "$port" ] && return 0
		sleep 0.05
	done
	fail "the $name server did not start: $(cat "$tmp/$name.err")"
	exit 1
}
serve plain 0
plain=$port plain_pid=$server_pid
serve ferry 0 "$run"
ferry=$port

mkfifo "$tmp/in" "$tmp/out"
exec 5<> "$tmp/out"
FERRY_EXCLUDE_PORTS=$excl "$run" "$py" "$tmp/client.py" "$plain" "$ferry" "$none" "$excl" \
	"$tmp/out" < "$tmp/in" 2> "$tmp/client.err" &
pids+=($!)
exec 7> "$tmp/in"
read -r -t 60 -u 5 cpid || { fail "the client did not finish: $(cat "$tmp/client.err")"; exit 1; }

# count WHAT N: the client's line of ferry-stat -s says N for WHAT (a
# reason:N in the last column, or the Ferry or TCP column).
table() { "$stat" -s -p "$cpid" > "$tmp/table" || fail "ferry-stat -s exited $?"; }
table
head -1 "$tmp/table" | grep -qE '^Process +Ferry +TCP +Why TCP$' ||
	fail "header: $(head -1 "$tmp/table")"
line="users:\(\(\"[^\"]*\",pid=$cpid\)\) +3 +9 +no-listener:1,no-ferry-listener:5,remote:1,excluded:1,unsupported:1$"
grep -qE "^$line" "$tmp/table" || fail "the client's line: $(cat "$tmp/table")"

"$stat" -s -j -p "$cpid" > "$tmp/json" || fail "ferry-stat -s -j exited $?"
"$py" - "$tmp/json" "$cpid" <<'EOF' || fail "JSON: $(cat "$tmp/json")"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 1 and rows[0]["pid"] == int(sys.argv[2]), rows
r = rows[0]
assert r["ferry"] == 3 and r["tcp"] == 9, r
want = {"no-listener": 1, "no-ferry-listener": 5, "remote": 1, "excluded": 1, "unsupported": 1}
for k, v in r["tcp_because"].items():
    assert v == want.get(k, 0), (k, r)
assert set(want) <= set(r["tcp_because"]), r
EOF

# The plain server goes; a ferry server takes its port: found.
kill -9 "$plain_pid"
wait "$plain_pid" 2>/dev/null
serve ferry2 "$plain" "$run"
echo go >&7
read -r -t 60 -u 5 _ || { fail "the last connect did not end: $(cat "$tmp/client.err")"; exit 1; }
table
grep -qE "^users:\(\(\"[^\"]*\",pid=$cpid\)\) +4 +9 " "$tmp/table" ||
	fail "the connect to a ferry server that replaced a plain one: $(cat "$tmp/table")"

# A process with no connect shows zeros; usage errors.
"$stat" -s -H -p "$server_pid" > "$tmp/server" || fail "ferry-stat -s -p server exited $?"
grep -qE "^users:\(\(\"[^\"]*\",pid=$server_pid\)\) +0 +0 +-$" "$tmp/server" ||
	fail "the server's line: $(cat "$tmp/server")"

[ $failed = 0 ] && echo "$prog: PASS"
exit $failed
