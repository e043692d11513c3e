// CheckpointRunner: a save's after-effects (Changed, delta_score, unseen_days) belong to the
// committed checkpoint; one save per directory; the newest committed checkpoint is found.
#include "test/server/service/checkpoint_runner_test_util.h"

namespace fleetps::server {
namespace {

using namespace checkpoint_testing;  // NOLINT: the fixtures of these cases

std::map<uint64_t, float> UnseenDays(std::vector<std::unique_ptr<Server>>& servers) {
  std::map<uint64_t, float> days;
  const RowAccessor& acc = servers[0]->tables().sparse(kCtr)->accessor();
  for (const auto& [k, row] : Union(servers, kCtr)) days[k] = acc.StatOf(row.data(), RowAccessor::kUnseenDays);
  return days;
}

// Checks that every value of `days` is `want`; returns how many rows there are.
size_t AllEqual(const std::map<uint64_t, float>& days, float want) {
  size_t bad = 0;
  for (const auto& [k, d] : days) bad += d != want;
  CHECK(bad == 0);
  return days.size();
}

TEST_CASE("A save that does not commit leaves Changed, delta_score and unseen_days; the next delta holds the rows",
          "[checkpoint]") {
  auto cluster = Cluster(2);
  Train(cluster, 2, 20);
  const std::string base = testing::MakeTempDir("effects_base");
  SaveAll(cluster, base, disk::SaveMode::Base, "b1");
  for (auto& s : cluster) REQUIRE(s->FinishSave(base, "b1").ok());  // server 1 applies it now
  for (const auto& [k, row] : Union(cluster, kSparse)) {
    REQUIRE(cluster[0]->tables().sparse(kSparse)->accessor().Flags(row.data()) == 0);
  }
  // 100 rows change after the base.
  const auto touched = Keys(100, 21);
  std::mt19937_64 rng(22);
  for (auto& s : cluster) {
    s->Push(kSparse, touched, rng);
    s->Push(kCtr, touched, rng, /*counters=*/true);
  }
  const RowMap sparse = Union(cluster, kSparse), ctr = Union(cluster, kCtr);

  SECTION("phase 1 everywhere, then no commit (the client died)") {
    const std::string lost = testing::MakeTempDir("effects_lost");
    for (auto& s : cluster) REQUIRE(s->SavePart(lost, "d1", disk::SaveMode::Delta).ok());
    CHECK(Union(cluster, kSparse) == sparse);
    CHECK(Union(cluster, kCtr) == ctr);
  }
  SECTION("phase 1 everywhere, the commit fails, the client reports it") {
    const std::string failed = testing::MakeTempDir("effects_failed");
    for (auto& s : cluster) REQUIRE(s->SavePart(failed, "d1", disk::SaveMode::Delta).ok());
    std::filesystem::remove(failed + "/d1.tmp/" + ServerDirName(1) + "/PART");
    REQUIRE_FALSE(cluster[0]->Commit(failed, "d1", disk::SaveMode::Delta).ok());
    for (auto& s : cluster) REQUIRE(s->FinishSave(failed, "d1").ok());  // dropped
    CHECK(Union(cluster, kSparse) == sparse);
    CHECK(Union(cluster, kCtr) == ctr);
  }
  SECTION("server 1 fails its part (its lock file is held); server 0's part is not committed") {
    const std::string half = testing::MakeTempDir("effects_half");
    auto held = DirLock::Acquire(half, ServerLockName(1), "a test holding server 1's lock");
    REQUIRE(held.ok());
    REQUIRE(cluster[0]->SavePart(half, "d1", disk::SaveMode::Delta).ok());
    auto refused = cluster[1]->SavePart(half, "d1", disk::SaveMode::Delta);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().IsBusy());
    CHECK(Union(cluster, kSparse) == sparse);
    CHECK(Union(cluster, kCtr) == ctr);
  }
  // The next delta, into another directory, still holds every changed row.
  const std::string next = testing::MakeTempDir("effects_next");
  SaveAll(cluster, next, disk::SaveMode::Delta, "d2");
  auto delta = Checkpoint::Open(next);
  REQUIRE(delta.ok());
  CHECK(delta->table(kSparse)->rows() == 100);
  CHECK(delta->table(kCtr)->rows() == 100);
  // Once committed and settled, the rows are clean: a delta right after is empty.
  for (auto& s : cluster) REQUIRE(s->FinishSave(next, "d2").ok());
  const RowAccessor& ctr_acc = cluster[0]->tables().sparse(kCtr)->accessor();
  for (const auto& [k, row] : Union(cluster, kCtr)) {
    CHECK((ctr_acc.Flags(row.data()) & RowAccessor::kChanged) == 0);
    CHECK(ctr_acc.StatOf(row.data(), RowAccessor::kDeltaScore) == 0);
  }
  const RowAccessor& acc = cluster[0]->tables().sparse(kSparse)->accessor();
  for (const auto& [k, row] : Union(cluster, kSparse)) CHECK(acc.Flags(row.data()) == 0);
  const std::string empty = testing::MakeTempDir("effects_empty");
  SaveAll(cluster, empty, disk::SaveMode::Delta, "d3");
  auto none = Checkpoint::Open(empty);
  REQUIRE(none.ok());
  CHECK(none->table(kSparse)->rows() == 0);
  CHECK(none->table(kCtr)->rows() == 0);
}

TEST_CASE("A row pushed between a save's part and its commit stays Changed for the next delta", "[checkpoint]") {
  auto cluster = Cluster(1);
  Train(cluster, 1, 30);
  SaveAll(cluster, testing::MakeTempDir("between_base"), disk::SaveMode::Base, "b1");
  std::mt19937_64 rng(31);
  const auto first = Keys(200, 32);
  cluster[0]->Push(kSparse, first, rng);
  cluster[0]->Push(kCtr, first, rng, /*counters=*/true);
  const std::string dir = testing::MakeTempDir("between");
  REQUIRE(cluster[0]->SavePart(dir, "d1", disk::SaveMode::Delta).ok());
  // 20 of those rows and 30 new ones change before the commit.
  std::vector<uint64_t> again(first.begin(), first.begin() + 20);
  const auto fresh = Keys(30, 33);
  again.insert(again.end(), fresh.begin(), fresh.end());
  cluster[0]->Push(kSparse, again, rng);
  cluster[0]->Push(kCtr, again, rng, /*counters=*/true);
  REQUIRE(cluster[0]->Commit(dir, "d1", disk::SaveMode::Delta).ok());
  auto d1 = Checkpoint::Open(dir);
  REQUIRE(d1.ok());
  CHECK(d1->table(kSparse)->rows() == 200);
  const std::string next = testing::MakeTempDir("between_next");
  SaveAll(cluster, next, disk::SaveMode::Delta, "d2");
  auto d2 = Checkpoint::Open(next);
  REQUIRE(d2.ok());
  CHECK(d2->table(kSparse)->rows() == 50);
  CHECK(d2->table(kCtr)->rows() == 50);
}

TEST_CASE("Batch saves age unseen_days exactly once per committed save, on every server", "[checkpoint]") {
  auto cluster = Cluster(2);
  Train(cluster, 2, 40);
  const size_t rows = AllEqual(UnseenDays(cluster), 0);
  REQUIRE(rows > 0);
  const std::string dir = testing::MakeTempDir("days");
  SaveAll(cluster, dir, disk::SaveMode::Batch, "day1");
  // Server 0 applies at the commit; server 1 when it next settles (here: FinishSave).
  const RowAccessor& acc = cluster[0]->tables().sparse(kCtr)->accessor();
  for (uint32_t i = 0; i < 2; ++i) {
    REQUIRE(cluster[i]->Rows(kCtr).size() > 0);
    for (const auto& [k, row] : cluster[i]->Rows(kCtr)) {
      CHECK(acc.StatOf(row.data(), RowAccessor::kUnseenDays) == (i == 0 ? 1 : 0));
    }
  }
  REQUIRE(cluster[1]->FinishSave(dir, "day1").ok());
  REQUIRE(cluster[1]->FinishSave(dir, "day1").ok());  // settled once only
  AllEqual(UnseenDays(cluster), 1);

  // Phase 1 sent twice (a retry), then committed: one day.
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (auto& s : cluster) REQUIRE(s->SavePart(dir, "day2", disk::SaveMode::Batch).ok());
  }
  REQUIRE(cluster[0]->Commit(dir, "day2", disk::SaveMode::Batch).ok());
  // A batch save that never commits: no day. Server 1's part settles day2 first.
  for (auto& s : cluster) REQUIRE(s->SavePart(dir, "day3", disk::SaveMode::Batch).ok());
  // The next committed one: server 1's part drops day3; its Shrink settles day4.
  SaveAll(cluster, dir, disk::SaveMode::Batch, "day4");
  REQUIRE(cluster[1]->Shrink().ok());
  AllEqual(UnseenDays(cluster), 3);  // (the shrink deleted server 1's rows with low scores)
  // The files hold the rows as they were when saved: day4's rows had 2 days.
  auto target = Cluster(1);
  REQUIRE(target[0]->Load(dir).ok());
  CHECK(AllEqual(UnseenDays(target), 2) == rows);
}

