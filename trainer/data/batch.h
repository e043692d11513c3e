#pragma once
// Example and Batch: the in-memory form of CTR training data.
//
// An Example is one parsed line (one 0/1 label per label slot, dense floats, 0..many ids
// per sparse slot); parsers fill a caller-owned Example that is reused from line to line,
// so steady-state parsing does not allocate. A Batch holds B examples column by column
// (label matrix, dense matrix, one CSR id list per sparse slot): the layout the model
// consumes (it sum-pools each slot's ids per row). InMemoryDataset stores examples row by
// row instead (record_block.h), so that a shuffled batch gathers contiguous records.
// Both are values: movable, copyable, no shared state, not thread-safe.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace fleetps::data {

struct Example {
  std::vector<float> labels;                 // per label slot (DataOptions::label_slots order), 0 or 1
  std::vector<float> dense;                  // dense_dim floats
  std::vector<std::vector<uint64_t>> slots;  // per sparse slot (DataOptions::sparse_slots order)

  // Empties the example for `num_slots` sparse slots and sets `num_labels` labels to 0,
  // keeping the vectors' capacity.
  void Reset(size_t num_slots, size_t num_labels = 1);

  bool operator==(const Example&) const = default;
};

// One sparse slot of a Batch in CSR form: row r's ids are ids[offsets[r], offsets[r + 1]).
struct SlotIds {
  std::vector<uint32_t> offsets{0};  // rows + 1 entries; offsets[0] == 0, non-decreasing
  std::vector<uint64_t> ids;         // all rows' ids, row after row

  bool operator==(const SlotIds&) const = default;
};

// B examples, column by column. Invariant (checked by the mutators): num_labels >= 1,
// labels.size() == B * num_labels, dense.size() == B * dense_dim, every slot has B + 1
// offsets, and a slot holds < 2^32 ids. With one label (the default) `labels` is the [B]
// vector of each row's label.
struct Batch {
  uint32_t dense_dim = 0;
  uint32_t num_labels = 1;     // labels per row (DataOptions::label_slots.size())
  std::vector<float> labels;   // [B x num_labels], row-major: row r's at [r * num_labels, +num_labels); 0 or 1
  std::vector<float> dense;    // [B * dense_dim], row-major
  std::vector<SlotIds> slots;  // one per sparse slot (DataOptions::sparse_slots order)

  Batch() = default;
  Batch(uint32_t dense_dim, size_t num_slots, uint32_t num_labels = 1);

  size_t size() const { return labels.size() / num_labels; }
  bool empty() const { return labels.empty(); }
  size_t num_slots() const { return slots.size(); }

  std::span<const float> Labels(size_t row) const;  // row's num_labels labels
  std::span<const float> Dense(size_t row) const;
  std::span<const uint64_t> Ids(size_t slot, size_t row) const;

  // Appends one example; its shape (label count, dense_dim, slot count) must match.
  void Append(const Example& example);
  // Low-level row building (RecordBlock decodes this way): push the row's num_labels
  // labels, dense values and each slot's ids onto the columns, then FinishRow() checks the
  // column sizes and closes the row in every slot's offsets.
  void FinishRow();

  // Empties the batch, keeping its shape and capacity.
  void Clear();
  void Reserve(size_t rows);

  bool operator==(const Batch&) const = default;
};

}  // namespace fleetps::data
