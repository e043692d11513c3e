#pragma once
// DataOptions: how the trainer reads its training data (format, slots, files, batching,
// dataset kind), parsed from YAML by ParseDataOptions.
//
// Key names follow the PaddleRec `runner:` section where PaddleRec has one
// (train_data_dir, test_data_dir, train_batch_size, infer_batch_size, thread_num,
// reader_type, split_file_list) and the PaddleRec `hyper_parameters:` section for the
// shapes (dense_input_dim, sparse_inputs_slots, slot_num), so a PaddleRec rank_dnn or
// slot_dnn config is read as is. Keys PaddleRec does not have are fleetps extensions:
// data_format, label_slot, label_slots, dense_slot, sparse_slots, multislot_slots,
// skip_bad_lines, queue_capacity, shuffle, shuffle_seed, sampler, criteo_hash_dim.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/config/yaml_util.h"
#include "common/status.h"

namespace fleetps::config {

// Text line formats. Names are the YAML spellings (see DataFormatName).
enum class DataFormat : uint8_t {
  // PaddleRec rank_dnn: `<label slot>:<0|1>` per label slot (`click:1`, or
  // `click:1 conversion:0` with two) + dense_dim x `dense_feature:<float>` + `<slot>:<id>`
  // per sparse slot (`name:value` tokens).
  kRankDnn = 0,
  // Paddle MultiSlot text: for each slot of multislot_slots `<count> <v1> ... <vcount>`.
  kMultiSlot = 1,
  // PaddleRec slot_dnn: `<feasign>:<slot>` tokens (value first), each label as
  // `<0|1>:<label slot>`.
  kSlotDnn = 2,
  // Raw Criteo display-ads TSV (Kaggle's train.txt, PaddleRec's legacy rank/dnn data): the
  // label, 13 integer and 26 categorical columns, tab-separated, read as PaddleRec's
  // criteo_reader.py turns them into rank_dnn features (trainer/data/criteo_format.h).
  // One label per line.
  kCriteo = 3,
};

// How the trainer holds the data of a pass.
enum class DatasetKind : uint8_t {
  kQueue = 0,     // QueueDataset: streams the files each pass, bounded memory
  kInMemory = 1,  // InMemoryDataset: loads once, shuffles locally / globally
};

// How an InMemoryDataset is shuffled before each training pass.
enum class ShuffleMode : uint8_t {
  kNone = 0,    // file order
  kLocal = 1,   // this trainer's records, locally
  kGlobal = 2,  // every trainer's records redistributed across trainers, then locally
};

// Which records of the data set a trainer trains on in a pass.
enum class SamplerKind : uint8_t {
  kFiles = 0,        // the trainer's files (split_file_list), every record of them
  kDistributed = 1,  // Paddle's DistributedBatchSampler: a strided share of every record
};

std::string_view DataFormatName(DataFormat format);  // "rank_dnn" | "multislot" | "slot_dnn" | "criteo"
// The format named `name` (a DataFormatName spelling); false when there is none.
bool DataFormatFromName(std::string_view name, DataFormat* out);
std::string_view DatasetKindName(DatasetKind kind);  // "QueueDataset" | "InMemoryDataset"
// False for a name that is not a reader_type (QueueDataset, InMemoryDataset, InmemoryDataset).
bool DatasetKindFromName(std::string_view name, DatasetKind* out);

struct DataOptions {
  // `data_format`: rank_dnn | multislot | slot_dnn | criteo. Default rank_dnn. criteo takes
  // rank_dnn's defaults and requires its shape: 13 dense features, 26 sparse slots.
  DataFormat format = DataFormat::kRankDnn;

  // `criteo_hash_dim` (criteo only): the categorical ids are taken modulo this, as
  // PaddleRec's criteo readers do (`hash_dim_`, its sparse_feature_number); 0 keeps the
  // whole 64-bit hash (no ids shared by chance: fleetps's sparse tables take any id).
  // Default 1000001.
  uint64_t criteo_hash_dim = 1000001;

  // `label_slot` (one name) or `label_slots` (a non-empty list of distinct names; giving
  // both is an error): the slots of an example's 0/1 labels, e.g. [click, conversion] for
  // a multi-task (MMoE, ESMM) model. Example::labels and each Batch row's labels follow
  // this order. Default {"click"} (rank_dnn, multislot, criteo), {"1"} (slot_dnn); criteo
  // lines carry one label, so it takes exactly one.
  std::vector<std::string> label_slots = {"click"};

  // `dense_slot`: name of the dense feature. Default "dense_feature"; unused (empty) for
  // slot_dnn, which has no dense part.
  std::string dense_slot = "dense_feature";

  // `dense_input_dim`: floats per example in the dense slot. Default 13 (rank_dnn,
  // multislot), 0 (slot_dnn, where it must stay 0).
  uint32_t dense_dim = 13;

