#!/usr/bin/env bash
# tcp-netns-tshark.sh - ferry-to-ferry traffic on a live link, read by
# someone else's decoder: two network namespaces joined by a veth pair,
# dumpcap capturing on one end while ferry-ping (SEND, RDMA READ, RDMA
# WRITE) and tests/tcp_mix (the same with Immediate Data, in a random mix)
# run over the CM's tcp transport; then Wireshark's iwarp_mpa and
# iwarp_ddp_rdmap dissectors must find each connection's MPA Request and
# Reply (CRCs negotiated on), every TCP segment of the ferry port inside
# an FPDU, every FPDU's DDP/RDMAP header, every CRC good, nothing
# malformed.  (Wireshark's MPA dissector is heuristic: it needs no port,
# only the Request at the start of a connection.)  Needs root, ip netns,
# tshark/dumpcap (Debian package tshark); skips otherwise.
set -u
# shellcheck source=tests/netns-lib.sh
. "$(dirname "$0")/netns-lib.sh"

prog="tcp-netns-tshark.sh"
ping=./tools/ferry-ping
mix=./tests/tcp_mix
ns1="ferry-tsh1-$$" ns2="ferry-tsh2-$$"
if1="ft1-$$" if2="ft2-$$"
a1=10.79.0.1 a2=10.79.0.2
run_s=60	# a run's bound on a slow shared machine; not a timing under test

[ -x "$ping" ] || skip "ferry-ping is not built"
[ -x "$mix" ] || skip "tests/tcp_mix is not built"
command -v tshark >/dev/null || skip "tshark is not installed (Debian package tshark)"
command -v dumpcap >/dev/null || skip "dumpcap is not installed (Debian package tshark)"
netns_up
# A private profile: the user's Wireshark preferences must not change
# what is decoded.
export HOME=$tmp XDG_CONFIG_HOME=$tmp/config

# pair TAG PORT SERVER-CMD... -- CLIENT-CMD...: one server in ns1, one
# client in ns2 (bounded); both must succeed.
pair() {
	local tag=$1 port=$2 scmd=() spid
	shift 2
	while [ "$1" != -- ]; do scmd+=("$1"); shift; done
	shift
	ip netns exec "$ns1" "${scmd[@]}" >"$tmp/$tag.server" 2>&1 &
	spid=$!
	pids+=("$spid")
	wait_listening "$ns1" "$port" || { fail "$tag: no server on port $port"; return; }
	in_ns "$ns2" timeout "$run_s" "$@" >"$tmp/$tag.client" 2>&1 ||
		fail "$tag: the client failed: $(cat "$tmp/$tag.client")"
	bounded_wait "$spid" "$run_s" || fail "$tag: the server failed: $(cat "$tmp/$tag.server")"
}

# --- the capture ---
# -B: a kernel buffer large enough that a burst is not dropped (a lost
# segment would break the decode and fail the test for the wrong reason).
# Not through a function: $! must be dumpcap itself, for its SIGINT.
ip netns exec "$ns1" dumpcap -q -i "$if1" -B 64 -f tcp -w "$tmp/live.pcapng" \
	2>"$tmp/dumpcap.err" &
cap=$!
pids+=("$cap")
for ((i = 0; i < 100; i++)); do
	grep -q "Capturing on" "$tmp/dumpcap.err" && break
	sleep 0.1
done
grep -q "Capturing on" "$tmp/dumpcap.err" || skip "dumpcap cannot capture: $(cat "$tmp/dumpcap.err")"

pair ping 7311 "$ping" -s -a "$a1" -p 7311 -- "$ping" -c -a "$a1" -p 7311 -C 20 -V -S 20000
pair mix 7312 "$mix" -s -a "$a1" -p 7312 -S 3 -n $((2 << 20)) -- \
	"$mix" -c "$a1" -p 7312 -S 3 -n $((2 << 20))
sleep 0.5	# the last FIN/ACKs
kill -INT "$cap"
bounded_wait "$cap" 30 || fail "dumpcap did not stop: $(cat "$tmp/dumpcap.err")"
if grep -qE "dropped on interface .*: [0-9]+/[1-9]" "$tmp/dumpcap.err"; then
	skip "the kernel dropped captured packets (a loaded machine): $(tail -n 2 "$tmp/dumpcap.err")"
fi

# --- the decode ---
ts() {
	tshark -r "$tmp/live.pcapng" --disable-protocol rpcordma --disable-protocol smb_direct \
		-o tcp.desegment_tcp_streams:TRUE "$@" 2>>"$tmp/tshark.err"
}
version=$(tshark --version 2>/dev/null | head -n 1)

