#pragma once
// The strict cpu mode's device memory (core/device.h): one reserved range of address space that
// tensor storage is carved from while strict mode is on, kept PROT_NONE except while someone holds
// a DeviceMemoryAccess: the queue while it runs kernels, an explicit copy (DeviceAccessScope), a
// collective in flight. Tensor::raw() already refuses host access outside those; the protection
// also catches what raw() cannot see, a pointer kept past its kernel, and such an access stops the
// process with a message naming the address (a SIGSEGV handler), not a silent read.
//
// The protection is process-wide: while the queue runs a kernel, the host can reach device memory
// too. What it proves is that nothing touches device memory while nothing is supposed to.
#include <cstddef>

namespace tessel {

class DeviceArena {
 public:
  static DeviceArena& instance();  // reserves the range on first use
  static bool exists();

  void* allocate(size_t bytes);  // 64-byte aligned; nullptr when the reserved range is used up
  void release(void* p, size_t bytes) noexcept;  // bytes as given to allocate
  bool contains(const void* p) const;

  // Protection is enforced only while strict mode is on: switched off, the arena is plain memory
  // (tensors allocated in strict mode may outlive it).
  void set_enforcing(bool on);

 private:
  friend class DeviceMemoryAccess;
  DeviceArena();
  void acquire();
  void release_access();
  struct State;
  State* s_;
};

// Makes device memory reachable while it lives (nests, any thread). Nothing to do, and nothing
// done, when strict mode is off and has never been on.
class DeviceMemoryAccess {
 public:
  DeviceMemoryAccess();
  ~DeviceMemoryAccess();
  DeviceMemoryAccess(const DeviceMemoryAccess&) = delete;
  DeviceMemoryAccess& operator=(const DeviceMemoryAccess&) = delete;

 private:
  bool held_;
};

}  // namespace tessel
