#include "common/net/frame.h"

#include <cstring>
#include <type_traits>

namespace fleetps::net {

namespace {

// An error reply carries a StatusCode as the schema's ubyte (schemas/common.fbs), converted
// by a cast each way, so the two enums must be one list. SchemaStatusCode names the schema's
// enumerator of each of ours (no default: -Wswitch names a code of ours it lacks); the
// static_asserts below check that each has our value and that the lists are equally long.
constexpr wire::StatusCode SchemaStatusCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return wire::StatusCode::Ok;
    case StatusCode::kInvalidArgument: return wire::StatusCode::InvalidArgument;
    case StatusCode::kNotFound: return wire::StatusCode::NotFound;
    case StatusCode::kCorruption: return wire::StatusCode::Corruption;
    case StatusCode::kIOError: return wire::StatusCode::IOError;
    case StatusCode::kTimedOut: return wire::StatusCode::TimedOut;
    case StatusCode::kBusy: return wire::StatusCode::Busy;
    case StatusCode::kUnavailable: return wire::StatusCode::Unavailable;
    case StatusCode::kInternal: return wire::StatusCode::Internal;
    case StatusCode::kAborted: return wire::StatusCode::Aborted;
    case StatusCode::kPermissionDenied: return wire::StatusCode::PermissionDenied;
  }
  return wire::StatusCode::MAX;  // not reached for a code of ours
}

// True when every code of ours, 0 .. kStatusCodeCount - 1, maps to the schema's of that value.
constexpr bool StatusCodesMatchSchema() {
  for (size_t i = 0; i < kStatusCodeCount; ++i) {
    if (static_cast<size_t>(SchemaStatusCode(static_cast<StatusCode>(i))) != i) return false;
  }
  return true;
}

static_assert(std::is_same_v<std::underlying_type_t<StatusCode>, std::underlying_type_t<wire::StatusCode>>,
              "StatusCode and the schema's StatusCode have different underlying types");
static_assert(StatusCodesMatchSchema(),
              "a StatusCode (common/status.h) has a different value than the schema's (schemas/common.fbs)");
static_assert(static_cast<size_t>(StatusCode::kPermissionDenied) + 1 == kStatusCodeCount,
              "kStatusCodeCount (common/status.h) is not the last code's value plus one");
static_assert(std::extent_v<std::remove_reference_t<decltype(wire::EnumValuesStatusCode())>> == kStatusCodeCount &&
                  static_cast<size_t>(wire::StatusCode::MAX) + 1 == kStatusCodeCount,
              "schemas/common.fbs has a different number of status codes than common/status.h");

}  // namespace

void EncodeFrameHeader(uint16_t type, uint64_t request_id, uint32_t payload_length, uint8_t* out) {
  const wire::FrameHeader h(kFrameMagic, kProtocolVersion, type, request_id, payload_length, 0);
  std::memcpy(out, &h, kFrameHeaderSize);
}

Status DecodeFrameHeader(const uint8_t* in, uint32_t max_payload, const std::string& peer, wire::FrameHeader* out) {
  std::memcpy(static_cast<void*>(out), in, kFrameHeaderSize);
  if (out->magic() != kFrameMagic) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "0x%08x", out->magic());
    return Status::InvalidArgument("bad frame magic " + std::string(buf) + " from " + peer +
                                   " (expected 0x53504c46 \"FLPS\"; is the peer a fleetps client?)");
  }
  if (out->version() != kProtocolVersion) {
    return Status::InvalidArgument("unsupported protocol version " + std::to_string(out->version()) + " from " + peer +
                                   " (this build speaks version " + std::to_string(kProtocolVersion) +
                                   "; run the same fleetps release on both ends)");
  }
  if (out->flags() != 0) {
    return Status::InvalidArgument("frame from " + peer + " has reserved flags set (" + std::to_string(out->flags()) +
                                   ")");
  }
  if (out->payload_length() > max_payload) {
    return Status::InvalidArgument("frame from " + peer + " announces a payload of " +
                                   std::to_string(out->payload_length()) + " bytes, above the limit of " +
                                   std::to_string(max_payload) +
                                   " (split the batch, or raise max_message_bytes on both ends)");
  }
  return Status::OK();
}

std::string MessageTypeName(uint16_t type) {
  const bool reply = (type & kReplyBit) != 0;
  const auto base = static_cast<wire::MessageType>(type & ~kReplyBit);
  const char* name = nullptr;
  if (base >= wire::MessageType::MIN && base <= wire::MessageType::MAX) name = wire::EnumNameMessageType(base);
  std::string out = (name != nullptr && *name != '\0') ? name : "type " + std::to_string(type & ~kReplyBit);
  return reply ? out + " reply" : out;
}

}  // namespace fleetps::net

namespace fleetps::net {

flatbuffers::DetachedBuffer BuildErrorReply(const Status& status) {
  flatbuffers::FlatBufferBuilder fbb(128 + status.message().size());
  auto msg = fbb.CreateString(status.message());
  fbb.Finish(wire::CreateErrorReplyMsg(fbb, static_cast<wire::StatusCode>(status.code()), msg));
  return fbb.Release();
}

Status ParseErrorReply(const uint8_t* data, size_t size, const std::string& peer) {
  flatbuffers::Verifier verifier(data, size);
  if (!verifier.VerifyBuffer<wire::ErrorReplyMsg>(nullptr)) {
    return Status::Corruption("malformed error reply from " + peer);
  }
  const auto* msg = flatbuffers::GetRoot<wire::ErrorReplyMsg>(data);
  auto code = static_cast<StatusCode>(msg->code());
  if (code == StatusCode::kOk) code = StatusCode::kInternal;  // an error reply always fails
  return Status(code, peer + ": " + (msg->message() ? msg->message()->str() : std::string("(no message)")));
}

}  // namespace fleetps::net
