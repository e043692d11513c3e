#include "server/checkpoint/checkpoint_dir.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <iterator>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

namespace fleetps::server {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string Str(const flatbuffers::String* s) { return s == nullptr ? std::string() : s->str(); }

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Manifest checks beyond the FlatBuffers verifier: everything a loader relies on.
Status CheckManifest(const disk::CheckpointManifest& m, const std::string& where) {
  auto bad = [&](const std::string& what) { return Status::Corruption(where + ": " + what); };
  if (m.format_version() != kCheckpointFormatVersion) {
    return bad("manifest format version " + std::to_string(m.format_version()) + ", expected " +
               std::to_string(kCheckpointFormatVersion));
  }
  if (static_cast<uint8_t>(m.mode()) > static_cast<uint8_t>(disk::SaveMode::Batch)) {
    return bad("unknown save mode " + std::to_string(static_cast<int>(m.mode())));
  }
  if (m.content() != ContentOf(m.mode())) return bad("row content does not match the save mode");
  if (m.num_servers() == 0) return bad("num_servers is 0");
  if (m.tables() == nullptr) return bad("no table list");
  uint64_t total = 0;
  // Every file once: a file listed again would be verified and read again, and its rows
  // counted (and memory reserved for them) once per entry.
  std::map<std::string, std::string> listed;  // normalised path -> the table listing it
  for (const auto* t : *m.tables()) {
    const std::string table = "table " + std::to_string(t->id()) + " ('" + Str(t->name()) + "')";
    if (t->name() == nullptr || t->files() == nullptr) return bad(table + " lacks a name or a file list");
    if (t->dim() == 0 || (!t->dense() && t->shards() == 0)) return bad(table + " has dim or shards 0");
    uint64_t rows = 0;
    for (const auto* f : *t->files()) {
      const std::string path = Str(f->path());
      if (path.empty() || path.front() == '/' || path.find("..") != std::string::npos) {
        return bad(table + " names a file outside the checkpoint: '" + path + "'");
      }
      const auto [seen, added] = listed.emplace(std::filesystem::path(path).lexically_normal().string(), table);
      if (!added) {
        const std::string again = seen->second == table ? " more than once" : ", already listed by " + seen->second;
        return bad(table + " lists file " + path + again + "; a checkpoint lists each file once");
      }
      if (f->server() >= m.num_servers())
        return bad(table + ": file " + path + " of server " + std::to_string(f->server()) + " >= num_servers");
      if (!t->dense() && f->shard() >= t->shards()) return bad(table + ": file " + path + " of shard >= shards");
      if (t->dense() && (f->slice_begin() > f->slice_end() || f->slice_end() > t->dim())) {
        return bad(table + ": dense file " + path + " has a slice outside the table");
      }
      rows += f->rows();
    }
    if (rows != t->rows())
      return bad(table + ": file rows add up to " + std::to_string(rows) + ", table says " + std::to_string(t->rows()));
    if (!t->dense()) total += rows;
  }
  if (total != m.total_rows())
    return bad("table rows add up to " + std::to_string(total) + ", manifest says " + std::to_string(m.total_rows()));
  return Status::OK();
}

flatbuffers::Offset<disk::FileEntry> CopyFile(flatbuffers::FlatBufferBuilder& fbb, const disk::FileEntry& f,
                                              const std::string& prefix) {
  return disk::CreateFileEntry(fbb, fbb.CreateString(prefix + Str(f.path())), f.server(), f.shard(), f.rows(),
                               f.bytes(), f.crc32c(), f.slice_begin(), f.slice_end());
}

}  // namespace

bool IsValidVersionName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name.front() == '.' || EndsWith(name, ".tmp")) return false;
  for (char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string TmpVersionDir(const std::string& dir, const std::string& version) { return dir + "/" + version + ".tmp"; }

std::string ServerDirName(uint32_t server) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "server-%05u", server);
  return buf;
}

