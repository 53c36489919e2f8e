#!/usr/bin/env bash
# `make demo`: tokenizer -> dataset -> ~10 minutes of training -> evaluation -> generated text, on the
# English fortunes Debian's `fortunes` package installs (scripts/install-deps.sh installs it).
# Re-running resumes training from runs/demo/checkpoints; finished steps are not repeated.
set -euo pipefail
cd "$(dirname "$0")/.."
TESSEL=${TESSEL:-build/tessel}
RUN=runs/demo
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

# The corpus: every fortune file, skipping the .dat index files and the .u8 links to the same text.
mapfile -t CORPUS < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
if [ ${#CORPUS[@]} -eq 0 ]; then
  echo "demo: no fortune files under /usr/share/games/fortunes (run scripts/install-deps.sh)" >&2
  exit 1
fi
mkdir -p "$RUN/data"

echo "== 1/5 tokenizer: BPE, 4096 tokens, on ${#CORPUS[@]} fortune files"
[ -f "$RUN/tokenizer.model" ] || "$TESSEL" train-tokenizer --input "${CORPUS[@]}" --doc-boundary percent \
  --model-prefix "$RUN/tokenizer" --vocab-size 4096

echo "== 2/5 dataset: Megatron .bin/.idx"
[ -f "$RUN/data/fortunes.idx" ] || "$TESSEL" preprocess --input "${CORPUS[@]}" --doc-boundary percent \
  --tokenizer "$RUN/tokenizer.model" --output-prefix "$RUN/data/fortunes"

echo "== 3/5 training configs/demo.yaml (progress every 10 steps; Ctrl-C saves a checkpoint, make demo resumes)"
# Exit status 75: stopped by a signal after saving (tessel train --help); not a failure of the demo.
status=0
"$TESSEL" train configs/demo.yaml "$@" || status=$?
if [ $status = 75 ]; then echo "stopped and saved: make demo resumes from here"; exit 0; fi
[ $status = 0 ] || exit $status

echo "== 4/5 evaluation of the last checkpoint"
"$TESSEL" eval --ckpt "$RUN/checkpoints" --data "$RUN/data/fortunes" --max-samples 64

echo "== 5/5 generation"
for prompt in "The meaning of life is" "A computer scientist" "Q: Why did the"; do
  "$TESSEL" generate --ckpt "$RUN/checkpoints" --prompt "$prompt" --max-new-tokens 48 --temperature 0.8 --top-p 0.95 --seed 7
  echo
done
