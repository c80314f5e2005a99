#!/bin/sh
# Flame graph in a real browser: headless Chromium drives zoom, search, reset and invert.
#
# Renders known profiles with fg_driver.c, loads them into iframes of a test page that
# clicks, hovers and types into the SVG's own controls, writes PASS/FAIL lines into the
# page, and reads them back with --dump-dom. Also takes screenshots for a human to look at.
#
# Exit: 0 pass, 1 fail, 2 skip (no browser). Env: FG_KEEP=1 keeps the work dir,
# FG_SHOT=path sets the screenshot path (the zoomed one gets -zoom); by default they are
# fg.png and fg-zoom.png in the work dir, removed with it (they were left in /tmp).
. "$(dirname "$0")/lib/common.sh" || exit 1
SHOT=${FG_SHOT:-}
case $SHOT in /* | '') ;; *) SHOT=$PWD/$SHOT ;; esac # relative to where the script was run
test_init
SHOT=${SHOT:-$t/fg.png}
SHOT_ZOOM=${SHOT%.png}-zoom.png
ROOT=$PWD
CC=${CC:-cc}

# fail here ends the script at once.
fail() { echo "FAIL flamegraph_browser: $*"; exit 1; }

BROWSER=
for b in /usr/bin/chromium /usr/bin/chromium-browser; do
	[ -x "$b" ] && BROWSER=$b && break
done
if [ -z "$BROWSER" ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "flamegraph_browser: installing chromium..." >&2
		apt-get install -y chromium >/dev/null 2>&1 ||
			{ apt-get update >/dev/null 2>&1 && apt-get install -y chromium >/dev/null 2>&1; } ||
			skip "chromium not installed and apt-get install chromium failed"
		[ -x /usr/bin/chromium ] || skip "apt-get installed no /usr/bin/chromium"
		BROWSER=/usr/bin/chromium
	else
		skip "no /usr/bin/chromium and cannot install it (not root or no apt-get)"
	fi
fi

WORK=$t
cleanup() {
	test_end
	[ "${FG_KEEP:-0}" = 1 ] && { echo "flamegraph_browser: kept $WORK" >&2; return; }
	rm -rf "$WORK"
}
trap cleanup EXIT

make -s -C "$ROOT" build/libluaprof.a >"$WORK/make.log" 2>&1 ||
	fail "make build/libluaprof.a failed (see: $(tail -n 3 "$WORK/make.log" | tr '\n' ' '))"
(cd "$ROOT" && $CC -std=c11 -Wall -Wextra -Werror -O2 -Iinclude -Isrc -D_GNU_SOURCE \
	-o "$WORK/fg_driver" tests/integration/fg_driver.c build/libluaprof.a \
	$(make -s print-ldlibs)) >"$WORK/cc.log" 2>&1 ||
	fail "cannot build fg_driver: $(head -n 3 "$WORK/cc.log" | tr '\n' ' ')"
"$WORK/fg_driver" demo "$WORK/demo.svg" || fail "fg_driver demo failed"
"$WORK/fg_driver" big "$WORK/big.svg" || fail "fg_driver big failed"
"$WORK/fg_driver" demo "$WORK/demo.html" || fail "fg_driver demo (HTML page) failed"

cat >"$WORK/test.html" <<'EOF'
<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>flame graph browser test</title></head>
<body>
<iframe id="f1" src="demo.svg" width="1220" height="260"></iframe>
<iframe id="f2" src="demo.svg?z=3&s=fib&inv=1" width="1220" height="260"></iframe>
<iframe id="f3" src="big.svg" width="1220" height="400"></iframe>
<iframe id="f4" src="demo.html?z=3&s=fib&inv=1" width="1220" height="260"></iframe>
<pre id="results">NOT RUN</pre>
<script>
var out = [], nfail = 0;
function ok(name, cond, detail) {
	out.push((cond ? 'PASS ' : 'FAIL ') + name + (cond ? '' : ': ' + detail));
	if (!cond) nfail++;
}
function frame(id) {
	var f = document.getElementById(id), w = f.contentWindow, d = f.contentDocument;
	if (!d || !d.getElementById('fg-frames'))
		throw new Error('cannot reach the SVG document of ' + id);
	var G = Array.prototype.slice.call(d.getElementById('fg-frames').children);
	var h = {
		w: w, d: d, G: G,
		title: function (g) { return g.children[0].textContent; },
		box: function (p) {
			for (var i = 0; i < G.length; i++)
				if (h.title(G[i]).indexOf(p) === 0) return G[i];
			throw new Error('no box ' + p);
		},
		rect: function (p) { return h.box(p).children[1]; },
		num: function (p, a) { return parseFloat(h.rect(p).getAttribute(a)); },
		shown: function (p) { return h.box(p).style.display !== 'none'; },
		nshown: function () {
			var n = 0;
			for (var i = 0; i < G.length; i++) if (G[i].style.display !== 'none') n++;
			return n;
		},
		click: function (el) { el.dispatchEvent(new w.MouseEvent('click', { bubbles: true })); },
		key: function (k, ctrl) {
			d.dispatchEvent(new w.KeyboardEvent('keydown', { key: k, ctrlKey: !!ctrl, bubbles: true }));
		},
		matched: function () { return d.getElementById('fg-matched').textContent; },
		lit: function () {
			return G.filter(function (g) { return g.children[1].getAttribute('fill') === '#e600e6'; })
				.map(function (g) { return h.title(g).split(' (')[0]; }).sort().join(',');
		},
		search: function (re, how) {
			w.prompt = function () { return re; };
			if (how === 'key') h.key('f', true); else h.click(d.getElementById('fg-search'));
		}
	};
	return h;
}
function demo() {
	var h = frame('f1'), d = h.d;
	ok('box count', h.G.length === 12, h.G.length);
	ok('one script only', d.getElementsByTagName('script').length === 1,
	   d.getElementsByTagName('script').length);
	ok('initial width', h.num('@main.lua:1', 'width') === 1003, h.num('@main.lua:1', 'width'));
	ok('nasty name is text', h.title(h.box('<script')).indexOf('<script>&"\'\uFFFD\uFFFD (5 samples, 5.00%)') === 0,
	   JSON.stringify(h.title(h.box('<script'))));
	ok('legend', d.getElementById('fg-legend').textContent.indexOf('JIT trace') >= 0, 'no JIT trace');

	h.rect('@fib.lua:3 (50').dispatchEvent(new h.w.MouseEvent('mouseover', { bubbles: true }));
	var det = d.getElementById('fg-details').textContent;
	ok('hover details', det.indexOf('@fib.lua:3 (50 samples, 50.00%)  |  Lua') === 0, det);

	h.search('fib', 'key');
	ok('ctrl-f search matched', h.matched() === 'Matched: 50.0%', h.matched());
	ok('ctrl-f search highlight', h.lit() === '@fib.lua:3,@fib.lua:3,@fib.lua:5', h.lit());
	h.search('lj_', 'button');
	ok('button search', h.matched() === 'Matched: 40.0%', h.matched());
	ok('button search highlight', h.lit() === 'lj_gc_step,lj_str_new', h.lit());
	h.search('GC', 'button');
	ok('case-sensitive', h.matched() === 'Matched: 10.0%', h.matched());
	h.click(d.getElementById('fg-ic'));
	ok('ignore case', h.matched() === 'Matched: 40.0%' && h.lit() === 'GC,lj_gc_step',
	   h.matched() + ' ' + h.lit());
	h.click(d.getElementById('fg-ic'));
	ok('case again', h.matched() === 'Matched: 10.0%', h.matched());
	h.search('(', 'button');
	ok('invalid regex', h.matched().indexOf('Invalid regex') === 0 && h.lit() === '',
	   h.matched() + ' ' + h.lit());
	h.search('fib', 'key');
	h.key('Escape');
	ok('escape clears search', h.matched() === '' && h.lit() === '', h.matched() + ' ' + h.lit());

	h.click(h.rect('@fib.lua:3 (50'));
	ok('zoom: frame fills width', h.num('@fib.lua:3 (50', 'x') === 10 &&
	   h.num('@fib.lua:3 (50', 'width') === 1180, h.num('@fib.lua:3 (50', 'width'));
	ok('zoom: children rescaled', h.num('@fib.lua:3 (30', 'width') === 708 &&
	   h.num('@fib.lua:5', 'x') === 718 && h.num('@fib.lua:5', 'width') === 472,
	   h.num('@fib.lua:3 (30', 'width') + ' ' + h.num('@fib.lua:5', 'x'));
	ok('zoom: others hidden', !h.shown('TRACE') && !h.shown('GC') && !h.shown('<script') &&
	   !h.shown('string.format'), 'still shown');
	ok('zoom: ancestors kept', h.shown('all') && h.box('all').classList.contains('anc') &&
	   h.box('@main.lua:1').classList.contains('anc') && h.num('@main.lua:1', 'width') === 1180,
	   'ancestors');
	ok('zoom: visible count', h.nshown() === 7, h.nshown());
	ok('zoom: reset shown', d.getElementById('fg-reset').style.display !== 'none', 'hidden');
	ok('zoom: url', h.w.location.search === '?z=3', h.w.location.search);
	h.search('fib', 'button');
	ok('search while zoomed', h.matched() === 'Matched: 50.0%', h.matched());
	ok('url with search', h.w.location.search === '?z=3&s=fib', h.w.location.search);
	h.click(d.getElementById('fg-reset'));
	ok('reset zoom', h.nshown() === 12 && h.num('@main.lua:1', 'width') === 1003 &&
	   !h.box('all').classList.contains('anc') &&
	   d.getElementById('fg-reset').style.display === 'none',
	   h.nshown() + ' ' + h.num('@main.lua:1', 'width'));
	ok('reset keeps search', h.matched() === 'Matched: 50.0%', h.matched());
	h.key('Escape');

	var t0 = h.box('<script').children[2].textContent;
	h.click(h.rect('<script'));
	var t1 = h.box('<script').children[2].textContent;
	ok('zoom re-fits label', t0 === '<scri..' && t1 === '<script>&"\'\uFFFD\uFFFD',
	   JSON.stringify([t0, t1]));
	h.click(h.rect('all'));
	ok('click root unzooms', h.nshown() === 12 && h.box('<script').children[2].textContent === t0,
	   h.nshown());

	h.click(d.getElementById('fg-invert'));
	ok('invert', h.num('all', 'y') === 76 && h.num('lj_gc_step', 'y') === 156,
	   h.num('all', 'y') + ' ' + h.num('lj_gc_step', 'y'));
	h.click(d.getElementById('fg-invert'));
	ok('invert back', h.num('all', 'y') === 156 && h.num('lj_gc_step', 'y') === 76,
	   h.num('all', 'y'));
	ok('url cleared', h.w.location.search === '', h.w.location.search);
}
function restored(id) {
	var h = frame(id || 'f2');
	ok('url restore: search', h.matched() === 'Matched: 50.0%', h.matched());
	ok('url restore: zoom', h.num('@fib.lua:3 (50', 'width') === 1180 && !h.shown('GC'),
	   h.num('@fib.lua:3 (50', 'width'));
	ok('url restore: inverted', h.num('all', 'y') === 76 &&
	   h.d.getElementById('fg-invert').classList.contains('on'), h.num('all', 'y'));
}
/* The same graph as a web page (-o x.html): its script runs there as in the SVG. */
function html_page() {
	var d = document.getElementById('f4').contentDocument;
	ok('html: a web page', d && d.contentType === 'text/html' &&
	   d.documentElement.tagName === 'HTML' && /^luaprof/.test(d.title),
	   d ? d.contentType + ' ' + d.documentElement.tagName + ' ' + d.title : 'no document');
	restored('f4');
}
function big() {
	var h = frame('f3');
	ok('big: box count', h.G.length === 100001, h.G.length);
	var t = performance.now();
	h.click(h.rect('@big000.lua:51 '));
	var tz = performance.now() - t;
	ok('big: zoom', h.nshown() === 101 && h.num('@big000.lua:51 ', 'width') === 1180, h.nshown());
	t = performance.now();
	h.search('big00[0-4]', 'button');
	var ts = performance.now() - t;
	ok('big: search', h.matched() === 'Matched: 0.5%', h.matched());
	t = performance.now();
	h.key('Escape');
	var tr = performance.now() - t;
	ok('big: reset', h.nshown() === 100001 && h.matched() === '', h.nshown());
	out.push('INFO big (100001 boxes): zoom ' + tz.toFixed(0) + ' ms, search ' +
		 ts.toFixed(0) + ' ms, reset ' + tr.toFixed(0) + ' ms');
}
window.addEventListener('load', function () {
	[demo, restored, html_page, big].forEach(function (fn) {
		try { fn(); } catch (e) { ok(fn.name, false, 'exception: ' + e); }
	});
	out.push('DONE failed=' + nfail);
	document.getElementById('results').textContent = out.join('\n');
});
</script>
</body></html>
EOF

