/*
** Reading a whole profile file into aggregates.
*/
#include "report/load.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "util/grow.h"

struct ctx {
	struct lp_input *in;
	struct lp_loaded *l;
	const struct lp_sysprof_opts *so;
	lp_load_progress_fn progress;
	void *pctx;
	unsigned countdown;
	/* Host addresses that only luaprof's agent writes (agent_stack), which always ends
	 * its CPU stream with an extension; and whether the stream names C code at keyed
	 * addresses (a 48-bit address space: there they are real addresses). */
	int agent_stack, high_cfunc;
};

static void tick(struct ctx *c)
{
	if (c->progress && --c->countdown == 0) {
		c->countdown = LP_LOAD_PROGRESS_EVENTS;
		c->progress(c->pctx, lp_input_offset(c->in));
	}
}

static int nomem(struct ctx *c)
{
	lp_input_fail(c->in, LP_ERR_NOMEM, lp_input_offset(c->in), "out of memory");
	return 1;
}

static int on_stream(void *p, enum lp_stream_kind kind, unsigned version)
{
	struct ctx *c = p;
	c->l->kind = kind;
	c->l->version = version;
	if (kind == LP_STREAM_MEMPROF)
		c->l->mem = lp_memprof_new(c->l->st);
	else
		c->l->sys = lp_sysprof_new(c->l->st, c->so);
	return c->l->mem || c->l->sys ? 0 : nomem(c);
}

static int on_sym_lua(void *p, uint64_t addr, const char *chunk, size_t len, uint64_t line)
{
	struct ctx *c = p;
	const struct lp_sym_lua *old = c->l->sys ? lp_symtab_lua(c->l->st, addr) : NULL;
	if (old && lp_sysprof_lua_replaced(c->l->sys, addr, old))
		return nomem(c);
	return lp_symtab_add_lua(c->l->st, addr, chunk, len, line) ? nomem(c) : 0;
}

static int on_sym_cfunc(void *p, uint64_t addr, const char *name, size_t len)
{
	struct ctx *c = p;
	c->high_cfunc |= LP_HOST_KEYED(addr);
	return lp_symtab_add_cfunc(c->l->st, addr, name, len) ? nomem(c) : 0;
}

static int on_sym_trace(void *p, uint64_t traceno, uint64_t addr, uint64_t line)
{
	struct ctx *c = p;
	return lp_symtab_add_trace(c->l->st, traceno, addr, line) ? nomem(c) : 0;
}

static int on_mem(void *p, const struct lp_mem_event *ev)
{
	struct ctx *c = p;
	tick(c);
	return lp_memprof_event(c->l->mem, ev) ? nomem(c) : 0;
}

/*
** Whether a host address is one only luaprof's agent writes: the mark of a stack it cut
** short, or trace code keyed by its trace (LP_HOST_KEYED; the kernel's half of the address
** space, as a vsyscall page's, is not a key).
*/
static int agent_only(uint64_t addr)
{
	return addr == LP_HOST_CUT || (LP_HOST_KEYED(addr) && addr >> LP_HOST_KEY_SHIFT != 0x1ffff);
}

static int on_sys(void *p, const struct lp_sys_sample *s)
{
	struct ctx *c = p;
	tick(c);
	for (size_t i = 0; i < s->nhost && !c->agent_stack; i++)
		c->agent_stack = agent_only(s->host[i]);
	return lp_sysprof_sample(c->l->sys, s) ? nomem(c) : 0;
}

static int on_ext_map(void *p, uint64_t start, uint64_t end, uint64_t offset,
		      const char *path, const uint8_t *build_id, size_t build_id_len)
{
	struct ctx *c = p;
	return lp_symtab_add_map(c->l->st, start, end, offset, path) ? nomem(c) : 0;
}

static int on_ext_csize(void *p, uint64_t addr, uint64_t size)
{
	struct ctx *c = p;
	lp_symtab_set_csize(c->l->st, addr, size);
	return 0;
}

static int on_ext_cname(void *p, uint64_t addr, const char *name, size_t len)
{
	struct ctx *c = p;
	return lp_symtab_set_cname(c->l->st, addr, name, len) ? nomem(c) : 0;
}

