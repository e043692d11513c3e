#include "trainer/client/ps_client.h"

// PsClient's shuffle mail (InMemoryDataset's global shuffle): records for trainer `to`
// are left on server to % servers and fetched from there.

#include <chrono>

#include "schemas/ps_generated.h"
#include "trainer/client/reply_util.h"

namespace fleetps::trainer {

using wire::MessageType;

Status PsClient::ShuffleSend(uint64_t round, uint32_t from, uint32_t to, std::span<const uint8_t> block, bool last,
                             std::chrono::milliseconds timeout) {
  auto& server = clients_[to % clients_.size()];
  flatbuffers::FlatBufferBuilder fbb(128 + block.size());
  // An empty block (a bare `last` marker) is left out: an empty nested buffer does not verify.
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> block_off;
  if (!block.empty()) block_off = fbb.CreateVector(block.data(), block.size());
  fbb.Finish(wire::CreateShuffleSendRequest(fbb, round, from, to, block_off, last));
  const auto type = static_cast<uint16_t>(MessageType::ShuffleSend);
  net::CallOptions call = net::DefaultCallOptions(type, options_.rpc);
  if (timeout.count() > 0) call.timeout = timeout;
  ASSIGN_OR_RETURN(net::Reply reply, server->CallSync(type, fbb.Release(), call));
  Status error;
  if (VerifiedReply<wire::ShuffleSendReply>(reply, server->name(), &error) == nullptr) return error;
  return Status::OK();
}

StatusOr<PsClient::ShuffleFetchResult> PsClient::ShuffleFetch(uint64_t round, uint32_t to, uint32_t senders) {
  auto& server = clients_[to % clients_.size()];
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateShuffleFetchRequest(fbb, round, to, senders));
  ASSIGN_OR_RETURN(net::Reply reply, server->CallSync(static_cast<uint16_t>(MessageType::ShuffleFetch), fbb.Release()));
  Status error;
  const auto* msg = VerifiedReply<wire::ShuffleFetchReply>(reply, server->name(), &error);
  if (msg == nullptr) return error;
  ShuffleFetchResult out;
  out.senders_done = msg->senders_done();
  out.complete = msg->complete();
  if (msg->mail() != nullptr) {
    for (const auto* m : *msg->mail()) {
      ShuffleMail mail{m->from(), {}};
      if (m->block() != nullptr) mail.block.assign(m->block()->begin(), m->block()->end());
      out.mail.push_back(std::move(mail));
    }
  }
  return out;
}

}  // namespace fleetps::trainer