std::string SparseFileName(uint32_t table_id, uint32_t shard) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "table-%u-shard-%05u.rows", table_id, shard);
  return buf;
}

std::string DenseFileName(uint32_t table_id) { return "table-" + std::to_string(table_id) + ".dense"; }

disk::RowContent ContentOf(disk::SaveMode mode) {
  return mode == disk::SaveMode::Checkpoint || mode == disk::SaveMode::Batch ? disk::RowContent::Full
                                                                             : disk::RowContent::WeightsOnly;
}

uint32_t SavedPayloadFloats(const disk::TableEntry& table, disk::RowContent content, uint8_t flags) {
  const bool ctr = table.accessor() == disk::AccessorKind::Ctr;
  const bool extended = (flags & static_cast<uint8_t>(disk::RowFlag::EmbedxExtended)) != 0;
  const auto n = static_cast<uint32_t>(!ctr || extended ? table.dim() : 1);
  if (content == disk::RowContent::WeightsOnly) return n;
  return n + table.shared_state_floats() + n * table.element_state_floats() + (ctr ? 4u : 0u);
}

// ---- paths from the network ---------------------------------------------------------

namespace {

// True when `path` is `root` or lies below it, component by component.
bool IsUnder(const std::filesystem::path& path, const std::filesystem::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty() && std::next(r) == root.end()) break;  // a trailing '/' of root
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

// Without a trailing '/' (lexically_normal keeps one as an empty last component).
std::filesystem::path StripTrailingSlash(std::filesystem::path p) {
  if (!p.empty() && p.filename().empty() && p != p.root_path()) p = p.parent_path();
  return p;
}

}  // namespace

StatusOr<std::string> ConfineCheckpointPath(const std::string& root, const std::string& requested) {
  namespace fs = std::filesystem;
  const std::string shown = "'" + requested.substr(0, requested.find('\0')) + "'";
  auto refuse = [&](const std::string& why) {
    return Status::InvalidArgument("checkpoint path " + shown + " refused: " + why);
  };
  if (root.empty()) {
    return Status::InvalidArgument("checkpoint path " + shown +
                                   " refused: saving and loading by a network request is disabled on this "
                                   "server; set server.checkpoint_root (or server.save_dir) to the directory "
                                   "that requests may save into and load from");
  }
  if (requested.empty()) return refuse("empty path (name a directory below the checkpoint root)");
  if (requested.find('\0') != std::string::npos) return refuse("it contains a NUL byte");
  const fs::path rel(requested);
  if (rel.has_root_directory()) {
    return refuse("absolute path; requests name a directory relative to the checkpoint root");
  }
  for (const fs::path& part : rel) {
    if (part == "..") return refuse("'..' is not allowed in a checkpoint path");
  }
  const fs::path base = StripTrailingSlash(fs::path(root).lexically_normal());
  const fs::path joined = StripTrailingSlash((base / rel).lexically_normal());
  if (joined == base) return refuse("it names the checkpoint root itself; name a directory below it");
  if (!IsUnder(joined, base)) return refuse("it leaves the checkpoint root");  // not reachable without ".."
  std::error_code ec;
  // A dangling symlink on the way would be followed by a later mkdir or open, wherever it
  // points, and weakly_canonical cannot resolve it: refused.
  fs::path walk = base;
  for (const fs::path& part : joined.lexically_relative(base)) {
    walk /= part;
    const fs::file_status link = fs::symlink_status(walk, ec);
    if (ec || !fs::exists(link)) break;  // the rest does not exist yet
    if (fs::is_symlink(link) && !fs::exists(fs::status(walk, ec))) {
      return refuse(walk.string() + " is a symbolic link to nothing");
    }
  }
  ec.clear();
  const fs::path real_root = fs::weakly_canonical(base, ec);
  if (ec) return Status::IOError("cannot resolve the checkpoint root " + base.string() + ": " + ec.message());
  const fs::path real = fs::weakly_canonical(joined, ec);
  if (ec) return Status::IOError("cannot resolve checkpoint path " + joined.string() + ": " + ec.message());
  const fs::path real_base = StripTrailingSlash(real_root);
  const fs::path real_path = StripTrailingSlash(real);
  if (real_path == real_base) return refuse("it resolves to the checkpoint root itself (through a symbolic link)");
  if (!IsUnder(real_path, real_base)) {
    return refuse("it resolves to " + real_path.string() + ", outside the checkpoint root " + real_base.string() +
                  " (through a symbolic link)");
  }
  return joined.string();
}

