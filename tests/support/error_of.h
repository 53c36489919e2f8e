#pragma once
// The message of the tessel::Error a call raises ("" when it raises none); any other exception
// propagates and fails the test.
#include <string>

#include "tessel/core/check.h"

namespace tessel::testing {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace tessel::testing
