#pragma once
// GlobalShuffle: one InMemoryDataset global shuffle across the trainers of a cluster,
// through the pservers' shuffle mailboxes (ShuffleSend / ShuffleFetch, schemas/ps.fbs).
//
// Every trainer calls it at the same point. The trainers meet at a barrier whose
// generation numbers the round (unique on the cluster, even across jobs); each then
// fetches the records sent to it on a background thread while it sends its own records
// (in RecordBlocks, in order per receiver; its own share stays in process) and finally
// posts a `last` marker to every trainer. A trainer's round ends when every sender's
// marker has arrived and its mailbox is empty; the received records then become its data,
// shuffled locally. Memory on the servers is bounded (server.shuffle_buffer_bytes): a
// full mailbox makes senders retry while receivers drain it.

#include <chrono>
#include <cstdint>

#include "common/status.h"
#include "common/stop_request.h"
#include "trainer/client/ps_client.h"
#include "trainer/data/in_memory_dataset.h"

namespace fleetps::trainer {

struct GlobalShuffleOptions {
  uint32_t trainer_id = 0;
  uint32_t trainers_num = 1;
  uint64_t seed = 0;
  // How long the barrier, a full mailbox or a silent sender may keep this trainer waiting.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // A request ends the shuffle, its barrier wait included: Aborted (null: never).
  const StopRequest* stop = nullptr;
};

struct GlobalShuffleReport {
  uint64_t round = 0;           // the barrier generation
  uint64_t records_before = 0;  // this trainer's records before / after the shuffle
  uint64_t records_after = 0;
  uint64_t busy_retries = 0;  // requests re-sent after a Busy answer (a full mailbox)
};

// On error this trainer's records are lost (load the data again) and the other trainers
// time out.
StatusOr<GlobalShuffleReport> GlobalShuffle(PsClient& client, data::InMemoryDataset& dataset,
                                            const GlobalShuffleOptions& options);

}  // namespace fleetps::trainer
