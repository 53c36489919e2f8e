#!/usr/bin/env bash
# The -march=native guard (apps/tessel/cpu_guard.cpp): a probe built with the guard for AMX tiles
# refuses to start, naming the missing extensions, exactly on CPUs without AMX (AMD EPYC, older
# Xeons), and starts where /proc/cpuinfo lists amx_tile and amx_bf16.
# Usage: cpu_guard_test.sh PROBE_BINARY
set -uo pipefail
out=$("$1" 2>&1); status=$?
if grep -qw amx_tile /proc/cpuinfo && grep -qw amx_bf16 /proc/cpuinfo; then
  [ $status = 0 ] || { echo "probe refused a CPU with AMX: $out"; exit 1; }
  echo "CPU has AMX: the probe starts"
else
  [ $status = 3 ] || { echo "expected exit 3 on a CPU without AMX, got $status: $out"; exit 1; }
  grep -q "instructions this CPU lacks: amx-tile amx-bf16\." <<< "$out" || { echo "unexpected message: $out"; exit 1; }
  echo "CPU without AMX: refused with: $out"
fi
