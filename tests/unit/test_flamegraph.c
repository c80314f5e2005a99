/*
** Flame graph renderer tests: XML validity, box values and nesting, escaping, edge cases.
**
** Each rendering is parsed by python3's xml.dom.minidom (a real XML parser, so escaping
** bugs fail loudly); the parser prints one line per box that the checks below read.
*/
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/profile.h"
#include "report/render.h"
#include "unit.h"

/* -- Helpers ---------------------------------------------------------------- */

static const struct lp_value_type samples_t = { "samples", "count" };

static uint32_t frame(struct lp_profile *p, enum lp_frame_kind k, const char *name,
		      uint32_t line)
{
	struct lp_frame f = { .kind = k, .name = name, .line = line };
	uint32_t id = 0;
	CHECK(lp_profile_frame_id(p, &f, &id) == 0);
	return id;
}

static void add1(struct lp_profile *p, const uint32_t *fr, size_t n, int64_t v)
{
	CHECK(lp_profile_add(p, fr, n, &v) == 0);
}

/* Renders into memory; returns the document (caller frees) or NULL on error. */
static char *render(const struct lp_profile *p, const struct lp_render_opts *o, size_t *len)
{
	char *buf = NULL, err[256] = "";
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	if (!f)
		return NULL;
	struct lp_render_opts def = { 0 };
	int rc = lp_render_flamegraph(p, o ? o : &def, f, err, sizeof(err));
	fclose(f);
	if (rc) {
		fprintf(stderr, "  render failed: %d %s\n", rc, err);
		free(buf);
		return NULL;
	}
	if (len)
		*len = n;
	return buf;
}

struct box {
	double x, y, w;
	long long dx, dv;
	char *title;  /* whole <title>, newlines shown as " | " */
	char *text;   /* drawn (possibly truncated) label */
};

struct svg {
	int ok;                 /* parsed as XML */
	int width, height;
	char *head;             /* title and subtitle text, "\n"-joined */
	struct box *boxes;
	size_t nboxes;
};

/* Walks the parsed document; strings come out with tabs/newlines replaced so each record
 * is one tab-separated line. */
static const char parse_py[] =
	"import sys, xml.dom.minidom as M\n"
	"sys.stdout.reconfigure(encoding='utf-8')\n"
	"r = M.parse(sys.argv[1]).documentElement\n"
	"def tx(e): return ''.join(n.data for n in e.childNodes if n.nodeType == n.TEXT_NODE)\n"
	"def fl(s): return s.replace('\\t', ' ').replace('\\n', ' | ')\n"
	"print('SVG\\t%s\\t%s' % (r.getAttribute('width'), r.getAttribute('height')))\n"
	"for t in r.getElementsByTagName('text'):\n"
	"    if t.getAttribute('class') in ('title', 'sub'):\n"
	"        print('HEAD\\t' + fl(''.join(n.toxml() if n.nodeType != n.TEXT_NODE else n.data"
	" for n in t.childNodes)))\n"
	"for g in r.getElementsByTagName('g'):\n"
	"    if not g.hasAttribute('data-x'): continue\n"
	"    rc = g.getElementsByTagName('rect')[0]\n"
	"    print('BOX\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s' % (rc.getAttribute('x'),"
	" rc.getAttribute('y'), rc.getAttribute('width'), g.getAttribute('data-x'),"
	" g.getAttribute('data-v'), fl(tx(g.getElementsByTagName('title')[0])),"
	" fl(tx(g.getElementsByTagName('text')[0]))))\n";

static char *field(char **s)
{
	char *f = *s, *t = strchr(f, '\t');
	if (t) {
		*t = 0;
		*s = t + 1;
	} else {
		*s = f + strlen(f);
	}
	return f;
}

