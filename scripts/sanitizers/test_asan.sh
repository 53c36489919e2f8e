#!/usr/bin/env bash
# The whole ctest suite under ASan + UBSan (`make test-asan`).
#   scripts/sanitizers/test_asan.sh [BUILD_DIR]   (default build-asan, preset asan)
# Leak checking is on, except for the tests labelled mpi: OpenMPI allocates per-process state at
# MPI_Init and never frees it, by design, in components it dlopens and unloads at MPI_Finalize, so
# LeakSanitizer sees leaks from "<unknown module>" that no suppression can name. Those tests run
# with detect_leaks=0 (address and undefined-behaviour checks stay on). Processes outside mpirun
# never initialise MPI (comm::mpi_launched), so every other test keeps leak checking.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$root/build-asan}" && pwd)"
source "$root/scripts/sanitizers/env.sh"
cd "$build"
# Tests without their own timeout get this one; the others are scaled by TESSEL_TEST_TIMEOUT_SCALE.
timeout=${SANITIZER_TIMEOUT:-3600}
status=0
ctest --output-on-failure -j2 --timeout "$timeout" -LE mpi || status=1
ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" ctest --output-on-failure -j2 --timeout "$timeout" -L mpi || status=1
exit $status
