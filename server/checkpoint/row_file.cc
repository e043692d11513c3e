#include "server/checkpoint/row_file.h"

#include <algorithm>
#include <utility>

#include "common/flatbuffer_align.h"

namespace fleetps::server {

StatusOr<std::unique_ptr<SparseRowWriter>> SparseRowWriter::Create(const std::string& path) {
  ASSIGN_OR_RETURN(auto file, BlockFileWriter::Create(path, disk::FileKind::SparseRows));
  std::unique_ptr<SparseRowWriter> writer(new SparseRowWriter(std::move(file)));
  writer->keys_.reserve(kRowsPerBlock);
  writer->flags_.reserve(kRowsPerBlock);
  return writer;
}

Status SparseRowWriter::Add(uint64_t key, uint8_t flags, const float* payload, uint32_t n) {
  keys_.push_back(key);
  flags_.push_back(flags);
  values_.insert(values_.end(), payload, payload + n);
  ++rows_;
  if (keys_.size() >= kRowsPerBlock) return FlushBlock();
  return Status::OK();
}

Status SparseRowWriter::FlushBlock() {
  if (keys_.empty()) return Status::OK();
  flatbuffers::FlatBufferBuilder fbb(keys_.size() * 9 + values_.size() * 4 + 256);
  auto keys = fbb.CreateVector(keys_);
  auto flags = fbb.CreateVector(flags_);
  auto values = fbb.CreateVector(values_);
  fbb.Finish(disk::CreateSparseRowBlock(fbb, keys, flags, values));
  keys_.clear();
  flags_.clear();
  values_.clear();
  return file_->Append(fbb.GetBufferPointer(), fbb.GetSize());
}

StatusOr<FileDigest> SparseRowWriter::Finish() {
  RETURN_IF_ERROR(FlushBlock());
  return file_->Finish();
}

StatusOr<const disk::SparseRowBlock*> NextSparseBlock(BlockFileReader& reader) {
  ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, reader.Next());
  if (bytes.empty()) return static_cast<const disk::SparseRowBlock*>(nullptr);
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  if (!verifier.VerifyBuffer<disk::SparseRowBlock>(nullptr)) {
    return Status::Corruption(reader.path() + ": a block fails FlatBuffers verification as SparseRowBlock");
  }
  const auto* block = flatbuffers::GetRoot<disk::SparseRowBlock>(bytes.data());
  if (!ElementsAligned(block->keys())) {
    return Status::Corruption(reader.path() + ": a SparseRowBlock's keys are not 8-byte aligned");
  }
  if (block->keys() == nullptr || block->flags() == nullptr || block->values() == nullptr ||
      block->keys()->size() != block->flags()->size()) {
    return Status::Corruption(reader.path() + ": a SparseRowBlock without keys, flags and values of equal count");
  }
  return block;
}

StatusOr<FileDigest> WriteDenseSliceFile(const std::string& path, uint64_t offset, std::span<const float> weights,
                                         std::span<const float> element_state, uint32_t element_floats,
                                         std::span<const float> shared_state) {
  ASSIGN_OR_RETURN(auto file, BlockFileWriter::Create(path, disk::FileKind::DenseSlice));
  const bool with_state = !element_state.empty() || !shared_state.empty();
  size_t begin = 0;
  do {  // at least one block, so an empty slice still records its shared state
    const size_t n = std::min(kDenseFloatsPerBlock, weights.size() - begin);
    flatbuffers::FlatBufferBuilder fbb(n * 4 * (1 + element_floats) + 256);
    auto w = fbb.CreateVector(weights.data() + begin, n);
    flatbuffers::Offset<flatbuffers::Vector<float>> es, ss;
    if (with_state) {
      es = fbb.CreateVector(element_state.data() + begin * element_floats, n * element_floats);
      if (begin == 0) ss = fbb.CreateVector(shared_state.data(), shared_state.size());
    }
    fbb.Finish(disk::CreateDenseSliceBlock(fbb, offset + begin, w, es, ss));
    RETURN_IF_ERROR(file->Append(fbb.GetBufferPointer(), fbb.GetSize()));
    begin += n;
  } while (begin < weights.size());
  return file->Finish();
}

StatusOr<const disk::DenseSliceBlock*> NextDenseBlock(BlockFileReader& reader) {
  ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, reader.Next());
  if (bytes.empty()) return static_cast<const disk::DenseSliceBlock*>(nullptr);
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  if (!verifier.VerifyBuffer<disk::DenseSliceBlock>(nullptr)) {
    return Status::Corruption(reader.path() + ": a block fails FlatBuffers verification as DenseSliceBlock");
  }
  const auto* block = flatbuffers::GetRoot<disk::DenseSliceBlock>(bytes.data());
  if (block->weights() == nullptr) return Status::Corruption(reader.path() + ": a DenseSliceBlock without weights");
  return block;
}

}  // namespace fleetps::server
