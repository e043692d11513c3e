// Fuzz target: the four data-line formats (trainer/data/line_format.h: rank_dnn
// `name:value`, MultiSlot, slot_dnn `value:slot`, criteo TSV) and RecordBlock::Parse
// (trainer/data/record_block.h), the bytes a trainer receives in a global shuffle.
//
// Input: byte 0 (mod 14) selects what the rest is:
//   0..5  text lines ('\n'-separated) for a format: 0 rank_dnn, 1 multislot, 2 slot_dnn
//         with PaddleRec's default slots; 3..5 the same formats with 2 dense floats and
//         sparse slots [26, 3, 7] (short lines the fuzzer completes more easily)
//   6, 7  a serialized RecordBlock, parsed with the shape of byte 1 (6) or rank_dnn's
//         13 dense floats x 26 slots (7), one label per record
//   8     a data file's bytes (plain or gzip), read by FileReader with format 3
//   9     text lines for data_format criteo (raw Criteo TSV)
//   10..12 text lines for formats 3..5 with two label slots, click and conversion
//         (slot_dnn: "1" and conversion)
//   13    a serialized RecordBlock of two-label records, parsed with the shape of byte 1
// Checks, besides the sanitizers:
//  - a line that parses has the configured shape, 0/1 labels and finite dense values (criteo:
//    one id per slot, below criteo_hash_dim), and LineFormat::Write gives a line that parses
//    back to the same Example (criteo: CanWrite() is false);
//  - the parsed examples of one input, appended to a RecordBlock, survive Serialize and
//    Parse unchanged and give the same Batch as appending the examples directly;
//  - a RecordBlock that Parse accepts can be read whole (AppendToBatch every record) and
//    re-serialized to an equal block;
//  - a data file read ends or fails with InvalidArgument or IOError naming the file; bytes
//    that are not gzip give exactly the examples of their lines parsed one by one, up to the
//    first bad line, which fails the read.
#include <zlib.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/data_config.h"
#include "common/config/yaml_util.h"
#include "test/fuzz/fuzz_util.h"
#include "trainer/data/batch.h"
#include "trainer/data/file_reader.h"
#include "trainer/data/line_format.h"
#include "trainer/data/record_block.h"

