#!/usr/bin/env bash
# setup.sh - install what ferry needs, build it, then show it working or test it.
#
#   ./setup.sh          install missing Debian packages, generate, configure, build,
#                       then run `ferry-perf --local`
#   ./setup.sh build    the same without the perf run
#   ./setup.sh test     install + build, then the whole test suite: make check,
#                       ASan+UBSan, valgrind, fuzz, and the verbs checks in a
#                       Soft-RoCE VM (soft-roce) and a SoftiWARP one (siw; each
#                       a skip where qemu or the kernel packages are missing)
#   ./setup.sh --help   this text
#
# Packages are installed only when some are missing: directly as root, through sudo
# otherwise.  The build is out of tree, in ./build (and ./build-asan for the
# sanitizer stage of the tests).  Every step is a "stage"; the last line printed is
# `setup.sh: N passed, N failed`, counting stages, and the exit status is nonzero
# when any stage failed.
#
# Environment: JOBS (parallel make jobs, default: nproc),
#              CONFIGURE_FLAGS (extra ./configure arguments for every build).
# Stage functions are called indirectly, through run_stage "$@".
# shellcheck disable=SC2317
set -euo pipefail

# Debian packages ferry needs, grouped by what uses them.  This is the only list.
PACKAGES=(
	# compiler, make, and the autotools that generate ./configure
	build-essential autoconf automake libtool pkg-config
	# libraries libferry builds against: libevent (CM event loop), libibverbs and
	# librdmacm (the verbs provider, built when configure finds them)
	libevent-dev libibverbs-dev librdmacm-dev
	# rdma-core user space for the verbs path: providers (rxe) and rping
	ibverbs-providers rdmacm-utils
	# the test suite: Check unit tests and the valgrind stage; tshark reads
	# the tcp transport's iWARP frames back (tests/tcp_wire_tshark.sh)
	check valgrind tshark
	# tests/tcp-netns-faults.sh: packet loss between two network namespaces
	# where the kernel has no netem (tc's netem comes with iproute2)
	nftables
	# the Soft-RoCE VM of the verbs tests (tests/rxe/rxe-vm.sh): qemu, a busybox
	# initramfs, the kernel's modules, the rdma tools the VM borrows from this host
	qemu-system-x86 busybox-static cpio kmod ibverbs-utils iproute2
	# `make fuzz` (libFuzzer): clang, and its runtime, which clang only recommends
	clang libclang-rt-14-dev
	# integration tests and benchmarks: gnuplot for plots, and the real programs
	# tests/preload/*.sh and bench/run-preload.sh run under the preload shim
	# (ss comes with iproute2).  The redis-server package starts a system
	# service; the tests start their own server on a random port and leave
	# that one alone.
	iperf3 gnuplot-nox redis-server redis-tools curl socat python3
	# tests/preload/nginx.sh (2 workers under the preload) and
	# bench/run-preload.sh's fallback row: wrk against a plain nginx (the
	# nginx-light package may start a system service on port 80; the bench
	# starts its own nginx on a random port and leaves that one alone)
	wrk nginx-light
	# git, to clone and update the source over https
	git ca-certificates
)

SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
CONFIGURE_FLAGS=${CONFIGURE_FLAGS:-}

stages_passed=0
stages_failed=0
failed_names=()

say() { printf 'setup.sh: %s\n' "$*"; }
die() { printf 'setup.sh: error: %s\n' "$*" >&2; exit 1; }