static void svg_parse(struct svg *s, const char *doc, size_t len)
{
	char path[] = "/tmp/test_flamegraph.XXXXXX", pypath[] = "/tmp/test_fgparse.XXXXXX";
	memset(s, 0, sizeof(*s));
	int fd = mkstemp(path), pfd = mkstemp(pypath);
	if (fd < 0 || pfd < 0) {
		CHECK(!"mkstemp");
		return;
	}
	CHECK(write(fd, doc, len) == (ssize_t)len);
	CHECK(write(pfd, parse_py, sizeof(parse_py) - 1) == (ssize_t)sizeof(parse_py) - 1);
	close(fd);
	close(pfd);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "python3 %s %s", pypath, path);
	FILE *f = popen(cmd, "r");
	CHECK(f != NULL);
	if (!f)
		return;
	char *line = NULL;
	size_t cap = 0, headlen = 0, boxcap = 0;
	ssize_t n;
	while ((n = getline(&line, &cap, f)) > 0) {
		if (line[n - 1] == '\n')
			line[n - 1] = 0;
		char *p = line, *tag = field(&p);
		if (strcmp(tag, "SVG") == 0) {
			s->width = atoi(field(&p));
			s->height = atoi(field(&p));
		} else if (strcmp(tag, "HEAD") == 0) {
			size_t l = strlen(p);
			s->head = realloc(s->head, headlen + l + 2);
			memcpy(s->head + headlen, p, l);
			headlen += l;
			s->head[headlen++] = '\n';
			s->head[headlen] = 0;
		} else if (strcmp(tag, "BOX") == 0) {
			if (s->nboxes == boxcap) {
				boxcap = boxcap ? boxcap * 2 : 64;
				s->boxes = realloc(s->boxes, boxcap * sizeof(*s->boxes));
			}
			struct box *b = &s->boxes[s->nboxes++];
			b->x = atof(field(&p));
			b->y = atof(field(&p));
			b->w = atof(field(&p));
			b->dx = atoll(field(&p));
			b->dv = atoll(field(&p));
			b->title = strdup(field(&p));
			b->text = strdup(field(&p));
		}
	}
	free(line);
	s->ok = pclose(f) == 0 && s->width > 0;
	unlink(path);
	unlink(pypath);
}

static void svg_free(struct svg *s)
{
	for (size_t i = 0; i < s->nboxes; i++) {
		free(s->boxes[i].title);
		free(s->boxes[i].text);
	}
	free(s->boxes);
	free(s->head);
}

/* p rendered with the default options and parsed into *s (an empty document when the
 * rendering failed), checked to be well formed: the document, freed after svg_free, or
 * NULL after a failed check. */
static char *render_parsed(const struct lp_profile *p, struct svg *s)
{
	size_t len = 0;
	char *doc = render(p, NULL, &len);
	CHECK(doc != NULL);
	svg_parse(s, doc ? doc : "", len);
	CHECK(s->ok);
	return doc;
}

/* The box whose title starts with `prefix` (the n-th such, from 0), or NULL. */
static const struct box *find(const struct svg *s, const char *prefix, int nth)
{
	for (size_t i = 0; i < s->nboxes; i++)
		if (strncmp(s->boxes[i].title, prefix, strlen(prefix)) == 0 && nth-- == 0)
			return &s->boxes[i];
	return NULL;
}

/* Every non-root box lies within a box one row below it (flame layout: parent below). */
static int nested(const struct svg *s)
{
	for (size_t i = 1; i < s->nboxes; i++) {
		const struct box *b = &s->boxes[i];
		int found = 0;
		for (size_t j = 0; j < s->nboxes && !found; j++) {
			const struct box *q = &s->boxes[j];
			found = q->y == b->y + 16 && q->x <= b->x + 0.011 &&
				q->x + q->w >= b->x + b->w - 0.011 && q->dx <= b->dx &&
				q->dx + q->dv >= b->dx + b->dv && q->dv >= b->dv;
		}
		if (!found) {
			fprintf(stderr, "  box %zu (%s) has no enclosing parent\n", i, b->title);
			return 0;
		}
	}
	return 1;
}

/* -- Fixtures --------------------------------------------------------------- */

/*
 *   main > fib:3 > fib:3 > pcall > lj_gc_step   30
 *   main > fib:3 > fib:5                         20
 *   main > TRACE [3] @loop.lua:7                 25
 *   main > string.format > lj_str_new            10
 *   GC                                           10
 *   INTERNAL                                      5
 */