// ---- one save per directory -------------------------------------------------------------

TEST_CASE("One save per directory: a second save into it is refused while the first holds the lock", "[checkpoint]") {
  const std::string dir = testing::MakeTempDir("locked");
  // Two jobs (two one-server clusters) saving into one directory.
  auto a = Cluster(1);
  auto b = Cluster(1);
  Train(a, 1, 50);
  Train(b, 1, 51);

  SECTION("a holder outside the runner") {
    auto held = DirLock::Acquire(dir, ServerLockName(0), "save of version vX by a test");
    REQUIRE(held.ok());
    auto refused = b[0]->SavePart(dir, "vb", disk::SaveMode::Checkpoint);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().IsBusy());
    const std::string& msg = refused.status().message();
    CHECK(msg.find(dir) != std::string::npos);
    CHECK(msg.find(ServerLockName(0)) != std::string::npos);
    CHECK(msg.find("save of version vX by a test") != std::string::npos);
    CHECK(msg.find("pid " + std::to_string(getpid())) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir + "/vb.tmp"));  // refused before writing anything
    // A commit needs every server's lock too.
    REQUIRE(a[0]->SavePart(testing::MakeTempDir("elsewhere"), "va", disk::SaveMode::Checkpoint).ok());
    auto commit = a[0]->Commit(dir, "va", disk::SaveMode::Checkpoint);
    CHECK(commit.status().IsBusy());
  }
  SECTION("a save in progress on another server, and on the same one") {
    // Hold one of a's executor threads: its save takes the lock and then waits mid-way.
    std::promise<void> release;
    a[0]->BlockLane(1, release.get_future().share());
    std::promise<StatusOr<SaveOutcome>> first;
    std::thread saver([&] { first.set_value(a[0]->SavePart(dir, "va", disk::SaveMode::Checkpoint)); });
    // The lane and the saver go whatever happens below.
    struct Unblock {
      std::promise<void>* release;
      std::thread* saver;
      ~Unblock() {
        if (release != nullptr) release->set_value();
        saver->join();
      }
    } unblock{&release, &saver};
    const std::string lock_file = dir + "/" + ServerLockName(0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (
        std::chrono::steady_clock::now() < deadline &&
        (!std::filesystem::exists(lock_file) || testing::ReadFile(lock_file).find("save va ") == std::string::npos)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto other = b[0]->SavePart(dir, "vb", disk::SaveMode::Checkpoint);
    REQUIRE_FALSE(other.ok());
    CHECK(other.status().IsBusy());
    CHECK(other.status().message().find("part of save va") != std::string::npos);
    auto same = a[0]->SavePart(dir, "vc", disk::SaveMode::Checkpoint);
    CHECK(same.status().IsBusy());
    release.set_value();
    unblock.release = nullptr;
    auto done = first.get_future().get();
    REQUIRE(done.ok());
    REQUIRE(a[0]->Commit(dir, "va", disk::SaveMode::Checkpoint).ok());
  }
  // Once released, the directory takes the next save.
  SaveAll(b, dir, disk::SaveMode::Checkpoint, "vd");
  auto target = Cluster(1);
  REQUIRE(target[0]->Load(dir).ok());
  CHECK(target[0]->Rows(kSparse) == b[0]->Rows(kSparse));
}

}  // namespace
}  // namespace fleetps::server

