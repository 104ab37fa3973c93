// A small, fast, seedable random bit generator for environments (SplitMix64; Steele et
// al. 2014). Seeding is one store, so an env can be reseeded on every Reset without
// the ~1 us that std::mt19937_64 spends filling its 312-word state.
#pragma once

#include <cstdint>
#include <limits>

namespace stampede::envs {

// The SplitMix64 output function: a strong 64-bit mix, also used to derive seeds.
inline uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class SplitMix64 {
 public:
  using result_type = uint64_t;
  explicit SplitMix64(uint64_t seed = 0) : state_(seed) {}
  void seed(uint64_t s) { state_ = s; }
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<uint64_t>::max(); }
  result_type operator()() {
    const uint64_t z = state_;
    state_ += 0x9e3779b97f4a7c15ull;
    return SplitMix(z);
  }
  // Uniform in [lo, hi), from the top 53 bits.
  double Uniform(double lo, double hi) {
    return lo + (hi - lo) * double((*this)() >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t state_;
};

}  // namespace stampede::envs
