# pagoda — build, test and run.
#
#   make                 build every binary into build/
#   make run             install missing deps, build, serve on 127.0.0.1:8080
#   make test            install missing deps, build, make the test models, run
#                        unit + integration tests
#   make test-models     only the test models (build/test-models/, see below)
#   make check SANITIZE=1  the same suite under ASan+UBSan (objects in build/san)
#   make fuzz            build libFuzzer targets with clang into build/fuzz
#
# Sources are picked up by folder, one library per layer:
#   libpagoda_common.a   common/*.c, common/grammar/*.c
#   libpagoda_text.a     common/text/*.c: GGUF metadata, tokenizer, templates,
#                        prompts, tool formats, the GGUF writer (what both processes need to
#                        understand a model's words)
#   libpagoda_proto.a    proto/*.c: the wire (and a SUBMIT's prompt)
#   libpagoda_worker.a   worker/*.c, worker/*/*.c (model/, kernels/, grammar/,
#                        tools/) that are not *_main.c: weights and kernels
#   libpagoda_gateway.a  gateway/*.c that are not *_main.c
# pagoda-gateway links gateway + proto + text + common, never the worker library
# (tests/layering.sh checks the includes and the gateway's symbols).
# Each tests/<dir>/test_*.c and tests/<dir>/<sub>/test_*.c is one cmocka program.

SANITIZE ?=
ifeq ($(SANITIZE),1)
BUILD ?= build/san
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else
BUILD ?= build
SANFLAGS =
endif

CC ?= gcc
PKGS = libzmq msgpack openblas libmicrohttpd jansson libpcre2-8 yaml-0.1 libcyaml libcurl libsodium sqlite3 \
	libpng libjpeg libwebp libwebpdemux libgif
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
WERROR ?= $(if $(CI),-Werror,)
OPT ?= -O2
CFLAGS_ALL = -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Wno-unused-parameter $(WERROR) \
	-fopenmp -pthread -I. $(PKG_CFLAGS) $(SANFLAGS) $(CFLAGS)
LDLIBS_ALL = $(PKG_LIBS) -lm -fopenmp -pthread $(SANFLAGS) $(LDFLAGS)

