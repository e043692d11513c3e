#pragma once
// RecordTransport: how InMemoryDataset::GlobalShuffle hands records to another trainer.
// The network implementation (trainer/client) sends them to trainer `to`'s process, whose
// dataset gets them through InMemoryDataset::ReceiveRecords; InProcessRecordTransport
// (in_memory_dataset.h) calls ReceiveRecords directly, for tests and for a single trainer.

#include <cstdint>

#include "common/status.h"
#include "trainer/data/record_block.h"

namespace fleetps::data {

class RecordTransport {
 public:
  virtual ~RecordTransport() = default;

  // Delivers `records` to trainer `to` (which may be the sender itself), blocking while the
  // receiver cannot take more. Records sent by one trainer to one trainer arrive in order.
  // Called from the shuffling trainer's driver thread only.
  virtual Status Send(uint32_t to, RecordBlock records) = 0;
};

}  // namespace fleetps::data
