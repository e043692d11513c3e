// pserver_tool: inspect fleetps checkpoints without a server.
//
//   pserver_tool manifest DIR                  tables, dims, servers, shards, files, rows, CRCs
//   pserver_tool verify DIR                    every file's size and CRC-32C, every block decoded;
//                                              files that are not distinct regular files refused
//   pserver_tool dump DIR --table emb [--limit N] [--full]
//                                              one row per line: key<TAB>w0 w1 ... (the pulled
//                                              weights: embedx zeros for CTR rows without it);
//                                              --full adds flags, optimizer state, statistics.
//                                              A dense table: offset<TAB>w, with --full its
//                                              element state and a line `shared_state` per slice
//
// DIR is a checkpoint directory (with CURRENT) or one version directory. Exit codes: 0 ok,
// 1 the checkpoint is corrupt or inconsistent, 2 usage or I/O errors.

#include <CLI/CLI.hpp>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "server/checkpoint/checkpoint_dir.h"
#include "server/checkpoint/row_file.h"

namespace {

using fleetps::Status;
using fleetps::server::Checkpoint;
namespace disk = fleetps::disk;

int Fail(const Status& st) {
  std::fprintf(stderr, "pserver_tool: %s\n", st.ToString().c_str());
  return st.IsCorruption() || st.IsInvalidArgument() ? 1 : 2;
}

std::string Str(const flatbuffers::String* s) { return s == nullptr ? std::string() : s->str(); }

const char* OptimizerName(uint8_t kind) {
  switch (kind) {
    case 0: return "sgd";
    case 1: return "adagrad";
    case 2: return "adam";
    default: return "?";
  }
}

const disk::TableEntry* FindTable(const Checkpoint& c, const std::string& which) {
  for (const auto* t : *c.manifest().tables()) {
    if (Str(t->name()) == which || std::to_string(t->id()) == which) return t;
  }
  return nullptr;
}

int Manifest(const Checkpoint& c) {
  const auto& m = c.manifest();
  const time_t created = static_cast<time_t>(m.created_unix_ms() / 1000);
  char when[64];
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&created));
  std::printf(
      "checkpoint  %s\nversion     %s\nmode        %d (%s)\ncontent     %s\nservers     %u\n"
      "created     %s\nfleetps     %s\nsparse rows %" PRIu64 "\n",
      c.version_dir().c_str(), Str(m.version()).c_str(), static_cast<int>(m.mode()), disk::EnumNameSaveMode(m.mode()),
      disk::EnumNameRowContent(m.content()), m.num_servers(), when, Str(m.fleetps_version()).c_str(), m.total_rows());
  for (const auto* t : *m.tables()) {
    const std::string shards = t->dense() ? "" : ", " + std::to_string(t->shards()) + " shards per server";
    std::printf("\ntable %u '%s': %s, %s %" PRIu64
                "%s, optimizer %s (state %u shared + %u per weight), "
                "%" PRIu64 " %s\n",
                t->id(), Str(t->name()).c_str(), t->dense() ? "dense" : "sparse", t->dense() ? "size" : "dim", t->dim(),
                shards.c_str(), OptimizerName(t->optimizer()), t->shared_state_floats(), t->element_state_floats(),
                t->rows(), t->dense() ? "floats" : "rows");
    if (!t->dense()) std::printf("  accessor %s\n", disk::EnumNameAccessorKind(t->accessor()));
    for (const auto* f : *t->files()) {
      std::printf("  %-44s server %u %s %10" PRIu64 " %s %12" PRIu64 " bytes  crc32c %08x\n", Str(f->path()).c_str(),
                  f->server(),
                  t->dense()
                      ? ("[" + std::to_string(f->slice_begin()) + "," + std::to_string(f->slice_end()) + ")").c_str()
                      : ("shard " + std::to_string(f->shard())).c_str(),
                  f->rows(), t->dense() ? "floats" : "rows  ", f->bytes(), f->crc32c());
    }
  }
  return 0;
}

// Reads every block of a file, checking payload lengths; counts rows.
Status ReadAll(const Checkpoint& c, const disk::TableEntry& t, const disk::FileEntry& f, uint64_t* rows) {
  const std::string path = c.FilePath(f);
  auto kind = t.dense() ? disk::FileKind::DenseSlice : disk::FileKind::SparseRows;
  ASSIGN_OR_RETURN(auto reader, fleetps::server::BlockFileReader::Open(path, kind, f.bytes()));
  *rows = 0;
  while (true) {
    if (t.dense()) {
      ASSIGN_OR_RETURN(const disk::DenseSliceBlock* b, fleetps::server::NextDenseBlock(*reader));
      if (b == nullptr) break;
      *rows += b->weights()->size();
      continue;
    }
    ASSIGN_OR_RETURN(const disk::SparseRowBlock* b, fleetps::server::NextSparseBlock(*reader));
    if (b == nullptr) break;
    size_t offset = 0;
    for (size_t i = 0; i < b->keys()->size(); ++i) {
      offset += fleetps::server::SavedPayloadFloats(t, c.manifest().content(), b->flags()->Get(i));
    }
    if (offset != b->values()->size()) {
      return Status::Corruption(path + ": row payloads do not add up to the block's values");
    }
    *rows += b->keys()->size();
  }
  return Status::OK();
}

