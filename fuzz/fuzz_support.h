#pragma once
// Shared pieces of the libFuzzer harnesses.
//
// The contract under test: bad input yields a tessel::Error, anything else is a finding. So a
// harness catches tessel::Error only; another exception (nlohmann::json's type errors, YAML::Exception,
// std::bad_alloc, std::length_error from a vector...) aborts the run, exactly like a crash or a sanitizer
// report, and libFuzzer saves the input. Catching std::exception here would hide those.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <typeinfo>

#include "tessel/core/check.h"

namespace tessel::fuzz {

// A property the code promises does not hold for this input: report and abort (libFuzzer saves it).
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "FINDING: %s\n", what.c_str());
  std::abort();
}

// Runs f; returns normally on success or tessel::Error, aborts with the exception's type otherwise.
template <class F>
void expect_success_or_error(F&& f) {
  try {
    f();
  } catch (const tessel::Error&) {
    // The expected outcome for bad input.
  } catch (const std::exception& e) {
    finding(std::string(typeid(e).name()) + " escaped instead of tessel::Error: " + e.what());
  } catch (...) {
    finding("a non-std exception escaped instead of tessel::Error");
  }
}

// A private directory for this fuzzing process (under $TMPDIR, else /dev/shm, else /tmp), removed at
// exit.
// Parallel jobs (-jobs, -fork) each get their own.
const std::filesystem::path& scratch_dir();

void write_file(const std::filesystem::path& p, std::string_view bytes);

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace tessel::fuzz
