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

// Expects `part` within the text (an error message, a warning); prints the text when it is not.
#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)
