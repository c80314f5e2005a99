/*
** Flame graph renderer: the profile's call tree as a self-contained interactive SVG.
**
** Layout follows flamegraph.pl: root ("all") at the bottom, children stacked above their
** parent, siblings ordered alphabetically by label so the output is deterministic, box
** width proportional to the inclusive value. The x axis is therefore NOT time.
**
** The SVG is complete without its script (boxes, labels, <title> tooltips, legend), so it
** still reads as a picture where scripts do not run. The embedded script adds zoom, regex
** search, an inverted (icicle) layout and a details bar; it keeps the view in the URL query
** (z, s, i, inv) so a zoomed or searched view can be shared. It needs no external resource
** and works from file://.
**
** Everything is iterative: stacks can be thousands of frames deep.
*/
#include "report/render.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/text.h"
#include "util/iset.h"
#include "util/size.h"
#include "util/utf8.h"

/* -- Geometry --------------------------------------------------------------- */

#define FG_WIDTH     1200   /* SVG width in px */
#define FG_PAD       10     /* left/right margin */
#define FG_FH        16     /* frame row height (box is FG_FH - 1 high) */
#define FG_TOP       76     /* first frame row: title, subtitle and legend sit above */
#define FG_FOOT      30     /* details bar below the frames */
#define FG_FONT      12     /* frame label font size, px */
#define FG_TEXT_Y    12     /* label baseline within a row */
/*
 * Labels are drawn in a monospace font so truncation can be computed without measuring
 * text: 0.61em covers DejaVu Sans Mono, Liberation Mono, Menlo (0.60-0.602em) with a little
 * slack. Proportional fonts would look nicer but overflow their boxes unpredictably.
 */
#define FG_CHAR_W    (0.61 * FG_FONT)
/* Boxes below this share of the total are elided (flamegraph.pl's --minwidth, ~1.2 px). */
#define FG_MIN_SHARE 0.001
#define FG_HILITE    "#e600e6"  /* search match fill; no palette comes near magenta */

#define NONE UINT32_MAX

/* -- Text ------------------------------------------------------------------- */

/*
 * Returns a malloc'd copy of s that is valid UTF-8 and valid XML 1.0 character data:
 * ill-formed sequences (see util/utf8.h), C0 controls (including newline and tab), DEL
 * and U+FFFE/U+FFFF each become U+FFFD. Frame names come from arbitrary programs, so this
 * is the only way to promise a well-formed document. NULL on ENOMEM.
 */
static char *clean_utf8(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	char *out = malloc(n * 3 + 1);
	if (!out)
		return NULL;
	char *o = out;
	for (size_t i = 0; i < n;) {
		size_t bad = 0;
		uint32_t cp = 0;
		size_t len = lp_utf8_seq(p + i, n - i, &bad, &cp);
		if (len && !(cp < 0x20 || cp == 0x7f || cp == 0xfffe || cp == 0xffff)) {
			memcpy(o, p + i, len);
			o += len;
			i += len;
		} else {
			memcpy(o, LP_UTF8_REPLACEMENT, 3);
			o += 3;
			i += len ? len : bad;
		}
	}
	*o = 0;
	char *fit = realloc(out, (size_t)(o - out) + 1); /* room for the worst case only */
	return fit ? fit : out;
}

/* Writes n bytes of clean UTF-8, escaped for both XML text and attribute values. */
static void xml_putn(FILE *out, const char *s, size_t n)
{
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		const char *e;
		switch (s[i]) {
		case '&': e = "&amp;"; break;
		case '<': e = "&lt;"; break;
		case '>': e = "&gt;"; break;
		case '"': e = "&quot;"; break;
		case '\'': e = "&#39;"; break;
		default: continue;
		}
		fwrite(s + run, 1, i - run, out);
		fputs(e, out);
		run = i + 1;
	}
	fwrite(s + run, 1, n - run, out);
}

static void xml_puts(FILE *out, const char *s)
{
	xml_putn(out, s, strlen(s));
}

/* Cleans then escapes a string of unknown provenance; returns -ENOMEM on failure. */
static int xml_put_raw(FILE *out, const char *s)
{
	char *c = clean_utf8(s);
	if (!c)
		return -ENOMEM;
	xml_puts(out, c);
	free(c);
	return 0;
}

/*
 * Writes as much of a clean label as fits in a box of width w px: all of it, or a prefix
 * and "..", or nothing below three characters. Counts code points, not bytes; the script
 * applies the same rule when zooming.
 */
static void put_fitted(FILE *out, const char *s, double w)
{
	double room = (w - 6) / FG_CHAR_W;
	if (room < 3)
		return;
	size_t max = (size_t)room, ncp = 0, cut = 0, i;
	for (i = 0; s[i]; i++) {
		if (((unsigned char)s[i] & 0xc0) == 0x80)
			continue;
		if (ncp == max - 2)
			cut = i;
		ncp++;
	}
	if (ncp <= max) {
		xml_putn(out, s, i);
		return;
	}
	xml_putn(out, s, cut);
	fputs("..", out);
}

/* -- Values ----------------------------------------------------------------- */

