#pragma once
// MultiSlotFormat: Paddle's MultiSlot text lines (what a MultiSlotDataGenerator writes):
// for each slot of DataOptions::multislot_slots, in that order, `<count> <v1> ... <vcount>`,
// all space separated, e.g. with slots [click, 1, 2, dense_feature] and dense_dim 2:
//   1 0 1 737395 2 210498 8 2 0.5 0.25
// (with label slots [click, conversion] the default order starts `1 <click> 1 <conversion>`).
// Each label slot has count 1 and a 0/1 value, the dense slot count dense_dim and float
// values, a sparse slot any count (0 = empty) and uint64 ids. Nothing may follow the last
// slot.

#include <string>
#include <vector>

#include "trainer/data/format_util.h"
#include "trainer/data/line_format.h"

namespace fleetps::data {

class MultiSlotFormat : public LineFormat {
 public:
  explicit MultiSlotFormat(const config::DataOptions& options);

  Status Parse(std::string_view line, Example* example) const override;
  void Write(const Example& example, std::string* out) const override;

 private:
  struct Slot {
    std::string name;
    SlotRole role;
  };

  const uint32_t dense_dim_;
  const size_t num_labels_;
  const size_t num_sparse_;
  std::vector<Slot> slots_;  // line order
};

}  // namespace fleetps::data
