#include "common/config/heter_config.h"

#include <cctype>

namespace fleetps::config {

StatusOr<HeterTrainerOptions> LoadHeterTrainerYaml(const std::string& path) {
  HeterTrainerOptions o;
  ASSIGN_OR_RETURN(o.job, LoadTrainerYaml(path));
  ASSIGN_OR_RETURN(o.server, LoadServerYaml(path));
  o.job.sync_mode = SyncMode::kHeter;
  o.server.endpoints.clear();  // this role's endpoints come from the heter-trainer list
  o.server.index = 0;
  return o;
}

StatusOr<std::vector<uint32_t>> ParseUintList(const std::string& text, const std::string& what) {
  std::vector<uint32_t> out;
  std::string digits;
  auto flush = [&]() -> Status {
    if (digits.empty()) return Status::OK();
    if (digits.size() > 9) return Status::InvalidArgument(what + "='" + text + "': " + digits + " is too large");
    out.push_back(static_cast<uint32_t>(std::stoul(digits)));
    digits.clear();
    return Status::OK();
  };
  for (char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits.push_back(c);
    } else if (c == ',' || c == ' ' || c == '[' || c == ']' || c == '\t') {
      RETURN_IF_ERROR(flush());
    } else {
      return Status::InvalidArgument(what + "='" + text + "' is not a list of non-negative integers (e.g. [2, 1])");
    }
  }
  RETURN_IF_ERROR(flush());
  return out;
}

Status ApplyHeterTrainerEnv(const EnvLookup& env, HeterTrainerOptions* o) {
  if (auto role = env("TRAINING_ROLE"); role && *role != "HETER_TRAINER") {
    return Status::InvalidArgument("TRAINING_ROLE=" + *role + " but this is a heter-trainer (expected HETER_TRAINER)");
  }
  auto read_u32 = [&](const char* name, uint32_t* out) -> Status {
    auto v = env(name);
    if (!v) return Status::OK();
    ASSIGN_OR_RETURN(auto list, ParseUintList(*v, name));
    if (list.size() != 1) return Status::InvalidArgument(std::string(name) + "='" + *v + "' is not one integer");
    *out = list[0];
    return Status::OK();
  };
  auto read_list = [&](const char* name, std::vector<net::Endpoint>* out) -> Status {
    auto v = env(name);
    if (!v || v->empty()) return Status::OK();
    auto eps = net::ParseEndpointList(*v);
    if (!eps.ok()) return eps.status().WithContext(name);
    *out = *eps;
    return Status::OK();
  };
  RETURN_IF_ERROR(read_u32("PADDLE_TRAINERS_NUM", &o->job.trainers_num));
  RETURN_IF_ERROR(read_list("PADDLE_PSERVERS_IP_PORT_LIST", &o->job.pservers));
  ASSIGN_OR_RETURN(const char* all, HeterTrainerListEnv(env));
  if (all != nullptr) RETURN_IF_ERROR(read_list(all, &o->server.endpoints));
  RETURN_IF_ERROR(read_list("PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST", &o->previous));
  RETURN_IF_ERROR(read_list("PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", &o->next));
  RETURN_IF_ERROR(read_u32("STAGE_ID", &o->stage_id));
  RETURN_IF_ERROR(read_u32("STAGE_NUM", &o->stage_num));
  if (auto v = env("PADDLE_STAGE_TRAINERS_NUM"); v && !v->empty()) {
    ASSIGN_OR_RETURN(o->stage_trainers, ParseUintList(*v, "PADDLE_STAGE_TRAINERS_NUM"));
  }
  ASSIGN_OR_RETURN(const std::optional<std::string> device, HeterDeviceEnv(env));
  if (device) o->device = *device;
  if (auto v = env("FLEETPS_HETER_METRICS_PORT"); v && !v->empty()) {
    ASSIGN_OR_RETURN(auto port, ParseUintList(*v, "FLEETPS_HETER_METRICS_PORT"));
    if (port.size() != 1 || port[0] > 65535) {
      return Status::InvalidArgument("FLEETPS_HETER_METRICS_PORT='" + *v + "' is not a port number (1-65535, 0: off)");
    }
    o->metrics_port = static_cast<uint16_t>(port[0]);
  }
  if (auto v = env("FLEETPS_HETER_METRICS_BIND"); v && !v->empty()) o->metrics_bind = *v;
  if (auto v = env("FLAGS_selected_gpus"); v && !v->empty()) {
    ASSIGN_OR_RETURN(auto gpus, ParseUintList(*v, "FLAGS_selected_gpus"));
    o->gpus.assign(gpus.begin(), gpus.end());
  }
  auto pod_ip = env("POD_IP");
  auto port = env("PADDLE_PORT");
  if (pod_ip.has_value() != port.has_value()) {
    return Status::InvalidArgument("set both POD_IP and PADDLE_PORT (or neither) to name this heter-trainer");
  }
  if (pod_ip) {
    auto self = net::ParseEndpoint(*pod_ip + ":" + *port);
    if (!self.ok()) return self.status().WithContext("POD_IP/PADDLE_PORT");
    if (o->server.endpoints.empty()) o->server.endpoints = {*self};
    bool found = false;
    for (size_t i = 0; i < o->server.endpoints.size() && !found; ++i) {
      if (o->server.endpoints[i] == *self) {
        o->server.index = static_cast<uint32_t>(i);
        found = true;
      }
    }
    if (!found) {
      std::string list;
      for (const auto& e : o->server.endpoints) list += (list.empty() ? "" : ",") + e.ToString();
      return Status::InvalidArgument("POD_IP:PADDLE_PORT = " + self->ToString() + " is not in " +
                                     (all != nullptr ? all : "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST") + " [" + list +
                                     "] (the list must name every heter-trainer, this one included)");
    }
  }
  if (auto level = env("FLEETPS_LOG_LEVEL")) o->job.log_level = *level;
  ApplySecurityEnv(env, &o->server);
  return Status::OK();
}