namespace fleetps::server {
namespace {

TEST_CASE("FindLatestCheckpoint: the directory's own checkpoint, else its newest committed subdirectory",
          "[checkpoint]") {
  const std::string root = testing::MakeTempDir("latest");
  CHECK(FindLatestCheckpoint(root + "/missing").value().empty());  // a first start: fresh tables
  CHECK(FindLatestCheckpoint(root).value().empty());
  auto cluster = Cluster(1);
  Train(cluster, 1, 3);
  SaveAll(cluster, root + "/day1", disk::SaveMode::Checkpoint, "v1");
  // CURRENT's modification time orders the commits; make day2 clearly the newer one.
  std::filesystem::last_write_time(root + "/day1/CURRENT",
                                   std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  SaveAll(cluster, root + "/day2", disk::SaveMode::Checkpoint, "v1");
  std::filesystem::create_directories(root + "/uncommitted/v1.tmp");
  // A checkpoint whose CURRENT names garbage is skipped, even when it is the newest.
  std::filesystem::create_directories(root + "/broken");
  testing::WriteFile(root + "/broken/CURRENT", "../../etc\n");
  CHECK(FindLatestCheckpoint(root).value() == root + "/day2");
  CHECK(FindLatestCheckpoint(root + "/day1").value() == root + "/day1");  // a save_dir itself
  CHECK(FindLatestCheckpoint(root + "/broken").value().empty());
}

}  // namespace
}  // namespace fleetps::server
