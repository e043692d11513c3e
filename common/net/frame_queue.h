#pragma once
// FrameQueue: frames waiting to be written on one connection, sent in gathered batches
// (one async_write for everything queued so far). Internal to common/net; used on the
// connection's strand only, so not thread-safe.

#include <deque>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <flatbuffers/flatbuffers.h>

#include "common/net/frame.h"

namespace fleetps::net {

class FrameQueue {
 public:
  void Push(uint16_t type, uint64_t request_id, flatbuffers::DetachedBuffer payload) {
    Frame f;
    EncodeFrameHeader(type, request_id, static_cast<uint32_t>(payload.size()), f.header);
    f.payload = std::move(payload);
    frames_.push_back(std::move(f));
  }
  bool empty() const { return frames_.empty(); }
  bool writing() const { return batch_ > 0; }

  // Buffers of every frame queued now; they stay valid until FinishBatch().
  const std::vector<boost::asio::const_buffer>& StartBatch() {
    batch_ = frames_.size();
    buffers_.clear();
    for (size_t i = 0; i < batch_; ++i) {
      buffers_.emplace_back(frames_[i].header, kFrameHeaderSize);
      if (frames_[i].payload.size() > 0) buffers_.emplace_back(frames_[i].payload.data(), frames_[i].payload.size());
    }
    return buffers_;
  }
  // Drops the frames of the batch that was written.
  void FinishBatch() {
    frames_.erase(frames_.begin(), frames_.begin() + static_cast<std::ptrdiff_t>(batch_));
    batch_ = 0;
  }
  // Drops the frames not yet being written (the batch in flight stays alive until its
  // write completes, since the socket may still read its buffers).
  void Clear() { frames_.erase(frames_.begin() + static_cast<std::ptrdiff_t>(batch_), frames_.end()); }

 private:
  struct Frame {
    uint8_t header[kFrameHeaderSize];
    flatbuffers::DetachedBuffer payload;
  };
  std::deque<Frame> frames_;
  std::vector<boost::asio::const_buffer> buffers_;
  size_t batch_ = 0;  // frames in the write under way; 0 when idle
};

}  // namespace fleetps::net
