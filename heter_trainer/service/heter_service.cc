#include "heter_trainer/service/heter_service.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "schemas/heter_generated.h"
#include "schemas/ps_generated.h"
#include "common/net/handler_util.h"

namespace fleetps::heter {

using net::Aligned;
using net::Span;
using net::Verified;
using wire::MessageType;

HeterService::HeterService(const config::HeterTrainerOptions& options, const trainer::model::DenseNet& net,
                           DenseDevice& device, trainer::ParamSync& dense, net::TrainerRegistry& trainers)
    : options_(options),
      net_(net),
      device_(device),
      host_buffers_(device.host_buffers()),
      dense_(dense),
      trainers_(trainers) {}

HeterService::~HeterService() { Stop(); }

Status HeterService::Start() {
  const uint32_t lanes = options_.job.heter.lanes;
  lanes_.resize(lanes);
  const size_t grads_bytes = net_.num_params() * sizeof(float);
  for (uint32_t i = 0; i < lanes; ++i) {
    Lane& lane = lanes_[i];
    ASSIGN_OR_RETURN(lane.device, device_.NewLane());
    lane.param_grads_block = SharedBlock(host_buffers_, grads_bytes);
    lane.param_grads = {reinterpret_cast<float*>(lane.param_grads_block.get()), net_.num_params()};
  }
  for (uint32_t i = 0; i < lanes; ++i) threads_.emplace_back([this, i] { LaneLoop(i); });
  return Status::OK();
}

void HeterService::Stop() {
  std::deque<Work> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& w : dropped) w.responder.SendError(Status::Unavailable("the heter-trainer is shutting down"));
  for (auto& t : threads_) t.join();
  threads_.clear();
  control_.Stop();
}

namespace {

// Micro-batches and replies from this size up live in the device's host buffers; smaller
// messages (hellos, heartbeats, tiny micro-batches) in ordinary memory, as the pool's
// smallest block is 64 KiB.
constexpr size_t kPooledBytes = size_t{1} << 16;

// A reply's FlatBuffers storage in the device's host buffers: the lane copies the
// predictions and activation gradients straight into it. Owned by the reply's buffer.
class PooledAllocator : public flatbuffers::Allocator {
 public:
  explicit PooledAllocator(std::shared_ptr<HostBufferPool> pool) : pool_(std::move(pool)) {}
  uint8_t* allocate(size_t bytes) override { return pool_->Acquire(bytes); }
  void deallocate(uint8_t* block, size_t bytes) override { pool_->Release(block, bytes); }

 private:
  const std::shared_ptr<HostBufferPool> pool_;
};

}  // namespace

std::function<std::shared_ptr<uint8_t[]>(uint32_t)> HeterService::PayloadAllocator() const {
  return [pool = host_buffers_](uint32_t bytes) -> std::shared_ptr<uint8_t[]> {
    return bytes >= kPooledBytes ? SharedBlock(pool, bytes) : nullptr;
  };
}

void HeterService::Handle(net::Request request, net::Responder responder) {
  switch (static_cast<MessageType>(request.type)) {
    case MessageType::Ping: {
      flatbuffers::FlatBufferBuilder fbb(16);
      fbb.Finish(
          wire::CreatePingReply(fbb, options_.server.index, static_cast<uint32_t>(options_.server.endpoints.size())));
      return responder.Send(net::ReplyType(MessageType::Ping), fbb.Release());
    }
    case MessageType::HeterHello: return Hello(request, responder);
    case MessageType::HeterTrain: return Train(std::move(request), std::move(responder));
    case MessageType::HeterFlush: return Flush(request, responder);
    case MessageType::Heartbeat: return net::AnswerHeartbeat(trainers_, request, responder);
    default:
      return responder.SendError(Status::InvalidArgument(
          net::MessageTypeName(request.type) + " from " + responder.peer() +
          " is not served by a heter-trainer (it serves HeterHello, HeterTrain, HeterFlush, Heartbeat, Ping)"));
  }
}