static struct lp_profile *demo(int reversed)
{
	struct lp_profile *p = lp_profile_new(1, &samples_t);
	uint32_t m = frame(p, LP_FK_LUA, "@main.lua", 1);
	uint32_t f3 = frame(p, LP_FK_LUA, "@fib.lua", 3);
	uint32_t f5 = frame(p, LP_FK_LUA, "@fib.lua", 5);
	uint32_t pc = frame(p, LP_FK_FFUNC, "pcall", 0);
	uint32_t gs = frame(p, LP_FK_C, "lj_gc_step", 0);
	struct lp_frame tf = { .kind = LP_FK_TRACE, .name = "@loop.lua", .line = 7, .traceno = 3 };
	uint32_t tr;
	CHECK(lp_profile_frame_id(p, &tf, &tr) == 0);
	uint32_t sf = frame(p, LP_FK_FFUNC, "string.format", 0);
	uint32_t sn = frame(p, LP_FK_C, "lj_str_new", 0);
	uint32_t gc = frame(p, LP_FK_VMSTATE, "GC", 0);
	uint32_t in = frame(p, LP_FK_INTERNAL, "INTERNAL", 0);
	struct {
		uint32_t fr[5];
		size_t n;
		int64_t v;
	} st[] = {
		{ { m, f3, f3, pc, gs }, 5, 30 }, { { m, f3, f5 }, 3, 20 }, { { m, tr }, 2, 25 },
		{ { m, sf, sn }, 3, 10 },         { { gc }, 1, 10 },        { { in }, 1, 5 },
	};
	size_t ns = sizeof(st) / sizeof(st[0]);
	for (size_t i = 0; i < ns; i++) {
		size_t k = reversed ? ns - 1 - i : i;
		add1(p, st[k].fr, st[k].n, st[k].v);
	}
	struct lp_profile_meta *meta = lp_profile_meta(p);
	meta->source = "demo.lpf";
	meta->event = "cpu";
	meta->samples = 102;
	meta->dropped = 2;
	return p;
}

/* -- Tests ------------------------------------------------------------------ */

static void test_boxes_values_nesting(void)
{
	struct lp_profile *p = demo(0);
	struct svg s;
	char *doc = render_parsed(p, &s);
	if (!doc)
		return;
	CHECK_EQ(s.width, 1200);
	CHECK_EQ(s.nboxes, 12);  /* all + 11 tree nodes (fib:3 appears twice) */
	/* depth 5 frames + root = 6 rows */
	CHECK_EQ(s.height, 76 + 6 * 16 + 30);
	CHECK(s.head && strstr(s.head, "luaprof: demo.lpf (CPU)"));
	CHECK(s.head && strstr(s.head, "Total: 100 samples"));
	CHECK(s.head && strstr(s.head, "102 samples, 2 dropped"));
	CHECK(s.head && !strstr(s.head, "elided"));

	static const char *const want[] = {
		"all (100 samples, 100.00%)",
		"@main.lua:1 (85 samples, 85.00%) | Lua",
		"@fib.lua:3 (50 samples, 50.00%) | Lua",
		"@fib.lua:5 (20 samples, 20.00%) | Lua",
		"pcall (30 samples, 30.00%) | builtin",
		"lj_gc_step (30 samples, 30.00%) | C",
		"TRACE [3] @loop.lua:7 (25 samples, 25.00%) | JIT trace",
		"string.format (10 samples, 10.00%) | builtin",
		"lj_str_new (10 samples, 10.00%) | C",
		"GC (10 samples, 10.00%) | VM state",
		"INTERNAL (5 samples, 5.00%) | internal",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const struct box *b = find(&s, want[i], 0);
		if (!b)
			fprintf(stderr, "  missing box: %s\n", want[i]);
		CHECK(b != NULL);
	}
	/* fib:3 recursion: the inner box has 30, the outer 50, and sits on top of it */
	const struct box *outer = find(&s, "@fib.lua:3 (50", 0);
	const struct box *inner = find(&s, "@fib.lua:3 (30", 0);
	CHECK(outer && inner && inner->y == outer->y - 16 && inner->x == outer->x);
	/* widths are proportional: 1180 px for 100 samples */
	const struct box *root = find(&s, "all ", 0);
	CHECK(root && root->x == 10 && root->w == 1180 && root->dv == 100);
	CHECK(outer && outer->w == 590 && outer->dv == 50);
	CHECK(nested(&s));
	/* siblings alphabetical: "@main.lua:1" < "GC" < "INTERNAL"; under main, "@fib" <
	 * "TRACE" < "string.format" */
	const struct box *bm = find(&s, "@main", 0), *bg = find(&s, "GC ", 0),
			 *bi = find(&s, "INTERNAL", 0), *bt = find(&s, "TRACE", 0),
			 *bs = find(&s, "string.format", 0);
	CHECK(bm && bg && bi && bm->x < bg->x && bg->x < bi->x);
	CHECK(outer && bt && bs && outer->x < bt->x && bt->x < bs->x);
	CHECK(bm && bm->dx == 0 && bg && bg->dx == 85 && bi && bi->dx == 95);
	/* wide enough boxes show their full label */
	CHECK(bt && strcmp(bt->text, "TRACE [3] @loop.lua:7") == 0);
	/* legend lists the kinds present and the script is embedded */
	CHECK(strstr(doc, ">JIT trace</text>") && strstr(doc, ">internal</text>"));
	CHECK(strstr(doc, "<script") && strstr(doc, "Reset Zoom") && strstr(doc, "Search"));
	CHECK(!strstr(doc, "http://") || strstr(doc, "xmlns=\"http://www.w3.org/2000/svg\""));
	svg_free(&s);
	free(doc);
	lp_profile_free(p);
}

