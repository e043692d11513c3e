#include "common/net/io_threads.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "common/check.h"

namespace fleetps::net {

struct IoThreads::Impl {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{io.get_executor()};
  std::vector<std::thread> threads;
};

IoThreads::IoThreads(int num_threads) : impl_(std::make_unique<Impl>()) {
  FLEETPS_CHECK_GE(num_threads, 1);
  for (int i = 0; i < num_threads; ++i) impl_->threads.emplace_back([this] { impl_->io.run(); });
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
