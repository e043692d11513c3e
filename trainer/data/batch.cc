#include "trainer/data/batch.h"

#include <limits>

#include "common/check.h"

namespace fleetps::data {

void Example::Reset(size_t num_slots, size_t num_labels) {
  labels.assign(num_labels, 0.0f);
  dense.clear();
  slots.resize(num_slots);
  for (auto& ids : slots) ids.clear();
}

Batch::Batch(uint32_t dense_dim_in, size_t num_slots, uint32_t num_labels_in)
    : dense_dim(dense_dim_in), num_labels(num_labels_in), slots(num_slots) {
  FLEETPS_CHECK_GE(num_labels, 1u);
}

std::span<const float> Batch::Labels(size_t row) const {
  FLEETPS_CHECK_LT(row, size());
  return std::span<const float>(labels).subspan(row * num_labels, num_labels);
}

std::span<const float> Batch::Dense(size_t row) const {
  FLEETPS_CHECK_LT(row, size());
  return std::span<const float>(dense).subspan(row * dense_dim, dense_dim);
}

std::span<const uint64_t> Batch::Ids(size_t slot, size_t row) const {
  FLEETPS_CHECK_LT(slot, slots.size());
  FLEETPS_CHECK_LT(row, size());
  const SlotIds& s = slots[slot];
  return std::span<const uint64_t>(s.ids).subspan(s.offsets[row], s.offsets[row + 1] - s.offsets[row]);
}

void Batch::Append(const Example& example) {
  FLEETPS_CHECK_EQ(example.slots.size(), slots.size());
  FLEETPS_CHECK_EQ(example.labels.size(), num_labels);
  labels.insert(labels.end(), example.labels.begin(), example.labels.end());
  dense.insert(dense.end(), example.dense.begin(), example.dense.end());
  for (size_t s = 0; s < slots.size(); ++s) {
    slots[s].ids.insert(slots[s].ids.end(), example.slots[s].begin(), example.slots[s].end());
  }
  FinishRow();
}

void Batch::FinishRow() {
  FLEETPS_CHECK_EQ(labels.size() % num_labels, 0u) << "a row needs " << num_labels << " labels";
  const size_t rows = size();
  FLEETPS_CHECK_EQ(dense.size(), rows * dense_dim);
  for (SlotIds& slot : slots) {
    FLEETPS_CHECK_EQ(slot.offsets.size(), rows) << "FinishRow without new labels";
    FLEETPS_CHECK_LE(slot.ids.size(), std::numeric_limits<uint32_t>::max()) << "slot too large for one Batch";
    slot.offsets.push_back(static_cast<uint32_t>(slot.ids.size()));
  }
}

void Batch::Clear() {
  labels.clear();
  dense.clear();
  for (auto& s : slots) {
    s.offsets.resize(1);
    s.ids.clear();
  }
}

void Batch::Reserve(size_t rows) {
  labels.reserve(rows * num_labels);
  dense.reserve(rows * dense_dim);
  for (auto& s : slots) s.offsets.reserve(rows + 1);
}

}  // namespace fleetps::data
