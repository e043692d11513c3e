#include "common/config/trainer_config_sections.h"

#include <optional>

#include "common/config/optimizer_config.h"
#include "common/config/server_config.h"
#include "common/config/yaml_util.h"

namespace fleetps::config {

namespace {

// fleetps.sparse_table / fleetps.dense_table: overrides of the derived tables.
Status ParseTableOverride(const YAML::Node& node, const YamlContext& ctx, bool dense, TableOptions* t) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map");
  std::vector<std::string> keys = {"id", "name", "optimizer", "initializer"};
  if (!dense) keys.insert(keys.end(), {"shards", "create_on_pull", "accessor", "memory_budget_bytes"});
  RETURN_IF_ERROR(RejectUnknownKeys(node, keys, ctx));
  RETURN_IF_ERROR(ReadUint32(node, "id", ctx, &t->id));
  RETURN_IF_ERROR(ReadString(node, "name", ctx, &t->name));
  if (!dense) {
    RETURN_IF_ERROR(ReadUint32(node, "shards", ctx, &t->shards));
    RETURN_IF_ERROR(ReadBool(node, "create_on_pull", ctx, &t->create_on_pull));
    RETURN_IF_ERROR(ReadUint64(node, "memory_budget_bytes", ctx, &t->memory_budget_bytes));
    if (node["accessor"]) RETURN_IF_ERROR(ParseAccessor(node["accessor"], ctx.Child("accessor"), &t->accessor));
  }
  if (node["optimizer"]) RETURN_IF_ERROR(ParseOptimizer(node["optimizer"], ctx.Child("optimizer"), &t->optimizer));
  if (node["initializer"]) {
    RETURN_IF_ERROR(ParseInitializer(node["initializer"], ctx.Child("initializer"), &t->initializer));
  }
  return Status::OK();
}

// `cuda_wait` of a map (fleetps.heter, fleetps.gpups), when present.
Status ReadCudaWait(const YAML::Node& map, const YamlContext& ctx, CudaWait* out) {
  return ReadChoice(
      map, "cuda_wait", ctx,
      {{"auto", CudaWait::kAuto}, {"spin", CudaWait::kSpin}, {"yield", CudaWait::kYield}, {"block", CudaWait::kBlock}},
      out);
}

// fleetps.dense: the CPU dense backend.
Status ParseDense(const YAML::Node& node, const YamlContext& ctx, dense::CpuGemmOptions* out) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map");
  RETURN_IF_ERROR(RejectUnknownKeys(node, {"precision", "max_isa"}, ctx));
  RETURN_IF_ERROR(ReadChoice(node, "precision", ctx,
                             {{"fp32", dense::Precision::kFp32}, {"bf16", dense::Precision::kBf16}}, &out->precision));
  using Isa = std::optional<dense::IsaLevel>;
  return ReadChoice<Isa>(node, "max_isa", ctx,
                         {{"auto", std::nullopt},
                          {"generic", dense::IsaLevel::kGeneric},
                          {"avx2", dense::IsaLevel::kAvx2},
                          {"avx512", dense::IsaLevel::kAvx512},
                          {"avx512_bf16", dense::IsaLevel::kAvx512Bf16},
                          {"amx", dense::IsaLevel::kAmx}},
                         &out->max_isa);
}

