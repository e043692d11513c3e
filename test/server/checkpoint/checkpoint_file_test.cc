#include "server/checkpoint/checkpoint_file.h"

#include <sys/stat.h>

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

TEST_CASE("Readers open regular files only, and read no more than the size expected", "[checkpoint]") {
  const std::string dir = testing::MakeTempDir("regular");
  const std::string path = dir + "/rows";
  auto writer = SparseRowWriter::Create(path);
  REQUIRE(writer.ok());
  const float payload[2] = {1, 2};
  for (uint64_t k = 0; k < 100; ++k) REQUIRE((*writer)->Add(k, 0, payload, 2).ok());
  auto digest = (*writer)->Finish();
  REQUIRE(digest.ok());

  // Neither open nor read may block or run forever: a FIFO without a writer, a link to
  // /dev/zero, a device, a directory. Each is refused at open, naming the file and its kind.
  REQUIRE(::mkfifo((dir + "/fifo").c_str(), 0644) == 0);
  std::filesystem::create_symlink("/dev/zero", dir + "/zero");
  std::filesystem::create_symlink(path, dir + "/link");  // even to a good file
  const std::vector<std::pair<std::string, std::string>> refused = {{dir + "/fifo", "is a FIFO"},
                                                                    {dir + "/zero", "is a symbolic link"},
                                                                    {dir + "/link", "is a symbolic link"},
                                                                    {"/dev/null", "is a character device"},
                                                                    {dir, "is a directory"}};
  for (const auto& [name, why] : refused) {
    INFO(name);
    for (const Status& st : {BlockFileReader::Open(name, disk::FileKind::SparseRows).status(),
                             DigestFile(name).status(), ReadSmallFile(name).status()}) {
      CHECK(st.IsCorruption());
      CHECK(st.message().find(name + " " + why) != std::string::npos);
    }
  }

  // Another size than the manifest's is refused before a byte is read, naming both sizes.
  const uint64_t size = digest->bytes;
  for (const Status& st : {BlockFileReader::Open(path, disk::FileKind::SparseRows, size + 1).status(),
                           DigestFile(path, size - 1).status()}) {
    CHECK(st.IsCorruption());
    CHECK(st.message().find(path + ": " + std::to_string(size) + " bytes, the manifest says") != std::string::npos);
  }
  // Bytes that arrive after the open are not read: the reader ends where the file ended.
  auto reader = BlockFileReader::Open(path, disk::FileKind::SparseRows, size);
  REQUIRE(reader.ok());
  {
    std::ofstream more(path, std::ios::app | std::ios::binary);
    const std::string junk(4096, 'x');
    more << junk;
  }
  uint64_t rows = 0;
  while (true) {
    auto block = NextSparseBlock(**reader);
    REQUIRE(block.ok());
    if (*block == nullptr) break;
    rows += (*block)->keys()->size();
  }
  CHECK(rows == 100);
  CHECK((*reader)->digest().bytes == size);
  CHECK((*reader)->digest().crc32c == digest->crc32c);
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
