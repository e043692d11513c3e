#pragma once
// RecordBlock: examples stored row by row in one flat buffer — InMemoryDataset's storage
// and the unit its global shuffle ships between trainers (two flat vectors: trivially
// serialised later).
//
// Row-major so that a shuffled pass gathers each record from one contiguous run of memory
// (a column-major block costs a cache miss per slot and record when read in random order:
// about 10x slower). Record i occupies words_[begins_[i], begins_[i + 1]):
//   header: num_labels labels, dense_dim floats and num_slots id counts as 32-bit values,
//           packed two to a 64-bit word (an odd count leaves the last half word zero);
//   ids:    the slots' ids in slot order, one 64-bit word each.
// With one label this is the layout schemas/records.fbs describes. The serialized block
// does not carry num_labels: sender and receiver must agree on it (the same data config),
// as on dense_dim and num_slots, which Parse does check.
// A value type: movable, copyable, not thread-safe.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

#include "trainer/data/batch.h"

namespace fleetps::data {

class RecordBlock {
 public:
  RecordBlock() = default;
  RecordBlock(uint32_t dense_dim, uint32_t num_slots, uint32_t num_labels = 1);

  uint32_t dense_dim() const { return dense_dim_; }
  uint32_t num_labels() const { return num_labels_; }
  uint32_t num_slots() const { return num_slots_; }
  size_t size() const { return begins_.size() - 1; }  // records
  bool empty() const { return size() == 0; }

  // Appends an example / record i of `src`; shapes must match (checked).
  void Append(const Example& example);
  void AppendRecord(const RecordBlock& src, size_t i);
  // Appends record i as a new row of *batch, whose shape must match (checked).
  void AppendToBatch(size_t i, Batch* batch) const;

  // Drops spare capacity.
  void ShrinkToFit();
  // Heap bytes held (capacity, not size).
  size_t MemoryBytes() const;

  // A finished wire::RecordBlock FlatBuffer (schemas/records.fbs) holding these records.
  std::vector<uint8_t> Serialize() const;
  // Reads a Serialize()d buffer of records with num_labels labels, checking it completely:
  // a FlatBuffers verifier pass, the shape (must be dense_dim x num_slots) and every
  // record's extent against its id counts. `origin` names where the bytes came from, for
  // the error.
  static StatusOr<RecordBlock> Parse(std::span<const uint8_t> bytes, uint32_t dense_dim, uint32_t num_slots,
                                     uint32_t num_labels, const std::string& origin);

  bool operator==(const RecordBlock&) const = default;

 private:
  size_t header_words() const { return (size_t{num_labels_} + dense_dim_ + num_slots_ + 1) / 2; }
  // Byte offset in a record of its id counts.
  size_t counts_offset() const { return (size_t{num_labels_} + dense_dim_) * sizeof(float); }

  uint32_t dense_dim_ = 0;
  uint32_t num_slots_ = 0;
  uint32_t num_labels_ = 1;
  std::vector<uint32_t> begins_{0};  // size() + 1 entries; a block holds < 2^32 words (checked)
  std::vector<uint64_t> words_;
};

}  // namespace fleetps::data
