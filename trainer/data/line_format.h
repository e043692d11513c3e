#pragma once
// LineFormat: one text line <-> one Example, for the formats of config::DataFormat.
//
// Implementations (chosen by MakeLineFormat from DataOptions::format):
//   colon_token_format.h  rank_dnn (`name:value` tokens) and slot_dnn (`value:slot` tokens)
//   multislot_format.h    Paddle MultiSlot count-prefixed lines
//   criteo_format.h       raw Criteo TSV, hashed and scaled as PaddleRec's criteo reader
// A format is immutable after construction; Parse and Write are const and thread-safe, so
// one instance is shared by all reader threads.

#include <memory>
#include <string>
#include <string_view>

#include "common/config/data_config.h"
#include "common/status.h"
#include "trainer/data/batch.h"

namespace fleetps::data {

class LineFormat {
 public:
  virtual ~LineFormat() = default;

  // Parses `line` (without its newline) into *example, which is reset first and sized to
  // the configured label and sparse slots. A malformed line gives InvalidArgument whose message is
  // the reason only, naming the offending token, e.g.
  //   token 3 "dense_feature:abc": "abc" is not a number
  // Readers prefix "file:line: ". *example is unspecified after an error.
  virtual Status Parse(std::string_view line, Example* example) const = 0;

  // Whether Write is supported: false for a format whose lines Parse hashes or scales
  // (criteo), which no Example can be written back as.
  virtual bool CanWrite() const { return true; }
  // Appends `example` as one line (no newline) that Parse reads back to an equal Example.
  // The example must have the configured shape (a label per label slot, dense_dim floats,
  // a list per sparse slot) and 0/1 labels (checked), and CanWrite().
  virtual void Write(const Example& example, std::string* out) const = 0;
};

// The format for options.format. `options` must be valid (as ParseDataOptions returns
// them: distinct slot names, a complete multislot_slots for multislot); checked.
std::unique_ptr<const LineFormat> MakeLineFormat(const config::DataOptions& options);

}  // namespace fleetps::data
