#include "heter_trainer/device/dense_device.h"

#include <algorithm>
#include <bit>
#include <new>
#include <utility>

namespace fleetps::heter {

std::string_view DeviceTypeName(DeviceType type) { return type == DeviceType::kGpu ? "gpu" : "cpu"; }

bool DeviceTypeFromName(std::string_view name, DeviceType* type) {
  if (name == "cpu") {
    *type = DeviceType::kCpu;
  } else if (name == "gpu") {
    *type = DeviceType::kGpu;
  } else {
    return false;
  }
  return true;
}

HostBufferPool::HostBufferPool(std::function<void*(size_t)> allocate, std::function<void(void*)> free,
                               size_t keep_bytes)
    : allocate_(std::move(allocate)), free_(std::move(free)), keep_bytes_(keep_bytes) {}

HostBufferPool::~HostBufferPool() {
  for (auto& [size, blocks] : idle_) {
    for (uint8_t* block : blocks) Free(block, size);
  }
}

size_t HostBufferPool::SizeOf(size_t bytes) { return std::bit_ceil(std::max<size_t>(bytes, size_t{1} << 16)); }

void HostBufferPool::Free(uint8_t* block, size_t) {
  if (ordinary_.erase(block) > 0) {
    ::operator delete(block, std::align_val_t{64});
  } else {
    free_(block);
  }
}

uint8_t* HostBufferPool::Acquire(size_t bytes) {
  const size_t size = SizeOf(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++outstanding_;
    auto& blocks = idle_[size];
    if (!blocks.empty()) {
      uint8_t* block = blocks.back();
      blocks.pop_back();
      kept_ -= size;
      return block;
    }
  }
  if (allocate_) {
    if (void* block = allocate_(size); block != nullptr) return static_cast<uint8_t*>(block);
  }
  auto* block = static_cast<uint8_t*>(::operator new(size, std::align_val_t{64}));
  std::lock_guard<std::mutex> lock(mu_);
  ordinary_.insert(block);
  return block;
}

void HostBufferPool::Release(uint8_t* block, size_t bytes) {
  const size_t size = SizeOf(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  --outstanding_;
  if (kept_ + size <= keep_bytes_) {
    idle_[size].push_back(block);
    kept_ += size;
  } else {
    Free(block, size);
  }
}

size_t HostBufferPool::outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return outstanding_;
}

std::shared_ptr<uint8_t[]> SharedBlock(std::shared_ptr<HostBufferPool> pool, size_t bytes) {
  uint8_t* block = pool->Acquire(bytes);
  return std::shared_ptr<uint8_t[]>(block, [pool = std::move(pool), bytes](uint8_t* p) { pool->Release(p, bytes); });
}

Status CheckStepShapes(const model::DenseNet& net, size_t params_size, std::span<const float> activations,
                       std::span<const float> labels, size_t batch, const DenseStepOutput& out) {
  auto mismatch = [](const char* what, size_t got, size_t want) {
    return Status::InvalidArgument(std::string(what) + " has " + std::to_string(got) + " floats, expected " +
                                   std::to_string(want));
  };
  if (params_size != net.num_params()) {
    return Status::InvalidArgument("no dense parameters were set for this lane (SetParams)");
  }
  if (batch == 0) return Status::InvalidArgument("empty micro-batch");
  if (activations.size() != batch * net.in_dim())
    return mismatch("activations", activations.size(), batch * net.in_dim());
  if (out.predictions.size() != batch * net.num_outputs()) {
    return mismatch("predictions", out.predictions.size(), batch * net.num_outputs());
  }
  if (!out.param_grads.empty()) {
    if (out.param_grads.size() != net.num_params()) {
      return mismatch("param_grads", out.param_grads.size(), net.num_params());
    }
    if (labels.size() != batch * net.num_labels()) return mismatch("labels", labels.size(), batch * net.num_labels());
    if (!out.activation_grads.empty() && out.activation_grads.size() != batch * net.in_dim()) {
      return mismatch("activation_grads", out.activation_grads.size(), batch * net.in_dim());
    }
  } else if (!out.activation_grads.empty()) {
    return Status::InvalidArgument("activation_grads requested without a backward pass (param_grads empty)");
  }
  return Status::OK();
}

Status RequireFp32OnCuda(dense::Precision precision, const std::string& who) {
  if (precision == dense::Precision::kFp32) return Status::OK();
  return Status::InvalidArgument("fleetps.dense.precision " + std::string(dense::PrecisionName(precision)) + ": " +
                                 who +
                                 "'s CUDA device computes the dense layers in fp32; set precision fp32 (bf16 runs on "
                                 "CPU devices with AVX512-BF16 or AMX)");
}

}  // namespace fleetps::heter