void HeterService::Hello(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::HeterHelloRequest>(req, responder);
  if (msg == nullptr) return;
  const std::string who = "cpu-trainer " + std::to_string(msg->trainer_id()) + " (" + responder.peer() + ")";
  Status mismatch;
  if (msg->trainers() != options_.job.trainers_num) {
    mismatch = Status::InvalidArgument(who + " says PADDLE_TRAINERS_NUM=" + std::to_string(msg->trainers()) +
                                       ", this heter-trainer has " + std::to_string(options_.job.trainers_num));
  } else if (msg->trainer_id() >= options_.job.trainers_num) {
    mismatch = Status::InvalidArgument(who + ": trainer id out of range [0, " +
                                       std::to_string(options_.job.trainers_num) + ")");
  } else if (const uint32_t labels = std::max(msg->labels(), 1u), outputs = std::max(msg->outputs(), 1u);
             labels != net_.num_labels() || outputs != net_.num_outputs()) {
    mismatch = Status::InvalidArgument(
        who + " sends " + std::to_string(labels) + " labels per row for " + std::to_string(outputs) +
        " model outputs; this heter-trainer's job has " + std::to_string(net_.num_labels()) + " labels and " +
        std::to_string(net_.num_outputs()) + " outputs (start every role with the same job YAML)");
  } else if (msg->input_width() != net_.in_dim() || msg->dense_params() != net_.num_params()) {
    mismatch = Status::InvalidArgument(who + " sends activation rows of " + std::to_string(msg->input_width()) +
                                       " floats for a dense part of " + std::to_string(msg->dense_params()) +
                                       " parameters; this heter-trainer's model takes " +
                                       std::to_string(net_.in_dim()) + " and has " + std::to_string(net_.num_params()) +
                                       " (start every role with the same job YAML)");
  }
  if (!mismatch.ok()) return responder.SendError(mismatch);
  flatbuffers::FlatBufferBuilder fbb(128);
  fbb.Finish(wire::CreateHeterHelloReply(fbb, options_.stage_id, fbb.CreateString(device_.Describe()),
                                         static_cast<uint32_t>(lanes_.size())));
  responder.Send(net::ReplyType(MessageType::HeterHello), fbb.Release());
}

namespace {

// Why a micro-batch is malformed, or OK.
Status CheckMicroBatch(const wire::HeterTrainRequest& msg, size_t in_dim, size_t num_labels, uint32_t trainers) {
  if (msg.trainer_id() >= trainers) {
    return Status::InvalidArgument("trainer id " + std::to_string(msg.trainer_id()) + " is out of range [0, " +
                                   std::to_string(trainers) + ")");
  }
  const uint64_t rows = msg.rows();
  if (rows == 0) return Status::InvalidArgument("it has no rows");
  if (msg.width() != in_dim) {
    return Status::InvalidArgument("its rows are " + std::to_string(msg.width()) + " floats wide, the model takes " +
                                   std::to_string(in_dim));
  }
  const auto acts = net::Span(msg.activations());
  const auto labels = net::Span(msg.labels());
  if (acts.size() != rows * in_dim) {
    return Status::InvalidArgument("it has " + std::to_string(acts.size()) + " activations for " +
                                   std::to_string(rows) + " rows of " + std::to_string(in_dim));
  }
  if (labels.size() != rows * num_labels) {
    return Status::InvalidArgument("it has " + std::to_string(labels.size()) + " labels for " + std::to_string(rows) +
                                   " rows of " + std::to_string(num_labels));
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!(labels[i] >= 0.0f && labels[i] <= 1.0f)) {
      return Status::InvalidArgument("label " + std::to_string(i) + " is " + std::to_string(labels[i]) +
                                     ", not in [0, 1]");
    }
  }
  for (size_t i = 0; i < acts.size(); ++i) {
    if (!std::isfinite(acts[i])) {
      return Status::InvalidArgument("activation " + std::to_string(i) + " (row " + std::to_string(i / in_dim) +
                                     ") is not finite");
    }
  }
  return Status::OK();
}

}  // namespace

