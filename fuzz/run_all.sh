#!/usr/bin/env bash
# Runs every libFuzzer harness (or FUZZ_TARGETS) over its committed corpus, one after the other.
#   fuzz/run_all.sh [BUILD_DIR]            (default build-asan; `make fuzz` builds it first)
# Environment:
#   FUZZ_SECONDS=N   time per target (default 60), or
#   FUZZ_RUNS=N      executions per target instead (the issue's bar: FUZZ_RUNS=10000000)
#   FUZZ_TARGETS="safetensors idx"   a subset (default: every fuzz_* executable)
#   FUZZ_MALLOC_CONTEXT=N  frames of ASan's allocation stacks (default 8; ASan's own default is 30)
#   FUZZ_FLAGS="-entropic=0"  more libFuzzer flags, passed as they are (word-split)
#   FUZZ_SEEDS_ONLY=1  start from the seed-* inputs only, without the regress-* inputs of known bugs
#                    (the check that a reverted fix is found again from seeds alone)
# fuzz/dict/<target>.dict, where present, gives libFuzzer the format's tokens.
# New inputs go to BUILD_DIR/fuzz-corpus/<target>/ (the committed fuzz/corpus/<target>/ is only
# read), findings to BUILD_DIR/fuzz-findings/<target>-crash-* etc. Prints one line per target:
# executions, seconds, and the finding if any. Exits 1 if any target found something or was
# interrupted (SIGINT: said as INTERRUPTED, with the executions it got through).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build-asan}" && pwd)"
source "$root/scripts/sanitizers/env.sh"
# ASan records a stack per allocation (30 frames by default) in a depot that is never freed; the
# YAML parser's recursion makes nearly every deep input's stacks new, and config_yaml spent 39% of
# its time in StackDepot::Put (perf), at 380 executions/s with 1 GB resident. 8 frames keep an
# allocation site findable in a report (the faulting access keeps its whole stack) at 3.6x the rate.
ASAN_OPTIONS="$ASAN_OPTIONS:malloc_context_size=${FUZZ_MALLOC_CONTEXT:-8}"
# One thread: inputs run one at a time, and OpenMP workers spinning at barriers would only slow
# each execution down (and make it less repeatable).
export OMP_NUM_THREADS=1

targets=${FUZZ_TARGETS:-$(cd "$build/fuzz" && ls fuzz_* | sed -n 's/^fuzz_\(.*\)$/\1/p' | grep -v '^make_seeds$')}
if [ -n "${FUZZ_RUNS:-}" ]; then budget=(-runs="$FUZZ_RUNS"); else budget=(-max_total_time="${FUZZ_SECONDS:-60}"); fi

status=0
summary=()
for t in $targets; do
  exe="$build/fuzz/fuzz_$t"
  [ -x "$exe" ] || { echo "run_all: $exe is missing (cmake --preset asan && cmake --build build-asan --target fuzz_all)"; exit 2; }
  seeds="$root/fuzz/corpus/$t"
  if [ -n "${FUZZ_SEEDS_ONLY:-}" ]; then
    seeds="$build/fuzz-seeds-only/$t"
    rm -rf "$seeds" && mkdir -p "$seeds" && cp "$root/fuzz/corpus/$t"/seed-* "$seeds"/
  fi
  work="$build/fuzz-corpus/$t"
  findings="$build/fuzz-findings"
  mkdir -p "$work" "$findings"
  log="$build/fuzz-findings/$t.log"
  dict=()
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
  start=$(date +%s)
  # -timeout: one input may take 10 s at most (a hang is a finding); -rss_limit_mb: so is 2 GiB.
  # shellcheck disable=SC2086  # FUZZ_FLAGS is a list of flags
  "$exe" "${budget[@]}" "${dict[@]}" ${FUZZ_FLAGS:-} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
         -artifact_prefix="$findings/$t-" "$work" "$seeds" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ $rc -eq 0 ]; then
    line="$t: ${execs:-?} executions in ${secs} s, no finding"
  elif [ $rc -eq 72 ] && ! grep -qE 'FINDING|ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer)|runtime error|deadly signal' "$log"; then
    # 72 is libFuzzer's exit status when it is interrupted (SIGINT): the run stopped short, it found nothing.
    status=1
    line="$t: INTERRUPTED after ${execs:-?} executions in ${secs} s, no finding"
  else
    status=1
    what=$(grep -m1 -E 'FINDING|ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error|deadly signal' "$log")
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    line="$t: FINDING after ${secs} s: ${what:-exit $rc} -> ${artifact:-see $log}"
  fi
  echo "$line"
  summary+=("$line")
done
echo "--- fuzz summary ($build)"
printf '%s\n' "${summary[@]}"
failed=$(printf '%s\n' "${summary[@]}" | grep -c ': FINDING after ')
interrupted=$(printf '%s\n' "${summary[@]}" | grep -c ': INTERRUPTED after ')
echo "fuzz: $(( ${#summary[@]} - failed - interrupted )) passed, $failed failed, $interrupted interrupted"
exit $status
