#pragma once
// Deterministic uniform floats from a seed, identical on every platform and standard
// library (std::mt19937_64's sequence is fixed by the standard; the std distributions are
// not): what the dense parameters' initial values are drawn from.

#include <cstdint>
#include <random>

namespace fleetps {

class UniformRandom {
 public:
  explicit UniformRandom(uint64_t seed) : engine_(seed) {}
  // A float in [lo, hi): 24 random bits, exactly representable.
  float Next(float lo, float hi) {
    const float unit = static_cast<float>(engine_() >> 40) * 0x1.0p-24f;
    return lo + (hi - lo) * unit;
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace fleetps
