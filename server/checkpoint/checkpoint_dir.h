#pragma once
// The directory layout of a checkpoint and the two steps that make a save atomic
// (docs/STORAGE.md):
//
//   DIR/CURRENT                                   "<version>\n": the committed checkpoint
//   DIR/<version>/MANIFEST                        CheckpointManifest, written last
//   DIR/<version>/server-<i>/PART                 CheckpointPart: server i's files
//   DIR/<version>/server-<i>/table-<id>-shard-<s>.rows   SparseRows file of shard s
//   DIR/<version>/server-<i>/table-<id>.dense            DenseSlice file
//
// A save writes every file under DIR/<version>.tmp/ (each server its own server-<i>/, every
// file fsynced, PART last). Commit (server 0, once all servers are done) checks every PART,
// writes MANIFEST, renames <version>.tmp to <version>, then replaces CURRENT (tmp + fsync +
// rename) and removes older versions. Until CURRENT is replaced, a reader sees the previous
// checkpoint, whole: a crash or kill at any point leaves a loadable checkpoint.
// Thread-safety: functions are independent; one save per DIR at a time.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "server/checkpoint/checkpoint_file.h"

namespace fleetps::server {

inline constexpr char kCurrentFile[] = "CURRENT";
inline constexpr char kManifestFile[] = "MANIFEST";
inline constexpr char kPartFile[] = "PART";

// A version name: 1..128 characters of [A-Za-z0-9._-], not starting with '.', and not
// ending in ".tmp".
bool IsValidVersionName(std::string_view name);
std::string TmpVersionDir(const std::string& dir, const std::string& version);
std::string ServerDirName(uint32_t server);  // "server-00003"
std::string SparseFileName(uint32_t table_id, uint32_t shard);
std::string DenseFileName(uint32_t table_id);

disk::RowContent ContentOf(disk::SaveMode mode);

// The directory that a Save or Load request from the network may use: root/requested,
// lexically normalised (no "." components, no trailing '/'), for a `requested` that is a
// non-empty relative path without NUL bytes and without any ".." component, that names
// something below `root` (not root itself) and that stays below root after symlinks are
// resolved (std::filesystem::weakly_canonical of both; a symlink inside root that points
// elsewhere is refused). `root` is the operator's configured checkpoint root; when it is
// empty, remote saves and loads are disabled. Errors: InvalidArgument naming the request
// (and, for a disabled root, the server.checkpoint_root / server.save_dir setting); IOError
// when the paths cannot be resolved. The check is made now: a symlink created later inside
// root is not seen.
StatusOr<std::string> ConfineCheckpointPath(const std::string& root, const std::string& requested);

// Floats of one row's payload in a SparseRowBlock of `table` (schemas/checkpoint.fbs), from
// the layout the manifest records; for readers without the table (pserver_tool). The table
// side is RowAccessor::PayloadFloats; both follow the schema's formula.
uint32_t SavedPayloadFloats(const disk::TableEntry& table, disk::RowContent content, uint8_t flags);

// The newest complete checkpoint at or under `dir`, for a restart (pserver --resume): `dir`
// itself when it holds one (CURRENT, as server.save_dir does), else the immediate
// subdirectory whose committed checkpoint opens and was committed last (CURRENT's
// modification time). An empty string when there is none, or `dir` does not exist: the
// server then starts with fresh tables. Checkpoints that fail to open (a corrupt
// manifest) are skipped with a warning naming them.
StatusOr<std::string> FindLatestCheckpoint(const std::string& dir);

// An opened checkpoint: its verified manifest. Files are checked separately (VerifyFile),
// as readers usually do that in parallel.
class Checkpoint {
 public:
  // `dir` is a checkpoint directory (with CURRENT) or one version directory (with
  // MANIFEST). NotFound when neither exists; Corruption for a manifest that fails its
  // checksum, verification or consistency checks (file paths, a path listed twice, server
  // indices, row sums).
  static StatusOr<Checkpoint> Open(const std::string& dir);

  const disk::CheckpointManifest& manifest() const { return *file_.root<disk::CheckpointManifest>(); }
  const std::string& version_dir() const { return version_dir_; }
  std::string FilePath(const disk::FileEntry& file) const;
  // The table entry with this id, or null.
  const disk::TableEntry* table(uint32_t id) const;
  // Checks the file's size and CRC-32C against the manifest: Corruption naming the file and
  // both values, also for a file that is not a regular file (checkpoint_file.h); a file of
  // another size is refused before it is read.
  Status VerifyFile(const disk::FileEntry& file) const;
  // Corruption when two of `files` are one file on disk (a hard link, a symbolic link to a
  // directory): CheckManifest refuses a path listed twice, this the aliases it cannot see.
  // Files that cannot be found are skipped (VerifyFile names them).
  Status CheckDistinctFiles(const std::vector<const disk::FileEntry*>& files) const;

 private:
  Checkpoint(std::string version_dir, FlatBufferFile file)
      : version_dir_(std::move(version_dir)), file_(std::move(file)) {}
  std::string version_dir_;
  FlatBufferFile file_;
};

struct CommitSummary {
  uint64_t rows = 0;   // sparse rows in the checkpoint
  uint64_t bytes = 0;  // data file bytes
};

// Commits DIR/<version>.tmp as described above, after checking that every server in
// [0, num_servers) wrote its PART for this version and mode, with the same tables.
StatusOr<CommitSummary> CommitCheckpoint(const std::string& dir, const std::string& version, uint32_t num_servers,
                                         disk::SaveMode mode, const std::string& fleetps_version);

}  // namespace fleetps::server
