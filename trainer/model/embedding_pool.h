#pragma once
// The sparse side of a CTR model, between the pulled embedding rows and DenseNet's input:
// pools each slot's embeddings per example (sum, as PaddleRec rank/dnn, or mean, sqrt, max)
// or lays them out as a sequence (the first max_len ids, then a mask), concatenates the
// slots with the dense features, and scatters the input gradient back to one gradient row
// per key. Plain arrays in and out, so that it does not depend on the data pipeline's
// types:
//
//   SlotIdsView (per slot, CSR ids of the batch; a view of a data::SlotIds)
//     -> DedupKeys -> keys (pull these; one row of `dim` floats each) + index (row per id)
//     -> EmbeddingPool::Forward  -> activations [batch x output_dim()]   -> DenseNet
//     <- EmbeddingPool::Backward <- activation gradients                 <- DenseNet
//     -> key_grads [keys x dim] (push these)
//
// Thread-safety: EmbeddingPool is immutable and DedupKeys is a pure function; concurrent
// calls with separate outputs are safe.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/config/graph_spec.h"
#include "common/config/model_config.h"
#include "common/key_index.h"

namespace fleetps::trainer::model {

// The ids of one slot for a batch in CSR form: example i has ids[offsets[i], offsets[i+1]).
// An example may have no ids in a slot; its pooled embedding for that slot is then zero.
// The same layout as trainer/data's data::SlotIds, viewed: {slot.offsets, slot.ids}.
struct SlotIdsView {
  std::span<const uint32_t> offsets;  // batch + 1 entries, non-decreasing, from 0 to ids.size()
  std::span<const uint64_t> ids;      // feature keys (feasigns)
};

// Dedups the ids of all slots of a batch. *keys gets every distinct id once, in order of
// first appearance (slot 0 first); *index gets, for every id of every slot (slots
// concatenated in order, so slot s's ids start at the sum of the earlier slots' ids.size()),
// the position of its key in *keys. Both vectors are overwritten. `scratch`, when given, is
// the index used (and left empty): a worker that keeps one saves allocating and zeroing a
// table every batch.
void DedupKeys(std::span<const SlotIdsView> slots, std::vector<uint64_t>* keys, std::vector<uint32_t>* index,
               KeyIndex* scratch = nullptr);

// How one slot becomes its block of the activation row.
struct PoolSlot {
  size_t width = 0;  // floats taken from each row, from row_skip on
  size_t row_skip = 0;
  fleetps::graph::Pooling pooling = fleetps::graph::Pooling::kSum;
  // > 0: a sequence block [max_len x width] of the first max_len ids (zero after the
  // example's own count), then a mask [max_len] (1 for an id, 0 after); pooling unused.
  size_t max_len = 0;
  size_t block() const { return max_len > 0 ? max_len * (width + 1) : width; }
};

class EmbeddingPool {
 public:
  // num_slots >= 1 slots of `dim` >= 1 floats each, then dense_dim >= 0 dense features.
  EmbeddingPool(size_t num_slots, size_t dim, size_t dense_dim);
  // Per-slot widths: rows of `dim` floats, slot s pooling the first slot_widths[s] (in
  // [1, dim]) floats of each of its rows into a block of that width.
  EmbeddingPool(size_t dim, std::vector<size_t> slot_widths, size_t dense_dim);
  // Any slot layout over rows of `dim` floats.
  EmbeddingPool(size_t dim, std::vector<PoolSlot> slots, size_t dense_dim);
  // The model's layout (its graph's slot reads): SparseRowDim-wide rows (sparse_feature_dim,
  // plus the first-order weight when the graph reads embed_w), dense_input_dim.
  static EmbeddingPool FromOptions(const ModelOptions& options);

  size_t num_slots() const { return num_slots_; }
  // Floats per pulled row (and per key gradient).
  size_t dim() const { return dim_; }
  size_t dense_dim() const { return dense_dim_; }
  // Floats of slot s's block (dim() unless per-slot widths were given).
  size_t slot_width(size_t s) const { return offsets_[s + 1] - offsets_[s]; }
  const PoolSlot& slot(size_t s) const { return slots_[s]; }
  // Width of an activation row: [slot 0 | slot 1 | ... | slot S-1 | dense features], the
  // slots' widths (num_slots * dim without per-slot widths) + dense_dim floats.
  size_t output_dim() const { return offsets_.back() + dense_dim_; }

  // activations [batch x output_dim()]: for each example and slot, its block (the pooled
  // rows of its ids, their floats [row_skip, row_skip + width), or its sequence), then the
  // example's dense features. slots: num_slots() entries over the same batch; index: from
  // DedupKeys; rows: [num_keys x dim], row k for key k; dense: [batch x dense_dim].
  void Forward(std::span<const SlotIdsView> slots, std::span<const uint32_t> index, std::span<const float> rows,
               std::span<const float> dense, std::span<float> activations) const;

  // key_grads [num_keys x dim] (overwritten): for each key, the sum over all its
  // occurrences (duplicates within an example or across examples and slots included) of
  // the gradient of the slot block it was pooled into (scaled by mean's 1/n and sqrt's
  // 1/sqrt(n); for max, each column's gradient goes to the first id holding the max; for a
  // sequence, each position's gradient to its id). rows: the Forward's rows (max reads them). The dense columns of
  // activation_grads are ignored (dense features have no parameters). With DenseNet's
  // activation gradients these are gradients of the batch's mean loss; any rescaling
  // before a push (Paddle scales sparse gradients by the batch size) is the caller's.
  void Backward(std::span<const SlotIdsView> slots, std::span<const uint32_t> index, std::span<const float> rows,
                std::span<const float> activation_grads, std::span<float> key_grads) const;

 private:
  size_t num_slots_;
  size_t dim_;
  size_t dense_dim_;
  std::vector<PoolSlot> slots_;
  std::vector<size_t> offsets_;  // num_slots + 1: slot s's block is [offsets_[s], offsets_[s + 1])
};

}  // namespace fleetps::trainer::model