// fleetps.heter: heterogeneous training.
Status ParseHeter(const YAML::Node& node, const YamlContext& ctx, HeterOptions* h) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map");
  RETURN_IF_ERROR(RejectUnknownKeys(node,
                                    {"route", "inflight", "timeout_ms", "failover", "failover_probe_ms", "lanes",
                                     "dense_sync", "allreduce_port", "allreduce_interval_ms", "cuda_wait"},
                                    ctx));
  RETURN_IF_ERROR(ReadChoice(node, "route", ctx,
                             {{"round_robin", HeterRoute::kRoundRobin}, {"trainer_id", HeterRoute::kTrainerId}},
                             &h->route));
  RETURN_IF_ERROR(ReadUint32(node, "inflight", ctx, &h->inflight));
  RETURN_IF_ERROR(ReadUint32(node, "timeout_ms", ctx, &h->timeout_ms));
  RETURN_IF_ERROR(ReadBool(node, "failover", ctx, &h->failover));
  RETURN_IF_ERROR(ReadUint32(node, "failover_probe_ms", ctx, &h->failover_probe_ms));
  if (h->failover_probe_ms < 100 || h->failover_probe_ms > 600000) {
    return ctx.Child("failover_probe_ms").Error(node["failover_probe_ms"], "must be in [100, 600000]");
  }
  RETURN_IF_ERROR(ReadUint32(node, "lanes", ctx, &h->lanes));
  RETURN_IF_ERROR(ReadCudaWait(node, ctx, &h->cuda_wait));
  if (h->inflight == 0 || h->inflight > 64) return ctx.Child("inflight").Error(node["inflight"], "must be in [1, 64]");
  if (h->lanes == 0 || h->lanes > 64) return ctx.Child("lanes").Error(node["lanes"], "must be in [1, 64]");
  if (h->timeout_ms < 100) return ctx.Child("timeout_ms").Error(node["timeout_ms"], "must be >= 100");
  RETURN_IF_ERROR(ReadChoice(node, "dense_sync", ctx,
                             {{"pserver", HeterDenseSync::kPserver}, {"allreduce", HeterDenseSync::kAllreduce}},
                             &h->dense_sync));
  uint32_t port = h->allreduce_port;
  RETURN_IF_ERROR(ReadUint32(node, "allreduce_port", ctx, &port));
  if (port > 65535) return ctx.Child("allreduce_port").Error(node["allreduce_port"], "must be a port, [1, 65535]");
  h->allreduce_port = static_cast<uint16_t>(port);
  RETURN_IF_ERROR(ReadUint32(node, "allreduce_interval_ms", ctx, &h->allreduce_interval_ms));
  if (h->allreduce_interval_ms == 0 || h->allreduce_interval_ms > 60000) {
    return ctx.Child("allreduce_interval_ms").Error(node["allreduce_interval_ms"], "must be in [1, 60000]");
  }
  if (h->dense_sync == HeterDenseSync::kAllreduce && h->failover) {
    return ctx.Child("failover")
        .Error(node["failover"],
               "failover needs dense_sync: pserver (with allreduce the heter-trainers "
               "all-reduce among themselves, so losing one stops the others)");
  }
  if (h->dense_sync == HeterDenseSync::kAllreduce && h->allreduce_port == 0) {
    return ctx.Child("allreduce_port")
        .Error(node["dense_sync"],
               "dense_sync allreduce needs allreduce_port: a free port on heter-trainer "
               "0's host for the heter-trainers' rendezvous");
  }
  return Status::OK();
}

// fleetps.collective: data-parallel training.
Status ParseCollective(const YAML::Node& node, const YamlContext& ctx, DataParallelOptions* c) {
  if (!node.IsMap()) return ctx.Error(node, "expected a map");
  RETURN_IF_ERROR(RejectUnknownKeys(node,
                                    {"fuse_grad_size_in_MB", "lr_scaling", "warmup_steps", "overlap", "drop_last",
                                     "timeout_ms", "backend", "store_budget_bytes"},
                                    ctx));
  std::string backend(CollectiveBackendName(c->backend));
  RETURN_IF_ERROR(ReadString(node, "backend", ctx, &backend));
  if (!ParseCollectiveBackend(backend, &c->backend)) {
    return ctx.Child("backend").Error(node["backend"], "unknown backend '" + backend + "' (use auto, gloo or nccl)");
  }
  RETURN_IF_ERROR(ReadUint32(node, "fuse_grad_size_in_MB", ctx, &c->fuse_grad_size_mb));
  RETURN_IF_ERROR(ReadChoice(node, "lr_scaling", ctx,
                             {{"auto", LrScaling::kAuto},
                              {"linear", LrScaling::kLinear},
                              {"sqrt", LrScaling::kSqrt},
                              {"none", LrScaling::kNone}},
                             &c->lr_scaling));
  RETURN_IF_ERROR(ReadUint32(node, "warmup_steps", ctx, &c->warmup_steps));
  RETURN_IF_ERROR(ReadBool(node, "overlap", ctx, &c->overlap));
  RETURN_IF_ERROR(ReadBool(node, "drop_last", ctx, &c->drop_last));
  RETURN_IF_ERROR(ReadUint32(node, "timeout_ms", ctx, &c->timeout_ms));
  RETURN_IF_ERROR(ReadUint64(node, "store_budget_bytes", ctx, &c->store_budget_bytes));
  if (c->store_budget_bytes != 0 && c->store_budget_bytes < 4096) {
    return ctx.Child("store_budget_bytes").Error(node["store_budget_bytes"], "must be 0 (auto) or >= 4096");
  }
  if (c->fuse_grad_size_mb == 0 || c->fuse_grad_size_mb > 1024) {
    return ctx.Child("fuse_grad_size_in_MB").Error(node["fuse_grad_size_in_MB"], "must be in [1, 1024]");
  }
  if (c->timeout_ms < 100) return ctx.Child("timeout_ms").Error(node["timeout_ms"], "must be >= 100");
  return Status::OK();
}