FLAGS="--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
	--disable-background-networking --disable-component-update --disable-sync"

PROFILE_DIR=$(mktemp -d "$WORK/profile.XXXXXX")
timeout 180 "$BROWSER" $FLAGS --user-data-dir="$PROFILE_DIR" --allow-file-access-from-files \
	--enable-logging=stderr --v=0 --dump-dom "file://$WORK/test.html" \
	>"$WORK/dom.html" 2>"$WORK/chromium.log"
rc=$?
[ $rc = 0 ] || fail "chromium --dump-dom exited $rc: $(grep -v dbus "$WORK/chromium.log" | tail -n 2 | tr '\n' ' ')"

# The results are inside <pre id="results">; entities are enough to unescape for grep.
sed -n '/<pre id="results">/,/<\/pre>/p' "$WORK/dom.html" |
	sed -e 's/<pre id="results">//' -e 's/<\/pre>.*//' \
	    -e 's/&lt;/</g' -e 's/&gt;/>/g' -e 's/&quot;/"/g' -e 's/&amp;/\&/g' >"$WORK/results.txt"
cat "$WORK/results.txt"
if grep -q 'Uncaught' "$WORK/chromium.log"; then
	grep 'Uncaught' "$WORK/chromium.log" | head -n 3
	fail "JavaScript error in the page"
