# Sourced by bench/pipeline_overlap.sh and bench/moe_overlap.sh: the table of step times with and
# without a test-only transfer delay, for each schedule kind with its overlap off and on. The caller
# defines `run_steps KIND OVERLAP DELAY_MS DIR` (a training run writing DIR/metrics.jsonl).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
WORK=$(mktemp -d /tmp/tessel-overlap-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# step_ms: the median step of a run's metrics.jsonl after the first, in ms (a directory per run).
step_ms() {  # kind overlap delay [repetition]
  local dir=$WORK/$1-$2-$3-${4:-1}
  run_steps "$1" "$2" "$3" "$dir" > "$dir.log" 2>&1 || { tail -3 "$dir.log"; exit 1; }
  /usr/bin/python3 -c "
import json, statistics
s = [json.loads(l)['step_s'] for l in open('$dir/metrics.jsonl')]
print(f'{statistics.median(s[1:]) * 1e3:.1f}')"
}
# The table: each cell the median of REPEATS runs (default 1). The repetitions go round every cell
# in turn, so that the machine's drift over minutes falls on all of them alike; the growth is the
# median of each repetition's growth, and "on / off" its median over the repetitions (the with-overlap
# growth over the without-overlap one of the same repetition).
overlap_table() {  # overlap column's name, delay ms, kinds
  local repeats=${REPEATS:-1} rep kind overlap base slow
  local cells=$WORK/cells.txt
  : > "$cells"
  for rep in $(seq "$repeats"); do
    for kind in $3; do
      for overlap in false true; do
        base=$(step_ms "$kind" "$overlap" 0 "$rep")
        slow=$(step_ms "$kind" "$overlap" "$2" "$rep")
        echo "$rep $kind $overlap $base $slow" >> "$cells"
      done
    done
  done
  /usr/bin/python3 - "$cells" "$1" "$2" "$repeats" <<'PY'
import statistics, sys
cells, name, delay, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs = {}  # (kind, overlap) -> [(base, slow)] in repetition order
kinds = []
for line in open(cells):
    rep, kind, overlap, base, slow = line.split()
    if kind not in kinds:
        kinds.append(kind)
    runs.setdefault((kind, overlap), []).append((float(base), float(slow)))
med = statistics.median
each = f" (median of {repeats})" if repeats > 1 else ""
print(f"| schedule | {name} | step ms, no delay{each} | step ms, {delay} ms per transfer{each} | growth ms{each} |"
      + (" on / off, each repetition | on / off, median |" if repeats > 1 else ""))
print("|---|---|---|---|---|" + ("---|---|" if repeats > 1 else ""))
for kind in kinds:
    growth = {o: [s - b for b, s in runs[(kind, o)]] for o in ("false", "true")}
    for o in ("false", "true"):
        r = runs[(kind, o)]
        row = f"| {kind} | {o} | {med(b for b, _ in r):.1f} | {med(s for _, s in r):.1f} | {med(growth[o]):.1f} |"
        if repeats > 1:
            ratios = [on / off for on, off in zip(growth["true"], growth["false"]) if off > 0]
            row += (f" {', '.join(f'{100 * x:.0f}%' for x in ratios)} | **{100 * med(ratios):.0f}%** |"
                    if o == "true" and ratios else " | |")
        print(row)
PY
}
