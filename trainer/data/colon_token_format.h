#pragma once
// ColonTokenFormat: the two PaddleRec formats whose tokens join a slot name and a value
// with ':' (one parser, two token orders).
//   rank_dnn  `name:value`: click:0 dense_feature:0.05 ... 1:737395 ... 26:306163
//             (label slots [click, conversion]: click:1 conversion:0 dense_feature:...)
//   slot_dnn  `value:slot`: 0:1 4351255118977467729:3 ... (the default label is `<0|1>:1`)
// Tokens of slots the options do not list are skipped, as PaddleRec's readers do. Each
// label slot must appear exactly once (anywhere in the line) and the dense slot exactly
// dense_dim times. A sparse slot may hold any number of ids; rank_dnn requires every
// configured sparse slot at least once (a missing one means a truncated or misconfigured
// line), slot_dnn leaves absent slots empty. Write emits the labels in label-slot order,
// the dense values, then sparse ids in slot order.

#include <string>
#include <vector>

#include "trainer/data/format_util.h"
#include "trainer/data/line_format.h"

namespace fleetps::data {

class ColonTokenFormat : public LineFormat {
 public:
  enum class Order { kNameValue, kValueName };

  ColonTokenFormat(const config::DataOptions& options, Order order, bool require_every_sparse_slot);

  Status Parse(std::string_view line, Example* example) const override;
  void Write(const Example& example, std::string* out) const override;

 private:
  const SlotIndex index_;
  const Order order_;
  const bool require_every_sparse_slot_;
  const std::vector<std::string> label_slots_;
  const std::string dense_slot_;
  const uint32_t dense_dim_;
  const std::vector<std::string> sparse_slots_;
};

}  // namespace fleetps::data
