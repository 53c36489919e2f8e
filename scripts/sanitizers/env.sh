# Sanitizer runtime options shared by `make test-asan`, `make test-tsan` and fuzz/run_all.sh
# (sourced). Each setting is kept if the caller has set it already.
# abort_on_error: a report ends the process with SIGABRT, which ctest and libFuzzer count as failure.
# detect_leaks stays on (test_asan.sh turns it off for the MPI tests only, and says why).
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:check_initialization_order=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=0:second_deadlock_stack=1:history_size=4:suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/tsan.supp}"
