#!/bin/sh
# Integration test: the LuaJIT VM model (src/vm/) against the real Debian LuaJIT libraries.
#
# For each supported build - Debian `luajit` (libluajit-5.1-2) and Debian/OpenResty `luajit2`
# (libluajit2-5.1-2) - fetches the library and -dev packages with `apt-get download` (the two
# conflict as installed packages, so both are extracted with `dpkg-deb -x` under
# build/vm_live/, reused on later runs), compiles tests/integration/vm_live.c + src/vm/*.c
# against that build's headers and runs it with LD_LIBRARY_PATH on that build's library.
# vm_live walks live stacks with the model and compares them with LuaJIT's own
# lua_getstack/luaL_traceback (see vm_live.c). Exit 0 pass, 1 fail, 2 skip (with a reason;
# also when only one of the two builds could be obtained and it passed).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init

cache=build/vm_live

need_x86_64
for tool in apt-get dpkg-deb "${CC:-cc}"; do
	have "$tool" || skip "no $tool"
done
mkdir -p "$cache" || exit 1

# fetch BUILD LIBPKG DEVPKG: leaves the extracted packages in $cache/BUILD, or returns 1.
fetch() {
	build=$1
	root=$cache/$build
	if [ -f "$root/.done" ]; then
		return 0
	fi
	rm -rf "$root" "$cache/$build.debs"
	mkdir -p "$root" "$cache/$build.debs" || return 1
	if ! (cd "$cache/$build.debs" && apt-get download "$2" "$3") >"$t/apt.log" 2>&1; then
		# Stale package lists: refresh once (needs root), then retry.
		if [ "$(id -u)" = 0 ]; then
			apt-get update >>"$t/apt.log" 2>&1
			(cd "$cache/$build.debs" && apt-get download "$2" "$3") >>"$t/apt.log" 2>&1 ||
				return 1
		else
			return 1
		fi
	fi
	for deb in "$cache/$build.debs"/*.deb; do
		dpkg-deb -x "$deb" "$root" || return 1
		echo "vm_live: $build: $(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)" \
			>>"$root/.versions"
	done
	touch "$root/.done"
}

# run BUILD: compiles and runs vm_live against $cache/BUILD. Returns vm_live's status.
run() {
	build=$1
	root=$cache/$build
	lib=$root/usr/lib/x86_64-linux-gnu
	inc=$root/usr/include/luajit-2.1
	if [ ! -f "$inc/lua.h" ] || [ ! -f "$lib/libluajit-5.1.so.2" ]; then
		echo "vm_live: $build: extracted packages lack lua.h or libluajit-5.1.so.2" >&2
		return 1
	fi
	cat "$root/.versions"
	if ! ${CC:-cc} -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
		-Wmissing-prototypes -Wno-unused-parameter -O2 -g -Iinclude -Isrc -D_GNU_SOURCE \
		-I"$inc" tests/integration/vm_live.c src/vm/*.c "$lib/libluajit-5.1.so.2" \
		-o "$t/vm_live_$build" 2>"$t/cc.log"; then
		cat "$t/cc.log" >&2
		echo "vm_live: $build: cannot compile tests/integration/vm_live.c" >&2
		return 1
	fi
	LD_LIBRARY_PATH=$lib "$t/vm_live_$build" "$build"
}

failed=0
missing=""
for spec in "luajit libluajit-5.1-2 libluajit-5.1-dev" \
	"luajit2 libluajit2-5.1-2 libluajit2-5.1-dev"; do
	set -- $spec
	if ! fetch "$@"; then
		echo "vm_live: $1: cannot fetch $2 $3: $(tail -n 1 "$t/apt.log")" >&2
		missing="$missing $1"
		continue
	fi
	run "$1" || failed=1
done

if [ "$failed" != 0 ]; then
	echo "FAIL vm_live"
	exit 1
fi
if [ -n "$missing" ]; then
	skip "packages unavailable for:$missing (apt-get download failed)"
fi
echo "PASS vm_live"
exit 0
