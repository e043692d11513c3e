// CheckpointRunner: corrupt, mismatched and crafted checkpoints are refused with an error
// naming the file, change nothing, and neither block nor over-reserve.
#include "test/server/service/checkpoint_runner_test_util.h"

namespace fleetps::server {
namespace {

using namespace checkpoint_testing;  // NOLINT: the fixtures of these cases

TEST_CASE("Corrupt or mismatched checkpoints are refused and change nothing", "[checkpoint]") {
  auto source = Cluster(1);
  Train(source, 2, 6);
  const std::string dir = testing::MakeTempDir("corrupt");
  SaveAll(source, dir, disk::SaveMode::Checkpoint, "v1");
  auto checkpoint = Checkpoint::Open(dir);
  REQUIRE(checkpoint.ok());
  const std::string victim = checkpoint->FilePath(*checkpoint->table(kSparse)->files()->Get(2));

  auto target = Cluster(1);
  Train(target, 1, 60);
  const RowMap before = target[0]->Rows(kSparse);
  {  // one flipped byte in one shard file
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  auto refused = target[0]->Load(dir);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().IsCorruption());
  CHECK(refused.status().message().find(victim) != std::string::npos);
  CHECK(refused.status().message().find("nothing changed") != std::string::npos);
  CHECK(target[0]->Rows(kSparse) == before);

  // A manifest with a flipped byte.
  const std::string manifest = checkpoint->version_dir() + "/MANIFEST";
  {
    std::fstream f(manifest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(40);
    char c = 0;
    f.get(c);
    f.seekp(40);
    f.put(static_cast<char>(c ^ 1));
  }
  CHECK(Checkpoint::Open(dir).status().IsCorruption());
  CHECK(target[0]->Load(dir).status().IsCorruption());

  // A server whose table has another dim.
  auto fresh = Cluster(1);
  const std::string good = testing::MakeTempDir("good");
  SaveAll(source, good, disk::SaveMode::Checkpoint, "v1");
  Layout wide;
  wide.sparse_dim = 8;
  auto other = Cluster(1, wide);
  auto mismatch = other[0]->Load(good);
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.status().IsInvalidArgument());
  CHECK(mismatch.status().message().find("dim 6") != std::string::npos);
  // No checkpoint at all.
  CHECK(fresh[0]->Load(testing::MakeTempDir("empty")).status().IsNotFound());
}

// A data file's manifest entry, as plain values (for crafting manifests).
struct FileRecord {
  std::string path;
  uint32_t server = 0, shard = 0, crc32c = 0;
  uint64_t rows = 0, bytes = 0, slice_begin = 0, slice_end = 0;
};

// Rewrites the committed manifest of `dir` after edit(table id, its files); the row sums are
// made to follow the files, so the manifest passes every check but the one under test.
void EditManifest(const std::string& dir, const std::function<void(uint32_t, std::vector<FileRecord>&)>& edit) {
  auto c = Checkpoint::Open(dir);
  REQUIRE(c.ok());
  const auto& m = c->manifest();
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<disk::TableEntry>> tables;
  uint64_t total = 0;
  for (const auto* t : *m.tables()) {
    std::vector<FileRecord> files;
    for (const auto* f : *t->files()) {
      files.push_back({f->path()->str(), f->server(), f->shard(), f->crc32c(), f->rows(), f->bytes(), f->slice_begin(),
                       f->slice_end()});
    }
    edit(t->id(), files);
    std::vector<flatbuffers::Offset<disk::FileEntry>> entries;
    uint64_t rows = 0;
    for (const FileRecord& f : files) {
      entries.push_back(disk::CreateFileEntry(fbb, fbb.CreateString(f.path), f.server, f.shard, f.rows, f.bytes,
                                              f.crc32c, f.slice_begin, f.slice_end));
      rows += f.rows;
    }
    if (!t->dense()) total += rows;
    const auto name = fbb.CreateString(t->name()->str());
    const auto list = fbb.CreateVector(entries);
    tables.push_back(disk::CreateTableEntry(fbb, t->id(), name, t->dense(), t->dim(), t->shards(), t->optimizer(),
                                            t->shared_state_floats(), t->element_state_floats(), t->accessor(), rows,
                                            list));
  }
  const auto version = fbb.CreateString(m.version()->str());
  const auto fleetps_version = fbb.CreateString(m.fleetps_version()->str());
  const auto list = fbb.CreateVector(tables);
  fbb.Finish(disk::CreateCheckpointManifest(fbb, m.format_version(), version, m.mode(), m.content(), m.num_servers(),
                                            m.created_unix_ms(), fleetps_version, list, total));
  REQUIRE(
      WriteFlatBufferFileAtomic(c->version_dir() + "/" + kManifestFile, disk::FileKind::Manifest, fbb.Release()).ok());
}

// server.Load(dir), failing the test instead of hanging it when the load blocks (a crafted
// file that never ends): past `bound` the test process exits with an error, as the blocked
// thread cannot be stopped.
StatusOr<LoadOutcome> LoadWithin(Server& server, const std::string& dir, std::chrono::seconds bound) {
  auto promise = std::make_shared<std::promise<StatusOr<LoadOutcome>>>();
  auto result = promise->get_future();
  std::thread([&server, dir, promise] { promise->set_value(server.Load(dir)); }).detach();
  if (result.wait_for(bound) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: the load of %s did not return within %d s: it blocks on a crafted file\n",
                 dir.c_str(), static_cast<int>(bound.count()));
    std::_Exit(1);
  }
  return result.get();
}

uint64_t MemoryBytes(Server& server, uint32_t table_id) {
  SparseTable* t = server.tables().sparse(table_id);
  uint64_t bytes = 0;
  for (uint32_t s = 0; s < t->num_shards(); ++s) bytes += t->Stats(s).memory_bytes;
  return bytes;
}

TEST_CASE("Crafted checkpoints are refused, with an error naming the file, without blocking or over-reserving",
          "[checkpoint]") {
  auto source = Cluster(1);
  Train(source, 1, 9);
  const std::string dir = testing::MakeTempDir("crafted");
  SaveAll(source, dir, disk::SaveMode::Checkpoint, "v1");
  const std::string honest_dir = testing::MakeTempDir("honest");
  SaveAll(source, honest_dir, disk::SaveMode::Checkpoint, "v1");
  auto checkpoint = Checkpoint::Open(dir);
  REQUIRE(checkpoint.ok());
  const std::string version_dir = checkpoint->version_dir();
  const std::string rel = checkpoint->table(kSparse)->files()->Get(0)->path()->str();
  const std::string victim = version_dir + "/" + rel;
  auto target = Cluster(1);
  Train(target, 1, 90);
  const RowMap before = target[0]->Rows(kSparse);
  const uint64_t memory_before = MemoryBytes(*target[0], kSparse);
  constexpr auto kBound = std::chrono::seconds(120);  // for "it returns", not for speed
  // A refusal before any row changed, naming `what`.
  auto refused = [&](const std::string& what) {
    auto loaded = LoadWithin(*target[0], dir, kBound);
    REQUIRE_FALSE(loaded.ok());
    INFO(loaded.status().ToString());
    CHECK(loaded.status().IsCorruption());
    CHECK(loaded.status().message().find(what) != std::string::npos);
    CHECK(loaded.status().message().find("nothing changed") != std::string::npos);
    CHECK(target[0]->Rows(kSparse) == before);
    CHECK(MemoryBytes(*target[0], kSparse) == memory_before);
  };

  SECTION("the same file listed 512 times") {
    EditManifest(dir, [&](uint32_t id, std::vector<FileRecord>& files) {
      if (id == kSparse) files.insert(files.end(), 511, files[0]);
    });
    refused(rel + " more than once");
    CHECK(Checkpoint::Open(dir).status().message().find(rel + " more than once") != std::string::npos);
  }
  SECTION("the same file under a second name (a hard link)") {
    REQUIRE(::link(victim.c_str(), (version_dir + "/server-00000/alias.rows").c_str()) == 0);
    EditManifest(dir, [&](uint32_t id, std::vector<FileRecord>& files) {
      if (id != kSparse) return;
      FileRecord alias = files[0];
      alias.path = "server-00000/alias.rows";
      files.push_back(alias);
    });
    refused("are the same file");
  }
  SECTION("a data file that is a symbolic link to /dev/zero") {
    std::filesystem::remove(victim);
    std::filesystem::create_symlink("/dev/zero", victim);
    refused(victim + " is a symbolic link");
  }
  SECTION("a data file that is a FIFO without a writer") {
    std::filesystem::remove(victim);
    REQUIRE(::mkfifo(victim.c_str(), 0644) == 0);
    refused(victim + " is a FIFO");
  }
  SECTION("a data file longer than the manifest says") {
    std::ofstream(victim, std::ios::app | std::ios::binary) << std::string(1 << 20, '\0');
    refused(victim + ": " + std::to_string(std::filesystem::file_size(victim)) + " bytes, the manifest says");
  }
  SECTION("a manifest claiming far more rows than the file holds") {
    uint64_t real_rows = 0;
    EditManifest(dir, [&](uint32_t id, std::vector<FileRecord>& files) {
      if (id != kSparse) return;
      real_rows = files[0].rows;
      files[0].rows = uint64_t{1} << 40;
    });
    // The files are intact, so the load starts; it must reserve no more than a load of the
    // true manifest, and stop at the file's end with an error naming both counts.
    auto loaded = LoadWithin(*target[0], dir, kBound);
    REQUIRE_FALSE(loaded.ok());
    INFO(loaded.status().ToString());
    CHECK(loaded.status().IsCorruption());
    CHECK(loaded.status().message().find(victim + ": " + std::to_string(real_rows) + " rows, the manifest says " +
                                         std::to_string(uint64_t{1} << 40)) != std::string::npos);
    auto honest = Cluster(1);
    Train(honest, 1, 90);
    REQUIRE(honest[0]->Load(honest_dir).ok());
    const uint32_t shard = checkpoint->table(kSparse)->files()->Get(0)->shard();
    CHECK(target[0]->tables().sparse(kSparse)->Stats(shard).memory_bytes <=
          honest[0]->tables().sparse(kSparse)->Stats(shard).memory_bytes);
  }
}

}  // namespace
}  // namespace fleetps::server
