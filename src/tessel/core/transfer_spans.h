#pragma once
// Transfers a traced step draws beside its compute (pipeline/trace.h): each one this rank started
// while a recording is on, from its start until this rank saw it complete (its wait returned). Inside
// an F&B pair (core/paired_tasks.h) a transfer whose span covers the other pass's turn was in flight,
// not waited for, while that pass computed. The MoE all-to-all notes its spans (nn/moe.cpp); the
// pipeline executor of a step with log.pipeline_trace holds the recording.
#include <vector>

namespace tessel {

enum class TracedTransfer { moe_dispatch, moe_combine };
const char* traced_transfer_name(TracedTransfer t);  // "moe dispatch all_to_all", "moe combine all_to_all"

struct TransferSpan {
  TracedTransfer what;
  double start, end;  // steady_seconds()
};

// Records the transfers of every thread while alive; one at a time per process.
class TransferSpanRecording {
 public:
  TransferSpanRecording();
  ~TransferSpanRecording();
  TransferSpanRecording(const TransferSpanRecording&) = delete;
  TransferSpanRecording& operator=(const TransferSpanRecording&) = delete;
  std::vector<TransferSpan> take();  // the spans noted since the last take, in the order they ended
};

bool recording_transfer_spans();
void note_transfer_span(TracedTransfer what, double start, double end);  // nothing when not recording
double steady_seconds();  // the steady clock, in seconds: the clock of every trace span

}  // namespace tessel
