#pragma once
// CriteoFormat: raw Criteo display-ads lines (Kaggle's train.txt; PaddleRec's legacy rank/dnn
// data), read the way PaddleRec's criteo_reader.py feeds ctr_dnn:
//   <label> \t <I1> ... <I13> \t <C1> ... <C26>
// - label: 0 or 1;
// - I1..I13 (integers, possibly negative, empty when missing) -> the 13 dense features,
//   (x - min) / diff with PaddleRec's constants (min 0, -3, 0, ...; diff 20, 603, 100, 50,
//   64000, 500, 100, 50, 500, 10, 10, 10, 50), 0 when missing;
// - C1..C26 (8-hex-digit strings, empty when missing) -> one id in sparse slot k (in order):
//   a hash of the field's index (14..39, the label's being 0: PaddleRec's `str(idx)`)
//   followed by the raw string, modulo criteo_hash_dim (0: the whole hash). A missing value is hashed as the
//   empty string, so it has an id of its own per column, as in PaddleRec.
// Lines whose trailing empty columns were trimmed (37-39 fields) read as missing values;
// fewer than 14 fields (the label and every integer column) or more than 40 are errors.
// The hash is FNV-1a 64 over those bytes, then the splitmix64 finalizer (MixKey): stable
// across processes and releases, since a trained model's rows are keyed by these ids (never
// change it). PaddleRec used Python's hash(), which differs per process unless
// PYTHONHASHSEED is set, so its ids are not these.
// The values are hashed and scaled, so an Example cannot be written back as the line it came
// from: CanWrite() is false.

#include <array>
#include <cstdint>

#include "trainer/data/line_format.h"

namespace fleetps::data {

class CriteoFormat : public LineFormat {
 public:
  static constexpr uint32_t kDense = 13;
  static constexpr uint32_t kCategorical = 26;
  static constexpr uint32_t kFields = 1 + kDense + kCategorical;

  // options.format criteo: one label slot, 13 dense features, 26 sparse slots (checked).
  explicit CriteoFormat(const config::DataOptions& options);

  Status Parse(std::string_view line, Example* example) const override;
  bool CanWrite() const override { return false; }
  void Write(const Example& example, std::string* out) const override;

  // The id of raw value `value` in field `index` (14..39: PaddleRec's `idx`, the label's
  // field being 0), before the modulo.
  static uint64_t HashValue(uint32_t index, std::string_view value);

 private:
  // HashValue modulo the hash dim, from the FNV state after the field's index.
  uint64_t Id(uint32_t index, std::string_view value) const;

  const uint64_t hash_dim_;
  std::array<uint64_t, kFields> index_state_;  // FNV-1a state after the index's digits
};

}  // namespace fleetps::data
