// The unknown-key check every config map goes through (common/config/yaml_util).
#include "common/config/yaml_util.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace fleetps::config {
namespace {

Status CheckKeys(const std::string& text, const std::string& section, const std::vector<std::string>& known,
                 const std::vector<std::string>& ignored = {}) {
  auto root = LoadYamlString(text, "t.yaml");
  REQUIRE(root.ok());
  const YAML::Node map = section.empty() ? *root : (*root)[section];
  return RejectUnknownKeys(map, known, YamlContext{"t.yaml", section}, ignored);
}

TEST_CASE("EditDistance is the Levenshtein distance") {
  CHECK(EditDistance("", "") == 0);
  CHECK(EditDistance("", "abc") == 3);
  CHECK(EditDistance("abc", "") == 3);
  CHECK(EditDistance("kitten", "sitting") == 3);
  CHECK(EditDistance("sitting", "kitten") == 3);
  CHECK(EditDistance("sync_mod", "sync_mode") == 1);  // deletion
  CHECK(EditDistance("model_save_pth", "model_save_path") == 1);
  CHECK(EditDistance("learning_rte", "learning_rate") == 1);
  CHECK(EditDistance("flaw", "lawn") == 2);
  CHECK(EditDistance("same", "same") == 0);
  CHECK(EditDistance("Same", "same") == 1);  // case counts here; ClosestMatch ignores it
}

TEST_CASE("ClosestMatch suggests only reasonably close candidates") {
  const std::vector<std::string> runner = {"sync_mode", "geo_step", "epochs", "model_save_path", "thread_num"};
  CHECK(ClosestMatch("sync_mod", runner) == "sync_mode");
  CHECK(ClosestMatch("SYNC_MODE", runner) == "sync_mode");  // case is ignored
  CHECK(ClosestMatch("model_save_pth", runner) == "model_save_path");
  CHECK(ClosestMatch("epoch", runner) == "epochs");
  CHECK(ClosestMatch("threads_num", runner) == "thread_num");
  CHECK(ClosestMatch("extra", {"server", "tables"}).empty());
  CHECK(ClosestMatch("batch", runner).empty());
  CHECK(ClosestMatch("x", {"id", "xy"}) == "xy");  // a one-letter word still gets one edit
  CHECK(ClosestMatch("anything", {}).empty());
  // Long words allow at most 3 edits.
  CHECK(ClosestMatch("aaaaaaaaaaaaaaaaaaaa", {"aaaaaaaaaaaaaaaaabbb"}) == "aaaaaaaaaaaaaaaaabbb");
  CHECK(ClosestMatch("aaaaaaaaaaaaaaaaaaaa", {"aaaaaaaaaaaaaaaabbbb"}).empty());
  // Ties go to the earlier candidate.
  CHECK(ClosestMatch("ab", {"ax", "ay"}) == "ax");
}

TEST_CASE("RejectUnknownKeys names file:line:column, the map and the closest key") {
  const std::string text =
      "runner:\n"
      "  epochs: 1\n"
      "  sync_mod: sync\n";
  Status st = CheckKeys(text, "runner", {"sync_mode", "epochs"});
  REQUIRE(st.IsInvalidArgument());
  CHECK(st.message() == "t.yaml:3:3: unknown key 'sync_mod' under 'runner' (did you mean 'sync_mode'?)");

  // Nothing close: the known keys are listed.
  st = CheckKeys("a: 1\nzzz: 2\n", "", {"a", "server", "tables"});
  CHECK(st.message() == "t.yaml:2:1: unknown key 'zzz' at the top level (known keys: a, server, tables)");

  // Flow maps: the column is the key's.
  st = CheckKeys("t:\n  - {id: 0, nmae: e}\n", "", {"t"});
  REQUIRE(st.ok());
  auto root = LoadYamlString("t:\n  - {id: 0, nmae: e}\n", "t.yaml");
  REQUIRE(root.ok());
  st = RejectUnknownKeys((*root)["t"][0], {"id", "name"}, YamlContext{"t.yaml", "t[0]"});
  CHECK(st.message() == "t.yaml:2:13: unknown key 'nmae' under 't[0]' (did you mean 'name'?)");
}

TEST_CASE("RejectUnknownKeys accepts ignored keys without suggesting them") {
  CHECK(CheckKeys("r:\n  use_gpu: false\n  epochs: 1\n", "r", {"epochs"}, {"use_gpu"}).ok());
  // "use_gpus" is one edit from an ignored key, but only read keys are suggested or listed.
  const Status st = CheckKeys("r:\n  use_gpus: false\n", "r", {"epochs"}, {"use_gpu"});
  CHECK(st.message() == "t.yaml:2:3: unknown key 'use_gpus' under 'r' (known keys: epochs)");
}

TEST_CASE("RejectUnknownKeys refuses a key given twice") {
  // yaml-cpp keeps both entries and reads the first, so `sync_mode: sync` below would lose.
  const Status st = CheckKeys("r:\n  sync_mode: async\n  epochs: 1\n  sync_mode: sync\n", "r", {"sync_mode", "epochs"});
  CHECK(st.message() == "t.yaml:4:3: duplicate key 'sync_mode' under 'r' (first at line 2); give each key once");
}

TEST_CASE("ReadChoice maps a name to its value, keeps the default when absent, lists the choices otherwise") {
  enum class Color { kRed, kGreen, kBlue };
  const auto choices = {
      std::pair<std::string_view, Color>{"red", Color::kRed}, {"green", Color::kGreen}, {"blue", Color::kBlue}};
  auto root = LoadYamlString("paint: {color: green, other: 1, shade: teal}\n", "t.yaml");
  REQUIRE(root.ok());
  const YamlContext ctx{"t.yaml", "paint"};
  Color c = Color::kRed;
  REQUIRE(ReadChoice((*root)["paint"], "color", ctx, choices, &c).ok());
  CHECK(c == Color::kGreen);
  Color absent = Color::kBlue;
  REQUIRE(ReadChoice((*root)["paint"], "hue", ctx, choices, &absent).ok());
  CHECK(absent == Color::kBlue);
  Status bad = ReadChoice((*root)["paint"], "shade", ctx, choices, &c);
  CHECK(bad.IsInvalidArgument());
  CHECK_THAT(bad.message(), Catch::Contains("t.yaml:1") && Catch::Contains("paint.shade") &&
                                Catch::Contains("unknown shade 'teal' (use red, green or blue)"));
  CHECK(c == Color::kGreen);
}

TEST_CASE("RejectUnknownKeys leaves non-maps to the caller") {
  CHECK(CheckKeys("r: [1, 2]\n", "r", {"a"}).ok());
  CHECK(CheckKeys("r: 3\n", "r", {"a"}).ok());
  CHECK(CheckKeys("other: 3\n", "r", {"a"}).ok());  // absent
  CHECK(CheckKeys("r:\n", "r", {"a"}).ok());        // null
  // A non-scalar key is not a name.
  CHECK_THAT(CheckKeys("r:\n  ? [a, b]\n  : 1\n", "r", {"a"}).message(), Catch::Contains("expected a name"));
}

}  // namespace
}  // namespace fleetps::config
