#include "trainer/data/file_list.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "common/check.h"

namespace fleetps::data {

namespace fs = std::filesystem;

StatusOr<std::vector<std::string>> ExpandFileList(const std::vector<std::string>& paths, std::string_view skip_name) {
  std::vector<std::string> files;
  for (const auto& path : paths) {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (ec || !fs::exists(status)) return Status::NotFound(path + ": no such data file or directory");
    if (!fs::is_directory(status)) {
      files.push_back(path);
      continue;
    }
    std::vector<std::string> dir_files;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const bool hidden = name.starts_with('.') || name.starts_with('_') || (!skip_name.empty() && name == skip_name);
      if (!hidden && it->is_regular_file(ec)) dir_files.push_back(it->path().string());
    }
    if (ec) return Status::IOError(path + ": cannot list data directory: " + ec.message());
    if (dir_files.empty()) return Status::InvalidArgument(path + ": data directory has no data files");
    std::sort(dir_files.begin(), dir_files.end());
    files.insert(files.end(), dir_files.begin(), dir_files.end());
  }
  return files;
}

std::vector<std::string> FilesOfTrainer(const std::vector<std::string>& files, uint32_t trainer_id,
                                        uint32_t trainers_num) {
  FLEETPS_CHECK_GE(trainers_num, 1u);
  FLEETPS_CHECK_LT(trainer_id, trainers_num);
  std::vector<std::string> mine;
  for (size_t i = trainer_id; i < files.size(); i += trainers_num) mine.push_back(files[i]);
  return mine;
}

StatusOr<std::vector<std::string>> ListTrainerFiles(const std::vector<std::string>& paths, bool split_file_list,
                                                    uint32_t trainer_id, uint32_t trainers_num,
                                                    std::string_view skip_name) {
  ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandFileList(paths, skip_name));
  if (!split_file_list) return files;
  return FilesOfTrainer(files, trainer_id, trainers_num);
}

}  // namespace fleetps::data
