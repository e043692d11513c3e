#include "common/net/frame.h"

#include <catch2/catch.hpp>
#include <cstring>

namespace fleetps::net {
namespace {

TEST_CASE("Frame header round-trips with a pinned little-endian layout") {
  uint8_t buf[kFrameHeaderSize];
  EncodeFrameHeader(0x8002, 0x0102030405060708ULL, 1234, buf);
  // Layout pinned by schemas/frame.fbs and WIRE.md.
  const uint8_t expected[kFrameHeaderSize] = {'F', 'L', 'P', 'S', 1,    0,    0x02, 0x80, 8, 7, 6, 5,
                                              4,   3,   2,   1,   0xd2, 0x04, 0,    0,    0, 0, 0, 0};
  CHECK(std::memcmp(buf, expected, kFrameHeaderSize) == 0);
  wire::FrameHeader h;
  REQUIRE(DecodeFrameHeader(buf, 4096, "peer", &h).ok());
  CHECK(h.type() == 0x8002);
  CHECK(h.request_id() == 0x0102030405060708ULL);
  CHECK(h.payload_length() == 1234);
}

TEST_CASE("Bad headers are refused with a message naming the peer") {
  uint8_t buf[kFrameHeaderSize];
  wire::FrameHeader h;

  EncodeFrameHeader(2, 1, 10, buf);
  buf[0] = 'G';
  Status st = DecodeFrameHeader(buf, 4096, "10.1.2.3:999", &h);
  CHECK(st.IsInvalidArgument());
  CHECK(st.message().find("magic") != std::string::npos);
  CHECK(st.message().find("10.1.2.3:999") != std::string::npos);

  EncodeFrameHeader(2, 1, 10, buf);
  buf[4] = 9;  // version 9
  st = DecodeFrameHeader(buf, 4096, "p", &h);
  CHECK(st.message().find("version 9") != std::string::npos);

  EncodeFrameHeader(2, 1, 5000, buf);
  st = DecodeFrameHeader(buf, 4096, "p", &h);
  CHECK(st.message().find("5000") != std::string::npos);
  CHECK(st.message().find("4096") != std::string::npos);

  EncodeFrameHeader(2, 1, 10, buf);
  buf[20] = 1;  // reserved flags
  CHECK_FALSE(DecodeFrameHeader(buf, 4096, "p", &h).ok());
}

TEST_CASE("Error replies carry code and message") {
  auto buf = BuildErrorReply(Status::NotFound("no table 9"));
  Status st = ParseErrorReply(buf.data(), buf.size(), "server s:1");
  CHECK(st.IsNotFound());
  CHECK(st.message() == "server s:1: no table 9");
  uint8_t junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(ParseErrorReply(junk, sizeof(junk), "p").IsCorruption());
}

TEST_CASE("Message type names") {
  CHECK(MessageTypeName(static_cast<uint16_t>(wire::MessageType::PullSparse)) == "PullSparse");
  CHECK(MessageTypeName(ReplyType(wire::MessageType::Ping)) == "Ping reply");
  CHECK(MessageTypeName(777) == "type 777");
}

}  // namespace
}  // namespace fleetps::net
