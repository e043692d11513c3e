#pragma once
// Frame encoding/decoding. The header layout is the FlatBuffers struct
// fleetps.wire.FrameHeader (schemas/frame.fbs); WIRE.md describes the protocol.

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "schemas/common_generated.h"
#include "schemas/frame_generated.h"

namespace fleetps::net {

inline constexpr uint32_t kFrameMagic = 0x53504c46;  // "FLPS" in little-endian byte order
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kFrameHeaderSize = sizeof(wire::FrameHeader);
inline constexpr uint16_t kReplyBit = 0x8000;
static_assert(kFrameHeaderSize == 24, "frame header must stay 24 bytes");

// Default maximum payload of one frame; configurable per server and client.
inline constexpr uint32_t kDefaultMaxPayload = 256u << 20;

inline uint16_t ReplyType(wire::MessageType request) { return static_cast<uint16_t>(request) | kReplyBit; }

// Writes the header for a frame to out[0..kFrameHeaderSize).
void EncodeFrameHeader(uint16_t type, uint64_t request_id, uint32_t payload_length, uint8_t* out);

// Parses and validates a header: magic, version, flags and payload_length <=
// max_payload. `peer` is used in error messages. Never reads past kFrameHeaderSize.
Status DecodeFrameHeader(const uint8_t* in, uint32_t max_payload, const std::string& peer, wire::FrameHeader* out);

// Human name of a message type ("PullSparse", "PullSparse reply", "type 77").
std::string MessageTypeName(uint16_t type);

}  // namespace fleetps::net

#include <flatbuffers/flatbuffers.h>

namespace fleetps::net {

// ErrorReplyMsg payload (schemas/common.fbs) for a non-OK status.
flatbuffers::DetachedBuffer BuildErrorReply(const Status& status);
// Decodes an ErrorReply payload into the Status it carries (verifying it first);
// `peer` prefixes the message so the caller sees which server failed.
Status ParseErrorReply(const uint8_t* data, size_t size, const std::string& peer);

}  // namespace fleetps::net
