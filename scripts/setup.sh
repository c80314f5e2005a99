#!/usr/bin/env bash
# Installs the Debian packages luaprof needs, only those missing, and builds it.
#
#   scripts/setup.sh          build dependencies, then `make`
#   scripts/setup.sh --test   also what the test suite uses (clang's libFuzzer,
#                             golang-go for `go tool pprof`, chromium, python3,
#                             sysbench, wrk, neovim, tarantool, lua5.1, lua5.4, rpm
#                             (PUC Lua 5.4 and 5.3, refused), lua-cjson, dnsjit,
#                             minetest-server, and curl and
#                             the libraries an extracted nginx loads)
set -euo pipefail
cd "$(dirname "$0")/.."

build_pkgs=(make gcc libc6-dev protobuf-c-compiler libprotobuf-c-dev zlib1g-dev libiberty-dev
	libluajit-5.1-dev libunwind-dev luajit)
test_pkgs=(clang libclang-rt-14-dev golang-go chromium python3 gdb strace
	curl libpcre3 libpcre2-8-0 libssl3 sysbench wrk neovim tarantool lua5.1 lua5.4 rpm
	lua-cjson dnsjit minetest-server)

updated=0
install_missing() {
	local missing=() p sudo=""
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	[ "$(id -u)" -ne 0 ] && sudo="sudo"
	echo "setup: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	if [ $updated = 0 ]; then
		$sudo apt-get update -qq >/dev/null
		updated=1
	fi
	$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_missing "${build_pkgs[@]}"
# After the build's: sysbench then takes Debian's libluajit-5.1-2, already installed, for
# its LuaJIT rather than OpenResty's luajit2 (its first choice), which would replace luajit
# (neovim takes it anyway: it lists Debian's first).
[ "${1:-}" = "--test" ] && install_missing "${test_pkgs[@]}"
make -s -j"$(nproc)"
