#include "tessel/comm/parallel_state.h"

#include <fmt/format.h>

#include "tessel/core/check.h"

namespace tessel::comm {

RankCoords ParallelState::coords_of(int rank, const ParallelSizes& s, int dp) {
  RankCoords c{};
  c.tp = rank % s.tp;
  rank /= s.tp;
  c.cp = rank % s.cp;
  rank /= s.cp;
  c.dp = rank % dp;
  c.pp = rank / dp;
  return c;
}

int ParallelState::rank_of(const RankCoords& c, const ParallelSizes& s, int dp) {
  return c.tp + s.tp * (c.cp + s.cp * (c.dp + dp * c.pp));
}

ParallelState::ParallelState(Communicator& world, ParallelSizes s) : world_(world), s_(s) {
  const int W = world.size();
  TESSEL_CHECK(s.tp > 0 && s.cp > 0 && s.pp > 0 && s.ep > 0,
               "parallel sizes must be positive (tensor {}, context {}, pipeline {}, expert {})", s.tp, s.cp, s.pp, s.ep);
  TESSEL_CHECK(W % (s.tp * s.cp * s.pp) == 0,
               "world size {} is not divisible by tensor_model_parallel_size {} x context_parallel_size {} x "
               "pipeline_model_parallel_size {} = {} (data parallel is what remains)",
               W, s.tp, s.cp, s.pp, s.tp * s.cp * s.pp);
  dp_ = W / (s.tp * s.cp * s.pp);
  TESSEL_CHECK((dp_ * s.cp) % s.ep == 0,
               "expert_model_parallel_size {} must divide data parallel {} x context parallel {} = {}", s.ep, dp_, s.cp,
               dp_ * s.cp);
  me_ = coords_of(world.rank(), s, dp_);
  const int dp = dp_;
  // Each group: color = the coordinates held fixed, key = the one that varies, as a rule for any
  // rank (split_by: collective over world; the meta world evaluates it for every rank).
  const auto by = [&](auto color_key) {
    return world.split_by([&, color_key](int rank) { return color_key(coords_of(rank, s, dp)); });
  };
  using CK = std::pair<int, int>;
  tp_ = by([&](const RankCoords& m) { return CK{m.cp + s.cp * (m.dp + dp * m.pp), m.tp}; });
  cp_ = by([&](const RankCoords& m) { return CK{m.tp + s.tp * (m.dp + dp * m.pp), m.cp}; });
  dp_g_ = by([&](const RankCoords& m) { return CK{m.tp + s.tp * (m.cp + s.cp * m.pp), m.dp}; });
  pp_ = by([&](const RankCoords& m) { return CK{m.tp + s.tp * (m.cp + s.cp * m.dp), m.pp}; });
  dp_cp_ = by([&](const RankCoords& m) { return CK{m.tp + s.tp * m.pp, m.cp + s.cp * m.dp}; });
  // Expert groups: consecutive blocks of ep ranks of the DP x CP product, and the ranks holding the
  // same experts across those blocks.
  ep_ = by([&](const RankCoords& m) {
    const int dpcp_index = m.cp + s.cp * m.dp;  // position in the DP x CP product
    return CK{(m.tp + s.tp * m.pp) * ((dp * s.cp) / s.ep) + dpcp_index / s.ep, ep_rank_of(m, s)};
  });
  ep_dp_ = by([&](const RankCoords& m) {
    const int dpcp_index = m.cp + s.cp * m.dp;
    return CK{(m.tp + s.tp * m.pp) * s.ep + dpcp_index % s.ep, dpcp_index / s.ep};
  });
  embedding_ = by([&](const RankCoords& m) {
    const bool edge = m.pp == 0 || m.pp == s.pp - 1;
    return CK{edge ? m.tp + s.tp * (m.cp + s.cp * m.dp) : -1, m.pp};
  });
  for (auto& [name, g] : named_groups())
    if (g) g->set_label(name);
}

std::string ParallelState::describe() const {
  return fmt::format("world {} = tp {} x cp {} x dp {} x pp {} (ep {}); this rank: tp {} cp {} dp {} pp {}",
                     world_.size(), s_.tp, s_.cp, dp_, s_.pp, s_.ep, me_.tp, me_.cp, me_.dp, me_.pp);
}

std::vector<std::pair<std::string, Communicator*>> ParallelState::named_groups() const {
  std::vector<std::pair<std::string, Communicator*>> g{{"tp", tp_.get()},       {"cp", cp_.get()},
                                                             {"dp", dp_g_.get()},     {"pp", pp_.get()},
                                                             {"dp_cp", dp_cp_.get()}, {"ep", ep_.get()},
                                                             {"ep_dp", ep_dp_.get()}};
  if (embedding_) g.emplace_back("embedding", embedding_.get());
  return g;
}

}  // namespace tessel::comm
