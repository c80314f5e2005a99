#!/usr/bin/env bash
# The JIT compiler's samples in C-mode CPU profiles: jit_compiler.lua compiles thousands of
# traces (RECORD, OPT and ASM most of the time) from one marked line, profiled by `luaprof
# record` at 1 kHz under Debian's luajit and OpenResty's luajit2. ljp v2 gives those
# samples a host stack only; the agent sends their Lua frames on the side (jsample), and
# the report shows each under the Lua code being compiled with its state on top.
#
# Checked per runner, on `luaprof report -f collapsed` of the raw stream: at least 30
# samples end in RECORD, OPT or ASM; at least 80 % of them have the stack
#   ...;@jit_compiler.lua:<call line>;=genN:1;<compiler's C frames>;STATE
# (the Lua frames in one run ending in the call line and the chunk, the compiler's frames
# on top of them, not the Lua frames spliced inside the compiler's); every one of them that
# has Lua frames has them in one run below the compiler's, or right under RECORD when the
# interpreter runs the bytecode being recorded (at most 2 RECORD samples with no Lua
# frame); (a sample now and then compiles
# the workload's other loops: the calling loop, or the loading loop stitched at `load`);
# and each of the three states is seen with its Lua frames.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh
src=tests/integration/jit_compiler.lua

need_x86_64
need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"
luajit2_fetch "$t/dl.log"

declare -A at
read_markers $src
call="@$PWD/$src:${at[call]}"

# classify FOLDED: "STATE<TAB>VERDICT<TAB>COUNT<TAB>STACK" per compiler stack, VERDICT being
# good (the expected shape), other (another loop of the workload being compiled, rightly
# shaped), host (no Lua frame) or bad (Lua frames out of place).
classify() {
	awk -v call="$call" '{
		n = $NF; stack = substr($0, 1, length($0) - length($NF) - 1)
		k = split(stack, f, ";")
		if (f[k] !~ /^(RECORD|OPT|ASM)$/) next
		first = 0; last = 0; chunk = 0; lua = 0
		for (i = 1; i < k; i++) {
			if (f[i] !~ /^[@=]/) continue
			lua++; last = i
			if (!first) first = i
			if (f[i] ~ /^=gen[0-9]:1$/ && !chunk) chunk = i
		}
		# good: the Lua frames in one run, ending in the call line and the chunk, with
		# the compiler frames after them
		# (RECORD right on the Lua frames: the interpreter running the bytecode being
		# recorded, no compiler frame above it)
		if (!lua) v = "host"
		else if (chunk && chunk == last && f[chunk - 1] == call && lua == last - first + 1 &&
			 (k > chunk + 1 || f[k] == "RECORD")) v = "good"
		# other: another loop of the workload compiled (the calling loop itself, or the
		# loop that loads the chunks, stitched at load), its Lua frames in one run with
		# the compiler frames after them
		else if (lua == last - first + 1 && (k > last + 1 || f[k] == "RECORD")) v = "other"
		else v = "bad"
		print f[k] "\t" v "\t" n "\t" stack
	}' "$1"
}

# run RUNNER LUAJIT: profiles the workload and checks its compiler samples.
run() {
	local runner=$1 lj=$2 dir="$t/$1" total good bad st
	mkdir -p "$dir"
	if ! (cd "$dir" && "$OLDPWD/build/luaprof" record --rate 1000 -o out.folded \
		-- "$lj" "$OLDPWD/$src") >"$dir/out" 2>"$dir/err"; then
		fail "$runner: luaprof record failed: $(tail -3 "$dir/err")"
		return
	fi
	build/luaprof report -q -f collapsed "$dir/out.bin" >"$dir/report.folded" 2>"$dir/rerr" ||
		{ fail "$runner: luaprof report failed: $(head -3 "$dir/rerr")"; return; }
	classify "$dir/report.folded" >"$dir/cls"
	total=$(awk -F'\t' '{ n += $3 } END { print n + 0 }' "$dir/cls")
	good=$(awk -F'\t' '$2 == "good" { n += $3 } END { print n + 0 }' "$dir/cls")
	bad=$(awk -F'\t' '$2 == "bad" { n += $3 } END { print n + 0 }' "$dir/cls")
	[ -z "${JIT_COMPILER_VERBOSE:-}" ] || { echo "--- $runner"; cut -f1-3 "$dir/cls" | sort | uniq -c; }
	if [ "$total" -lt 30 ]; then
		fail "$runner: only $total samples in the JIT compiler (want 30 or more)"
		return
	fi
	[ $((good * 100)) -ge $((total * 80)) ] ||
		fail "$runner: $good of $total compiler samples under $call;=genN:1 (want 80 %): $(grep -v '	good	' "$dir/cls" | head -3)"
	# The interpreter running the bytecode being recorded (state RECORD outside the
	# compiler's call) has its Lua frames too: host-only RECORD samples are rare slips.
	st=$(awk -F'\t' '$1 == "RECORD" && $2 == "host" { n += $3 } END { print n + 0 }' "$dir/cls")
	[ "$st" -le 2 ] || fail "$runner: $st RECORD samples with no Lua frame: $(
		awk -F'\t' '$1 == "RECORD" && $2 == "host" { print $4 }' "$dir/cls" | head -2)"
	[ "$bad" = 0 ] || fail "$runner: $bad compiler samples with Lua frames out of place: $(
		awk -F'\t' '$2 == "bad" { print $4 }' "$dir/cls" | head -2)"
	for st in RECORD OPT ASM; do
		grep -q "^$st	good	" "$dir/cls" || fail "$runner: no $st sample under the line being compiled"
	done
	echo "ok $runner: $good of $total compiler samples under the line being compiled"
}