/* "120 samples", "1.5 MiB", "12.0 ms": how tooltips and the subtitle show a value. */
static void fmt_value(char *buf, size_t len, int64_t v, const struct lp_value_type *t)
{
	const char *unit = t && t->unit ? t->unit : "count";
	if (strcmp(unit, "bytes") == 0) {
		lp_size_format(buf, len, v, 0);
	} else if (strcmp(unit, "nanoseconds") == 0) {
		if (v < 1000)
			snprintf(buf, len, "%" PRId64 " ns", v);
		else if (v < 1000000)
			snprintf(buf, len, "%.1f us", (double)v / 1e3);
		else if (v < 1000000000)
			snprintf(buf, len, "%.1f ms", (double)v / 1e6);
		else
			snprintf(buf, len, "%.2f s", (double)v / 1e9);
	} else {
		/* "1 sample"; a column named otherwise (alloc_objects) is named as it is. */
		const char *type = t && t->type ? t->type : "samples";
		int one = v == 1 || v == -1;
		snprintf(buf, len, "%" PRId64 " %s", v,
			 one && strcmp(type, "samples") == 0 ? "sample" : type);
	}
}

/* -- Colours ---------------------------------------------------------------- */

/*
 * One palette per frame kind: a colour is interpolated between two endpoints by a hash of
 * the label, so a frame keeps its colour across renders and neighbours usually differ,
 * while every shade stays recognisably in its kind's hue family.
 */
struct palette {
	uint8_t lo[3], hi[3];
	const char *legend;   /* legend and tooltip name */
};

static const struct palette palettes[LP_FK__MAX] = {
	[LP_FK_LUA] = { { 70, 170, 70 }, { 155, 222, 110 }, "Lua" },
	[LP_FK_C] = { { 230, 90, 50 }, { 250, 170, 80 }, "C" },
	[LP_FK_FFUNC] = { { 220, 195, 50 }, { 245, 232, 115 }, "builtin" },
	[LP_FK_TRACE] = { { 70, 170, 220 }, { 135, 218, 242 }, "JIT trace" },
	[LP_FK_VMSTATE] = { { 150, 120, 200 }, { 200, 178, 232 }, "VM state" },
	[LP_FK_INTERNAL] = { { 150, 150, 150 }, { 205, 205, 205 }, "internal" },
};
static const uint8_t root_rgb[3] = { 224, 220, 208 };

static void frame_rgb(enum lp_frame_kind k, const char *label, uint8_t rgb[3])
{
	const struct palette *pal = &palettes[(unsigned)k < LP_FK__MAX ? k : LP_FK_INTERNAL];
	double t = (double)(lp_hash_bytes(label, strlen(label), 0x5eedf1a3e) >> 11) /
		   9007199254740992.0;
	for (int i = 0; i < 3; i++)
		rgb[i] = (uint8_t)(pal->lo[i] + t * (pal->hi[i] - pal->lo[i]) + 0.5);
}

/* -- Call tree -------------------------------------------------------------- */

struct node {
	uint32_t frame;   /* frame id; NONE for the root */
	uint32_t parent;  /* NONE for the root */
	uint32_t child;   /* first child in sibling order, NONE for a leaf */
	uint32_t next;    /* next sibling, NONE for the last */
	uint32_t depth;   /* root 0 */
	int64_t value;    /* inclusive: this frame and everything it called */
	int64_t x;        /* left edge, in value units from the root's left edge */
};

struct tree {
	struct node *nodes;     /* node 0 is the root ("all") */
	size_t n, cap;
	struct lp_iset index;   /* (parent, frame) -> node */
};

struct child_key {
	const struct tree *t;
	uint32_t parent, frame;  /* the node looked up */
};

static int child_eq(const void *ctx, uint32_t idx)
{
	const struct child_key *k = ctx;
	const struct node *n = &k->t->nodes[idx];
	return n->parent == k->parent && n->frame == k->frame;
}

static uint32_t tree_add(struct tree *t, uint32_t parent, uint32_t frame, uint32_t depth)
{
	if (t->n >= NONE - 1)
		return NONE;
	if (t->n == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 256;
		struct node *nn = realloc(t->nodes, ncap * sizeof(*nn));
		if (!nn)
			return NONE;
		t->nodes = nn;
		t->cap = ncap;
	}
	struct node *n = &t->nodes[t->n];
	n->frame = frame;
	n->parent = parent;
	n->child = n->next = NONE;
	n->depth = depth;
	n->value = n->x = 0;
	return (uint32_t)t->n++;
}

/* The child of `parent` for `frame`, created if new; NONE on ENOMEM. */
static uint32_t tree_child(struct tree *t, uint32_t parent, uint32_t frame)
{
	struct child_key k = { t, parent, frame };
	uint64_t h = lp_hash_u64((uint64_t)parent << 32 | frame);
	uint32_t idx;
	if (lp_iset_find(&t->index, h, child_eq, &k, &idx))
		return idx;
	idx = tree_add(t, parent, frame, t->nodes[parent].depth + 1);
	if (idx == NONE || lp_iset_insert(&t->index, h, idx))
		return NONE;
	return idx;
}

/*
 * Merges all stacks with a positive value in column `col` into a tree rooted at node 0, each
 * frame as the one whose box it shares (same[]).
 * Non-positive values cannot be drawn as widths; *negative counts the stacks skipped for
 * being below zero. Returns 0 or -ENOMEM.
 */