  // `sparse_slots`: sparse slot names, in the order the model sees them (Batch::slots
  // follows this order). Default: rank_dnn / multislot "1".."N" with
  // N = sparse_inputs_slots - 1 (`sparse_inputs_slots` default 27: PaddleRec's count
  // includes the label slot, as its reader's slot list "click 1 ... 26" does); slot_dnn
  // "2".."slot_num + 1" (`slot_num` default 300). Ids in other slots are ignored by
  // rank_dnn / slot_dnn.
  std::vector<std::string> sparse_slots;

  // `multislot_slots` (multislot only): every slot of a line, in line order; must hold
  // each label slot, the dense slot (when dense_dim > 0) and each sparse slot exactly once.
  // Default: label slots..., sparse slots..., dense slot (the order of PaddleRec's rank_dnn
  // MultiSlot reader). Types follow the role: labels and dense float, sparse uint64.
  std::vector<std::string> multislot_slots;

  // `train_data_dir` (one path, or a list) and/or `train_files` (a list): files or directories
  // (a directory stands for its regular files sorted by name, hidden ones skipped).
  // Relative paths are resolved against the YAML file's directory, as PaddleRec does.
  // Default empty.
  std::vector<std::string> train_paths;
  // `test_data_dir` / `test_files`: same for evaluation data. Default empty.
  std::vector<std::string> test_paths;

  // `split_file_list`: when true, file i of the list goes to trainer i % trainers_num;
  // when false every trainer reads every file. Default true (PaddleRec's default is false,
  // which makes every trainer of a cluster train on the whole data set).
  bool split_file_list = true;

  // `train_batch_size`: examples per training batch, >= 1. Default 512.
  uint32_t batch_size = 512;
  // `infer_batch_size`: examples per evaluation batch, >= 1. Default = batch_size.
  uint32_t test_batch_size = 512;

  // `thread_num`: reader threads (file parsing / loading), >= 1. Default 1.
  uint32_t thread_num = 1;

  // `reader_type`: QueueDataset | InMemoryDataset (PaddleRec's "InmemoryDataset" spelling
  // is accepted too). Default QueueDataset.
  DatasetKind dataset = DatasetKind::kQueue;

  // `skip_bad_lines`: when true a malformed line is skipped, counted and (the first few)
  // logged with file:line; when false it fails the pass. Default false.
  bool skip_bad_lines = false;

  // `queue_capacity`: QueueDataset batches buffered between readers and workers, >= 1;
  // bounds its memory to about (queue_capacity + thread_num) batches. Default 32.
  uint32_t queue_capacity = 32;

  // `shuffle`: none | local | global: how an InMemoryDataset is shuffled before each
  // training pass (global: Paddle's dataset.global_shuffle, across trainers through the
  // pservers). QueueDataset streams files in order and ignores it. Default local.
  ShuffleMode shuffle = ShuffleMode::kLocal;

  // `shuffle_seed`: seed of InMemoryDataset local / global shuffles. Default 0.
  uint64_t shuffle_seed = 0;

  // `sampler`: files | distributed. `distributed` (InMemoryDataset only; shuffle none or
  // local) is Paddle's DistributedBatchSampler, as collective data-parallel jobs read: every
  // trainer loads every file (split_file_list is not used), and before each pass orders all
  // records alike on every trainer (shuffled from shuffle_seed and the epoch unless shuffle
  // is none), pads that order by repeating its first records to a multiple of the trainer
  // count, and trains on the positions trainer_id, trainer_id + trainers_num, ...: disjoint
  // shares of equal size, reshuffled every epoch (Paddle's set_epoch). Default files.
  SamplerKind sampler = SamplerKind::kFiles;

  // Labels per example: label_slots.size().
  uint32_t num_labels() const { return static_cast<uint32_t>(label_slots.size()); }
};

// Reads DataOptions from a fleetps `data:` map (key names listed in the header comment,
// DataOptionKeys()); any other key is an error naming file:line:column and the closest
// known key. Format-dependent defaults (label slots, slot list, dense width) are filled in
// after reading. Errors name file:line, the key and, for enumerations, the allowed values.
Status ParseDataOptions(const YAML::Node& section, const YamlContext& ctx, DataOptions* out);

// Reads a whole PaddleRec config document: the data keys of `runner:` as above, with the
// shape keys (DataShapeKeys()) also taken from `hyper_parameters:` (a runner value wins).
// Other keys of those maps belong to other parsers and are not checked here:
// ParseTrainerYaml, which owns both maps, rejects the unknown ones.
Status ParsePaddleRecDataOptions(const YAML::Node& root, const YamlContext& ctx, DataOptions* out);

// Every key ParseDataOptions reads.
std::vector<std::string> DataOptionKeys();
// The shape keys ParsePaddleRecDataOptions also reads from `hyper_parameters`:
// dense_input_dim, sparse_inputs_slots, slot_num.
std::vector<std::string> DataShapeKeys();

}  // namespace fleetps::config