/* Where stack records go: the CPU aggregator, or for a memory stream the sampled one. */
static struct lp_sysprof *stacks_of(struct ctx *c)
{
	if (c->l->sys)
		return c->l->sys;
	if (c->l->mem && !c->l->msamp)
		c->l->msamp = lp_sysprof_new_memory(c->l->st);
	return c->l->msamp;
}

static int on_ext_stack(void *p, uint64_t id, const struct lp_lua_frame *lua, size_t nlua,
			const uint64_t *host, size_t nhost)
{
	struct ctx *c = p;
	if (!c->l->sys && !c->l->mem)
		return 0;
	struct lp_sysprof *s = stacks_of(c);
	if (!s || lp_sysprof_stack(s, id, lua, nlua, host, nhost))
		return nomem(c);
	return 0;
}

static int on_ext_asample(void *p, uint64_t id, uint64_t size, int live, uint64_t count)
{
	struct ctx *c = p;
	if (!c->l->mem)
		return 0;
	struct lp_sysprof *s = stacks_of(c);
	if (!s || lp_sysprof_asample(s, id, size, live, count))
		return nomem(c);
	c->l->sampled = 1;
	return 0;
}

static int on_ext_astate(void *p, uint64_t id, unsigned vmstate)
{
	struct ctx *c = p;
	if (!c->l->mem)
		return 0;
	struct lp_sysprof *s = stacks_of(c);
	if (!s || lp_sysprof_astate(s, id, vmstate))
		return nomem(c);
	return 0;
}

static int on_ext_tsample(void *p, uint64_t ordinal, uint64_t id)
{
	struct ctx *c = p;
	if (!c->l->sys)
		return 0;
	return lp_sysprof_tsample(c->l->sys, ordinal, id) ? nomem(c) : 0;
}

static int on_ext_tcode(void *p, uint64_t traceno, uint64_t addr, uint64_t size)
{
	struct ctx *c = p;
	return lp_symtab_add_tcode(c->l->st, traceno, addr, size) ? nomem(c) : 0;
}

static int on_ext_kcode(void *p, uint64_t traceno, uint64_t key, uint64_t size,
			uint64_t proto, uint64_t line)
{
	struct ctx *c = p;
	return lp_symtab_add_kcode(c->l->st, traceno, key, size, proto, line) ? nomem(c) : 0;
}

static int on_ext_gsample(void *p, uint64_t ordinal, uint64_t id)
{
	struct ctx *c = p;
	if (!c->l->sys)
		return 0;
	return lp_sysprof_gsample(c->l->sys, ordinal, id) ? nomem(c) : 0;
}

static int on_ext_jsample(void *p, uint64_t ordinal, uint64_t id)
{
	struct ctx *c = p;
	if (!c->l->sys)
		return 0;
	return lp_sysprof_jsample(c->l->sys, ordinal, id) ? nomem(c) : 0;
}

static int on_ext_xsample(void *p, uint64_t ordinal, uint64_t id)
{
	struct ctx *c = p;
	if (!c->l->sys)
		return 0;
	return lp_sysprof_xsample(c->l->sys, ordinal, id) ? nomem(c) : 0;
}

/* The numeric facts of lp_record_facts, by meta key. */
static uint64_t *fact_of(struct lp_record_facts *f, const char *key)
{
	static const struct { const char *key; size_t off; } keys[] = {
		{ "duration_ns", offsetof(struct lp_record_facts, duration_ns) },
		{ "overruns", offsetof(struct lp_record_facts, overruns) },
		{ "truncated", offsetof(struct lp_record_facts, truncated) },
		{ "paced", offsetof(struct lp_record_facts, paced) },
		{ "events", offsetof(struct lp_record_facts, events) },
		{ "samples", offsetof(struct lp_record_facts, samples) },
		{ "samples_lost", offsetof(struct lp_record_facts, samples_lost) },
		{ "sample_bytes", offsetof(struct lp_record_facts, sample_bytes) },
		{ "sample_ns", offsetof(struct lp_record_facts, sample_ns) },
		{ "thread_cpu_ns", offsetof(struct lp_record_facts, thread_cpu_ns) },
		{ "process_cpu_ns", offsetof(struct lp_record_facts, process_cpu_ns) },
		{ "run_delay_ns", offsetof(struct lp_record_facts, run_delay_ns) },
		{ "signal_taken_ns", offsetof(struct lp_record_facts, signal_taken_ns) },
		{ "signal", offsetof(struct lp_record_facts, signal) },
		{ "trace_stacks_lost", offsetof(struct lp_record_facts, trace_stacks_lost) },
		{ "lua_elsewhere", offsetof(struct lp_record_facts, lua_elsewhere) },
		{ "agent_ticks", offsetof(struct lp_record_facts, agent_ticks) },
	};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!strcmp(key, keys[i].key))
			return (uint64_t *)((char *)f + keys[i].off);
	return NULL;
}

