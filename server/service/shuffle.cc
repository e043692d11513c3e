#include "server/service/ps_service.h"

#include <algorithm>
#include <vector>

#include "schemas/ps_generated.h"
#include "common/net/handler_util.h"

namespace fleetps::server {

using wire::MessageType;

// The global-shuffle mail: trainers leave RecordBlocks for trainer `to` on server
// to % servers (ShuffleSend) and fetch theirs once every sender is done (ShuffleFetch).

void PsService::ShuffleSend(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::ShuffleSendRequest>(req, responder);
  if (msg == nullptr) return;
  const auto num_servers = static_cast<uint32_t>(options_.endpoints.size());
  if (msg->to() % num_servers != options_.index) {
    return responder.SendError(Status::InvalidArgument(
        "ShuffleSend from " + responder.peer() + ": records for trainer " + std::to_string(msg->to()) +
        " go to pserver " + std::to_string(msg->to() % num_servers) + ", this is " + Where()));
  }
  std::vector<uint8_t> block;
  if (msg->block() != nullptr) block.assign(msg->block()->begin(), msg->block()->end());
  auto held = shuffle_mailbox_.Post(msg->round(), msg->from(), msg->to(), std::move(block), msg->last());
  if (!held.ok()) return responder.SendError(held.status());
  flatbuffers::FlatBufferBuilder fbb(32);
  fbb.Finish(wire::CreateShuffleSendReply(fbb, *held));
  responder.Send(net::ReplyType(MessageType::ShuffleSend), fbb.Release());
}

void PsService::ShuffleFetch(const net::Request& req, const net::Responder& responder) {
  const auto* msg = net::Verified<wire::ShuffleFetchRequest>(req, responder);
  if (msg == nullptr) return;
  // Leave room for the reply's own framing under the client's message limit.
  const uint64_t max_bytes = std::min<uint64_t>(msg->max_bytes(), options_.max_message_bytes / 2);
  auto taken = shuffle_mailbox_.Take(msg->round(), msg->to(), msg->senders(), max_bytes);
  size_t bytes = 0;
  for (const auto& m : taken.mail) bytes += m.block.size();
  flatbuffers::FlatBufferBuilder fbb(256 + bytes + taken.mail.size() * 32);
  std::vector<flatbuffers::Offset<wire::ShuffleMail>> mail;
  mail.reserve(taken.mail.size());
  for (const auto& m : taken.mail) {
    mail.push_back(wire::CreateShuffleMail(fbb, m.from, fbb.CreateVector(m.block)));
  }
  fbb.Finish(wire::CreateShuffleFetchReply(fbb, fbb.CreateVector(mail), taken.senders_done, taken.complete));
  responder.Send(net::ReplyType(MessageType::ShuffleFetch), fbb.Release());
}

}  // namespace fleetps::server
