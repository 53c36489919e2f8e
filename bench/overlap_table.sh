# Sourced by bench/pipeline_overlap.sh and bench/moe_overlap.sh: the table of step times with and
# without a test-only transfer delay, for each schedule kind with its overlap off and on. The caller
# defines `run_steps KIND OVERLAP DELAY_MS DIR` (a training run writing DIR/metrics.jsonl).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
WORK=$(mktemp -d /tmp/tessel-overlap-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# step_ms: the median step of DIR/metrics.jsonl after the first, in ms.
step_ms() {  # kind overlap delay
  local dir=$WORK/$1-$2-$3
  run_steps "$1" "$2" "$3" "$dir" > "$dir.log" 2>&1 || { tail -3 "$dir.log"; exit 1; }
  /usr/bin/python3 -c "
import json, statistics
s = [json.loads(l)['step_s'] for l in open('$dir/metrics.jsonl')]
print(f'{statistics.median(s[1:]) * 1e3:.1f}')"
}
overlap_table() {  # overlap column's name, delay ms, kinds
  echo "| schedule | $1 | step ms, no delay | step ms, $2 ms per transfer | growth ms |"
  echo "|---|---|---|---|---|"
  for kind in $3; do
    for overlap in false true; do
      base=$(step_ms "$kind" "$overlap" 0)
      slow=$(step_ms "$kind" "$overlap" "$2")
      echo "| $kind | $overlap | $base | $slow | $(/usr/bin/python3 -c "print(f'{$slow - $base:.1f}')") |"
    done
  done
}
