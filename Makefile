# Thin wrapper over CMake. `make run` builds and serves the bundled model (chat at http://127.0.0.1:5413/); `make test` builds and runs every test.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup configure build run test soak sanitize fuzz clean

setup:
	@bash tools/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The ready line names the chat app's URL (open it in a browser) and the /v1 base URL for SDKs.
run: build
	@echo "sluice: loading models/tiny-code-qwen2; then open the chat app at the \"chat in a browser\" URL below (http://127.0.0.1:5413/ by default)"
	./$(BUILD)/bin/sluice serve --model models/tiny-code-qwen2 $(ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The soak test (tests/soak/soak.py): the served bundled model under a seeded mix of normal, abusive,
# slow and hung-up clients for SOAK_SECONDS (loopback only); fails on a crash, a wrong answer, a leak,
# RSS growth over 5 % or a /health p99 over 100 ms. SOAK_ARGS passes more options (--skip, --clients, --seed).
SOAK_SECONDS ?= 600
SOAK_ARGS ?=
soak: build
	python3 tests/soak/soak.py --sluice $(BUILD)/bin/sluice --model models/tiny-code-qwen2 --seconds $(SOAK_SECONDS) $(SOAK_ARGS)

# AddressSanitizer + UndefinedBehaviorSanitizer over the whole suite; leaks inside the OpenCL runtime
# (PoCL, the ICD loader) are suppressed, ours are not. Plugins stay loaded so reports keep their frames.
# intercept_tls_get_addr=0: GCC 12's sanitizer runtime (Debian 12) takes a dynamic-TLS block that
# malloc placed at a particular page offset for a glibc 2.19 header and hands LeakSanitizer's tracer a
# garbage range, which crashes it at exit now and then (fixed upstream in 2023; perf/results/sanitizers.md).
# The blocks stay reachable through the threads' static TLS, which is still scanned.
# SLUICE_SANITIZER_BUILD=1: the one test a sanitizer runtime cannot run (descriptor exhaustion: UBSan
# needs free descriptors for its own checks) skips itself; perf/results/sanitizers.md says why.
sanitize:
	SLUICE_SANITIZER_BUILD=1 SLUICE_NO_DLCLOSE=1 ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizer/lsan.supp \
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DSLUICE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug"

# libFuzzer harnesses (tests/fuzz) in their own clang tree, build-fuzz, holding only the parsers they reach;
# each runs FUZZ_SECONDS (FUZZERS="request jinja" picks some). Non-zero exit and the reproducer's path on
# any crash, leak, timeout or broken invariant.
FUZZ_SECONDS ?= 60
FUZZERS ?=
fuzz: setup
	@cmake -S . -B build-fuzz -DSLUICE_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-fuzz -j $(JOBS)
	@bash tests/fuzz/run_fuzzers.sh build-fuzz $(FUZZ_SECONDS) $(FUZZERS)

clean:
	rm -rf $(BUILD) build-asan build-fuzz
