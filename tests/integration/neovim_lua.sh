#!/usr/bin/env bash
# A real host with an event loop: Debian's neovim (nvim --headless), on Debian's
# libluajit-5.1.so. The chunk (neovim/profile.lua) profiles CPU (C mode) and memory
# (sampled) while vim.wait, a C function, runs libuv's loop, which calls a timer callback
# through lua_pcall: the callback's Lua frames sit under uv_run, under the outer chunk's
# vim.wait line. Checks: nvim exits 0 and both profiles are complete with enough samples;
# every stack starts at _start; every stack on the callback's line has, in order, the
# outer chunk's vim.wait line, uv_run and the callback's call line before it (99.5 %:
# see below).
# Found: memory samples counted the interpreter leaf and the lua_pcall outside it as two
# entries, and the vim.wait line went under the inner lua_pcall (all of the callback's
# bytes). Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_build luaprof luaprof.so
have nvim || skip "neovim is not installed (scripts/setup.sh --test)"
src=$PWD/tests/integration/neovim/profile.lua
declare -A at
read_markers "$src"

OUT=$t LUAPROF_CPATH="$PWD/build/?.so" timeout 120 nvim --headless -u NONE -i NONE \
	-c "luafile $src" -c "qa!" >"$t/out" 2>&1
rc=$?
grep -Eq '^done ([6-9][0-9]|[1-9][0-9]{2,})$' "$t/out" && [ $rc = 0 ] || { echo "FAIL: nvim exited $rc: $(tail -n 5 "$t/out")"; exit 1; }

# check WHAT FILE MIN: totals of the collapsed profile of FILE, which must hold at least MIN
check() {
	local what=$1 f=$2 min=$3
	build/luaprof report -q -f info "$f" 2>/dev/null | grep -qx "complete: yes" ||
		{ fail "$what: not a complete profile"; return; }
	build/luaprof report -q -f collapsed -o "$t/$what.folded" "$f" ||
		{ fail "$what: report failed"; return; }
	read -r tot root cb good < <(awk -v cb="@$src:${at[cb]}" -v wait="@$src:${at[wait]};" \
		-v call="@$src:${at[call_cb]};" '{
			v = $NF; tot += v
			if ($0 ~ /^_start;/) root += v
			i = index($0, cb ";"); if (!i) i = index($0, cb " ")
			if (!i) next
			n += v; pre = substr($0, 1, i)
			w = index(pre, wait); u = index(pre, ";uv_run;"); c = index(pre, call)
			if (w && u > w && c > u) good += v
			else print > bad
		} END { printf "%d %d %d %d\n", tot, root, n, good }' bad="$t/$what.bad" "$t/$what.folded")
	# 2 % or one not: a rare CPU sample's walk stops at its first frame (nginx_lua.sh).
	[ $((tot - root)) -le $((tot / 50 > 1 ? tot / 50 : 1)) ] || fail "$what: $((tot - root)) of $tot not rooted at _start:
$(grep -v '^_start;' "$t/$what.folded" | head -n 3 | cut -c1-300)"
	[ "$cb" -ge "$min" ] || fail "$what: $cb on the callback's line ${at[cb]}, want at least $min"
	# All but a rare allocation made in a VM entry nested under the callback's interpreter
	# frame without Lua frames of its own (VM C code, ~0.1 % of the bytes), which the
	# merge still places one C entry off.
	[ $((good * 1000)) -ge $((cb * 995)) ] || fail "$what: $((cb - good)) of $cb on the callback's line lack vim.wait's line, uv_run and the call, in that order:
$(head -n 2 "$t/$what.bad" | cut -c1-500)"
	echo "ok $what: $tot in all, $root rooted at _start; $cb on the callback's line, $good of them under vim.wait's line, uv_run and the call"
}
check cpu "$t/cpu.bin" 10
check memory "$t/mem.bin" 1000000

[ $fails -eq 0 ] || exit 1
echo "PASS $name"
