#pragma once
// Data file lists: expanding configured paths into files and splitting them across
// trainers.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fleetps::data {

// Expands `paths` in order: a regular file stays as is; a directory stands for the regular
// files directly inside it (not recursive; names starting with '.' or '_' skipped, as
// Hadoop's input formats skip them: done markers, _SUCCESS, .crc files) sorted by name.
// NotFound names a missing path; InvalidArgument names a directory without data files.
// `skip_name` (not empty): files of that name inside a directory are skipped too (an
// online job's data_donefile).
StatusOr<std::vector<std::string>> ExpandFileList(const std::vector<std::string>& paths,
                                                  std::string_view skip_name = {});

// The share of trainer `trainer_id` of `trainers_num` (>= 1): file i goes to trainer
// i % trainers_num, in order. A trainer may get no file when files < trainers.
std::vector<std::string> FilesOfTrainer(const std::vector<std::string>& files, uint32_t trainer_id,
                                        uint32_t trainers_num);

// ExpandFileList(paths), then FilesOfTrainer when `split_file_list`
// (DataOptions::split_file_list); otherwise every trainer gets every file.
StatusOr<std::vector<std::string>> ListTrainerFiles(const std::vector<std::string>& paths, bool split_file_list,
                                                    uint32_t trainer_id, uint32_t trainers_num,
                                                    std::string_view skip_name = {});

}  // namespace fleetps::data
