#!/usr/bin/env bash
# Separate debug files: a stripped host (debuginfo_host.c: its C functions lpdbg_spin_in_c
# and lpdbg_alloc_in_c are in no symbol table of its own) whose .symtab is in a debug file
# made by `objcopy --only-keep-debug`, as Debian's -dbgsym packages ship them. The agent
# names those functions from the debug file, found
#  buildid   by the host's build ID, DIR/.build-id/NN/REST.debug, DIR = LUAPROF_DEBUG_DIR:
#            in a CPU profile (C mode), a sampled and an exact memory profile;
#  link      by its .gnu_debuglink (a host built without a build ID: the CRC is checked),
#            in the host's .debug subdirectory, and under DIR followed by the host's
#            directory;
#  module    a stripped C module (lpdbgmod.so, the same source) by its .gnu_debuglink in
#            its .debug subdirectory: lpdbg_mod_spin in the CPU profile;
# and not from another build's debug file put where this one's would be (build ID or CRC
# differ): none of either build's names appears. Before, the functions had no name but
# their Lua one (spin, alloc) or host+0xOFFSET. Then, where Debian's libc6-dbg is installed,
# libc's static __libc_start_call_main (not in libc's dynamic symbols) is named in the
# default directory, /usr/lib/debug. Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof luaprof.so
luajit_dev "$t/apt.log" || skip "$why"
have objcopy && have strip && have nm && have readelf || skip "needs binutils (objcopy, strip, nm, readelf)"

src=tests/integration/debuginfo_host.c
flags="-O2 -I$inc -lluajit-5.1"
# build OUT ID ARGS...: the host built with build ID ID (sha1 or none), its debug file
# split into OUT.debug, the host stripped of every symbol. The module (-DMODULE in ARGS)
# has no embedding of its own (test_host.c).
build() {
	local out=$1 id=$2 host=tests/integration/test_host.c
	shift 2
	case " $* " in *" -DMODULE "*) host= ;; esac
	cc_test "$out" $src $host $flags -Wl,--build-id="$id" "$@" || return 1
	objcopy --only-keep-debug "$out" "$out.debug" && strip --strip-all "$out" ||
		{ echo "FAIL: cannot split $out's debug file"; return 1; }
	if nm "$out" 2>/dev/null | grep -q lpdbg_ || nm -D "$out" | grep -q lpdbg_; then
		echo "FAIL: $out still names lpdbg_ functions"
		return 1
	fi
}
mkdir -p "$t/id" "$t/link/.debug" "$t/glob" "$t/badid" "$t/badlink/.debug" "$t/empty"
build "$t/id/host" sha1 || exit 1
build "$t/other" sha1 -DOTHER || exit 1
build "$t/link/host" none || exit 1
build "$t/other-none" none -DOTHER || exit 1
mkdir -p "$t/mod/.debug"
build "$t/mod/lpdbgmod.so" sha1 -DMODULE -fPIC -shared || exit 1
objcopy --add-gnu-debuglink="$t/mod/lpdbgmod.so.debug" "$t/mod/lpdbgmod.so" &&
	mv "$t/mod/lpdbgmod.so.debug" "$t/mod/.debug/" || exit 1
