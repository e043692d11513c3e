#pragma once
// FrameQueue: frames waiting to be written on one connection, sent in gathered batches
// (one async_write for everything queued so far). Internal to common/net; used on the
// connection's strand only, so not thread-safe.
//
// A payload is either owned by the queue (a reply: DetachedBuffer moved in) or shared
// with its sender (a client request kept for a possible re-send after a reconnect); a
// shared payload must not change while it is queued.

#include <deque>
#include <memory>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <flatbuffers/flatbuffers.h>

#include "common/net/frame.h"

namespace fleetps::net {

class FrameQueue {
 public:
  void Push(uint16_t type, uint64_t request_id, flatbuffers::DetachedBuffer payload) {
    Frame& f = NewFrame(type, request_id, payload.size());
    f.owned = std::move(payload);
    f.data = f.owned.data();
  }
  void Push(uint16_t type, uint64_t request_id, std::shared_ptr<const flatbuffers::DetachedBuffer> payload) {
    Frame& f = NewFrame(type, request_id, payload->size());
    f.data = payload->data();
    f.shared = std::move(payload);
  }
  bool empty() const { return frames_.empty(); }
  bool writing() const { return batch_ > 0; }

  // Buffers of every frame queued now; they stay valid until FinishBatch().
  const std::vector<boost::asio::const_buffer>& StartBatch() {
    batch_ = frames_.size();
    buffers_.clear();
    for (size_t i = 0; i < batch_; ++i) {
      buffers_.emplace_back(frames_[i].header, kFrameHeaderSize);
      if (frames_[i].size > 0) buffers_.emplace_back(frames_[i].data, frames_[i].size);
    }
    return buffers_;
  }
  // The frames of the batch under way (after StartBatch): how many, and their request ids.
  size_t batch_size() const { return batch_; }
  uint64_t batch_request_id(size_t i) const { return frames_[i].request_id; }
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
    uint64_t request_id = 0;
    flatbuffers::DetachedBuffer owned;
    std::shared_ptr<const flatbuffers::DetachedBuffer> shared;
    const uint8_t* data = nullptr;  // the payload, in `owned` or `shared`
    size_t size = 0;
  };
  Frame& NewFrame(uint16_t type, uint64_t request_id, size_t size) {
    Frame& f = frames_.emplace_back();
    EncodeFrameHeader(type, request_id, static_cast<uint32_t>(size), f.header);
    f.request_id = request_id;
    f.size = size;
    return f;
  }

  std::deque<Frame> frames_;
  std::vector<boost::asio::const_buffer> buffers_;
  size_t batch_ = 0;  // frames in the write under way; 0 when idle
};

}  // namespace fleetps::net
