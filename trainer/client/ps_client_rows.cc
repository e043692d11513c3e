#include "trainer/client/ps_client.h"

// PsClient's GPU-PS pass calls: PullRows and WriteRows (full rows of a pass's keys).

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>

#include "common/sharding.h"
#include "schemas/ps_generated.h"
#include "trainer/client/fan_out.h"

namespace fleetps::trainer {

using wire::MessageType;

std::future<Status> PsClient::PullRows(uint32_t table_id, std::span<const uint64_t> keys, uint32_t row_floats,
                                       const RowsOut& out) {
  auto info = Table(table_id);
  if (!info.ok()) return CallJoin::Ready(info.status());
  if (info->dense) return CallJoin::Ready(Status::InvalidArgument("PullRows on dense table '" + info->name + "'"));
  if (keys.empty()) return CallJoin::Ready(Status::OK());
  if (row_floats < info->dim) {
    return CallJoin::Ready(Status::InvalidArgument("PullRows on table '" + info->name + "': row_floats " +
                                                   std::to_string(row_floats) + " is below the dim " +
                                                   std::to_string(info->dim)));
  }
  const size_t chunk =
      std::max<size_t>(1, std::min<size_t>(options_.max_keys_per_request,
                                           (options_.rpc.max_payload - 4096) / (size_t{row_floats} * 4 + 8 + 1 + 8)));
  return FanOut<wire::PullRowsReply>(
      clients_, static_cast<uint16_t>(MessageType::PullRows), keys, chunk,
      [&](uint32_t, std::span<const uint32_t> members) {
        flatbuffers::FlatBufferBuilder fbb(members.size() * 8 + 128);
        uint64_t* kout = nullptr;
        auto kvec = fbb.CreateUninitializedVector(members.size(), &kout);
        for (size_t k = 0; k < members.size(); ++k) kout[k] = keys[members[k]];
        fbb.Finish(wire::CreatePullRowsRequest(fbb, table_id, kvec));
        return fbb.Release();
      },
      [out, row_floats](const std::string& server, std::span<const uint32_t> members, const wire::PullRowsReply& msg) {
        const size_t n = members.size();
        const size_t rows = msg.rows() ? msg.rows()->size() : 0;
        const size_t flags = msg.flags() ? msg.flags()->size() : 0;
        const size_t stats = msg.stats() ? msg.stats()->size() : 0;
        if (msg.row_floats() != row_floats) {
          return Status::InvalidArgument("PullRows: " + server + " has rows of " + std::to_string(msg.row_floats()) +
                                         " floats, this trainer's table " + std::to_string(row_floats) +
                                         " (do the trainer and the pservers use the same optimizer and accessor?)");
        }
        if (rows != n * row_floats || flags != n || (stats != 0 && stats != n * 2)) {
          return Status::Corruption("PullRows reply from " + server + " has " + std::to_string(rows) + " row floats, " +
                                    std::to_string(flags) + " flags and " + std::to_string(stats) + " stats for " +
                                    std::to_string(n) + " keys");
        }
        const float* src = msg.rows()->data();
        for (size_t k = 0; k < n; ++k) {
          const size_t i = members[k];
          std::memcpy(out.rows + i * row_floats, src + k * row_floats, row_floats * sizeof(float));
          out.flags[i] = msg.flags()->Get(static_cast<flatbuffers::uoffset_t>(k));
          if (out.stats != nullptr) {
            out.stats[i * 2] = stats != 0 ? msg.stats()->Get(static_cast<flatbuffers::uoffset_t>(k * 2)) : 0;
            out.stats[i * 2 + 1] = stats != 0 ? msg.stats()->Get(static_cast<flatbuffers::uoffset_t>(k * 2 + 1)) : 0;
          }
        }
        return Status::OK();
      });
}

std::future<Status> PsClient::WriteRows(uint32_t table_id, std::span<const uint64_t> keys, uint32_t row_floats,
                                        const RowsIn& in, RowsWritten* written) {
  auto info = Table(table_id);
  if (!info.ok()) return CallJoin::Ready(info.status());
  if (info->dense) return CallJoin::Ready(Status::InvalidArgument("WriteRows on dense table '" + info->name + "'"));
  if (written != nullptr) *written = RowsWritten{};
  if (keys.empty()) return CallJoin::Ready(Status::OK());
  const size_t want = keys.size() * row_floats;
  if (in.begin.size() != want || in.end.size() != want || (!in.extended.empty() && in.extended.size() != keys.size()) ||
      (!in.shows.empty() && in.shows.size() != keys.size()) ||
      (!in.clicks.empty() && in.clicks.size() != keys.size())) {
    return CallJoin::Ready(Status::InvalidArgument(
        "WriteRows on table '" + info->name + "': " + std::to_string(keys.size()) + " keys need " +
        std::to_string(want) + " floats in begin and end and empty or one-per-key extended/shows/clicks"));
  }
  const size_t per_key = size_t{row_floats} * 8 + 8 + 1 + 8;
  const size_t chunk =
      std::max<size_t>(1, std::min<size_t>(options_.max_keys_per_request, (options_.rpc.max_payload - 4096) / per_key));
  // The servers' counts, summed as their replies arrive; `written` gets them once every reply
  // is in, a failed call's included.
  struct Counts {
    std::atomic<uint64_t> written{0}, merged{0};
  };
  auto counts = std::make_shared<Counts>();
  std::function<void(const Status&)> report;
  if (written != nullptr) {
    report = [counts, written](const Status&) {
      written->written = counts->written;
      written->merged = counts->merged;
    };
  }
  return FanOut<wire::WriteRowsReply>(
      clients_, static_cast<uint16_t>(MessageType::WriteRows), keys, chunk,
      [&](uint32_t, std::span<const uint32_t> members) {
        const size_t n = members.size();
        flatbuffers::FlatBufferBuilder fbb(n * per_key + 256);
        uint64_t* kout = nullptr;
        float* bout = nullptr;
        float* eout = nullptr;
        auto kvec = fbb.CreateUninitializedVector(n, &kout);
        auto bvec = fbb.CreateUninitializedVector(n * row_floats, &bout);
        auto evec = fbb.CreateUninitializedVector(n * row_floats, &eout);
        flatbuffers::Offset<flatbuffers::Vector<uint8_t>> xvec;
        flatbuffers::Offset<flatbuffers::Vector<float>> svec, cvec;
        uint8_t* xout = nullptr;
        float* sout = nullptr;
        float* cout = nullptr;
        if (!in.extended.empty()) xvec = fbb.CreateUninitializedVector(n, &xout);
        if (!in.shows.empty()) svec = fbb.CreateUninitializedVector(n, &sout);
        if (!in.clicks.empty()) cvec = fbb.CreateUninitializedVector(n, &cout);
        for (size_t k = 0; k < n; ++k) {
          const size_t i = members[k];
          kout[k] = keys[i];
          std::memcpy(bout + k * row_floats, in.begin.data() + i * row_floats, row_floats * sizeof(float));
          std::memcpy(eout + k * row_floats, in.end.data() + i * row_floats, row_floats * sizeof(float));
          if (xout != nullptr) xout[k] = in.extended[i];
          if (sout != nullptr) sout[k] = in.shows[i];
          if (cout != nullptr) cout[k] = in.clicks[i];
        }
        fbb.Finish(wire::CreateWriteRowsRequest(fbb, table_id, kvec, bvec, evec, xvec, svec, cvec, in.average));
        return fbb.Release();
      },
      [counts](const std::string&, std::span<const uint32_t>, const wire::WriteRowsReply& msg) {
        counts->written += msg.written();
        counts->merged += msg.merged();
        return Status::OK();
      },
      std::move(report));
}

}  // namespace fleetps::trainer
