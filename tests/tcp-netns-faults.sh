#!/usr/bin/env bash
# tcp-netns-faults.sh - the CM's tcp transport between two hosts under
# faults (issue 16): two network namespaces joined by a veth pair, and
# tests/tcp_mix (a seeded random mix of RDMA WRITE, READ and SEND over the
# verbs API, every byte of both sides checked at the end) between them.
#
#   1. a control: the two ends given different seeds must both fail (the
#      check can fail);
#   2. 256 MiB of the mix with the link impaired both ways - netem's 5 ms
#      delay, 25% of packets reordered, 1% lost - and the link down for 2 s
#      mid-transfer; every byte must arrive as the model says;
#   3. a peer SIGKILLed mid-transfer, each side in turn: the survivor must
#      see DISCONNECTED and its QP in ERR within KILL_BOUND_S seconds of the
#      kill (the issue asks for one second; the bound allows for a loaded
#      machine).  The measured time is printed.
#
# Where the kernel has no netem (sch_netem), the loss is made by nftables
# instead (1% of the packets dropped as they come in) and the delay and the
# reordering are left out: the script says so.  With neither, phase 2 runs
# with the link down only.  Every run is bounded by timeout(1).  Needs root,
# ip(8) with netns and a veth pair; skips (77) otherwise.
set -u
# shellcheck source=tests/netns-lib.sh
. "$(dirname "$0")/netns-lib.sh"

prog="tcp-netns-faults.sh"
mix=./tests/tcp_mix
ns1="ferry-flt1-$$" ns2="ferry-flt2-$$"
if1="ff1-$$" if2="ff2-$$"
a1=10.78.0.1 a2=10.78.0.2
# Bounds, generous for a slow shared machine: not timings under test.
run_s=300		# one 256 MiB run under faults
KILL_BOUND_S=${KILL_BOUND_S:-3}
mix_bytes=$((256 << 20))

[ -x "$mix" ] || skip "tests/tcp_mix is not built"
netns_up

# server PORT LOG ARGS...: tcp_mix -s in ns1, in the background ($spid).
server() {
	local port=$1 log=$2
	shift 2
	# Not through timeout(1), nor a function: $! must be tcp_mix itself.
	ip netns exec "$ns1" "$mix" -s -a "$a1" -p "$port" "$@" >"$log" 2>&1 &
	spid=$!
	pids+=("$spid")
	wait_listening "$ns1" "$port" || fail "no server listening on $a1 port $port"
}

# client PORT LOG ARGS...: tcp_mix -c in ns2, in the background ($cpid).
client() {
	local port=$1 log=$2
	shift 2
	ip netns exec "$ns2" "$mix" -c "$a1" -p "$port" "$@" >"$log" 2>&1 &
	cpid=$!
	pids+=("$cpid")
}

# connected LOG...: until each log says its side is connected (30 s at most).
connected() {
	local i log
	for log in "$@"; do
		for ((i = 0; i < 300; i++)); do
			grep -q "^tcp_mix: connected" "$log" && break
			sleep 0.1
		done
		grep -q "^tcp_mix: connected" "$log" || return 1
	done
}

# impair: netem on both ends, or nftables loss, or nothing; sets $impaired.
impair() {
	local ns dev
	if in_ns "$ns1" tc qdisc add dev "$if1" root netem delay 5ms reorder 25% 50% loss 1% \
		2>/dev/null; then
		in_ns "$ns2" tc qdisc add dev "$if2" root netem delay 5ms reorder 25% 50% loss 1% ||
			{ fail "netem on $if1 but not on $if2"; return; }
		impaired="netem: 5 ms delay, 25% reordered, 1% lost, both ways"
		return
	fi
	note "no netem here (tc: $(in_ns "$ns1" tc qdisc add dev "$if1" root netem delay 5ms 2>&1))"
	if ! command -v nft >/dev/null; then
		impaired="none (no netem, no nft): the link down only"
		return
	fi
	for ns in "$ns1" "$ns2"; do
		dev=$if1
		[ "$ns" = "$ns2" ] && dev=$if2
		in_ns "$ns" nft -f - <<-EOF || { fail "nft in $ns"; return; }
		table inet ferry_faults {
			chain in { type filter hook input priority 0; iifname "$dev" numgen random mod 100 < 1 counter drop; }
		}
		EOF
	done
	impaired="nftables: 1% of packets lost both ways (no netem: no delay, no reordering)"
}

unimpair() {
	in_ns "$ns1" tc qdisc del dev "$if1" root 2>/dev/null
	in_ns "$ns2" tc qdisc del dev "$if2" root 2>/dev/null
	in_ns "$ns1" nft delete table inet ferry_faults 2>/dev/null
	in_ns "$ns2" nft delete table inet ferry_faults 2>/dev/null
}

