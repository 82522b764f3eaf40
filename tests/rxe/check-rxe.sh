#!/bin/sh
# check-rxe.sh - ferry's verbs-path checks; runs INSIDE the Soft-RoCE VM
# or the SoftiWARP one (tests/rxe/rxe-vm.sh [--siw] starts it there; see
# tests/rxe/Makefile.inc: make check-rxe, make check-siw).
#
#   tests/rxe/check-rxe.sh [STAGE...]     (stages: unit cm sock interop
#                                          rsocket pingpong ud tcp;
#                                          default: all of them on rxe,
#                                          where tcp skips; all but unit,
#                                          pingpong and ud on siw)
#
# On an iWARP device (siw0) three stages cannot hold, and skip saying why:
# unit, whose suites join QPs with ferry_qp_exchange and a manual RTR (on
# iWARP only iw_cm can bind a QP to its TCP stream); pingpong, whose QPs
# are joined out of band (iw_cm only connects iWARP QPs, and iWARP has no
# UC); ud (iWARP has no datagrams).  sock and rsocket run there in
# rsocket's iWARP mode (no WRITE_WITH_IMM, which siw lacks: each message a
# WRITE and a 4-byte SEND, sock/sock_msg.c).
#
# unit:    the provider-generic Check suites with FERRY_TRANSPORT=verbs;
# cm:      the CM suites with FERRY_TRANSPORT=verbs (when built), at the
#          VM's own addresses: rdma_cm cannot route loopback over rxe;
# sock:    the stream-socket suite the same way; its integrity stream moves
#          FERRY_SOCK_STREAM_MB MiB (16 unless set; 256 on shm), and the
#          tests that cannot hold over a device say why ("SKIP ...");
# interop: ferry-ping against rdma-core's rping, both directions, -V
#          (tests/rxe/interop-rping.sh).
# rsocket: ferry's stream sockets against librdmacm's rsocket, both
#          directions, RXE_RSOCK_BYTES each way (tests/rxe/interop-rsocket.sh):
#          ferry over verbs; on siw also over ferry's tcp transport.
# pingpong: ferry's rc_pingpong / uc_pingpong / srq_pingpong against
#          ibv_rc_pingpong / ibv_uc_pingpong / ibv_srq_pingpong, both
#          directions (tests/rxe/interop-pingpong.sh),
#          and the suite join (QPs joined out of band) with
#          FERRY_TRANSPORT=verbs.
# ud:      examples/ud_pingpong against rdma-core's ibv_ud_pingpong, each as
#          the server of the other, over the IPv4 GID (tests/ud-pingpong.sh).
# tcp:     iWARP only: ferry's own tcp transport (user-space iWARP) against
#          the kernel's siw: ferry-ping over tcp <-> rping over siw0, both
#          directions, -V (tests/rxe/interop-siw-tcp.sh), and the CM suites
#          with FERRY_TRANSPORT=tcp at the VM's address.  On rxe it skips:
#          RoCE is not iWARP, and the suites are the host's own.
# Prints one line per check and a closing "N passed, N failed, N skipped".
# Exit status 0 when nothing failed, 1 otherwise, 77 when not in an RDMA VM.
# Run it from the build tree (make check-rxe does): the programs are there
# when the build is out of the source tree; else it goes to the source tree.
set -u

srcdir=$(cd "$(dirname "$0")/../.." && pwd)
[ -x tests/check_ferry ] || [ -x tools/ferry-ping ] || cd "$srcdir" || exit 2

