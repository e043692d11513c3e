#include "server/accessor/row_accessor.h"

#include <memory>
#include <vector>

#include <catch2/catch.hpp>

namespace fleetps::server {
namespace {

std::unique_ptr<optimizer::Optimizer> Sgd(float lr) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.learning_rate = lr;
  auto opt = optimizer::CreateOptimizer(o);
  REQUIRE(opt.ok());
  return std::move(opt).value();
}

std::unique_ptr<optimizer::Optimizer> Adagrad() {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdagrad;
  o.learning_rate = 0.1f;
  o.initial_accumulator = 7.0f;
  o.epsilon = 1.0f;
  auto opt = optimizer::CreateOptimizer(o);
  REQUIRE(opt.ok());
  return std::move(opt).value();
}

AccessorOptions Ctr() {
  AccessorOptions a;
  a.kind = AccessorKind::kCtr;
  a.nonclk_coeff = 0.1f;
  a.click_coeff = 2.0f;
  a.embedx_threshold = 5.0f;
  a.show_click_decay_rate = 0.5f;
  a.delete_threshold = 1.0f;
  a.delete_after_unseen_days = 2;
  return a;
}

TEST_CASE("RowAccessor: plain layout is weights, optimizer state, flags", "[accessor]") {
  auto adagrad = Adagrad();
  RowAccessor plain(AccessorOptions{}, 4, *adagrad);
  CHECK_FALSE(plain.ctr());
  CHECK(plain.row_floats() == 4 + 4 + 1);  // Adagrad: one g2sum per weight
  CHECK(plain.flags_offset() == 8);
  CHECK(plain.CreateWeights() == 4);

  std::vector<float> row(plain.row_floats(), -1.0f);
  for (int i = 0; i < 4; ++i) row[i] = 1.0f;  // the table writes the initial weights
  plain.InitRow(row.data());
  CHECK(plain.SavedFlags(row.data()) == 0);
  CHECK(plain.Dirty(row.data()));  // new since the last save
  CHECK(row[4] == 7.0f);           // g2sum starts at initial_accumulator
  // g = 3 on w0: g2sum 16, w0 = 1 - 0.1 * 3 / (4 + 1) = 0.94. Changed is set.
  const float grad[4] = {3, 0, 0, 0};
  CHECK_FALSE(plain.ApplyPush(row.data(), grad, 5.0f, 1.0f, false));
  CHECK(row[0] == Approx(0.94f));
  CHECK(row[4] == 16.0f);
  CHECK(plain.Flags(row.data()) == (RowAccessor::kChanged | RowAccessor::kDirty));
  CHECK_FALSE(plain.Shrink(row.data()));  // plain rows are never shrunk
  // Delta: w += d, state untouched.
  const float delta[4] = {0.5f, 1, 2, 3};
  plain.ApplyPush(row.data(), delta, 0, 0, true);
  CHECK(row[0] == Approx(1.44f));
  CHECK(row[3] == 4.0f);
  CHECK(row[4] == 16.0f);
  CHECK(row[7] == 7.0f);
}

TEST_CASE("RowAccessor: CTR statistics, score and lazy embedx by hand", "[accessor]") {
  auto sgd = Sgd(1.0f);
  RowAccessor ctr(Ctr(), 3, *sgd);
  REQUIRE(ctr.ctr());
  CHECK(ctr.row_floats() == 3 + 0 + 1 + 4);
  CHECK(ctr.CreateWeights() == 1);
  // score = (show - click) * 0.1 + click * 2
  CHECK(ctr.Score(10, 2) == Approx(8 * 0.1f + 4));

  std::vector<float> row(ctr.row_floats(), -1.0f);
  row[0] = 0.25f;  // embed_w from the initializer
  ctr.InitRow(row.data());
  CHECK(row == std::vector<float>{0.25f, 0, 0, static_cast<float>(RowAccessor::kDirty), 0, 0, 0, 0});
  CHECK_FALSE(ctr.Extended(row.data()));

  // Push 1: show 10, click 1: score 0.9 + 2 = 2.9 < 5: embed_w only.
  const float g[3] = {1.0f, 1.0f, 1.0f};
  CHECK_FALSE(ctr.ApplyPush(row.data(), g, 10, 1, false));
  CHECK(row[0] == -0.75f);
  CHECK(row[1] == 0.0f);  // embedx neither created nor updated
  CHECK(row[2] == 0.0f);
  CHECK(ctr.StatOf(row.data(), RowAccessor::kShow) == 10);
  CHECK(ctr.StatOf(row.data(), RowAccessor::kClick) == 1);
  CHECK(ctr.StatOf(row.data(), RowAccessor::kDeltaScore) == Approx(2.9f));
  CHECK(ctr.SavedFlags(row.data()) == RowAccessor::kChanged);
  CHECK(ctr.Dirty(row.data()));

  // Push 2: show 2, click 1: totals 12, 2: score 1 + 4 = 5 >= 5: extend after the update.
  CHECK(ctr.ApplyPush(row.data(), g, 2, 1, false));
  CHECK(row[0] == -1.75f);
  CHECK(row[1] == 0.0f);  // this push's embedx gradient is not applied
  row[1] = 0.5f;          // the table writes embedx's initial values, then Extend
  row[2] = -0.5f;
  ctr.Extend(row.data());
  CHECK(ctr.Extended(row.data()));
  CHECK(ctr.StatOf(row.data(), RowAccessor::kDeltaScore) == Approx(2.9f + 0.1f + 2.0f));

  // Push 3 updates the whole embedding; unseen_days resets.
  row[ctr.stats_offset() + RowAccessor::kUnseenDays] = 4;
  CHECK_FALSE(ctr.ApplyPush(row.data(), g, 0, 0, false));
  CHECK(row[0] == -2.75f);
  CHECK(row[1] == -0.5f);
  CHECK(row[2] == -1.5f);
  CHECK(ctr.StatOf(row.data(), RowAccessor::kUnseenDays) == 0);
}

TEST_CASE("RowAccessor: embedx_threshold <= 0 creates rows whole", "[accessor]") {
  auto sgd = Sgd(1.0f);
  AccessorOptions a = Ctr();
  a.embedx_threshold = 0;
  RowAccessor ctr(a, 3, *sgd);
  CHECK(ctr.CreateWeights() == 3);
  std::vector<float> row(ctr.row_floats());
  ctr.InitRow(row.data());
  CHECK(ctr.Extended(row.data()));
}

TEST_CASE("RowAccessor: shrink decays first, then deletes by score or unseen days", "[accessor]") {
  auto sgd = Sgd(1.0f);
  RowAccessor ctr(Ctr(), 2, *sgd);
  const uint32_t st = ctr.stats_offset();
  auto make = [&](float show, float click, float unseen) {
    std::vector<float> row(ctr.row_floats(), 0.0f);
    ctr.InitRow(row.data());
    row[st + RowAccessor::kShow] = show;
    row[st + RowAccessor::kClick] = click;
    row[st + RowAccessor::kUnseenDays] = unseen;
    return row;
  };
  // show 10, click 1 -> 5, 0.5: score 4.5*0.1 + 0.5*2 = 1.45 >= 1: kept, decayed.
  auto keep = make(10, 1, 2);
  CHECK_FALSE(ctr.Shrink(keep.data()));
  CHECK(keep[st + RowAccessor::kShow] == 5.0f);
  CHECK(keep[st + RowAccessor::kClick] == 0.5f);
  // show 10, click 0 -> 5, 0: score 0.5 < 1: deleted.
  auto low = make(10, 0, 0);
  CHECK(ctr.Shrink(low.data()));
  // score before decay 1.8 >= 1 but after decay 0.9 < 1: deleted (decay comes first).
  auto decayed = make(0, 0.9f, 0);
  CHECK(ctr.Shrink(decayed.data()));
  // Good score but unseen 3 > 2 days: deleted; unseen exactly 2: kept.
  auto stale = make(100, 10, 3);
  CHECK(ctr.Shrink(stale.data()));
  auto border = make(100, 10, 2);
  CHECK_FALSE(ctr.Shrink(border.data()));
}

TEST_CASE("RowAccessor: after-save rules per mode", "[accessor]") {
  auto sgd = Sgd(1.0f);
  RowAccessor ctr(Ctr(), 2, *sgd);
  const uint32_t st = ctr.stats_offset();
  std::vector<float> row(ctr.row_floats(), 0.0f);
  ctr.InitRow(row.data());
  const float g[2] = {0, 0};
  ctr.ApplyPush(row.data(), g, 1, 1, false);
  REQUIRE(ctr.Flags(row.data()) == (RowAccessor::kChanged | RowAccessor::kDirty));
  CHECK_FALSE(ctr.HasAfterSave(disk::SaveMode::Checkpoint));
  CHECK(ctr.HasAfterSave(disk::SaveMode::Delta));
  CHECK(ctr.HasAfterSave(disk::SaveMode::Base));
  CHECK(ctr.HasAfterSave(disk::SaveMode::Batch));
  // A save pass clears kDirty only; the saved state stays.
  CHECK(ctr.MarkSaved(row.data()));
  CHECK_FALSE(ctr.MarkSaved(row.data()));
  CHECK(ctr.Flags(row.data()) == RowAccessor::kChanged);
  CHECK(row[st + RowAccessor::kDeltaScore] != 0);
  CHECK_FALSE(ctr.AfterSave(disk::SaveMode::Checkpoint, row.data()));
  CHECK(ctr.AfterSave(disk::SaveMode::Batch, row.data()));
  CHECK(row[st + RowAccessor::kUnseenDays] == 1);
  CHECK(ctr.Flags(row.data()) == RowAccessor::kChanged);
  CHECK(ctr.AfterSave(disk::SaveMode::Delta, row.data()));
  CHECK(ctr.Flags(row.data()) == 0);
  CHECK(row[st + RowAccessor::kDeltaScore] == 0);
  CHECK_FALSE(ctr.AfterSave(disk::SaveMode::Base, row.data()));

  // Plain rows: Batch changes nothing afterwards.
  RowAccessor plain(AccessorOptions{}, 2, *sgd);
  CHECK_FALSE(plain.HasAfterSave(disk::SaveMode::Batch));
  CHECK(plain.HasAfterSave(disk::SaveMode::Delta));
}

TEST_CASE("RowAccessor: payloads round-trip; CTR rows without embedx store only embed_w", "[accessor]") {
  auto adagrad = Adagrad();
  RowAccessor ctr(Ctr(), 4, *adagrad);
  std::vector<float> row(ctr.row_floats(), 0.0f);
  row[0] = 0.5f;
  ctr.InitRow(row.data());
  const float g[4] = {1, 1, 1, 1};
  ctr.ApplyPush(row.data(), g, 3, 0, false);
  REQUIRE_FALSE(ctr.Extended(row.data()));
  const uint32_t flags = ctr.SavedFlags(row.data());  // as a checkpoint stores them
  // Full: w0, g2sum(w0), 4 statistics.  Weights only: w0.
  CHECK(ctr.PayloadFloats(true, flags) == 1 + 1 + 4);
  CHECK(ctr.PayloadFloats(false, flags) == 1);
  CHECK(ctr.PayloadFloats(true, flags | RowAccessor::kExtended) == 4 + 4 + 4);
  std::vector<float> payload(ctr.row_floats());
  CHECK(ctr.Encode(row.data(), true, payload.data()) == 6);
  std::vector<float> back(ctr.row_floats(), 99.0f);
  ctr.Decode(flags, true, payload.data(), back.data());
  CHECK_FALSE(ctr.Dirty(back.data()));  // a loaded row is as saved
  ctr.SetFlags(back.data(), ctr.Flags(back.data()) | RowAccessor::kDirty);
  CHECK(back == row);  // every float, embedx state included
  // kDirty in the flags handed to Decode is ignored.
  ctr.Decode(flags | RowAccessor::kDirty, true, payload.data(), back.data());
  CHECK_FALSE(ctr.Dirty(back.data()));

  // Weights only: fresh state and statistics, Changed cleared.
  CHECK(ctr.Encode(row.data(), false, payload.data()) == 1);
  ctr.Decode(flags, false, payload.data(), back.data());
  CHECK(back[0] == row[0]);
  CHECK(back[4] == 7.0f);  // g2sum back at initial_accumulator
  CHECK(ctr.Flags(back.data()) == 0);
  CHECK(ctr.StatOf(back.data(), RowAccessor::kShow) == 0);
}

}  // namespace
}  // namespace fleetps::server