# dropped NS: the packets nftables dropped there (0 without nft).
dropped() {
	in_ns "$1" nft list table inet ferry_faults 2>/dev/null |
		sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | head -n 1
}

# --- 1. a control: different seeds must fail on both sides ---
server 7301 "$tmp/ctl.server" -S 1 -n $((4 << 20))
client 7301 "$tmp/ctl.client" -S 2 -n $((4 << 20))
bounded_wait "$cpid" 60 && fail "control: the client passed with the server's seed differing"
bounded_wait "$spid" 60 && fail "control: the server passed with the client's seed differing"
grep -q "data differ\|differs" "$tmp/ctl.server" "$tmp/ctl.client" ||
	fail "control: no side named a difference: $(cat "$tmp/ctl.server" "$tmp/ctl.client")"

# --- 2. 256 MiB under loss, delay, reordering and the link down 2 s ---
impair
note "impairment: $impaired"
server 7302 "$tmp/mix.server" -S 16 -n "$mix_bytes"
start=$(date +%s.%N)
client 7302 "$tmp/mix.client" -S 16 -n "$mix_bytes"
connected "$tmp/mix.client" || fail "the client did not connect: $(cat "$tmp/mix.client")"
sleep 1
if kill -0 "$cpid" 2>/dev/null; then
	in_ns "$ns2" ip link set dev "$if2" down
	sleep 2
	in_ns "$ns2" ip link set dev "$if2" up
	note "the link was down for 2 s, 1 s into the transfer"
else
	fail "the transfer ended within 1 s, before the link went down (too small a test)"
fi
bounded_wait "$cpid" "$run_s"
rc=$?
end=$(date +%s.%N)
dropped_1=$(dropped "$ns1") dropped_2=$(dropped "$ns2")
[ "$rc" = 124 ] && fail "256 MiB under faults: the client hung (killed after ${run_s}s)"
[ "$rc" = 0 ] || fail "256 MiB under faults: the client failed: $(cat "$tmp/mix.client")"
bounded_wait "$spid" 60 || fail "256 MiB under faults: the server failed: $(cat "$tmp/mix.server")"
grep -q "every byte as expected" "$tmp/mix.client" || fail "no client summary"
grep -q "memory as the client's model" "$tmp/mix.server" || fail "no server summary"
note "$(cat "$tmp/mix.client")"
note "256 MiB in $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s;" \
	"packets nftables dropped: ${dropped_1:-0} into the server's side, ${dropped_2:-0} into the client's"
unimpair

# --- 3. a peer SIGKILLed mid-transfer: the survivor's DISCONNECTED + ERR ---
# kill_one VICTIM(server|client) PORT
kill_one() {
	local victim=$1 port=$2 vpid survivor slog t_kill t_lost ms
	server "$port" "$tmp/kill-$victim.server" -k -n 0
	client "$port" "$tmp/kill-$victim.client" -k -n 0
	connected "$tmp/kill-$victim.server" "$tmp/kill-$victim.client" ||
		{ fail "kill $victim: no connection: $(cat "$tmp/kill-$victim".*)"; return; }
	sleep 2
	if [ "$victim" = server ]; then
		vpid=$spid survivor=$cpid slog="$tmp/kill-$victim.client"
	else
		vpid=$cpid survivor=$spid slog="$tmp/kill-$victim.server"
	fi
	kill -0 "$survivor" 2>/dev/null || { fail "kill $victim: the survivor ended before" \
		"the kill: $(cat "$slog")"; return; }
	# The time before the kill: the measure errs long, on the bound's side.
	t_kill=$(date +%s.%N)
	kill -9 "$vpid"
	wait "$vpid" 2>/dev/null	# reaped here: no "Killed" from bash later
	bounded_wait "$survivor" 30 ||
		{ fail "kill $victim: the survivor did not report the loss: $(cat "$slog")"; return; }
	t_lost=$(sed -n 's/^tcp_mix: peer lost at \([0-9.]*\):.*/\1/p' "$slog")
	[ -n "$t_lost" ] || { fail "kill $victim: no time of loss: $(cat "$slog")"; return; }
	ms=$(awk -v a="$t_kill" -v b="$t_lost" 'BEGIN { printf "%d", (b - a) * 1000 }')
	note "$victim SIGKILLed: the other side saw DISCONNECTED and its QP in ERR" \
		"${ms} ms after the kill"
	[ "$ms" -le $((KILL_BOUND_S * 1000)) ] ||
		fail "kill $victim: ${ms} ms to see the loss, bound ${KILL_BOUND_S} s"
}
kill_one server 7303
kill_one client 7304

[ "$failed" = 0 ] && note "PASS: 256 MiB of WRITE/READ/SEND exact under faults ($impaired," \
	"link down 2 s); a SIGKILLed peer seen by the survivor within ${KILL_BOUND_S} s"
exit "$failed"
