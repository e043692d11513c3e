// Fuzz target: the checkpoint readers (server/checkpoint: checkpoint_file.h block files and
// FlatBufferFile, row_file.h NextSparseBlock / NextDenseBlock, checkpoint_dir.h
// Checkpoint::Open) and a whole load (CheckpointRunner::LoadSync) into real tables.
//
// At start-up the target trains its tables a little (the three tables of fuzz_util.h) and
// saves three checkpoints with the product's own code: modes checkpoint (full rows),
// delta and base (weights only). An input then either hands one file to a reader or
// replaces one file of a saved checkpoint and loads it.
//
// Input: [op: u8][flags: u8][which: u8][file bytes...]
//   op % 5 = 0  the bytes are a MANIFEST: Checkpoint::Open of a version directory holding
//               it, then the payload sizes of every table (SavedPayloadFloats)
//           1   a PART file (FlatBufferFile::Read<CheckpointPart>)
//           2   a sparse rows file, read block by block (NextSparseBlock)
//           3   a dense slice file (NextDenseBlock)
//           4   load: template (flags bits 2-3: 0 checkpoint, 1 delta, 2 base) with its
//               file number `which` (in the order ListFiles gives: MANIFEST first, then the
//               data files) replaced by the bytes, loaded into a server that is the only
//               server (flags bit 1 clear: every shard reads its own file) or server 0 of
//               two (set: every file is read and filtered)
//   flags bit 0 set: the CRC-32C of every complete block is recomputed before the bytes are
//   written (so mutations get past the checksums to the FlatBuffers verifier and the
//   loader); in load mode the manifest is then made consistent too: the size and CRC of
//   the replaced file, and the row sums (table rows, total rows) re-derived from the file
//   rows, so that one mutated row count reaches the loader.
// Checks, besides the sanitizers: readers fail only with Corruption / NotFound / IOError /
// InvalidArgument; a successful load leaves every row on the shard PlaceKey names.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/executor.h"
#include "common/sharding.h"
#include "server/checkpoint/checkpoint_dir.h"
#include "server/checkpoint/checkpoint_file.h"
#include "server/service/checkpoint_runner.h"
#include "server/checkpoint/crc32c.h"
#include "server/checkpoint/row_file.h"
#include "server/table/table_set.h"
#include "test/fuzz/fuzz_util.h"

namespace fleetps::fuzz {
namespace {

namespace fs = std::filesystem;
using server::CheckpointRunner;

constexpr size_t kFileHeader = 16, kBlockHeader = 8;

bool Expected(const Status& st) {
  return st.ok() || st.IsCorruption() || st.IsNotFound() || st.IsIOError() || st.IsInvalidArgument();
}

void RequireExpected(const Status& st, const std::string& what) {
  if (!Expected(st)) Fail(what + " failed with " + st.ToString());
}

// Recomputes the CRC of every complete block of a checkpoint file's bytes.
void FixCrcs(std::string* bytes) {
  size_t pos = kFileHeader;
  while (pos + kBlockHeader <= bytes->size()) {
    uint32_t length = 0;
    std::memcpy(&length, bytes->data() + pos, 4);
    if (length > bytes->size() - pos - kBlockHeader) break;
    const uint32_t crc = server::Crc32c(bytes->data() + pos + kBlockHeader, length);
    std::memcpy(bytes->data() + pos + 4, &crc, 4);
    pos += kBlockHeader + length;
  }
}

// ---- one server's tables with a checkpoint runner ------------------------------------

class Node {
 public:
  explicit Node(uint32_t servers) : options_(Options(servers)), pool_(2) {
    auto tables = server::TableSet::Create(options_);
    if (!tables.ok()) Fail("TableSet::Create: " + tables.status().ToString());
    tables_ = std::move(tables).value();
    runner_ = std::make_unique<CheckpointRunner>(
        *tables_, pool_, [](uint32_t t, uint32_t s) { return size_t{t} * 7 + s; },
        [](uint32_t t) { return size_t{t} * 7 + 3; }, 0, servers, "fuzz");
  }
  ~Node() { pool_.Stop(); }

  // Fewer shards than the service target: every load checksums each data file (a 4 MiB
  // buffer per file under ASan is most of an execution's time).
  static config::ServerOptions Options(uint32_t servers) {
    config::ServerOptions o = FuzzServerOptions(servers, false);
    o.tables[kCtrTable].shards = 2;
    o.tables[kPlainTable].shards = 1;
    return o;
  }

  server::TableSet& tables() { return *tables_; }
  CheckpointRunner& runner() { return *runner_; }
  uint32_t servers() const { return static_cast<uint32_t>(options_.endpoints.size()); }

