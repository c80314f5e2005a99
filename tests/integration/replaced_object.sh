#!/usr/bin/env bash
# C functions of objects replaced on disk while loaded (a package upgraded under a running
# service), named by the exact-mode memory profiler on Debian's luajit. The profilers read
# each object's symbols from its file: another build there would name the loaded code
# after functions it does not have. replaced_object.c builds the objects:
#  kept      the module loaded and left alone: its exported alloc and its static hidden
#            are named from the file (.symtab), 10 events each;
#  replaced  the module's file replaced by another build (other_alloc where alloc is, and
#            hidden inside it) after require, before start: alloc is named from the dynamic
#            symbol table in memory, hidden by its Lua name, replaced_mod.hidden (given
#            to the stand-in replaced_mod.so+0xOFFSET the unwind table has at its entry
#            in the loaded build: none at that address, no Lua name); none of the other
#            build's names appears;
#  host      a host program whose executable is replaced by another build before it
#            starts the profiler: its static host_alloc is named (the running file, read
#            through /proc/self/exe), the other build's host_other is not;
#  loader    luajit run through the dynamic loader (`ld.so luajit script`), whose running
#            file is then the loader: a CPU profile (luaprof record) names luajit's own
#            code luajit+0xOFFSET under main, not after the loader (ld-linux...+0x).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"

src=tests/integration/replaced_object.c
flags="-O2 -fno-toplevel-reorder -I$inc"
mkdir -p "$t/m"
cc_test "$t/m/replaced_mod.so" $src $flags -fPIC -shared -DMODULE || exit 1
cc_test "$t/mod-kept.so" $src $flags -fPIC -shared -DMODULE || exit 1
cc_test "$t/mod-other.so" $src $flags -fPIC -shared -DMODULE -DVARIANT || exit 1
host=tests/integration/test_host.c # the embedding, after $src: the host's functions first
cc_test "$t/host" $src $host $flags -lluajit-5.1 || exit 1
cc_test "$t/host-other" $src $host $flags -lluajit-5.1 -DVARIANT || exit 1

# The other build has its own functions where the loaded build's are (the first one at
# the same address), and the loaded build's static function is at OFFSET in its file.
sym() { nm "$1" | awk -v n="$2" '$3 == n { print $1 }'; }
first=$(sym "$t/m/replaced_mod.so" alloc)
other=$(sym "$t/mod-other.so" other_alloc)
[ -n "$first" ] && [ "$first" = "$other" ] ||
	{ echo "FAIL: the builds do not overlap (alloc at '$first', other_alloc at '$other')"; exit 1; }
hidden=$(sym "$t/m/replaced_mod.so" hidden)
off=$(printf '0x%x' $((16#$hidden)))

# events REPORT LABEL_ERE: the ALLOCATIONS section's event count for the one label matching.
events() {
	awk -v re="^($2)$" '/^ALLOCATIONS/ { s = 1; next } /^$/ { s = 0 }
		s { split($0, a, ": "); if (a[1] ~ re) { split(a[2], b, " "); n += b[1] } }
		END { print n + 0 }' "$1"
}

# module CASE RENAME: runs the module's two functions under the profiler, the file
# replaced first when RENAME is 1; the report in $t/CASE.txt.
module() {
	cat >"$t/$1.lua" <<LUA
package.cpath = "build/?.so;$t/m/?.so;" .. package.cpath
local m = require "replaced_mod"
if $2 == 1 then assert(os.rename("$t/mod-other.so", "$t/m/replaced_mod.so")) end
local mp = require("luaprof").memprof
assert(mp.start("$t/$1.bin"))
for _ = 1, 10 do m.alloc() m.hidden() end
assert(mp.stop())
LUA
	luajit "$t/$1.lua" >"$t/$1.out" 2>&1 || { fail "$1: luajit: $(head -5 "$t/$1.out")"; return 1; }
	build/luaprof report "$t/$1.bin" >"$t/$1.txt" 2>"$t/$1.err" ||
		{ fail "$1: report: $(head -5 "$t/$1.err")"; return 1; }
	[ "${REPLACED_VERBOSE:-0}" = 1 ] && cat "$t/$1.txt"
	return 0
}

if module kept 0; then
	n=$(events "$t/kept.txt" "alloc:0x[0-9a-f]+")
	[ "$n" = 10 ] || fail "kept: alloc has $n events, want 10"
	n=$(events "$t/kept.txt" "hidden:0x[0-9a-f]+")
	[ "$n" = 10 ] || fail "kept: hidden has $n events, want 10 (named from .symtab)"
fi
if module replaced 1; then
	n=$(events "$t/replaced.txt" "alloc:0x[0-9a-f]+")
	[ "$n" = 10 ] || fail "replaced: alloc has $n events, want 10 (named from memory)"
	n=$(events "$t/replaced.txt" "replaced_mod\\.hidden:0x[0-9a-f]+")
	[ "$n" = 10 ] || fail "replaced: replaced_mod.hidden (stand-in replaced_mod.so+$off) has $n events, want 10"
	if grep -E "other_|(^|[^.])hidden" "$t/replaced.txt" >/dev/null; then
		fail "replaced: the other build's names appear: $(grep -E 'other_|(^|[^.])hidden' "$t/replaced.txt" | head -3)"
	fi
fi

cp "$t/host" "$t/host-run"
cp "$t/host-other" "$t/host-other.copy"
if "$t/host-run" "$t/host-other" "build/?.so" "$t/host.bin" >"$t/host.out" 2>&1; then
	build/luaprof report "$t/host.bin" >"$t/host.txt" 2>"$t/host.err" ||
		fail "host: report: $(head -5 "$t/host.err")"
	[ "${REPLACED_VERBOSE:-0}" = 1 ] && cat "$t/host.txt"
	n=$(events "$t/host.txt" "host_alloc:0x[0-9a-f]+")
	[ "$n" = 10 ] || fail "host: host_alloc has $n events, want 10"
	if grep -E "host_other" "$t/host.txt" >/dev/null; then
		fail "host: the other build's host_other appears"
	fi
	cmp -s "$t/host-run" "$t/host-other.copy" || fail "host: the executable was not replaced"
else
	fail "host: $(head -5 "$t/host.out")"
fi

loader=$(ls /lib64/ld-linux-x86-64.so.2 2>/dev/null)
if [ -n "$loader" ]; then
	cat >"$t/loader.lua" <<'LUA'
local t = 0
for i = 1, 2e7 do t = t + math.sin(i) * i % 7 end
print(t)
LUA
	(cd "$t" && "$OLDPWD/build/luaprof" record -q -o loader.svg -- "$loader" "$(command -v luajit)" \
		loader.lua) >"$t/loader.out" 2>&1 || fail "loader: record: $(tail -3 "$t/loader.out")"
	build/luaprof report -q -f collapsed "$t/loader.bin" >"$t/loader.folded" 2>"$t/loader.err" ||
		fail "loader: report: $(head -3 "$t/loader.err")"
	read -r all named < <(awk '/;lua_pcall;/ { t += $NF
		if ($0 ~ /;main;lua_cpcall;lj_vm_asm_begin;luajit\+0x[0-9a-f]+;luajit\+0x[0-9a-f]+;lua_pcall;/) n += $NF }
		END { print t + 0, n + 0 }' "$t/loader.folded")
	[ "$all" -gt 0 ] && [ "$named" = "$all" ] ||
		fail "loader: $named of $all samples name luajit's frames under main after luajit:
$(head -2 "$t/loader.folded" | cut -c1-200)"
fi

[ $fails -eq 0 ] || exit 1
echo "PASS $name"