# Each connection's MPA Request and Reply, each with CRCs on (C set).
for port in 7311 7312; do
	mpa=$(ts -Y "tcp.port == $port && (iwarp_mpa.req || iwarp_mpa.rep)" -T fields \
		-e iwarp_mpa.req -e iwarp_mpa.rep -e iwarp_mpa.crc_flag -e iwarp_mpa.rev |
		awk -F'\t' '{ print ($1 != "" ? "req" : "rep") " C=" $3 " rev=" $4 }' | tr '\n' ';')
	[ "$mpa" = "req C=1 rev=2;rep C=1 rev=2;" ] ||
		fail "port $port: MPA Request/Reply: '$mpa' ($version)"
done

# Every segment with ferry payload is (part of) an FPDU: dissected as MPA
# itself or reassembled into a frame that is.  Kernel TCP's retransmissions
# (a tail loss probe on a loaded machine) carry bytes dissected already:
# tshark hands them to no dissector above TCP, so they are counted apart.
retrans='tcp.analysis.retransmission || tcp.analysis.spurious_retransmission ||
	tcp.analysis.fast_retransmission'
ts -Y "tcp.len > 0 && !($retrans)" -T fields -e frame.number -e frame.protocols \
	-e tcp.reassembled_in >"$tmp/segments"
segments=$(wc -l <"$tmp/segments")
retransmitted=$(ts -Y "tcp.len > 0 && ($retrans)" -T fields -e frame.number | wc -l)
stray=$(awk -F'\t' '$2 !~ /iwarp_mpa/ && $3 == ""' "$tmp/segments")
[ -z "$stray" ] || fail "segments not dissected as MPA: $(echo "$stray" | head -n 3 | tr '\n\t' '; ')"

# Every FPDU carries a DDP and an RDMAP header; every CRC checked, good.
ts -T fields -E occurrence=a -E aggregator=, -e iwarp_mpa.ulpdulength -e iwarp_ddp.control_field \
	-e iwarp_rdma.opcode >"$tmp/fpdus"
fpdus=$(awk -F'\t' '$1 != "" { n += split($1, x, ",") } END { print n + 0 }' "$tmp/fpdus")
ddp=$(awk -F'\t' '$2 != "" { n += split($2, x, ",") } END { print n + 0 }' "$tmp/fpdus")
rdmap=$(awk -F'\t' '$3 != "" { n += split($3, x, ",") } END { print n + 0 }' "$tmp/fpdus")
[ "$fpdus" -gt 0 ] || fail "no FPDU found ($version)"
[ "$ddp" -eq "$fpdus" ] && [ "$rdmap" -eq "$fpdus" ] ||
	fail "$fpdus FPDUs but $ddp DDP and $rdmap RDMAP headers"
ts -V >"$tmp/verbose"
good=$(grep -c '(Good CRC32)' "$tmp/verbose")
[ "$good" -eq "$fpdus" ] || fail "$good good CRCs for $fpdus FPDUs"
! grep -q 'Bad CRC32' "$tmp/verbose" || fail "a bad CRC: $(grep -m1 'Bad CRC32' "$tmp/verbose")"
# (TCP's own warnings, group Sequence - a full window, a retransmission
# - are about the link, not the frames.)
if grep -E 'Malformed|Expert Info \((Warning|Error)' "$tmp/verbose" | grep -qv '/Sequence)'; then
	fail "tshark reports: $(grep -E 'Malformed|Expert Info \((Warning|Error)' "$tmp/verbose" |
		grep -v -m1 '/Sequence)')"
fi

# The opcodes the runs must have put on the wire: Write, Read Request,
# Read Response, Send, Immediate Data (RFC 7306; tshark has no name for 8).
ops=$(awk -F'\t' '$3 != "" { n = split($3, x, ","); for (i = 1; i <= n; i++) print x[i] }' \
	"$tmp/fpdus" | sort -u | while read -r op; do echo $((op)); done | sort -n | tr '\n' ' ')
for want in 0 1 2 3 8; do
	case " $ops" in *" $want "*) ;; *) fail "no RDMAP opcode $want on the wire (saw: $ops)" ;; esac
done

[ "$failed" = 0 ] || exit 1
echo "$prog: PASS: $segments segments (and $retransmitted TCP retransmissions), $fpdus" \
	"FPDUs (opcodes ${ops% }) of two live connections dissected by $version; every CRC good"
