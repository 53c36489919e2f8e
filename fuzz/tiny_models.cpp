#include "tiny_models.h"

#include "tessel/ckpt/checkpoint.h"
#include "tessel/ckpt/distributed_checkpoint.h"
#include "tessel/comm/communicator.h"
#include "tessel/ckpt/hf.h"
#include "tessel/nn/model.h"
#include "tessel/optim/adamw.h"

namespace tessel::fuzz {

const std::vector<std::string>& hf_flavours() {
  static const std::vector<std::string> f{"llama", "mixtral", "gpt2", "deepseek_v3"};
  return f;
}

nn::ModelConfig tiny_model(const std::string& flavour) {
  nn::ModelConfig c;
  c.num_layers = 1;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.num_query_groups = 1;
  c.ffn_hidden_size = 24;
  c.vocab_size = 32;
  c.seq_length = 8;
  if (flavour == "mixtral") {
    c.num_experts = 4;
    c.moe_router_topk = 2;
  } else if (flavour == "gpt2") {
    c.arch = "gpt2";
    c.num_query_groups = 2;
  } else if (flavour == "deepseek_v3") {
    c.arch = "deepseek_v3";
    c.num_layers = 2;
    c.num_query_groups = 2;
    c.q_lora_rank = 8;
    c.kv_lora_rank = 8;
    c.qk_head_dim = 4;
    c.qk_pos_emb_head_dim = 4;
    c.v_head_dim = 4;
    c.num_experts = 4;
    c.moe_router_topk = 2;
    c.moe_ffn_hidden_size = 8;
    c.moe_shared_expert_intermediate_size = 8;
    c.moe_first_dense_layers = 1;
    c.moe_router_score_function = "sigmoid";
    c.moe_router_num_groups = 2;
    c.moe_router_group_topk = 1;
    c.moe_router_enable_expert_bias = true;
    c.mtp_num_layers = 1;
  }
  c.validate();
  return c;
}

void export_tiny_hf(const std::string& flavour, const std::filesystem::path& dir) {
  const nn::ModelConfig c = tiny_model(flavour);
  nn::Model m(c);
  m.params().initialize(1);
  std::filesystem::create_directories(dir);
  ckpt::export_hf(c, m.params(), dir.string(), m.state_tensors());
}

namespace {

// Parameter values that are exact in fp32 and involve no arithmetic that a compiler may contract or
// vectorise differently: the files, and so the CRC-32s in the committed metadata.json seeds, are the
// same from every build (the harness checks the CRCs of the files it writes itself).
void set_exact_values(nn::Model& m, int64_t step) {
  float* p = m.params().params_data();
  for (int64_t i = 0; i < m.params().numel(); ++i) p[i] = float((i * step) % 13) * 0.125f - 0.75f;
}

}  // namespace

nn::ModelConfig save_tiny_checkpoints(const std::filesystem::path& dir) {
  const nn::ModelConfig c = tiny_model("llama");
  nn::Model m(c);
  optim::AdamW opt(m.params(), {});
  for (int64_t step = 1; step <= 2; ++step) {
    set_exact_values(m, step);
    ckpt::save_checkpoint(dir.string(), m.params(), opt, {step, 4 * step, 1234}, "model:\n  num_layers: 1\n", 3);
  }
  return c;
}

void save_tiny_distributed_checkpoint(const std::filesystem::path& dir) {
  nn::Model m(tiny_model("llama"));
  optim::AdamW opt(m.params(), {});
  set_exact_values(m, 1);
  auto world = comm::make_local_communicator();
  ckpt::save_distributed_checkpoint(dir.string(), m.params(), opt, {1, 4, 1234}, "model:\n  num_layers: 1\n", 3,
                                    *world, {}, {{"world", 1}});
}

}  // namespace tessel::fuzz
