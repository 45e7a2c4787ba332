# sluice — developer entry points. `make demo` and `make test` work on a fresh Debian 12 as root.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
SANITIZE ?= OFF
WERROR ?= $(if $(filter true 1,$(CI)),ON,OFF)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test demo bench fuzz clean format install package

all: build

deps:
	@./scripts/install-deps.sh

# Release with assertions: -O2 without -DNDEBUG, so assert() stays live in tests.
configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja \
	  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -g1" \
	  -DSLUICE_WERROR=$(WERROR) -DSLUICE_SANITIZE=$(SANITIZE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

# The stripped binary, man pages, bash completion, schemas, examples and systemd units
# (docs/deploy.md); `make install PREFIX=/usr DESTDIR=/tmp/root` stages them elsewhere.
PREFIX ?= /usr/local
install: build
	@DESTDIR="$(DESTDIR)" cmake --install $(BUILD_DIR) --prefix "$(PREFIX)" --strip

# A .deb of the same files with maintainer scripts, in $(BUILD_DIR)/ (CPack; docs/deploy.md).
package: build
	@cd $(BUILD_DIR) && cpack -G DEB

demo: build
	@SLUICE=$(BUILD_DIR)/cli/sluice ./examples/demo.sh

bench: deps
	@SLUICE_BENCH_DEPS=1 ./scripts/install-deps.sh
	@$(MAKE) build
	@./bench/run_all.sh $(BUILD_DIR)

# libFuzzer on the policy loader and target parsers, on the proxy's session code and on
# sluice's DNS (clang-16; see docs/policy.md#fuzzing).
FUZZ_SECONDS ?= 600
fuzz:
	@SLUICE_FUZZ_DEPS=1 ./scripts/install-deps.sh
	@CC=clang-16 CXX=clang++-16 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSLUICE_FUZZ=ON -DFUZZ_SECONDS=$(FUZZ_SECONDS) \
	  -DCMAKE_CXX_FLAGS="-U__cpp_concepts -D__cpp_concepts=202002L -DBOOST_ASIO_HAS_CO_AWAIT=1 -DBOOST_ASIO_HAS_STD_COROUTINE=1" >/dev/null
	@cmake --build build-fuzz --target fuzz_policy_loader
	@cmake --build build-fuzz --target fuzz_policy_target
	@cmake --build build-fuzz --target fuzz_proxy_session
	@cmake --build build-fuzz --target fuzz_dns
	@$(MAKE) build
	@SLUICE_PIPELINE_FUZZ_ITERATIONS=20000 $(BUILD_DIR)/tests/proxy/proxy_test \
	  --gtest_filter='PipelineTest.Randomized*' 

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	@rm -rf $(BUILD_DIR)
