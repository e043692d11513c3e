#include "trainer/model/interactions.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace fleetps::trainer::model {
// ---- FmSecondOrder ----

FmSecondOrder::FmSecondOrder(size_t fields, size_t k) : fields_(fields), k_(k) {
  FLEETPS_CHECK(fields > 0 && k > 0) << "fields " << fields << ", k " << k;
}

void FmSecondOrder::Forward(std::span<const float> e, size_t batch, std::span<float> y) const {
  FLEETPS_CHECK_EQ(e.size(), batch * fields_ * k_);
  FLEETPS_CHECK_EQ(y.size(), batch);
  for (size_t b = 0; b < batch; ++b) {
    const float* row = e.data() + b * fields_ * k_;
    double total = 0;
    for (size_t f = 0; f < k_; ++f) {
      double sum = 0, squares = 0;
      for (size_t i = 0; i < fields_; ++i) {
        const double v = row[i * k_ + f];
        sum += v;
        squares += v * v;
      }
      total += sum * sum - squares;
    }
    y[b] = static_cast<float>(0.5 * total);
  }
}

void FmSecondOrder::Backward(std::span<const float> e, std::span<const float> dy, size_t batch,
                             std::span<float> de) const {
  FLEETPS_CHECK_EQ(e.size(), batch * fields_ * k_);
  FLEETPS_CHECK_EQ(de.size(), e.size());
  FLEETPS_CHECK_EQ(dy.size(), batch);
  std::vector<float> sum(k_);
  for (size_t b = 0; b < batch; ++b) {
    const float* row = e.data() + b * fields_ * k_;
    float* drow = de.data() + b * fields_ * k_;
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (size_t i = 0; i < fields_; ++i) {
      for (size_t f = 0; f < k_; ++f) sum[f] += row[i * k_ + f];
    }
    for (size_t i = 0; i < fields_; ++i) {
      for (size_t f = 0; f < k_; ++f) drow[i * k_ + f] += dy[b] * (sum[f] - row[i * k_ + f]);
    }
  }
}

// ---- CrossLayer ----

CrossLayer::CrossLayer(CrossType type, size_t dim, size_t param_offset, const dense::CpuGemm* gemm)
    : type_(type), dim_(dim), param_offset_(param_offset), gemm_(gemm) {
  FLEETPS_CHECK_GE(dim, 1u);
  FLEETPS_CHECK(gemm != nullptr);
}

void CrossLayer::InitParams(std::span<float> params, UniformRandom* rng) const {
  FLEETPS_CHECK_LE(param_offset_ + num_params(), params.size());
  const size_t weights = num_params() - dim_;
  const float limit = std::sqrt(6.0f / static_cast<float>(type_ == CrossType::kV1 ? dim_ + 1 : dim_ + dim_));
  for (float& v : params.subspan(param_offset_, weights)) v = rng->Next(-limit, limit);
  std::ranges::fill(params.subspan(param_offset_ + weights, dim_), 0.0f);
}

void CrossLayer::Forward(std::span<const float> params, std::span<const float> x0, std::span<const float> x,
                         size_t batch, std::span<float> inner, std::span<float> y) const {
  FLEETPS_CHECK_LE(param_offset_ + num_params(), params.size());
  FLEETPS_CHECK_EQ(x0.size(), batch * dim_);
  FLEETPS_CHECK_EQ(x.size(), batch * dim_);
  FLEETPS_CHECK_EQ(y.size(), batch * dim_);
  const float* w = params.data() + param_offset_;
  const float* bias = w + (num_params() - dim_);
  if (type_ == CrossType::kV1) {
    FLEETPS_CHECK_EQ(inner.size(), batch);
    for (size_t b = 0; b < batch; ++b) {
      const float* xr = x.data() + b * dim_;
      const float* x0r = x0.data() + b * dim_;
      float dot = 0;
      for (size_t j = 0; j < dim_; ++j) dot += xr[j] * w[j];
      inner[b] = dot;
      float* yr = y.data() + b * dim_;
      for (size_t j = 0; j < dim_; ++j) yr[j] = x0r[j] * dot + bias[j] + xr[j];
    }
    return;
  }
  FLEETPS_CHECK_EQ(inner.size(), batch * dim_);
  if (batch == 0) return;
  // inner = x W + b
  gemm_->Gemm(dense::Op::kN, dense::Op::kN, batch, dim_, dim_, x.data(), dim_, w, dim_, 0.0f, inner.data(), dim_,
              {.bias = bias});
  for (size_t i = 0; i < batch * dim_; ++i) y[i] = x0[i] * inner[i] + x[i];
}

