#!/bin/bash
# check_layers.sh - the tree's layers hold: a file includes only the public
# headers, its own layer's headers and the export/ header of a layer below
# it, and anything else fails to compile.
#
# Four checks.  (1) No source file of a layer names a header by a path
# ("../cm/cm-internal.h", "sock/x.h"): a quoted include is a bare name,
# found through the layer's include paths or not at all.  (2) With each
# layer's own include paths (asked of the Makefile, print-layer-flags), the
# preprocessor is handed an include of every private header of the tree;
# it must find exactly the ones the rule allows and fail on every other.
# (3) The probe can see a crossing: the shim's paths plus sock/ do find
# sock-internal.h.  (4) The declarations of core's that the shim uses,
# copied into sock-export.h (the shim's one door), match core-export.h's.
# The tests (white-box) and the benchmarks are outside the rule.
set -uo pipefail
top=${srcdir:-.}
prog=check_layers
CC=${CC:-cc}
command -v "$CC" >/dev/null || { echo "$prog: SKIP: no C compiler ($CC)"; exit 77; }
flags=$(make -s print-layer-flags 2>/dev/null) ||
	{ echo "$prog: SKIP: make print-layer-flags failed (not run from the build tree?)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

# rank_of DIR: the rank of the layer DIR belongs to ("" for none).
rank_of() {
	awk -v d="$1" '$2 == d { print $1; exit }' <<< "$flags"
}

# (1) Quoted includes are bare names (config.h aside, from the build tree).
layers=$(awk '{ print $2 }' <<< "$flags" | sort -u)
for d in $layers; do
	for f in "$top/$d"/*.[ch] "$top/$d"/export/*.h; do
		[ -f "$f" ] || continue
		bad=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[^"]*/' "$f")
		[ -z "$bad" ] && continue
		echo "$prog: ${f#"$top"/} names a header by a path: $bad"
		status=1
	done
done

# (2) Every private header against every layer's paths.  A header in DIR
# is its layer's private one, in DIR/export what it offers above.  Which
# exports each layer may see: the diagram's order, the shim and the tools
# on the socket layer's alone (as rdma-core's preload is on rsocket.h);
# util's generic headers (the fd table, the clock) by every layer.
may_see() {
	case $1 in
	util) echo "" ;;
	core) echo "util" ;;
	prov/*) echo "util core" ;;
	cm) echo "util core prov/shm prov/verbs prov/tcp" ;;
	sock) echo "util core cm" ;;
	preload|tools) echo "util sock" ;;
	*) echo "$prog: no rule for the layer $1" >&2; echo "" ;;
	esac
}
headers=$(cd "$top" && for d in $layers; do
	ls "$d"/*.h "$d"/export/*.h 2>/dev/null
done | sort -u)
checked=0
while read -r rank dir cppflags; do
	[ -n "$cppflags" ] || continue		# a layer not configured (verbs)
	seen=" $(may_see "$dir") "
	for h in $headers; do
		hdir=${h%/*}
		owner=${hdir%/export}
		base=${h##*/}
		if [ "$owner" = "$dir" ]; then
			continue		# its own: the build shows it finds them
		elif [ "$hdir" != "$owner" ] && [[ $seen == *" $owner "* ]]; then
			allowed=1
		else
			allowed=0
		fi
		printf '#include "%s"\n' "$base" > "$tmp/probe.c"
		# shellcheck disable=SC2086
		if $CC -E -DHAVE_CONFIG_H -I. $cppflags ${VERBS_CFLAGS:-} "$tmp/probe.c" \
			-o /dev/null 2> "$tmp/err"; then
			found=1
		elif grep -q "$base: No such file" "$tmp/err"; then
			found=0
		else
			found=1		# found, and what it includes in turn was not
		fi
		checked=$((checked + 1))
		if [ $found = 1 ] && [ $allowed = 0 ]; then
			echo "$prog: $dir (rank $rank) can include $h, which is neither its own nor an export it may use"
			status=1
		fi
	done
done <<< "$flags"

# (3) The probe is not blind: given the socket layer's directory as well,
# the shim's paths find sock-internal.h (so without it, the "No such
# file" above is the rule at work, not a broken probe).
preload_flags=$(awk '$2 == "preload" { $1 = ""; $2 = ""; print; exit }' <<< "$flags")
printf '#include "sock-internal.h"\n' > "$tmp/probe.c"
# shellcheck disable=SC2086
if $CC -E -DHAVE_CONFIG_H -I. $preload_flags "$tmp/probe.c" -o /dev/null 2> "$tmp/err" ||
   ! grep -q "sock-internal.h: No such file" "$tmp/err"; then
	echo "$prog: preload's include paths find sock-internal.h, or the probe cannot tell"
	status=1
fi
# shellcheck disable=SC2086
if ! $CC -E -DHAVE_CONFIG_H -I. $preload_flags -I"$top/sock" ${VERBS_CFLAGS:-} "$tmp/probe.c" \
	-o /dev/null 2> "$tmp/err" && grep -q "sock-internal.h: No such file" "$tmp/err"; then
	echo "$prog: the probe does not see sock-internal.h even with -I$top/sock"
	status=1
fi

# (4) What the shim uses of core is declared twice, in core-export.h and,
# for the shim, which cannot see it, in sock-export.h, between the guard
# FERRY_CORE_SHIM_DECLS: the two copies must be the same text.
shim_decls() {
	sed -n '/^#ifndef FERRY_CORE_SHIM_DECLS$/,/^#endif \/\* FERRY_CORE_SHIM_DECLS \*\/$/p' "$1"
}
core_decls=$(shim_decls "$top/core/export/core-export.h")
sock_decls=$(shim_decls "$top/sock/export/sock-export.h")
if [ -z "$core_decls" ] || [ "$core_decls" != "$sock_decls" ]; then
	echo "$prog: the FERRY_CORE_SHIM_DECLS blocks of core-export.h and sock-export.h differ:"
	diff <(echo "$core_decls") <(echo "$sock_decls") | head -20
	status=1
fi
[ $status = 0 ] && echo "$prog: $checked includes tried, none found outside what the layers allow"
exit $status
