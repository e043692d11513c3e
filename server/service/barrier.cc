#include "server/service/barrier.h"

#include <algorithm>

namespace fleetps::server {

void BarrierManager::Arrive(const std::string& name, uint32_t trainer_id, uint32_t participants,
                            Clock::time_point deadline, std::vector<double> values, bool done, Callback callback) {
  if (participants == 0) {
    callback(Status::InvalidArgument("barrier '" + name + "': participants must be >= 1"));
    return;
  }
  if (trainer_id >= participants) {
    callback(Status::InvalidArgument("barrier '" + name + "': trainer id " + std::to_string(trainer_id) +
                                     " is not below participants " + std::to_string(participants)));
    return;
  }
  std::vector<Waiter> released;
  uint64_t generation = 0;
  Status error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Barrier& b = barriers_[name];
    const bool joined =
        std::any_of(b.waiters.begin(), b.waiters.end(), [&](const Waiter& w) { return w.trainer_id == trainer_id; });
    if (!b.waiters.empty() && b.participants != participants) {
      error = Status::InvalidArgument("barrier '" + name + "': trainer " + std::to_string(trainer_id) + " says " +
                                      std::to_string(participants) + " participants, others said " +
                                      std::to_string(b.participants) +
                                      " (PADDLE_TRAINERS_NUM differs between trainers)");
    } else if (joined) {
      error = Status::InvalidArgument("barrier '" + name + "': trainer " + std::to_string(trainer_id) +
                                      " is already waiting (do two trainers share PADDLE_TRAINER_ID?)");
    } else {
      b.participants = participants;
      b.waiters.push_back(Waiter{trainer_id, deadline, std::move(values), done, std::move(callback)});
      if (b.waiters.size() < participants) return;
      generation = ++b.generation;
      released.swap(b.waiters);
    }
  }
  if (!error.ok()) {
    callback(error);
    return;
  }
  // Reduce outside the lock.
  Result result;
  result.generation = generation;
  result.all_done = true;
  result.sum.assign(released.front().values.size(), 0.0);
  for (const auto& w : released) {
    result.all_done = result.all_done && w.done;
    if (w.values.size() != result.sum.size()) {
      error = Status::InvalidArgument("barrier '" + name + "': trainers sent value vectors of different lengths (" +
                                      std::to_string(w.values.size()) + " vs " + std::to_string(result.sum.size()) +
                                      ")");
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

void BarrierManager::ExpireDeadlines(Clock::time_point now) {
  std::vector<std::pair<std::string, Waiter>> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, b] : barriers_) {
      auto it = std::stable_partition(b.waiters.begin(), b.waiters.end(),
                                      [now](const Waiter& w) { return w.deadline > now; });
      for (auto e = it; e != b.waiters.end(); ++e) expired.emplace_back(name, std::move(*e));
      b.waiters.erase(it, b.waiters.end());
    }
  }
  for (auto& [name, w] : expired) {
    w.callback(Status::TimedOut("barrier '" + name + "': trainer " + std::to_string(w.trainer_id) +
                                " timed out waiting for the other trainers"));
  }
}

void BarrierManager::AbortAll(const std::string& why) {
  std::vector<std::pair<std::string, Waiter>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, b] : barriers_) {
      for (auto& w : b.waiters) all.emplace_back(name, std::move(w));
      b.waiters.clear();
    }
  }
  for (auto& [name, w] : all) w.callback(Status::Aborted("barrier '" + name + "': " + why));
}

size_t BarrierManager::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [name, b] : barriers_) n += b.waiters.size();
  return n;
}

StatusOr<std::pair<std::vector<double>, uint32_t>> MetricBoard::Report(const std::string& name,
                                                                      uint32_t trainer_id,
                                                                      std::vector<double> values) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& board = boards_[name];
  for (const auto& [id, v] : board) {
    if (id != trainer_id && v.size() != values.size()) {
      return Status::InvalidArgument("metric '" + name + "': trainer " + std::to_string(trainer_id) + " reported " +
                                     std::to_string(values.size()) + " values, trainer " + std::to_string(id) +
                                     " reported " + std::to_string(v.size()));
    }
  }
  board[trainer_id] = std::move(values);
  std::vector<double> sum(board[trainer_id].size(), 0.0);
  for (const auto& [id, v] : board) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];
  }
  return std::make_pair(std::move(sum), static_cast<uint32_t>(board.size()));
}

}  // namespace fleetps::server
