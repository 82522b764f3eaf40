#!/usr/bin/env bash
# tcp_wire_tshark.sh - ferry's iWARP wire encoder read by someone else's
# decoder: tests/tcp_wire_pcap writes a capture of one synthetic
# connection (MPA Request/Reply, then Write, Send, Read Request/Response,
# Send with SE and Invalidate, atomics, packed and split FPDUs, Terminate)
# and Wireshark's iwarp_mpa and iwarp_ddp_rdmap dissectors must find every
# message, with the opcodes and fields we sent, every CRC good, nothing
# malformed; and a capture with one spoiled CRC must show exactly one bad.
set -u

prog=tcp_wire_tshark.sh
pcap_prog=./tests/tcp_wire_pcap

skip() { echo "$prog: SKIP: $*"; exit 77; }
fail() { echo "$prog: FAIL: $*"; failed=1; }
failed=0

command -v tshark >/dev/null || skip "tshark is not installed (Debian package tshark)"
[ -x "$pcap_prog" ] || skip "$pcap_prog is not built"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A private profile: the user's Wireshark preferences must not change
# what is decoded.
export HOME=$tmp XDG_CONFIG_HOME=$tmp/config

# The Send payloads are plain text; the heuristic RPC-over-RDMA and SMB
# Direct dissectors would try them and call them malformed.  MPA needs no
# option: its heuristic finds the Request, and it checks CRCs whenever a
# frame set C.
ts() {
	tshark -r "$1" --disable-protocol rpcordma --disable-protocol smb_direct "${@:2}" \
		2>"$tmp/tshark.err"
}

"$pcap_prog" "$tmp/good.pcap" >"$tmp/expected" || fail "$pcap_prog failed"
"$pcap_prog" "$tmp/bad.pcap" --bad-crc >/dev/null || fail "$pcap_prog --bad-crc failed"
version=$(tshark --version 2>/dev/null | head -n 1)

# What the dissectors found, one line per message in order: "req", "rep"
# or the RDMAP opcode (a TCP segment may hold several).
ts "$tmp/good.pcap" -T fields -E occurrence=a -E aggregator=, \
	-e iwarp_mpa.req -e iwarp_mpa.rep -e iwarp_rdma.opcode >"$tmp/fields" ||
	fail "tshark failed: $(cat "$tmp/tshark.err")"
# (Opcodes come as 0x.. hex; mawk has no strtonum, the shell converts.)
awk -F'\t' '
	$1 != "" { print "req" }
	$2 != "" { print "rep" }
	$3 != "" { n = split($3, ops, ","); for (i = 1; i <= n; i++) print ops[i] }
' "$tmp/fields" | while read -r item; do
	case $item in
	req|rep) echo "$item" ;;
	*) echo $((item)) ;;
	esac
done >"$tmp/found"
if ! cmp -s "$tmp/expected" "$tmp/found"; then
	fail "dissected messages differ from those sent ($version):"
	diff "$tmp/expected" "$tmp/found" | sed 's/^/    /'
fi

# Every FPDU's CRC checked and good; no malformed packet, no warning.
ts "$tmp/good.pcap" -V >"$tmp/verbose" || fail "tshark -V failed"
fpdus=$(grep -cv '^re[qp]$' "$tmp/expected")
good=$(grep -c '(Good CRC32)' "$tmp/verbose")
[ "$good" -eq "$fpdus" ] || fail "$good good CRCs for $fpdus FPDUs"
! grep -q 'Bad CRC32' "$tmp/verbose" || fail "a bad CRC: $(grep -m1 'Bad CRC32' "$tmp/verbose")"
if grep -qE 'Malformed|Expert Info \((Warning|Error)' "$tmp/verbose"; then
	fail "tshark reports: $(grep -m1 -E 'Malformed|Expert Info \((Warning|Error)' "$tmp/verbose")"
fi

# Fields, not just opcodes: the Write cut at MSS 1460's MULPDU (1454, so
# 1440 bytes a segment) with advancing TOs and L on the last, the Read
# Request's body, the MPA flags.
ts "$tmp/good.pcap" -Y 'iwarp_rdma.opcode == 0 && iwarp_ddp.stag == 0x1001' -T fields \
	-e iwarp_ddp.tagged_offset -e iwarp_ddp.last_flag -e iwarp_mpa.ulpdulength \
	>"$tmp/write"
printf '%s\n' "0x0000000000010000	0	1454" "0x00000000000105a0	0	1454" \
	"0x0000000000010b40	1	134" >"$tmp/write.want"
cmp -s "$tmp/write" "$tmp/write.want" || fail "Write segments: $(tr '\n\t' '; ' <"$tmp/write")"
read_req=$(ts "$tmp/good.pcap" -Y 'iwarp_rdma.opcode == 1' -T fields -e iwarp_ddp.qn \
	-e iwarp_ddp.msn -e iwarp_rdma.sinkstag -e iwarp_rdma.rdmardsz -e iwarp_rdma.srcstag)
[ "$read_req" = "$(printf '1\t1\t0x00001003\t100\t0x00002001')" ] ||
	fail "Read Request fields: $read_req"
mpa=$(ts "$tmp/good.pcap" -Y 'iwarp_mpa.req || iwarp_mpa.rep' -T fields \
	-e iwarp_mpa.crc_flag -e iwarp_mpa.marker_flag -e iwarp_mpa.rev -e iwarp_mpa.pdlength |
	tr '\n' ';')
[ "$mpa" = "$(printf '1\t0\t2\t9;1\t0\t2\t4;')" ] || fail "MPA Request/Reply fields: $mpa"

# The checker can tell: one spoiled CRC, one bad verdict.
ts "$tmp/bad.pcap" -V >"$tmp/bad.verbose" || fail "tshark -V (bad CRC) failed"
bad=$(grep -c 'Bad CRC32' "$tmp/bad.verbose")
[ "$bad" -eq 1 ] || fail "$bad bad CRCs reported in the capture with one"

[ "$failed" -eq 0 ] || exit 1
echo "$prog: PASS: $fpdus FPDUs and the MPA exchange dissected by $version"
