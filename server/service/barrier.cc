#include "server/service/barrier.h"

#include <algorithm>

namespace fleetps::server {

void BarrierManager::Arrive(const std::string& name, uint32_t trainer_id, uint32_t participants,
                            Clock::time_point deadline, std::vector<double> values, bool done, Callback callback) {
  if (Status st = CheckArrival(name, trainer_id, participants); !st.ok()) {
    callback(st);
    return;
  }
  const uint64_t value_bytes = values.size() * sizeof(double);
  std::vector<Waiter> released;
  uint64_t generation = 0;
  Status error;
  {
    // Admission and joining are one critical section: checked under one lock and joined
    // under the next, an arrival could join after SetJobFailure() had failed every waiter
    // (and wait out its deadline instead of failing now), or pass the bounds on barriers and
    // waiting bytes together with other arrivals.
    MutexLock lock(mu_);
    if (!job_failure_.empty()) {
      error = Status::Aborted("barrier '" + name + "': " + job_failure_);
    } else if (barriers_.find(name) == barriers_.end() && !MakeRoom()) {
      error = Status::Busy("barrier '" + name + "': " + std::to_string(kMaxBarriers) +
                           " barriers have trainers waiting; retry later");
    } else if (waiting_bytes_ + value_bytes > kMaxWaitingBytes) {
      error = Status::Busy("barrier '" + name + "': waiting trainers already hold " + std::to_string(waiting_bytes_) +
                           " bytes of values; retry later");
    } else {
      Barrier& b = barriers_[name];
      b.last_used = Clock::now();
      const bool joined =
          std::any_of(b.waiters.begin(), b.waiters.end(), [&](const Waiter& w) { return w.trainer_id == trainer_id; });
      if (!b.waiters.empty() && b.participants != participants) {
        error =
            Status::InvalidArgument("barrier '" + name + "': trainer " + std::to_string(trainer_id) + " says " +
                                    std::to_string(participants) + " participants, others said " +
                                    std::to_string(b.participants) + " (PADDLE_TRAINERS_NUM differs between trainers)");
      } else if (joined) {
        error = Status::InvalidArgument("barrier '" + name + "': trainer " + std::to_string(trainer_id) +
                                        " is already waiting (do two trainers share PADDLE_TRAINER_ID?)");
      } else {
        b.participants = participants;
        waiting_bytes_ += value_bytes;
        b.waiters.push_back(Waiter{trainer_id, deadline, std::move(values), done, std::move(callback)});
        if (b.waiters.size() < participants) return;
        generation = ++b.generation;
        released.swap(b.waiters);
        for (const auto& w : released) waiting_bytes_ -= w.values.size() * sizeof(double);
      }
    }
  }
  if (!error.ok()) {
    callback(error);
    return;
  }
  Release(name, generation, released);  // outside the lock
}

Status BarrierManager::CheckArrival(const std::string& name, uint32_t trainer_id, uint32_t participants) {
  if (participants == 0) {
    return Status::InvalidArgument("barrier '" + name + "': participants must be >= 1");
  }
  if (participants > kMaxParticipants) {
    return Status::InvalidArgument("barrier '" + name + "': participants " + std::to_string(participants) +
                                   " is above the limit of " + std::to_string(kMaxParticipants));
  }
  if (trainer_id >= participants) {
    return Status::InvalidArgument("barrier '" + name + "': trainer id " + std::to_string(trainer_id) +
                                   " is not below participants " + std::to_string(participants));
  }
  return Status::OK();
}

void BarrierManager::Release(const std::string& name, uint64_t generation, std::vector<Waiter>& released) {
  Status error;
  Result result;
  result.generation = generation;
  result.all_done = true;
  result.sum.assign(released.front().values.size(), 0.0);
  for (const auto& w : released) {
    result.all_done = result.all_done && w.done;
    if (w.values.size() != result.sum.size()) {
      error =
          Status::InvalidArgument("barrier '" + name + "': trainers sent value vectors of different lengths (" +
                                  std::to_string(w.values.size()) + " vs " + std::to_string(result.sum.size()) + ")");
      break;
    }
    for (size_t i = 0; i < result.sum.size(); ++i) result.sum[i] += w.values[i];
  }
  for (auto& w : released) {
    if (error.ok()) {
      w.callback(result);
    } else {
      w.callback(error);
    }
  }
}

std::string BarrierManager::Roll(const Barrier& b, uint32_t participants) {
  std::vector<bool> arrived(participants, false);
  for (const auto& w : b.waiters) arrived[w.trainer_id] = true;
  std::string in, out;
  size_t missing = 0;
  for (uint32_t t = 0; t < participants; ++t) {
    std::string& list = arrived[t] ? in : out;
    missing += !arrived[t];
    if (!arrived[t] && missing > 16) continue;  // long lists are cut
    list += (list.empty() ? "" : ", ") + std::to_string(t);
  }
  if (missing > 16) out += ", ... (" + std::to_string(missing) + " in all)";
  return "arrived: " + (in.empty() ? std::string("none") : in) + "; missing: " + (out.empty() ? "none" : out) +
         " (of " + std::to_string(participants) + ")";
}

bool BarrierManager::MakeRoom() {
  if (barriers_.size() < kMaxBarriers) return true;
  auto idle = barriers_.end();
  for (auto it = barriers_.begin(); it != barriers_.end(); ++it) {
    if (it->second.waiters.empty() && (idle == barriers_.end() || it->second.last_used < idle->second.last_used)) {
      idle = it;
    }
  }
  if (idle == barriers_.end()) return false;
  barriers_.erase(idle);
  return true;
}

void BarrierManager::ExpireDeadlines(Clock::time_point now) {
  std::vector<std::pair<std::string, Waiter>> expired;
  std::vector<std::string> rolls;
  {
    MutexLock lock(mu_);
    for (auto& [name, b] : barriers_) {
      auto it = std::stable_partition(b.waiters.begin(), b.waiters.end(),
                                      [now](const Waiter& w) { return w.deadline > now; });
      if (it == b.waiters.end()) continue;
      const std::string roll = Roll(b, b.participants);
      for (auto e = it; e != b.waiters.end(); ++e) {
        waiting_bytes_ -= e->values.size() * sizeof(double);
        expired.emplace_back(name, std::move(*e));
        rolls.push_back(roll);
      }
      b.waiters.erase(it, b.waiters.end());
    }
  }
  for (size_t i = 0; i < expired.size(); ++i) {
    auto& [name, w] = expired[i];
    w.callback(Status::TimedOut("barrier '" + name + "': trainer " + std::to_string(w.trainer_id) +
                                " timed out waiting for the other trainers; " + rolls[i] +
                                " (did a trainer fail? see its log)"));
  }
}

void BarrierManager::SetJobFailure(const std::string& why) {
  {
    MutexLock lock(mu_);
    if (job_failure_ == why) return;
    job_failure_ = why;
  }
  if (!why.empty()) AbortAll(why);
}

void BarrierManager::AbortAll(const std::string& why) {
  std::vector<std::pair<std::string, Waiter>> all;
  {
    MutexLock lock(mu_);
    for (auto& [name, b] : barriers_) {
      for (auto& w : b.waiters) all.emplace_back(name, std::move(w));
      b.waiters.clear();
    }
    waiting_bytes_ = 0;
  }
  for (auto& [name, w] : all) w.callback(Status::Aborted("barrier '" + name + "': " + why));
}

size_t BarrierManager::waiting() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [name, b] : barriers_) n += b.waiters.size();
  return n;
}

