#!/usr/bin/env bash
# rxe-vm.sh - run one command inside a disposable VM that has a real RDMA
# stack: the Debian kernel's Soft-RoCE driver (rdma_rxe) on the VM's NIC, the
# kernel's rdma_cm, and this machine's own rdma-core user space.
#
#   tests/rxe/rxe-vm.sh [--siw] [--rw DIR]... [--mem MB] [--smp N] [--timeout S]
#                       [--prepare] -- COMMAND [ARG...]
#
# --siw: the VM's device is siw0, the kernel's SoftiWARP (iWARP over the
# VM's own TCP), instead of rxe0.  Debian does not build that driver, so the
# first --siw run compiles it from Debian's kernel source for the VM's
# kernel (packages linux-source-6.1 and linux-headers-<that kernel>; a skip
# naming them when missing) and keeps the module in the cache below.
# --siw-packages prints those two package names, for the VM's kernel as
# apt-cache knows it now, and exits (setup.sh's siw stage installs them).
#
# The guest mounts this machine's root file system read-only over 9p, so the
# same paths, binaries and libraries work inside; it gets a private /tmp,
# /run and /dev/shm, and each --rw DIR read-write at its own path.  COMMAND
# runs as root in the current directory, with rxe0 bound to eth0
# (10.0.2.15/24) and FERRY_*, CK_* and RXE_* variables passed through.  Its
# output is streamed here and its exit status returned.
#
# Exit status: COMMAND's; 77 when this machine cannot run the VM (a program
# or the kernel package missing; the reason is printed); 124 when the VM ran
# out of time; 125 when it died without reporting.
#
# --prepare only builds the cached kernel + initramfs (no COMMAND needed).
#
# Acceleration: software emulation (TCG), several times slower than native:
# allow for it in timeouts.  FERRY_RXE_ACCEL=kvm tries KVM instead.
#
# Debian packages used: qemu-system-x86 busybox-static cpio kmod, and for the
# user space the guest borrows: ibverbs-providers ibverbs-utils rdmacm-utils
# iproute2.  The kernel package (linux-image-*-amd64) is fetched once with
# apt-get download into $FERRY_RXE_CACHE (default /var/cache/ferry-rxe, or
# ~/.cache/ferry-rxe when that is not writable).
set -euo pipefail

prog=rxe-vm
mem=2048 smp=2 timeout=600 prepare_only=0 siw=0 siw_packages_only=0
rw_dirs=()

skip() { echo "$prog: SKIP: $*" >&2; exit 77; }
die() { echo "$prog: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
	case "$1" in
	--siw) siw=1; shift ;;
	--rw) rw_dirs+=("$(realpath "$2")"); shift 2 ;;
	--mem) mem=$2; shift 2 ;;
	--smp) smp=$2; shift 2 ;;
	--timeout) timeout=$2; shift 2 ;;
	--prepare) prepare_only=1; shift ;;
	--siw-packages) siw_packages_only=1; shift ;;
	--) shift; break ;;
	-h|--help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) die "unknown option $1 (see --help)" ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || [ $prepare_only = 1 ] || [ $siw_packages_only = 1 ] ||
	die "no command given (see --help)"

# --- what the host must have ---------------------------------------------