// ---- Checkpoint ---------------------------------------------------------------------

StatusOr<std::string> FindLatestCheckpoint(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return std::string();
  auto usable = [](const std::string& candidate) {
    auto opened = Checkpoint::Open(candidate);
    if (!opened.ok() && !opened.status().IsNotFound()) {
      spdlog::warn("skipping checkpoint {}: {}", candidate, opened.status().ToString());
    }
    return opened.ok();
  };
  if (PathExists(dir + "/" + kCurrentFile)) return usable(dir) ? dir : std::string();
  std::string best;
  std::filesystem::file_time_type best_time;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::error_code entry_ec;
    if (!entry.is_directory(entry_ec)) continue;
    const std::string candidate = entry.path().string();
    const auto current = std::filesystem::last_write_time(candidate + "/" + kCurrentFile, entry_ec);
    if (entry_ec) continue;  // no committed checkpoint there
    if ((best.empty() || current > best_time) && usable(candidate)) {
      best = candidate;
      best_time = current;
    }
  }
  if (ec) return Status::IOError("cannot list " + dir + ": " + ec.message());
  return best;
}

StatusOr<Checkpoint> Checkpoint::Open(const std::string& dir) {
  std::string version_dir;
  if (PathExists(dir + "/" + kCurrentFile)) {
    ASSIGN_OR_RETURN(std::string current, ReadSmallFile(dir + "/" + kCurrentFile));
    current = Trim(current);
    if (!IsValidVersionName(current)) {
      return Status::Corruption(dir + "/CURRENT: '" + current + "' is not a checkpoint version name");
    }
    version_dir = dir + "/" + current;
  } else if (PathExists(dir + "/" + kManifestFile)) {
    version_dir = dir;
  } else if (!PathExists(dir)) {
    return Status::NotFound("checkpoint directory " + dir + " does not exist");
  } else {
    return Status::NotFound(dir + " holds no checkpoint (no CURRENT or MANIFEST; was a save ever committed?)");
  }
  const std::string manifest_path = version_dir + "/" + kManifestFile;
  auto file = FlatBufferFile::Read<disk::CheckpointManifest>(manifest_path, disk::FileKind::Manifest);
  if (!file.ok()) {
    if (file.status().IsNotFound()) {
      return Status::Corruption(manifest_path + " is missing although CURRENT names this version");
    }
    return file.status();
  }
  Checkpoint checkpoint(version_dir, std::move(file).value());
  const auto& m = checkpoint.manifest();
  RETURN_IF_ERROR(CheckManifest(m, manifest_path));
  const std::string dir_name = std::filesystem::path(version_dir).filename().string();
  if (version_dir != dir && Str(m.version()) != dir_name) {
    return Status::Corruption(manifest_path + " belongs to version '" + Str(m.version()) + "', not '" + dir_name + "'");
  }
  return checkpoint;
}

std::string Checkpoint::FilePath(const disk::FileEntry& file) const { return version_dir_ + "/" + Str(file.path()); }

const disk::TableEntry* Checkpoint::table(uint32_t id) const {
  for (const auto* t : *manifest().tables()) {
    if (t->id() == id) return t;
  }
  return nullptr;
}