# Trace exits (state EXIT): a loop whose guard fails every third iteration, with side
# traces kept from forming (-Ohotexit), exits most of the time. Its EXIT samples taken in
# lj_trace_exit and the restore it runs have the Lua frames the exit returns to (the
# caller's line, then the guard's line where the interpreter resumes) right under the
# exit's C frames and EXIT; the others (the handler's assembler code) have none. exits2.lua
# exits from a function inlined into itself (a recursion the trace unrolled): the exit
# returns to the inner call (line 10) under the outer one at its call (line 5), never the
# outer one at the inner one's line (a review helper's find, 319 samples of 331 so).
# Checked: at least 100 EXIT samples, at least a third with Lua frames, each of those
# exactly so.
cat >"$t/exits.lua" <<'EOF'
local function work(n)
  local s = 0
  for i = 1, n do
    if i % 3 == 0 then s = s + 1 else s = s - 1 end
  end
  return s
end
local t0, r = os.clock(), 0
while os.clock() - t0 < 1 do r = r + work(10000) end
print(r)
EOF
cat >"$t/exits2.lua" <<'EOF'
local function f(d, i)
  if d > 0 then
    local s = 0
    for j = 1, i do
      s = s + f(d - 1, j)
    end
    return s
  end
  if i % 3 == 0 then return 1 end
  return 2
end
print(f(1, 2e7))
EOF
# exits RUNNER LUAJIT PROGRAM LINES: LINES, the Lua frames' lines of an EXIT sample.
exits() {
	local runner=$1 lj=$2 prog=$3 want=$4 dir="$t/$1" n lua good
	mkdir -p "$dir"
	build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$dir/exits.folded" \
		-- "$lj" -Ohotexit=65000 "$t/$prog" >/dev/null 2>"$dir/exits.err" ||
		{ fail "$runner: record of $prog: $(tail -3 "$dir/exits.err")"; return; }
	# Every EXIT sample, paired or not: the roots of --split.
	build/luaprof report -q --split -f collapsed "$dir/exits.bin" >"$dir/exits.split" 2>>"$dir/exits.err" ||
		{ fail "$runner: report --split of exits.bin: $(tail -3 "$dir/exits.err")"; return; }
	n=$(awk '/^EXIT;/ { n += $NF } END { print n + 0 }' "$dir/exits.split")
	lua=$(awk '$0 ~ /;EXIT [0-9]+$/ && /@/ { n += $NF } END { print n + 0 }' "$dir/exits.folded")
	good=$(awk -v f="@$t/$prog" -v want="$want" '$0 ~ /;EXIT [0-9]+$/ && /@/ {
		k = split($1, a, ";"); s = ""; last = 0; run = 1
		for (i = 1; i <= k; i++) if (a[i] ~ /^@/) {
			if (last && i != last + 1) run = 0
			last = i; l = a[i]; sub(/^.*:/, "", l); s = s (s == "" ? "" : " ") l
			if (substr(a[i], 1, length(f) + 1) != f ":") run = 0
		}
		if (run && s == want) n += $NF
	} END { print n + 0 }' "$dir/exits.folded")
	[ -z "${JIT_COMPILER_VERBOSE:-}" ] || echo "--- $runner $prog: $n EXIT samples, $lua with Lua frames, $good as expected"
	[ "$n" -ge 100 ] || { fail "$runner: only $n EXIT samples of $prog (want 100)"; return; }
	[ $((lua * 3)) -ge "$n" ] || fail "$runner: $lua of $n EXIT samples of $prog with Lua frames (want a third)"
	[ "$good" = "$lua" ] || fail "$runner: $((lua - good)) EXIT samples of $prog with Lua frames other than lines $want: $(
		awk '$0 ~ /;EXIT [0-9]+$/ && /@/' "$dir/exits.folded" | sed 's/^.*lua_pcall;//' | head -2)"
	echo "ok $runner: $lua of $n EXIT samples of $prog with the frames the exit returns to"
}

run luajit luajit
exits luajit luajit exits.lua "9 4"
exits luajit luajit exits2.lua "12 5 10"
if [ -n "${lj2:-}" ] && [ -x "$lj2" ]; then
	run luajit2 "$PWD/$lj2"
	exits luajit2 "$PWD/$lj2" exits.lua "9 4"
	exits luajit2 "$PWD/$lj2" exits2.lua "12 5 10"
else
	echo "note: luajit2 not checked (apt-get download luajit2 libluajit2-5.1-2 failed: $(tail -n 1 "$t/dl.log" 2>/dev/null))"
fi
[ $fails = 0 ] || exit 1
echo ok