Status ValidateHeterTrainerOptions(const HeterTrainerOptions& o) {
  if (o.job.pservers.empty()) {
    return Status::InvalidArgument(
        "a heter-trainer needs the pservers (PADDLE_PSERVERS_IP_PORT_LIST): it pushes the dense gradients there");
  }
  if (o.job.trainers_num == 0) return Status::InvalidArgument("PADDLE_TRAINERS_NUM must be >= 1");
  if (o.server.endpoints.empty()) {
    return Status::InvalidArgument("set POD_IP and PADDLE_PORT (or --endpoint) to name this heter-trainer");
  }
  if (o.stage_num != 2) {
    return Status::InvalidArgument(
        "STAGE_NUM=" + std::to_string(o.stage_num) +
        ": fleetps runs two stages (the cpu-trainers, then one heter stage); set STAGE_NUM=2");
  }
  if (o.stage_id != 2) {
    return Status::InvalidArgument("STAGE_ID=" + std::to_string(o.stage_id) +
                                   ": a heter-trainer is stage 2 (stage 1 is the cpu-trainers)");
  }
  if (!o.next.empty()) {
    return Status::InvalidArgument(
        "PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST is set, but the heter stage is the last one (fleetps runs two stages)");
  }
  if (!o.stage_trainers.empty()) {
    if (o.stage_trainers.size() != o.stage_num) {
      return Status::InvalidArgument("PADDLE_STAGE_TRAINERS_NUM has " + std::to_string(o.stage_trainers.size()) +
                                     " entries but STAGE_NUM=" + std::to_string(o.stage_num));
    }
    if (o.stage_trainers[0] != o.job.trainers_num) {
      return Status::InvalidArgument("PADDLE_STAGE_TRAINERS_NUM[0]=" + std::to_string(o.stage_trainers[0]) +
                                     " but PADDLE_TRAINERS_NUM=" + std::to_string(o.job.trainers_num) +
                                     " (both count the cpu-trainers)");
    }
    if (o.stage_trainers[1] != o.server.endpoints.size()) {
      return Status::InvalidArgument("PADDLE_STAGE_TRAINERS_NUM[1]=" + std::to_string(o.stage_trainers[1]) +
                                     " but PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST names " +
                                     std::to_string(o.server.endpoints.size()) + " heter-trainers");
    }
  }
  if (o.device != "auto" && o.device != "cpu" && o.device != "gpu") {
    return Status::InvalidArgument("HETER_DEVICE_TYPE='" + o.device + "': use gpu or cpu");
  }
  if (o.gpus.empty()) return Status::InvalidArgument("FLAGS_selected_gpus is empty");
  return Status::OK();
}

}  // namespace fleetps::config