passed=0 failed=0 skipped=0
pass() { passed=$((passed + 1)); echo "PASS: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
skip() { skipped=$((skipped + 1)); echo "SKIP: $*"; }

devices=$(ibv_devices 2>/dev/null)
if ! echo "$devices" | grep -qE 'rxe|siw'; then
	echo "check-rxe: SKIP: no rxe or siw device here (run me through tests/rxe/rxe-vm.sh)"
	exit 77
fi
iwarp=0
echo "$devices" | grep -q rxe || iwarp=1
ip=$(ip -4 -o addr show dev eth0 2>/dev/null | sed -n 's/.* inet \([0-9.]*\).*/\1/p' | head -n 1)
ip=${ip:-10.0.2.15}
# An IPv6 address on the same netdev gives rxe0 a RoCE v2 GID for the CM's
# IPv6 tests (the link-local one would need a scope id).
ip6=${FERRY_TEST_ADDR6:-fd00:fe77::15}
ip -6 addr add "$ip6/64" dev eth0 nodad 2>/dev/null
export FERRY_TEST_ADDR=${FERRY_TEST_ADDR:-$ip} FERRY_TEST_ADDR6=$ip6
# The CM's unreachable destination is TEST-NET-1 (192.0.2.1): the VM's
# default route would hand it to rdma_cm as reachable through the gateway.
ip route add unreachable 192.0.2.0/24 2>/dev/null

# Software emulation is slow: give Check's per-test timeouts room.
export CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-4}
export FERRY_TRANSPORT=verbs

# Suites whose tests hold for every provider.  hostile and peer are about
# shm's shared memory and its peer-death detection; they stay on shm.
UNIT_SUITES="objects query qp_state ops errors rnr flush channel ud srq"
CM_SUITES="cm cm_robust"

run_suite() {
	suite=$1
	log=/tmp/check-rxe-$suite-$FERRY_TRANSPORT.log
	if CK_RUN_SUITE=$suite timeout 300 ./tests/check_ferry > "$log" 2>&1; then
		pass "suite $suite ($FERRY_TRANSPORT): $(tail -n 1 "$log")"
	else
		fail "suite $suite ($FERRY_TRANSPORT): $(tail -n 1 "$log")"
		grep -E ':[EF]:' "$log" | head -n 20
	fi
	# Tests that do not hold on this transport return early and say why.
	grep '^SKIP ' "$log" | sed 's/^/  /'
}

# The stages iWARP cannot run: the reason, or nothing (see the top).
iwarp_reason() {
	[ "$iwarp" = 1 ] || return 0
	case $1 in
	unit) echo "its suites join QPs with ferry_qp_exchange (a manual RTR): on iWARP only iw_cm connects a QP" ;;
	pingpong) echo "its QPs are joined out of band: on iWARP only iw_cm connects a QP, and there is no UC" ;;
	ud) echo "iWARP has no unreliable datagrams" ;;
	esac
}

# The stages only iWARP can run: the reason, or nothing.
roce_reason() {
	[ "$iwarp" = 0 ] || return 0
	case $1 in
	tcp) echo "the tcp transport speaks iWARP, which rxe (RoCE) does not; make check-siw runs it" ;;
	esac
}

stage_unit() {
	for s in $UNIT_SUITES; do run_suite "$s"; done
}

stage_cm() {
	for s in $CM_SUITES; do
		if ./tests/check_ferry_list_suites 2>/dev/null | grep -qx "$s" ||
		   grep -q "${s}_suite" "$srcdir/tests/check_suites.h" 2>/dev/null; then
			run_suite "$s"
		else
			skip "suite $s: not built"
		fi
	done
}

stage_sock() {
	run_suite sock
}

# ferry-ping and rping, each as server of the other, -V (interop-rping.sh).
stage_interop() {
	log=/tmp/check-rxe-interop.log
	RXE_ADDR=$ip timeout 600 "$srcdir/tests/rxe/interop-rping.sh" > "$log" 2>&1
	case $? in
	0) pass "interop: $(tail -n 1 "$log")" ;;
	77) skip "interop: $(tail -n 1 "$log")" ;;
	*) fail "interop: ferry-ping <-> rping"; tail -n 30 "$log" ;;
	esac
}