HeterMetrics HeterMetrics::In(metrics::Registry& registry) {
  HeterMetrics m;
  m.micro_batches = registry.GetCounter("fleetps_heter_micro_batches_total", "Micro-batches trained");
  m.examples = registry.GetCounter("fleetps_heter_examples_total", "Rows of the micro-batches trained");
  m.errors = registry.GetCounter(
      "fleetps_heter_errors_total",
      "Micro-batches refused as malformed, or failed on the device, by overflow or at the dense push");
  m.step_seconds = registry.GetHistogram("fleetps_heter_step_seconds",
                                         "A lane's forward, loss, backward and gradient hand-over per micro-batch", {},
                                         metrics::ExponentialBuckets(0.0001, 2, 18));
  m.loss = registry.GetGauge("fleetps_heter_loss", "Mean log loss of the last micro-batch trained");
  m.queued = registry.GetGauge("fleetps_heter_queued_micro_batches", "Micro-batches waiting for a device lane");
  return m;
}

void HeterService::Train(net::Request req, net::Responder responder) {
  const auto* msg = net::Verified<wire::HeterTrainRequest>(req, responder);
  if (msg == nullptr || !net::Aligned(msg->activations(), "activations", req, responder) ||
      !net::Aligned(msg->labels(), "labels", req, responder)) {
    metrics_.errors.Increment();
    return;
  }
  if (Status st = CheckMicroBatch(*msg, net_.in_dim(), net_.num_labels(), options_.job.trainers_num); !st.ok()) {
    metrics_.errors.Increment();
    return responder.SendError(Status::InvalidArgument("HeterTrain micro-batch " + std::to_string(msg->batch_id()) +
                                                       " from " + responder.peer() + ": " + st.message()));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      queue_.push_back(Work{std::move(req), responder});
      metrics_.queued.Set(static_cast<double>(queue_.size()));
      cv_.notify_one();
      return;
    }
  }
  responder.SendError(Status::Unavailable("the heter-trainer is shutting down"));
}

void HeterService::LaneLoop(uint32_t lane) {
  while (true) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    Work work = std::move(queue_.front());
    queue_.pop_front();
    metrics_.queued.Set(static_cast<double>(queue_.size()));
    lock.unlock();
    RunStep(lane, work);
  }
}

namespace {

// Why a step's results must not be used, or OK: a loss, prediction or gradient that is not
// finite. The micro-batch passed CheckMicroBatch, so its activations were finite: too large
// (3e38, say) for the dense part, whose sums overflowed.
Status CheckStepResults(float loss, std::span<const float> predictions, std::span<const float> activation_grads,
                        std::span<const float> param_grads, std::span<const float> activations) {
  auto first_bad = [](std::span<const float> v) {
    return std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); }) - v.begin();
  };
  std::string bad;
  if (!std::isfinite(loss)) {
    bad = "its loss is " + std::to_string(loss);
  } else if (auto i = first_bad(predictions); i < std::ssize(predictions)) {
    bad = "prediction " + std::to_string(i) + " is " + std::to_string(predictions[i]);
  } else if (auto j = first_bad(param_grads); j < std::ssize(param_grads)) {
    bad = "dense gradient " + std::to_string(j) + " is " + std::to_string(param_grads[j]);
  } else if (auto k = first_bad(activation_grads); k < std::ssize(activation_grads)) {
    bad = "activation gradient " + std::to_string(k) + " is " + std::to_string(activation_grads[k]);
  } else {
    return Status::OK();
  }
  float largest = 0.0f;
  for (float a : activations) largest = std::max(largest, std::abs(a));
  return Status::InvalidArgument("its activations overflowed the dense step (" + bad + "; the largest activation is " +
                                 fmt::format("{:g}", largest) +
                                 "): nothing was pushed to the pservers (scale or clip the activations, or look for "
                                 "diverged embeddings on the cpu-trainer)");
}

}  // namespace

