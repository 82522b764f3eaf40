#!/usr/bin/env bash
# sock-netns.sh - ferry's stream sockets between two hosts: two network
# namespaces joined by a veth pair (10.78.0.1/24, 10.78.0.2/24), with
# FERRY_TRANSPORT unset, so the CM picks its tcp transport (nothing else
# serves the other namespace's address).
#   1. the README's sock_hello ("Stream sockets in C"), compiled from the
#      README's own text with the address made the server's: the server
#      prints what the client wrote;
#   2. tests/sock-peer (tests/rxe/rsock-peer.c against ferry): the client
#      writes SOCK_NETNS_MB MiB (default 256) in writes of random sizes,
#      the server echoes them, the client checks every byte and EOF --
#      with each namespace as the server in turn;
#   3. the same echo in rsocket's iWARP mode (FERRY_STREAM_IWARP=1: each
#      message a WRITE and a 4-byte SEND, as towards siw).
# Each end must say (FERRY_LOG=debug) which form its messages took:
# immediate data between two ferry ends, SENDs when forced.
# Needs root, ip(8) with netns and, for 1, a C compiler (CC, else cc);
# skips (77) otherwise, saying why.
set -u
# shellcheck source=tests/netns-lib.sh
. "$(dirname "$0")/netns-lib.sh"

prog="sock-netns.sh"
peer=./tests/sock-peer
ns1="ferry-sk1-$$" ns2="ferry-sk2-$$"
if1="sv1-$$" if2="sv2-$$"
a1=10.78.0.1 a2=10.78.0.2
mb=${SOCK_NETNS_MB:-256}
# Bounds, generous for a slow shared machine: not timings under test.
run_s=600

[ -x "$peer" ] || skip "$peer is not built (make check builds it)"
netns_up


unset FERRY_STREAM_IWARP

# --- 1. sock_hello, from the README ---

hello_build() {
	local cc=${CC:-cc} src=${srcdir:-..}/README.md
	[ -r "$src" ] || { echo "no README.md at $src"; return 1; }
	command -v "${cc%% *}" >/dev/null || { echo "no C compiler ($cc)"; return 1; }
	# The C block that opens with sock_hello.c's comment, up to its fence.
	sed -n '/^\/\* sock_hello\.c/,/^```$/p' "$src" | sed '$d' |
		sed "s/\"127\.0\.0\.1\"/\"$a1\"/" >"$tmp/sock_hello.c"
	grep -q "\"$a1\"" "$tmp/sock_hello.c" || { echo "the README's sock_hello has no address to change"; return 1; }
	# shellcheck disable=SC2086 # SAN_LDFLAGS: words (make check sets it)
	$cc ${SAN_LDFLAGS:-} -I"${srcdir:-..}/include" "$tmp/sock_hello.c" "$PWD/.libs/libferry.so" \
		-Wl,-rpath,"$PWD/.libs" -o "$tmp/sock_hello" 2>&1
}

if ! out=$(hello_build); then
	echo "$prog: sock_hello not built, step 1 skipped: $out"
else
	in_ns "$ns1" "$tmp/sock_hello" server >"$tmp/hello.server" 2>&1 &
	spid=$!
	pids+=($spid)
	wait_listening "$ns1" 7471 || fail "sock_hello: no server listening"
	in_ns "$ns2" timeout "$run_s" "$tmp/sock_hello" client >"$tmp/hello.client" 2>&1 ||
		fail "sock_hello: the client failed: $(cat "$tmp/hello.client")"
	bounded_wait "$spid" 60 || fail "sock_hello: the server failed: $(cat "$tmp/hello.server")"
	grep -qx "server read 32 bytes: hello over a ferry stream socket" "$tmp/hello.server" ||
		fail "sock_hello: the server printed: $(cat "$tmp/hello.server")"
	[ $failed = 0 ] && echo "$prog: sock_hello: $(cat "$tmp/hello.server")"
fi

# --- 2, 3. the echo, every byte checked ---

# echo_run TAG SERVER_NS SERVER_ADDR CLIENT_NS PORT BYTES MODE: one echo;
# both ends must say (FERRY_LOG=debug) their messages went as MODE.
echo_run() {
	local tag=$1 sns=$2 saddr=$3 cns=$4 port=$5 bytes=$6 mode=$7 spid end
	ip netns exec "$sns" "$peer" -s -a "$saddr" -p "$port" >"$tmp/$tag.server" 2>&1 &
	spid=$!
	pids+=($spid)
	wait_listening "$sns" "$port" || { fail "$tag: no server listening"; return; }
	if ! in_ns "$cns" timeout "$run_s" "$peer" -c "$saddr" -p "$port" -b "$bytes" \
		>"$tmp/$tag.client" 2>&1; then
		fail "$tag: the client failed: $(cat "$tmp/$tag.client")"
	fi
	bounded_wait "$spid" 60 || fail "$tag: the server failed: $(cat "$tmp/$tag.server")"
	grep -q "$bytes bytes echoed intact" "$tmp/$tag.client" ||
		fail "$tag: no intact echo: $(cat "$tmp/$tag.client")"
	grep -q "echoed $bytes bytes, then EOF" "$tmp/$tag.server" ||
		fail "$tag: the server says: $(cat "$tmp/$tag.server")"
	for end in server client; do
		grep -q "messages as $mode" "$tmp/$tag.$end" ||
			fail "$tag: the $end's messages did not go as $mode"
	done
	[ $failed = 0 ] && echo "$prog: $tag: $(grep -h "echoed" "$tmp/$tag.client")"
}

bytes=$((mb << 20))
export FERRY_LOG=debug
echo_run imm-1to2 "$ns2" "$a2" "$ns1" 7481 "$bytes" "immediate data"
echo_run imm-2to1 "$ns1" "$a1" "$ns2" 7482 "$bytes" "immediate data"
export FERRY_STREAM_IWARP=1
echo_run iwarp-1to2 "$ns2" "$a2" "$ns1" 7483 "$bytes" SENDs
echo_run iwarp-2to1 "$ns1" "$a1" "$ns2" 7484 "$bytes" SENDs

[ $failed = 0 ] && echo "$prog: PASS (sock_hello; ${mb} MiB echoed each way, with immediate data and in iWARP mode)"
exit $failed
