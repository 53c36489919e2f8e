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
  const auto& m = me_;
  // Color = the coordinates held fixed, key = the one that varies; split is collective over world.
  tp_ = world.split(m.cp + s.cp * (m.dp + dp_ * m.pp), m.tp);
  cp_ = world.split(m.tp + s.tp * (m.dp + dp_ * m.pp), m.cp);
  dp_g_ = world.split(m.tp + s.tp * (m.cp + s.cp * m.pp), m.dp);
  pp_ = world.split(m.tp + s.tp * (m.cp + s.cp * m.dp), m.pp);
  dp_cp_ = world.split(m.tp + s.tp * m.pp, m.cp + s.cp * m.dp);
  const int dpcp_index = m.cp + s.cp * m.dp;  // position in the DP x CP product
  ep_ = world.split((m.tp + s.tp * m.pp) * ((dp_ * s.cp) / s.ep) + dpcp_index / s.ep, dpcp_index % s.ep);
  ep_dp_ = world.split((m.tp + s.tp * m.pp) * s.ep + dpcp_index % s.ep, dpcp_index / s.ep);
  const bool edge = m.pp == 0 || m.pp == s.pp - 1;
  embedding_ = world.split(edge ? m.tp + s.tp * (m.cp + s.cp * m.dp) : -1, m.pp);
}

std::string ParallelState::describe() const {
  return fmt::format("world {} = tp {} x cp {} x dp {} x pp {} (ep {}); this rank: tp {} cp {} dp {} pp {}",
                     world_.size(), s_.tp, s_.cp, dp_, s_.pp, s_.ep, me_.tp, me_.cp, me_.dp, me_.pp);
}

}  // namespace tessel::comm
