// Test helper: n normally distributed doubles (mean 0, standard deviation `scale`),
// the same for the same seed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace stampede::testing {

inline std::vector<double> Random(size_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace stampede::testing
