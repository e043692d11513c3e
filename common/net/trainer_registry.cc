#include "common/net/trainer_registry.h"

#include <spdlog/spdlog.h>

#include "schemas/ps_generated.h"
#include "common/net/handler_util.h"

namespace fleetps::net {

StatusOr<std::vector<uint32_t>> TrainerRegistry::Heartbeat(uint32_t id, uint32_t trainers, bool finished, bool failed,
                                                           const std::string& reason, Clock::time_point now,
                                                           bool stopping) {
  if (trainers == 0 || trainers > kMaxTrainers) {
    return Status::InvalidArgument("heartbeat from trainer " + std::to_string(id) + ": trainers " +
                                   std::to_string(trainers) + " is not in [1, " + std::to_string(kMaxTrainers) + "]");
  }
  if (id >= trainers) {
    return Status::InvalidArgument("heartbeat from trainer " + std::to_string(id) + ": the id is not below trainers " +
                                   std::to_string(trainers) + " (PADDLE_TRAINER_ID / PADDLE_TRAINERS_NUM)");
  }
  MutexLock lock(mu_);
  if (trainers_ == 0) {
    trainers_ = trainers;
    first_heartbeat_ = now;
    entries_.assign(trainers, Entry{});
  } else if (trainers != trainers_) {
    return Status::InvalidArgument("heartbeat from trainer " + std::to_string(id) + " says " +
                                   std::to_string(trainers) + " trainers, earlier ones said " +
                                   std::to_string(trainers_) + " (PADDLE_TRAINERS_NUM differs between trainers)");
  }
  Entry& e = entries_[id];
  if (e.gone) spdlog::warn("trainer {} is back after being counted as gone", id);
  e.gone = false;
  e.seen = true;
  e.last_seen = now;
  if (finished && !e.finished) {
    if (failed) {
      spdlog::error("trainer {} ended with an error: {}", id, reason.empty() ? "(no reason given)" : reason);
    } else {
      spdlog::info("trainer {} finished", id);
    }
  }
  if (stopping && !e.stopping && !e.finished) spdlog::warn("trainer {} is stopping: {}", id, reason);
  e.finished = e.finished || finished;
  e.failed = e.failed || failed;
  e.stopping = e.stopping || stopping;
  return GoneLocked();
}

TrainerRegistry::Sweep TrainerRegistry::Expire(Clock::time_point now) {
  Sweep sweep;
  MutexLock lock(mu_);
  if (trainers_ == 0) return sweep;
  std::string finished, failed, gone;
  const auto add = [](std::string& list, uint32_t id) { list += (list.empty() ? "" : ", ") + std::to_string(id); };
  sweep.ended = true;
  sweep.clean = true;
  for (uint32_t id = 0; id < trainers_; ++id) {
    Entry& e = entries_[id];
    const auto since = e.seen ? e.last_seen : first_heartbeat_;
    if (!e.finished && !e.gone && lease_.count() > 0 && now - since > lease_) {
      e.gone = true;
      sweep.newly_gone.push_back(id);
    }
    if (e.finished && !e.failed) add(finished, id);
    if (e.finished && e.failed) add(failed, id);
    if (e.gone) {
      add(gone, id);
      sweep.gone.push_back(id);
    }
    if (e.seen && !e.finished && !e.gone) (e.stopping ? sweep.stopping : sweep.training).push_back(id);
    sweep.ended = sweep.ended && (e.finished || e.gone);
    sweep.clean = sweep.clean && e.finished && !e.failed;
  }
  sweep.clean = sweep.clean && sweep.ended;
  const auto none = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  sweep.summary = "trainers finished: " + none(finished) + "; failed: " + none(failed) + "; gone: " + none(gone) +
                  (gone.empty() ? "" : fmt::format(" (no heartbeat for {:g} s)", lease_.count() / 1000.0));
  return sweep;
}

std::vector<uint32_t> TrainerRegistry::gone() const {
  MutexLock lock(mu_);
  return GoneLocked();
}

std::vector<uint32_t> TrainerRegistry::GoneLocked() const {
  std::vector<uint32_t> out;
  for (uint32_t id = 0; id < entries_.size(); ++id) {
    if (entries_[id].gone) out.push_back(id);
  }
  return out;
}

namespace {

// "0, 2" ("-" for none).
std::string IdList(const std::vector<uint32_t>& ids) {
  std::string out;
  for (uint32_t id : ids) out += (out.empty() ? "" : ", ") + std::to_string(id);
  return out.empty() ? "-" : out;
}

}  // namespace

std::string StopWait::Describe(const TrainerRegistry::Sweep& sweep) const {
  return fmt::format(
      "{}: serving the job's stopping trainers until they have ended (stopping: {}; training: {}; at "
      "most {} s; send it again to stop waiting)",
      signal_, IdList(sweep.stopping), IdList(sweep.training), limit_.count());
}

std::optional<std::string> StopWait::Over(const TrainerRegistry::Sweep& sweep, Clock::time_point now) const {
  if (!Needed(sweep)) return signal_ + ": the stopping trainers have ended";
  if (sweep.stopping.empty() && now >= grace_end_) {
    return signal_ + ": trainer(s) " + IdList(sweep.training) + " still training";
  }
  if (now >= end_) {
    return fmt::format("{}: trainer(s) {} did not end within {} s", signal_, IdList(sweep.stopping), limit_.count());
  }
  return std::nullopt;
}

void AnswerHeartbeat(TrainerRegistry& registry, const Request& req, const Responder& responder) {
  if (!Authorized(req, responder)) return;  // "finished" from anyone would end the job
  const auto* msg = Verified<wire::HeartbeatRequest>(req, responder);
  if (msg == nullptr) return;
  auto gone = registry.Heartbeat(msg->trainer_id(), msg->trainers(), msg->finished(), msg->failed(),
                                 msg->reason() ? msg->reason()->str() : std::string(), std::chrono::steady_clock::now(),
                                 msg->stopping());
  if (!gone.ok()) return responder.SendError(gone.status().WithContext("Heartbeat from " + responder.peer()));
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateHeartbeatReply(fbb, fbb.CreateVector(*gone)));
  responder.Send(ReplyType(wire::MessageType::Heartbeat), fbb.Release());
}

}  // namespace fleetps::net