static int tree_build(struct tree *t, const struct lp_profile *p, const uint32_t *same,
		      unsigned col, size_t *negative)
{
	if (tree_add(t, NONE, NONE, 0) == NONE)
		return -ENOMEM;
	for (size_t i = 0, ns = lp_profile_nstacks(p); i < ns; i++) {
		const uint32_t *fr;
		size_t depth;
		const int64_t *vals;
		lp_profile_stack(p, i, &fr, &depth, &vals);
		int64_t v = vals[col];
		if (v <= 0) {
			*negative += v < 0;
			continue;
		}
		uint32_t cur = 0;
		t->nodes[0].value = lp_sat_add(t->nodes[0].value, v);
		for (size_t d = 0; d < depth; d++) {
			cur = tree_child(t, cur, same[fr[d]]);
			if (cur == NONE)
				return -ENOMEM;
			t->nodes[cur].value = lp_sat_add(t->nodes[cur].value, v);
		}
	}
	return 0;
}

struct sort_key {
	uint64_t key;   /* parent << 32 | rank of the frame's label */
	uint32_t node;
};

static int cmp_sort_key(const void *a, const void *b)
{
	uint64_t x = ((const struct sort_key *)a)->key, y = ((const struct sort_key *)b)->key;
	return x < y ? -1 : x > y;
}

/* Links every node's children in label order (rank[] maps frame id -> label order). */
static int tree_sort(struct tree *t, const uint32_t *rank)
{
	if (t->n < 2)
		return 0;
	struct sort_key *k = malloc((t->n - 1) * sizeof(*k));
	if (!k)
		return -ENOMEM;
	for (size_t i = 1; i < t->n; i++) {
		k[i - 1].key = (uint64_t)t->nodes[i].parent << 32 | rank[t->nodes[i].frame];
		k[i - 1].node = (uint32_t)i;
	}
	/* (parent, frame) is unique per node, so the keys are distinct and the order total. */
	qsort(k, t->n - 1, sizeof(*k), cmp_sort_key);
	for (size_t i = t->n - 1; i-- > 0;) {
		struct node *n = &t->nodes[k[i].node];
		struct node *par = &t->nodes[n->parent];
		n->next = par->child;
		par->child = k[i].node;
	}
	free(k);
	return 0;
}

/*
 * Assigns x offsets and lists the drawn nodes in pre-order (a parent before its children,
 * children left to right). The script relies on that order: it lets it add up search
 * matches in one sweep without counting a match nested inside another. Children narrower
 * than minv are left out with their whole subtree. Returns the count listed, 0 on ENOMEM.
 */
static size_t tree_layout(struct tree *t, double minv, uint32_t *order, uint32_t *maxdepth)
{
	uint32_t *stack = malloc(t->n * sizeof(*stack));
	size_t sp = 0, no = 0;
	if (!stack)
		return 0;
	stack[sp++] = 0;
	*maxdepth = 0;
	while (sp) {
		uint32_t u = stack[--sp];
		struct node *n = &t->nodes[u];
		order[no++] = u;
		if (n->depth > *maxdepth)
			*maxdepth = n->depth;
		int64_t cx = n->x;
		size_t base = sp;
		for (uint32_t c = n->child; c != NONE; c = t->nodes[c].next) {
			struct node *cn = &t->nodes[c];
			cn->x = cx;
			cx = lp_sat_add(cx, cn->value);
			if ((double)cn->value >= minv)
				stack[sp++] = c;
		}
		/* Pushed left to right; reverse so the leftmost child is popped first. */
		for (size_t i = base, j = sp; i + 1 < j; i++, j--) {
			uint32_t tmp = stack[i];
			stack[i] = stack[j - 1];
			stack[j - 1] = tmp;
		}
	}
	free(stack);
	return no;
}

/* -- Frame labels ----------------------------------------------------------- */

struct labels {
	char **s;        /* clean label per frame id */
	uint32_t *rank;  /* frame id -> position in label order */
	uint32_t *same;  /* frame id -> the frame whose box it shares (itself, or the first
			  * Lua frame in label order that reads the same) */
	size_t n;        /* frames */
	const struct lp_profile *p;  /* for tie-breaks between equal labels */
};

static int strcmp_null(const char *a, const char *b)
{
	if (!a || !b)
		return (a != NULL) - (b != NULL);
	return strcmp(a, b);
}

/* Sorting ids needs the labels; qsort has no context pointer, so ranks are computed with
 * a small merge sort over ids instead (stable, iterative, no recursion). */
static int label_cmp(const struct labels *l, uint32_t a, uint32_t b)
{
	int c = strcmp(l->s[a], l->s[b]);
	if (c)
		return c;
	const struct lp_frame *fa = lp_profile_frame(l->p, a), *fb = lp_profile_frame(l->p, b);
	if (fa->kind != fb->kind)
		return fa->kind < fb->kind ? -1 : 1;
	if ((c = strcmp_null(fa->file, fb->file)))
		return c;
	if (fa->fline != fb->fline)
		return fa->fline < fb->fline ? -1 : 1;
	return a < b ? -1 : a > b;
}