Status Checkpoint::VerifyFile(const disk::FileEntry& file) const {
  const std::string path = FilePath(file);
  ASSIGN_OR_RETURN(FileDigest digest, DigestFile(path, file.bytes()));
  if (digest.crc32c != file.crc32c()) {
    return Status::Corruption(path + ": CRC-32C " + std::to_string(digest.crc32c) + ", the manifest says " +
                              std::to_string(file.crc32c()) + " (the file is corrupt)");
  }
  return Status::OK();
}

Status Checkpoint::CheckDistinctFiles(const std::vector<const disk::FileEntry*>& files) const {
  std::map<std::pair<dev_t, ino_t>, std::string> seen;
  for (const disk::FileEntry* f : files) {
    const std::string path = FilePath(*f);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;  // VerifyFile says why
    const auto [first, added] = seen.emplace(std::make_pair(st.st_dev, st.st_ino), path);
    if (!added) {
      return Status::Corruption(path + " and " + first->second +
                                " are the same file (a hard link or a linked directory); a checkpoint lists each "
                                "file once");
    }
  }
  return Status::OK();
}

// ---- commit -------------------------------------------------------------------------

namespace {

// The part every server wrote into `tmp` (TmpVersionDir), each checked to be of this
// version, mode and server count.
StatusOr<std::vector<FlatBufferFile>> ReadCommitParts(const std::string& tmp, const std::string& version,
                                                      uint32_t num_servers, disk::SaveMode mode) {
  std::vector<FlatBufferFile> parts;
  for (uint32_t s = 0; s < num_servers; ++s) {
    const std::string path = tmp + "/" + ServerDirName(s) + "/" + kPartFile;
    auto part = FlatBufferFile::Read<disk::CheckpointPart>(path, disk::FileKind::Part);
    if (!part.ok()) {
      return part.status().WithContext("commit of " + version + ": server " + std::to_string(s) +
                                       " has not finished its part (is DIR on a filesystem every pserver shares?)");
    }
    const auto* p = part->root<disk::CheckpointPart>();
    if (Str(p->version()) != version || p->mode() != mode || p->server_index() != s ||
        p->num_servers() != num_servers || p->tables() == nullptr) {
      return Status::Corruption(path + ": part of version '" + Str(p->version()) + "' mode " +
                                std::to_string(static_cast<int>(p->mode())) + " server " +
                                std::to_string(p->server_index()) + "/" + std::to_string(p->num_servers()) +
                                ", expected '" + version + "' mode " + std::to_string(static_cast<int>(mode)) +
                                " server " + std::to_string(s) + "/" + std::to_string(num_servers));
    }
    parts.push_back(std::move(part).value());
  }
  return parts;
}

// The manifest of the version: the tables of part 0, in its order, with every part's files.
// Adds the rows (sparse tables) and file bytes to `*out`.
StatusOr<flatbuffers::DetachedBuffer> MergeParts(const std::vector<FlatBufferFile>& parts, const std::string& version,
                                                 uint32_t num_servers, disk::SaveMode mode,
                                                 const std::string& fleetps_version, CommitSummary* out) {
  CommitSummary& summary = *out;
  flatbuffers::FlatBufferBuilder fbb(4096);
  std::vector<flatbuffers::Offset<disk::TableEntry>> tables;
  const auto* first = parts[0].root<disk::CheckpointPart>();
  for (const auto* t : *first->tables()) {
    std::vector<flatbuffers::Offset<disk::FileEntry>> files;
    uint64_t rows = 0;
    for (uint32_t s = 0; s < num_servers; ++s) {
      const auto* p = parts[s].root<disk::CheckpointPart>();
      const disk::TableEntry* mine = nullptr;
      for (const auto* e : *p->tables()) {
        if (e->id() == t->id()) mine = e;
      }
      if (mine == nullptr || p->tables()->size() != first->tables()->size() || mine->dim() != t->dim() ||
          mine->dense() != t->dense()) {
        return Status::Corruption("commit of " + version + ": server " + std::to_string(s) +
                                  " saved different tables than server 0 (table " + std::to_string(t->id()) + ")");
      }
      if (mine->files() != nullptr) {
        for (const auto* f : *mine->files()) {
          files.push_back(CopyFile(fbb, *f, ServerDirName(s) + "/"));
          summary.bytes += f->bytes();
        }
      }
      rows += mine->rows();
    }
    if (!t->dense()) summary.rows += rows;
    tables.push_back(disk::CreateTableEntry(fbb, t->id(), fbb.CreateString(Str(t->name())), t->dense(), t->dim(),
                                            t->shards(), t->optimizer(), t->shared_state_floats(),
                                            t->element_state_floats(), t->accessor(), rows, fbb.CreateVector(files)));
  }
  const auto now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  fbb.Finish(disk::CreateCheckpointManifest(fbb, kCheckpointFormatVersion, fbb.CreateString(version), mode,
                                            ContentOf(mode), num_servers, static_cast<uint64_t>(now_ms),
                                            fbb.CreateString(fleetps_version), fbb.CreateVector(tables), summary.rows));
  return fbb.Release();
}

// Older versions and abandoned saves of `dir`, all but `version`: only names this code
// writes are touched; a failure is logged, not returned (the commit has happened).
void RemoveOldVersions(const std::string& dir, const std::string& version) {
  auto names = ListDir(dir);
  if (names.ok()) {
    for (const std::string& name : *names) {
      if (name == version || name == kCurrentFile) continue;
      const bool old_version = IsValidVersionName(name) && PathExists(dir + "/" + name + "/" + kManifestFile);
      const bool abandoned = EndsWith(name, ".tmp") && IsValidVersionName(name.substr(0, name.size() - 4));
      if (!old_version && !abandoned) continue;
      Status st = RemoveAll(dir + "/" + name);
      if (!st.ok()) spdlog::warn("checkpoint {}: cannot remove the old {}: {}", dir, name, st.ToString());
    }
  }
}

}  // namespace

