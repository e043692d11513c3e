#include "server/checkpoint/checkpoint_file.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "server/checkpoint/crc32c.h"
#include "server/checkpoint/row_file.h"
#include "test/support/process.h"

namespace fleetps::server {
namespace {

void FlipByte(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST_CASE("Crc32c: known vectors, and extending equals one pass", "[checkpoint]") {
  CHECK(Crc32c("123456789", 9) == 0xE3069283u);
  CHECK(Crc32c("", 0) == 0u);
  std::vector<uint8_t> zeros(32, 0);
  CHECK(Crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);  // RFC 3720 B.4
  std::string text(1000, 'x');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 31 + 7);
  for (size_t cut : {0u, 1u, 7u, 8u, 9u, 500u, 999u}) {
    CHECK(Crc32cExtend(Crc32c(text.data(), cut), text.data() + cut, text.size() - cut) ==
          Crc32c(text.data(), text.size()));
  }
}

TEST_CASE("Sparse row files round-trip; a flipped byte or a cut file is refused", "[checkpoint]") {
  const std::string dir = testing::MakeTempDir("rowfile");
  const std::string path = dir + "/rows";
  auto writer = SparseRowWriter::Create(path);
  REQUIRE(writer.ok());
  const size_t rows = SparseRowWriter::kRowsPerBlock + 10;  // two blocks
  for (uint64_t k = 0; k < rows; ++k) {
    const float payload[3] = {static_cast<float>(k), 0.5f, -1.0f};
    REQUIRE((*writer)->Add(k * 3, static_cast<uint8_t>(k % 4), payload, 1 + k % 3).ok());
  }
  auto digest = (*writer)->Finish();
  REQUIRE(digest.ok());
  auto whole = DigestFile(path);
  REQUIRE(whole.ok());
  CHECK(whole->bytes == digest->bytes);
  CHECK(whole->crc32c == digest->crc32c);

  auto read_all = [&](uint64_t* count) -> Status {
    ASSIGN_OR_RETURN(auto reader, BlockFileReader::Open(path, disk::FileKind::SparseRows));
    *count = 0;
    while (true) {
      ASSIGN_OR_RETURN(const disk::SparseRowBlock* block, NextSparseBlock(*reader));
      if (block == nullptr) break;
      size_t offset = 0;
      for (size_t i = 0; i < block->keys()->size(); ++i) {
        const uint64_t k = *count;
        CHECK(block->keys()->Get(i) == k * 3);
        CHECK(block->flags()->Get(i) == k % 4);
        CHECK(block->values()->Get(offset) == static_cast<float>(k));
        offset += 1 + k % 3;
        ++*count;
      }
      CHECK(offset == block->values()->size());
    }
    return Status::OK();
  };
  uint64_t count = 0;
  REQUIRE(read_all(&count).ok());
  CHECK(count == rows);

  // The wrong kind, a flipped payload byte, a cut file: all Corruption.
  CHECK(BlockFileReader::Open(path, disk::FileKind::DenseSlice).status().IsCorruption());
  FlipByte(path, 100);
  Status flipped = read_all(&count);
  CHECK(flipped.IsCorruption());
  CHECK(flipped.message().find("checksum mismatch") != std::string::npos);
  FlipByte(path, 100);  // back
  REQUIRE(read_all(&count).ok());
  std::filesystem::resize_file(path, digest->bytes - 5);
  Status cut = read_all(&count);
  CHECK(cut.IsCorruption());
  // The cut block's header claims more bytes than the file still holds: refused before
  // reading (or allocating) them.
  CHECK(cut.message().find("but only") != std::string::npos);
  FlipByte(path, 0);  // the magic
  CHECK(BlockFileReader::Open(path, disk::FileKind::SparseRows).status().IsCorruption());
}

TEST_CASE("Atomic small files replace the old content whole", "[checkpoint]") {
  const std::string dir = testing::MakeTempDir("atomic");
  REQUIRE(WriteSmallFileAtomic(dir + "/CURRENT", "v1\n").ok());
  REQUIRE(WriteSmallFileAtomic(dir + "/CURRENT", "v2\n").ok());
  auto text = ReadSmallFile(dir + "/CURRENT");
  REQUIRE(text.ok());
  CHECK(*text == "v2\n");
  CHECK_FALSE(PathExists(dir + "/CURRENT.tmp"));
}

}  // namespace
}  // namespace fleetps::server