static void test_deterministic(void)
{
	struct lp_profile *a = demo(0), *b = demo(1);
	char *da = render(a, NULL, NULL), *da2 = render(a, NULL, NULL), *db = render(b, NULL, NULL);
	CHECK(da && da2 && db);
	if (da && da2 && db) {
		CHECK(strcmp(da, da2) == 0);
		CHECK(strcmp(da, db) == 0);  /* insertion order does not matter */
	}
	free(da);
	free(da2);
	free(db);
	lp_profile_free(a);
	lp_profile_free(b);
}

static void test_escaping(void)
{
	struct lp_profile *p = lp_profile_new(1, &samples_t);
	static const char *const names[] = {
		"<script>alert(1)</script>",
		"a&b \"q\" 'q' ]]> --> <!--",
		"line1\nline2\ttab\r\x01\x1f\x7f",
		"bad\xff\xfe utf8 \xc0\x80 overlong \xed\xa0\x80 surrogate \xf4\x90\x80\x80 big",
		"trunc\xe2\x82",
		"nonchar \xef\xbf\xbe \xef\xbf\xbf",
		"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\xa5 ok",
	};
	size_t nn = sizeof(names) / sizeof(names[0]);
	for (size_t i = 0; i < nn; i++) {
		struct lp_frame f = { .kind = LP_FK_C, .name = names[i],
				      .file = i == 0 ? "/lib/<x>&\xff.so" : NULL };
		uint32_t id;
		CHECK(lp_profile_frame_id(p, &f, &id) == 0);
		add1(p, &id, 1, 10);
	}
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->source = "src<&>\xff.lpf";
	m->title = "cmd ]]> \"x\"\n";
	struct svg s;
	char *doc = render_parsed(p, &s);
	if (!doc)
		return;
	CHECK_EQ(s.nboxes, nn + 1);
	CHECK(find(&s, "<script>alert(1)</script> (10 samples, 14.29%) | C | /lib/<x>&\xef\xbf\xbd.so",
		   0));
	CHECK(find(&s, "a&b \"q\" 'q' ]]> --> <!-- (10 samples", 0));
	CHECK(find(&s, "line1\xef\xbf\xbdline2\xef\xbf\xbdtab\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
		       "\xef\xbf\xbd (10",
		   0));
	CHECK(find(&s, "bad\xef\xbf\xbd\xef\xbf\xbd utf8 \xef\xbf\xbd\xef\xbf\xbd overlong", 0));
	CHECK(find(&s, "trunc\xef\xbf\xbd (10", 0));
	CHECK(find(&s, "nonchar \xef\xbf\xbd \xef\xbf\xbd (10", 0));
	CHECK(find(&s, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\xa5 ok (10", 0));
	CHECK(s.head && strstr(s.head, "luaprof: src<&>\xef\xbf\xbd.lpf"));
	CHECK(s.head && strstr(s.head, "cmd ]]> \"x\"\xef\xbf\xbd"));
	/* no raw markup leaked from the names */
	CHECK(!strstr(doc, "<script>alert"));
	CHECK(nested(&s));
	svg_free(&s);
	free(doc);
	lp_profile_free(p);
}

static void test_truncated_labels(void)
{
	/* a long multibyte name in a narrow box is cut on a code point boundary */
	struct lp_profile *p = lp_profile_new(1, &samples_t);
	uint32_t a = frame(p, LP_FK_C, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
				       "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9",
			   0);
	uint32_t b = frame(p, LP_FK_C, "wide", 0);
	add1(p, &a, 1, 6);  /* 6% of 1180 px = 70.8 px: 8 characters fit */
	add1(p, &b, 1, 94);
	size_t len;
	char *doc = render(p, NULL, &len);
	struct svg s;
	svg_parse(&s, doc ? doc : "", doc ? len : 0);
	CHECK(s.ok);
	const struct box *bx = find(&s, "\xc3\xa9", 0);
	CHECK(bx && strcmp(bx->text, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9..") == 0);
	svg_free(&s);
	free(doc);
	lp_profile_free(p);
}

static void test_empty(void)
{
	struct lp_profile *p = lp_profile_new(1, &samples_t);
	lp_profile_meta(p)->source = "empty.lpf";
	struct svg s;
	char *doc = render_parsed(p, &s);
	if (!doc)
		return;
	CHECK_EQ(s.nboxes, 0);
	CHECK(s.head && strstr(s.head, "luaprof: empty.lpf"));
	CHECK(s.head && strstr(s.head, "Total: 0 samples"));
	CHECK(strstr(doc, ">no samples</text>") != NULL);
	svg_free(&s);
	free(doc);

	/* stacks whose values are all zero or negative draw nothing either */
	uint32_t f = frame(p, LP_FK_LUA, "@x.lua", 1);
	add1(p, &f, 1, 0);
	add1(p, (uint32_t[]){ f, f }, 2, -5);
	doc = render_parsed(p, &s);
	CHECK_EQ(s.nboxes, 0);
	CHECK(doc && strstr(doc, ">no samples</text>"));
	CHECK(s.head && strstr(s.head, "1 stack with negative values not drawn"));
	/* nothing is laid out, so nothing is elided either (it said "1 frame narrower") */
	CHECK(s.head && !strstr(s.head, "elided"));
	svg_free(&s);
	free(doc);
	lp_profile_free(p);
}

static void test_deep_stack(void)
{
	enum { DEPTH = 4000 };
	struct lp_profile *p = lp_profile_new(1, &samples_t);
	static uint32_t fr[DEPTH];
	char name[32];
	for (int i = 0; i < DEPTH; i++) {
		snprintf(name, sizeof(name), "@deep%d.lua", i % 7);
		fr[i] = frame(p, LP_FK_LUA, name, (uint32_t)i % 100 + 1);
	}
	add1(p, fr, DEPTH, 3);
	add1(p, fr, DEPTH / 2, 1);
	struct svg s;
	char *doc = render_parsed(p, &s);
	if (!doc)
		return;
	CHECK_EQ(s.nboxes, DEPTH + 1);
	CHECK_EQ(s.height, 76 + (DEPTH + 1) * 16 + 30);
	/* the topmost box is the leaf with 3 of 4 samples, at the top row */
	const struct box *top = &s.boxes[s.nboxes - 1];
	CHECK(top->y == 76 && top->dv == 3 && strstr(top->title, "(3 samples, 75.00%)"));
	svg_free(&s);
	free(doc);
	lp_profile_free(p);
}

/* A stack deeper than the profile keeps (a crafted or Tarantool stream): its innermost
 * LP_PROFILE_MAX_DEPTH frames, counted as cut and said so in the subtitle. */
static void test_deep_stack_cut(void)
{
	enum { DEPTH = LP_PROFILE_MAX_DEPTH + 1000 };
	struct lp_profile *p = lp_profile_new(1, &samples_t);
	static uint32_t fr[DEPTH];
	for (int i = 0; i < DEPTH; i++)
		fr[i] = frame(p, LP_FK_LUA, "@cut.lua", (uint32_t)i + 1);
	add1(p, fr, DEPTH, 2);
	CHECK_EQ(lp_profile_meta(p)->cut, 1);
	CHECK_EQ(lp_profile_nstacks(p), 1);
	struct svg s;
	char *doc = render_parsed(p, &s);
	if (!doc)
		return;
	CHECK_EQ(s.nboxes, LP_PROFILE_MAX_DEPTH + 1);
	/* the leaf is the innermost frame; the outermost kept is 1000 frames up from the root */
	CHECK(strstr(s.boxes[s.nboxes - 1].title, "@cut.lua:5096 "));
	CHECK(strstr(s.boxes[1].title, "@cut.lua:1001 "));
	CHECK(s.head && strstr(s.head, "| 1 with stacks cut short"));
	svg_free(&s);
	free(doc);
	lp_profile_free(p);
}

static void test_elision(void)
{
	/* one stack of 10000 and 3000 distinct 1-sample leaves: 13000 total, so each leaf is
	 * 0.0077% < 0.1% and is dropped, together with its child */
	struct lp_profile *p = lp_profile_new(1, &samples_t);
	uint32_t main_ = frame(p, LP_FK_LUA, "@main.lua", 1);
	uint32_t big = frame(p, LP_FK_C, "big", 0);
	uint32_t kid = frame(p, LP_FK_C, "kid", 0);
	add1(p, (uint32_t[]){ main_, big }, 2, 10000);
	char name[32];
	for (int i = 0; i < 3000; i++) {
		snprintf(name, sizeof(name), "small%d", i);
		uint32_t f = frame(p, LP_FK_C, name, 0);
		add1(p, (uint32_t[]){ main_, f, kid }, 3, 1);
	}
	size_t len;
	char *doc = render(p, NULL, &len);
	struct svg s;
	svg_parse(&s, doc ? doc : "", doc ? len : 0);
	CHECK(s.ok);
	CHECK_EQ(s.nboxes, 3);  /* all, main, big */
	CHECK(s.head && strstr(s.head, "6000 frames narrower than 0.1% elided"));
	CHECK(find(&s, "@main.lua:1 (13000 samples, 100.00%)", 0));
	CHECK(find(&s, "big (10000 samples, 76.92%)", 0));
	CHECK_EQ(s.height, 76 + 3 * 16 + 30);
	svg_free(&s);
	free(doc);
	lp_profile_free(p);
}

static void test_bytes_and_options(void)
{
	static const struct lp_value_type t[2] = { { "alloc_objects", "count" },
						   { "alloc_space", "bytes" } };
	struct lp_profile *p = lp_profile_new(2, t);
	uint32_t a = frame(p, LP_FK_LUA, "@alloc.lua", 4);
	uint32_t b = frame(p, LP_FK_INTERNAL, "INTERNAL", 0);
	uint32_t c = frame(p, LP_FK_C, "lj_alloc_malloc", 0);
	CHECK(lp_profile_add(p, &a, 1, (int64_t[]){ 3, 1536 * 1024 }) == 0);
	CHECK(lp_profile_add(p, &b, 1, (int64_t[]){ 1, 3 * 1048576 }) == 0);
	CHECK(lp_profile_add(p, &c, 1, (int64_t[]){ 0, 20480 }) == 0);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->source = "mem.lpf";
	m->event = "memory";
	m->samples = 4;
	m->truncated = 1;
	struct lp_render_opts o = { .value = 1, .title = "My <title>" };
	size_t len;
	char *doc = render(p, &o, &len);
	struct svg s;
	svg_parse(&s, doc ? doc : "", doc ? len : 0);
	CHECK(s.ok);
	CHECK(s.head && strstr(s.head, "My <title>"));
	CHECK(s.head && !strstr(s.head, "luaprof: mem.lpf"));
	CHECK(s.head && strstr(s.head, "Total alloc_space: 4.5 MiB (4739072 bytes)"));
	CHECK(s.head && strstr(s.head, "4 events, 0 dropped"));
	CHECK(s.head && strstr(s.head, "WARNING: stream truncated"));
	CHECK(find(&s, "@alloc.lua:4 (1.5 MiB, 33.19%) | Lua", 0));
	CHECK(find(&s, "INTERNAL (3.0 MiB, 66.38%) | internal", 0));
	CHECK(find(&s, "lj_alloc_malloc (20.0 KiB, 0.43%) | C", 0));
	svg_free(&s);
	free(doc);

	o.value = 0;
	o.title = NULL;
	doc = render(p, &o, &len);
	svg_parse(&s, doc ? doc : "", doc ? len : 0);
	CHECK(s.ok);
	CHECK(find(&s, "@alloc.lua:4 (3 alloc_objects, 75.00%)", 0));
	CHECK(s.head && strstr(s.head, "luaprof: mem.lpf (memory, every event)"));
	svg_free(&s);
	free(doc);

	/* An empty title is no title: the default, not an empty heading. */
	o.title = "";
	doc = render(p, &o, &len);
	svg_parse(&s, doc ? doc : "", doc ? len : 0);
	CHECK(s.ok);
	CHECK(s.head && strstr(s.head, "luaprof: mem.lpf (memory, every event)"));
	svg_free(&s);
	free(doc);
	o.title = NULL;

	/* A sampled profile says so, with its interval, and counts samples, not events. */
	m->event = "memory (sampled)";
	m->period_bytes = 524288;
	doc = render(p, &o, &len);
	svg_parse(&s, doc ? doc : "", doc ? len : 0);
	CHECK(s.ok);
	CHECK(s.head && strstr(s.head, "luaprof: mem.lpf (memory, sampled)"));
	CHECK(s.head && strstr(s.head, "4 sampled allocations, 0 dropped, one per 512 KiB allocated"));
	CHECK(s.head && !strstr(s.head, "events"));
	svg_free(&s);
	free(doc);

	char err[128] = "";
	o.value = 2;
	FILE *f = tmpfile();
	CHECK_EQ(lp_render_flamegraph(p, &o, f, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "column") != NULL);
	fclose(f);
	lp_profile_free(p);
}

/* One of a unit is singular wherever a count is printed with it: "(1 byte)", "1 sample". */
static void test_singular(void)
{
	static const struct lp_value_type t[2] = { { "samples", "count" },
						   { "alloc_space", "bytes" } };
	struct lp_profile *p = lp_profile_new(2, t);
	uint32_t a = frame(p, LP_FK_LUA, "@one.lua", 1);
	CHECK(lp_profile_add(p, &a, 1, (int64_t[]){ 1, 1 }) == 0);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->event = "cpu";
	m->samples = 1;
	struct lp_render_opts o = { .value = 1 };
	size_t len;
	char *doc = render(p, &o, &len);
	struct svg s;
	svg_parse(&s, doc ? doc : "", doc ? len : 0);
	CHECK(s.ok);
	CHECK(s.head && strstr(s.head, "Total alloc_space: 1 B (1 byte) |"));
	CHECK(s.head && strstr(s.head, "1 sample, 0 dropped"));
	svg_free(&s);
	free(doc);
	o.value = 0;
	doc = render(p, &o, &len);
	svg_parse(&s, doc ? doc : "", doc ? len : 0);
	CHECK(s.ok);
	CHECK(s.head && strstr(s.head, "Total: 1 sample |"));
	CHECK(find(&s, "@one.lua:1 (1 sample, 100.00%)", 0));
	svg_free(&s);
	free(doc);
	lp_profile_free(p);
}

/* Lua frames that read the same, one line of a chunk in two functions (a closure made on
 * the line that runs it), are one box with their children merged, as flamegraph.pl draws
 * the collapsed stacks; an exact memory profile had two roots named @app.lua:17. C frames
 * of one name in two objects stay apart. */
static void test_same_line_one_box(void)
{
	struct lp_profile *p = lp_profile_new(1, &samples_t);
	struct lp_frame f = { .kind = LP_FK_LUA, .name = "@app.lua", .line = 17 };
	uint32_t main17 = 0, clos17 = 0, c1 = 0, c2 = 0;
	CHECK(lp_profile_frame_id(p, &f, &main17) == 0);
	f.fline = 17;
	CHECK(lp_profile_frame_id(p, &f, &clos17) == 0);
	CHECK(main17 != clos17);
	struct lp_frame c = { .kind = LP_FK_C, .name = "init", .file = "/lib/a.so", .addr = 1 };
	CHECK(lp_profile_frame_id(p, &c, &c1) == 0);
	c.file = "/lib/b.so";
	c.addr = 2;
	CHECK(lp_profile_frame_id(p, &c, &c2) == 0);
	uint32_t leaf = frame(p, LP_FK_C, "malloc", 0);
	add1(p, &main17, 1, 5);
	add1(p, &clos17, 1, 3);
	add1(p, (uint32_t[]){ main17, leaf }, 2, 2);
	add1(p, (uint32_t[]){ clos17, leaf }, 2, 1);
	add1(p, &c1, 1, 4);
	add1(p, &c2, 1, 6);
	struct svg s;
	char *doc = render_parsed(p, &s);
	CHECK(find(&s, "@app.lua:17 (11 samples", 0) != NULL);
	CHECK(find(&s, "@app.lua:17", 1) == NULL);
	CHECK(find(&s, "malloc (3 samples", 0) != NULL);
	CHECK(find(&s, "malloc", 1) == NULL);
	CHECK(find(&s, "init (4 samples", 0) != NULL || find(&s, "init (4 samples", 1) != NULL);
	CHECK(find(&s, "init", 1) != NULL);
	CHECK(nested(&s));
	svg_free(&s);
	free(doc);
	lp_profile_free(p);
}

/* A --clock wall profile's samples are elapsed time, sleeps included: not called CPU. */
static void test_wall_clock(void)
{
	struct lp_profile *p = demo(0);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->period_ns = 10000000;
	struct svg s;
	char *doc = render_parsed(p, &s);
	CHECK(s.head && strstr(s.head, "luaprof: demo.lpf (CPU)"));
	CHECK(s.head && strstr(s.head, "every 10.0 ms") && !strstr(s.head, "wall"));
	svg_free(&s);
	free(doc);
	m->wall_clock = 1;
	doc = render_parsed(p, &s);
	CHECK(s.head && strstr(s.head, "luaprof: demo.lpf (wall clock)"));
	CHECK(s.head && !strstr(s.head, "(CPU)"));
	CHECK(s.head && strstr(s.head, "every 10.0 ms of wall-clock time"));
	svg_free(&s);
	free(doc);
	lp_profile_free(p);
}

static void test_write_error(void)
{
	struct lp_profile *p = demo(0);
	FILE *f = fopen("/dev/full", "w");
	CHECK(f != NULL);
	if (f) {
		char err[128] = "";
		int rc = lp_render_flamegraph(p, &(struct lp_render_opts){ 0 }, f, err, sizeof(err));
		CHECK_EQ(rc, -ENOSPC);
		CHECK(strstr(err, "write failed") != NULL);
		fclose(f);
	}
	lp_profile_free(p);
}

/* An in-use graph of a memory profile whose sampled allocations were all freed says so
 * where an empty graph says "no samples" (under "525 sampled allocations"). */
static void test_nothing_held(void)
{
	static const struct lp_value_type types[] = {
		{ "alloc_space", "bytes" }, { "inuse_space", "bytes" }
	};
	struct lp_profile *p = lp_profile_new(2, types);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->source = "mem.bin";
	m->event = "memory (sampled)";
	m->samples = 2;
	uint32_t a = frame(p, LP_FK_LUA, "@a.lua", 3);
	CHECK(lp_profile_add(p, &a, 1, (int64_t[]){ 4096, 0 }) == 0);
	struct lp_render_opts o = { .value = 1 };
	char *doc = render(p, &o, NULL);
	CHECK(doc && strstr(doc, ">Nothing still held: every sampled allocation was freed "
				 "before the profile stopped.</text>"));
	CHECK(doc && !strstr(doc, ">no samples</text>"));
	free(doc);
	lp_profile_free(p);
}

/* A frame with all samples but one in 100,000: its tooltip read 100.00%, taken for all of
 * them (the text reports' rule: >99.99%); the whole ("all") stays 100.00%. */
static void test_near_whole_share(void)
{
	struct lp_profile *p = lp_profile_new(1, &samples_t);
	uint32_t hot = frame(p, LP_FK_C, "hot", 0), rare = frame(p, LP_FK_C, "rare", 0);
	add1(p, &hot, 1, 99999);
	add1(p, &rare, 1, 1);
	char *doc = render(p, NULL, NULL);
	CHECK(doc && strstr(doc, "<title>hot (99999 samples, >99.99%)") &&
	      strstr(doc, "<title>all (100000 samples, 100.00%)"));
	free(doc);
	lp_profile_free(p);
}

int main(void)
{
	RUN(test_near_whole_share);
	RUN(test_boxes_values_nesting);
	RUN(test_deterministic);
	RUN(test_escaping);
	RUN(test_truncated_labels);
	RUN(test_empty);
	RUN(test_deep_stack);
	RUN(test_deep_stack_cut);
	RUN(test_elision);
	RUN(test_bytes_and_options);
	RUN(test_singular);
	RUN(test_same_line_one_box);
	RUN(test_wall_clock);
	RUN(test_write_error);
	RUN(test_nothing_held);
	return UNIT_RESULT();
}
