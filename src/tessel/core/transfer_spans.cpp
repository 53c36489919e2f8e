#include "tessel/core/transfer_spans.h"

#include <atomic>
#include <chrono>
#include <mutex>

#include "tessel/core/check.h"

namespace tessel {

namespace {
std::mutex g_mu;
std::vector<TransferSpan> g_spans;   // under g_mu
std::atomic<bool> g_recording{false};
}  // namespace

const char* traced_transfer_name(TracedTransfer t) {
  switch (t) {
    case TracedTransfer::moe_dispatch: return "moe dispatch all_to_all";
    case TracedTransfer::moe_combine: return "moe combine all_to_all";
  }
  return "?";
}

TransferSpanRecording::TransferSpanRecording() {
  std::lock_guard<std::mutex> lock(g_mu);
  TESSEL_CHECK(!g_recording.load(), "transfer spans: a second recording while one is on");
  g_spans.clear();
  g_recording = true;
}

TransferSpanRecording::~TransferSpanRecording() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_recording = false;
  g_spans.clear();
}

std::vector<TransferSpan> TransferSpanRecording::take() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<TransferSpan> out;
  out.swap(g_spans);
  return out;
}

bool recording_transfer_spans() { return g_recording.load(std::memory_order_relaxed); }

void note_transfer_span(TracedTransfer what, double start, double end) {
  if (!recording_transfer_spans()) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_recording) g_spans.push_back({what, start, end});
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace tessel
