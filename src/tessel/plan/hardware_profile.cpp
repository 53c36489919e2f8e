#include "tessel/plan/hardware_profile.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tessel/ckpt/checkpoint_files.h"
#include "tessel/ckpt/json_fields.h"
#include "tessel/core/check.h"
#include "tessel/kernels/op_log.h"
#include "tessel/plan/cost_model.h"

namespace tessel::plan {

using nlohmann::json;
using ckpt::JsonFields;

double EfficiencyTable::at(std::span<const double> dims, std::string_view variant) const {
  if (points.empty()) return fallback;
  const auto seen = looked_up.find(LookedUpOrder::Key{variant, dims});
  if (seen != looked_up.end()) return seen->second;
  const double eff = blend(dims, variant);
  looked_up.emplace(std::make_pair(std::string(variant), std::vector<double>(dims.begin(), dims.end())), eff);
  return eff;
}

double EfficiencyTable::blend(std::span<const double> dims, std::string_view variant) const {
  bool variant_known = false;
  for (const ShapePoint& p : points) variant_known |= p.variant == variant;
  // Distance in log2 space over the dims both have; the 4 nearest points blend by 1 / d^2.
  struct Near {
    double d2, eff;
  };
  std::vector<Near> near;
  for (const ShapePoint& p : points) {
    if (variant_known && p.variant != variant) continue;
    if (p.dims.size() != dims.size()) continue;
    double d2 = 0;
    for (size_t i = 0; i < dims.size(); ++i) {
      const double a = std::log2(std::max(dims[i], 1.0)), b = std::log2(std::max(p.dims[i], 1.0));
      d2 += (a - b) * (a - b);
    }
    if (d2 < 1e-12) return p.efficiency;
    near.push_back({d2, p.efficiency});
  }
  if (near.empty()) return fallback;
  const size_t k = std::min<size_t>(4, near.size());
  std::partial_sort(near.begin(), near.begin() + long(k), near.end(), [](const Near& a, const Near& b) { return a.d2 < b.d2; });
  double wsum = 0, esum = 0;
  for (size_t i = 0; i < k; ++i) {
    const double w = 1.0 / near[i].d2;
    wsum += w;
    esum += w * near[i].eff;
  }
  return esum / wsum;
}

namespace {

constexpr const char* kFormat = "tessel-hardware-1";

double positive(const JsonFields& f, const std::string& key) { return f.number(key, 0, 1e30, true); }

// {"2": 51.06, "4": 19.21}: a fixed latency in microseconds for each group size listed.
std::map<int64_t, double> fixed_latency_by_group_size(const JsonFields& f, const std::string& key) {
  std::map<int64_t, double> out;
  if (!f.has(key)) return out;
  const JsonFields sizes = f.object(key);
  for (const auto& [size, value] : sizes.json().items()) {
    // Keys as SimuMax matches them (str(group size)): plain decimal, no sign or leading zero.
    const bool canonical = !size.empty() && size.size() <= 7 && size[0] != '0' &&
                           size.find_first_not_of("0123456789") == std::string::npos;
    const int64_t n = canonical ? std::stoll(size) : 0;
    TESSEL_CHECK(n >= 1 && n <= (int64_t(1) << 20), "{}: {} has the key '{}'; allowed: group sizes 1 .. {}",
                 f.where(), key, size, int64_t(1) << 20);
    const double seconds = sizes.number(size, 0, 1e9) * 1e-6;
    if (n >= 2) out[n] = seconds;  // a group of 1 moves nothing and costs nothing
  }
  return out;
}

CollectiveProfile read_collective(const JsonFields& f) {
  CollectiveProfile c;
  c.bandwidth = f.number("gbps", 0, 1e9, true) * 1e9;
  c.efficiency = f.number("efficiency", 0, 100, true);
  c.latency_s = f.number_or("latency_us", 0, 0, 1e9) * 1e-6;
  c.fixed_latency_s = f.number_or("fixed_latency_us", 0, 0, 1e9) * 1e-6;
  c.fixed_latency_s_by_group_size = fixed_latency_by_group_size(f, "fixed_latency_us_by_group_size");
  c.scale = f.number_or("scale", 1, 0, 16, true);
  c.offset = f.number_or("offset", -1, -1, 0);
  return c;
}

// A tessel profile: see configs/hardware/README.md for the fields.
HardwareProfile from_tessel_json(const json& j, const std::string& source) {
  const JsonFields top(j, "hardware profile " + source);
  TESSEL_CHECK(top.string("format") == kFormat, "hardware profile {}: format '{}', expected '{}'", source,
               top.string("format"), kFormat);
  HardwareProfile p;
  p.source = source;
  p.name = top.string("name");
  p.device = top.string("device");
  TESSEL_CHECK(p.device == "cpu" || p.device == "gpu", "hardware profile {}: device '{}': allowed cpu, gpu", source,
               p.device);
  p.devices_per_node = int(top.integer("devices_per_node", 1, 1 << 20));
  p.memory_gib = top.number_or("memory_gib", 0, 0, 1e9);
  p.threads = int(top.integer_or("threads", 0, 0, 4096));
  p.kernel_latency_s = top.number_or("kernel_latency_us", 0, 0, 1e9) * 1e-6;
  p.host_seconds_per_kernel = top.number_or("host_us_per_kernel", 0, 0, 1e9) * 1e-6;
  p.async_progress = top.boolean_or("async_progress", true);
  const JsonFields compute = top.object("compute");
  for (const auto& [kind, value] : compute.json().items()) {
    TESSEL_CHECK(std::find(kComputeOpKinds.begin(), kComputeOpKinds.end(), kind) != kComputeOpKinds.end(),
                 "hardware profile {}: compute op kind '{}' is not known; allowed: {}", source, kind,
                 fmt::format("{}", fmt::join(kComputeOpKinds, ", ")));
    const JsonFields op = compute.object(kind);
    ComputeOpProfile c;
    c.peak_flops = positive(op, "peak_tflops") * 1e12;
    c.efficiency.fallback = op.number("efficiency", 0, 1, true);
    if (op.has("points")) {
      TESSEL_CHECK(op.raw("points").is_array(), "{}: compute.{}.points must be an array", top.where(), kind);
      // A point's dims are what cost_model.h's efficiency_dims gives its records: M, N, K for a GEMM;
      // B, T, H, G, Dh, Dv for attention. A point of another length would never be matched.
      const bool gemm = kind.find("gemm") != std::string::npos;
      const size_t dims = gemm ? 3 : 6;
      size_t index = 0;
      for (const json& pt : op.raw("points")) {
        const JsonFields f(pt, fmt::format("{}: compute.{}.points[{}]", top.where(), kind, index++));
        ShapePoint s;
        TESSEL_CHECK(f.has("dims") && f.raw("dims").is_array() && f.raw("dims").size() == dims,
                     "{}: 'dims' must be an array of {} sizes ({})", f.where(), dims,
                     gemm ? "M, N, K" : "batch, sequence, heads, key/value heads, head size, value head size");
        for (const json& d : f.raw("dims")) {
          TESSEL_CHECK(d.is_number() && d.get<double>() >= 1, "{}: dims must be numbers >= 1, got {}", f.where(),
                       d.dump());
          s.dims.push_back(d.get<double>());
        }
        s.variant = f.string_or("variant", "");
        // A GEMM's variant: the transposes of a and b, and "+acc" when c accumulates (op_log.h).
        TESSEL_CHECK(!gemm || s.variant.empty() ||
                         (s.variant.size() >= 2 && (s.variant[0] == 'N' || s.variant[0] == 'T') &&
                          (s.variant[1] == 'N' || s.variant[1] == 'T') &&
                          (s.variant.size() == 2 || s.variant.substr(2) == "+acc")),
                     "{}: variant '{}' is not a GEMM variant (NN, NT, TN or TT, with +acc when accumulating)",
                     f.where(), s.variant);
        s.efficiency = f.number("efficiency", 0, 1, true);
        c.efficiency.points.push_back(std::move(s));
      }
    }
    p.compute[kind] = std::move(c);
  }
  const JsonFields memory = top.object("memory");
  p.memory_bandwidth = memory.number("bandwidth_gbps", 0, 1e9, true) * 1e9;
  p.memory_latency_s = memory.number_or("latency_us", 0, 0, 1e9) * 1e-6;
  const JsonFields eff = memory.object("efficiency");
  for (const auto& [op, value] : eff.json().items()) {
    TESSEL_CHECK(op == "default" || kernels::is_op_family(op),
                 "{}: memory.efficiency has an entry for '{}', which no kernel records; allowed: default, {}",
                 top.where(), op, fmt::format("{}", fmt::join(kernels::kOpFamilies, ", ")));
    TESSEL_CHECK(!priced_by_compute(op),
                 "{}: memory.efficiency has an entry for '{}', which is priced by its compute entry ({}), not by "
                 "memory bandwidth",
                 top.where(), op, fmt::format("{}", fmt::join(kComputeOpKinds, ", ")));
    p.memory[op].efficiency = eff.number(op, 0, 100, true);
  }
  TESSEL_CHECK(p.memory.count("default"), "{}: memory.efficiency needs a 'default' entry (op families not listed)",
               top.where());
  // Networks are optional (a profile measured in one process has none): a plan whose collectives
  // need a missing level is refused then, naming it (cost_model.h).
  const nlohmann::json no_networks = nlohmann::json::object();
  const JsonFields nets = top.has("networks") ? top.object("networks") : JsonFields(no_networks, top.where());
  for (const auto& [level, value] : nets.json().items()) {
    TESSEL_CHECK(level == "intra_node" || level == "inter_node",
                 "hardware profile {}: network level '{}' is not known; allowed: intra_node, inter_node", source, level);
    const JsonFields lv = nets.object(level);
    NetworkProfile n;
    for (const auto& [kind, v] : lv.json().items()) {
      TESSEL_CHECK(std::find(kCollectiveKinds.begin(), kCollectiveKinds.end(), kind) != kCollectiveKinds.end(),
                   "hardware profile {}: networks.{}: collective '{}' is not known; allowed: {}", source, level, kind,
                   fmt::format("{}", fmt::join(kCollectiveKinds, ", ")));
      n.ops[kind] = read_collective(lv.object(kind));
    }
    for (const std::string& kind : kCollectiveKinds)
      TESSEL_CHECK(n.ops.count(kind), "hardware profile {}: networks.{} has no '{}' entry (every level needs {})",
                   source, level, kind, fmt::format("{}", fmt::join(kCollectiveKinds, ", ")));
    p.networks[level] = std::move(n);
  }
  return p;
}

// "b=1, m=4096, k=8192, n=10240, layout=TN" -> {b: 1, m: 4096, ...}.
std::map<std::string, std::string> key_values(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(at, end - at);
    item.erase(0, item.find_first_not_of(' '));
    const size_t eq = item.find('=');
    if (eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
    at = end + 1;
  }
  return out;
}

double size_field(const std::map<std::string, std::string>& kv, const std::string& key, const std::string& where) {
  const auto it = kv.find(key);
  TESSEL_CHECK(it != kv.end(), "{}: shape key without '{}'", where, key);
  try {
    const double v = std::stod(it->second);
    TESSEL_CHECK(v >= 1 && std::isfinite(v), "{}: '{}={}' must be a size >= 1", where, key, it->second);
    return v;
  } catch (const std::logic_error&) {
    TESSEL_FAIL("{}: '{}={}' is not a number", where, key, it->second);
  }
}

// SimuMax names a GEMM by cuBLAS's column-major layout of C = op(A) op(B) with C [m, n]; in tessel's
// row-major terms the two letters swap (SimuMax "TN", a forward x W^T, is tessel's "NT").
std::string tessel_variant(const std::map<std::string, std::string>& kv, const std::string& where) {
  const auto lay = kv.find("layout");
  const auto transpose = [](char c) { return c == 'N' || c == 'T'; };
  TESSEL_CHECK(lay == kv.end() || (lay->second.size() == 2 && transpose(lay->second[0]) && transpose(lay->second[1])),
               "{}: 'layout={}' is not a GEMM layout (NN, NT, TN or TT)", where, lay->second);
  std::string v = lay != kv.end() ? std::string{lay->second[1], lay->second[0]} : "";
  const auto acc = kv.find("accumulate");
  TESSEL_CHECK(acc == kv.end() || acc->second == "True" || acc->second == "False",
               "{}: 'accumulate={}' must be True or False", where, acc->second);
  TESSEL_CHECK(acc == kv.end() || acc->second == "False" || lay != kv.end(),
               "{}: 'accumulate=True' needs the GEMM's 'layout' (no record is looked up without it)", where);
  if (acc != kv.end() && acc->second == "True") v += "+acc";
  return v;
}

// The work a causal attention kernel does per FLOP SimuMax's sdp efficiencies count
// (simumax_attention).
constexpr double kSimumaxSdpWorkPerCountedFlop = 0.5;

ComputeOpProfile simumax_compute(const JsonFields& op, const std::string& kind) {
  ComputeOpProfile c;
  c.peak_flops = op.number("tflops", 0, 1e9, true) * 1e12;
  c.efficiency.fallback = op.number("efficient_factor", 0, 1);
  if (!op.has("accurate_efficient_factor")) return c;
  const JsonFields table = op.object("accurate_efficient_factor");
  for (const auto& [key, value] : table.json().items()) {
    const std::string where = fmt::format("{}.accurate_efficient_factor '{}'", op.where(), key);
    const auto kv = key_values(key);
    ShapePoint s;
    s.efficiency = table.number(key, 0, 2, true);  // measured: slightly above 1 where the peak is nominal
    if (kind == "matmul") {
      const double b = kv.count("b") ? size_field(kv, "b", where) : 1.0;
      s.dims = {b * size_field(kv, "m", where), size_field(kv, "n", where), size_field(kv, "k", where)};
      s.variant = tessel_variant(kv, where);
      // An accumulating GEMM adds into c: its output dtype sets the epilogue's read-modify-write
      // traffic (fp32 is 5-10% slower than bf16 on the B200 file's large shapes). tessel's matmul
      // writes f32 only (kernels/gemm.cpp), so a shape measured both ways is priced by its fp32
      // entry, and an accumulation into bf16 is not a kernel tessel runs.
      const auto out = kv.find("out_dtype");
      if (s.variant.ends_with("+acc") && out != kv.end() && out->second != "fp32") continue;
    } else {  // sdp_fwd, sdp_bwd
      s.dims = {size_field(kv, "batch", where), size_field(kv, "seq_len", where), size_field(kv, "head_num", where),
                size_field(kv, "kv_head_num", where), size_field(kv, "qk_head_dim", where),
                size_field(kv, "v_head_dim", where)};
    }
    c.efficiency.points.push_back(std::move(s));
  }
  return c;
}

// SimuMax measures attention with causal masks (simu_tools/efficency_test/test_fa_efficiency.py)
// but counts the FLOPs of the unmasked problem: forward 2 x batch x seq^2 x heads x (qk_dim + v_dim),
// backward 2.5 times that. A causal kernel does half of that work, so its efficiency against the
// work done, which is what tessel's attention records count (the masked half left out,
// attention_forward_flops), is half the file's: its values above 1 at 32k tokens are 50-60%.
ComputeOpProfile simumax_attention(const JsonFields& op) {
  ComputeOpProfile c = simumax_compute(op, "sdp");
  c.efficiency.fallback *= kSimumaxSdpWorkPerCountedFlop;
  for (ShapePoint& s : c.efficiency.points) s.efficiency *= kSimumaxSdpWorkPerCountedFlop;
  return c;
}

// SimuMax's system JSON (../shared/simumax/README.md). What tessel takes from it, and how:
//   matmul -> gemm.bf16 (its table keyed by shape and layout, an accumulation by its fp32-output
//   entry); gemm.f32 at half the peak (TF32 tensor cores) with the same efficiencies;
//   fp8_matmul -> fp8_gemm where its efficiency is measured (non-zero), else the bf16 entry;
//   sdp_fwd / sdp_bwd -> attention_fwd / attention_bwd (efficiencies halved: SimuMax counts a causal
//   kernel's FLOPs as if unmasked);
//   bandwidth.default -> the memory bandwidth and default efficiency, permute_fwd / permute_bwd ->
//   the MoE row gathers and scatters, ce / ce_fusion -> the vocabulary-parallel and fused
//   cross-entropy kernels; high_intra_node (a PCIe system's intra_node_pcie_<node size>x) ->
//   intra_node, inter_node -> inter_node (values an op
//   leaves out come from the level's bandwidth entry). Kernel launch latency: none (a GPU queues
//   kernels ahead of the device).
HardwareProfile from_simumax_json(const json& j, const std::string& source) {
  const JsonFields top(j, "SimuMax system " + source);
  HardwareProfile p;
  p.source = source;
  p.name = top.string_or("sys_name", source);
  p.device = "gpu";
  p.devices_per_node = int(top.integer("num_per_node", 1, 1 << 20));
  const JsonFields acc = top.object("accelerator");
  p.memory_gib = acc.number_or("mem_gbs", 0, 0, 1e9);
  const JsonFields ops = acc.object("op");
  p.compute["gemm.bf16"] = simumax_compute(ops.object("matmul"), "matmul");
  ComputeOpProfile f32 = p.compute["gemm.bf16"];
  f32.peak_flops /= 2;
  p.compute["gemm.f32"] = f32;
  if (ops.has("fp8_matmul") && ops.object("fp8_matmul").number_or("efficient_factor", 0, 0, 1) > 0)
    p.compute["fp8_gemm"] = simumax_compute(ops.object("fp8_matmul"), "matmul");
  else
    p.compute["fp8_gemm"] = p.compute["gemm.bf16"];
  p.compute["attention_fwd"] = simumax_attention(ops.object("sdp_fwd"));
  p.compute["attention_bwd"] = simumax_attention(ops.object("sdp_bwd"));
  const JsonFields bw = acc.object("bandwidth");
  const JsonFields def = bw.object("default");
  p.memory_bandwidth = def.number("gbps", 0, 1e9, true) * 1e9;
  p.memory["default"].efficiency = def.number("efficient_factor", 0, 100, true);
  p.memory_latency_s = def.number_or("latency_us", 0, 0, 1e9) * 1e-6;
  const auto ratio = [&](const char* key) {
    // The class's efficiency relative to the default bandwidth (its own gbps may differ).
    const JsonFields c = bw.object(key);
    return c.number("efficient_factor", 0, 100, true) * c.number("gbps", 0, 1e9, true) * 1e9 / p.memory_bandwidth;
  };
  if (bw.has("permute_fwd"))
    for (const char* op : {"gather_rows"}) p.memory[op].efficiency = ratio("permute_fwd");
  if (bw.has("permute_bwd"))
    for (const char* op : {"scatter_add_rows"}) p.memory[op].efficiency = ratio("permute_bwd");
  if (bw.has("ce"))
    for (const char* op : {"xent_local_max_and_target", "xent_local_sum_exp", "xent_vocab_parallel_finish"})
      p.memory[op].efficiency = ratio("ce");
  if (bw.has("ce_fusion")) p.memory["cross_entropy"].efficiency = ratio("ce_fusion");
  const JsonFields nets = top.object("networks");
  // A PCIe system (intra_with_pcie) describes its node by how many devices a group spans
  // (intra_node_pcie_8x, _4x, _2x); tessel has one intra-node level, and takes the whole node's
  // (groups of fewer devices are priced as if they spanned it).
  TESSEL_CHECK(!nets.has("intra_with_pcie") || nets.raw("intra_with_pcie").is_boolean(),
               "{}: networks.intra_with_pcie must be true or false, got {}", top.where(),
               nets.has("intra_with_pcie") ? nets.raw("intra_with_pcie").dump() : "");
  const bool pcie = nets.has("intra_with_pcie") && nets.raw("intra_with_pcie").get<bool>();
  const std::string intra = pcie ? fmt::format("intra_node_pcie_{}x", p.devices_per_node) : "high_intra_node";
  const std::vector<std::pair<std::string, std::string>> levels = {{intra, "intra_node"}, {"inter_node", "inter_node"}};
  for (const auto& [theirs, ours] : levels) {
    if (!nets.has(theirs)) continue;
    const JsonFields lv = nets.object(theirs);
    const JsonFields lbw = lv.object("bandwidth");
    const JsonFields lops = lv.object("op");
    NetworkProfile n;
    for (const std::string& kind : kCollectiveKinds) {
      TESSEL_CHECK(lops.has(kind), "{}: networks.{}.op has no '{}' entry", top.where(), theirs, kind);
      const JsonFields o = lops.object(kind);
      CollectiveProfile c;
      c.bandwidth = lbw.number("gbps", 0, 1e9, true) * 1e9;
      c.efficiency = o.number_or("efficient_factor", lbw.number_or("efficient_factor", 1, 0, 100, true), 0, 100, true);
      c.latency_s = o.number_or("latency_us", lbw.number_or("latency_us", 0, 0, 1e9), 0, 1e9) * 1e-6;
      // SimuMax's order (SystemConfig.compute_net_op_time): the op's latency for this group size,
      // else the op's fixed_latency_us; where the op has none, the level's for this group size,
      // else the level's fixed_latency.
      c.fixed_latency_s_by_group_size = fixed_latency_by_group_size(o, "fixed_latency_us_by_comm_num");
      if (o.has("fixed_latency_us")) {
        c.fixed_latency_s = o.number("fixed_latency_us", 0, 1e9) * 1e-6;
      } else {
        c.fixed_latency_s = lbw.number_or("fixed_latency", 0, 0, 1e9) * 1e-6;
        c.fixed_latency_s_by_group_size.merge(fixed_latency_by_group_size(lbw, "fixed_latency_us_by_comm_num"));
      }
      c.scale = o.number_or("scale", 1, 0, 16, true);
      c.offset = o.number_or("offset", -1, -1, 0);
      n.ops[kind] = c;
    }
    p.networks[ours] = std::move(n);
  }
  TESSEL_CHECK(p.networks.count("intra_node"), "{}: networks has no '{}' level{}", top.where(), intra,
               pcie ? fmt::format(" (intra_with_pcie: the level of a whole node of {})", p.devices_per_node) : "");
  return p;
}

}  // namespace

HardwareProfile hardware_profile_from_json_text(const std::string& text, const std::string& source) {
  const json j = ckpt::parse_json_text(text, source, "hardware profile");
  TESSEL_CHECK(j.is_object(), "hardware profile {} must hold a JSON object", source);
  TESSEL_CHECK(j.contains("accelerator") || j.contains("format"),
               "hardware profile {} is neither a tessel profile (it has no 'format': '{}') nor a SimuMax system (it "
               "has no 'accelerator')",
               source, kFormat);
  return j.contains("accelerator") ? from_simumax_json(j, source) : from_tessel_json(j, source);
}

HardwareProfile load_hardware_profile(const std::string& path) {
  std::error_code ec;
  TESSEL_CHECK(std::filesystem::is_regular_file(path, ec), "hardware profile {} does not exist (or is not a file)",
               path);
  return hardware_profile_from_json_text(ckpt::read_text_file(path), path);
}

std::string hardware_profile_to_json_text(const HardwareProfile& p) {
  json compute = json::object();
  for (const auto& [kind, c] : p.compute) {
    json points = json::array();
    for (const ShapePoint& s : c.efficiency.points)
      points.push_back({{"dims", s.dims}, {"variant", s.variant}, {"efficiency", s.efficiency}});
    compute[kind] = {{"peak_tflops", c.peak_flops / 1e12}, {"efficiency", c.efficiency.fallback}, {"points", points}};
  }
  json eff = json::object();
  for (const auto& [op, m] : p.memory) eff[op] = m.efficiency;
  json nets = json::object();
  for (const auto& [level, n] : p.networks)
    for (const auto& [kind, c] : n.ops) {
      json& o = nets[level][kind];
      o = {{"gbps", c.bandwidth / 1e9},       {"efficiency", c.efficiency},
           {"latency_us", c.latency_s * 1e6}, {"fixed_latency_us", c.fixed_latency_s * 1e6},
           {"scale", c.scale},                {"offset", c.offset}};
      for (const auto& [size, s] : c.fixed_latency_s_by_group_size)
        o["fixed_latency_us_by_group_size"][std::to_string(size)] = s * 1e6;
    }
  const json j = {{"format", kFormat},
                  {"name", p.name},
                  {"device", p.device},
                  {"devices_per_node", p.devices_per_node},
                  {"memory_gib", p.memory_gib},
                  {"threads", p.threads},
                  {"kernel_latency_us", p.kernel_latency_s * 1e6},
                  {"host_us_per_kernel", p.host_seconds_per_kernel * 1e6},
                  {"async_progress", p.async_progress},
                  {"compute", compute},
                  {"memory",
                   {{"bandwidth_gbps", p.memory_bandwidth / 1e9},
                    {"latency_us", p.memory_latency_s * 1e6},
                    {"efficiency", eff}}},
                  {"networks", nets}};
  return j.dump(1) + "\n";
}

void save_hardware_profile(const HardwareProfile& p, const std::string& path) {
  ckpt::write_text_file(path, hardware_profile_to_json_text(p));
}

}  // namespace tessel::plan