static int labels_init(struct labels *l, const struct lp_profile *p)
{
	size_t n = lp_profile_nframes(p);
	l->p = p;
	l->n = n;
	l->s = calloc(n ? n : 1, sizeof(*l->s));
	l->rank = malloc((n ? n : 1) * sizeof(*l->rank));
	l->same = malloc((n ? n : 1) * sizeof(*l->same));
	uint32_t *a = malloc((n ? n : 1) * sizeof(*a)), *b = malloc((n ? n : 1) * sizeof(*b));
	int err = -ENOMEM;
	if (!l->s || !l->rank || !l->same || !a || !b)
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct lp_frame *f = lp_profile_frame(p, (uint32_t)i);
		int len = lp_frame_label(f, NULL, 0);
		char *raw = malloc(len > 0 ? (size_t)len + 1 : 1);
		if (!raw)
			goto out;
		if (len > 0)
			lp_frame_label(f, raw, (size_t)len + 1);
		else
			raw[0] = 0;
		l->s[i] = clean_utf8(raw);
		free(raw);
		if (!l->s[i])
			goto out;
		a[i] = (uint32_t)i;
	}
	for (size_t w = 1; w < n; w *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * w) {
			size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			size_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				b[k++] = label_cmp(l, a[j], a[i]) < 0 ? a[j++] : a[i++];
			while (i < mid)
				b[k++] = a[i++];
			while (j < hi)
				b[k++] = a[j++];
		}
		uint32_t *tmp = a;
		a = b;
		b = tmp;
	}
	/* Lua frames that read the same (one line of a chunk in two functions: a closure
	 * made on the line that runs it, as pcall(function() ... end)) are one box, as
	 * flamegraph.pl draws the collapsed stacks: an exact memory profile drew two roots
	 * both named app.lua:17. Such frames have equal labels: next to each other here. */
	for (size_t i = 0; i < n; i++) {
		l->rank[a[i]] = (uint32_t)i;
		l->same[a[i]] = a[i];
		if (i && lp_frame_lua_same(lp_profile_frame(p, a[i]), lp_profile_frame(p, a[i - 1])))
			l->same[a[i]] = l->same[a[i - 1]];
	}
	err = 0;
out:
	free(a);
	free(b);
	return err;
}

static void labels_free(struct labels *l)
{
	if (l->s)
		for (size_t i = 0; i < l->n; i++)
			free(l->s[i]);
	free(l->s);
	free(l->rank);
	free(l->same);
}

/* -- SVG -------------------------------------------------------------------- */

static const char *const css =
	"text{font-family:ui-monospace,Menlo,Consolas,'DejaVu Sans Mono','Liberation Mono',"
	"monospace;font-size:12px;fill:#000}\n"
	".title{font-family:sans-serif;font-size:17px;font-weight:bold}\n"
	".sub{font-family:sans-serif;font-size:12px;fill:#444}\n"
	".warn{fill:#c00000;font-weight:bold}\n"
	".ctl{font-family:sans-serif;font-size:12px;fill:#1a4f9c;cursor:pointer}\n"
	".ctl:hover{text-decoration:underline}\n"
	".ctl.on{font-weight:bold;fill:#c00000}\n"
	"#fg-frames g{cursor:pointer}\n"
	"#fg-frames text{pointer-events:none}\n"
	"#fg-frames g:hover rect{stroke:#000;stroke-width:0.7}\n"
	"#fg-frames g.anc rect{opacity:0.5}\n"
	"#fg-details,#fg-matched{font-size:12px}\n";

/*
 * The interactive part. Per-box state is read from the DOM once into typed arrays
 * (data-x/data-v are the box's left edge and width in value units, exact for any total
 * below 2^53); events are delegated to the frames group, so ~100k boxes cost one loop per
 * zoom and no per-box listeners. A box's full label is the first line of its <title> up to
 * the last " (": the value suffix the renderer appends never contains " (".
 */