  // Pushes gradients (and, for the CTR table, shows and clicks) into `keys` this server
  // owns. Harness thread; nothing else runs on the tables meanwhile.
  void Train(const std::vector<uint64_t>& all_keys, float click) {
    for (uint32_t id : {kCtrTable, kPlainTable}) {
      server::SparseTable* t = tables_->sparse(id);
      std::vector<uint64_t> keys;
      for (uint64_t k : all_keys) {
        if (t->Owns(k)) keys.push_back(k);
      }
      std::vector<float> grads(keys.size() * t->dim()), shows(keys.size(), 4.0f), clicks(keys.size());
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
      for (size_t i = 0; i < keys.size(); ++i) clicks[i] = i % 2 == 0 ? click : 0.0f;
      std::map<uint32_t, std::vector<uint32_t>> by_shard;
      for (uint32_t i = 0; i < keys.size(); ++i) by_shard[t->ShardOf(keys[i])].push_back(i);
      server::PushCounters c{shows.data(), clicks.data()};
      for (const auto& [s, idx] : by_shard) {
        Status st = t->PushShard(s, keys.data(), idx.data(), idx.size(), grads.data(), c);
        if (!st.ok()) Fail("template push: " + st.ToString());
      }
    }
    server::DenseTable* d = tables_->dense(kDenseTable);
    std::vector<float> g(d->end() - d->begin(), 0.125f);
    if (Status st = d->Push(d->begin(), g.size(), g.data()); !st.ok()) Fail("template dense push: " + st.ToString());
  }

  void Save(const std::string& dir, const std::string& version, disk::SaveMode mode) {
    std::promise<StatusOr<server::SaveOutcome>> part, commit;
    runner_->SavePart(server::SaveSpec{dir, version, mode, std::nullopt},
                      [&](StatusOr<server::SaveOutcome> r) { part.set_value(std::move(r)); });
    if (auto r = part.get_future().get(); !r.ok()) Fail("template save: " + r.status().ToString());
    runner_->Commit(dir, version, mode, [&](StatusOr<server::SaveOutcome> r) { commit.set_value(std::move(r)); });
    if (auto r = commit.get_future().get(); !r.ok()) Fail("template commit: " + r.status().ToString());
  }

  // Every row sits on this server, in the shard PlaceKey names.
  void CheckPlacement() {
    for (uint32_t id : {kCtrTable, kPlainTable}) {
      server::SparseTable* t = tables_->sparse(id);
      for (uint32_t s = 0; s < t->num_shards(); ++s) {
        Status st = t->ForEachRow(s, [&](uint64_t key, const float*) {
          const KeyPlacement p = PlaceKey(key, servers(), t->num_shards());
          if (p.server != 0 || p.shard != s) {
            Fail("after a load, key " + std::to_string(key) + " sits in shard " + std::to_string(s) + " of table " +
                 std::to_string(id) + ", PlaceKey says server " + std::to_string(p.server) + " shard " +
                 std::to_string(p.shard));
          }
          return Status::OK();
        });
        if (!st.ok()) Fail("ForEachRow: " + st.ToString());
      }
    }
  }

 private:
  config::ServerOptions options_;
  ExecutorPool pool_;
  std::unique_ptr<server::TableSet> tables_;
  std::unique_ptr<CheckpointRunner> runner_;
};

// A saved checkpoint: its directory and its files relative to it, MANIFEST first.
struct Template {
  std::string dir;
  std::string version;
  std::vector<std::string> files;  // relative to dir/version
};

struct World {
  std::string scratch;
  Template templates[3];
  std::unique_ptr<Node> loaders[2];  // 1 server; server 0 of 2
};

std::vector<std::string> ListFiles(const std::string& version_dir) {
  std::vector<std::string> files = {server::kManifestFile};
  std::vector<std::string> data;
  for (const auto& e : fs::recursive_directory_iterator(version_dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), version_dir).string();
    if (rel != server::kManifestFile) data.push_back(rel);
  }
  std::sort(data.begin(), data.end());
  files.insert(files.end(), data.begin(), data.end());
  return files;
}

World& GetWorld() {
  static World* world = [] {
    auto* w = new World;
    w->scratch = ScratchDir("checkpoint");
    Node saver(1);
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 24; ++k) keys.push_back(k * 0x9e3779b97f4a7c15ull + 5);
    const disk::SaveMode modes[3] = {disk::SaveMode::Checkpoint, disk::SaveMode::Delta, disk::SaveMode::Base};
    for (int i = 0; i < 3; ++i) {
      saver.Train(keys, i == 0 ? 3.0f : 0.0f);  // clicks extend some CTR rows' embedx
      Template& t = w->templates[i];
      t.dir = w->scratch + "/template-" + std::to_string(i);
      t.version = "v" + std::to_string(i + 1);
      saver.Save(t.dir, t.version, modes[i]);
      t.files = ListFiles(t.dir + "/" + t.version);
    }
    w->loaders[0] = std::make_unique<Node>(1);
    w->loaders[1] = std::make_unique<Node>(2);
    return w;
  }();
  return *world;
}