StatusOr<CommitSummary> CommitCheckpoint(const std::string& dir, const std::string& version, uint32_t num_servers,
                                         disk::SaveMode mode, const std::string& fleetps_version) {
  if (!IsValidVersionName(version)) return Status::InvalidArgument("bad checkpoint version name '" + version + "'");
  const std::string tmp = TmpVersionDir(dir, version);
  if (!PathExists(tmp)) return Status::NotFound(tmp + " does not exist: no server saved version " + version);

  ASSIGN_OR_RETURN(const std::vector<FlatBufferFile> parts, ReadCommitParts(tmp, version, num_servers, mode));

  CommitSummary summary;
  ASSIGN_OR_RETURN(const flatbuffers::DetachedBuffer manifest,
                   MergeParts(parts, version, num_servers, mode, fleetps_version, &summary));
  {  // the manifest must pass the checks a loader makes
    flatbuffers::Verifier verifier(manifest.data(), manifest.size());
    if (!verifier.VerifyBuffer<disk::CheckpointManifest>(nullptr)) {
      return Status::Internal("commit of " + version + ": built a manifest that fails verification");
    }
    RETURN_IF_ERROR(CheckManifest(*flatbuffers::GetRoot<disk::CheckpointManifest>(manifest.data()), tmp));
  }
  RETURN_IF_ERROR(WriteFlatBufferFileAtomic(tmp + "/" + kManifestFile, disk::FileKind::Manifest, manifest));
  const std::string final_dir = dir + "/" + version;
  if (PathExists(final_dir)) return Status::InvalidArgument(final_dir + " already exists; use a new version name");
  RETURN_IF_ERROR(RenamePath(tmp, final_dir));
  RETURN_IF_ERROR(SyncDir(dir));
  RETURN_IF_ERROR(WriteSmallFileAtomic(dir + "/" + kCurrentFile, version + "\n"));

  RemoveOldVersions(dir, version);
  return summary;
}

}  // namespace fleetps::server
