#!/usr/bin/env bash
# Installs what tessel needs to build, test and benchmark on Debian 12. Idempotent: packages already
# present are skipped, so `make test` can call this every time at the cost of one dpkg query.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libdnnl-dev            # oneDNN: CPU GEMM (f32, bf16 with AMX/AVX-512 where the CPU has them)
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev zlib1g-dev
  libsentencepiece-dev   # tokenizer: training (BPE, byte fallback) and encoding
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-numpy   # the PyTorch reference for fixtures and the throughput peer
  time                          # GNU time: the peer's peak RSS in bench/compare_with_torch.sh
  libopenblas0-pthread          # the peer's BLAS: without it Debian's torch uses reference BLAS (~15x slower)
  python3-matplotlib            # plots in bench/ (fp8_summary.py, long_run_plot.py)
  fortunes                      # the demo corpus: /usr/share/games/fortunes
)

# `make test-asan`, `make test-tsan`, `make fuzz` (install-deps.sh sanitizers): clang with its
# sanitizer and libFuzzer runtimes, LLVM's OpenMP for clang builds, llvm-symbolizer for stacks.
SANITIZER_PACKAGES=(clang libclang-rt-14-dev libomp-dev llvm)
if [ "${1:-}" = sanitizers ]; then PACKAGES+=("${SANITIZER_PACKAGES[@]}"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
