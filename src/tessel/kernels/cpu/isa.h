#pragma once
// Which of tessel's own hand-written vector paths may run. The CPUs tessel runs on differ (Intel
// Xeon with AMX-BF16, AMD EPYC with AVX512-BF16 and no AMX), and so do the kernels oneDNN picks on
// each, and with them the summation orders. ONEDNN_MAX_CPU_ISA caps oneDNN's choice (AVX2,
// AVX512_CORE, AVX512_CORE_BF16, ...); tessel's own kernels honour the same variable, so one setting
// stands a machine in for another kind: with a cap below AVX-512 the AVX-512 paths of this folder
// are skipped for their portable loops, as on a build or CPU without AVX-512.
namespace tessel::kernels::cpu {

// True when this build has AVX-512 paths (-march with AVX-512F) and ONEDNN_MAX_CPU_ISA, if set,
// allows AVX-512 (read once, on first use).
bool avx512_paths_enabled();

}  // namespace tessel::kernels::cpu