static const char *const script[] = {
	"var d=document,$=function(id){return d.getElementById(id);};",
	"var frames=$('fg-frames'),details=$('fg-details'),matched=$('fg-matched'),",
	"  resetEl=$('fg-reset'),icEl=$('fg-ic'),invEl=$('fg-invert');",
	"var G=Array.prototype.slice.call(frames.children),n=G.length,IDX=new Map();",
	"var X=new Float64Array(n),V=new Float64Array(n),D=new Int32Array(n),W=new Float64Array(n);",
	"var R=new Array(n),T=new Array(n),FILL=new Array(n),L=new Array(n);",
	"var hid=new Uint8Array(n),anc=new Uint8Array(n),hit=new Uint8Array(n);",
	"var cur=0,inv=false,ic=false,term='';",
	"for(var i=0;i<n;i++){",
	"  var g=G[i];IDX.set(g,i);",
	"  X[i]=+g.getAttribute('data-x');V[i]=+g.getAttribute('data-v');",
	"  R[i]=g.children[1];T[i]=g.children[2];FILL[i]=R[i].getAttribute('fill');",
	"  W[i]=+R[i].getAttribute('width');",
	"  D[i]=Math.round((C.top+C.maxd*C.fh-(+R[i].getAttribute('y')))/C.fh);",
	"}",
	"function label(i){",
	"  if(L[i]===undefined){",
	"    var s=G[i].children[0].textContent,nl=s.indexOf('\\n');",
	"    if(nl>=0)s=s.slice(0,nl);",
	"    var p=s.lastIndexOf(' (');L[i]=p>=0?s.slice(0,p):s;",
	"  }",
	"  return L[i];",
	"}",
	"function fit(s,w){",
	"  var m=Math.floor((w-6)/C.cw);",
	"  if(m<3)return '';",
	"  if(s.length<=m)return s;",
	"  var cps=Array.from(s);",
	"  return cps.length<=m?s:cps.slice(0,m-2).join('')+'..';",
	"}",
	"/* Zoom to box cur: it and its descendants span the width, ancestors stay at full width",
	"   (dimmed), everything else is hidden. ys: also recompute rows (layout flipped). */",
	"function layout(ys){",
	"  var zx=X[cur],ze=zx+V[cur],zd=D[cur],full=C.w-2*C.pad,sc=full/V[cur];",
	"  for(var i=0;i<n;i++){",
	"    var x,w,a=0,h=0,xe=X[i]+V[i];",
	"    if(D[i]>=zd&&X[i]>=zx&&xe<=ze){x=C.pad+(X[i]-zx)*sc;w=V[i]*sc;}",
	"    else if(D[i]<zd&&X[i]<=zx&&xe>=ze){x=C.pad;w=full;a=1;}",
	"    else h=1;",
	"    if(h!==hid[i]){G[i].style.display=h?'none':'';hid[i]=h;}",
	"    if(h)continue;",
	"    if(a!==anc[i]){G[i].classList.toggle('anc',!!a);anc[i]=a;}",
	"    R[i].setAttribute('x',x.toFixed(2));R[i].setAttribute('width',w.toFixed(2));",
	"    T[i].setAttribute('x',(x+3).toFixed(2));",
	"    if(Math.abs(w-W[i])>0.01){T[i].textContent=fit(label(i),w);W[i]=w;}",
	"    if(ys){",
	"      var y=inv?C.top+D[i]*C.fh:C.top+(C.maxd-D[i])*C.fh;",
	"      R[i].setAttribute('y',y);T[i].setAttribute('y',y+C.ty);",
	"    }",
	"  }",
	"  resetEl.style.display=cur?'':'none';",
	"  invEl.classList.toggle('on',inv);",
	"}",
	"/* Highlights boxes whose label matches; the matched share counts each value once:",
	"   boxes come in pre-order, so a match starting before the end of the last counted",
	"   match is nested inside it. */",
	"function search(t){",
	"  term=t||'';",
	"  var re=null;",
	"  if(term){try{re=new RegExp(term,ic?'i':'');}catch(e){",
	"    search('');matched.textContent='Invalid regex: '+t;return;}}",
	"  var end=-1,sum=0;",
	"  for(var i=0;i<n;i++){",
	"    var m=re&&re.test(label(i))?1:0;",
	"    if(m!==hit[i]){R[i].setAttribute('fill',m?C.hl:FILL[i]);hit[i]=m;}",
	"    if(m&&X[i]>=end){sum+=V[i];end=X[i]+V[i];}",
	"  }",
	"  matched.textContent=re?'Matched: '+(100*sum/C.total).toFixed(1)+'%':'';",
	"  icEl.classList.toggle('on',ic);",
	"  save();",
	"}",
	"function save(){",
	"  var p=[];",
	"  if(cur)p.push('z='+cur);",
	"  if(term)p.push('s='+encodeURIComponent(term));",
	"  if(ic)p.push('i=1');",
	"  if(inv)p.push('inv=1');",
	"  try{history.replaceState(null,'',p.length?'?'+p.join('&'):location.pathname);}",
	"  catch(e){}",
	"}",
	"function zoom(i){if(i!==cur){cur=i;layout(false);save();}}",
	"function ask(){",
	"  var t=window.prompt('Search frames (JavaScript regular expression; empty clears):',term);",
	"  if(t!==null)search(t);",
	"}",
	"function reset(){search('');zoom(0);}",
	"function box(e){",
	"  var g=e.target.closest?e.target.closest('g'):null;",
	"  return g&&IDX.has(g)?IDX.get(g):-1;",
	"}",
	"frames.addEventListener('click',function(e){var i=box(e);if(i>=0)zoom(i);});",
	"frames.addEventListener('mouseover',function(e){",
	"  var i=box(e);",
	"  if(i>=0)details.textContent=G[i].children[0].textContent.replace(/\\n/g,'  |  ');",
	"});",
	"frames.addEventListener('mouseout',function(){details.textContent=' ';});",
	"resetEl.addEventListener('click',function(){zoom(0);});",
	"$('fg-search').addEventListener('click',ask);",
	"icEl.addEventListener('click',function(){ic=!ic;search(term);});",
	"invEl.addEventListener('click',function(){inv=!inv;layout(true);save();});",
	"d.addEventListener('keydown',function(e){",
	"  if(((e.ctrlKey||e.metaKey)&&(e.key==='f'||e.key==='F'))||e.key==='F3'){",
	"    e.preventDefault();ask();",
	"  }else if((e.ctrlKey||e.metaKey)&&(e.key==='i'||e.key==='I')){",
	"    e.preventDefault();ic=!ic;search(term);",
	"  }else if(e.key==='Escape'){reset();}",
	"});",
	"(function(){",
	"  var q;",
	"  try{q=new URLSearchParams(location.search);}catch(e){return;}",
	"  var z=parseInt(q.get('z'),10);",
	"  inv=q.get('inv')==='1';ic=q.get('i')==='1';",
	"  if(z>0&&z<n)cur=z;",
	"  if(cur||inv)layout(true);",
	"  if(q.get('s'))search(q.get('s'));else icEl.classList.toggle('on',ic);",
	"})();",
	NULL
};