/* Unknown keys are facts for newer readers, not errors. */
/* Meta stopped_by: program (an API call), exit, close (lua_close), signal. */
static void stopped_by(struct lp_record_facts *f, const char *value)
{
	f->stopped_by_program = !strcmp(value, "program");
	f->stopped_by_close = !strcmp(value, "close");
}

static int on_ext_meta(void *p, const char *key, const char *value)
{
	struct ctx *c = p;
	struct lp_loaded *l = c->l;
	if (lp_grow((void **)&l->meta, &l->metacap, l->nmeta + 1, sizeof(*l->meta)))
		return nomem(c);
	struct lp_meta_pair *mp = &l->meta[l->nmeta];
	mp->key = strdup(key);
	mp->value = strdup(value);
	if (!mp->key || !mp->value) {
		free(mp->key);
		free(mp->value);
		return nomem(c);
	}
	l->nmeta++;
	uint64_t *fact = fact_of(&c->l->facts, key);
	if (fact)
		*fact = strtoull(value, NULL, 10);
	else if (!strcmp(key, "mode"))
		c->l->facts.sampled = !strcmp(value, "sampled");
	else if (!strcmp(key, "stopped_by"))
		stopped_by(&c->l->facts, value);
	else if (!strcmp(key, "clock"))
		c->l->facts.wall_clock = !strcmp(value, "wall");
	else if (!strcmp(key, "timer"))
		c->l->facts.perf_clock = !strcmp(value, "perf task-clock");
	/* A sampled memory profile with no sample at all (a short run, a large interval) is
	 * still one: not an exact profile that saw no event. */
	if (!strcmp(key, "mode") && !strcmp(value, "sampled") && c->l->mem) {
		if (!stacks_of(c))
			return nomem(c);
		c->l->sampled = 1;
	}
	if (!strcmp(key, "cmdline")) {
		c->l->cmdline = mp->value;
	} else if (!strcmp(key, "interval_ns") || !strcmp(key, "dropped") ||
		   !strcmp(key, "start_unix_ns")) {
		char *end;
		unsigned long long v = strtoull(value, &end, 10);
		if (*value && !*end)
			*(key[0] == 'i' ? &c->l->interval_ns
			  : key[0] == 'd' ? &c->l->dropped : &c->l->start_unix_ns) = v;
	} else if (!strcmp(key, "ffnames") && (c->l->sys || c->l->mem)) {
		struct lp_sysprof *s = stacks_of(c);
		if (!s || lp_sysprof_set_ffnames(s, value))
			return nomem(c);
	} else if (!strcmp(key, "sample_bytes") && c->l->mem) {
		struct lp_sysprof *s = stacks_of(c);
		if (!s)
			return nomem(c);
		lp_sysprof_set_sample_bytes(s, strtoull(value, NULL, 10));
	}
	return 0;
}

int lp_load(struct lp_input *in, const struct lp_sysprof_opts *so, struct lp_loaded *out)
{
	return lp_load_ex(in, so, NULL, NULL, out);
}

