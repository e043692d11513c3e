#include "common/config/trainer_config.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <stdexcept>

#include "common/config/heter_config.h"
#include "common/config/yaml_util.h"

namespace fleetps::config {

Status ApplyTrainerEnv(const EnvLookup& env, TrainerOptions* o) {
  if (auto role = env("TRAINING_ROLE"); role && *role != "TRAINER") {
    return Status::InvalidArgument("TRAINING_ROLE=" + *role + " but this is a trainer (expected TRAINER)");
  }
  auto read_u32 = [&](const char* name, uint32_t* out) -> Status {
    auto v = env(name);
    if (!v) return Status::OK();
    try {
      size_t pos = 0;
      const unsigned long x = std::stoul(*v, &pos);
      if (pos != v->size() || x > UINT32_MAX) throw std::invalid_argument("range");
      *out = static_cast<uint32_t>(x);
    } catch (const std::exception&) {
      return Status::InvalidArgument(std::string(name) + "='" + *v + "' is not a non-negative integer");
    }
    return Status::OK();
  };
  RETURN_IF_ERROR(read_u32("PADDLE_TRAINERS_NUM", &o->trainers_num));
  RETURN_IF_ERROR(read_u32("PADDLE_TRAINER_ID", &o->trainer_id));
  if (auto list = env("PADDLE_PSERVERS_IP_PORT_LIST"); list && !list->empty()) {
    auto eps = net::ParseEndpointList(*list);
    if (!eps.ok()) return eps.status().WithContext("PADDLE_PSERVERS_IP_PORT_LIST");
    o->pservers = *eps;
  }
  if (auto level = env("FLEETPS_LOG_LEVEL")) o->log_level = *level;
  if (auto list = env("PADDLE_TRAINER_ENDPOINTS"); list && !list->empty()) {
    auto eps = net::ParseEndpointList(*list);
    if (!eps.ok()) return eps.status().WithContext("PADDLE_TRAINER_ENDPOINTS");
    o->trainer_endpoints = *eps;
    if (!env("PADDLE_TRAINERS_NUM")) o->trainers_num = static_cast<uint32_t>(eps->size());
    // In gpubox mode the endpoints name the nodes whose devices all-reduce the dense part.
    if (eps->size() > 1 && o->sync_mode != SyncMode::kGpuBox) o->sync_mode = SyncMode::kCollective;
    if (auto current = env("PADDLE_CURRENT_ENDPOINT"); current && !current->empty()) {
      auto self = net::ParseEndpoint(*current);
      if (!self.ok()) return self.status().WithContext("PADDLE_CURRENT_ENDPOINT");
      auto it = std::find(eps->begin(), eps->end(), *self);
      if (it == eps->end()) {
        return Status::InvalidArgument("PADDLE_CURRENT_ENDPOINT=" + *current + " is not in PADDLE_TRAINER_ENDPOINTS");
      }
      if (!env("PADDLE_TRAINER_ID")) o->trainer_id = static_cast<uint32_t>(it - eps->begin());
      if (o->trainer_id != static_cast<uint32_t>(it - eps->begin())) {
        return Status::InvalidArgument("PADDLE_CURRENT_ENDPOINT=" + *current + " is entry " +
                                       std::to_string(it - eps->begin()) +
                                       " of PADDLE_TRAINER_ENDPOINTS but "
                                       "PADDLE_TRAINER_ID=" +
                                       std::to_string(o->trainer_id));
      }
    }
  }
  if (auto v = env("FLAGS_selected_gpus"); v && !v->empty()) {
    ASSIGN_OR_RETURN(auto devices, ParseUintList(*v, "FLAGS_selected_gpus"));
    o->gpups.devices.assign(devices.begin(), devices.end());
    o->collective.gpu = o->gpups.devices.front();
  }
  if (auto v = env("PADDLE_DISTRI_BACKEND"); v && !v->empty()) {
    if (!ParseCollectiveBackend(*v, &o->collective.backend)) {
      return Status::InvalidArgument("PADDLE_DISTRI_BACKEND=" + *v + ": use auto, gloo or nccl");
    }
  }
  ASSIGN_OR_RETURN(const std::optional<std::string> device, HeterDeviceEnv(env));
  if (device) o->gpups.device = *device;
  if (o->gpubox_mode()) return Status::OK();  // a GPU-PS trainer has no heter stage
  return ApplyHeterEndpointsEnv(env, o);
}

StatusOr<const char*> HeterTrainerListEnv(const EnvLookup& env) {
  return EnvNameOrAlias(env, "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", "PADDLE_HETER_TRAINER_IP_PORT_LIST");
}

StatusOr<std::optional<std::string>> HeterDeviceEnv(const EnvLookup& env) {
  ASSIGN_OR_RETURN(const char* name, EnvNameOrAlias(env, "HETER_DEVICE_TYPE", "PADDLE_HETER_TRAINER_DEVICE"));
  if (name == nullptr) return std::optional<std::string>();
  return env(name);
}

Status ApplyHeterEndpointsEnv(const EnvLookup& env, TrainerOptions* o) {
  ASSIGN_OR_RETURN(const char* all, HeterTrainerListEnv(env));
  for (const char* name : {"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", all}) {
    if (name == nullptr) continue;
    auto list = env(name);
    if (!list || list->empty()) continue;
    auto eps = net::ParseEndpointList(*list);
    if (!eps.ok()) return eps.status().WithContext(name);
    o->heter_trainers = *eps;
    o->sync_mode = SyncMode::kHeter;
    break;
  }
  return Status::OK();
}

Status ValidateTrainerOptions(const TrainerOptions& o) {
  if (o.online.enabled() && o.epochs != 1) {
    return Status::InvalidArgument(
        "an online job (runner.days) trains each pass's data once: leave out runner.epochs "
        "and --epochs (got " +
        std::to_string(o.epochs) + ")");
  }
  if (o.trainers_num == 0) return Status::InvalidArgument("PADDLE_TRAINERS_NUM must be >= 1");
  if (o.trainer_id >= o.trainers_num) {
    return Status::InvalidArgument("PADDLE_TRAINER_ID=" + std::to_string(o.trainer_id) +
                                   " must be below PADDLE_TRAINERS_NUM=" + std::to_string(o.trainers_num));
  }
  if (o.heter_mode() && o.heter_trainers.empty()) {
    return Status::InvalidArgument(
        "sync_mode heter needs the heter-trainers' endpoints: set PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST "
        "(or --heter-trainers)");
  }
  if (o.heter_mode() && o.local()) {
    return Status::InvalidArgument(
        "heterogeneous training needs pservers (PADDLE_PSERVERS_IP_PORT_LIST): the heter-trainers push the dense "
        "gradients to them");
  }
  if (o.gpubox_mode()) {
    if (o.local()) {
      return Status::InvalidArgument(
          "sync_mode gpubox pulls each pass's rows from pservers and writes them back: set "
          "PADDLE_PSERVERS_IP_PORT_LIST");
    }
    if (o.model.type != ModelType::kCtrDnn) {
      return Status::InvalidArgument("sync_mode gpubox trains sparse embeddings: use the ctr_dnn model");
    }
    if (o.gpups.devices.empty() || o.gpups.devices.size() > 64) {
      return Status::InvalidArgument("FLAGS_selected_gpus must name 1 to 64 devices");
    }
    if (o.gpups.passes_per_epoch > 1 && o.data.dataset != DatasetKind::kInMemory) {
      return Status::InvalidArgument("fleetps.gpups.passes_per_epoch " + std::to_string(o.gpups.passes_per_epoch) +
                                     " splits the records in memory into passes: set runner.reader_type: "
                                     "InMemoryDataset (or passes_per_epoch: 1)");
    }
    if (o.gpups.device != "gpu" && o.gpups.device != "cpu" && o.gpups.device != "auto") {
      return Status::InvalidArgument("HETER_DEVICE_TYPE='" + o.gpups.device + "': use gpu or cpu");
    }
    const bool single = o.trainer_endpoints.empty() && o.trainers_num == 1;
    if (!single && o.trainer_endpoints.size() != o.trainers_num) {
      return Status::InvalidArgument("sync_mode gpubox with " + std::to_string(o.trainers_num) +
                                     " trainers all-reduces the dense part across the nodes: "
                                     "PADDLE_TRAINER_ENDPOINTS must name one endpoint per trainer (it names " +
                                     std::to_string(o.trainer_endpoints.size()) + ")");
    }
    return Status::OK();
  }
  if (o.collective_mode()) {
    // No endpoints: a single, non-distributed run (world size 1).
    const bool single = o.trainer_endpoints.empty() && o.trainers_num == 1;
    if (!single && o.trainer_endpoints.size() != o.trainers_num) {
      return Status::InvalidArgument("collective training: PADDLE_TRAINER_ENDPOINTS names " +
                                     std::to_string(o.trainer_endpoints.size()) +
                                     " ranks but PADDLE_TRAINERS_NUM=" + std::to_string(o.trainers_num));
    }
    if (o.worker_threads != 1) {
      return Status::InvalidArgument("collective training runs one worker thread per rank (runner.thread_num is " +
                                     std::to_string(o.worker_threads) + "); start more ranks instead");
    }
    if (o.local() && HasSparseSlots(o.model)) {
      return Status::InvalidArgument(ModelTypeName(o.model.type) +
                                     " in collective mode keeps its embeddings on pservers (the hybrid): set "
                                     "PADDLE_PSERVERS_IP_PORT_LIST, or train an mlp");
    }
    return Status::OK();
  }
  if (o.local() && o.trainers_num > 1) {
    return Status::InvalidArgument("PADDLE_TRAINERS_NUM=" + std::to_string(o.trainers_num) +
                                   " needs PADDLE_PSERVERS_IP_PORT_LIST (local training has one trainer)");
  }
  return Status::OK();
}

}  // namespace fleetps::config
