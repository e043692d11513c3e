// ShuffleMailbox: arrival order per receiver, rounds kept apart, completion once every
// sender's last block is in and taken, the byte bound, and a repeated `last`.
#include <catch2/catch.hpp>

#include "server/service/shuffle_mailbox.h"

namespace fleetps::server {
namespace {

std::vector<uint8_t> Bytes(size_t n, uint8_t value) { return std::vector<uint8_t>(n, value); }

std::vector<uint8_t> Firsts(const ShuffleMailbox::Taken& taken) {
  std::vector<uint8_t> out;
  for (const auto& m : taken.mail) out.push_back(m.block.front());
  return out;
}

}  // namespace

TEST_CASE("mail is taken in arrival order and completes after every sender's last block", "[mailbox]") {
  ShuffleMailbox box(1 << 20);
  REQUIRE(box.Post(1, 0, 2, Bytes(10, 1), false).ok());
  REQUIRE(box.Post(1, 1, 2, Bytes(10, 2), false).ok());
  REQUIRE(box.Post(2, 0, 2, Bytes(10, 9), false).ok());  // the next round stays apart
  REQUIRE(box.Post(1, 0, 2, Bytes(10, 3), true).ok());
  CHECK(*box.Post(1, 0, 1, Bytes(5, 4), false) == 45);  // another receiver; bytes held

  auto taken = box.Take(1, 2, 2, 25);  // two blocks fit in 25 bytes
  CHECK(Firsts(taken) == std::vector<uint8_t>{1, 2});
  CHECK(taken.mail[0].from == 0);
  CHECK(taken.mail[1].from == 1);
  CHECK(taken.senders_done == 1);
  CHECK_FALSE(taken.complete);
  taken = box.Take(1, 2, 2, 1);  // one block is always taken
  CHECK(Firsts(taken) == std::vector<uint8_t>{3});
  CHECK_FALSE(taken.complete);  // sender 1 has not finished
  REQUIRE(box.Post(1, 1, 2, {}, true).ok());
  taken = box.Take(1, 2, 2, 100);
  CHECK(taken.mail.empty());
  CHECK(taken.senders_done == 2);
  CHECK(taken.complete);
  CHECK(box.held_bytes() == 15);  // round 2 for trainer 2 and round 1 for trainer 1 remain
  CHECK(Firsts(box.Take(2, 2, 2, 100)) == std::vector<uint8_t>{9});
  CHECK(box.held_bytes() == 5);
}

TEST_CASE("a full mailbox answers Busy until receivers take; a repeated last is refused", "[mailbox]") {
  ShuffleMailbox box(100);
  REQUIRE(box.Post(7, 0, 0, Bytes(150, 1), false).ok());  // larger than the bound, into an empty box
  auto busy = box.Post(7, 1, 0, Bytes(10, 2), false);
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.status().IsBusy());
  CHECK_THAT(busy.status().message(),
             Catch::Contains("holds 150 of 100 bytes") && Catch::Contains("round 7 from trainer 1 to trainer 0"));
  CHECK(box.Take(7, 0, 2, 1000).mail.size() == 1);
  REQUIRE(box.Post(7, 1, 0, Bytes(10, 2), true).ok());
  auto again = box.Post(7, 1, 0, Bytes(10, 2), true);
  REQUIRE_FALSE(again.ok());
  CHECK(again.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(again.status().message(), Catch::Contains("already sent its last block"));
}

TEST_CASE("boxes left idle by a dead trainer are dropped when the space is needed", "[mailbox]") {
  using namespace std::chrono_literals;
  const auto t0 = ShuffleMailbox::Clock::time_point{} + 1h;
  ShuffleMailbox box(100, 10min);
  REQUIRE(box.Post(1, 0, 5, Bytes(60, 1), false, t0).ok());  // trainer 5 never fetches
  REQUIRE(box.Post(2, 0, 6, Bytes(30, 2), false, t0 + 8min).ok());
  CHECK(box.Post(2, 1, 6, Bytes(30, 3), false, t0 + 9min).status().IsBusy());  // nothing idle long enough
  REQUIRE(box.Post(2, 1, 6, Bytes(30, 3), false, t0 + 11min).ok());            // round 1's box is dropped
  CHECK(box.held_bytes() == 60);
  CHECK(box.Take(1, 5, 1, 100, t0 + 11min).mail.empty());
  CHECK(Firsts(box.Take(2, 6, 2, 100, t0 + 11min)) == std::vector<uint8_t>{2, 3});
  CHECK(box.held_bytes() == 0);
}

TEST_CASE("the number of boxes is bounded; idle ones make room", "[mailbox]") {
  using namespace std::chrono_literals;
  const auto t0 = ShuffleMailbox::Clock::time_point{} + 1h;
  ShuffleMailbox box(1 << 20, 10min);
  for (uint32_t to = 0; to < ShuffleMailbox::kMaxBoxes; ++to) REQUIRE(box.Post(1, 0, to, {}, true, t0).ok());
  CHECK(box.Post(2, 0, 0, {}, true, t0 + 1min).status().IsBusy());  // a new box: none idle yet
  CHECK(box.Post(1, 1, 5, {}, true, t0 + 1min).ok());               // an existing box still takes mail
  CHECK(box.Post(2, 0, 0, {}, true, t0 + 630s).ok());               // boxes idle for 10.5 min are dropped
  CHECK(box.Take(1, 5, 2, 100, t0 + 630s).complete);                // box 5, touched at 1 min, is kept
}

}  // namespace fleetps::server
