#!/usr/bin/env bash
# stopped.sh - a server under the preload that cannot or will not finish a
# ferry handshake holds up neither its other clients nor a client of its
# own:
#  - python3's http.server under ferry-run, stopped with SIGSTOP: curl
#    under ferry-run, started while it is stopped, gives ferry up after the
#    shim's short bound (preload/sockets.c, FP_FERRY_CONNECT_MS) and gets
#    its answer over TCP once the server is continued 1.5 s later; the
#    whole fetch takes well under the CM's 30 s, and the shim says it fell
#    back.  The server serves the next request (over ferry) as before.
#  - a raw client that sends a valid connect request to the server's
#    rendezvous socket and then nothing: curl under ferry-run is served
#    over ferry meanwhile, promptly.
set -u
prog=stopped.sh
# shellcheck source=tests/preload/lib.sh
. "$(dirname "$0")/lib.sh"
need curl python3
py=$(python3_bin)

mkdir -p "$tmp/www"
printf 'ferry says hello\n' >"$tmp/www/small.txt"

# fetch WHAT OUT ERR: curl under the preload, in the background, for
# small.txt; its pid in $curl_pid.
fetch() {
	ferry_prefix
	spawn "$2" "$3" "${wrap[@]}" curl -sS --noproxy '*' --max-time 5 \
		"http://127.0.0.1:$port/small.txt"
	curl_pid=$spawned
}

# fetched WHAT OUT ERR: the fetch ended well, with the file.
fetched() {
	reap "$curl_pid" 30
	[ "$reaped" = 0 ] && cmp -s "$2" "$tmp/www/small.txt" ||
		fail "$1: curl exited with $reaped: $(other_lines "$3" | head -n 3)"
	no_ferry_errors "$1, curl" "$3"
}

stopped() {
	local what="curl from a stopped http.server" start ms
	start=$(date +%s%N)
	kill -STOP "$server_pid"
	fetch "$what" "$tmp/stopped.out" "$tmp/stopped.err"
	sleep 1.5
	kill -CONT "$server_pid"
	fetched "$what" "$tmp/stopped.out" "$tmp/stopped.err"
	ms=$(( ($(date +%s%N) - start) / 1000000 ))
	note "$what: answered after $ms ms (the server was stopped for 1500)"
	[ "$ms" -lt 10000 ] || fail "$what: took $ms ms, not well under the CM's 30 s"
	grep -Eq "^ferry\[[0-9]+\]: info: connect to 127\.0\.0\.1:$port: not ferry \(timeout: Connection timed out\): TCP\$" \
		"$tmp/stopped.err" ||
		fail "$what: the shim did not say it fell back to TCP:" \
			"$(ferry_lines "$tmp/stopped.err" | head -n 5)"

	# The request the client gave up on did the server no harm.
	fetch "$what, next" "$tmp/next.out" "$tmp/next.err"
	fetched "$what, next" "$tmp/next.out" "$tmp/next.err"
	client_transport "$what, next" ferry "$tmp/next.err"
}

# A CONNECT_REQ (cm/cm_msg.c) to the rendezvous name of 127.0.0.1:$port,
# with private data a stream listener takes for rsocket's; then, once the
# server answered it, nothing for 60 s.
cat >"$tmp/stall.py" <<'EOF'
import socket, struct, sys, time
port = int(sys.argv[1])
def addr(p):
	return bytes([4, 0]) + struct.pack('>H', p) + bytes([127, 0, 0, 1]) + bytes(12)
pdata = bytes([1, 0]) + struct.pack('>H', 16) + bytes(4) + \
	struct.pack('<QII', 4096, 1, 2) + struct.pack('<QII', 8192, 1, 4096)
req = struct.pack('>I', 0x46434d31) + bytes([1, 1, len(pdata), 0]) + \
	addr(40000) + addr(port) + bytes([1, 1, 0, 7, 7, 0, 0, 0]) + pdata
# The listener's rendezvous name: after the TCP socket that holds the
# port (cm/cm_shm_owner.c), listed in /proc/net/unix while it listens.
name = None
with open('/proc/net/unix') as f:
	for line in f:
		w = line.split()
		if len(w) >= 8 and w[3] == '00010000' and w[5] == '01' and \
		   w[7].startswith('@ferry/cm/v2/%d/' % port):
			name = b'\0' + w[7][1:].encode()
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(name)
s.send(req)
s.recv(512)
print('answered', flush=True)
time.sleep(60)
EOF

stalled() {
	local what="curl from http.server with a stalled handshake pending" i
	spawn "$tmp/stall.out" "$tmp/stall.err" "$py" -u "$tmp/stall.py" "$port"
	stall_pid=$spawned
	for i in $(seq 200); do
		grep -q answered "$tmp/stall.out" && break
		sleep 0.05
	done
	grep -q answered "$tmp/stall.out" ||
		{ fail "$what: the server never answered the raw request: $(cat "$tmp/stall.err")"; return; }
	fetch "$what" "$tmp/stall-curl.out" "$tmp/stall-curl.err"
	fetched "$what" "$tmp/stall-curl.out" "$tmp/stall-curl.err"
	client_transport "$what" ferry "$tmp/stall-curl.err"
	slay "$stall_pid"
	wait "$stall_pid" 2>/dev/null
}

serve http ferry "$py" -u -m http.server --bind 127.0.0.1 --directory "$tmp/www" @PORT@ ||
	finish
failed_before=$failed
stopped
stalled
kill -TERM "$server_pid"
reap "$server_pid" 30
if grep -q Traceback "$tmp/http.err"; then
	fail "http.server raised:"
	grep -A 20 Traceback "$tmp/http.err" | head -n 40
fi
no_ferry_errors "http.server" "$tmp/http.err"
[ "$failed" != "$failed_before" ] || note "ok: a stopped or stalled handshake holds nobody up"
finish
