// Hugging Face import of bad inputs: config.json keys missing, ill-typed, out of range or naming what
// tessel does not implement; index files whose weight_map leaves the model directory; missing,
// misshapen or foreign tensors. Each is refused with a tessel::Error naming the file and the key or
// tensor. The directories are tiny exports edited by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/host_access.h"
#include "support/scratch_dir.h"
#include "tessel/ckpt/hf.h"
#include "tessel/ckpt/safetensors.h"
#include "tessel/nn/model.h"

using namespace tessel;
using nlohmann::json;

namespace {

// Runs f and expects a tessel::Error whose message contains `text` (any other exception fails the test).
template <class F>
void expect_error(F&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected an error containing: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

nn::ModelConfig tiny(const std::string& arch) {
  nn::ModelConfig c;
  c.arch = arch;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.num_query_groups = arch == "gpt2" ? 4 : 2;
  c.ffn_hidden_size = 48;
  c.vocab_size = 64;
  c.seq_length = 32;
  if (arch == "mixtral") c.num_experts = 4;
  if (arch == "deepseek_v3") {
    c.num_query_groups = 4;
    c.qk_head_dim = 8, c.qk_pos_emb_head_dim = 4, c.v_head_dim = 8, c.kv_lora_rank = 8;
    c.num_experts = 4, c.moe_ffn_hidden_size = 16, c.moe_first_dense_layers = 1;
    c.moe_router_score_function = "sigmoid", c.moe_router_enable_expert_bias = true;
  }
  return c;
}

// A tiny model of `arch` exported to dir.
void export_tiny(const std::string& dir, const std::string& arch) {
  const nn::ModelConfig c = tiny(arch);
  nn::Model m(c);
  m.params().initialize(3);
  ckpt::export_hf(c, m.params(), dir, m.state_tensors());
}

json read_json(const std::string& path) { return json::parse(std::ifstream(path)); }
void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Rewrites DIR/model.safetensors through `edit`.
template <class F>
void edit_tensors(const std::string& dir, F&& edit) {
  auto st = ckpt::read_safetensors(dir + "/model.safetensors");
  edit(st.tensors);
  ckpt::write_safetensors(dir + "/model.safetensors", st.metadata, st.tensors);
}

void drop_tensor(std::vector<std::pair<std::string, Tensor>>& ts, const std::string& name) {
  const auto n = ts.size();
  std::erase_if(ts, [&](const auto& p) { return p.first == name; });
  ASSERT_EQ(ts.size(), n - 1) << name;
}

// Imports dir into a model built from its config, as `tessel import-hf` does.
void import_into_model(const std::string& dir) {
  const auto imp = ckpt::import_hf(dir);
  nn::Model m(imp.model);
  ckpt::copy_into(imp, m);
}

// A valid Llama config.json, edited per case.
json llama_config() {
  return {{"model_type", "llama"},      {"hidden_size", 32},       {"intermediate_size", 48},
          {"num_attention_heads", 4},   {"num_key_value_heads", 2}, {"num_hidden_layers", 2},
          {"vocab_size", 64},           {"max_position_embeddings", 32}, {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},      {"tie_word_embeddings", false},  {"hidden_act", "silu"}};
}

ckpt::HfConfig parse(const json& j) { return ckpt::parse_hf_config_text(j.dump(), "hf/config.json"); }

json with(json j, const std::string& key, const json& value) {
  j[key] = value;
  return j;
}

json without(json j, const std::string& key) {
  j.erase(key);
  return j;
}

const std::string kWhere = "import-hf: hf/config.json: ";

TEST(HfConfig, ReadsAValidConfig) {
  const auto c = parse(with(llama_config(), "rope_scaling", nullptr));
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.model.hidden_size, 32);
  EXPECT_EQ(c.model.num_query_groups, 2);
  EXPECT_EQ(c.model.norm_epsilon, 1e-5);
  EXPECT_FALSE(c.model.tie_embeddings);
  // Newer transformers' rope_parameters carry the base.
  const auto p = parse(with(without(llama_config(), "rope_theta"), "rope_parameters",
                            {{"rope_type", "default"}, {"rope_theta", 500000.0}}));
  EXPECT_EQ(p.model.rotary_base, 500000.0);
}

TEST(HfConfig, MissingKeysAreNamed) {
  expect_error([] { parse(without(llama_config(), "hidden_size")); },
               kWhere + "key 'hidden_size' is missing (expected an integer in [1, 16777216])");
  expect_error([] { parse(without(llama_config(), "model_type")); },
               kWhere + "key 'model_type' is missing (expected a string)");
  expect_error([] { parse(with(llama_config(), "num_hidden_layers", nullptr)); },
               kWhere + "key 'num_hidden_layers' is missing");
}

TEST(HfConfig, IllTypedAndOutOfRangeValuesAreNamed) {
  const std::string int_range = "must be an integer in [1, 16777216], got ";
  expect_error([] { parse(with(llama_config(), "hidden_size", 32.5)); }, kWhere + "key 'hidden_size' " + int_range + "32.5");
  expect_error([] { parse(with(llama_config(), "hidden_size", "32")); },
               kWhere + "key 'hidden_size' " + int_range + "\"32\"");
  expect_error([] { parse(with(llama_config(), "vocab_size", true)); }, kWhere + "key 'vocab_size' " + int_range + "true");
  expect_error([] { parse(with(llama_config(), "num_hidden_layers", -1)); },
               kWhere + "key 'num_hidden_layers' " + int_range + "-1");
  expect_error([] { parse(with(llama_config(), "vocab_size", int64_t(1) << 40)); },
               kWhere + "key 'vocab_size' " + int_range + "1099511627776");
  expect_error([] { parse(with(llama_config(), "max_position_embeddings", UINT64_MAX)); },
               kWhere + "key 'max_position_embeddings' must be an integer in [1, 16777216], got 18446744073709551615");
  expect_error([] { parse(with(llama_config(), "num_key_value_heads", 5)); },
               kWhere + "key 'num_key_value_heads' must be an integer in [1, 4], got 5");
  expect_error([] { parse(with(llama_config(), "rms_norm_eps", "x")); },
               kWhere + "key 'rms_norm_eps' must be a number in (0, 1], got \"x\"");
  expect_error([] { parse(with(llama_config(), "rms_norm_eps", 0)); },
               kWhere + "key 'rms_norm_eps' must be a number in (0, 1], got 0");
  expect_error([] { parse(with(llama_config(), "tie_word_embeddings", "yes")); },
               kWhere + "key 'tie_word_embeddings' must be true or false, got \"yes\"");
  expect_error([] { parse(with(llama_config(), "model_type", 3)); }, kWhere + "key 'model_type' must be a string, got 3");
  expect_error([] { parse(with(llama_config(), "model_type", "qwen2")); },
               kWhere + "model_type 'qwen2' is not supported (allowed: llama, mixtral, gpt2, deepseek_v3)");
  // Shapes the accessor accepts and the model cannot have name the file too.
  expect_error([] { parse(with(llama_config(), "num_key_value_heads", 3)); },
               "import-hf: hf/config.json describes a model tessel cannot build: ");
}

TEST(HfConfig, NotAnObjectOrNotJson) {
  expect_error([] { ckpt::parse_hf_config_text("[1, 2]", "hf/config.json"); },
               "import-hf: hf/config.json must hold a JSON object, got [1,2]");
  try {
    ckpt::parse_hf_config_text("{\"model_type\": ", "hf/config.json");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("import-hf: hf/config.json is not valid JSON: parse error at line 1, column 16"),
              std::string::npos) << what;
    EXPECT_EQ(what.find("json.exception"), std::string::npos) << what;  // no library tag
  }
}

