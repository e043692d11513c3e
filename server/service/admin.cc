#include "server/service/ps_service.h"

#include <chrono>
#include <filesystem>
#include <optional>

#include "server/checkpoint/checkpoint_dir.h"
#include <spdlog/spdlog.h>

#include "schemas/ps_generated.h"
#include "common/net/handler_util.h"

namespace fleetps::server {

using wire::MessageType;

namespace {
double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

// Admin operations: Stop, Save, Load, Shrink, and the confinement of their paths.

StatusOr<std::string> PsService::RequestPath(const std::string& op, const std::string& requested) const {
  namespace fs = std::filesystem;
  // '..' is refused outright, even where it would lead back inside a root.
  for (const fs::path& part : fs::path(requested)) {
    if (part == "..") {
      return Status::InvalidArgument(op + " on " + Where() + ": checkpoint path '" + requested +
                                     "' refused: '..' is not allowed in a checkpoint path (name a "
                                     "directory below the checkpoint root)");
    }
  }
  Status first;
  for (const std::string& root : checkpoint_roots_) {
    std::string candidate = requested;
    if (fs::path(requested).is_absolute()) {
      const fs::path rel = fs::path(requested).lexically_normal().lexically_relative(fs::path(root).lexically_normal());
      if (rel.empty() || *rel.begin() == "..") {
        if (first.ok()) first = Status::InvalidArgument("'" + requested + "' is not inside " + root);
        continue;
      }
      candidate = rel.string();
    }
    auto confined = ConfineCheckpointPath(root, candidate);
    if (confined.ok()) return confined;
    if (first.ok()) first = confined.status();
  }
  if (checkpoint_roots_.empty()) return ConfineCheckpointPath("", requested).status().WithContext(op);
  std::string roots;
  for (const auto& r : checkpoint_roots_) roots += (roots.empty() ? "" : ", ") + r;
  return Status::PermissionDenied(op + " on " + Where() + ": " + first.message() + " (checkpoint roots: " + roots +
                                  "; name a directory below one, or set server.checkpoint_root)");
}

void PsService::Stop(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::StopRequest>(req, responder);
  if (msg == nullptr) return;
  const std::string reason = msg->reason() ? msg->reason()->str() : std::string("stop requested");
  flatbuffers::FlatBufferBuilder fbb(32);
  fbb.Finish(wire::CreateStopReply(fbb));
  responder.Send(net::ReplyType(MessageType::Stop), fbb.Release());
  if (!stop_requested_.exchange(true)) {
    spdlog::info("stop requested by {}: {}", responder.peer(), reason);
    on_stop_(reason);
  }
}

// ---- storage commands -----------------------------------------------------------------

void PsService::Save(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::SaveRequest>(req, responder);
  if (msg == nullptr) return;
  SaveSpec spec;
  auto dir = RequestPath("Save", msg->path() ? msg->path()->str() : std::string());
  if (!dir.ok()) return responder.SendError(dir.status());
  spec.dir = *dir;
  spec.version = msg->version() ? msg->version()->str() : std::string();
  spec.mode = msg->mode();
  if (!msg->all_tables()) spec.table_id = msg->table_id();
  if (static_cast<uint8_t>(spec.mode) > static_cast<uint8_t>(disk::SaveMode::Batch)) {
    return responder.SendError(Status::InvalidArgument("Save: unknown mode " +
                                                       std::to_string(static_cast<int>(spec.mode)) +
                                                       " (use 0 checkpoint, 1 delta, 2 base, 3 batch)"));
  }
  auto reply = [responder, version = spec.version](StatusOr<SaveOutcome> result) {
    if (!result.ok()) return responder.SendError(result.status());
    flatbuffers::FlatBufferBuilder fbb(128);
    fbb.Finish(wire::CreateSaveReply(fbb, result->rows, result->bytes, fbb.CreateString(version)));
    responder.Send(net::ReplyType(MessageType::Save), fbb.Release());
  };
  if (msg->commit()) {
    if (options_.index != 0) {
      return responder.SendError(
          Status::InvalidArgument("Save commit sent to " + Where() + "; commits go to pserver 0"));
    }
    return checkpoints_.Commit(spec.dir, spec.version, spec.mode, reply);
  }
  const auto started = std::chrono::steady_clock::now();
  checkpoints_.SavePart(spec, [this, reply, spec, started, where = Where()](StatusOr<SaveOutcome> result) {
    auto& c = checkpoint_counters_;
    if (result.ok()) {
      c.saves.fetch_add(1);
      c.saved_rows.fetch_add(result->rows);
      c.saved_bytes.fetch_add(result->bytes);
      c.last_save_seconds.store(SecondsSince(started));
      c.last_save_bytes.store(result->bytes);
      c.last_save_rows.store(result->rows);
    } else {
      c.save_failures.fetch_add(1);
    }
    if (result.ok()) {
      spdlog::info("{}: saved its part of {}/{} (mode {}): {} sparse rows, {} bytes", where, spec.dir, spec.version,
                   disk::EnumNameSaveMode(spec.mode), result->rows, result->bytes);
    }
    reply(std::move(result));
  });
}

void PsService::Load(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::LoadRequest>(req, responder);
  if (msg == nullptr) return;
  auto confined = RequestPath("Load", msg->path() ? msg->path()->str() : std::string());
  if (!confined.ok()) return responder.SendError(confined.status());
  const std::string dir = *confined;
  const auto started = std::chrono::steady_clock::now();
  checkpoints_.Load(dir, [this, responder, dir, started, where = Where()](StatusOr<LoadOutcome> result) {
    auto& c = checkpoint_counters_;
    if (!result.ok()) {
      c.load_failures.fetch_add(1);
      return responder.SendError(result.status());
    }
    c.loads.fetch_add(1);
    c.loaded_rows.fetch_add(result->rows);
    c.last_load_seconds.store(SecondsSince(started));
    c.last_load_rows.store(result->rows);
    spdlog::info("{}: loaded {} (version {}, mode {}): {} sparse rows", where, dir, result->version,
                 disk::EnumNameSaveMode(result->mode), result->rows);
    flatbuffers::FlatBufferBuilder fbb(128);
    fbb.Finish(wire::CreateLoadReply(fbb, result->rows, fbb.CreateString(result->version), result->mode));
    responder.Send(net::ReplyType(MessageType::Load), fbb.Release());
  });
}

void PsService::Shrink(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::ShrinkRequest>(req, responder);
  if (msg == nullptr) return;
  std::optional<uint32_t> table_id;
  if (!msg->all_tables()) table_id = msg->table_id();
  checkpoints_.Shrink(table_id, [responder, where = Where()](StatusOr<ShrinkOutcome> result) {
    if (!result.ok()) return responder.SendError(result.status().WithContext("Shrink on " + where));
    spdlog::info("{}: shrink deleted {} rows, {} left", where, result->deleted, result->rows);
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreateShrinkReply(fbb, result->deleted, result->rows));
    responder.Send(net::ReplyType(MessageType::Shrink), fbb.Release());
  });
}

}  // namespace fleetps::server