fi
grep -q '^DONE failed=0$' "$WORK/results.txt" ||
	fail "$(grep -c '^FAIL' "$WORK/results.txt") browser checks failed (or the test page did not run)"

# Screenshots for a human: the plain graph and a zoomed, searched, view restored from the URL.
PROFILE_DIR=$(mktemp -d "$WORK/profile.XXXXXX")
timeout 120 "$BROWSER" $FLAGS --user-data-dir="$PROFILE_DIR" --hide-scrollbars \
	--screenshot="$SHOT" --window-size=1200,800 "file://$WORK/demo.svg" >/dev/null 2>&1 ||
	fail "screenshot failed"
PROFILE_DIR=$(mktemp -d "$WORK/profile.XXXXXX")
timeout 120 "$BROWSER" $FLAGS --user-data-dir="$PROFILE_DIR" --hide-scrollbars \
	--screenshot="$SHOT_ZOOM" --window-size=1200,800 "file://$WORK/demo.svg?z=2&s=fib" \
	>/dev/null 2>&1 || fail "zoomed screenshot failed"
[ -s "$SHOT" ] && [ -s "$SHOT_ZOOM" ] || fail "screenshots are empty"
if [ -n "${FG_SHOT:-}" ] || [ "${FG_KEEP:-0}" = 1 ]; then
	echo "PASS flamegraph_browser: all browser checks passed (screenshots: $SHOT $SHOT_ZOOM)"
else
	echo "PASS flamegraph_browser: all browser checks passed (screenshots: FG_KEEP=1 or FG_SHOT=path keeps them)"
fi
exit 0