// ---- single-file readers ---------------------------------------------------------------

void ReadManifest(const std::string& version_dir) {
  auto c = server::Checkpoint::Open(version_dir);
  if (!c.ok()) return RequireExpected(c.status(), "Checkpoint::Open");
  const auto& m = c->manifest();
  for (const auto* t : *m.tables()) {
    for (const auto* f : *t->files()) (void)c->FilePath(*f);
    for (uint8_t flags = 0; flags < 4; ++flags) {
      (void)server::SavedPayloadFloats(*t, disk::RowContent::Full, flags);
      (void)server::SavedPayloadFloats(*t, disk::RowContent::WeightsOnly, flags);
    }
    (void)c->table(t->id());
  }
}

void ReadBlocks(const std::string& path, disk::FileKind kind) {
  auto reader = server::BlockFileReader::Open(path, kind);
  if (!reader.ok()) return RequireExpected(reader.status(), "BlockFileReader::Open");
  for (int blocks = 0; blocks < 1000; ++blocks) {
    if (kind == disk::FileKind::SparseRows) {
      auto b = server::NextSparseBlock(**reader);
      if (!b.ok()) return RequireExpected(b.status(), "NextSparseBlock");
      if (*b == nullptr) break;
      const auto* block = *b;
      if (block->keys()->size() != block->flags()->size() || block->values() == nullptr) {
        Fail("NextSparseBlock returned a block with keys and flags of different lengths or no values");
      }
      uint64_t sum = 0;
      for (size_t i = 0; i < block->keys()->size(); ++i) sum += block->keys()->Get(i) ^ block->flags()->Get(i);
      for (size_t i = 0; i < block->values()->size(); ++i) sum += static_cast<uint64_t>(block->values()->Get(i) != 0);
      (void)sum;
    } else {
      auto b = server::NextDenseBlock(**reader);
      if (!b.ok()) return RequireExpected(b.status(), "NextDenseBlock");
      if (*b == nullptr) break;
      if ((*b)->weights() == nullptr) Fail("NextDenseBlock returned a block without weights");
    }
  }
  (void)(*reader)->digest();
}

void ReadSingle(int op, std::string bytes) {
  World& w = GetWorld();
  const std::string dir = w.scratch + "/single";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  const std::string name = op == 0 ? "MANIFEST" : "file";
  WriteBytes(dir + "/" + name, bytes.data(), bytes.size());
  switch (op) {
    case 0: ReadManifest(dir); break;
    case 1: {
      auto part = server::FlatBufferFile::Read<disk::CheckpointPart>(dir + "/file", disk::FileKind::Part);
      if (!part.ok()) RequireExpected(part.status(), "FlatBufferFile::Read<CheckpointPart>");
      break;
    }
    case 2: ReadBlocks(dir + "/file", disk::FileKind::SparseRows); break;
    default: ReadBlocks(dir + "/file", disk::FileKind::DenseSlice); break;
  }
}

// ---- load ------------------------------------------------------------------------------

// Makes MANIFEST bytes consistent with what the fuzzer changed, so that a mutation gets
// past the checks that only catch accidental damage: sets the size and CRC of the data file
// `rel` (when not empty), re-derives each table's rows and the total from the file rows
// (the sums CheckManifest compares) and fixes the block CRC. FlatBuffers fields are
// patched in place; one the saver left out (a default value) stays as it is.
void PatchManifest(std::string* manifest, const std::string& rel, uint64_t bytes, uint32_t crc) {
  if (manifest->size() < kFileHeader + kBlockHeader) return;
  auto* payload = reinterpret_cast<uint8_t*>(manifest->data() + kFileHeader + kBlockHeader);
  const size_t size = manifest->size() - kFileHeader - kBlockHeader;
  flatbuffers::Verifier v(payload, size);
  if (!v.VerifyBuffer<disk::CheckpointManifest>(nullptr)) return FixCrcs(manifest);
  auto* m = flatbuffers::GetMutableRoot<disk::CheckpointManifest>(payload);
  // The generated tables are flatbuffers::Table underneath (a private base): patch through it.
  auto fields = [](const void* t) { return reinterpret_cast<flatbuffers::Table*>(const_cast<void*>(t)); };
  uint64_t total = 0;
  if (m->tables() != nullptr) {
    for (const auto* t : *m->tables()) {
      if (t->files() == nullptr) continue;
      uint64_t rows = 0;
      for (const auto* f : *t->files()) {
        if (!rel.empty() && f->path() != nullptr && f->path()->str() == rel) {
          fields(f)->SetField<uint64_t>(disk::FileEntry::VT_BYTES, bytes, 0);
          fields(f)->SetField<uint32_t>(disk::FileEntry::VT_CRC32C, crc, 0);
        }
        rows += f->rows();
      }
      fields(t)->SetField<uint64_t>(disk::TableEntry::VT_ROWS, rows, 0);
      if (!t->dense()) total += rows;
    }
  }
  fields(m)->SetField<uint64_t>(disk::CheckpointManifest::VT_TOTAL_ROWS, total, 0);
  FixCrcs(manifest);
}