struct fg {
	FILE *out;
	int html;            /* the SVG inside an HTML page */
	const struct lp_profile *p;
	const struct lp_value_type *vt;  /* the rendered column's type */
	struct tree t;
	struct labels l;
	uint32_t *order;     /* drawn nodes in pre-order; order[0] is the root */
	size_t norder;       /* drawn nodes; t.n - norder were elided */
	size_t negative;     /* stacks skipped for a negative value */
	uint32_t maxdepth;   /* deepest drawn node, root = 0 */
	int64_t total;       /* root value: sum of the positive stack values */
};

static void put_header(struct fg *g, int height, const char *title, const char *sub,
		       int truncated)
{
	FILE *out = g->out;
	if (g->html) {
		/* HTML parses an inline SVG's CDATA sections and runs its script as such. */
		fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>", out);
		xml_puts(out, title);
		fputs("</title></head>\n<body style=\"margin:0\">\n", out);
	} else {
		fputs("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n", out);
	}
	fprintf(out,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" "
		"height=\"%d\" viewBox=\"0 0 %d %d\">\n"
		"<!-- luaprof flame graph: root at the bottom, x order alphabetical (not time). "
		"Click a frame to zoom, Ctrl-F or Search to highlight, Escape to reset. -->\n"
		"<style><![CDATA[\n%s]]></style>\n"
		"<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#fbfaf6\"/>\n"
		"<text class=\"title\" x=\"%d\" y=\"24\" text-anchor=\"middle\">",
		FG_WIDTH, height, FG_WIDTH, height, css, FG_WIDTH / 2);
	xml_puts(out, title);
	fprintf(out, "</text>\n<text class=\"sub\" x=\"%d\" y=\"43\" text-anchor=\"middle\">",
		FG_WIDTH / 2);
	if (truncated)
		fputs("<tspan class=\"warn\">WARNING: stream truncated, profile incomplete. "
		      "</tspan>", out);
	xml_puts(out, sub);
	fputs("</text>\n", out);
}

/* Legend for the kinds that are drawn, the layout note, and the controls. */
static void put_legend(struct fg *g)
{
	FILE *out = g->out;
	int present[LP_FK__MAX] = { 0 };
	for (size_t i = 1; i < g->norder; i++) {
		const struct lp_frame *f = lp_profile_frame(g->p, g->t.nodes[g->order[i]].frame);
		present[(unsigned)f->kind < LP_FK__MAX ? f->kind : LP_FK_INTERNAL] = 1;
	}
	int x = FG_PAD;
	fputs("<g id=\"fg-legend\">", out);
	for (int k = 0; k < LP_FK__MAX; k++) {
		if (!present[k])
			continue;
		const struct palette *pal = &palettes[k];
		fprintf(out,
			"<rect x=\"%d\" y=\"53\" width=\"12\" height=\"12\" fill=\"#%02x%02x%02x\" "
			"stroke=\"#888\" stroke-width=\"0.5\"/><text class=\"sub\" x=\"%d\" y=\"63\">"
			"%s</text>",
			x, (pal->lo[0] + pal->hi[0]) / 2, (pal->lo[1] + pal->hi[1]) / 2,
			(pal->lo[2] + pal->hi[2]) / 2, x + 16, pal->legend);
		x += 16 + (int)strlen(pal->legend) * 13 / 2 + 14;  /* ~6.5 px a character */
	}
	fprintf(out,
		"<text class=\"sub\" x=\"%d\" y=\"63\">width = share of total; x order is "
		"alphabetical, not time</text></g>\n",
		x + 6);
	fprintf(out,
		"<text id=\"fg-reset\" class=\"ctl\" x=\"%d\" y=\"24\" style=\"display:none\">"
		"Reset Zoom</text>\n"
		"<text id=\"fg-invert\" class=\"ctl\" x=\"%d\" y=\"63\" text-anchor=\"end\">"
		"Invert</text>\n"
		"<text id=\"fg-ic\" class=\"ctl\" x=\"%d\" y=\"63\" text-anchor=\"end\">"
		"ic</text>\n"
		"<text id=\"fg-search\" class=\"ctl\" x=\"%d\" y=\"63\" text-anchor=\"end\">"
		"Search</text>\n",
		FG_PAD, FG_WIDTH - FG_PAD - 90, FG_WIDTH - FG_PAD - 58, FG_WIDTH - FG_PAD);
}