uint64_t MetricBoard::Bytes(const Board& b) {
  uint64_t n = 0;
  for (const auto& [id, l] : b.latest) n += l.values.size() * sizeof(double);
  return n;
}

void MetricBoard::Forget(uint64_t owner) {
  MutexLock lock(mu_);
  for (auto board = boards_.begin(); board != boards_.end();) {
    auto& latest = board->second.latest;
    for (auto it = latest.begin(); it != latest.end();) {
      if (it->second.owner != owner) {
        ++it;
        continue;
      }
      bytes_ -= it->second.values.size() * sizeof(double);
      it = latest.erase(it);
    }
    board = latest.empty() ? boards_.erase(board) : std::next(board);
  }
}

StatusOr<std::pair<std::vector<double>, uint32_t>> MetricBoard::Report(const std::string& name, uint32_t trainer_id,
                                                                       std::vector<double> values, uint64_t owner) {
  const uint64_t new_bytes = values.size() * sizeof(double);
  if (new_bytes > kMaxBytes / 4) {
    return Status::InvalidArgument("metric '" + name + "': " + std::to_string(values.size()) +
                                   " values are more than a metric report may hold");
  }
  MutexLock lock(mu_);
  auto found = boards_.find(name);
  if (found != boards_.end()) {
    for (const auto& [id, l] : found->second.latest) {
      if (id != trainer_id && l.values.size() != values.size()) {
        return Status::InvalidArgument("metric '" + name + "': trainer " + std::to_string(trainer_id) + " reported " +
                                       std::to_string(values.size()) + " values, trainer " + std::to_string(id) +
                                       " reported " + std::to_string(l.values.size()));
      }
    }
  }
  // Forget the least recently reported boards while over a bound (never the one reported to).
  while (!boards_.empty() &&
         (bytes_ + new_bytes > kMaxBytes || (found == boards_.end() && boards_.size() >= kMaxNames))) {
    auto oldest = boards_.end();
    for (auto it = boards_.begin(); it != boards_.end(); ++it) {
      if (it != found && (oldest == boards_.end() || it->second.last_report < oldest->second.last_report)) {
        oldest = it;
      }
    }
    if (oldest == boards_.end()) break;
    bytes_ -= Bytes(oldest->second);
    boards_.erase(oldest);
  }
  Board& board = boards_[name];
  board.last_report = ++tick_;
  auto& slot = board.latest[trainer_id];
  bytes_ = bytes_ - slot.values.size() * sizeof(double) + new_bytes;
  slot.values = std::move(values);
  slot.owner = owner;
  std::vector<double> sum(slot.values.size(), 0.0);
  for (const auto& [id, l] : board.latest) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += l.values[i];
  }
  return std::make_pair(std::move(sum), static_cast<uint32_t>(board.latest.size()));
}

}  // namespace fleetps::server
