#include "trainer/data/colon_token_format.h"

#include <utility>

#include "common/check.h"

namespace fleetps::data {

ColonTokenFormat::ColonTokenFormat(const config::DataOptions& options, Order order, bool require_every_sparse_slot)
    : index_(options),
      order_(order),
      require_every_sparse_slot_(require_every_sparse_slot),
      label_slots_(options.label_slots),
      dense_slot_(options.dense_slot),
      dense_dim_(options.dense_dim),
      sparse_slots_(options.sparse_slots) {}

Status ColonTokenFormat::Parse(std::string_view line, Example* example) const {
  example->Reset(sparse_slots_.size(), label_slots_.size());
  example->labels.assign(label_slots_.size(), kUnsetLabel);  // each label slot must be seen once
  Tokenizer tokens(line);
  std::string_view token, run_name;
  SlotRole run_role;
  while (tokens.Next(&token)) {
    const size_t colon = token.find(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == token.size()) {
      return TokenError(tokens.index(), token,
                        order_ == Order::kNameValue ? "expected name:value" : "expected value:slot");
    }
    std::string_view name = token.substr(0, colon);
    std::string_view value = token.substr(colon + 1);
    if (order_ == Order::kValueName) std::swap(name, value);

    // Tokens of one slot come in runs (13 dense_feature values in a row, a sparse slot's
    // ids): the run's name is looked up once.
    if (!SameShortString(name, run_name)) {
      run_name = name;
      run_role = index_.Find(name);
    }
    const SlotRole role = run_role;
    Status status;
    switch (role.kind) {
      case SlotRole::kIgnored: continue;
      case SlotRole::kLabel: {
        float& label = example->labels[role.index];
        if (label != kUnsetLabel) {
          return TokenError(tokens.index(), token, "label slot \"" + label_slots_[role.index] + "\" appears twice");
        }
        status = ParseLabel(value, &label);
        break;
      }
      case SlotRole::kDense:
        if (example->dense.size() == dense_dim_) {
          return TokenError(
              tokens.index(), token,
              "dense slot \"" + dense_slot_ + "\" has more than " + std::to_string(dense_dim_) + " values");
        }
        status = ParseFloat(value, &example->dense.emplace_back());
        break;
      case SlotRole::kSparse: status = ParseUint64(value, &example->slots[role.index].emplace_back()); break;
    }
    if (!status.ok()) return TokenError(tokens.index(), token, status.message());
  }

  for (size_t l = 0; l < label_slots_.size(); ++l) {
    if (example->labels[l] == kUnsetLabel) {
      return Status::InvalidArgument("missing label slot \"" + label_slots_[l] + "\"");
    }
  }
  if (example->dense.size() != dense_dim_) {
    return Status::InvalidArgument("dense slot \"" + dense_slot_ + "\" has " + std::to_string(example->dense.size()) +
                                   " values, expected " + std::to_string(dense_dim_));
  }
  if (require_every_sparse_slot_) {
    for (size_t s = 0; s < sparse_slots_.size(); ++s) {
      if (example->slots[s].empty()) return Status::InvalidArgument("missing sparse slot \"" + sparse_slots_[s] + "\"");
    }
  }
  return Status::OK();
}

void ColonTokenFormat::Write(const Example& example, std::string* out) const {
  FLEETPS_CHECK_EQ(example.dense.size(), dense_dim_);
  FLEETPS_CHECK_EQ(example.slots.size(), sparse_slots_.size());
  FLEETPS_CHECK_EQ(example.labels.size(), label_slots_.size());
  const size_t start = out->size();
  std::string value;  // the value of the token being written
  auto emit = [&](const std::string& name) {
    if (out->size() > start) out->push_back(' ');
    const std::string& first = order_ == Order::kNameValue ? name : value;
    const std::string& second = order_ == Order::kNameValue ? value : name;
    out->append(first).append(1, ':').append(second);
    value.clear();
  };

  for (size_t l = 0; l < label_slots_.size(); ++l) {
    AppendLabel(example.labels[l], &value);
    emit(label_slots_[l]);
  }
  for (float v : example.dense) {
    AppendFloat(v, &value);
    emit(dense_slot_);
  }
  for (size_t s = 0; s < sparse_slots_.size(); ++s) {
    FLEETPS_CHECK(!require_every_sparse_slot_ || !example.slots[s].empty())
        << "format needs an id in sparse slot " << sparse_slots_[s];
    for (uint64_t id : example.slots[s]) {
      AppendUint64(id, &value);
      emit(sparse_slots_[s]);
    }
  }
}

}  // namespace fleetps::data
