#include "trainer/collective/local_group.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <string>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace fleetps::trainer::collective {
namespace {

// The state the members of one process share. Every operation runs in phases: each member
// publishes its buffer and arrives; the members combine (an allreduce: each its own slice of
// the shared buffer) and arrive again; member 0 (the leader) talks to the inner communicator
// and publishes the outcome, and after one more arrival each member takes the result. A
// member writes the shared buffer only between two arrivals that every member must pass
// before anyone reads it, and a member's own buffer changes only after every member has
// finished reading it.
class Group {
 public:
  Group(uint32_t members, std::unique_ptr<Communicator> inner, std::chrono::milliseconds timeout)
      : members_(members), inner_(std::move(inner)), timeout_(timeout), spans_(members), allreduces_(members) {}

  uint32_t members() const { return members_; }
  uint32_t inner_rank() const { return inner_ ? inner_->rank() : 0; }
  uint32_t inner_size() const { return inner_ ? inner_->size() : 1; }
  std::string backend() const { return inner_ ? inner_->backend() + "+local" : "local"; }

  // Every member sums its own slice of the elements over all the members' buffers (in member
  // order: each element gets the same sum whoever computes it), so the sum's cost spreads over
  // the k threads instead of k - 1 waiting on the leader; the leader then runs the inner
  // allreduce, and each member copies the result out.
  // The sum of the members' data: in `data`, or left in the group's buffer when `view`.
  // Returns where it is; valid until the member's next operation.
  template <typename T>
  StatusOr<std::span<const T>> AllreduceSum(uint32_t member, std::span<T> data, bool view) {
    if (members_ == 1) {  // nothing to sum in memory: the inner allreduce on the member's own buffer
      RETURN_IF_ERROR(Failed());
      if (inner_) RETURN_IF_ERROR(inner_->AllreduceSum(data).WithContext("the processes' allreduce"));
      return std::span<const T>(data);
    }
    // Allreduces alternate between two sum buffers: a member still copying out of one (or
    // reading it as its view) lets no other member start the next allreduce but one (it must
    // arrive there first), so the leader may resize the other buffer before its first arrival.
    std::vector<T>& sum = Sums<T>()[allreduces_[member]++ % 2];
    Publish(member, data.data(), data.size());
    if (member == 0) sum.resize(data.size());
    RETURN_IF_ERROR(Arrive(member, "allreduce"));
    // Every member sees the same sizes, so all of them fail or none does; all still arrive
    // again, so nobody publishes the next operation's buffer while another reads the sizes.
    const Status sizes = SameSizes("allreduce");
    const size_t n = sizes.ok() ? data.size() : 0;
    // Slices a multiple of a cache line long: members share at most the line at each boundary.
    constexpr size_t kLine = 64 / sizeof(T);
    const size_t per = (n / members_ + kLine) / kLine * kLine;
    const size_t lo = std::min(n, member * per), hi = std::min(n, lo + per);
    if (lo < hi) {
      std::copy(static_cast<const T*>(spans_[0].first) + lo, static_cast<const T*>(spans_[0].first) + hi,
                sum.begin() + static_cast<std::ptrdiff_t>(lo));
      for (uint32_t m = 1; m < members_; ++m) {
        const T* other = static_cast<const T*>(spans_[m].first);
        for (size_t i = lo; i < hi; ++i) sum[i] += other[i];
      }
    }
    RETURN_IF_ERROR(Arrive(member, "allreduce"));
    RETURN_IF_ERROR(sizes);
    if (inner_) {
      if (member == 0) SetResult(inner_->AllreduceSum(std::span<T>(sum)).WithContext("the processes' allreduce"));
      RETURN_IF_ERROR(Arrive(member, "allreduce"));
      RETURN_IF_ERROR(Result());
    }
    if (view) return std::span<const T>(sum);
    std::copy(sum.begin(), sum.end(), data.begin());
    return std::span<const T>(data);
  }

  Status Broadcast(uint32_t member, std::span<float> data, uint32_t root) {
    Publish(member, data.data(), data.size());
    RETURN_IF_ERROR(Arrive(member, "broadcast"));
    if (member == 0) {
      Status st = SameSizes("broadcast");
      const uint32_t root_process = root / members_, root_member = root % members_;
      if (st.ok() && root_process >= inner_size()) {
        st = Status::InvalidArgument("broadcast from rank " + std::to_string(root) + " of " +
                                     std::to_string(inner_size() * members_));
      }
      if (st.ok()) {
        const float* from = static_cast<const float*>(spans_[root_process == inner_rank() ? root_member : 0].first);
        floats_.assign(from, from + data.size());
        if (inner_) st = inner_->Broadcast(floats_, root_process).WithContext("the processes' broadcast");
      }
      SetResult(st);
    }
    RETURN_IF_ERROR(Arrive(member, "broadcast"));
    RETURN_IF_ERROR(Result());
    std::copy(floats_.begin(), floats_.end(), data.begin());
    return Status::OK();
  }

