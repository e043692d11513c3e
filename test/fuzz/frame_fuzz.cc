// Fuzz target: the frame header decoder and the ErrorReply parser (common/net/frame.h).
//
// Input: a 24-byte frame header followed by an ErrorReply payload (both as a peer would
// send them). Checks, besides the sanitizers:
//  - DecodeFrameHeader accepts only magic "FLPS", version 1, flags 0 and a payload length
//    within the limit, and an accepted header re-encodes (EncodeFrameHeader) to the same
//    24 bytes;
//  - ParseErrorReply never returns OK, and the Status it returns survives a round trip
//    through BuildErrorReply.
#include <cstdint>
#include <cstring>
#include <string>

#include "common/net/frame.h"
#include "test/fuzz/fuzz_util.h"

namespace fleetps::fuzz {
namespace {

void CheckHeader(const uint8_t* in, uint32_t max_payload) {
  wire::FrameHeader h;
  const Status st = net::DecodeFrameHeader(in, max_payload, "fuzz-peer", &h);
  if (!st.ok()) {
    if (!st.IsInvalidArgument()) Fail("DecodeFrameHeader failed with " + st.ToString());
    if (st.message().find("fuzz-peer") == std::string::npos)
      Fail("header error does not name the peer: " + st.ToString());
    return;
  }
  if (h.magic() != net::kFrameMagic || h.version() != net::kProtocolVersion || h.flags() != 0 ||
      h.payload_length() > max_payload) {
    Fail("DecodeFrameHeader accepted a header it must refuse");
  }
  uint8_t again[net::kFrameHeaderSize];
  net::EncodeFrameHeader(h.type(), h.request_id(), h.payload_length(), again);
  if (std::memcmp(again, in, net::kFrameHeaderSize) != 0) Fail("an accepted header does not re-encode to its bytes");
  if (net::MessageTypeName(h.type()).empty()) Fail("MessageTypeName returned an empty name");
}

void CheckErrorReply(const uint8_t* data, size_t size) {
  const Status st = net::ParseErrorReply(data, size, "fuzz-peer");
  if (st.ok()) Fail("ParseErrorReply returned OK");
  if (st.ToString().empty()) Fail("Status::ToString returned nothing");                  // any code, known or not
  if (st.IsCorruption() && st.message().rfind("malformed error reply", 0) == 0) return;  // refused
  // A parsed error: rebuilding and re-parsing it keeps the code and the message.
  const auto rebuilt = net::BuildErrorReply(st);
  const Status again = net::ParseErrorReply(rebuilt.data(), rebuilt.size(), "p");
  if (again.code() != st.code() || again.message() != "p: " + st.message()) {
    Fail("ErrorReply round trip changed " + st.ToString() + " into " + again.ToString());
  }
}

}  // namespace
}  // namespace fleetps::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace fleetps;
  fuzz::MaybeWriteSeeds("frame_fuzz", [](fuzz::SeedWriter& seeds) {
    const uint16_t types[] = {1, 2, 3, 7, 15, 0x7fff, 0x8002, 0, 999};
    const Status errors[] = {Status::InvalidArgument("PullSparse on table 'emb': empty key list"),
                             Status::Busy("in-flight limit"), Status(StatusCode::kNotFound, ""),
                             Status::PermissionDenied("authenticate first")};
    uint64_t id = 1;
    for (uint16_t type : types) {
      for (const Status& err : errors) {
        const auto payload = net::BuildErrorReply(err);
        std::string bytes(net::kFrameHeaderSize, '\0');
        net::EncodeFrameHeader(type, id++, static_cast<uint32_t>(payload.size()),
                               reinterpret_cast<uint8_t*>(bytes.data()));
        bytes.append(reinterpret_cast<const char*>(payload.data()), payload.size());
        seeds.Add(bytes);
      }
    }
    std::string bad(net::kFrameHeaderSize, '\0');
    net::EncodeFrameHeader(2, 7, 1u << 30, reinterpret_cast<uint8_t*>(bad.data()));  // oversize
    seeds.Add(bad);
  });
  fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fleetps;
  if (size >= net::kFrameHeaderSize) {
    fuzz::CheckHeader(data, net::kDefaultMaxPayload);
    fuzz::CheckHeader(data, 1024);
    fuzz::CheckHeader(data, 0);
    fuzz::CheckErrorReply(data + net::kFrameHeaderSize, size - net::kFrameHeaderSize);
  }
  fuzz::CheckErrorReply(data, size);
  return 0;
}