int Verify(const Checkpoint& c) {
  uint64_t files = 0, bytes = 0;
  int bad = 0;
  std::vector<const disk::FileEntry*> all;
  for (const auto* t : *c.manifest().tables()) all.insert(all.end(), t->files()->begin(), t->files()->end());
  if (Status st = c.CheckDistinctFiles(all); !st.ok()) {
    std::printf("BAD %s\n", st.ToString().c_str());
    ++bad;
  }
  for (const auto* t : *c.manifest().tables()) {
    for (const auto* f : *t->files()) {
      ++files;
      bytes += f->bytes();
      Status st = c.VerifyFile(*f);
      uint64_t rows = 0;
      if (st.ok()) st = ReadAll(c, *t, *f, &rows);
      if (st.ok() && rows != f->rows()) {
        st = Status::Corruption(c.FilePath(*f) + ": " + std::to_string(rows) + " rows, the manifest says " +
                                std::to_string(f->rows()));
      }
      if (!st.ok()) {
        std::printf("BAD %s\n", st.ToString().c_str());
        ++bad;
      }
    }
  }
  if (bad > 0) {
    std::printf("%d problem(s) in %" PRIu64 " files\n", bad, files);
    return 1;
  }
  std::printf("OK: %" PRIu64 " files, %" PRIu64 " bytes, %" PRIu64 " sparse rows, version %s\n", files, bytes,
              c.manifest().total_rows(), Str(c.manifest().version()).c_str());
  return 0;
}

int Dump(const Checkpoint& c, const std::string& which, uint64_t limit, bool full) {
  const disk::TableEntry* t = FindTable(c, which);
  if (t == nullptr) return Fail(Status::NotFound("no table '" + which + "' in " + c.version_dir()));
  const bool with_state = c.manifest().content() == disk::RowContent::Full;
  uint64_t printed = 0;
  for (const auto* f : *t->files()) {
    const std::string path = c.FilePath(*f);
    auto kind = t->dense() ? disk::FileKind::DenseSlice : disk::FileKind::SparseRows;
    auto reader = fleetps::server::BlockFileReader::Open(path, kind, f->bytes());
    if (!reader.ok()) return Fail(reader.status());
    while (printed < limit) {
      if (t->dense()) {
        auto b = fleetps::server::NextDenseBlock(**reader);
        if (!b.ok()) return Fail(b.status());
        if (*b == nullptr) break;
        const auto* block = *b;
        const uint32_t es = t->element_state_floats();
        const bool state = full && with_state;
        // A rule without element state (SGD) may leave the vector out.
        const uint64_t element_floats = block->element_state() != nullptr ? block->element_state()->size() : 0;
        if (state && element_floats != uint64_t{block->weights()->size()} * es) {
          return Fail(Status::Corruption(path + ": a dense block's element state is not " + std::to_string(es) +
                                         " floats per weight"));
        }
        // The slice's shared state (Adam's beta powers), in its first block.
        if (state && block->shared_state() != nullptr && block->shared_state()->size() > 0) {
          std::printf("shared_state");
          for (float v : *block->shared_state()) std::printf("\t%.9g", v);
          std::printf("\n");
        }
        for (size_t i = 0; i < block->weights()->size() && printed < limit; ++i, ++printed) {
          std::printf("%" PRIu64 "\t%.9g", block->offset() + i, block->weights()->Get(i));
          if (state) {
            std::printf("\tstate=");
            for (uint32_t j = 0; j < es; ++j)
              std::printf(j == 0 ? "%.9g" : " %.9g", block->element_state()->Get(i * es + j));
          }
          std::printf("\n");
        }
        continue;
      }
      auto b = fleetps::server::NextSparseBlock(**reader);
      if (!b.ok()) return Fail(b.status());
      if (*b == nullptr) break;
      const auto* block = *b;
      size_t offset = 0;
      for (size_t i = 0; i < block->keys()->size() && printed < limit; ++i, ++printed) {
        const uint8_t flags = block->flags()->Get(i);
        const uint32_t len = fleetps::server::SavedPayloadFloats(*t, c.manifest().content(), flags);
        const uint32_t weights = fleetps::server::SavedPayloadFloats(*t, disk::RowContent::WeightsOnly, flags);
        if (offset + len > block->values()->size()) return Fail(Status::Corruption(path + ": payload overrun"));
        std::printf("%" PRIu64 "\t", block->keys()->Get(i));
        for (uint64_t j = 0; j < t->dim(); ++j) {
          std::printf(j == 0 ? "%.9g" : " %.9g", j < weights ? block->values()->Get(offset + j) : 0.0f);
        }
        if (full) {
          std::printf("\tflags=%u", flags);
          if (with_state) {
            std::printf("\tstate=");
            for (uint32_t j = weights; j < len; ++j)
              std::printf(j == weights ? "%.9g" : " %.9g", block->values()->Get(offset + j));
          }
        }
        std::printf("\n");
        offset += len;
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"inspect fleetps checkpoints"};
  cli.require_subcommand(1);
  std::string dir, table;
  uint64_t limit = UINT64_MAX;
  bool full = false;
  auto* manifest = cli.add_subcommand("manifest", "print the manifest: tables, dims, servers, shards, files");
  manifest->add_option("dir", dir, "checkpoint directory")->required();
  auto* verify = cli.add_subcommand("verify", "check every file's size and CRC-32C and decode every block");
  verify->add_option("dir", dir, "checkpoint directory")->required();
  auto* dump = cli.add_subcommand("dump", "print a table's rows as text: key, weights");
  dump->add_option("dir", dir, "checkpoint directory")->required();
  dump->add_option("--table", table, "table name or id")->required();
  dump->add_option("--limit", limit, "print at most this many rows");
  dump->add_flag("--full", full, "also print flags, optimizer state and statistics");
  CLI11_PARSE(cli, argc, argv);

  auto checkpoint = Checkpoint::Open(dir);
  if (!checkpoint.ok()) return Fail(checkpoint.status());
  if (*manifest) return Manifest(*checkpoint);
  if (*verify) return Verify(*checkpoint);
  return Dump(*checkpoint, table, limit, full);
}
