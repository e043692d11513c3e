#include "common/net/io_threads.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "common/check.h"

#include <exception>
#include <latch>

#include <spdlog/spdlog.h>

namespace fleetps::net {

struct IoThreads::Impl {
  explicit Impl(int num_threads) : started(num_threads) {}
  std::latch started;  // counted down by each thread as it starts
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{io.get_executor()};
  std::vector<std::thread> threads;
};

IoThreads::IoThreads(int num_threads) : impl_(std::make_unique<Impl>(num_threads)) {
  FLEETPS_CHECK_GE(num_threads, 1);
  for (int i = 0; i < num_threads; ++i) {
    impl_->threads.emplace_back([this] {
      impl_->started.count_down();
      // A handler that throws leaves run(); log it and keep serving the other handlers.
      while (true) {
        try {
          impl_->io.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("io thread: a handler failed with an exception: {}", e.what());
        } catch (...) {
          spdlog::error("io thread: a handler failed with a non-standard exception");
        }
      }
    });
  }
  impl_->started.wait();  // see ExecutorPool: no thread starts after the constructor
}

IoThreads::~IoThreads() { Stop(); }

boost::asio::io_context& IoThreads::context() { return impl_->io; }

void IoThreads::Stop() {
  impl_->guard.reset();
  impl_->io.stop();
  for (auto& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
  impl_->threads.clear();
}

}  // namespace fleetps::net