check_tools() {
	local missing=() pair
	for pair in qemu-system-x86_64:qemu-system-x86 busybox:busybox-static \
		    cpio:cpio depmod:kmod rdma:iproute2 ibv_devinfo:ibverbs-utils \
		    rping:rdmacm-utils; do
		command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
	done
	compgen -G '/usr/lib/*/libibverbs/librxe-*.so' >/dev/null || missing+=(ibverbs-providers)
	[ ${#missing[@]} -eq 0 ] || skip "missing Debian packages: ${missing[*]}"
	# busybox must be static: it runs before any library is reachable.
	if file -L "$(command -v busybox)" 2>/dev/null | grep -q dynamically; then
		skip "busybox is dynamically linked (install busybox-static)"
	fi
}

pick_cache_dir() {
	local dir=${FERRY_RXE_CACHE:-}
	if [ -z "$dir" ]; then
		dir=/var/cache/ferry-rxe
		mkdir -p "$dir" 2>/dev/null && [ -w "$dir" ] || dir=${HOME:-/tmp}/.cache/ferry-rxe
	fi
	mkdir -p "$dir" || die "cannot create cache dir $dir"
	echo "$dir"
}

# The versioned image package linux-image-amd64 points at, e.g. linux-image-6.1.0-56-amd64.
kernel_package() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n 1
}

# The packages siw_module needs for the kernel linux-image-amd64 points at.
siw_packages() {
	local ver
	ver=$(kernel_package)
	ver=${ver#linux-image-}
	[ -n "$ver" ] || die "apt-cache knows no linux-image-amd64: cannot tell the VM's kernel"
	echo "linux-source-$(echo "$ver" | cut -d. -f1,2) linux-headers-$ver"
}
[ $siw_packages_only = 1 ] && { siw_packages; exit 0; }

# --- the initramfs ----------------------------------------------------------

# Modules the guest loads, in order, with what each needs (from modules.dep).
# libcrc32c: for siw (--siw), which the initramfs cannot know it needs.
GUEST_MODULES="crc32_generic crc32c_generic libcrc32c virtio_pci virtio_net 9pnet_virtio 9p ib_uverbs rdma_ucm rdma_rxe"

# copy_module_closure MODDIR DEST NAME: copy NAME's .ko and its dependencies.
copy_module_closure() {
	local moddir=$1 dest=$2 name=$3 line file dep
	line=$(grep -E "(^|/)${name}\.ko(\.[gx]z|\.zst)?:" "$moddir/modules.dep" || true)
	[ -n "$line" ] || return 0	# built in, or absent: modprobe will say
	for file in ${line%%:*} ${line#*:}; do
		[ -e "$dest/$file" ] && continue
		mkdir -p "$dest/$(dirname "$file")"
		cp "$moddir/$file" "$dest/$file"
	done
}

write_guest_init() {
	cat > "$1" <<'EOF'
#!/bin/sh
# Guest init: load the RDMA stack, mount the host's root, run the job.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules.list); do
	modprobe "$m" 2>/dev/null || echo "rxe-vm guest: modprobe $m failed" > /dev/console
done
p9="trans=virtio,version=9p2000.L,msize=524288"
mount -t 9p -o "$p9,ro" hostroot /host || { echo "rxe-vm guest: no host root" > /dev/console; poweroff -f; }
for d in tmp run dev/shm; do mount -t tmpfs tmpfs "/host/$d"; done
mkdir -p /host/tmp/rxe-ctl
mount -t 9p -o "$p9" ctl /host/tmp/rxe-ctl
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mount -t tmpfs tmpfs /host/dev/shm
n=0
while read -r dir; do
	# Under the guest's private /tmp the mount point must be made first.
	[ -n "$dir" ] && { mkdir -p "/host$dir" 2>/dev/null; mount -t 9p -o "$p9" "rw$n" "/host$dir"; }
	n=$((n + 1))
done < /host/tmp/rxe-ctl/rw.list
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
chroot /host /bin/sh /tmp/rxe-ctl/job.sh > /host/tmp/rxe-ctl/out 2>&1
echo $? > /host/tmp/rxe-ctl/status
sync
poweroff -f
EOF
	chmod 755 "$1"
}

# prepare_kernel CACHE: make CACHE/<version>-<digest>/{vmlinuz,initrd.gz}; print the dir.
prepare_kernel() {
	local cache=$1 pkg ver kdir tmp moddir stage m
	pkg=$(kernel_package)
	[ -n "$pkg" ] || skip "apt cannot name the Debian kernel package (run apt-get update)"
	ver=${pkg#linux-image-}
	# Keyed by what goes into the initramfs too: a changed guest init or
	# module list must not boot a stale cached one.
	kdir=$cache/$ver-$( { declare -f write_guest_init; echo "$GUEST_MODULES"; } |
		sha1sum | cut -c1-12)
	if [ -s "$kdir/initrd.gz" ] && [ -s "$kdir/vmlinuz" ]; then
		echo "$kdir"
		return
	fi
	echo "$prog: preparing kernel $ver in $kdir (once)" >&2
	tmp=$(mktemp -d "$cache/prep.XXXXXX")
	(cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
		{ rm -rf "$tmp"; skip "apt-get download $pkg failed (no network or no package lists?)"; }
	dpkg-deb -x "$tmp"/"$pkg"_*.deb "$tmp/root"
	moddir=$tmp/root/lib/modules/$ver
	depmod -b "$tmp/root" "$ver"

	stage=$tmp/initramfs
	mkdir -p "$stage"/{bin,dev,proc,sys,host,lib/modules/$ver}
	cp "$(command -v busybox)" "$stage/bin/busybox"
	for m in sh mount modprobe mkdir cat echo chroot poweroff ip sync sleep; do
		ln -s busybox "$stage/bin/$m"
	done
	for m in $GUEST_MODULES; do
		copy_module_closure "$moddir" "$stage/lib/modules/$ver" "$m"
	done
	cp "$moddir"/modules.{dep,alias,symbols,builtin,order} "$stage/lib/modules/$ver/" 2>/dev/null || true
	depmod -b "$stage" "$ver"
	echo "$GUEST_MODULES" > "$stage/modules.list"
	write_guest_init "$stage/init"

	rm -rf "$kdir" && mkdir -p "$kdir"
	(cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) > "$kdir/initrd.gz.part"
	cp "$tmp/root/boot/vmlinuz-$ver" "$kdir/vmlinuz"
	mv "$kdir/initrd.gz.part" "$kdir/initrd.gz"
	rm -rf "$tmp"
	echo "$kdir"
}

# siw_module CACHE KDIR: the siw driver for the VM's kernel (KDIR names its
# version), built once out of tree from the kernel source Debian ships as a
# tarball, against that kernel's headers package; prints the .ko's path.
siw_module() {
	local cache=$1 ver tarball series b ko
	ver=$(basename "$2")
	ver=${ver%-*}			# drop the initramfs digest
	ko=$cache/siw-$ver.ko
	[ -s "$ko" ] && { echo "$ko"; return; }
	series=$(echo "$ver" | cut -d. -f1,2)
	tarball=/usr/src/linux-source-$series.tar.xz
	[ -f "$tarball" ] || skip "--siw needs the kernel source: apt-get install linux-source-$series"
	[ -d "/usr/src/linux-headers-$ver" ] ||
		skip "--siw needs the VM kernel's headers: apt-get install linux-headers-$ver"
	echo "$prog: compiling siw for $ver from $tarball (once)" >&2
	b=$(mktemp -d "$cache/siw.XXXXXX")
	tar -xJf "$tarball" -C "$b" "linux-source-$series/drivers/infiniband/sw/siw" ||
		{ rm -rf "$b"; die "cannot unpack siw's source from $tarball"; }
	if ! make -s -C "/usr/src/linux-headers-$ver" \
		M="$b/linux-source-$series/drivers/infiniband/sw/siw" CONFIG_RDMA_SIW=m modules \
		> "$b/build.log" 2>&1; then
		tail -n 20 "$b/build.log" >&2
		rm -rf "$b"
		die "compiling siw failed"
	fi
	cp "$b/linux-source-$series/drivers/infiniband/sw/siw/siw.ko" "$ko.part" && mv "$ko.part" "$ko"
	rm -rf "$b"
	echo "$ko"
}

# Software emulation unless FERRY_RXE_ACCEL=kvm: on nested hosts KVM may
# initialise and then hang the guest kernel early in boot, which costs the
# whole timeout, while TCG boots in about 30 s.
pick_accel() {
	case "${FERRY_RXE_ACCEL:-tcg}" in
	kvm) echo "kvm,thread=single" ;;
	*) echo "tcg,thread=multi" ;;
	esac
}

# --- main -----------------------------------------------------------------

check_tools
cache=$(pick_cache_dir)
kdir=$(prepare_kernel "$cache")
siwko=
[ $siw = 1 ] && siwko=$(siw_module "$cache" "$kdir")
[ $prepare_only = 1 ] && { echo "$prog: kernel ready in $kdir" >&2; exit 0; }

ctl=$(mktemp -d /tmp/rxe-vm.XXXXXX)
qemu_pid=
cleanup() {
	[ -n "$qemu_pid" ] && kill "$qemu_pid" 2>/dev/null
	rm -rf "$ctl"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

printf '%s\n' "${rw_dirs[@]+"${rw_dirs[@]}"}" > "$ctl/rw.list"
{
	echo "export PATH='$PATH' HOME=/root RXE_VM=1 LANG=C"
	env | { grep -E '^(FERRY|CK|RXE)_[A-Za-z0-9_]*=' || true; } |
		while IFS= read -r kv; do printf 'export %q\n' "$kv"; done
	printf 'cd %q || exit 2\n' "$PWD"
	if [ -n "$siwko" ]; then
		# The module is on the host's disk, which the job sees as its root.
		printf 'insmod %q || { echo "rxe-vm guest: cannot load siw"; exit 3; }\n' "$siwko"
		echo 'rdma link add siw0 type siw netdev eth0 || { echo "rxe-vm guest: cannot add siw0"; exit 3; }'
	else
		echo 'rdma link add rxe0 type rxe netdev eth0 || { echo "rxe-vm guest: cannot add rxe0"; exit 3; }'
	fi
	printf '%q ' "$@"
	echo
} > "$ctl/job.sh"
: > "$ctl/out"

accel=$(pick_accel)
qemu_args=(-accel "$accel" -m "$mem" -smp "$smp" -nographic -no-reboot
	-kernel "$kdir/vmlinuz" -initrd "$kdir/initrd.gz"
	-append "console=ttyS0 quiet panic=-1 rdinit=/init"
	-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
	-virtfs "local,path=$ctl,mount_tag=ctl,security_model=none"
	-nic user,model=virtio-net-pci)
qemu_args+=(-cpu "${FERRY_RXE_CPU:-max}")
n=0
for d in "${rw_dirs[@]+"${rw_dirs[@]}"}"; do
	qemu_args+=(-virtfs "local,path=$d,mount_tag=rw$n,security_model=none,multidevs=remap")
	n=$((n + 1))
done

echo "$prog: booting (${accel%%,*}, ${mem} MiB, $smp CPUs, timeout ${timeout}s)" >&2
start=$(date +%s)
qemu-system-x86_64 "${qemu_args[@]}" > "$ctl/console" 2>&1 < /dev/null &
qemu_pid=$!
# Stream the job's output while the VM runs.
tail -n +1 -f --pid="$qemu_pid" "$ctl/out" &
tail_pid=$!
timed_out=0
while kill -0 "$qemu_pid" 2>/dev/null; do
	if [ $(( $(date +%s) - start )) -ge "$timeout" ]; then
		timed_out=1
		kill "$qemu_pid" 2>/dev/null || true
		break
	fi
	sleep 1
done
wait "$qemu_pid" 2>/dev/null || true
qemu_pid=
wait "$tail_pid" 2>/dev/null || true
echo "$prog: VM finished after $(( $(date +%s) - start ))s" >&2

if [ -s "$ctl/status" ]; then
	exit "$(cat "$ctl/status")"
fi
echo "$prog: the VM did not report a status; last console lines:" >&2
tail -n 25 "$ctl/console" >&2
[ $timed_out = 1 ] && exit 124
exit 125
