// Op name -> CPU kernel. One line per op; the schema of each is in common/config/graph_ops.cc.

#include <functional>
#include <map>
#include <string>

#include "common/check.h"
#include "trainer/graph/ops/ops.h"

namespace fleetps::trainer::graph {

std::unique_ptr<OpKernel> MakeKernel(const KernelContext& ctx) {
  using Factory = std::unique_ptr<OpKernel> (*)(const KernelContext&);
  static const std::map<std::string, Factory> kFactories = {
      {"fc", MakeFcKernel},
      {"dropout", MakeDropoutKernel},
      {"concat", MakeConcatKernel},
      {"flatten", MakeCopyKernel},
      {"reshape", MakeCopyKernel},
      {"split", MakeSplitKernel},
      {"add", MakeAddKernel},
      {"multiply", MakeMultiplyKernel},
      {"reduce_sum", MakeReduceKernel},
      {"reduce_mean", MakeReduceKernel},
      {"fm", MakeFmKernel},
      {"cross", MakeCrossKernel},
      {"dot_interaction", MakeDotInteractionKernel},
      {"cin", MakeCinKernel},
      {"self_attention", MakeSelfAttentionKernel},
      {"moe", MakeMoeKernel},
      {"dense_embedding", MakeDenseEmbeddingKernel},
      {"relu", MakeActivationKernel},
      {"sigmoid", MakeActivationKernel},
      {"tanh", MakeActivationKernel},
      {"gelu", MakeActivationKernel},
      {"layer_norm", MakeLayerNormKernel},
      {"target_attention", MakeTargetAttentionKernel},
      {"gru", MakeGruKernel},
  };
  const auto it = kFactories.find(ctx.layer.spec.op);
  FLEETPS_CHECK(it != kFactories.end()) << "op " << ctx.layer.spec.op << " has no CPU kernel";
  return it->second(ctx);
}

}  // namespace fleetps::trainer::graph
