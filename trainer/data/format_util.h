#pragma once
// Helpers shared by the LineFormat implementations: tokenizing, strict number parsing
// (std::from_chars: full uint64 range, no locale, whole token), number writing that
// round-trips, and the slot-name -> role lookup. Internal to fleetps::data.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/config/data_config.h"
#include "common/status.h"

namespace fleetps::data {

// Splits a line into tokens separated by spaces or tabs (runs of them count as one).
class Tokenizer {
 public:
  explicit Tokenizer(std::string_view line) : rest_(line) {}
  // Sets *token to the next token; false at the end of the line.
  bool Next(std::string_view* token);
  // 1-based index of the token last returned by Next, for error messages.
  size_t index() const { return index_; }

 private:
  std::string_view rest_;
  size_t index_ = 0;
};

// InvalidArgument "token <index> \"<token>\": <reason>".
Status TokenError(size_t index, std::string_view token, std::string_view reason);

// Value parsers; errors say why `text` was rejected (the caller adds the token).
Status ParseUint64(std::string_view text, uint64_t* out);  // decimal, [0, 2^64)
Status ParseFloat(std::string_view text, float* out);      // finite float
Status ParseLabel(std::string_view text, float* out);      // "0" or "1"

// Appends the decimal form of `value` / the shortest form of `value` that parses back to
// the same float.
void AppendUint64(uint64_t value, std::string* out);
void AppendFloat(float value, std::string* out);
// Appends "0" or "1"; the label must be 0 or 1 (checked).
void AppendLabel(float label, std::string* out);

// What a slot name stands for in the configured options.
struct SlotRole {
  enum Kind : uint8_t { kIgnored, kLabel, kDense, kSparse };
  Kind kind = kIgnored;
  uint32_t sparse_index = 0;  // index into DataOptions::sparse_slots when kind == kSparse
};

// Slot name -> role for one DataOptions. Names must be distinct (checked).
class SlotIndex {
 public:
  explicit SlotIndex(const config::DataOptions& options);
  // kIgnored for names the options do not mention.
  SlotRole Find(std::string_view name) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::unordered_map<std::string, SlotRole, Hash, std::equal_to<>> roles_;
};

}  // namespace fleetps::data
