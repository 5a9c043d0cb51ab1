# Thin wrapper over CMake. `make run` builds and serves the bundled model; `make test` builds and runs every test.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup configure build run test sanitize clean

setup:
	@bash tools/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/bin/sluice serve --model models/tiny-code-qwen2 $(ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# AddressSanitizer + UndefinedBehaviorSanitizer over the whole suite; leaks inside the OpenCL runtime
# (PoCL, the ICD loader) are suppressed, ours are not. Plugins stay loaded so reports keep their frames.
sanitize:
	SLUICE_NO_DLCLOSE=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizer/lsan.supp \
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DSLUICE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug"

clean:
	rm -rf $(BUILD) build-asan
