#include "server/table/initializer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "common/sharding.h"

namespace fleetps::server {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
constexpr double kTwoPow53 = 9007199254740992.0;

Status BadField(const char* field, const char* what, float value) {
  return Status::InvalidArgument(std::string("initializer.") + field + " must be " + what + ", got " +
                                 std::to_string(value));
}

// Output `counter + 1` of the splitmix64 stream whose state starts at `stream`.
uint64_t Bits(uint64_t stream, uint64_t counter) { return MixKey(stream + counter * kGolden); }

}  // namespace

StatusOr<Initializer> Initializer::Create(const InitializerOptions& o) {
  switch (o.kind) {
    case InitializerKind::kUniform:
      if (!std::isfinite(o.min)) return BadField("min", "finite", o.min);
      if (!std::isfinite(o.max)) return BadField("max", "finite", o.max);
      if (!(o.min < o.max)) {
        return Status::InvalidArgument("initializer: uniform min " + std::to_string(o.min) + " must be < max " +
                                       std::to_string(o.max));
      }
      break;
    case InitializerKind::kGaussian:
      if (!std::isfinite(o.mean)) return BadField("mean", "finite", o.mean);
      if (!(std::isfinite(o.stddev) && o.stddev >= 0)) return BadField("stddev", "finite and >= 0", o.stddev);
      break;
    case InitializerKind::kZeros: break;
    case InitializerKind::kConstant:
      if (!std::isfinite(o.value)) return BadField("value", "finite", o.value);
      break;
    default:
      return Status::InvalidArgument("initializer.name: unknown initializer kind " +
                                     std::to_string(static_cast<int>(o.kind)));
  }
  return Initializer(o);
}

Initializer::Initializer(const InitializerOptions& options) : options_(options), seed_mix_(MixKey(options.seed)) {}

uint64_t Initializer::Stream(uint64_t key) const { return MixKey(seed_mix_ ^ key); }

float Initializer::Value(uint64_t key, uint64_t column) const { return ValueFromStream(Stream(key), column); }

void Initializer::FillRow(uint64_t key, float* out, uint32_t n) const {
  const uint64_t stream = Stream(key);
  for (uint32_t c = 0; c < n; ++c) out[c] = ValueFromStream(stream, c);
}

float Initializer::ValueFromStream(uint64_t stream, uint64_t column) const {
  switch (options_.kind) {
    case InitializerKind::kUniform: {
      const double u = static_cast<double>(Bits(stream, column) >> 11) / kTwoPow53;  // [0, 1)
      const float v = static_cast<float>(options_.min + u * (double{options_.max} - options_.min));
      // Rounding to float can land on max; keep the interval half-open.
      return std::min(v, std::nextafter(options_.max, options_.min));
    }
    case InitializerKind::kGaussian: {
      const double u1 = static_cast<double>((Bits(stream, 2 * column) >> 11) + 1) / kTwoPow53;  // (0, 1]
      const double u2 = static_cast<double>(Bits(stream, 2 * column + 1) >> 11) / kTwoPow53;    // [0, 1)
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      return static_cast<float>(options_.mean + options_.stddev * z);
    }
    case InitializerKind::kZeros: return 0.0f;
    case InitializerKind::kConstant: return options_.value;
  }
  return 0.0f;  // unreachable: Create rejects unknown kinds
}

}  // namespace fleetps::server