usage() {
	sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# --- stages -----------------------------------------------------------------

# run_stage NAME COMMAND...: run COMMAND in a subshell with errexit on, time it,
# count it, and leave its exit status in stage_rc.  A failing stage does not stop
# the script; callers decide.  (run_stage itself must not be called as the left
# side of || or in an if: bash would then ignore errexit inside the stage.)
stage_rc=0
run_stage() {
	local name=$1 rc start
	shift
	printf '\n==> %s\n' "$name"
	start=$SECONDS
	set +e
	( set -e; "$@" )
	rc=$?
	set -e
	if [ "$rc" -eq 0 ]; then
		stages_passed=$((stages_passed + 1))
		printf '==> %s: passed (%ds)\n' "$name" $((SECONDS - start))
	else
		stages_failed=$((stages_failed + 1))
		failed_names+=("$name")
		printf '==> %s: FAILED (exit %d, %ds)\n' "$name" "$rc" $((SECONDS - start))
	fi
	stage_rc=$rc
}

# finish: print the summary (the closing line CI reads) and exit.
finish() {
	echo
	if [ "$stages_failed" -gt 0 ]; then
		say "failed stages: ${failed_names[*]}"
	fi
	say "$stages_passed passed, $stages_failed failed"
	exit $((stages_failed > 0))
}

# --- packages -----------------------------------------------------------------

missing_packages() {
	local pkg status
	for pkg in "${PACKAGES[@]}"; do
		status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
		[ "$status" = installed ] || echo "$pkg"
	done
}

install_packages() {
	local missing sudo=()
	if ! command -v dpkg-query >/dev/null; then
		say "no dpkg-query: not Debian; make sure these are installed: ${PACKAGES[*]}"
		return 0
	fi
	mapfile -t missing < <(missing_packages)
	if [ ${#missing[@]} -eq 0 ]; then
		say "all ${#PACKAGES[@]} Debian packages are installed"
		return 0
	fi
	say "missing Debian packages: ${missing[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		local by_hand="as root, run:
  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
		command -v sudo >/dev/null || die "not root, and no sudo; $by_hand"
		# sudo may ask for a password: only possible with a terminal.
		sudo -n true 2>/dev/null || [ -t 0 ] ||
			die "not root, and sudo wants a password but there is no terminal; $by_hand"
		sudo=(sudo)
		say "not root: installing with sudo"
	fi
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q update ||
		die "apt-get update failed"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get -q install -y --no-install-recommends "${missing[@]}" ||
		die "apt-get install failed"
	mapfile -t missing < <(missing_packages)
	[ ${#missing[@]} -eq 0 ] || die "still missing after apt-get install: ${missing[*]}"
}

# --- build --------------------------------------------------------------------

# generate: run autoreconf when configure is missing or older than its inputs.
generate() {
	local input regen=no
	cd "$SRCDIR"
	mkdir -p m4
	if [ ! -x configure ] || [ ! -e Makefile.in ]; then
		regen=yes
	else
		for input in configure.ac Makefile.am; do
			[ "$input" -nt configure ] && regen=yes
		done
	fi
	if [ "$regen" = yes ]; then
		say "generating ./configure (autoreconf -fi)"
		autoreconf -fi
	else
		say "./configure is up to date"
	fi
}

# configure_and_make DIR [CONFIGURE-ARGS...]: out-of-tree build in DIR.
# configure runs again when DIR has never been configured or configure changed;
# otherwise make's own rules re-run it when needed.
configure_and_make() {
	local dir=$1
	shift
	cd "$SRCDIR"
	[ ! -e config.status ] ||
		die "the source tree is configured in place; run 'make distclean' in $SRCDIR first"
	mkdir -p "$dir"
	cd "$dir"
	if [ ! -e config.status ] || [ ../configure -nt config.status ]; then
		say "configuring $dir: $* $CONFIGURE_FLAGS"
		# shellcheck disable=SC2086 # CONFIGURE_FLAGS is a word list on purpose
		../configure "$@" $CONFIGURE_FLAGS
	fi
	say "building $dir with $JOBS jobs"
	make -j"$JOBS"
}

build_main() {
	generate
	configure_and_make build --enable-werror
}

run_perf() {
	cd "$SRCDIR"
	./build/tools/ferry-perf --local
}

# --- tests --------------------------------------------------------------------

# make_check DIR: `make check` in DIR; on failure print the logs of the failing
# tests, which automake collects in DIR/test-suite.log.  Either way, say why
# each skipped test skipped (the last line the test itself wrote to its log).
make_check() {
	local dir=$1 rc=0
	cd "$SRCDIR/$dir"
	make -j"$JOBS" check || rc=$?
	report_skips
	if [ "$rc" -ne 0 ] && [ -e test-suite.log ]; then
		echo "---- $dir/test-suite.log (first 400 lines) ----"
		head -n 400 test-suite.log
		echo "---- end of $dir/test-suite.log ----"
	fi
	return "$rc"
}

# report_skips: one line per skipped test of the current build directory.
report_skips() {
	local trs name
	while IFS= read -r trs; do
		grep -q '^:test-result: SKIP' "$trs" || continue
		name=${trs%.trs}
		say "skipped ${name#./}: $(grep -v '^SKIP .*(exit status: 77)$' \
			"$name.log" | tail -n 1)"
	done < <(find . -name '*.trs' | sort)
}

check_main() {
	make_check build
}

check_sanitizers() {
	configure_and_make build-asan --enable-sanitizers --enable-werror
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
	export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
	make_check build-asan
}

# check_valgrind: the Check runner of ./build (no sanitizers) under memcheck.
# libtool --mode=execute runs the real binary, not its wrapper script.  Check
# forks a child per test and valgrind follows it; a memcheck error makes that
# child exit 1, which Check reports as a failed test.
check_valgrind() {
	cd "$SRCDIR/build"
	[ -e tests/check_ferry ] || make -j"$JOBS" tests/check_ferry
	CK_DEFAULT_TIMEOUT=120 CK_TIMEOUT_MULTIPLIER=10 ./libtool --mode=execute \
		valgrind -q --error-exitcode=1 --leak-check=full \
		--show-leak-kinds=definite --errors-for-leak-kinds=definite \
		--trace-children=yes \
		tests/check_ferry
}

# check_rxe: the verbs path on a real RDMA stack: the QP and CM suites with
# FERRY_TRANSPORT=verbs, ferry-ping against rping and ferry's sockets against
# rsocket, inside a VM running the kernel's Soft-RoCE driver (tests/rxe/).
# The VM's kernel package is fetched once from Debian's archive.  Where the VM
# cannot run here, the harness exits 77 with the reason: a skip, not a failure.
check_rxe() {
	local rc=0
	cd "$SRCDIR/build"
	if ! grep -q '^#define HAVE_VERBS 1' config.h; then
		say "check-rxe skipped: ferry was configured without libibverbs/librdmacm"
		return 0
	fi
	make -j"$JOBS" tests/check_ferry tests/rxe/rsock-peer-ferry tests/rxe/rsock-peer-rdmacm
	# --rw: the tree is visible (and writable) in the VM wherever it lives,
	# even under /tmp, which the VM has a private one of.
	"$SRCDIR/tests/rxe/rxe-vm.sh" --rw "$SRCDIR" --timeout 560 -- \
		"$SRCDIR/tests/rxe/check-rxe.sh" || rc=$?
	if [ "$rc" -eq 77 ]; then
		say "check-rxe skipped (see the reason above)"
		return 0
	fi
	return "$rc"
}

# apt_install PKG...: install Debian packages missing here (as root, or with a
# sudo that asks nothing); 1 when that cannot be done, with the reason said.
apt_install() {
	local missing=() pkg sudo=()
	for pkg in "$@"; do
		[ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" = installed ] ||
			missing+=("$pkg")
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	if [ "$(id -u)" -ne 0 ]; then
		sudo -n true 2>/dev/null || { say "not root, no sudo without a password: cannot install ${missing[*]}"; return 1; }
		sudo=(sudo -n)
	fi
	say "installing ${missing[*]}"
	# The package lists may predate the kernel the archive has now.
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q update >/dev/null ||
		{ say "apt-get update failed"; return 1; }
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get -q install -y --no-install-recommends "${missing[@]}" >/dev/null ||
		{ say "apt-get install ${missing[*]} failed"; return 1; }
}

# check_siw: the CM suites and ferry-ping <-> rping on an iWARP device, siw0
# (Linux SoftiWARP), in the same VM booted with --siw (tests/rxe/check-rxe.sh
# says which stages iWARP cannot run, and why).  Debian builds no siw.ko: the
# VM compiles it once from linux-source against the headers of the VM's
# kernel, a version known only now (rxe-vm.sh --siw-packages), so those two
# packages are installed here rather than listed in PACKAGES.  A skip where
# they cannot be installed or the VM cannot run.
check_siw() {
	local rc=0 list pkgs=()
	cd "$SRCDIR/build"
	if ! grep -q '^#define HAVE_VERBS 1' config.h; then
		say "siw skipped: ferry was configured without libibverbs/librdmacm"
		return 0
	fi
	list=$("$SRCDIR/tests/rxe/rxe-vm.sh" --siw-packages) || list=
	read -ra pkgs <<<"$list"
	if [ ${#pkgs[@]} -eq 0 ] || ! apt_install "${pkgs[@]}"; then
		say "siw skipped: the kernel source and headers siw needs are not here (${list:-no kernel known for the VM})"
		return 0
	fi
	make -j"$JOBS" tests/check_ferry
	"$SRCDIR/tests/rxe/rxe-vm.sh" --siw --rw "$SRCDIR" --timeout 560 -- \
		"$SRCDIR/tests/rxe/check-rxe.sh" || rc=$?
	if [ "$rc" -eq 77 ]; then
		say "siw skipped (see the reason above)"
		return 0
	fi
	return "$rc"
}

# check_fuzz: `make fuzz`, bounded libFuzzer runs over the CM's handshake
# parser and the shm exchange's message checks (it skips, and says so, where
# clang cannot link a fuzzer).  libFuzzer
# is chatty: its output goes to build/fuzz.log and only the end is shown.
check_fuzz() {
	local rc=0
	cd "$SRCDIR/build"
	make fuzz >fuzz.log 2>&1 || rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "---- build/fuzz.log (last 60 lines) ----"
		tail -n 60 fuzz.log
	else
		grep -E '^fuzz: SKIP|^Done [0-9]+ runs' fuzz.log || tail -n 3 fuzz.log
	fi
	return "$rc"
}

# --- main ---------------------------------------------------------------------

main() {
	local mode=${1:-run}
	case "$mode" in
	-h|--help|help) usage; exit 0 ;;
	run|build|test) ;;
	*) usage >&2; echo >&2; die "unknown command '$mode'" ;;
	esac
	[ $# -le 1 ] || die "too many arguments (see --help)"

	# Setup stages: nothing else can run when these fail.
	run_stage packages install_packages
	[ "$stage_rc" -eq 0 ] || finish
	run_stage build build_main
	[ "$stage_rc" -eq 0 ] || finish

	case "$mode" in
	run)
		run_stage ferry-perf run_perf
		;;
	test)
		# Integration scripts (tests/*.sh) are listed in TESTS next to the
		# Check runner, so the two `make check` stages run them too.
		run_stage check check_main
		run_stage sanitizers check_sanitizers
		run_stage valgrind check_valgrind
		run_stage fuzz check_fuzz
		run_stage soft-roce check_rxe
		run_stage siw check_siw
		;;
	esac
	finish
}

main "$@"
