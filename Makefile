# The two commands of the README: `make demo` and `make test`. Both install what is missing first.
PRESET ?= $(if $(CI),ci,release)
BUILD := build
TESSEL := $(BUILD)/tessel
export OMP_NUM_THREADS ?= 2
# ccache hashes paths relative to the checkout, so another clone (CI's) reuses this one's objects;
# also those of the sanitizer builds, whose line tables would otherwise put the build folder in the
# hash (their file names then name the clone that compiled them first).
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1

.PHONY: deps build test demo bench clean deps-sanitizers test-asan test-tsan fuzz

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build $(BUILD) -j2

test: build
	cd $(BUILD) && ctest --output-on-failure -j2

demo: build
	bash scripts/demo.sh

bench: build
	bash bench/compare_with_torch.sh

clean:
	rm -rf $(BUILD)

# Sanitizer runs and fuzzing (docs/testing.md). build-asan (clang, ASan + UBSan) holds the tests and the
# fuzz harnesses; build-tsan the ThreadSanitizer build.
# Long tests run several times slower under the sanitizers: the default ctest timeout for tests
# without their own (tests/CMakeLists.txt scales its own by TESSEL_TEST_TIMEOUT_SCALE).
SANITIZER_TIMEOUT ?= 3600
FUZZ_SECONDS ?= 60
export FUZZ_SECONDS FUZZ_RUNS FUZZ_TARGETS FUZZ_SEEDS_ONLY

deps-sanitizers:
	@bash scripts/install-deps.sh sanitizers

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer (leak checks off for the mpi label).
test-asan: deps-sanitizers
	@cmake --preset asan >/dev/null
	@nice -n 10 cmake --build build-asan -j2
	SANITIZER_TIMEOUT=$(SANITIZER_TIMEOUT) bash scripts/sanitizers/test_asan.sh build-asan

# ThreadSanitizer over the threaded code: OpenMP regions on 2 threads (clang, LLVM's OpenMP and its
# TSan tool Archer), the prefetching batch loader and the datasets it reads, the watchdog and
# checkpoint-writer threads, and the MPI collectives under mpirun -np 2.
# scripts/sanitizers/tsan.sh says what runs and why.
test-tsan: deps-sanitizers
	@# A build-tsan configured by gcc (the preset's compiler before clang) is configured afresh, cache
	@# and detected compiler both: CMake would otherwise switch compilers by dropping the cache, and
	@# with it the preset's -fsanitize.
	@grep -qs '^CMAKE_CXX_COMPILER:.*clang' build-tsan/CMakeCache.txt || rm -rf build-tsan/CMakeCache.txt build-tsan/CMakeFiles
	@cmake --preset tsan >/dev/null
	@nice -n 10 cmake --build build-tsan -j2 --target test_core test_data test_mpi test_comm test_model test_kernels test_nn
	bash scripts/sanitizers/tsan.sh build-tsan

# Builds the libFuzzer harnesses (clang) and runs each for FUZZ_SECONDS (or FUZZ_RUNS executions).
fuzz: deps-sanitizers
	@cmake --preset asan >/dev/null
	@nice -n 10 cmake --build build-asan -j2 --target fuzz_all
	bash fuzz/run_all.sh build-asan
