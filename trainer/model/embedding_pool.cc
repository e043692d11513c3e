#include "trainer/model/embedding_pool.h"

#include <algorithm>
#include <cmath>
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

// Calls fn(example, slot, keys) for every example of every slot, keys being the rows (among
// num_keys) of the example's ids in that slot, in the ids' order (a view into `index`).
template <typename Fn>
void ForEachExample(std::span<const SlotIdsView> slots, std::span<const uint32_t> index, size_t num_keys, Fn fn) {
  size_t base = 0;  // position of the slot's first id in index
  for (size_t s = 0; s < slots.size(); ++s) {
    const std::span<const uint32_t> offsets = slots[s].offsets;
    FLEETPS_CHECK_LE(base + slots[s].ids.size(), index.size());
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      FLEETPS_CHECK_LE(offsets[i], offsets[i + 1]) << "slot " << s << " example " << i;
      const std::span<const uint32_t> keys = index.subspan(base + offsets[i], offsets[i + 1] - offsets[i]);
      for (uint32_t k : keys) FLEETPS_CHECK_LT(k, num_keys);
      fn(i, s, keys);
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

namespace {

std::vector<PoolSlot> SumSlots(const std::vector<size_t>& widths) {
  std::vector<PoolSlot> slots;
  for (size_t w : widths) slots.push_back(PoolSlot{.width = w});
  return slots;
}

// The scale of a pooled block of n ids: 1 (sum, max), 1/n (mean), 1/sqrt(n) (sqrt).
float PoolScale(fleetps::graph::Pooling pooling, size_t n) {
  if (n == 0) return 0.0f;
  switch (pooling) {
    case fleetps::graph::Pooling::kMean: return 1.0f / static_cast<float>(n);
    case fleetps::graph::Pooling::kSqrt: return 1.0f / std::sqrt(static_cast<float>(n));
    case fleetps::graph::Pooling::kSum:
    case fleetps::graph::Pooling::kMax: break;
  }
  return 1.0f;
}

}  // namespace

EmbeddingPool::EmbeddingPool(size_t num_slots, size_t dim, size_t dense_dim)
    : EmbeddingPool(dim, std::vector<size_t>(num_slots, dim), dense_dim) {}

EmbeddingPool::EmbeddingPool(size_t dim, std::vector<size_t> slot_widths, size_t dense_dim)
    : EmbeddingPool(dim, SumSlots(slot_widths), dense_dim) {}

EmbeddingPool::EmbeddingPool(size_t dim, std::vector<PoolSlot> slots, size_t dense_dim)
    : num_slots_(slots.size()), dim_(dim), dense_dim_(dense_dim), slots_(std::move(slots)) {
  FLEETPS_CHECK(num_slots_ > 0 && dim > 0) << "num_slots " << num_slots_ << ", dim " << dim;
  offsets_.push_back(0);
  for (const PoolSlot& slot : slots_) {
    FLEETPS_CHECK(slot.width >= 1 && slot.row_skip + slot.width <= dim)
        << "slot floats [" << slot.row_skip << ", " << slot.row_skip + slot.width << ") outside a row of " << dim;
    offsets_.push_back(offsets_.back() + slot.block());
  }
}

EmbeddingPool EmbeddingPool::FromOptions(const ModelOptions& options) {
  std::vector<PoolSlot> slots;
  const bool embed_w = HasFirstOrderWeight(options);
  for (size_t s = 0; s < options.num_sparse_slots; ++s) {
    PoolSlot slot{.width = SlotBlockDim(options, s)};
    if (options.graph != nullptr) {
      const fleetps::graph::SlotRead& read = options.graph->slot_read(s);
      slot.pooling = read.pooling;
      if (read.sequence()) {
        slot = PoolSlot{
            .width = options.graph->row().slot_widths[s], .row_skip = embed_w ? 1u : 0u, .max_len = read.max_len};
      }
    }
    slots.push_back(slot);
  }
  return EmbeddingPool(SparseRowDim(options), std::move(slots), options.dense_input_dim);
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
  const size_t num_keys = rows.size() / dim_;
  ForEachExample(slots, index, num_keys, [&](size_t example, size_t s, std::span<const uint32_t> keys) {
    const PoolSlot& slot = slots_[s];
    float* block = activations.data() + example * width + offsets_[s];
    if (slot.max_len > 0) {
      const size_t n = std::min(keys.size(), slot.max_len);
      for (size_t p = 0; p < n; ++p) {
        std::copy_n(rows.data() + size_t{keys[p]} * dim_ + slot.row_skip, slot.width, block + p * slot.width);
        block[slot.max_len * slot.width + p] = 1.0f;
      }
      return;
    }
    if (keys.empty()) return;
    if (slot.pooling == fleetps::graph::Pooling::kMax) {
      std::copy_n(rows.data() + size_t{keys[0]} * dim_ + slot.row_skip, slot.width, block);
      for (uint32_t key : keys) {
        const float* row = rows.data() + size_t{key} * dim_ + slot.row_skip;
        for (size_t j = 0; j < slot.width; ++j) block[j] = std::max(block[j], row[j]);
      }
      return;
    }
    for (uint32_t key : keys) AddTo(block, rows.data() + size_t{key} * dim_ + slot.row_skip, slot.width);
    const float scale = PoolScale(slot.pooling, keys.size());
    if (scale != 1.0f) {
      for (size_t j = 0; j < slot.width; ++j) block[j] *= scale;
    }
  });
}

void EmbeddingPool::Backward(std::span<const SlotIdsView> slots, std::span<const uint32_t> index,
                             std::span<const float> rows, std::span<const float> activation_grads,
                             std::span<float> key_grads) const {
  FLEETPS_CHECK_EQ(slots.size(), num_slots_);
  const size_t batch = BatchSize(slots);
  const size_t width = output_dim();
  FLEETPS_CHECK_EQ(activation_grads.size(), batch * width);
  FLEETPS_CHECK_EQ(key_grads.size() % dim_, 0u);
  std::ranges::fill(key_grads, 0.0f);
  ForEachExample(slots, index, key_grads.size() / dim_, [&](size_t example, size_t s, std::span<const uint32_t> keys) {
    const PoolSlot& slot = slots_[s];
    const float* grad = activation_grads.data() + example * width + offsets_[s];
    const auto key_grad = [&](uint32_t key) { return key_grads.data() + size_t{key} * dim_ + slot.row_skip; };
    if (slot.max_len > 0) {
      const size_t n = std::min(keys.size(), slot.max_len);
      for (size_t p = 0; p < n; ++p) AddTo(key_grad(keys[p]), grad + p * slot.width, slot.width);
      return;
    }
    if (slot.pooling == fleetps::graph::Pooling::kMax) {
      FLEETPS_CHECK_EQ(rows.size(), key_grads.size()) << "max pooling's gradient needs the Forward's rows";
      for (size_t j = 0; j < slot.width && !keys.empty(); ++j) {
        uint32_t best = keys[0];
        for (uint32_t key : keys) {
          if (rows[size_t{key} * dim_ + slot.row_skip + j] > rows[size_t{best} * dim_ + slot.row_skip + j]) best = key;
        }
        key_grad(best)[j] += grad[j];
      }
      return;
    }
    const float scale = PoolScale(slot.pooling, keys.size());
    for (uint32_t key : keys) {
      float* g = key_grad(key);
      for (size_t j = 0; j < slot.width; ++j) g[j] += grad[j] * scale;
    }
  });
}

}  // namespace fleetps::trainer::model