void CrossLayer::Backward(std::span<const float> params, std::span<const float> x0, std::span<const float> x,
                          std::span<const float> inner, std::span<const float> dy, size_t batch,
                          std::span<float> param_grads, std::span<float> dx0, std::span<float> dx) const {
  FLEETPS_CHECK_LE(param_offset_ + num_params(), params.size());
  FLEETPS_CHECK_EQ(param_grads.size(), params.size());
  FLEETPS_CHECK_EQ(dy.size(), batch * dim_);
  FLEETPS_CHECK_EQ(dx0.size(), batch * dim_);
  FLEETPS_CHECK_EQ(dx.size(), batch * dim_);
  const float* w = params.data() + param_offset_;
  float* dw = param_grads.data() + param_offset_;
  float* db = dw + (num_params() - dim_);
  std::fill(dw, dw + num_params(), 0.0f);
  if (type_ == CrossType::kV1) {
    for (size_t b = 0; b < batch; ++b) {
      const float* g = dy.data() + b * dim_;
      const float* x0r = x0.data() + b * dim_;
      const float* xr = x.data() + b * dim_;
      float g_x0 = 0;  // dL/d(x . w) = dy . x0
      for (size_t j = 0; j < dim_; ++j) g_x0 += g[j] * x0r[j];
      float* dx0r = dx0.data() + b * dim_;
      float* dxr = dx.data() + b * dim_;
      for (size_t j = 0; j < dim_; ++j) {
        dx0r[j] += g[j] * inner[b];
        dxr[j] = g[j] + w[j] * g_x0;
        dw[j] += g_x0 * xr[j];
        db[j] += g[j];
      }
    }
    return;
  }
  // v2: du = dy * x0 (du is d(loss)/d(x W + b)); kept in dx's memory until used.
  if (batch == 0) return;
  std::vector<float> du(batch * dim_);
  for (size_t i = 0; i < batch * dim_; ++i) {
    du[i] = dy[i] * x0[i];
    dx0[i] += dy[i] * inner[i];
  }
  // dW [d x d] = x^T du
  gemm_->Gemm(dense::Op::kT, dense::Op::kN, dim_, dim_, batch, x.data(), dim_, du.data(), dim_, 0.0f, dw, dim_);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t j = 0; j < dim_; ++j) db[j] += du[b * dim_ + j];
  }
  // dx = dy + du W^T
  std::copy(dy.begin(), dy.end(), dx.begin());
  gemm_->Gemm(dense::Op::kN, dense::Op::kT, batch, dim_, dim_, du.data(), dim_, w, dim_, 1.0f, dx.data(), dim_);
}

// ---- DotInteraction ----

DotInteraction::DotInteraction(size_t n, size_t k) : n_(n), k_(k) {
  FLEETPS_CHECK(n >= 2 && k > 0) << "n " << n << ", k " << k;
}

void DotInteraction::Forward(std::span<const float> e, size_t batch, std::span<float> y) const {
  FLEETPS_CHECK_EQ(e.size(), batch * n_ * k_);
  FLEETPS_CHECK_EQ(y.size(), batch * out_dim());
  for (size_t b = 0; b < batch; ++b) {
    const float* row = e.data() + b * n_ * k_;
    float* out = y.data() + b * out_dim();
    for (size_t i = 0; i < n_; ++i) {
      for (size_t j = i + 1; j < n_; ++j) {
        float dot = 0;
        for (size_t f = 0; f < k_; ++f) dot += row[i * k_ + f] * row[j * k_ + f];
        *out++ = dot;
      }
    }
  }
}