static void put_box(struct fg *g, uint32_t u, double scale)
{
	FILE *out = g->out;
	const struct node *n = &g->t.nodes[u];
	const struct lp_frame *f = n->frame == NONE ? NULL : lp_profile_frame(g->p, n->frame);
	const char *label = f ? g->l.s[n->frame] : "all";
	char val[64], pct[16];
	uint8_t rgb[3];
	double x = FG_PAD + (double)n->x * scale, w = (double)n->value * scale;
	int y = FG_TOP + (int)(g->maxdepth - n->depth) * FG_FH;

	fmt_value(val, sizeof(val), n->value, g->vt);
	fprintf(out, "<g data-x=\"%" PRId64 "\" data-v=\"%" PRId64 "\"><title>", n->x, n->value);
	xml_puts(out, label);
	lp_text_pct(pct, sizeof(pct), n->value, g->total); /* never 0.00% or 100.00% for a part */
	fprintf(out, " (%s, %s)", val, pct);
	if (f) {
		fprintf(out, "\n%s", palettes[(unsigned)f->kind < LP_FK__MAX ? f->kind
									 : LP_FK_INTERNAL].legend);
		if (f->file) {
			fputs(" | ", out);
			xml_put_raw(out, f->file);
		}
		if ((f->kind == LP_FK_LUA || f->kind == LP_FK_TRACE) && f->fline)
			fprintf(out, " | function at line %" PRIu32, f->fline);
		frame_rgb(f->kind, label, rgb);
	} else {
		memcpy(rgb, root_rgb, 3);
	}
	fprintf(out,
		"</title><rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" rx=\"2\" "
		"fill=\"#%02x%02x%02x\"/><text x=\"%.2f\" y=\"%d\">",
		x, y, w, FG_FH - 1, rgb[0], rgb[1], rgb[2], x + 3, y + FG_TEXT_Y);
	put_fitted(out, label, w);
	fputs("</text></g>\n", out);
}

/* ", N dropped" at buf + *o, unless the stream keeps no count of drops (Tarantool's). */
static void drops(const struct lp_profile_meta *m, char *buf, size_t len, size_t *o)
{
	if (m->drops_unrecorded && !m->dropped)
		return;
	*o += (size_t)snprintf(buf + *o, *o < len ? len - *o : 0, ", %" PRIu64 " dropped",
			       m->dropped);
	*o = *o < len ? *o : len;
}

/* Builds the subtitle: total, what was read and dropped, what was left out. */
static void make_subtitle(struct fg *g, char *buf, size_t len)
{
	const struct lp_profile_meta *m = lp_profile_cmeta(g->p);
	const char *unit = g->vt && g->vt->unit ? g->vt->unit : "count";
	char val[64];
	size_t o = 0;
#define ADD(...) \
	(o += (size_t)snprintf(buf + o, o < len ? len - o : 0, __VA_ARGS__), o = o < len ? o : len)
	buf[0] = 0;
	fmt_value(val, sizeof(val), g->total, g->vt);
	if (strcmp(unit, "count") == 0)
		ADD("Total: %s", val);
	else
		/* "(1 byte)": the unit's singular is its name without the final s. */
		ADD("Total %s: %s (%" PRId64 " %.*s)", g->vt && g->vt->type ? g->vt->type : "value",
		    val, g->total,
		    (int)strlen(unit) - ((g->total == 1 || g->total == -1) &&
					 unit[0] && unit[strlen(unit) - 1] == 's'),
		    unit);
	if (m->event && strcmp(m->event, "cpu") == 0) {
		ADD(" | %" PRIu64 " sample%s", m->samples, m->samples == 1 ? "" : "s");
		drops(m, buf, len, &o);
		if (m->period_ns) {
			struct lp_value_type ns = { "", "nanoseconds" };
			fmt_value(val, sizeof(val), (int64_t)m->period_ns, &ns);
			ADD(", every %s%s", val, m->wall_clock ? " of wall-clock time" : "");
			if (m->period_asked_ns) {
				fmt_value(val, sizeof(val), (int64_t)m->period_asked_ns, &ns);
				ADD(" on average (%s asked: some ticks took no sample of their own)",
				    val);
			}
		}
	} else if (m->event && strcmp(m->event, "memory (sampled)") == 0) {
		ADD(" | %" PRIu64 " sampled allocation%s", m->samples, m->samples == 1 ? "" : "s");
		drops(m, buf, len, &o);
		if (m->period_bytes > 1) {
			lp_size_format(val, sizeof(val), (int64_t)m->period_bytes, LP_SIZE_TRIM);
			ADD(", one per %s allocated", val);
		}
	} else if (m->samples || m->dropped) {
		ADD(" | %" PRIu64 " event%s", m->samples, m->samples == 1 ? "" : "s");
		drops(m, buf, len, &o);
	}
	if (m->cut)
		ADD(" | %" PRIu64 " with stacks cut short (outermost frames missing)", m->cut);
	if (g->total > 0 && g->t.n > g->norder) /* no layout without a total */
		ADD(" | %zu frame%s narrower than 0.1%% elided", g->t.n - g->norder,
		    g->t.n - g->norder == 1 ? "" : "s");
	if (g->negative)
		ADD(" | %zu stack%s with negative values not drawn", g->negative,
		    g->negative == 1 ? "" : "s");
	if (m->title)  /* a command line can be long; the title line has one row */
		ADD(" | %.120s%s", m->title, strlen(m->title) > 120 ? "..." : "");
#undef ADD
}

