// Probe for a GCC 12 wrong-code bug (cmake/vector_constants.cmake): with AVX-512 enabled (-march=native
// on Sapphire Rapids or Zen 4, x86-64-v4), GCC 12.2 builds a vector whose leading elements are equal
// and whose last ones are zero, such as {3, 3, 3, 0}, as a broadcast of the first element: {3, 3, 3, 3}.
// The SLP vectoriser makes such vectors from ordinary code (an initializer list, a local array copied
// out). Exits 0 when every case below holds its values, 1 otherwise (printing what it got).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

__attribute__((noinline)) std::vector<int64_t> counts() { return {3, 3, 3, 0}; }
__attribute__((noinline)) std::vector<double> doubles() { return {4, 4, 4, 4, 4, 4, 4, 0}; }
__attribute__((noinline)) void local_array(int64_t* out) {
  const int64_t k[4] = {5, 5, 0, 0};
  std::memcpy(out, k, sizeof k);
}

int main() {
  int bad = 0;
  const auto expect = [&](const char* what, const double* got, std::initializer_list<double> want) {
    size_t i = 0;
    for (const double w : want) {
      if (got[i] != w) {
        std::printf("%s: element %zu is %g, expected %g\n", what, i, got[i], w);
        ++bad;
      }
      ++i;
    }
  };
  const std::vector<int64_t> c = counts();
  const double cd[4] = {double(c[0]), double(c[1]), double(c[2]), double(c[3])};
  expect("std::vector<int64_t>{3, 3, 3, 0}", cd, {3, 3, 3, 0});
  expect("std::vector<double>{4 x 7, 0}", doubles().data(), {4, 4, 4, 4, 4, 4, 4, 0});
  int64_t a[4];
  local_array(a);
  const double ad[4] = {double(a[0]), double(a[1]), double(a[2]), double(a[3])};
  expect("int64_t[4]{5, 5, 0, 0}", ad, {5, 5, 0, 0});
  return bad ? 1 : 0;
}
