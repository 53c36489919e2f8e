#!/usr/bin/env bash
# Checks that every #include "tessel/<layer>/..." in src/tessel/ follows the layer graph: a file of
# layer L includes only L itself and the layers L links (directly or through them).
# usage: check_layers.sh SRC_DIR LAYERS_FILE
#   LAYERS_FILE: one line per layer, "layer: allowed allowed ...", written by CMakeLists.txt from the
#   libraries' links (the one place the graph is defined).
set -euo pipefail
src=$1 layers=$2
declare -A allowed
while IFS=: read -r layer deps; do
  allowed[$layer]=" $layer $deps "
done < "$layers"
bad=0
for dir in "$src"/tessel/*/; do
  layer=$(basename "$dir")
  if [[ -z "${allowed[$layer]+x}" ]]; then
    echo "src/tessel/$layer is not a layer in $layers (add it to the layer libraries in CMakeLists.txt)"
    bad=1
    continue
  fi
  while IFS= read -r hit; do
    file=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    inc=$(sed -E 's|.*#include "tessel/([a-z_]+)/.*|\1|' <<<"$rest")
    if [[ "${allowed[$layer]}" != *" $inc "* ]]; then
      echo "${file#"$src"/}:$line: layer '$layer' includes layer '$inc' (allowed:${allowed[$layer]% })"
      bad=1
    fi
  done < <(grep -rnE '#include "tessel/[a-z_]+/' "$dir" || true)
done
if [[ $bad -eq 0 ]]; then echo "every include follows the layer graph ($(wc -l < "$layers") layers)"; fi
exit $bad
