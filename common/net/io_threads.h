#pragma once
// A Boost.Asio io_context run by a fixed number of threads. Owned by the composition
// root (a server App or a client) and passed by reference to what runs on it.

#include <memory>
#include <thread>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace fleetps::net {

class IoThreads {
 public:
  // Returns once every thread is running (see ExecutorPool).
  explicit IoThreads(int num_threads);
  ~IoThreads();  // Stop()s
  IoThreads(const IoThreads&) = delete;
  IoThreads& operator=(const IoThreads&) = delete;

  boost::asio::io_context& context();
  // Stops the context and joins the threads. Idempotent; must not be called from one
  // of the io threads.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fleetps::net
