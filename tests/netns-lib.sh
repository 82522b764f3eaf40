# netns-lib.sh - two "hosts" for a test script: two network namespaces
# joined by a veth pair.  Sourced (bash) by tests/tcp-netns.sh,
# tcp-netns-faults.sh, tcp-netns-tshark.sh, sock-netns.sh and
# preload/netns.sh, after they set:
#
#   prog          the script's name, for its messages
#   ns1 ns2       the namespaces' names (unique: put $$ in them)
#   if1 if2       the veth ends' names (at most 15 bytes)
#   a1 a2         their IPv4 addresses, in one /24
#
# It gives skip, fail (sets failed=1) and note; netns_up, which skips
# (exit 77, saying why) unless this is root with ip(8), timeout(1) and
# namespaces, then makes both namespaces, the link (lo up in each), a
# scratch directory $tmp and a trap that kills every pid in pids[],
# deletes the namespaces and the directory (KEEP=dir copies it there
# first, for a look at a failure); and in_ns, bounded_wait,
# wait_listening.  FERRY_TRANSPORT is unset: the CM must pick tcp itself.

skip() { echo "$prog: SKIP: $*"; exit 77; }
fail() { echo "$prog: FAIL: $*"; failed=1; }
note() { echo "$prog: $*"; }
failed=0
pids=()

# shellcheck disable=SC2317
netns_cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
	ip netns del "$ns1" 2>/dev/null
	ip netns del "$ns2" 2>/dev/null
	[ -n "${KEEP:-}" ] && cp -r "$tmp" "$KEEP"
	rm -rf "$tmp"
}

netns_up() {
	[ "$(id -u)" = 0 ] || skip "needs root (network namespaces and a veth pair)"
	command -v ip >/dev/null || skip "ip(8) is not installed"
	command -v timeout >/dev/null || skip "timeout(1) is not installed"
	ip netns add "$ns1" 2>/dev/null || skip "cannot make a network namespace here"
	tmp=$(mktemp -d)
	trap netns_cleanup EXIT
	ip netns add "$ns2" || skip "cannot make a second network namespace"
	ip link add "$if1" type veth peer name "$if2" 2>/dev/null ||
		skip "cannot make a veth pair here"
	ip link set "$if1" netns "$ns1" && ip link set "$if2" netns "$ns2" &&
	ip -n "$ns1" addr add "$a1/24" dev "$if1" && ip -n "$ns2" addr add "$a2/24" dev "$if2" &&
	ip -n "$ns1" link set "$if1" up && ip -n "$ns2" link set "$if2" up &&
	ip -n "$ns1" link set lo up && ip -n "$ns2" link set lo up ||
		skip "cannot set the veth pair up"
	unset FERRY_TRANSPORT
}

# in_ns NS CMD...: run CMD in namespace NS (ip execs it: same pid).
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# bounded_wait PID SECS: its exit status, or 124 (and killed) after SECS.
bounded_wait() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$1" 2>/dev/null; then
		kill -9 "$1" 2>/dev/null
		wait "$1" 2>/dev/null
		return 124
	fi
	wait "$1"
}

# wait_listening NS PORT: until a socket listens there (the server is up).
wait_listening() {
	local i
	for ((i = 0; i < 300; i++)); do
		in_ns "$1" ss -Hltn "sport = :$2" 2>/dev/null | grep -q . && return 0
		sleep 0.1
	done
	return 1
}
