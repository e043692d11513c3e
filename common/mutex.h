#pragma once
// Mutex, MutexLock, UniqueLock: std::mutex and its locks, annotated for clang's
// thread-safety analysis (common/thread_annotations.h).
//
// libstdc++'s std::mutex, std::lock_guard and std::unique_lock carry no capability
// attributes, so the analysis cannot see what they hold. These wrappers add nothing else:
// the same std::mutex underneath, locked and unlocked at the same points.
//
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;
//   std::condition_variable cv_;
//
//   { MutexLock lock(mu_); ++count_; }            // like std::lock_guard
//   UniqueLock lock(mu_);                          // like std::unique_lock, for waiting
//   cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return count_ > 0; });
//
// A condition variable's wait releases the mutex and takes it again before it returns,
// so to the analysis the mutex stays held across it; a predicate runs with it held
// (REQUIRES on the lambda says so).
// Thread-safety: a Mutex is shared by the threads it serialises; a lock object belongs to
// the thread that made it.

#include <mutex>

#include "common/thread_annotations.h"

namespace fleetps {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // The std::mutex underneath, for UniqueLock; locking it directly bypasses the analysis.
  std::mutex& native_handle() { return mu_; }

 private:
  std::mutex mu_;
};

// Holds `mu` for its lifetime, like std::lock_guard.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Holds `mu` for its lifetime as a std::unique_lock, which std::condition_variable waits on
// (native()). Calling unlock() on native() is not allowed: the analysis would still count
// the mutex as held.
class SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.native_handle()) {}
  ~UniqueLock() RELEASE() {}
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;

  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace fleetps