void Load(uint8_t flags, uint8_t which, std::string bytes) {
  World& w = GetWorld();
  const bool fix = flags & 1;
  const Template& t = w.templates[((flags >> 2) & 3) % 3];
  // Delta loads merge rows into the tables: start from empty tables now and then so that
  // rows cannot pile up over a long run.
  static int loads = 0;
  if (++loads % 5000 == 0) {
    w.loaders[0] = std::make_unique<Node>(1);
    w.loaders[1] = std::make_unique<Node>(2);
  }
  Node& loader = *w.loaders[(flags >> 1) & 1];
  const std::string dir = w.scratch + "/load";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::copy(t.dir, dir, fs::copy_options::recursive, ec);
  if (ec) Fail("copy of the template: " + ec.message());
  const std::string version_dir = dir + "/" + t.version;
  const std::string rel = t.files[which % t.files.size()];
  if (fix) FixCrcs(&bytes);
  WriteBytes(version_dir + "/" + rel, bytes.data(), bytes.size());
  if (fix) {
    std::string manifest = ReadBytes(version_dir + "/" + server::kManifestFile);
    const bool data_file = rel != server::kManifestFile;
    PatchManifest(&manifest, data_file ? rel : std::string(), bytes.size(), server::Crc32c(bytes.data(), bytes.size()));
    WriteBytes(version_dir + "/" + server::kManifestFile, manifest.data(), manifest.size());
  }
  auto loaded = loader.runner().LoadSync(dir);
  if (!loaded.ok()) {
    if (!Expected(loaded.status())) Fail("LoadSync failed with " + loaded.status().ToString());
  }
  loader.CheckPlacement();
}

// ---- seeds -----------------------------------------------------------------------------

void WriteSeeds(SeedWriter& seeds) {
  World& w = GetWorld();
  for (int i = 0; i < 3; ++i) {
    const Template& t = w.templates[i];
    const std::string version_dir = t.dir + "/" + t.version;
    for (size_t f = 0; f < t.files.size(); ++f) {
      const std::string bytes = ReadBytes(version_dir + "/" + t.files[f]);
      if (bytes.size() > 6000) continue;  // keep the corpus small
      const std::string& rel = t.files[f];
      int op = 2;
      if (rel == server::kManifestFile)
        op = 0;
      else if (rel.find(server::kPartFile) != std::string::npos)
        op = 1;
      else if (rel.find(".dense") != std::string::npos)
        op = 3;
      // As a single file (once per file kind and template), and as a replacement to load.
      seeds.Add(std::string{static_cast<char>(op), 1, 0} + bytes);
      for (uint8_t loader = 0; loader < 2; ++loader) {
        const auto flags = static_cast<char>(1 | (loader << 1) | (i << 2));
        seeds.Add(std::string{4, flags, static_cast<char>(f)} + bytes);
      }
    }
  }
}

}  // namespace
}  // namespace fleetps::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fleetps::fuzz::QuietLogs();
  fleetps::fuzz::MaybeWriteSeeds("checkpoint_fuzz", fleetps::fuzz::WriteSeeds);
  fleetps::fuzz::GetWorld();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fleetps::fuzz;
  Reader in(data, size);
  const uint8_t op = in.U8() % 5;
  const uint8_t flags = in.U8();
  const uint8_t which = in.U8();
  std::string bytes(in.Rest());
  if (op < 4) {
    if (flags & 1) FixCrcs(&bytes);
    ReadSingle(op, std::move(bytes));
  } else {
    Load(flags, which, std::move(bytes));
  }
  return 0;
}