namespace fleetps::fuzz {
namespace {

using data::Batch;
using data::Example;
using data::RecordBlock;

struct Format {
  config::DataOptions options;
  std::unique_ptr<const data::LineFormat> format;
};

config::DataOptions OptionsFromYaml(const std::string& yaml) {
  auto node = config::LoadYamlString(yaml, "<fuzz>");
  if (!node.ok()) Fail("fuzz data options: " + node.status().ToString());
  config::DataOptions options;
  const Status st = config::ParseDataOptions(*node, config::YamlContext{"<fuzz>", "data"}, &options);
  if (!st.ok()) Fail("fuzz data options: " + st.ToString());
  return options;
}

std::vector<Format>& Formats() {
  static std::vector<Format>* formats = [] {
    auto* f = new std::vector<Format>;
    const char* yamls[] = {
        "data_format: rank_dnn",
        "data_format: multislot",
        "data_format: slot_dnn",
        "{data_format: rank_dnn, dense_input_dim: 2, sparse_slots: ['26', '3', '7']}",
        "{data_format: multislot, dense_input_dim: 2, sparse_slots: ['26', '3', '7']}",
        "{data_format: slot_dnn, sparse_slots: ['26', '3', '7']}",
        "data_format: criteo",
        "{data_format: rank_dnn, label_slots: [click, conversion], dense_input_dim: 2, sparse_slots: ['26', '3', "
        "'7']}",
        "{data_format: multislot, label_slots: [click, conversion], dense_input_dim: 2, sparse_slots: ['26', '3', "
        "'7']}",
        "{data_format: slot_dnn, label_slots: ['1', conversion], sparse_slots: ['26', '3', '7']}",
    };
    for (const char* yaml : yamls) {
      Format fmt;
      fmt.options = OptionsFromYaml(yaml);
      fmt.format = data::MakeLineFormat(fmt.options);
      f->push_back(std::move(fmt));
    }
    return f;
  }();
  return *formats;
}

// The input selector of the line format Formats()[f].
char LineSelector(size_t f) {
  constexpr char kSelectors[] = {0, 1, 2, 3, 4, 5, 9, 10, 11, 12};
  return kSelectors[f];
}

std::string Describe(const Example& e) {
  std::string s = "labels";
  for (float label : e.labels) s += " " + std::to_string(label);
  s += ", " + std::to_string(e.dense.size()) + " dense, slots";
  for (const auto& ids : e.slots) s += " " + std::to_string(ids.size());
  return s;
}

void CheckBlockRoundTrip(const RecordBlock& block, const std::string& what) {
  const auto bytes = block.Serialize();
  auto again = RecordBlock::Parse(bytes, block.dense_dim(), block.num_slots(), block.num_labels(), "round trip");
  if (!again.ok()) Fail(what + ": a serialized RecordBlock does not parse: " + again.status().ToString());
  if (!(*again == block)) Fail(what + ": a RecordBlock changed through Serialize and Parse");
}

void FuzzLines(const Format& fmt, std::string_view text) {
  const auto& o = fmt.options;
  RecordBlock block(o.dense_dim, static_cast<uint32_t>(o.sparse_slots.size()), o.num_labels());
  Batch direct(o.dense_dim, o.sparse_slots.size(), o.num_labels());
  Example ex, again;
  std::string written;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    const Status st = fmt.format->Parse(line, &ex);
    if (!st.ok()) {
      if (!st.IsInvalidArgument() || st.message().empty()) Fail("Parse failed with " + st.ToString());
      continue;
    }
    if (ex.dense.size() != o.dense_dim || ex.slots.size() != o.sparse_slots.size() ||
        ex.labels.size() != o.num_labels()) {
      Fail("Parse accepted a line into an Example of the wrong shape: " + Describe(ex));
    }
    for (float label : ex.labels) {
      if (label != 0.0f && label != 1.0f) Fail("Parse accepted a label that is not 0 or 1: " + Describe(ex));
    }
    for (float v : ex.dense) {
      if (!std::isfinite(v)) Fail("Parse accepted a non-finite dense value");
    }
    if (o.format == config::DataFormat::kCriteo) {  // one hashed id per column, below the hash dim
      for (const auto& ids : ex.slots) {
        if (ids.size() != 1 || ids[0] >= o.criteo_hash_dim) Fail("criteo gave ids " + Describe(ex));
      }
    }
    if (fmt.format->CanWrite()) {
      written.clear();
      fmt.format->Write(ex, &written);
      const Status st2 = fmt.format->Parse(written, &again);
      if (!st2.ok()) Fail("Write gave a line that does not parse (" + st2.ToString() + "): " + written);
      if (!(again == ex)) Fail("Write + Parse changed the example " + Describe(ex) + " into " + Describe(again));
    }
    block.Append(ex);
    direct.Append(ex);
  }
  CheckBlockRoundTrip(block, "lines");
  Batch from_block(o.dense_dim, o.sparse_slots.size(), o.num_labels());
  for (size_t i = 0; i < block.size(); ++i) block.AppendToBatch(i, &from_block);
  if (from_block.labels != direct.labels || from_block.dense != direct.dense || !(from_block.slots == direct.slots)) {
    Fail("a RecordBlock gives a different Batch than its examples");
  }
}

void FuzzRecordBlock(std::span<const uint8_t> input, uint32_t dense_dim, uint32_t num_slots, uint32_t num_labels) {
  // A heap copy, as the trainer's PsClient::ShuffleFetch hands Parse (malloc-aligned).
  const std::vector<uint8_t> bytes(input.begin(), input.end());
  auto block = RecordBlock::Parse(bytes, dense_dim, num_slots, num_labels, "fuzz");
  if (!block.ok()) {
    if (!block.status().IsCorruption()) Fail("RecordBlock::Parse failed with " + block.status().ToString());
    return;
  }
  Batch batch(dense_dim, num_slots, num_labels);
  for (size_t i = 0; i < block->size(); ++i) block->AppendToBatch(i, &batch);
  if (batch.size() != block->size()) Fail("AppendToBatch lost records");
  CheckBlockRoundTrip(*block, "parsed block");
  RecordBlock copy(dense_dim, num_slots, num_labels);
  for (size_t i = 0; i < block->size(); ++i) copy.AppendRecord(*block, i);
  if (!(copy == *block)) Fail("AppendRecord of every record gives a different block");
}

void FuzzDataFile(std::string_view bytes) {
  static const std::string path = ScratchDir("data_format_fuzz") + "/part-00000";
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; }
  const Format& fmt = Formats()[3];
  data::ReadProgress progress;
  data::FileReader reader(*fmt.format, false, &progress);
  std::vector<Example> got;
  const Status st = reader.ReadFile(path, [&](const Example& e) {
    got.push_back(e);
    return Status::OK();
  });
  if (!st.ok() && ((!st.IsInvalidArgument() && !st.IsIOError()) || st.message().rfind(path + ":", 0) != 0)) {
    Fail("ReadFile failed with " + st.ToString());
  }
  if (bytes.size() >= 2 && static_cast<uint8_t>(bytes[0]) == 0x1f && static_cast<uint8_t>(bytes[1]) == 0x8b) return;
  // Text: its lines one by one, as ReadFile should have read them.
  std::vector<Example> want;
  bool bad = false;
  Example ex;
  while (!bytes.empty() && !bad) {
    const size_t nl = bytes.find('\n');
    std::string_view line = bytes.substr(0, nl);
    bytes = nl == std::string_view::npos ? std::string_view() : bytes.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    bad = !fmt.format->Parse(line, &ex).ok();
    if (!bad) want.push_back(ex);
  }
  if (st.ok() == bad)
    Fail("ReadFile " + std::string(st.ok() ? "accepted a bad line" : "failed on good lines: ") + st.ToString());
  if (got != want)
    Fail("ReadFile gave " + std::to_string(got.size()) + " examples, the lines " + std::to_string(want.size()));
}

