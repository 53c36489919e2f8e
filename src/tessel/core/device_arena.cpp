#include "tessel/core/device_arena.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tessel/core/check.h"
#include "tessel/core/device.h"
#include "tessel/core/machine_memory.h"

namespace tessel {

struct DeviceArena::State {
  std::mutex mu;
  char* base = nullptr;
  size_t reserved = 0;
  size_t used = 0;  // the high-water mark of the bump pointer: [base, base + used) is carved
  std::unordered_map<size_t, std::vector<char*>> free_by_size;  // blocks come in the pool's size classes
  int holders = 0;        // live DeviceMemoryAccess objects
  bool enforcing = true;  // strict mode is on
  bool open = false;      // [base, base + used) is read-write now
};

namespace {

// Protection changes whole 2 MiB huge pages: the arena asks for transparent huge pages, so that
// flipping its protection touches one page-table entry per 2 MiB instead of 512 (the flips happen
// at every queue drain and every explicit copy).
constexpr size_t kPage = size_t(2) << 20;
// Large free blocks give their (whole huge) pages back to the system, as free() does.
constexpr size_t kReturnPagesFrom = size_t(4) << 20;

// Read by the signal handler: plain globals, set once before the handler is installed.
char* g_base = nullptr;
size_t g_reserved = 0;
struct sigaction g_previous_segv;

void on_segv(int sig, siginfo_t* info, void* context) {
  const char* addr = static_cast<const char*>(info->si_addr);
  if (g_base && addr >= g_base && addr < g_base + g_reserved) {
    char msg[320];
    const int n = std::snprintf(msg, sizeof msg,
                                "tessel: strict cpu mode: host code touched device memory at %p outside a kernel or an "
                                "explicit copy (a pointer kept past its kernel, or a host loop over device data; "
                                "docs/architecture.md, \"Devices\")\n",
                                static_cast<const void*>(addr));
    if (n > 0) (void)!write(STDERR_FILENO, msg, size_t(std::min(n, int(sizeof msg) - 1)));
  }
  // Hand over to whoever was there before (the default: the process stops with SIGSEGV).
  if (g_previous_segv.sa_flags & SA_SIGINFO) {
    g_previous_segv.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous_segv.sa_handler != SIG_DFL && g_previous_segv.sa_handler != SIG_IGN) {
    g_previous_segv.sa_handler(sig);
    return;
  }
  signal(SIGSEGV, SIG_DFL);  // returning re-runs the access, which now stops the process
}

void set_protection(char* base, size_t bytes, bool open) {
  if (bytes == 0) return;
  TESSEL_CHECK(mprotect(base, bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE) == 0,
               "strict cpu mode: mprotect of {} bytes of device memory failed: {}", bytes, std::strerror(errno));
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

static std::atomic<bool> g_exists{false};

DeviceArena& DeviceArena::instance() {
  static DeviceArena* a = new DeviceArena;  // never destroyed: tensors may outlive static destructors
  return *a;
}
bool DeviceArena::exists() { return g_exists.load(); }

DeviceArena::DeviceArena() : s_(new State) {
  // Address space only (PROT_NONE, no swap reserved): twice the memory this process may use.
  s_->reserved = round_up(size_t(machine_memory_bytes()) * 2, kPage);
  void* p = mmap(nullptr, s_->reserved + kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  TESSEL_CHECK(p != MAP_FAILED, "strict cpu mode: cannot reserve {} bytes of address space for device memory: {}",
               s_->reserved, std::strerror(errno));
  s_->base = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(p), kPage));  // huge-page aligned
  madvise(s_->base, s_->reserved, MADV_HUGEPAGE);  // a hint: without it protection flips cost more
  g_base = s_->base;
  g_reserved = s_->reserved;
  struct sigaction sa {};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_previous_segv);
  g_exists.store(true);
}

void* DeviceArena::allocate(size_t bytes) {
  const size_t size = round_up(std::max<size_t>(bytes, 1), 64);
  std::lock_guard<std::mutex> lock(s_->mu);
  auto& same = s_->free_by_size[size];
  if (!same.empty()) {
    char* p = same.back();
    same.pop_back();
    return p;
  }
  if (s_->reserved - s_->used < size) return nullptr;
  char* p = s_->base + s_->used;
  const size_t old_end = round_up(s_->used, kPage), new_end = round_up(s_->used + size, kPage);
  s_->used += size;
  // New pages follow the current state; PROT_NONE otherwise, as reserved.
  if (new_end > old_end && (s_->open || !s_->enforcing)) set_protection(s_->base + old_end, new_end - old_end, true);
  return p;
}

void DeviceArena::release(void* p, size_t bytes) noexcept {
  const size_t size = round_up(std::max<size_t>(bytes, 1), 64);
  char* c = static_cast<char*>(p);
  if (size >= kReturnPagesFrom) {
    // Whole pages inside the block: their contents are not needed any more.
    char* first = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(c), kPage));
    char* last = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(c) + size) / kPage * kPage);
    if (last > first) madvise(first, size_t(last - first), MADV_DONTNEED);
  }
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->free_by_size[size].push_back(c);
}

bool DeviceArena::contains(const void* p) const {
  const char* c = static_cast<const char*>(p);
  return c >= s_->base && c < s_->base + s_->reserved;
}

void DeviceArena::set_enforcing(bool on) {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->enforcing = on;
  const bool open = !on || s_->holders > 0;
  if (open != s_->open) set_protection(s_->base, round_up(s_->used, kPage), open);
  s_->open = open;
}

void DeviceArena::acquire() {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (s_->holders++ == 0 && !s_->open) {
    set_protection(s_->base, round_up(s_->used, kPage), true);
    s_->open = true;
  }
}

void DeviceArena::release_access() {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (--s_->holders == 0 && s_->enforcing && s_->open) {
    set_protection(s_->base, round_up(s_->used, kPage), false);
    s_->open = false;
  }
}

DeviceMemoryAccess::DeviceMemoryAccess() : held_(strict_cpu() || DeviceArena::exists()) {
  if (held_) DeviceArena::instance().acquire();
}
DeviceMemoryAccess::~DeviceMemoryAccess() {
  if (held_) DeviceArena::instance().release_access();
}

}  // namespace tessel
