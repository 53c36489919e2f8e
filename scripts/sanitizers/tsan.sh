#!/usr/bin/env bash
# ThreadSanitizer run of tessel's threaded code that is not OpenMP (`make test-tsan`).
#   scripts/sanitizers/tsan.sh [BUILD_DIR]   (default build-tsan, preset tsan)
# What runs, and why only this:
#   - The prefetching batch loader (data::BatchLoader: std::async builds the next batch while the
#     current one trains) and the datasets it reads on that thread: tests/data (BatchLoader.*,
#     GptDataset.*, IndexedDataset.*), with TSan seeing both threads.
#   - The collective watchdog's thread (heartbeats, timeouts; comm/watchdog.cpp) against the thread
#     that reports waits to it: tests/comm Watchdog*, and the death test's child.
#   - An asynchronous checkpoint's writer thread (ckpt::BackgroundWrite) against training changing
#     the parameters it staged copies of: tests/model AsyncCheckpoint.*, BackgroundWrite.*.
#   - OpenMP regions run with OMP_NUM_THREADS=1: libgomp is not built with TSan, so its barriers
#     are invisible to TSan and every parallel loop would report false races. Exceptions thrown
#     inside OpenMP regions are a code-read matter (docs/testing.md), not a TSan one.
#   - Non-blocking MPI (comm/mpi.cpp isend/irecv and the bucketed gradient all-reduce) runs on the
#     rank's one thread (MPI_THREAD_FUNNELED): there is no second thread for TSan to check; the
#     collectives suite runs here under mpirun -np 2 so TSan sees OpenMPI's progress threads touching
#     tessel's buffers, if they ever do.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$root/build-tsan}" && pwd)"
source "$root/scripts/sanitizers/env.sh"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
status=0
echo "== tsan: tests/data (batch loader, datasets)"
"$build/tests/test_data" --gtest_filter='BatchLoader.*:GptDataset.*:IndexedDataset.*' || status=1
echo "== tsan: the collective watchdog, an asynchronous checkpoint's writer"
"$build/tests/test_comm" --gtest_filter='Watchdog*:Heartbeat.*:DiagnoseWait.*' || status=1
"$build/tests/test_model" --gtest_filter='AsyncCheckpoint.*:BackgroundWrite.*' || status=1
if [ -x "$build/tests/test_mpi" ]; then
  echo "== tsan: MPI collectives, -np 2"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --oversubscribe -x TSAN_OPTIONS -x OMP_NUM_THREADS -np 2 "$build/tests/test_mpi" || status=1
fi
exit $status
