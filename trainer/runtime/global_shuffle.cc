#include "trainer/runtime/global_shuffle.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

namespace fleetps::trainer {
namespace {

using Clock = std::chrono::steady_clock;

// Sleeps between retries: 1 ms doubling up to 32 ms.
class Backoff {
 public:
  void Wait() {
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::milliseconds(32));
  }
  void Reset() { delay_ = std::chrono::milliseconds(1); }

 private:
  std::chrono::milliseconds delay_{1};
};

// Aborted once a stop is requested.
Status Stopped(const GlobalShuffleOptions& o, uint64_t round) {
  if (!StopRequest::Requested(o.stop)) return Status::OK();
  return Status::Aborted(o.stop->reason() + " during global shuffle round " + std::to_string(round) +
                         " (the records in this trainer's memory are lost; its files are untouched)");
}

// Sends records to other trainers' mailboxes, retrying while the mailbox is full; records
// for this trainer go straight into its dataset.
class MailboxTransport : public data::RecordTransport {
 public:
  MailboxTransport(PsClient& client, data::InMemoryDataset& dataset, const GlobalShuffleOptions& o, uint64_t round)
      : client_(client), dataset_(dataset), o_(o), round_(round) {}

  Status Send(uint32_t to, data::RecordBlock records) override {
    if (to == o_.trainer_id) {
      dataset_.ReceiveRecords(to, std::move(records));
      return Status::OK();
    }
    return Post(to, records.Serialize(), false);
  }

  uint64_t busy_retries() const { return busy_retries_; }

  Status Post(uint32_t to, const std::vector<uint8_t>& bytes, bool last) {
    const auto deadline = Clock::now() + o_.timeout;
    Backoff backoff;
    while (true) {
      RETURN_IF_ERROR(Stopped(o_, round_));
      // The client itself retries Busy answers with back-off until the call's deadline,
      // here what is left of o_.timeout; a Busy that comes back means the time is up.
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      Status st =
          client_.ShuffleSend(round_, o_.trainer_id, to, bytes, last, std::max(left, std::chrono::milliseconds(1)));
      if (!st.IsBusy()) return st.WithContext("global shuffle round " + std::to_string(round_));
      ++busy_retries_;
      if (Clock::now() >= deadline) {
        return Status::TimedOut("global shuffle round " + std::to_string(round_) + ": trainer " + std::to_string(to) +
                                "'s mailbox stayed full for " + std::to_string(o_.timeout.count()) +
                                " ms (is trainer " + std::to_string(to) + " running?): " + st.message());
      }
      backoff.Wait();
    }
  }

 private:
  PsClient& client_;
  data::InMemoryDataset& dataset_;
  const GlobalShuffleOptions& o_;
  const uint64_t round_;
  uint64_t busy_retries_ = 0;
};

// Fetches this trainer's mail until the round is complete, `stop` is set, or nothing
// arrives for options.timeout.
Status Receive(PsClient& client, data::InMemoryDataset& dataset, const GlobalShuffleOptions& o, uint64_t round,
               const std::atomic<bool>& stop) {
  const std::string where = client.ServerName(o.trainer_id % client.num_servers());
  auto last_progress = Clock::now();
  uint32_t senders_done = 0;
  Backoff backoff;
  while (!stop) {
    RETURN_IF_ERROR(Stopped(o, round));
    ASSIGN_OR_RETURN(auto fetched, client.ShuffleFetch(round, o.trainer_id, o.trainers_num));
    for (auto& mail : fetched.mail) {
      ASSIGN_OR_RETURN(auto block, data::RecordBlock::Parse(mail.block, dataset.dense_dim(), dataset.num_slots(),
                                                            dataset.num_labels(),
                                                            "trainer " + std::to_string(mail.from) + " via " + where));
      dataset.ReceiveRecords(mail.from, std::move(block));
    }
    if (fetched.complete) return Status::OK();
    if (!fetched.mail.empty() || fetched.senders_done != senders_done) {
      senders_done = fetched.senders_done;
      last_progress = Clock::now();
      backoff.Reset();
      continue;
    }
    if (Clock::now() - last_progress >= o.timeout) {
      return Status::TimedOut("global shuffle round " + std::to_string(round) + ": trainer " +
                              std::to_string(o.trainer_id) + " has heard from " + std::to_string(senders_done) +
                              " of " + std::to_string(o.trainers_num) + " trainers and nothing arrived for " +
                              std::to_string(o.timeout.count()) + " ms (did a trainer fail?)");
    }
    backoff.Wait();
  }
  return Status::Aborted("global shuffle round " + std::to_string(round) + " abandoned");
}

}  // namespace

StatusOr<GlobalShuffleReport> GlobalShuffle(PsClient& client, data::InMemoryDataset& dataset,
                                            const GlobalShuffleOptions& o) {
  ASSIGN_OR_RETURN(auto barrier,
                   client.Barrier("global-shuffle", o.trainer_id, o.trainers_num, o.timeout, {}, false, o.stop));
  const uint64_t round = barrier.generation;
  const auto start = Clock::now();
  GlobalShuffleReport report;
  report.round = round;
  report.records_before = dataset.size();

  std::atomic<bool> stop{false};
  Status received;
  std::thread receiver([&] { received = Receive(client, dataset, o, round, stop); });
  const uint64_t client_busy_retries = client.counters().busy_retries;
  MailboxTransport transport(client, dataset, o, round);
  Status sent = dataset.GlobalShuffle(&transport, o.trainers_num, o.seed);
  for (uint32_t to = 0; to < o.trainers_num && sent.ok(); ++to) sent = transport.Post(to, {}, true);
  if (!sent.ok()) stop = true;
  receiver.join();
  RETURN_IF_ERROR(Stopped(o, round));  // rather than the error of whichever side saw it first
  RETURN_IF_ERROR(sent);
  RETURN_IF_ERROR(received);
  dataset.FinishGlobalShuffle(o.seed ^ round);
  report.records_after = dataset.size();
  report.busy_retries = transport.busy_retries() + (client.counters().busy_retries - client_busy_retries);
  spdlog::info("trainer {}: global shuffle round {}: {} records before, {} after ({:.2f} s, {} busy retries)",
               o.trainer_id, round, report.records_before, report.records_after,
               std::chrono::duration<double>(Clock::now() - start).count(), report.busy_retries);
  return report;
}

}  // namespace fleetps::trainer
