#pragma once
// Sparse row files and dense slice files of a checkpoint (schemas/checkpoint.fbs
// SparseRowBlock, DenseSliceBlock), on top of the block files of checkpoint_file.h.
// Thread-safety: a writer belongs to one thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/checkpoint/checkpoint_file.h"

namespace fleetps::server {

// Writes rows (key, flags, payload) into SparseRowBlocks of up to kRowsPerBlock rows.
class SparseRowWriter {
 public:
  static constexpr size_t kRowsPerBlock = 1u << 16;

  static StatusOr<std::unique_ptr<SparseRowWriter>> Create(const std::string& path);
  SparseRowWriter(const SparseRowWriter&) = delete;
  SparseRowWriter& operator=(const SparseRowWriter&) = delete;

  Status Add(uint64_t key, uint8_t flags, const float* payload, uint32_t n);
  // Writes the last block, fsyncs and closes; returns the file's size and CRC.
  StatusOr<FileDigest> Finish();
  uint64_t rows() const { return rows_; }

 private:
  explicit SparseRowWriter(std::unique_ptr<BlockFileWriter> file) : file_(std::move(file)) {}
  Status FlushBlock();

  std::unique_ptr<BlockFileWriter> file_;
  std::vector<uint64_t> keys_;
  std::vector<uint8_t> flags_;
  std::vector<float> values_;
  uint64_t rows_ = 0;
};

// The next SparseRowBlock of a SparseRows file, verified (FlatBuffers verifier, keys and
// flags present with equal lengths, values present); null at the end of the file. Payload
// lengths depend on the table's layout and are checked by the caller. Valid until the next
// call on `reader`.
StatusOr<const disk::SparseRowBlock*> NextSparseBlock(BlockFileReader& reader);

// Writes a dense slice: weights of the global range [offset, offset + weights.size()) and,
// when not empty, element state (element_floats per weight) and the shared state, in blocks
// of at most kDenseFloatsPerBlock weights.
constexpr size_t kDenseFloatsPerBlock = 1u << 20;
StatusOr<FileDigest> WriteDenseSliceFile(const std::string& path, uint64_t offset, std::span<const float> weights,
                                         std::span<const float> element_state, uint32_t element_floats,
                                         std::span<const float> shared_state);

// The next DenseSliceBlock, verified (weights present); null at the end of the file.
StatusOr<const disk::DenseSliceBlock*> NextDenseBlock(BlockFileReader& reader);

}  // namespace fleetps::server
