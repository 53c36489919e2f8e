#pragma once
// The FP8 training recipe (precision.fp8 in the config; TransformerEngine's names).
#include <cstdint>
#include <string>

#include "tessel/core/dtype.h"

namespace tessel::nn {

struct Fp8Recipe {
  enum class Kind { none, delayed, current, block };
  Kind kind = Kind::none;
  DType forward = DType::e4m3;   // activations and weights
  DType backward = DType::e5m2;  // output gradients: e5m2 ("hybrid") or e4m3
  int64_t history_len = 1024;    // delayed: amax history window
  bool history_max = true;       // delayed: scale from the window's max (else the most recent amax)
  int margin = 0;                // scale = fp8_max / amax / 2^margin
  bool pow2 = false;             // per-tensor scales rounded down to powers of two (block: always)
  // Layers kept in bf16 at either end of the stack (Megatron's --first-last-layers-bf16).
  int64_t bf16_layers_at_start = 0, bf16_layers_at_end = 0;
  // Norms and MLP activations in front of an FP8 Linear write its input as FP8 directly
  // (kernels/fp8_fused.h) under delayed and block scaling; off: they write the compute dtype and the
  // Linear quantises it (precision.fp8.fused_casts).
  bool fused_casts = true;
  bool enabled() const { return kind != Kind::none; }

  // From the config's strings; throws naming precision.fp8.<key> and what is allowed.
  static Fp8Recipe parse(const std::string& recipe, const std::string& format, int64_t history_len,
                         const std::string& algo, int64_t margin, bool pow2);
};

}  // namespace tessel::nn
