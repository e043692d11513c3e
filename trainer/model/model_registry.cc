// The model registry: model_type -> the DenseModel implementation. One line per model.

#include "trainer/model/dense_model.h"

#include "common/check.h"
#include "trainer/model/loss.h"

namespace fleetps::trainer::model {

SlotLayout SlotLayout::FromOptions(const ModelOptions& options) {
  SlotLayout layout;
  if (HasSparseSlots(options)) {
    layout.num_slots = options.num_sparse_slots;
    layout.row_dim = SparseRowDim(options);
    layout.first_order = HasFirstOrderWeight(options);
    for (size_t s = 0; s < layout.num_slots; ++s) {
      layout.block_offsets.push_back(layout.block_offsets.back() + SlotBlockDim(options, s));
    }
  }
  layout.dense_dim = HasSparseSlots(options) ? options.dense_input_dim : options.input_dim;
  return layout;
}

std::unique_ptr<DenseModel> MakeDenseModel(const ModelOptions& options, const dense::CpuGemm* gemm) {
  return MakeGraphModel(options, gemm);
}

}  // namespace fleetps::trainer::model
