#include "server/service/shuffle_mailbox.h"

#include <string>

#include <spdlog/spdlog.h>

namespace fleetps::server {

StatusOr<uint64_t> ShuffleMailbox::Post(uint64_t round, uint32_t from, uint32_t to, std::vector<uint8_t> block,
                                        bool last, Clock::time_point now) {
  MutexLock lock(mu_);
  const auto full = [&]() REQUIRES(mu_) { return held_bytes_ > 0 && held_bytes_ + block.size() > capacity_bytes_; };
  const auto no_room_for_box = [&]() REQUIRES(mu_) {
    return boxes_.size() >= kMaxBoxes && !boxes_.contains({round, to});
  };
  if (full() || no_room_for_box()) DropIdleLocked(now);
  const auto where = [&] {
    return "shuffle round " + std::to_string(round) + " from trainer " + std::to_string(from) + " to trainer " +
           std::to_string(to);
  };
  if (full()) {
    return Status::Busy(where() + ": the shuffle mailbox holds " + std::to_string(held_bytes_) + " of " +
                        std::to_string(capacity_bytes_) + " bytes (server.shuffle_buffer_bytes); retry once the " +
                        "receivers have fetched");
  }
  if (no_room_for_box()) {
    return Status::Busy(where() + ": the shuffle mailbox already has " + std::to_string(boxes_.size()) +
                        " (round, trainer) boxes; retry once the receivers have fetched");
  }
  Box& box = boxes_[{round, to}];
  if (box.done.count(from) != 0) {
    return Status::InvalidArgument(where() + ": trainer " + std::to_string(from) +
                                   " already sent its last block (is another process using its trainer id?)");
  }
  box.touched = now;
  if (!block.empty()) {
    held_bytes_ += block.size();
    box.mail.push_back(Mail{from, std::move(block)});
  }
  if (last) box.done.insert(from);
  return held_bytes_;
}

void ShuffleMailbox::DropIdleLocked(Clock::time_point now) {
  for (auto it = boxes_.begin(); it != boxes_.end();) {
    const Box& box = it->second;
    if (now - box.touched < idle_expiry_) {
      ++it;
      continue;
    }
    uint64_t bytes = 0;
    for (const Mail& m : box.mail) bytes += m.block.size();
    spdlog::warn(
        "shuffle mailbox: dropping {} bytes for trainer {} in round {}, untouched for {} s (its trainer or "
        "a sender stopped mid-shuffle)",
        bytes, it->first.second, it->first.first,
        std::chrono::duration_cast<std::chrono::seconds>(now - box.touched).count());
    held_bytes_ -= bytes;
    it = boxes_.erase(it);
  }
}

ShuffleMailbox::Taken ShuffleMailbox::Take(uint64_t round, uint32_t to, uint32_t senders, uint64_t max_bytes,
                                           Clock::time_point now) {
  MutexLock lock(mu_);
  Taken out;
  auto it = boxes_.find({round, to});
  if (it == boxes_.end()) return out;
  Box& box = it->second;
  box.touched = now;
  uint64_t bytes = 0;
  while (!box.mail.empty() && (out.mail.empty() || bytes + box.mail.front().block.size() <= max_bytes)) {
    bytes += box.mail.front().block.size();
    out.mail.push_back(std::move(box.mail.front()));
    box.mail.pop_front();
  }
  held_bytes_ -= bytes;
  out.senders_done = static_cast<uint32_t>(box.done.size());
  out.complete = box.mail.empty() && out.senders_done >= senders;
  if (out.complete) boxes_.erase(it);
  return out;
}

uint64_t ShuffleMailbox::held_bytes() const {
  MutexLock lock(mu_);
  return held_bytes_;
}

}  // namespace fleetps::server