// The gzip encoding of `text` (one member).
std::string Gzip(const std::string& text) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    Fail("deflateInit2");
  }
  std::string out(deflateBound(&z, text.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) Fail("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// ---- seeds ----------------------------------------------------------------------------

std::vector<std::string> SampleLines(const std::string& path, size_t max_lines) {
  const std::string text = ReadBytes(path);
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size() && lines.size() < max_lines) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return lines;
}

void WriteSeeds(SeedWriter& seeds) {
  auto& formats = Formats();
  const char* shared = std::getenv("FLEETPS_PADDLEREC_DIR");
  const std::string dir = shared != nullptr ? shared : FLEETPS_SOURCE_DIR "/../shared/data/paddlerec";
  // Real PaddleRec lines (rank_dnn: a few; slot_dnn lines are ~10 KB, one is enough).
  for (const auto& line : SampleLines(dir + "/rank_dnn/data/sample_data/train/sample_train.txt", 3)) {
    seeds.Add(std::string(1, '\0') + line);
  }
  for (const auto& line : SampleLines(dir + "/slot_dnn/data/demo_10", 1)) {
    seeds.Add(std::string(1, '\2') + line.substr(0, 2000));  // a prefix: still a valid line
  }
  // Raw Criteo lines, with all 40 fields and with trailing empty columns trimmed.
  for (const auto& line : SampleLines(dir + "/rank_dnn_legacy_raw_tsv/test/sample_test.txt", 4)) {
    seeds.Add(std::string(1, '\x09') + line);
  }
  // Lines written by each format from a small example, and RecordBlocks of them.
  for (size_t f = 0; f < formats.size(); ++f) {
    if (!formats[f].format->CanWrite()) continue;
    const auto& o = formats[f].options;
    Example ex;
    ex.Reset(o.sparse_slots.size(), o.num_labels());
    ex.labels[0] = f % 2 == 0 ? 1.0f : 0.0f;
    if (o.num_labels() > 1) ex.labels[1] = ex.labels[0];  // a click that converted, or neither
    for (uint32_t j = 0; j < o.dense_dim; ++j) ex.dense.push_back(0.5f * static_cast<float>(j) - 0.125f);
    for (size_t s = 0; s < ex.slots.size() && s < 4; ++s) {
      for (size_t k = 0; k <= s % 3; ++k) ex.slots[s].push_back(1000 * s + k + 18446744073709551000ull * (k == 2));
    }
    if (o.format == config::DataFormat::kRankDnn || o.format == config::DataFormat::kMultiSlot) {
      for (auto& ids : ex.slots) {
        if (ids.empty()) ids.push_back(7);  // rank_dnn needs every slot; multislot any count
      }
    }
    std::string line;
    formats[f].format->Write(ex, &line);
    seeds.Add(std::string(1, LineSelector(f)) + line + "\n" + line);
    if (f == 3) {  // data files of these lines: plain, gzip, two members, truncated, trailed
      const std::string text = line + "\n" + line + "\n";
      const std::string gz = Gzip(text);
      seeds.Add(std::string(1, '\x08') + text);
      seeds.Add(std::string(1, '\x08') + gz);
      seeds.Add(std::string(1, '\x08') + gz + gz);
      seeds.Add(std::string(1, '\x08') + gz.substr(0, gz.size() / 2));
      seeds.Add(std::string(1, '\x08') + gz + line);
    }
    if (f >= 3) {
      RecordBlock block(o.dense_dim, static_cast<uint32_t>(o.sparse_slots.size()), o.num_labels());
      block.Append(ex);
      block.Append(ex);
      const auto bytes = block.Serialize();
      const char shape = static_cast<char>((o.dense_dim & 3) | ((o.sparse_slots.size() & 0x3f) << 2));
      const char selector = o.num_labels() == 1 ? 6 : 13;
      seeds.Add(std::string(1, selector) + shape + std::string(bytes.begin(), bytes.end()));
    }
  }
  {
    const auto& o = formats[0].options;  // 13 x 26
    Example ex;
    ex.Reset(o.sparse_slots.size());
    ex.dense.assign(o.dense_dim, 1.0f);
    for (auto& ids : ex.slots) ids.push_back(3);
    RecordBlock block(o.dense_dim, static_cast<uint32_t>(o.sparse_slots.size()));
    block.Append(ex);
    const auto bytes = block.Serialize();
    seeds.Add(std::string(1, '\7') + std::string(bytes.begin(), bytes.end()));
  }
}

}  // namespace
}  // namespace fleetps::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fleetps::fuzz::MaybeWriteSeeds("data_format_fuzz", fleetps::fuzz::WriteSeeds);
  fleetps::fuzz::QuietLogs();
  fleetps::fuzz::Formats();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fleetps::fuzz;
  if (size == 0) return 0;
  const uint8_t selector = data[0] % 14;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (selector < 6) {
    FuzzLines(Formats()[selector], rest);
  } else if (selector == 6 || selector == 13) {
    if (size < 2) return 0;
    // Byte 1: dense_dim in bits 0-1, num_slots in bits 2-7.
    FuzzRecordBlock({data + 2, size - 2}, data[1] & 3, data[1] >> 2, selector == 6 ? 1 : 2);
  } else if (selector == 7) {
    FuzzRecordBlock({data + 1, size - 1}, 13, 26, 1);
  } else if (selector == 8) {
    FuzzDataFile(rest);
  } else if (selector == 9) {
    FuzzLines(Formats()[6], rest);  // criteo
  } else {
    FuzzLines(Formats()[selector - 3], rest);  // 10..12: the two-label formats 7..9
  }
  return 0;
}
