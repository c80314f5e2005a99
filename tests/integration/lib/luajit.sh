# LuaJIT builds and markers for the integration scripts (sourced, not run: tests/run.sh only
# runs tests/integration/*.sh; see common.sh for the preamble). Call from the repository root.

# debs_extract CACHE LOGFILE PACKAGE...: downloads the packages' .debs and extracts them
# into CACHE/root, once (CACHE/.done marks it); returns 1 when that did not happen (no
# apt-get or dpkg-deb, or the download failed: see LOGFILE).
debs_extract() {
	local cache=$1 log=$2 deb
	shift 2
	if [ ! -f "$cache/.done" ] && command -v apt-get >/dev/null 2>&1 &&
		command -v dpkg-deb >/dev/null 2>&1; then
		rm -rf "$cache" && mkdir -p "$cache/debs"
		if (cd "$cache/debs" && apt-get download "$@") >"$log" 2>&1; then
			for deb in "$cache"/debs/*.deb; do dpkg-deb -x "$deb" "$cache/root" || break; done &&
				touch "$cache/.done"
		fi
	fi
	[ -f "$cache/.done" ]
}

# luajit2_fetch LOGFILE: OpenResty's luajit2 conflicts with Debian's luajit as a package, so
# its .debs are downloaded and extracted once into build/luajit2. Sets lj2 (the interpreter,
# VM linked in) and lj2lib (the directory of libluajit-5.1.so from luajit2); returns 1 when
# they cannot be had (no apt-get or dpkg-deb, or the download failed: see LOGFILE).
luajit2_fetch() {
	local cache=build/luajit2
	lj2=$cache/root/usr/bin/luajit
	lj2lib=$cache/root/usr/lib/x86_64-linux-gnu
	debs_extract $cache "$1" luajit2 libluajit2-5.1-2 && [ -x "$lj2" ]
}

# both_builds LOGFILE: the two builds a CPU script checks alike: Debian's luajit (the script
# is skipped without it) and OpenResty's luajit2 when luajit2_fetch can have it (LOGFILE:
# its download's output). on_both_builds runs a check on each.
both_builds() {
	have luajit || skip "no luajit"
	luajit2_fetch "$1"
}

# on_both_builds FUNC NAME ARGS...: FUNC NAME ARGS... luajit, then, when both_builds got
# luajit2, FUNC NAME2 ARGS... LJ2 LJ2LIB (absolute paths: FUNC may run it from another
# directory with LD_LIBRARY_PATH=LJ2LIB). FUNC takes the interpreter and the directory of
# its library last, NAME (its profiles' name) first.
on_both_builds() {
	local fn=$1 v=$2
	shift 2
	"$fn" "$v" "$@" luajit
	if [ -n "${lj2:-}" ] && [ -x "$lj2" ]; then
		"$fn" "${v}2" "$@" "$PWD/$lj2" "$PWD/$lj2lib"
	fi
}

# nginx_fetch LOGFILE: Debian's nginx with its Lua module. The module's lua-resty-core needs
# OpenResty's luajit2, which conflicts with Debian's luajit as a package: the .debs are
# downloaded and extracted once into build/nginx-lua, like luajit2's (run the binary with
# LD_LIBRARY_PATH=$lj2lib). Sets ngx (the binary), ngxmod (the modules' directory) and
# ngxlua (lua-resty-core's Lua directory); returns 1 when they cannot be had.
nginx_fetch() {
	local cache=build/nginx-lua
	ngx=$PWD/$cache/root/usr/sbin/nginx
	ngxmod=$PWD/$cache/root/usr/lib/nginx/modules
	ngxlua=$PWD/$cache/root/usr/share/lua/5.1
	debs_extract $cache "$1" nginx libnginx-mod-http-ndk libnginx-mod-http-lua \
		lua-resty-core lua-resty-lrucache && [ -x "$ngx" ] &&
		[ -f "$ngxmod/ngx_http_lua_module.so" ]
}

# read_markers FILE: fills the associative array `at` (declare -A at first) with the line
# of every "--@name" marker at the end of a line of FILE.
read_markers() {
	local n text
	while IFS=: read -r n text; do
		at[${text##*--@}]=$n
	done < <(grep -n -- '--@[a-z_0-9]*$' "$1")
}

# luajit_install LOGFILE: Debian's luajit on the PATH, installed with apt-get when missing and
# running as root. Returns 1 when it cannot be had, with the reason in $why (the install's
# output is in LOGFILE).
luajit_install() {
	command -v luajit >/dev/null 2>&1 && return 0
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		why="luajit is not installed (apt-get install luajit, as root)"
		return 1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq luajit >"$1" 2>&1 && return 0
	why="luajit is not installed and apt-get install luajit failed: $(tail -n 1 "$1")"
	return 1
}

# luajit_dev LOGFILE: Debian's luajit and libluajit-5.1-dev (headers in $inc, the library),
# installed with apt-get when missing and running as root. Returns 1 when they cannot be
# had, with the reason in $why (the install's output is in LOGFILE).
luajit_dev() {
	inc=/usr/include/luajit-2.1
	command -v luajit >/dev/null 2>&1 && [ -f $inc/lua.h ] &&
		ls /usr/lib/*/libluajit-5.1.so >/dev/null 2>&1 && return 0
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		why="luajit / libluajit-5.1-dev not installed (apt-get install them, as root)"
		return 1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq luajit libluajit-5.1-dev \
		>"$1" 2>&1 && return 0
	why="apt-get install luajit libluajit-5.1-dev failed: $(tail -n 1 "$1")"
	return 1
}

# cc_test OUT SRC ARGS...: builds a test program or library with the project's warnings,
# ARGS after the source (-O level, -I, -shared -fPIC, libraries). On failure says so as
# "FAIL: cannot build SRC: ..." and returns 1.
cc_test() {
	local out=$1 src=$2
	shift 2
	${CC:-cc} -std=c11 -Wall -Wextra -Werror -g -o "$out" "$src" "$@" 2>"$out.cc.log" && return 0
	echo "FAIL: cannot build $(basename "$src"): $(head -20 "$out.cc.log")"
	return 1
}
