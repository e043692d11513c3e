#include "trainer/data/line_format.h"

#include "trainer/data/colon_token_format.h"
#include "trainer/data/criteo_format.h"
#include "trainer/data/multislot_format.h"

namespace fleetps::data {

std::unique_ptr<const LineFormat> MakeLineFormat(const config::DataOptions& options) {
  using config::DataFormat;
  switch (options.format) {
    case DataFormat::kRankDnn:
      return std::make_unique<ColonTokenFormat>(options, ColonTokenFormat::Order::kNameValue,
                                                /*require_every_sparse_slot=*/true);
    case DataFormat::kSlotDnn:
      return std::make_unique<ColonTokenFormat>(options, ColonTokenFormat::Order::kValueName,
                                                /*require_every_sparse_slot=*/false);
    case DataFormat::kMultiSlot: return std::make_unique<MultiSlotFormat>(options);
    case DataFormat::kCriteo: return std::make_unique<CriteoFormat>(options);
  }
  FLEETPS_CHECK(false) << "unknown data format " << static_cast<int>(options.format);
  return nullptr;
}

}  // namespace fleetps::data
