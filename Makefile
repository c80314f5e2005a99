# luaprof - plain make, artifacts in build/ (see README.md for targets).
#
#   make            build the CLI (build/luaprof) and the static library
#   make test       build and run the whole test suite (tests/run.sh)
#   make fuzz       build the libFuzzer targets (clang)
#   make bench      build the benchmark tools
#   V=1             show the full commands

CC       ?= cc
CLANG    ?= clang
BUILD    ?= build
PROTOC_C ?= protoc-c
CFLAGS   ?= -O2 -g
WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wno-unused-parameter
CPPFLAGS += -Iinclude -Isrc -I$(BUILD)/gen -D_GNU_SOURCE
ALLCFLAGS = -std=c11 $(WARN) $(CFLAGS)
LDLIBS   += -lprotobuf-c -lz -liberty -lm

ifeq ($(V),1)
Q :=
else
Q := @
endif

LIB_SRCS  := $(wildcard src/util/*.c src/stream/*.c src/report/*.c src/vm/*.c)
# The in-process agent is a Lua C module: position-independent, exporting only its API.
AGENT_SRCS := $(wildcard src/agent/*.c)
AGENT_DEPS := $(wildcard src/util/*.c src/stream/*.c src/vm/*.c)
AGENT_OBJS := $(AGENT_SRCS:%.c=$(BUILD)/pic/%.o) $(AGENT_DEPS:%.c=$(BUILD)/pic/%.o)
LUA_CFLAGS ?= -I/usr/include/luajit-2.1
AGENT_LIBS ?= -lpthread -lrt -lm
CLI_SRCS  := $(wildcard src/cli/*.c)
GEN_PROTO := $(BUILD)/gen/profile.pb-c.c
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/profile.pb-c.o
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(BUILD)/fuzz/%)
# agent_ffi.c is a shared library bench/agent_overhead.sh builds itself, not a tool.
BENCH_SRCS := $(filter-out bench/agent_ffi.c,$(wildcard bench/*.c))
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

.PHONY: all test unit fuzz bench clean print-ldlibs
.DELETE_ON_ERROR:
.SECONDARY:

all: $(BUILD)/luaprof $(BUILD)/libluaprof.a $(if $(AGENT_SRCS),$(BUILD)/luaprof.so)

$(BUILD)/gen/profile.pb-c.c $(BUILD)/gen/profile.pb-c.h: src/report/profile.proto
	@mkdir -p $(BUILD)/gen
	$(Q)$(PROTOC_C) --proto_path=src/report --c_out=$(BUILD)/gen src/report/profile.proto

$(BUILD)/obj/gen/profile.pb-c.o: $(BUILD)/gen/profile.pb-c.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) -std=c11 $(CFLAGS) $(CPPFLAGS) -c -o $@ $<

# Every object depends on the generated header so the first parallel build is ordered.
$(BUILD)/obj/%.o: %.c | $(BUILD)/gen/profile.pb-c.h
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALLCFLAGS) $(CPPFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $< (pic)"
	$(Q)$(CC) $(ALLCFLAGS) $(CPPFLAGS) $(LUA_CFLAGS) -fPIC -fvisibility=hidden -MMD -MP -c -o $@ $<

$(BUILD)/luaprof.so: $(AGENT_OBJS)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -shared -o $@ $^ $(AGENT_LIBS)

$(BUILD)/libluaprof.a: $(LIB_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/luaprof: $(CLI_OBJS) $(BUILD)/libluaprof.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $(CLI_OBJS) $(BUILD)/libluaprof.a $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/unit.h $(BUILD)/libluaprof.a
	@mkdir -p $(dir $@) $(BUILD)/obj/tests/unit
	@echo "  CC      $<"
	$(Q)$(CC) $(ALLCFLAGS) $(CPPFLAGS) -Itests/unit -MMD -MP -MT $@ \
		-MF $(BUILD)/obj/tests/unit/$*.d -o $@ $< $(BUILD)/libluaprof.a $(LDLIBS)

unit: $(UNIT_BINS)

test: all unit
	$(Q)tests/run.sh

# Fuzz targets are rebuilt from source with clang's libFuzzer and sanitizers.
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
$(BUILD)/fuzz/%: tests/fuzz/%.c $(LIB_SRCS) $(AGENT_SRCS) $(GEN_PROTO)
	@mkdir -p $(dir $@)
	@echo "  FUZZ    $@"
	$(Q)$(CLANG) -std=c11 $(WARN) $(FUZZ_FLAGS) $(CPPFLAGS) $(LUA_CFLAGS) -o $@ $< $(LIB_SRCS) $(GEN_PROTO) $(LDLIBS)

fuzz: $(FUZZ_BINS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libluaprof.a
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALLCFLAGS) $(CPPFLAGS) -o $@ $< $(BUILD)/libluaprof.a $(LDLIBS)

# Calls the VM's allocator through the agent's wrappers: needs LuaJIT's library and headers.
$(BUILD)/bench/memprof_floor: bench/memprof_floor.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(ALLCFLAGS) $(CPPFLAGS) $(LUA_CFLAGS) -o $@ $< -lluajit-5.1

bench: all $(BENCH_BINS)

# The libraries a program linked with build/libluaprof.a needs (the tests' own drivers).
print-ldlibs:
	@echo $(LDLIBS)

clean:
	rm -rf $(BUILD)

# (Unit tests' dependencies are there too: one that includes a module's .c, such as
# test_agent_core, is rebuilt when that changes.)
-include $(shell find $(BUILD)/obj $(BUILD)/pic -name '*.d' 2>/dev/null)