int lp_load_ex(struct lp_input *in, const struct lp_sysprof_opts *so,
	       lp_load_progress_fn progress, void *pctx, struct lp_loaded *out)
{
	memset(out, 0, sizeof(*out));
	out->st = lp_symtab_new();
	if (!out->st)
		return lp_input_fail(in, LP_ERR_NOMEM, 0, "out of memory");
	struct ctx c = { in, out, so, progress, pctx, LP_LOAD_PROGRESS_EVENTS, 0, 0 };
	const struct lp_parse_handlers h = {
		.ctx = &c,
		.stream = on_stream,
		.sym_lua = on_sym_lua,
		.sym_cfunc = on_sym_cfunc,
		.sym_trace = on_sym_trace,
		.mem_event = on_mem,
		.sys_sample = on_sys,
		.ext_map = on_ext_map,
		.ext_meta = on_ext_meta,
		.ext_csize = on_ext_csize,
		.ext_cname = on_ext_cname,
		.ext_stack = on_ext_stack,
		.ext_tsample = on_ext_tsample,
		.ext_gsample = on_ext_gsample,
		.ext_jsample = on_ext_jsample,
		.ext_xsample = on_ext_xsample,
		.ext_tcode = on_ext_tcode,
		.ext_kcode = on_ext_kcode,
		.ext_asample = on_ext_asample,
		.ext_astate = on_ext_astate,
	};
	int rc = lp_parse_stream(in, &h, &out->stats);
	/* A CPU stream ends at its epilogue for Tarantool's parser, and a file cut right after
	 * it parses whole. luaprof's agent always writes its extension there: a stream with
	 * its host addresses and none was cut before it (lost: builtins' and objects' names,
	 * trace code, full stacks of TRACE and GC samples), and is reported as cut. The
	 * parser tells that by the prologue's flag (LP_PROLOGUE_EXT) in the agent's streams
	 * since it sets one; this is for an older agent's. */
	if (rc == LP_OK && out->sys && !out->stats.extension && c.agent_stack && !c.high_cfunc) {
		out->stats.complete = 0;
		rc = lp_input_fail(in, LP_ERR_TRUNCATED, out->stats.bytes,
				   "the file is truncated before its luaprof extension (its host "
				   "stacks are luaprof's agent's, which writes one): builtins, "
				   "objects and trace code are unnamed, and TRACE and GC samples "
				   "have their own frames only");
	}
	return rc;
}

void lp_loaded_free(struct lp_loaded *l)
{
	lp_memprof_free(l->mem);
	lp_sysprof_free(l->sys);
	lp_sysprof_free(l->msamp);
	lp_symtab_free(l->st);
	for (size_t i = 0; i < l->nmeta; i++) {
		free(l->meta[i].key);
		free(l->meta[i].value);
	}
	free(l->meta);
	memset(l, 0, sizeof(*l));
}

struct lp_profile *lp_loaded_profile(struct lp_loaded *l, const char *source)
{
	struct lp_profile *p = NULL;
	if (l->mem && l->sampled && l->msamp)
		p = lp_sysprof_profile(l->msamp);
	else if (l->mem)
		p = lp_memprof_profile(l->mem);
	else if (l->sys)
		p = lp_sysprof_profile(l->sys);
	if (!p)
		return NULL;
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->source = source;
	m->event = l->sampled ? "memory (sampled)" : l->mem ? "memory" : "cpu";
	m->samples = l->sampled ? (uint64_t)lp_sysprof_nasamples(l->msamp) : l->stats.events;
	m->truncated = !l->stats.complete;
	m->title = l->cmdline;
	m->period_ns = l->interval_ns;
	/* Ticks with no sample of their own: expirations the kernel merged into one signal
	 * (a CPU clock ticks at CONFIG_HZ, 250 a second on Debian, whatever the rate asked),
	 * ticks the handler skipped to keep its share of the time down (paced), samples it
	 * could not store (dropped). The samples read stand for all of them, the same on
	 * average. */
	uint64_t nsmp = l->stats.events;
	uint64_t extra = l->facts.overruns + l->facts.paced + l->dropped;
	if (!l->mem && m->period_ns && extra && nsmp) {
		m->period_asked_ns = m->period_ns;
		unsigned __int128 ticks = (unsigned __int128)m->period_ns * (nsmp + extra) / nsmp;
		m->period_ns = ticks > UINT64_MAX ? UINT64_MAX : (uint64_t)ticks;
	}
	m->cut += l->facts.truncated;
	m->wall_clock = !l->mem && l->facts.wall_clock;
	m->start_unix_ns = l->start_unix_ns;
	m->duration_ns = l->facts.duration_ns;
	if (l->mem)
		m->period_bytes = l->sampled ? l->facts.sample_bytes : 1;
	m->dropped += l->dropped;
	/* A sampled memory profile's lost samples (allocations sampled but not kept: no
	 * memory, or the stack walk refused) are its drops; the agent writes them as
	 * samples_lost, not in "dropped", so they are not counted twice. */
	if (l->mem && l->sampled)
		m->dropped += l->facts.samples_lost;
	/* luaprof's agent counts what it drops in its extension; Tarantool's profilers write
	 * none, and a stream cut before it has lost the count. */
	m->drops_unrecorded = !l->stats.extension && !m->dropped;
	return p;
}
