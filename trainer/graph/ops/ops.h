#pragma once
// The CPU kernels of the graph ops, one factory per op (or family); kernels.cc maps op names
// to them. Each file's comment gives its op's maths and parameter layout.

#include <memory>

#include "trainer/graph/ops/op_kernel.h"

namespace fleetps::trainer::graph {

std::unique_ptr<OpKernel> MakeFcKernel(const KernelContext& ctx);
std::unique_ptr<OpKernel> MakeDropoutKernel(const KernelContext& ctx);
// cin, self_attention, moe (cin.cc, self_attention.cc, moe.cc)
std::unique_ptr<OpKernel> MakeCinKernel(const KernelContext& ctx);
std::unique_ptr<OpKernel> MakeSelfAttentionKernel(const KernelContext& ctx);
std::unique_ptr<OpKernel> MakeMoeKernel(const KernelContext& ctx);
// concat, flatten, reshape, split (shape_ops.cc)
std::unique_ptr<OpKernel> MakeConcatKernel(const KernelContext& ctx);
std::unique_ptr<OpKernel> MakeCopyKernel(const KernelContext& ctx);
std::unique_ptr<OpKernel> MakeSplitKernel(const KernelContext& ctx);
// add, multiply, reduce_sum, reduce_mean (elementwise_ops.cc)
std::unique_ptr<OpKernel> MakeAddKernel(const KernelContext& ctx);
std::unique_ptr<OpKernel> MakeMultiplyKernel(const KernelContext& ctx);
std::unique_ptr<OpKernel> MakeReduceKernel(const KernelContext& ctx);
// fm, cross, dot_interaction, dense_embedding (interaction_ops.cc)
std::unique_ptr<OpKernel> MakeFmKernel(const KernelContext& ctx);
std::unique_ptr<OpKernel> MakeCrossKernel(const KernelContext& ctx);
std::unique_ptr<OpKernel> MakeDotInteractionKernel(const KernelContext& ctx);
std::unique_ptr<OpKernel> MakeDenseEmbeddingKernel(const KernelContext& ctx);
// relu, sigmoid, tanh, gelu (activation_ops.cc)
std::unique_ptr<OpKernel> MakeActivationKernel(const KernelContext& ctx);
// layer_norm (normalization_ops.cc)
std::unique_ptr<OpKernel> MakeLayerNormKernel(const KernelContext& ctx);
// target_attention, gru: ops over a behaviour sequence [L, k] and its mask [L] (target_attention.cc, gru.cc)
std::unique_ptr<OpKernel> MakeTargetAttentionKernel(const KernelContext& ctx);
std::unique_ptr<OpKernel> MakeGruKernel(const KernelContext& ctx);

}  // namespace fleetps::trainer::graph
