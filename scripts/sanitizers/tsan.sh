#!/usr/bin/env bash
# ThreadSanitizer run of tessel's threaded code (`make test-tsan`).
#   scripts/sanitizers/tsan.sh [BUILD_DIR]   (default build-tsan, preset tsan)
# What runs, and why only this:
#   - The prefetching batch loader (data::BatchLoader: std::async builds the next batch while the
#     current one trains) and the datasets it reads on that thread: tests/data (BatchLoader.*,
#     GptDataset.*, IndexedDataset.*), with TSan seeing both threads.
#   - The collective watchdog's thread (heartbeats, timeouts; comm/watchdog.cpp) against the thread
#     that reports waits to it: tests/comm Watchdog*, and the death test's child.
#   - An asynchronous checkpoint's writer thread (ckpt::BackgroundWrite) against training changing
#     the parameters it staged copies of: tests/model AsyncCheckpoint.*, BackgroundWrite.*.
#   - OpenMP parallel regions on 2 threads: the kernels (tests/kernels), the layers built on them
#     (tests/nn), and whole models' forward, backward and decode against the PyTorch fixtures
#     (tests/model: dense, MoE, MLA with MTP). The preset builds with clang and LLVM's OpenMP runtime, whose TSan tool (Archer,
#     libarcher.so, shipped with libomp-dev) tells TSan about OpenMP's barriers, locks and
#     reductions; libgomp has no such tool, so a gcc build reports races that are not there. The
#     run checks that Archer announced itself. ignore_noninstrumented_modules=1 is what Archer needs:
#     the OpenMP runtime itself is not instrumented. oneDNN keeps its own (uninstrumented) threads.
#     The other parts below run with OMP_NUM_THREADS=1, so their reports stay about their own threads.
#     Exceptions thrown inside OpenMP regions are a code-read matter (docs/testing.md), not a TSan one.
#   - Paired tasks (core/paired_tasks.h: a fused F&B pair's forward on the caller's thread, its
#     backward on a helper thread, taking turns): tests/core PairedTasks.*, the hand-overs, the
#     failure paths and the helper's reuse and replacement; TransferSpans.*, the spans a traced pair
#     notes from both threads.
#   - Non-blocking MPI (comm/mpi.cpp isend/irecv and the bucketed gradient all-reduce) runs on the
#     rank's thread (and, in a fused F&B pair, on the helper while the rank's thread waits: MPI at
#     MPI_THREAD_SERIALIZED); the collectives suite runs here under mpirun -np 2 so TSan sees
#     OpenMPI's progress threads touching tessel's buffers, if they ever do.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$root/build-tsan}" && pwd)"
source "$root/scripts/sanitizers/env.sh"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
status=0
echo "== tsan: tests/data (batch loader, datasets)"
"$build/tests/test_data" --gtest_filter='BatchLoader.*:GptDataset.*:IndexedDataset.*' || status=1
echo "== tsan: paired tasks (fused F&B pairs)"
"$build/tests/test_core" --gtest_filter='PairedTasks.*:TransferSpans.*' --gtest_repeat=20 || status=1
echo "== tsan: the collective watchdog, an asynchronous checkpoint's writer"
"$build/tests/test_comm" --gtest_filter='Watchdog*:Heartbeat.*:DiagnoseWait.*' || status=1
"$build/tests/test_model" --gtest_filter='AsyncCheckpoint.*:BackgroundWrite.*' || status=1
echo "== tsan: OpenMP regions on 2 threads (kernels, layers, whole models), with Archer"
archer_log="$build/tsan-archer.log"
# test:filter pairs; TSAN_OPENMP_FILTER replaces every filter (a quick subset by hand).
for run in "test_kernels:*" "test_nn:*" "test_model:Models/*:Archs/*"; do
  t=${run%%:*}
  filter=${TSAN_OPENMP_FILTER:-${run#*:}}
  OMP_NUM_THREADS=2 ARCHER_OPTIONS=verbose=1 TSAN_OPTIONS="$TSAN_OPTIONS:ignore_noninstrumented_modules=1" \
    "$build/tests/$t" --gtest_filter="$filter" 2>&1 | tee "$archer_log" || status=1
  if [ -n "${TSAN_OPENMP_FILTER:-}" ] && grep -q "Running 0 tests" "$archer_log"; then
    echo "tsan: no test of $t matches TSAN_OPENMP_FILTER (nothing ran, so OpenMP never started)"
  elif ! grep -q "Archer detected OpenMP application with TSan" "$archer_log"; then
    echo "tsan: $t ran without Archer (is it built with clang and libomp? see CMakePresets.json, preset tsan):" \
         "TSan cannot see OpenMP's synchronisation, so this part checked nothing" >&2
    status=1
  fi
done
if [ -x "$build/tests/test_mpi" ]; then
  echo "== tsan: MPI collectives, -np 2"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --oversubscribe -x TSAN_OPTIONS -x OMP_NUM_THREADS -np 2 "$build/tests/test_mpi" || status=1
fi
exit $status