// fleetps.gpups: the GPU-PS pass table and its workers.
Status ParseGpups(const YAML::Node& g, const YamlContext& gctx, GpuPsOptions* gpups) {
  if (!g.IsMap()) return gctx.Error(g, "expected a map");
  RETURN_IF_ERROR(RejectUnknownKeys(
      g, {"cuda_wait", "device_memory_mb", "merge", "passes_per_epoch", "prefetch", "workers_per_device"}, gctx));
  RETURN_IF_ERROR(ReadUint64(g, "device_memory_mb", gctx, &gpups->device_memory_mb));
  RETURN_IF_ERROR(ReadUint32(g, "passes_per_epoch", gctx, &gpups->passes_per_epoch));
  if (gpups->passes_per_epoch == 0) {
    return gctx.Child("passes_per_epoch").Error(g["passes_per_epoch"], "must be >= 1");
  }
  RETURN_IF_ERROR(ReadUint32(g, "workers_per_device", gctx, &gpups->workers_per_device));
  if (gpups->workers_per_device == 0 || gpups->workers_per_device > 64) {
    return gctx.Child("workers_per_device").Error(g["workers_per_device"], "must be 1 to 64");
  }
  RETURN_IF_ERROR(ReadChoice(g, "merge", gctx, {{"add", false}, {"average", true}}, &gpups->average_merge));
  RETURN_IF_ERROR(ReadChoice<std::optional<bool>>(
      g, "prefetch", gctx, {{"auto", std::nullopt}, {"true", true}, {"false", false}}, &gpups->prefetch));
  RETURN_IF_ERROR(ReadCudaWait(g, gctx, &gpups->cuda_wait));
  return Status::OK();
}

}  // namespace

Status ParseFleetpsSection(const YAML::Node& ext, const YamlContext& ectx, TrainerOptions* out) {
  TrainerOptions& o = *out;
  if (!ext.IsMap()) return ectx.Error(ext, "expected a map");
  RETURN_IF_ERROR(RejectUnknownKeys(ext,
                                    {"sparse_table", "dense_table", "stop_servers_at_end", "barrier_timeout_ms",
                                     "dense_pull_interval", "max_merge_steps", "local_shards", "log_level",
                                     "save_every_epoch", "server", "heter", "collective", "gpups", "dense", "prefetch"},
                                    ectx));
  if (ext["sparse_table"]) {
    RETURN_IF_ERROR(ParseTableOverride(ext["sparse_table"], ectx.Child("sparse_table"), false, &o.sparse_table));
  }
  if (ext["dense_table"]) {
    RETURN_IF_ERROR(ParseTableOverride(ext["dense_table"], ectx.Child("dense_table"), true, &o.dense_table));
  }
  RETURN_IF_ERROR(ReadBool(ext, "stop_servers_at_end", ectx, &o.stop_servers_at_end));
  RETURN_IF_ERROR(ReadUint32(ext, "barrier_timeout_ms", ectx, &o.barrier_timeout_ms));
  RETURN_IF_ERROR(ReadUint32(ext, "dense_pull_interval", ectx, &o.dense_pull_interval));
  RETURN_IF_ERROR(ReadUint32(ext, "max_merge_steps", ectx, &o.max_merge_steps));
  RETURN_IF_ERROR(ReadUint32(ext, "local_shards", ectx, &o.local_shards));
  RETURN_IF_ERROR(ReadString(ext, "log_level", ectx, &o.log_level));
  RETURN_IF_ERROR(ReadBool(ext, "save_every_epoch", ectx, &o.save_every_epoch));
  if (ext["heter"]) RETURN_IF_ERROR(ParseHeter(ext["heter"], ectx.Child("heter"), &o.heter));
  if (ext["collective"]) {
    RETURN_IF_ERROR(ParseCollective(ext["collective"], ectx.Child("collective"), &o.collective));
  }
  if (ext["gpups"]) RETURN_IF_ERROR(ParseGpups(ext["gpups"], ectx.Child("gpups"), &o.gpups));
  if (ext["dense"]) RETURN_IF_ERROR(ParseDense(ext["dense"], ectx.Child("dense"), &o.dense));
  RETURN_IF_ERROR(ReadChoice<std::optional<bool>>(
      ext, "prefetch", ectx, {{"auto", std::nullopt}, {"true", true}, {"false", false}}, &o.prefetch));
  if (ext["server"]) {
    // The pservers' options (ParseServerYaml reads them from this file); checked here too
    // so that a trainer, local mode included, refuses a config its pservers would refuse.
    ServerOptions unused;
    RETURN_IF_ERROR(ParseServerSection(ext["server"], ectx.Child("server"), &unused));
  }
  if (o.dense_pull_interval == 0 || o.max_merge_steps == 0) {
    return ectx.Error(ext, "dense_pull_interval and max_merge_steps must be >= 1");
  }
  return Status::OK();
}

}  // namespace fleetps::config