static int render(struct fg *g, const struct lp_render_opts *o, char *err, size_t errlen)
{
	const struct lp_profile_meta *m = lp_profile_cmeta(g->p);
	unsigned col = o ? o->value : 0;
	char *title = NULL, *sub = NULL, subbuf[1024];
	int rc;

	if (col >= lp_profile_nvalues(g->p)) {
		snprintf(err, errlen, "flamegraph: no value column %u (profile has %u)", col,
			 lp_profile_nvalues(g->p));
		return -EINVAL;
	}
	g->vt = lp_profile_value_type(g->p, col);
	if ((rc = labels_init(&g->l, g->p)) || (rc = tree_build(&g->t, g->p, g->l.same, col, &g->negative)))
		goto oom;
	g->total = g->t.nodes[0].value;
	if (g->total > 0) {
		if ((rc = tree_sort(&g->t, g->l.rank)))
			goto oom;
		g->order = malloc(g->t.n * sizeof(*g->order));
		rc = -ENOMEM;
		if (!g->order)
			goto oom;
		g->norder = tree_layout(&g->t, (double)g->total * FG_MIN_SHARE, g->order,
					&g->maxdepth);
		if (!g->norder)
			goto oom;
	}

	if (o && o->title && *o->title) { /* "": the default, as NULL */
		title = clean_utf8(o->title);
	} else {
		/* The file, and what it profiles: "luaprof: app.bin (memory, sampled)". */
		const char *src = m->source ? m->source : "";
		/* A wall-clock profile's samples are elapsed time, sleeps included: not CPU. */
		const char *cpu = m->wall_clock ? " (wall clock)" : " (CPU)";
		const char *ev = !m->event ? "" : !strcmp(m->event, "cpu") ? cpu
			       : !strcmp(m->event, "memory") ? " (memory, every event)"
			       : !strcmp(m->event, "memory (sampled)") ? " (memory, sampled)" : "";
		char *raw = malloc(strlen(src) + strlen(ev) + 16);
		if (raw) {
			sprintf(raw, "luaprof%s%s%s", *src ? ": " : "", src, ev);
			title = clean_utf8(raw);
			free(raw);
		}
	}
	make_subtitle(g, subbuf, sizeof(subbuf));
	sub = clean_utf8(subbuf);
	rc = -ENOMEM;
	if (!title || !sub)
		goto oom;

	if (g->total <= 0) {
		put_header(g, 130, title, sub, m->truncated);
		const char *held = lp_text_nothing_held(m, g->vt);
		fprintf(g->out,
			"<text class=\"title\" x=\"%d\" y=\"95\" text-anchor=\"middle\" "
			"fill=\"#888\">%s</text>\n</svg>\n",
			FG_WIDTH / 2, held ? held : "no samples");
		if (g->html)
			fputs("</body></html>\n", g->out);
	} else {
		int height = FG_TOP + (int)(g->maxdepth + 1) * FG_FH + FG_FOOT;
		double scale = (double)(FG_WIDTH - 2 * FG_PAD) / (double)g->total;
		put_header(g, height, title, sub, m->truncated);
		put_legend(g);
		fputs("<g id=\"fg-frames\">\n", g->out);
		for (size_t i = 0; i < g->norder; i++)
			put_box(g, g->order[i], scale);
		fprintf(g->out,
			"</g>\n<text id=\"fg-details\" x=\"%d\" y=\"%d\"> </text>\n"
			"<text id=\"fg-matched\" x=\"%d\" y=\"%d\" text-anchor=\"end\"></text>\n"
			"<script type=\"text/ecmascript\"><![CDATA[\n(function(){\n'use strict';\n"
			"var C={w:%d,pad:%d,fh:%d,top:%d,ty:%d,maxd:%" PRIu32 ",total:%" PRId64
			",cw:%.3f,hl:'%s'};\n",
			FG_PAD, height - 10, FG_WIDTH - FG_PAD, height - 10, FG_WIDTH, FG_PAD, FG_FH,
			FG_TOP, FG_TEXT_Y, g->maxdepth, g->total, FG_CHAR_W, FG_HILITE);
		for (size_t i = 0; script[i]; i++) {
			fputs(script[i], g->out);
			fputc('\n', g->out);
		}
		fputs("})();\n]]></script>\n</svg>\n", g->out);
		if (g->html)
			fputs("</body></html>\n", g->out);
	}
	free(title);
	free(sub);

	if (fflush(g->out) != 0 || ferror(g->out)) {
		rc = errno ? -errno : -EIO;
		snprintf(err, errlen, "flamegraph: write failed: %s", strerror(-rc));
		return rc;
	}
	return 0;
oom:
	free(title);
	free(sub);
	snprintf(err, errlen, "flamegraph: out of memory");
	return -ENOMEM;
}

int lp_render_flamegraph(const struct lp_profile *p, const struct lp_render_opts *o, FILE *out,
			 char *err, size_t errlen)
{
	struct fg g;
	memset(&g, 0, sizeof(g));
	g.out = out;
	g.p = p;
	g.html = o && o->html;
	errno = 0;
	int rc = render(&g, o, err, errlen);
	labels_free(&g.l);
	free(g.t.nodes);
	lp_iset_free(&g.t.index);
	free(g.order);
	return rc;
}
