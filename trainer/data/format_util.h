#pragma once
// Helpers shared by the LineFormat implementations: tokenizing, strict number parsing
// (std::from_chars: full uint64 range, no locale, whole token), number writing that
// round-trips, and the slot-name -> role lookup. Internal to fleetps::data.

#include <cstdint>
#include <string>
#include <string_view>
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

// A label value no line holds: what a parser presets an example's labels to, so that it
// can tell a label slot seen twice or not at all.
inline constexpr float kUnsetLabel = -1.0f;

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
  // Index into DataOptions::label_slots (kLabel) or DataOptions::sparse_slots (kSparse).
  uint32_t index = 0;
};

// a == b, for short strings: the sizes and the first and last bytes decide most
// comparisons, and names of up to two bytes, without a call to memcmp.
inline bool SameShortString(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  if (n != b.size()) return false;
  if (n == 0) return true;
  if (a[0] != b[0] || a[n - 1] != b[n - 1]) return false;
  return n <= 2 || a.substr(1, n - 2) == b.substr(1, n - 2);
}

// Slot name -> role for one DataOptions. Names must be distinct (checked).
// A parser looks up every token's slot name, so this is on the reader's hot path: an
// open-addressing table (at most 1/4 full) placed by the name's length and first and last
// bytes (which tell slot names such as "click", "dense_feature", "1".."26" or numeric
// slot ids apart), instead of a node-based map that hashes every byte.
class SlotIndex {
 public:
  explicit SlotIndex(const config::DataOptions& options);
  // kIgnored for names the options do not mention.
  SlotRole Find(std::string_view name) const {
    if (name.empty()) return SlotRole{};
    for (size_t i = Home(name);; i = (i + 1) & mask_) {
      const Entry& e = table_[i];
      if (e.name.empty()) return SlotRole{};  // a free entry: slot names are never empty
      if (SameShortString(e.name, name)) return e.role;
    }
  }

 private:
  struct Entry {
    std::string name;  // empty: free
    SlotRole role;
  };
  size_t Home(std::string_view name) const {  // name not empty
    const uint64_t h = (name.size() * 0x9e3779b97f4a7c15ULL) ^
                       ((uint64_t{static_cast<uint8_t>(name.front())} << 8 | static_cast<uint8_t>(name.back())) *
                        0xbf58476d1ce4e5b9ULL);
    return static_cast<size_t>(h >> 32) & mask_;
  }
  std::vector<Entry> table_;
  size_t mask_ = 0;
};

}  // namespace fleetps::data
