#pragma once
// Deliberate faults, for the tests that show what a fault leaves behind (a rank killed in the
// middle of a checkpoint save, say). TESSEL_INJECT_FAULT=SITE:RANK makes process RANK of the job
// kill itself with SIGKILL (no cleanup, as a node failure would) when it reaches SITE. Unset (every
// normal run), fault_point costs one getenv per call and does nothing.
//
// Sites: "checkpoint-save" (a distributed checkpoint save, after this rank wrote its file and
// before rank 0 learns of it).
#include <string_view>

namespace tessel {

void fault_point(std::string_view site, int rank);

}  // namespace tessel