id=$(readelf -n "$t/id/host" | awk '/Build ID:/ { print $3 }')
[ ${#id} = 40 ] || { echo "FAIL: no build ID in the host ('$id')"; exit 1; }

# buildid: the debug file under the build ID's path, and another build's at the same path.
mkdir -p "$t/dbg/.build-id/${id:0:2}" "$t/badid/.build-id/${id:0:2}"
cp "$t/id/host.debug" "$t/dbg/.build-id/${id:0:2}/${id:2}.debug"
cp "$t/other.debug" "$t/badid/.build-id/${id:0:2}/${id:2}.debug"
# link: the same host in three directories, its debug file in .debug, under the global
# directory (DIR + the host's directory), and another build's in .debug (CRC differs).
objcopy --add-gnu-debuglink="$t/link/host.debug" "$t/link/host" || exit 1
# (The host's directory as the agent resolves it: $TMPDIR may be a link.)
rt=$(realpath "$t")
mkdir -p "$t/glob/dir" "$t/gdbg$rt/glob/dir"
cp "$t/link/host" "$t/glob/dir/host"
cp "$t/link/host" "$t/badlink/host"
mv "$t/link/host.debug" "$t/link/.debug/host.debug"
cp "$t/link/.debug/host.debug" "$t/gdbg$rt/glob/dir/host.debug"
cp "$t/other-none.debug" "$t/badlink/.debug/host.debug"

cat >"$t/s.lua" <<'EOF'
local cpu, mem, exact, mod = ...
package.cpath = "build/?.so;" .. (mod and mod .. "/?.so;" or "") .. package.cpath
local luaprof = require("luaprof")
if mod then
	local m = require("lpdbgmod")
	assert(luaprof.sysprof.start{mode = "C", interval = 1, path = cpu})
	local t0 = os.clock()
	while os.clock() - t0 < 0.3 do m.spin(1e5) end
	assert(luaprof.sysprof.stop())
	return
end
assert(luaprof.sysprof.start{mode = "C", interval = 1, path = cpu})
local t0 = os.clock()
while os.clock() - t0 < 0.3 do spin(1e5) end
assert(luaprof.sysprof.stop())
assert(luaprof.memprof.start(mem, { sample = 4096 }))
for _ = 1, 100 do alloc(100) end
assert(luaprof.memprof.stop())
assert(luaprof.memprof.start(exact))
alloc(10)
assert(luaprof.memprof.stop())
EOF

# run CASE HOST DIR WANT: runs HOST with LUAPROF_DEBUG_DIR=DIR (unset when DIR is -); WANT 1:
# each profile names the host's function, 0: no profile names a function of either build.
run() {
	local c=$1 host=$2 dir=$3 want=$4 p fn got was=$fails
	local env=(LUAPROF_DEBUG_DIR="$dir")
	[ "$dir" = - ] && env=(-u LUAPROF_DEBUG_DIR)
	env "${env[@]}" LUA_CPATH='' "$host" "$t/s.lua" "$t/$c.cpu" "$t/$c.mem" "$t/$c.exact" \
		>"$t/$c.log" 2>&1 || { fail "$c: the host failed: $(head -5 "$t/$c.log")"; return 1; }
	for p in cpu mem exact; do
		if [ $p = exact ]; then
			build/luaprof report "$t/$c.$p" >"$t/$c.$p.txt" 2>"$t/err"
		else
			build/luaprof report -q "$t/$c.$p" -f collapsed -o "$t/$c.$p.txt" 2>"$t/err"
		fi || { fail "$c $p: report: $(head -3 "$t/err")"; continue; }
		fn=lpdbg_alloc_in_c
		[ $p = cpu ] && fn=lpdbg_spin_in_c
		got=$(grep -c "$fn" "$t/$c.$p.txt")
		if [ "$want" = 1 ] && [ "$got" = 0 ]; then
			fail "$c $p: $fn not named; the heaviest stacks:
$(sort -t' ' -k2 -nr "$t/$c.$p.txt" | head -2)"
		elif [ "$want" = 0 ] && grep -q lpdbg_ "$t/$c.$p.txt"; then
			fail "$c $p: named from a debug file that is not the host's:
$(grep lpdbg_ "$t/$c.$p.txt" | head -2)"
		fi
	done
	[ "${DEBUGINFO_VERBOSE:-0}" = 1 ] && head -3 "$t/$c.cpu.txt"
	[ $fails = "$was" ] && echo "ok $c"
	return 0
}

run nodebug "$t/id/host" "$t/empty" 0
run buildid "$t/id/host" "$t/dbg" 1
run buildid-other "$t/id/host" "$t/badid" 0
run link-subdir "$t/link/host" "$t/empty" 1
run link-global "$t/glob/dir/host" "$t/gdbg" 1
run link-other "$t/badlink/host" "$t/empty" 0

# module: CPU only.
LUAPROF_DEBUG_DIR=$t/empty LUA_CPATH='' "$t/id/host" "$t/s.lua" "$t/mod.cpu" - - "$t/mod" \
	>"$t/mod.log" 2>&1 || fail "module: the host failed: $(head -5 "$t/mod.log")"
if build/luaprof report -q "$t/mod.cpu" -f collapsed -o "$t/mod.txt" 2>"$t/err"; then
	grep -q ';lpdbg_mod_spin ' "$t/mod.txt" && echo "ok module" ||
		fail "module: lpdbg_mod_spin not named; the heaviest stacks:
$(sort -t' ' -k2 -nr "$t/mod.txt" | head -2)"
else
	fail "module: report: $(head -3 "$t/err")"
fi

# Debian's libc6-dbg: libc's own debug file by its build ID, in the default directory.
libc=$(ldd "$t/id/host" | awk '/libc\.so\.6/ { print $3 }')
lid=$(readelf -n "$libc" 2>/dev/null | awk '/Build ID:/ { print $3 }')
if [ -n "$lid" ] && [ -f "/usr/lib/debug/.build-id/${lid:0:2}/${lid:2}.debug" ] &&
	! nm -D "$libc" | grep -q ' __libc_start_call_main$' &&
	nm "/usr/lib/debug/.build-id/${lid:0:2}/${lid:2}.debug" | grep -q ' __libc_start_call_main$'
then
	run default-dir "$t/id/host" - 0
	grep -q ';__libc_start_call_main;' "$t/default-dir.cpu.txt" && echo "ok libc" ||
		fail "libc: __libc_start_call_main not named from /usr/lib/debug:
$(sort -t' ' -k2 -nr "$t/default-dir.cpu.txt" | head -2)"
else
	echo "no libc debug file with __libc_start_call_main (libc6-dbg): libc not checked"
fi
[ $fails = 0 ] || exit 1
echo "ok"
