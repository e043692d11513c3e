#include "trainer/data/criteo_format.h"

#include <charconv>
#include <cmath>
#include <string>

#include "common/check.h"
#include "common/sharding.h"
#include "trainer/data/format_util.h"

namespace fleetps::data {
namespace {

// PaddleRec's criteo_reader.py: cont_min_ and cont_diff_ (cont_max_ - cont_min_).
constexpr double kMin[CriteoFormat::kDense] = {0, -3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
constexpr double kDiff[CriteoFormat::kDense] = {20, 603, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50};

constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ULL;

// FNV-1a 64 of `bytes`, from state `h`.
uint64_t Fnv1a(uint64_t h, std::string_view bytes) {
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

Status FieldError(uint32_t column, std::string_view field, std::string_view reason) {
  return Status::InvalidArgument("column " + std::to_string(column) + " \"" + std::string(field.substr(0, 64)) +
                                 "\": " + std::string(reason));
}

}  // namespace

CriteoFormat::CriteoFormat(const config::DataOptions& options) : hash_dim_(options.criteo_hash_dim) {
  FLEETPS_CHECK(options.dense_dim == kDense && options.sparse_slots.size() == kCategorical &&
                options.label_slots.size() == 1)
      << "criteo needs one label slot, 13 dense features and 26 sparse slots";
  for (uint32_t i = 0; i < kFields; ++i) index_state_[i] = Fnv1a(kFnvBasis, std::to_string(i));
}

uint64_t CriteoFormat::HashValue(uint32_t index, std::string_view value) {
  return MixKey(Fnv1a(Fnv1a(kFnvBasis, std::to_string(index)), value));
}

uint64_t CriteoFormat::Id(uint32_t index, std::string_view value) const {
  const uint64_t id = MixKey(Fnv1a(index_state_[index], value));
  return hash_dim_ == 0 ? id : id % hash_dim_;
}

Status CriteoFormat::Parse(std::string_view line, Example* example) const {
  example->Reset(kCategorical);
  example->dense.assign(kDense, 0.0f);
  uint32_t column = 0;  // 0-based index of the field being read
  size_t begin = 0;
  while (true) {
    const size_t tab = line.find('\t', begin);
    const std::string_view field = line.substr(begin, tab == std::string_view::npos ? tab : tab - begin);
    if (column >= kFields) {
      return Status::InvalidArgument("more than " + std::to_string(kFields) +
                                     " tab-separated fields: a criteo line has the label, 13 integer and 26 "
                                     "categorical columns");
    }
    if (column == 0) {
      if (!ParseLabel(field, &example->labels[0]).ok()) return FieldError(1, field, "the label must be 0 or 1");
    } else if (column <= kDense) {
      if (!field.empty()) {
        // In double, as PaddleRec's Python: values past 2^24 stay exact until scaled.
        double x = 0;
        const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), x);
        if (ec != std::errc() || ptr != field.data() + field.size() || !std::isfinite(x)) {
          return FieldError(column + 1, field, "integer column I" + std::to_string(column) + " is not a number");
        }
        const auto scaled = static_cast<float>((x - kMin[column - 1]) / kDiff[column - 1]);
        if (!std::isfinite(scaled)) {
          return FieldError(column + 1, field, "integer column I" + std::to_string(column) + " is out of range");
        }
        example->dense[column - 1] = scaled;
      }
    } else {
      example->slots[column - 1 - kDense].push_back(Id(column, field));
    }
    ++column;
    if (tab == std::string_view::npos) break;
    begin = tab + 1;
  }
  if (column <= kDense) {
    return Status::InvalidArgument(std::to_string(column) + " tab-separated field(s): a criteo line has at least the " +
                                   "label and the 13 integer columns (40 fields in all; only trailing empty " +
                                   "categorical columns may be left out)");
  }
  for (; column < kFields; ++column) {  // trimmed trailing columns: missing values
    example->slots[column - 1 - kDense].push_back(Id(column, ""));
  }
  return Status::OK();
}

void CriteoFormat::Write(const Example&, std::string*) const {
  FLEETPS_CHECK(false) << "criteo lines cannot be written (CanWrite() is false): their values are hashed";
}

}  // namespace fleetps::data
