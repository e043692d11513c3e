#include "trainer/data/multislot_format.h"

#include "common/check.h"

namespace fleetps::data {

MultiSlotFormat::MultiSlotFormat(const config::DataOptions& options)
    : dense_dim_(options.dense_dim), num_labels_(options.label_slots.size()), num_sparse_(options.sparse_slots.size()) {
  const SlotIndex index(options);
  for (const auto& name : options.multislot_slots) {
    const SlotRole role = index.Find(name);
    FLEETPS_CHECK(role.kind != SlotRole::kIgnored) << "multislot slot \"" << name << "\" has no role";
    slots_.push_back(Slot{name, role});
  }
  FLEETPS_CHECK_EQ(slots_.size(), num_labels_ + num_sparse_ + (dense_dim_ > 0 ? 1 : 0)) << "multislot_slots incomplete";
}

Status MultiSlotFormat::Parse(std::string_view line, Example* example) const {
  example->Reset(num_sparse_, num_labels_);  // every label slot is in slots_ once: each is set
  Tokenizer tokens(line);
  std::string_view token;
  for (const Slot& slot : slots_) {
    // Built only on errors: the happy path must not allocate.
    auto where = [&slot] { return "slot \"" + slot.name + "\""; };
    if (!tokens.Next(&token)) return Status::InvalidArgument("line ends before " + where());
    uint64_t count = 0;
    Status status = ParseUint64(token, &count);
    if (!status.ok()) return TokenError(tokens.index(), token, where() + " count: " + status.message());
    const uint64_t expected = slot.role.kind == SlotRole::kLabel   ? 1
                              : slot.role.kind == SlotRole::kDense ? dense_dim_
                                                                   : count;  // sparse: any count
    if (count != expected) {
      return TokenError(tokens.index(), token,
                        where() + " has count " + std::to_string(count) + ", expected " + std::to_string(expected));
    }
    for (uint64_t i = 0; i < count; ++i) {
      if (!tokens.Next(&token)) {
        return Status::InvalidArgument("line ends inside " + where() + ": " + std::to_string(i) + " of " +
                                       std::to_string(count) + " values");
      }
      switch (slot.role.kind) {
        case SlotRole::kLabel: status = ParseLabel(token, &example->labels[slot.role.index]); break;
        case SlotRole::kDense: status = ParseFloat(token, &example->dense.emplace_back()); break;
        case SlotRole::kSparse: status = ParseUint64(token, &example->slots[slot.role.index].emplace_back()); break;
        case SlotRole::kIgnored: break;  // excluded by the constructor
      }
      if (!status.ok()) return TokenError(tokens.index(), token, where() + ": " + status.message());
    }
  }
  if (tokens.Next(&token)) return TokenError(tokens.index(), token, "unexpected token after the last slot");
  return Status::OK();
}

void MultiSlotFormat::Write(const Example& example, std::string* out) const {
  FLEETPS_CHECK_EQ(example.dense.size(), dense_dim_);
  FLEETPS_CHECK_EQ(example.slots.size(), num_sparse_);
  FLEETPS_CHECK_EQ(example.labels.size(), num_labels_);
  for (const Slot& slot : slots_) {
    if (&slot != &slots_.front()) out->push_back(' ');
    switch (slot.role.kind) {
      case SlotRole::kLabel:
        out->append("1 ");
        AppendLabel(example.labels[slot.role.index], out);
        break;
      case SlotRole::kDense:
        AppendUint64(example.dense.size(), out);
        for (float v : example.dense) {
          out->push_back(' ');
          AppendFloat(v, out);
        }
        break;
      case SlotRole::kSparse: {
        const auto& ids = example.slots[slot.role.index];
        AppendUint64(ids.size(), out);
        for (uint64_t id : ids) {
          out->push_back(' ');
          AppendUint64(id, out);
        }
        break;
      }
      case SlotRole::kIgnored: break;
    }
  }
}

}  // namespace fleetps::data
