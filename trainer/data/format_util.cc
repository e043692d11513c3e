#include "trainer/data/format_util.h"

#include <charconv>
#include <cmath>

#include "common/check.h"

namespace fleetps::data {
namespace {

bool IsSeparator(char c) { return c == ' ' || c == '\t'; }

std::string Quoted(std::string_view text) {
  std::string out = "\"";
  out += text;
  out += '"';
  return out;
}

}  // namespace

bool Tokenizer::Next(std::string_view* token) {
  size_t begin = 0;
  while (begin < rest_.size() && IsSeparator(rest_[begin])) ++begin;
  if (begin == rest_.size()) return false;
  size_t end = begin;
  while (end < rest_.size() && !IsSeparator(rest_[end])) ++end;
  *token = rest_.substr(begin, end - begin);
  rest_.remove_prefix(end);
  ++index_;
  return true;
}

Status TokenError(size_t index, std::string_view token, std::string_view reason) {
  std::string msg = "token " + std::to_string(index) + " " + Quoted(token) + ": ";
  msg += reason;
  return Status::InvalidArgument(std::move(msg));
}

Status ParseUint64(std::string_view text, uint64_t* out) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  if (ec == std::errc::result_out_of_range) {
    return Status::InvalidArgument(Quoted(text) + " is out of the uint64 range");
  }
  if (ec != std::errc() || ptr != end) return Status::InvalidArgument(Quoted(text) + " is not an unsigned integer");
  return Status::OK();
}

Status ParseFloat(std::string_view text, float* out) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  if (ec == std::errc::result_out_of_range) return Status::InvalidArgument(Quoted(text) + " is out of the float range");
  if (ec != std::errc() || ptr != end) return Status::InvalidArgument(Quoted(text) + " is not a number");
  if (!std::isfinite(*out)) return Status::InvalidArgument(Quoted(text) + " is not a finite number");
  return Status::OK();
}

Status ParseLabel(std::string_view text, float* out) {
  if (text == "0" || text == "1") {
    *out = text == "1" ? 1.0f : 0.0f;
    return Status::OK();
  }
  return Status::InvalidArgument("label " + Quoted(text) + " is not 0 or 1");
}

void AppendUint64(uint64_t value, std::string* out) {
  char buf[24];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  out->append(buf, result.ptr);
}

void AppendFloat(float value, std::string* out) {
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  FLEETPS_CHECK(result.ec == std::errc());
  out->append(buf, result.ptr);
}

void AppendLabel(float label, std::string* out) {
  FLEETPS_CHECK(label == 0.0f || label == 1.0f) << "label " << label;
  out->push_back(label == 1.0f ? '1' : '0');
}

SlotIndex::SlotIndex(const config::DataOptions& options) {
  std::vector<Entry> entries;
  for (size_t i = 0; i < options.label_slots.size(); ++i) {
    entries.push_back({options.label_slots[i], SlotRole{SlotRole::kLabel, static_cast<uint32_t>(i)}});
  }
  if (options.dense_dim > 0) entries.push_back({options.dense_slot, SlotRole{SlotRole::kDense, 0}});
  for (size_t i = 0; i < options.sparse_slots.size(); ++i) {
    entries.push_back({options.sparse_slots[i], SlotRole{SlotRole::kSparse, static_cast<uint32_t>(i)}});
  }
  size_t capacity = 16;
  while (capacity < entries.size() * 4) capacity *= 2;
  table_.resize(capacity);
  mask_ = capacity - 1;
  for (auto& e : entries) {
    FLEETPS_CHECK(!e.name.empty()) << "empty slot name";
    size_t i = Home(e.name);
    while (!table_[i].name.empty()) {
      FLEETPS_CHECK(table_[i].name != e.name) << "slot name \"" << e.name << "\" used twice";
      i = (i + 1) & mask_;
    }
    table_[i] = std::move(e);
  }
}

}  // namespace fleetps::data