COMMON_SRC  := $(filter-out common/text/%,$(wildcard common/*.c common/*/*.c))
TEXT_SRC    := $(wildcard common/text/*.c)
PROTO_SRC   := $(wildcard proto/*.c)
WORKER_SRC  := $(filter-out %_main.c,$(wildcard worker/*.c worker/*/*.c))
GATEWAY_SRC := $(filter-out %_main.c,$(wildcard gateway/*.c))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
LIB_COMMON  = $(BUILD)/libpagoda_common.a
LIB_TEXT    = $(BUILD)/libpagoda_text.a
LIB_PROTO   = $(BUILD)/libpagoda_proto.a
LIB_WORKER  = $(BUILD)/libpagoda_worker.a
LIB_GATEWAY = $(BUILD)/libpagoda_gateway.a
# in link order: a library before the ones it uses
LIBS = $(LIB_GATEWAY) $(LIB_WORKER) $(LIB_PROTO) $(LIB_TEXT) $(LIB_COMMON)
LIBS_GATEWAY = $(LIB_GATEWAY) $(LIB_PROTO) $(LIB_TEXT) $(LIB_COMMON)

BIN_NAMES = pagoda-gateway pagoda-worker pagoda-run pagoda-mkmodel pagoda-bench
BIN_MAIN_pagoda-gateway = gateway/gateway_main.c
BIN_MAIN_pagoda-worker  = worker/worker_main.c
BIN_MAIN_pagoda-run     = worker/tools/run_main.c
BIN_MAIN_pagoda-mkmodel = worker/tools/mkmodel_main.c
BIN_MAIN_pagoda-bench   = tests/bench/bench_main.c
# A binary is built once its main file exists.
BINS = $(foreach b,$(BIN_NAMES),$(if $(wildcard $(BIN_MAIN_$(b))),$(BUILD)/$(b)))

UNIT_SRC  := $(wildcard tests/*/test_*.c tests/*/*/test_*.c)
UNIT_BINS := $(patsubst %.c,$(BUILD)/%,$(UNIT_SRC))
TEST_SUPPORT := $(wildcard tests/support/*.c)

.PHONY: all deps run test test-models test-large check fuzz fuzz-smoke clean install wire-doc
.SECONDARY:
all: $(BINS) $(UNIT_BINS)

deps:
	@bash deploy/install-deps.sh

# V=1 shows full command lines.
Q = $(if $(V),,@)
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(LIB_COMMON): $(call obj,$(COMMON_SRC))
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^
$(LIB_TEXT): $(call obj,$(TEXT_SRC))
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^
$(LIB_PROTO): $(call obj,$(PROTO_SRC))
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^
$(LIB_WORKER): $(call obj,$(WORKER_SRC))
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^
# gateway/ui.c embeds gateway/ui/* with .incbin (paths relative to this directory)
$(BUILD)/obj/gateway/ui.o: $(wildcard gateway/ui/*)
$(LIB_GATEWAY): $(call obj,$(GATEWAY_SRC))
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^

.SECONDEXPANSION:
# pagoda-bench also links every other tests/bench/*.c file.
BENCH_EXTRA := $(filter-out tests/bench/bench_main.c,$(wildcard tests/bench/*.c))
$(BUILD)/pagoda-bench: $(call obj,$(BENCH_EXTRA))
# Every binary links the libraries it uses: pagoda-gateway never the worker's.
BIN_LIBS_pagoda-gateway = $(LIBS_GATEWAY)
$(BINS): $(BUILD)/%: $$(call obj,$$(BIN_MAIN_%)) $$(or $$(BIN_LIBS_%),$(LIBS))
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(LDLIBS_ALL)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(call obj,$(TEST_SUPPORT)) $(LIBS)
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  LD      $@")
	$(Q)$(CC) -o $@ $^ $(LDLIBS_ALL) -lcmocka

run: deps
	@$(MAKE) --no-print-directory all
	@bash deploy/run-demo.sh

# Test models: every model the suite needs is made here by pagoda-mkmodel
# (seeded, so the same bytes on every machine), so a fresh clone with no
# ../shared beside it skips nothing. Each stands in for a file of
# ../shared/models, which tests prefer when it is there (tests/support/
# support.c's standin_of and tests/lib.sh's standin_of map the names; see
# docs/TESTING.md):
#   tiny-llama.gguf   for stories260K.gguf: its shape (llama, 5 layers, dim 64,
#                     8/4 heads, FFN 172, context 512, vocab 512, F32) with the
#                     builtin SentencePiece-style tokenizer cut to 512 pieces
#                     (byte fallback, BOS 1, EOS 2); --mute-special and
#                     --logit-scale 8 make its next token clear like a trained
#                     model's, never EOS, a byte or a control token, so greedy
#                     text is valid UTF-8 and runs to max_tokens
#   zoo/zoo-TYPE.gguf for zoo/zoo-TYPE.gguf: the zoo's shape (2 layers, dim 256,
#                     4/2 heads, FFN 768, context 512), one seed, so every type
#                     holds the same float weights quantized its own way
TEST_MODEL_DIR = $(BUILD)/test-models
ZOO_TYPES = F32 F16 BF16 Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K
TEST_MODELS = $(TEST_MODEL_DIR)/tiny-llama.gguf $(foreach t,$(ZOO_TYPES),$(TEST_MODEL_DIR)/zoo/zoo-$(t).gguf)
MKMODEL_ARGS_tiny-llama = --dim 64 --layers 5 --heads 8 --kv-heads 4 --ffn 172 --ctx 512 --type F32 \
	--vocab 512 --seed 260 --mute-special --logit-scale 8
# Q5_K_M: Q5_K matrices; llama.cpp's mix keeps some Q6_K, ours is all Q5_K
MKMODEL_ZOO = --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 768 --ctx 512 --seed 512
MKMODEL_TYPE_Q5_K_M = Q5_K
$(foreach t,$(ZOO_TYPES),$(eval MKMODEL_ARGS_zoo/zoo-$(t) = $$(MKMODEL_ZOO) --type $$(or $$(MKMODEL_TYPE_$(t)),$(t))))
# zoo/zoo-TYPE.dequant-f32.gguf: every tensor of zoo-TYPE.gguf decoded by the
# NumPy reference (tests/ref/dequant_gguf.py), like the shared ones
ZOO_QUANT = Q8_0 Q4_0 Q4_K_M Q5_K_M Q6_K
TEST_MODELS += $(foreach t,$(ZOO_QUANT),$(TEST_MODEL_DIR)/zoo/zoo-$(t).dequant-f32.gguf)
test-models: $(TEST_MODELS)
$(TEST_MODEL_DIR)/zoo/zoo-%.dequant-f32.gguf: $(TEST_MODEL_DIR)/zoo/zoo-%.gguf tests/ref/dequant_gguf.py tests/ref/gguf_ref.py
	@$(if $(V),,echo "  DEQUANT $@")
	$(Q)/usr/bin/python3 tests/ref/dequant_gguf.py $< $@.part && mv $@.part $@
$(TEST_MODEL_DIR)/%.gguf: $(BUILD)/pagoda-mkmodel
	@mkdir -p $(dir $@)
	@$(if $(V),,echo "  MKMODEL $@")
	$(Q)$(BUILD)/pagoda-mkmodel -o $@.part $(MKMODEL_ARGS_$*) > $@.log 2>&1 || { cat $@.log; exit 1; }
	$(Q)mv $@.part $@

# `make test` is the sanitizer-free pass of the same suite as `make check`.
test: deps
	@$(MAKE) --no-print-directory all test-models
	@PAGODA_BUILD=$(BUILD) bash tests/run.sh

# Load and chaos at real model size (tests/large/: a 1.1B Q4_K_M model made by
# pagoda-mkmodel, cached in $(BUILD)/models/; 32 streams; kill -9 mid-run).
test-large: deps
	@$(MAKE) --no-print-directory all
	@PAGODA_BUILD=$(BUILD) bash tests/large/run.sh

check: deps
	@$(MAKE) --no-print-directory all test-models
	@PAGODA_BUILD=$(BUILD) bash tests/run.sh

FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BUILD = build/fuzz
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fopenmp=libgomp -pthread -I. $(PKG_CFLAGS)
fuzz: $(patsubst tests/fuzz/%.c,$(FUZZ_BUILD)/%,$(FUZZ_SRC))
# -MMD: an object is rebuilt when a header it includes changes (a stale
# object with an old struct layout makes a target crash on a valid input)
$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@
$(FUZZ_BUILD)/obj/gateway/ui.o: $(wildcard gateway/ui/*)
$(FUZZ_BUILD)/libfuzzlib.a: $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(COMMON_SRC) $(TEXT_SRC) $(PROTO_SRC) $(WORKER_SRC) $(GATEWAY_SRC))
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^
$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_BUILD)/libfuzzlib.a
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer $^ -o $@ $(PKG_LIBS) -lm -fopenmp=libgomp -pthread

# Each fuzzer for FUZZ_SECONDS (default 30) on its seed corpus.
FUZZ_SECONDS ?= 30
fuzz-smoke: fuzz
	@bash tests/fuzz/smoke.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# make install [PREFIX=/usr/local] [DESTDIR=...]: the five binaries and the
# example configuration (systemd units are in deploy/, see docs/OPERATIONS.md).
PREFIX ?= /usr/local
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/pagoda
	install -m 0755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 deploy/pagoda.example.yaml $(DESTDIR)$(PREFIX)/share/pagoda/

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)

# The sampling-knob table (proto/sampling.h) into docs/ARCHITECTURE.md,
# between its sampling-knobs markers (tests/proto/test_sampling.c checks it).
wire-doc: $(BUILD)/tests/proto/test_sampling
	@$< --print > $(BUILD)/wire-doc.md
	@awk -v f=$(BUILD)/wire-doc.md '/<!-- sampling-knobs begin/ {print; while ((getline l < f) > 0) print l; skip = 1; next} \
	  /<!-- sampling-knobs end/ {skip = 0} !skip' docs/ARCHITECTURE.md > $(BUILD)/ARCHITECTURE.md.new
	@mv $(BUILD)/ARCHITECTURE.md.new docs/ARCHITECTURE.md
	@echo "docs/ARCHITECTURE.md: sampling-knobs table written"
