#include "trainer/data/record_block.h"

#include <cstring>
#include <limits>

#include "common/check.h"
#include "common/flatbuffer_align.h"
#include "schemas/records_generated.h"

namespace fleetps::data {

RecordBlock::RecordBlock(uint32_t dense_dim, uint32_t num_slots, uint32_t num_labels)
    : dense_dim_(dense_dim), num_slots_(num_slots), num_labels_(num_labels) {
  FLEETPS_CHECK_GE(num_labels_, 1u);
}

void RecordBlock::Append(const Example& example) {
  FLEETPS_CHECK_EQ(example.dense.size(), dense_dim_);
  FLEETPS_CHECK_EQ(example.slots.size(), num_slots_);
  FLEETPS_CHECK_EQ(example.labels.size(), num_labels_);
  const size_t begin = words_.size();
  words_.resize(begin + header_words(), 0);
  // The header is written as bytes: 32-bit values in 64-bit words.
  auto* header = reinterpret_cast<unsigned char*>(words_.data() + begin);
  std::memcpy(header, example.labels.data(), num_labels_ * sizeof(float));
  // Empty vectors may have null data(), which memcpy must not see even for 0 bytes.
  if (dense_dim_ > 0) {
    std::memcpy(header + num_labels_ * sizeof(float), example.dense.data(), dense_dim_ * sizeof(float));
  }
  unsigned char* counts = header + counts_offset();
  for (uint32_t s = 0; s < num_slots_; ++s) {
    const auto count = static_cast<uint32_t>(example.slots[s].size());
    std::memcpy(counts + s * sizeof(uint32_t), &count, sizeof(uint32_t));
  }
  for (const auto& ids : example.slots) words_.insert(words_.end(), ids.begin(), ids.end());
  FLEETPS_CHECK_LE(words_.size(), std::numeric_limits<uint32_t>::max()) << "RecordBlock too large";
  begins_.push_back(static_cast<uint32_t>(words_.size()));
}

void RecordBlock::AppendRecord(const RecordBlock& src, size_t i) {
  FLEETPS_CHECK_EQ(src.dense_dim_, dense_dim_);
  FLEETPS_CHECK_EQ(src.num_slots_, num_slots_);
  FLEETPS_CHECK_EQ(src.num_labels_, num_labels_);
  FLEETPS_CHECK_LT(i, src.size());
  words_.insert(words_.end(), src.words_.begin() + src.begins_[i], src.words_.begin() + src.begins_[i + 1]);
  FLEETPS_CHECK_LE(words_.size(), std::numeric_limits<uint32_t>::max()) << "RecordBlock too large";
  begins_.push_back(static_cast<uint32_t>(words_.size()));
}

void RecordBlock::AppendToBatch(size_t i, Batch* batch) const {
  FLEETPS_CHECK_EQ(batch->dense_dim, dense_dim_);
  FLEETPS_CHECK_EQ(batch->num_slots(), num_slots_);
  FLEETPS_CHECK_EQ(batch->num_labels, num_labels_);
  FLEETPS_CHECK_LT(i, size());
  const uint64_t* record = words_.data() + begins_[i];
  const auto* header = reinterpret_cast<const unsigned char*>(record);

  const size_t labels_begin = batch->labels.size();
  batch->labels.resize(labels_begin + num_labels_);
  std::memcpy(batch->labels.data() + labels_begin, header, num_labels_ * sizeof(float));
  if (dense_dim_ > 0) {
    const size_t dense_begin = batch->dense.size();
    batch->dense.resize(dense_begin + dense_dim_);
    std::memcpy(batch->dense.data() + dense_begin, header + num_labels_ * sizeof(float), dense_dim_ * sizeof(float));
  }

  const unsigned char* counts = header + counts_offset();
  const uint64_t* ids = record + header_words();
  for (uint32_t s = 0; s < num_slots_; ++s) {
    uint32_t count = 0;
    std::memcpy(&count, counts + s * sizeof(uint32_t), sizeof(uint32_t));
    auto& slot_ids = batch->slots[s].ids;
    slot_ids.insert(slot_ids.end(), ids, ids + count);
    ids += count;
  }
  batch->FinishRow();
}

void RecordBlock::ShrinkToFit() {
  begins_.shrink_to_fit();
  words_.shrink_to_fit();
}

size_t RecordBlock::MemoryBytes() const {
  return begins_.capacity() * sizeof(uint32_t) + words_.capacity() * sizeof(uint64_t);
}

std::vector<uint8_t> RecordBlock::Serialize() const {
  flatbuffers::FlatBufferBuilder fbb(64 + begins_.size() * sizeof(uint32_t) + words_.size() * sizeof(uint64_t));
  auto begins = fbb.CreateVector(begins_);
  auto words = fbb.CreateVector(words_);
  fbb.Finish(wire::CreateRecordBlock(fbb, dense_dim_, num_slots_, begins, words, num_labels_));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

StatusOr<RecordBlock> RecordBlock::Parse(std::span<const uint8_t> bytes, uint32_t dense_dim, uint32_t num_slots,
                                         uint32_t num_labels, const std::string& origin) {
  const auto bad = [&origin](const std::string& what) {
    return Status::Corruption("record block from " + origin + ": " + what);
  };
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  if (!verifier.VerifyBuffer<wire::RecordBlock>(nullptr)) {
    return bad("not a valid RecordBlock FlatBuffer (" + std::to_string(bytes.size()) + " bytes)");
  }
  const auto* msg = flatbuffers::GetRoot<wire::RecordBlock>(bytes.data());
  if (msg->dense_dim() != dense_dim || msg->num_slots() != num_slots || msg->num_labels() != num_labels) {
    return bad("records have " + std::to_string(msg->num_labels()) + " labels, " + std::to_string(msg->dense_dim()) +
               " dense floats and " + std::to_string(msg->num_slots()) + " sparse slots, this trainer expects " +
               std::to_string(num_labels) + ", " + std::to_string(dense_dim) + " and " + std::to_string(num_slots) +
               " (are all trainers running the same data config?)");
  }
  RecordBlock block(dense_dim, num_slots, num_labels);
  if (msg->begins() == nullptr || msg->begins()->size() == 0 || msg->begins()->Get(0) != 0) {
    return bad("begins must start with 0");
  }
  if (!ElementsAligned(msg->begins()) || !ElementsAligned(msg->words())) {
    return bad("a vector of 8-byte values is not 8-byte aligned (not written by a FlatBuffers builder)");
  }
  const size_t num_words = msg->words() ? msg->words()->size() : 0;
  block.begins_.assign(msg->begins()->begin(), msg->begins()->end());
  if (num_words > 0) block.words_.assign(msg->words()->begin(), msg->words()->end());
  if (block.begins_.back() != num_words) {
    return bad("begins ends at " + std::to_string(block.begins_.back()) + " but there are " +
               std::to_string(num_words) + " words");
  }
  const size_t header = block.header_words();
  for (size_t i = 0; i < block.size(); ++i) {
    const uint32_t begin = block.begins_[i], end = block.begins_[i + 1];
    if (end > num_words) {
      return bad("record " + std::to_string(i) + " ends at word " + std::to_string(end) + " past the " +
                 std::to_string(num_words) + " words");
    }
    if (end < begin || end - begin < header) {
      return bad("record " + std::to_string(i) + " spans words [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "), shorter than its " + std::to_string(header) + "-word header");
    }
    const auto* counts = reinterpret_cast<const unsigned char*>(block.words_.data() + begin) + block.counts_offset();
    uint64_t ids = 0;
    for (uint32_t s = 0; s < num_slots; ++s) {
      uint32_t count = 0;
      std::memcpy(&count, counts + s * sizeof(uint32_t), sizeof(uint32_t));
      ids += count;
    }
    if (ids != end - begin - header) {
      return bad("record " + std::to_string(i) + " counts " + std::to_string(ids) + " ids but holds " +
                 std::to_string(end - begin - header));
    }
  }
  return block;
}

}  // namespace fleetps::data