void DotInteraction::Backward(std::span<const float> e, std::span<const float> dy, size_t batch,
                              std::span<float> de) const {
  FLEETPS_CHECK_EQ(e.size(), batch * n_ * k_);
  FLEETPS_CHECK_EQ(de.size(), e.size());
  FLEETPS_CHECK_EQ(dy.size(), batch * out_dim());
  for (size_t b = 0; b < batch; ++b) {
    const float* row = e.data() + b * n_ * k_;
    float* drow = de.data() + b * n_ * k_;
    const float* g = dy.data() + b * out_dim();
    for (size_t i = 0; i < n_; ++i) {
      for (size_t j = i + 1; j < n_; ++j) {
        const float gij = *g++;
        for (size_t f = 0; f < k_; ++f) {
          drow[i * k_ + f] += gij * row[j * k_ + f];
          drow[j * k_ + f] += gij * row[i * k_ + f];
        }
      }
    }
  }
}

// ---- Mlp ----

Mlp::Mlp(size_t in_dim, std::span<const uint32_t> widths, bool relu_last, size_t param_offset,
         const dense::CpuGemm* gemm)
    : in_dim_(in_dim), relu_last_(relu_last), param_offset_(param_offset) {
  size_t width = in_dim;
  for (uint32_t out : widths) {
    layers_.emplace_back(width, out, param_offset_ + num_params_, gemm);
    num_params_ += layers_.back().num_params();
    width = out;
  }
}

void Mlp::InitParams(std::span<float> params, UniformRandom* rng) const {
  for (const FullyConnected& layer : layers_) layer.InitParams(params, rng);
}

std::span<const float> Mlp::Forward(std::span<const float> params, std::span<const float> x, size_t batch,
                                    MlpScratch* s) const {
  FLEETPS_CHECK_EQ(x.size(), batch * in_dim_);
  s->outputs.resize(layers_.size());
  std::span<const float> in = x;
  for (size_t l = 0; l < layers_.size(); ++l) {
    std::vector<float>& y = s->outputs[l];
    y.resize(batch * layers_[l].out_dim());
    layers_[l].Forward(params, in, batch, y, /*relu=*/relu_last_ || l + 1 < layers_.size());
    in = y;
  }
  return in;
}

void Mlp::Backward(std::span<const float> params, std::span<const float> x, std::span<const float> dy, size_t batch,
                   std::span<float> param_grads, std::span<float> dx, MlpScratch* s,
                   const std::function<void(size_t, size_t)>& ready) const {
  FLEETPS_CHECK_EQ(dy.size(), batch * out_dim());
  if (layers_.empty()) {
    if (!dx.empty()) std::copy(dy.begin(), dy.end(), dx.begin());
    return;
  }
  s->grad.assign(dy.begin(), dy.end());
  if (relu_last_) ReluBackward(s->outputs.back(), s->grad);
  for (size_t l = layers_.size(); l-- > 0;) {
    const FullyConnected& layer = layers_[l];
    const auto done = [&] {
      if (ready) ready(layer.param_offset(), layer.param_offset() + layer.num_params());
    };
    if (l == 0) {
      layer.Backward(params, x, s->grad, batch, param_grads, dx);
      done();
      break;
    }
    const std::vector<float>& in = s->outputs[l - 1];  // ReLU output of layer l - 1
    s->next_grad.resize(in.size());
    layer.Backward(params, in, s->grad, batch, param_grads, s->next_grad);
    done();
    ReluBackward(in, s->next_grad);
    std::swap(s->grad, s->next_grad);
  }
}

}  // namespace fleetps::trainer::model