TEST(HfConfig, RopeScalingIsRefusedNamingItsType) {
  expect_error([] { parse(with(llama_config(), "rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}})); },
               kWhere + "rope_scaling type 'llama3' is not supported yet");
  expect_error([] { parse(with(llama_config(), "rope_scaling", {{"type", "linear"}, {"factor", 2.0}})); },
               kWhere + "rope_scaling type 'linear' is not supported yet");
  expect_error([] { parse(with(llama_config(), "rope_scaling", {{"factor", 2.0}})); },
               kWhere + "rope_scaling type '' is not supported yet");
  expect_error([] { parse(with(llama_config(), "rope_scaling", "yarn")); },
               kWhere + "key 'rope_scaling' must be an object, got \"yarn\"");
  expect_error([] { parse(with(llama_config(), "rope_parameters", {{"rope_type", "dynamic"}})); },
               kWhere + "rope_parameters type 'dynamic' is not supported yet");
  EXPECT_NO_THROW(parse(with(llama_config(), "rope_scaling", {{"rope_type", "default"}})));
}

TEST(HfConfig, LlamaSettingsThatChangeTheMathAreRefused) {
  expect_error([] { parse(with(llama_config(), "hidden_act", "gelu")); },
               kWhere + "hidden_act \"gelu\" is not supported (Llama and Mixtral MLPs here are SwiGLU: silu)");
  expect_error([] { parse(with(llama_config(), "attention_bias", true)); },
               kWhere + "attention_bias true is not supported");
  expect_error([] { parse(with(llama_config(), "mlp_bias", true)); }, kWhere + "mlp_bias true is not supported");
  expect_error([] { parse(with(llama_config(), "head_dim", 16)); },
               kWhere + "head_dim 16 is not supported (tessel's head size is hidden_size / num_attention_heads)");
  EXPECT_NO_THROW(parse(with(llama_config(), "head_dim", 8)));
  // Mixtral: a sliding window shorter than the context, and the router's training noise.
  json mixtral = with(with(with(llama_config(), "model_type", "mixtral"), "num_local_experts", 4),
                      "num_experts_per_tok", 2);
  expect_error([&] { parse(with(mixtral, "sliding_window", 16)); },
               kWhere + "sliding_window 16 is not supported (tessel attends over the whole context: the window must "
                        "be null or at least max_position_embeddings 32)");
  EXPECT_NO_THROW(parse(with(mixtral, "sliding_window", 4096)));
  expect_error([&] { parse(with(mixtral, "num_experts_per_tok", 5)); },
               kWhere + "key 'num_experts_per_tok' must be an integer in [1, 4], got 5");
  const auto noisy = parse(with(mixtral, "router_jitter_noise", 0.1));
  ASSERT_EQ(noisy.warnings.size(), 1u);
  EXPECT_EQ(noisy.warnings[0], "router_jitter_noise 0.1 in config.json is not applied: tessel's router adds no noise");
}

TEST(HfConfig, Gpt2ActivationAndAttentionScaling) {
  const json gpt2 = {{"model_type", "gpt2"}, {"n_embd", 32}, {"n_head", 4}, {"n_layer", 2},
                     {"n_inner", nullptr},   {"vocab_size", 64}, {"n_positions", 32}};
  EXPECT_EQ(parse(gpt2).model.ffn_hidden_size, 128);  // null n_inner: 4 x n_embd
  EXPECT_NO_THROW(parse(with(gpt2, "activation_function", "gelu_pytorch_tanh")));
  expect_error([&] { parse(with(gpt2, "activation_function", "gelu")); },
               kWhere + "activation_function 'gelu' is not supported (tessel's GPT-2 MLP computes the tanh GeLU");
  expect_error([&] { parse(with(gpt2, "activation_function", "relu")); }, kWhere + "activation_function 'relu' is not");
  expect_error([&] { parse(with(gpt2, "scale_attn_by_inverse_layer_idx", true)); },
               kWhere + "scale_attn_by_inverse_layer_idx true is not supported");
  expect_error([&] { parse(with(gpt2, "scale_attn_weights", false)); },
               kWhere + "scale_attn_weights false is not supported");
  expect_error([&] { parse(with(gpt2, "n_inner", 0)); }, kWhere + "key 'n_inner' must be an integer in [1, 16777216], got 0");
  const auto dropout = parse(with(gpt2, "resid_pdrop", 0.1));
  ASSERT_EQ(dropout.warnings.size(), 1u);
  EXPECT_EQ(dropout.warnings[0], "resid_pdrop 0.1 in config.json is not applied: tessel trains without dropout");
}

TEST(HfConfig, DeepseekKeysAreTyped) {
  tessel::testing::ScratchDir d("tessel-hf");
  export_tiny(d / "hf", "deepseek_v3");
  const json good = read_json(d / "hf/config.json");
  EXPECT_NO_THROW(parse(good));
  expect_error([&] { parse(with(good, "rope_scaling", {{"type", "yarn"}, {"factor", 40}})); },
               kWhere + "rope_scaling type 'yarn' is not supported yet");
  expect_error([&] { parse(with(good, "n_group", 0)); }, kWhere + "key 'n_group' must be an integer in [1, 4], got 0");
  expect_error([&] { parse(with(good, "kv_lora_rank", "8")); },
               kWhere + "key 'kv_lora_rank' must be an integer in [1, 16777216], got \"8\"");
  expect_error([&] { parse(with(good, "norm_topk_prob", 1)); }, kWhere + "key 'norm_topk_prob' must be true or false, got 1");
  expect_error([&] { parse(with(good, "scoring_func", "softmax")); }, kWhere + "scoring_func \"softmax\" is not supported");
}

TEST(HfImport, IndexPathsStayInsideTheModelDirectory) {
  tessel::testing::ScratchDir d("tessel-hf");
  export_tiny(d / "hf", "llama");
  auto index_mapping = [&](const std::string& file) {
    json map = json::object();
    for (const auto& [n, t] : ckpt::read_safetensors(d / "hf/model.safetensors").tensors) map[n] = "model.safetensors";
    map["model.norm.weight"] = file;
    write_text(d / "hf/model.safetensors.index.json", json{{"metadata", json::object()}, {"weight_map", map}}.dump());
  };
  const std::string index = d / "hf/model.safetensors.index.json";
  for (const std::string bad : {"../../etc/passwd", "/etc/passwd", "shards/../../model.safetensors", "..", ""}) {
    index_mapping(bad);
    expect_error([&] { ckpt::import_hf(d / "hf"); },
                 "import-hf: " + index + ": weight_map maps tensor 'model.norm.weight' to '" + bad +
                     "', which is not a file inside the model directory");
  }
  index_mapping("shards/../model.safetensors");  // normalises to a file inside: accepted
  EXPECT_NO_THROW(import_into_model(d / "hf"));

  write_text(index, R"({"weight_map": {"model.norm.weight": 3}})");
  expect_error([&] { ckpt::import_hf(d / "hf"); },
               "import-hf: " + index + ": weight_map: key 'model.norm.weight' must be a string, got 3");
  write_text(index, R"({"metadata": {}})");
  expect_error([&] { ckpt::import_hf(d / "hf"); },
               "import-hf: " + index + ": key 'weight_map' is missing (expected an object)");
  write_text(index, R"({"weight_map": [)");
  expect_error([&] { ckpt::import_hf(d / "hf"); }, "import-hf: " + index + " is not valid JSON: ");
  // A tensor mapped to a file that does not hold it.
  ckpt::write_safetensors(d / "hf/other.safetensors", {}, {{"x", Tensor::zeros({2}, DType::f32)}});
  write_text(index, R"({"weight_map": {"x": "other.safetensors", "model.norm.weight": "other.safetensors"}})");
  expect_error([&] { ckpt::import_hf(d / "hf"); },
               "import-hf: " + index + ": weight_map maps tensor 'model.norm.weight' to other.safetensors, which does "
                                       "not hold it");
}

TEST(HfImport, MissingTensorsAreNamedNeverLeftAtZero) {
  const tessel::testing::HostAccess host;  // the test reads and writes tensors in place: host code
  tessel::testing::ScratchDir d("tessel-hf");
  const std::string file = d / "hf/model.safetensors";
  export_tiny(d / "hf", "llama");
  edit_tensors(d / "hf", [](auto& ts) { drop_tensor(ts, "model.layers.1.mlp.down_proj.weight"); });
  expect_error([&] { import_into_model(d / "hf"); },
               "import-hf: " + file + " has no tensor 'model.layers.1.mlp.down_proj.weight'");

  export_tiny(d / "mixtral", "mixtral");  // named in Mixtral's naming
  edit_tensors(d / "mixtral", [](auto& ts) { drop_tensor(ts, "model.layers.0.block_sparse_moe.experts.1.w2.weight"); });
  expect_error([&] { import_into_model(d / "mixtral"); },
               "import-hf: " + d / "mixtral/model.safetensors" +
                   " has no tensor 'model.layers.0.block_sparse_moe.experts.1.w2.weight'");

  export_tiny(d / "gpt2", "gpt2");
  edit_tensors(d / "gpt2", [](auto& ts) { drop_tensor(ts, "transformer.h.1.mlp.c_fc.bias"); });
  expect_error([&] { ckpt::import_hf(d / "gpt2"); },
               "import-hf: " + d / "gpt2/model.safetensors" + " has no tensor 'transformer.h.1.mlp.c_fc.bias'");

  export_tiny(d / "ds", "deepseek_v3");  // the expert bias steers routing: required too
  edit_tensors(d / "ds", [](auto& ts) { drop_tensor(ts, "model.layers.1.mlp.gate.e_score_correction_bias"); });
  expect_error([&] { import_into_model(d / "ds"); },
               "import-hf: " + d / "ds/model.safetensors" + " has no tensor 'model.layers.1.mlp.gate.e_score_correction_bias'");
}

TEST(HfImport, MisshapenForeignAndNonFloatTensorsAreNamed) {
  tessel::testing::ScratchDir d("tessel-hf");
  const std::string file = d / "hf/model.safetensors";
  export_tiny(d / "hf", "llama");
  edit_tensors(d / "hf", [](auto& ts) {
    ts.emplace_back("model.layers.0.self_attn.q_proj.bias", Tensor::zeros({32}, DType::f32));
  });
  expect_error([&] { import_into_model(d / "hf"); },
               "import-hf: " + file + ": tensor 'model.layers.0.self_attn.q_proj.bias' has no place in the llama model "
                                      "config.json describes");
  export_tiny(d / "hf", "llama");
  edit_tensors(d / "hf", [](auto& ts) {
    for (auto& [n, t] : ts)
      if (n == "model.norm.weight") t = Tensor::zeros({31}, DType::f32);
  });
  expect_error([&] { import_into_model(d / "hf"); },
               "import-hf: " + file + ": tensor 'model.norm.weight' is [31], config.json implies [32]");
  export_tiny(d / "hf", "llama");
  edit_tensors(d / "hf", [](auto& ts) {
    for (auto& [n, t] : ts)
      if (n == "model.norm.weight") t = Tensor::zeros({32}, DType::i64);
  });
  expect_error([&] { ckpt::import_hf(d / "hf"); },
               "import-hf: " + file + ": tensor 'model.norm.weight' is i64; import reads F32, BF16 or F16 tensors");

  export_tiny(d / "gpt2", "gpt2");  // GPT-2 splits c_attn: its shape is checked before
  edit_tensors(d / "gpt2", [](auto& ts) {
    for (auto& [n, t] : ts)
      if (n == "transformer.h.0.attn.c_attn.weight") t = Tensor::zeros({32, 90}, DType::f32);
  });
  expect_error([&] { ckpt::import_hf(d / "gpt2"); },
               "import-hf: " + d / "gpt2/model.safetensors" +
                   ": tensor 'transformer.h.0.attn.c_attn.weight' is [32, 90], config.json implies [32, 96]");
}

TEST(HfImport, ARoundTripRestoresEveryParameter) {
  tessel::testing::ScratchDir d("tessel-hf");
  for (const std::string arch : {"llama", "mixtral", "gpt2", "deepseek_v3"}) {
    const nn::ModelConfig c = tiny(arch);
    nn::Model src(c);
    src.params().initialize(3);
    ckpt::export_hf(c, src.params(), d / arch, src.state_tensors());
    const auto imp = ckpt::import_hf(d / arch);
    nn::Model dst(imp.model);
    EXPECT_TRUE(ckpt::copy_into(imp, dst).empty()) << arch;
    ASSERT_EQ(src.params().numel(), dst.params().numel()) << arch;
    const tessel::testing::HostAccess host;
    const float* a = src.params().params_data();
    EXPECT_TRUE(std::equal(a, a + src.params().numel(), dst.params().params_data())) << arch;
  }
}

}  // namespace
