#pragma once
// ParallelState: the process groups of hybrid parallelism, built once from the world communicator.
// World = TP x CP x DP x PP, ranks ordered tp-cp-(ep)-dp-pp with TP fastest (Megatron-LM's order):
//   rank = tp + TP * (cp + CP * (dp + DP * pp)).
// Groups: tp, cp, dp, pp; dp_cp (data-parallel gradient reduction when context parallelism splits
// sequences); embedding (first and last pipeline stage, for tied embeddings); ep (expert parallel,
// consecutive ranks of the DP x CP product, carved out of it).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessel/comm/communicator.h"

namespace tessel::comm {

struct ParallelSizes {
  int tp = 1, cp = 1, pp = 1, ep = 1;
};

struct RankCoords {
  int tp, cp, dp, pp;
};

class ParallelState {
 public:
  // Throws (on every rank alike, since sizes are global) when the sizes do not divide the world.
  ParallelState(Communicator& world, ParallelSizes sizes);

  int tp_size() const { return s_.tp; }
  int cp_size() const { return s_.cp; }
  int pp_size() const { return s_.pp; }
  int dp_size() const { return dp_; }
  int ep_size() const { return s_.ep; }
  const RankCoords& coords() const { return me_; }
  bool is_first_stage() const { return me_.pp == 0; }
  bool is_last_stage() const { return me_.pp == s_.pp - 1; }

  Communicator& world() { return world_; }
  Communicator& tp() { return *tp_; }
  Communicator& cp() { return *cp_; }
  Communicator& dp() { return *dp_g_; }
  Communicator& pp() { return *pp_; }
  Communicator& dp_cp() { return *dp_cp_; }
  Communicator& ep() { return *ep_; }
  // Ranks holding the same experts (the DP x CP product divided by EP): expert gradients sum here.
  Communicator& ep_dp() { return *ep_dp_; }
  Communicator* embedding() { return embedding_.get(); }  // null on middle pipeline stages

  // The decomposition, for any world rank (tests, logs).
  static RankCoords coords_of(int rank, const ParallelSizes& s, int dp);
  static int rank_of(const RankCoords& c, const ParallelSizes& s, int dp);
  // A rank's position in its expert-parallel group: which block of the experts it holds.
  static int ep_rank_of(const RankCoords& c, const ParallelSizes& s) { return (c.cp + s.cp * c.dp) % s.ep; }
  std::string describe() const;
  // Every group this rank belongs to, by name ("tp", "cp", "dp", "pp", "dp_cp", "ep", "ep_dp",
  // "embedding"; the last only on the stages that hold the embedding), for per-group statistics.
  std::vector<std::pair<std::string, Communicator*>> named_groups() const;

 private:
  Communicator& world_;
  ParallelSizes s_;
  int dp_;
  RankCoords me_;
  std::unique_ptr<Communicator> tp_, cp_, dp_g_, pp_, dp_cp_, ep_, ep_dp_, embedding_;
};

}  // namespace tessel::comm