# ferry stream sockets and librdmacm's rsocket, each as server of the other:
# ferry over the device (verbs), and on iWARP also over its own tcp
# transport against rsocket on siw0.
stage_rsocket() {
	transports=verbs
	[ "$iwarp" = 1 ] && transports="verbs tcp"
	for t in $transports; do
		log=/tmp/check-rxe-rsocket-$t.log
		RXE_ADDR=$ip timeout 600 "$srcdir/tests/rxe/interop-rsocket.sh" "$t" > "$log" 2>&1
		case $? in
		0) pass "rsocket ($t): $(tail -n 1 "$log")" ;;
		77) skip "rsocket ($t): $(tail -n 1 "$log")" ;;
		*) fail "rsocket ($t): ferry sockets <-> rsocket"; tail -n 30 "$log" ;;
		esac
	done
}

# ferry's ping-pong examples and rdma-core's, each as server of the other;
# then the join suite on the device.
stage_pingpong() {
	log=/tmp/check-rxe-pingpong.log
	timeout 900 "$srcdir/tests/rxe/interop-pingpong.sh" > "$log" 2>&1
	case $? in
	0) pass "pingpong: $(tail -n 1 "$log")" ;;
	77) skip "pingpong: $(tail -n 1 "$log")" ;;
	*) fail "pingpong: ferry <-> ibv_*_pingpong"; tail -n 30 "$log" ;;
	esac
	run_suite join
}

# The index of rxe0's RoCE v2 GID of the VM's IPv4 address (::ffff:a.b.c.d).
ud_gid_index() {
	for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do
		n=${f##*/}
		t=$(cat "/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$n" 2>/dev/null)
		case "$(cat "$f" 2>/dev/null):$t" in
		0000:0000:0000:0000:0000:ffff:*"RoCE v2") echo "$n"; return ;;
		esac
	done
	echo 1
}

# ferry's ud_pingpong and rdma-core's ibv_ud_pingpong, each as server of the other.
stage_ud() {
	log=/tmp/check-rxe-ud.log
	FERRY_UDPP_INTEROP=1 FERRY_UDPP_GID=$(ud_gid_index) timeout 600 \
		"$srcdir/tests/ud-pingpong.sh" > "$log" 2>&1
	case $? in
	0) pass "ud: $(grep -c PASS "$log") ping-pongs (ferry and ibv_ud_pingpong both ways)" ;;
	77) skip "ud: $(tail -n 1 "$log")" ;;
	*) fail "ud: ud_pingpong <-> ibv_ud_pingpong"; tail -n 30 "$log" ;;
	esac
}

# ferry-ping over the tcp transport and rping over siw0, each as server
# of the other (interop-siw-tcp.sh); then the CM suites over tcp.
stage_tcp() {
	log=/tmp/check-rxe-tcp.log
	RXE_ADDR=$ip timeout 600 "$srcdir/tests/rxe/interop-siw-tcp.sh" > "$log" 2>&1
	case $? in
	0) pass "tcp: $(tail -n 1 "$log")"; grep -E "^interop-siw-tcp: [0-9]+s:" "$log" | sed 's/^/  /' ;;
	77) skip "tcp: $(tail -n 1 "$log")" ;;
	*) fail "tcp: ferry-ping (tcp) <-> rping (siw)"; tail -n 30 "$log" ;;
	esac
	FERRY_TRANSPORT=tcp
	stage_cm
	FERRY_TRANSPORT=verbs
}

if [ "$iwarp" = 1 ]; then
	stages=${*:-cm sock interop rsocket tcp}
else
	stages=${*:-unit cm sock interop rsocket pingpong ud tcp}
fi
for st in $stages; do
	why=$(iwarp_reason "$st")
	if [ -n "$why" ]; then
		skip "$st on iWARP: $why"
		continue
	fi
	why=$(roce_reason "$st")
	if [ -n "$why" ]; then
		skip "$st on RoCE: $why"
		continue
	fi
	case $st in
	unit) stage_unit ;;
	cm) stage_cm ;;
	sock) stage_sock ;;
	interop) stage_interop ;;
	rsocket) stage_rsocket ;;
	pingpong) stage_pingpong ;;
	ud) stage_ud ;;
	tcp) stage_tcp ;;
	*) echo "check-rxe: unknown stage $st"; exit 2 ;;
	esac
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
