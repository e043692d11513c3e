#include "trainer/model/embedding_pool.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "common/check.h"
#include "common/key_index.h"

namespace fleetps::trainer::model {
namespace {

// Batch size of `slots`, CHECKing that every slot has the same one and consistent offsets.
size_t BatchSize(std::span<const SlotIdsView> slots) {
  FLEETPS_CHECK(!slots.empty() && !slots[0].offsets.empty()) << "a batch needs slots with offsets";
  const size_t batch = slots[0].offsets.size() - 1;
  for (size_t s = 0; s < slots.size(); ++s) {
    FLEETPS_CHECK_EQ(slots[s].offsets.size(), batch + 1) << "slot " << s;
    FLEETPS_CHECK_EQ(slots[s].offsets[0], 0u) << "slot " << s;
    FLEETPS_CHECK_EQ(slots[s].offsets[batch], slots[s].ids.size()) << "slot " << s;
  }
  return batch;
}

// Calls fn(example, slot, key_row) for every id of the batch, slot by slot, where key_row
// is the id's entry of `index` (its row among num_keys keys).
template <typename Fn>
void ForEachId(std::span<const SlotIdsView> slots, std::span<const uint32_t> index, size_t num_keys, Fn fn) {
  size_t base = 0;  // position of the slot's first id in index
  for (size_t s = 0; s < slots.size(); ++s) {
    const std::span<const uint32_t> offsets = slots[s].offsets;
    FLEETPS_CHECK_LE(base + slots[s].ids.size(), index.size());
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      FLEETPS_CHECK_LE(offsets[i], offsets[i + 1]) << "slot " << s << " example " << i;
      for (size_t k = base + offsets[i]; k < base + offsets[i + 1]; ++k) {
        FLEETPS_CHECK_LT(index[k], num_keys);
        fn(i, s, index[k]);
      }
    }
    base += slots[s].ids.size();
  }
  FLEETPS_CHECK_EQ(base, index.size());
}

// dst[0, n) += src[0, n)
void AddTo(float* dst, const float* src, size_t n) {
  for (size_t j = 0; j < n; ++j) dst[j] += src[j];
}

}  // namespace

void DedupKeys(std::span<const SlotIdsView> slots, std::vector<uint64_t>* keys, std::vector<uint32_t>* index,
               KeyIndex* scratch) {
  size_t total = 0;
  for (const SlotIdsView& slot : slots) total += slot.ids.size();
  FLEETPS_CHECK_LE(total, size_t{std::numeric_limits<uint32_t>::max()});
  index->resize(total);
  KeyIndex local;
  KeyIndex& row_of = scratch != nullptr ? *scratch : local;
  row_of.Clear();
  row_of.Reserve(total);
  uint32_t* out = index->data();
  for (const SlotIdsView& slot : slots) {
    row_of.InsertAll(slot.ids, out);
    out += slot.ids.size();
  }
  keys->assign(row_of.keys().begin(), row_of.keys().end());  // reuses the caller's capacity
  row_of.Clear();
}

EmbeddingPool::EmbeddingPool(size_t num_slots, size_t dim, size_t dense_dim)
    : EmbeddingPool(dim, std::vector<size_t>(num_slots, dim), dense_dim) {}

EmbeddingPool::EmbeddingPool(size_t dim, std::vector<size_t> slot_widths, size_t dense_dim)
    : num_slots_(slot_widths.size()), dim_(dim), dense_dim_(dense_dim) {
  FLEETPS_CHECK(num_slots_ > 0 && dim > 0) << "num_slots " << num_slots_ << ", dim " << dim;
  offsets_.push_back(0);
  for (size_t w : slot_widths) {
    FLEETPS_CHECK(w >= 1 && w <= dim) << "slot width " << w << " outside [1, " << dim << "]";
    offsets_.push_back(offsets_.back() + w);
  }
}

EmbeddingPool EmbeddingPool::FromOptions(const ModelOptions& options) {
  std::vector<size_t> widths;
  for (size_t s = 0; s < options.num_sparse_slots; ++s) widths.push_back(SlotBlockDim(options, s));
  return EmbeddingPool(SparseRowDim(options), std::move(widths), options.dense_input_dim);
}

void EmbeddingPool::Forward(std::span<const SlotIdsView> slots, std::span<const uint32_t> index,
                            std::span<const float> rows, std::span<const float> dense,
                            std::span<float> activations) const {
  FLEETPS_CHECK_EQ(slots.size(), num_slots_);
  const size_t batch = BatchSize(slots);
  const size_t width = output_dim();
  FLEETPS_CHECK_EQ(rows.size() % dim_, 0u);
  FLEETPS_CHECK_EQ(dense.size(), batch * dense_dim_);
  FLEETPS_CHECK_EQ(activations.size(), batch * width);
  const size_t pooled = offsets_.back();
  for (size_t i = 0; i < batch; ++i) {
    float* out = activations.data() + i * width;
    std::fill(out, out + pooled, 0.0f);
    std::copy_n(dense.data() + i * dense_dim_, dense_dim_, out + pooled);
  }
  ForEachId(slots, index, rows.size() / dim_, [&](size_t example, size_t slot, uint32_t key_row) {
    AddTo(activations.data() + example * width + offsets_[slot], rows.data() + size_t{key_row} * dim_,
          slot_width(slot));
  });
}

void EmbeddingPool::Backward(std::span<const SlotIdsView> slots, std::span<const uint32_t> index,
                             std::span<const float> activation_grads, std::span<float> key_grads) const {
  FLEETPS_CHECK_EQ(slots.size(), num_slots_);
  const size_t batch = BatchSize(slots);
  const size_t width = output_dim();
  FLEETPS_CHECK_EQ(activation_grads.size(), batch * width);
  FLEETPS_CHECK_EQ(key_grads.size() % dim_, 0u);
  std::ranges::fill(key_grads, 0.0f);
  ForEachId(slots, index, key_grads.size() / dim_, [&](size_t example, size_t slot, uint32_t key_row) {
    AddTo(key_grads.data() + size_t{key_row} * dim_, activation_grads.data() + example * width + offsets_[slot],
          slot_width(slot));
  });
}

}  // namespace fleetps::trainer::model
