#include "trainer/model/layers.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace fleetps::trainer::model {

FullyConnected::FullyConnected(size_t in_dim, size_t out_dim, size_t param_offset, const dense::CpuGemm* gemm)
    : in_dim_(in_dim), out_dim_(out_dim), param_offset_(param_offset), gemm_(gemm) {
  FLEETPS_CHECK(in_dim > 0 && out_dim > 0) << "in_dim " << in_dim << ", out_dim " << out_dim;
  FLEETPS_CHECK(gemm != nullptr);
}

void FullyConnected::InitParams(std::span<float> params, UniformRandom* rng) const {
  FLEETPS_CHECK_LE(param_offset_ + num_params(), params.size());
  const float limit = std::sqrt(6.0f / static_cast<float>(in_dim_ + out_dim_));
  std::span<float> w = params.subspan(param_offset_, in_dim_ * out_dim_);
  for (float& v : w) v = rng->Next(-limit, limit);
  std::ranges::fill(params.subspan(param_offset_ + w.size(), out_dim_), 0.0f);
}

void FullyConnected::Forward(std::span<const float> params, std::span<const float> x, size_t batch, std::span<float> y,
                             bool relu) const {
  FLEETPS_CHECK_LE(param_offset_ + num_params(), params.size());
  FLEETPS_CHECK_EQ(x.size(), batch * in_dim_);
  FLEETPS_CHECK_EQ(y.size(), batch * out_dim_);
  if (batch == 0) return;
  const float* w = params.data() + param_offset_;
  const float* b = w + in_dim_ * out_dim_;
  gemm_->Gemm(dense::Op::kN, dense::Op::kN, batch, out_dim_, in_dim_, x.data(), in_dim_, w, out_dim_, 0.0f, y.data(),
              out_dim_, {.bias = b, .relu = relu});
}

void FullyConnected::Backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy,
                              size_t batch, std::span<float> param_grads, std::span<float> dx) const {
  FLEETPS_CHECK_LE(param_offset_ + num_params(), params.size());
  FLEETPS_CHECK_EQ(param_grads.size(), params.size());
  FLEETPS_CHECK_EQ(x.size(), batch * in_dim_);
  FLEETPS_CHECK_EQ(dy.size(), batch * out_dim_);
  FLEETPS_CHECK(dx.empty() || dx.size() == batch * in_dim_) << "dx has " << dx.size() << " floats";
  float* dw = param_grads.data() + param_offset_;
  float* db = dw + in_dim_ * out_dim_;
  std::fill(db, db + out_dim_, 0.0f);
  if (batch == 0) {
    std::fill(dw, dw + in_dim_ * out_dim_, 0.0f);
    return;
  }
  // dW [in x out] = x^T [in x batch] dy [batch x out]
  gemm_->Gemm(dense::Op::kT, dense::Op::kN, in_dim_, out_dim_, batch, x.data(), in_dim_, dy.data(), out_dim_, 0.0f, dw,
              out_dim_);
  // db = column sums of dy
  for (size_t i = 0; i < batch; ++i) {
    const float* row = dy.data() + i * out_dim_;
    for (size_t j = 0; j < out_dim_; ++j) db[j] += row[j];
  }
  if (dx.empty()) return;
  // dx [batch x in] = dy [batch x out] W^T [out x in]
  gemm_->Gemm(dense::Op::kN, dense::Op::kT, batch, in_dim_, out_dim_, dy.data(), out_dim_,
              params.data() + param_offset_, out_dim_, 0.0f, dx.data(), in_dim_);
}

void ReluForward(std::span<float> x) {
  for (float& v : x) v = std::max(v, 0.0f);
}

void ReluBackward(std::span<const float> y, std::span<float> dy) {
  FLEETPS_CHECK_EQ(y.size(), dy.size());
  for (size_t i = 0; i < y.size(); ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

}  // namespace fleetps::trainer::model
