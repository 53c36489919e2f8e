#!/usr/bin/env bash
# Side-by-side throughput: tessel bench vs the PyTorch peer (../shared/peers/torch_llama.py) on the
# same shapes, 2 threads each, alternating runs, median of REPEATS. Prints one summary table.
#   bench/compare_with_torch.sh [CONFIGS...]   (default: both configs/bench/*.yaml, fp32 and bf16)
# Env: REPEATS (default 3), STEPS (default 5), PEER (path to torch_llama.py).
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${REPEATS:-3}
STEPS=${STEPS:-5}
PEER=${PEER:-../shared/peers/torch_llama.py}
TESSEL=${TESSEL:-build/tessel}
export OMP_NUM_THREADS=2
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(configs/bench/llama-tiny.yaml configs/bench/llama-134m.yaml)
[ -x "$TESSEL" ] || { echo "build first: make build" >&2; exit 1; }
[ -f "$PEER" ] || { echo "PyTorch peer not found at $PEER" >&2; exit 1; }

# Reads model shapes from a bench config for the peer's flags.
peer_args() {
  /usr/bin/python3 - "$1" <<'PY'
import sys, re
text = open(sys.argv[1]).read()
def get(k):
    m = re.search(r"^\s*" + k + r":\s*([0-9.eE+-]+)", text, re.M); return m.group(1)
print(f"--layers {get('num_layers')} --hidden {get('hidden_size')} --heads {get('num_attention_heads')} "
      f"--kv-heads {get('num_query_groups')} --ffn {get('ffn_hidden_size')} --vocab {get('vocab_size')} "
      f"--seq {get('seq_length')} --batch {get('micro_batch_size')}")
PY
}

median() { /usr/bin/python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
field() { /usr/bin/python3 -c 'import sys,json; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
peer_rss() {  # peak RSS (MB) of a command, via GNU time's %M when available
  if [ -x /usr/bin/time ]; then /usr/bin/time -f "%M" "$@" 2>/tmp/peer_rss.$$ >/tmp/peer_out.$$; tail -1 /tmp/peer_rss.$$ | awk '{print $1/1024}'; cat /tmp/peer_out.$$ >&2
  else "$@" >&2; echo 0; fi
}

printf "%-28s %-5s %12s %12s %7s %10s %10s %7s\n" config prec tessel_tok/s torch_tok/s ratio tessel_MB torch_MB mfu
for cfg in "${configs[@]}"; do
  args=$(peer_args "$cfg")
  for prec in fp32 bf16; do
    t_tps=(); p_tps=(); t_rss=(); p_rss=(); t_mfu=()
    for r in $(seq "$REPEATS"); do
      line=$("$TESSEL" bench "$cfg" --steps "$STEPS" --set precision.compute=$prec | tail -1)
      t_tps+=("$(field "$line" tokens_per_s)"); t_rss+=("$(field "$line" peak_rss_mb)"); t_mfu+=("$(field "$line" mfu)")
      flag=""; [ $prec = bf16 ] && flag="--bf16"
      rss=$(peer_rss /usr/bin/python3 "$PEER" bench $args --steps "$STEPS" --threads 2 $flag 2>/tmp/peer_line.$$ || true)
      pl=$(grep tokens_per_s /tmp/peer_line.$$ | tail -1)
      p_tps+=("$(field "$pl" tokens_per_s)"); p_rss+=("$rss")
    done
    tt=$(median "${t_tps[@]}"); pt=$(median "${p_tps[@]}")
    printf "%-28s %-5s %12.1f %12.1f %6.2fx %10.0f %10.0f %6.1f%%\n" "$(basename "$cfg")" $prec "$tt" "$pt" \
      "$(/usr/bin/python3 -c "print($tt/$pt)")" "$(median "${t_rss[@]}")" "$(median "${p_rss[@]}")" \
      "$(/usr/bin/python3 -c "print(100*$(median "${t_mfu[@]}"))")"
  done
done
rm -f /tmp/peer_rss.$$ /tmp/peer_out.$$ /tmp/peer_line.$$
