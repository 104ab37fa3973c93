// A small, fast, seedable random bit generator for environments (SplitMix64; Steele et
// al. 2014). Seeding is one store, so an env can be reseeded on every Reset without
// the ~1 us that std::mt19937_64 spends filling its 312-word state.
#pragma once

#include <cstdint>
#include <limits>

namespace stampede::envs {

class SplitMix64 {
 public:
  using result_type = uint64_t;
  explicit SplitMix64(uint64_t seed = 0) : state_(seed) {}
  void seed(uint64_t s) { state_ = s; }
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<uint64_t>::max(); }
  result_type operator()() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi), from the top 53 bits.
  double Uniform(double lo, double hi) {
    return lo + (hi - lo) * double((*this)() >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t state_;
};

}  // namespace stampede::envs