  void Abort(const Status& why) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (failed_.ok()) failed_ = why.WithContext("a local rank of this process stopped");
    cv_.notify_all();
  }

  Status Barrier(uint32_t member) {
    RETURN_IF_ERROR(Arrive(member, "barrier"));
    if (member == 0) SetResult(inner_ ? inner_->Barrier().WithContext("the processes' barrier") : Status::OK());
    RETURN_IF_ERROR(Arrive(member, "barrier"));
    return Result();
  }

 private:
  void Publish(uint32_t member, const void* data, size_t size) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    spans_[member] = {data, size};
  }

  // Waits until every member has arrived at this phase; TimedOut naming the members that
  // did not (and the group fails for good).
  Status Arrive(uint32_t member, const char* what) EXCLUDES(mu_) {
    UniqueLock lock(mu_);
    RETURN_IF_ERROR(failed_);
    const uint64_t phase = phase_;
    if (++arrived_ == members_) {
      arrived_ = 0;
      ++phase_;
      cv_.notify_all();
      return Status::OK();
    }
    if (!cv_.wait_for(lock.native(), timeout_, [&]() REQUIRES(mu_) { return phase_ != phase || !failed_.ok(); })) {
      failed_ =
          Status::TimedOut("member " + std::to_string(member) + " of this process's " + std::to_string(members_) +
                           " local ranks waited " + std::to_string(timeout_.count()) + " ms for the others to join a " +
                           what + " (fleetps.collective.timeout_ms): a worker thread stopped or fell behind");
      cv_.notify_all();
    }
    return phase_ != phase ? Status::OK() : failed_;
  }

  Status SameSizes(const char* what) const {
    for (uint32_t m = 1; m < members_; ++m) {
      if (spans_[m].second != spans_[0].second) {
        return Status::InvalidArgument(std::string(what) + ": local rank " + std::to_string(m) + " gave " +
                                       std::to_string(spans_[m].second) + " values, local rank 0 " +
                                       std::to_string(spans_[0].second));
      }
    }
    return Status::OK();
  }

  Status Failed() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return failed_;
  }
  void SetResult(Status st) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    result_ = std::move(st);
  }
  Status Result() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return result_;
  }

  template <typename T>
  std::array<std::vector<T>, 2>& Sums();

  const uint32_t members_;
  const std::unique_ptr<Communicator> inner_;
  const std::chrono::milliseconds timeout_;
  Mutex mu_;  // guards the members below up to cv_
  uint32_t arrived_ GUARDED_BY(mu_) = 0;
  uint64_t phase_ GUARDED_BY(mu_) = 0;
  Status failed_ GUARDED_BY(mu_);  // a member timed out, or Abort
  Status result_ GUARDED_BY(mu_);  // the leader's outcome of the current operation
  std::condition_variable cv_;     // waits on mu_: phase_, failed_
  // The members below are handed from member to member by the phases (class comment), not
  // by mu_: spans_ is written under mu_ (Publish), then read without it by every member
  // once all have arrived.
  std::vector<std::pair<const void*, size_t>> spans_;  // per member
  std::vector<float> floats_;                          // a broadcast's result (see above)
  std::array<std::vector<float>, 2> float_sums_;       // allreduce results, alternating
  std::array<std::vector<double>, 2> double_sums_;
  std::vector<uint64_t> allreduces_;  // per member: allreduces it started (its thread's)
};

template <>
std::array<std::vector<float>, 2>& Group::Sums<float>() {
  return float_sums_;
}
template <>
std::array<std::vector<double>, 2>& Group::Sums<double>() {
  return double_sums_;
}

class Member : public Communicator {
 public:
  Member(std::shared_ptr<Group> group, uint32_t member) : group_(std::move(group)), member_(member) {}
  uint32_t rank() const override { return group_->inner_rank() * group_->members() + member_; }
  uint32_t size() const override { return group_->inner_size() * group_->members(); }
  std::string backend() const override { return group_->backend(); }
  Status Broadcast(std::span<float> data, uint32_t root) override { return group_->Broadcast(member_, data, root); }
  Status AllreduceSum(std::span<float> data) override { return group_->AllreduceSum(member_, data, false).status(); }
  Status AllreduceSum(std::span<double> data) override { return group_->AllreduceSum(member_, data, false).status(); }
  StatusOr<std::span<const float>> AllreduceSumView(std::span<float> data) override {
    return group_->AllreduceSum(member_, data, true);
  }
  Status Barrier() override { return group_->Barrier(member_); }
  void Abort(const Status& why) override { group_->Abort(why); }

 private:
  const std::shared_ptr<Group> group_;
  const uint32_t member_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> MakeLocalGroup(uint32_t members, std::unique_ptr<Communicator> inner,
                                                          std::chrono::milliseconds timeout) {
  auto group = std::make_shared<Group>(std::max<uint32_t>(members, 1), std::move(inner), timeout);
  std::vector<std::unique_ptr<Communicator>> out;
  for (uint32_t m = 0; m < group->members(); ++m) out.push_back(std::make_unique<Member>(group, m));
  return out;
}

}  // namespace fleetps::trainer::collective