void HeterService::RunStep(uint32_t index, const Work& work) {
  const auto* msg = flatbuffers::GetRoot<wire::HeterTrainRequest>(work.request.data());  // verified in Train
  const bool forward_only = msg->forward_only();
  const std::string what = std::string("HeterTrain ") + (forward_only ? "forward-only " : "") + "micro-batch " +
                           std::to_string(msg->batch_id()) + " of cpu-trainer " + std::to_string(msg->trainer_id()) +
                           " (" + work.responder.peer() + ")";
  Lane& lane = lanes_[index];
  const size_t rows = msg->rows();
  const auto started = std::chrono::steady_clock::now();
  // The reply's predictions and activation gradients are written by the step straight into
  // the reply's buffer (sized for them up front; from 64 KiB in the device's host buffers,
  // which a GPU lane copies into without staging), not copied there afterwards. A
  // forward-only micro-batch gets no activation gradients.
  const size_t grads_size = forward_only ? 0 : rows * net_.in_dim();
  const size_t num_predictions = rows * net_.num_outputs();
  const size_t reply_bytes = 256 + (num_predictions + grads_size) * sizeof(float);
  const bool pooled = reply_bytes >= kPooledBytes;
  flatbuffers::FlatBufferBuilder fbb(reply_bytes, pooled ? new PooledAllocator(host_buffers_) : nullptr,
                                     /*own_allocator=*/pooled);
  float* predictions_out = nullptr;
  float* grads_out = nullptr;
  const auto predictions = fbb.CreateUninitializedVector(num_predictions, &predictions_out);
  const auto grads = fbb.CreateUninitializedVector(grads_size, &grads_out);
  auto run = [&]() -> StatusOr<float> {
    ASSIGN_OR_RETURN(auto snapshot, dense_.DenseSnapshot(index));
    if (snapshot != lane.params) {
      RETURN_IF_ERROR(lane.device->SetParams(*snapshot));
      lane.params = std::move(snapshot);
    }
    // Forward only: no param_grads asked for, so no backward, and nothing to push.
    const std::span<float> param_grads = forward_only ? std::span<float>() : lane.param_grads;
    const DenseStepOutput out{{predictions_out, num_predictions}, {grads_out, grads_size}, param_grads};
    ASSIGN_OR_RETURN(float loss, lane.device->Step(net::Span(msg->activations()), net::Span(msg->labels()), rows, out));
    // Checked before anything leaves: a gradient that is not finite would be refused by the
    // pservers (or poison the dense table), and the cpu-trainer would push its embeddings'
    // share of it.
    RETURN_IF_ERROR(
        CheckStepResults(loss, out.predictions, out.activation_grads, param_grads, net::Span(msg->activations())));
    if (!forward_only) RETURN_IF_ERROR(dense_.Push(index, trainer::StepGrads{{}, {}, {}, {}, param_grads}));
    return loss;
  };
  auto loss = run();
  if (!loss.ok()) {
    metrics_.errors.Increment();
    spdlog::warn("{} failed: {}", what, loss.status().ToString());
    return work.responder.SendError(loss.status().WithContext(what));
  }
  if (!forward_only) {  // the series count micro-batches trained
    ++steps_;
    metrics_.step_seconds.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    metrics_.micro_batches.Increment();
    metrics_.examples.Increment(static_cast<double>(rows));
    metrics_.loss.Set(*loss);
  }
  fbb.Finish(wire::CreateHeterTrainReply(fbb, msg->batch_id(), *loss, predictions, grads));
  work.responder.Send(net::ReplyType(MessageType::HeterTrain), fbb.Release());
}

void HeterService::Flush(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::HeterFlushRequest>(req, responder);
  if (msg == nullptr) return;
  responder.ReleaseRequestBytes();
  control_.Post(0, [this, responder] {
    Status st = dense_.Flush();
    if (!st.ok()) return responder.SendError(st.WithContext("HeterFlush from " + responder.peer()));
    flatbuffers::FlatBufferBuilder fbb(32);
    fbb.Finish(wire::CreateHeterFlushReply(fbb, steps_.load()));
    responder.Send(net::ReplyType(MessageType::HeterFlush), fbb.Release());
  });
}

}  // namespace fleetps::heter
