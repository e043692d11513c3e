// fleetps-plot: curves read from cpu-trainer reports, drawn in their colours, written as a
// PNG that zlib decodes back to the same pixels; reports without a curve are refused.
#include "tools/plot/plot.h"

#include <zlib.h>

#include <catch2/catch.hpp>

#include "test/support/process.h"

namespace fleetps::plot {
namespace {

const char* kReport =
    R"({"mode": "async", "trainer_id": 0, "trainers": 2, "threads": 1, "epochs": [{"epoch": 1, "examples": 900, "loss": 0.5, "auc": 0.6, "actual_ctr": 0.2, "predicted_ctr": 0.2, "seconds": 1.0, "examples_per_sec": 900.0, "dense_compute_sec": 0.1, "skipped_lines": 0, "curve": [{"epoch": 1, "step": 10, "examples": 300, "loss": 0.600000, "auc": 0.550000, "examples_per_sec": 1000.0}, {"epoch": 1, "step": 20, "examples": 600, "loss": 0.500000, "auc": 0.650000, "examples_per_sec": 1000.0}]}, {"epoch": 2, "examples": 900, "loss": 0.4, "auc": 0.7, "actual_ctr": 0.2, "predicted_ctr": 0.2, "seconds": 1.0, "examples_per_sec": 900.0, "dense_compute_sec": 0.1, "skipped_lines": 0, "curve": [{"epoch": 2, "step": 10, "examples": 1200, "loss": 0.420000, "auc": 0.710000, "examples_per_sec": 1000.0}]}], "test": null}
)";

uint32_t Be32(const std::string& s, size_t at) {
  return (uint32_t{static_cast<uint8_t>(s[at])} << 24) | (uint32_t{static_cast<uint8_t>(s[at + 1])} << 16) |
         (uint32_t{static_cast<uint8_t>(s[at + 2])} << 8) | static_cast<uint8_t>(s[at + 3]);
}

TEST_CASE("Report curves: every epoch's points in order, named after the file") {
  const std::string dir = testing::MakeTempDir("plot");
  testing::WriteFile(dir + "/trainer0.json", kReport);
  auto c = ReadReportCurve(dir + "/trainer0.json");
  REQUIRE(c.ok());
  CHECK(c->label == "trainer0.json");
  REQUIRE(c->points.size() == 3);
  CHECK(c->points[0].examples == 300);
  CHECK(c->points[2].examples == 1200);
  CHECK(c->points[2].loss == Approx(0.42));
  CHECK(c->points[1].auc == Approx(0.65));
  testing::WriteFile(dir + "/old.json", R"({"epochs": [{"epoch": 1, "examples": 9}], "test": null})");
  auto none = ReadReportCurve(dir + "/old.json");
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.status().message(),
             Catch::Contains("old.json has no loss/AUC curve") && Catch::Contains("print_interval"));
  CHECK(ReadReportCurve(dir + "/missing.json").status().IsNotFound());
  testing::WriteFile(dir + "/other.json", "{\"rows\": 3}");
  CHECK_THAT(ReadReportCurve(dir + "/other.json").status().message(), Catch::Contains("not a cpu-trainer --report"));
}

TEST_CASE("The plot draws each curve in its colour and encodes a PNG that decodes to the canvas") {
  Curve a{"a.json", {{100, 0.6, 0.55}, {200, 0.5, 0.65}, {300, 0.45, 0.7}}};
  Curve b{"b.json", {{100, 0.65, 0.5}, {300, 0.5, 0.6}}};
  const Canvas canvas = PlotCurves({a, b}, 640, 480);
  size_t red = 0, blue = 0;
  for (int y = 0; y < canvas.height(); ++y) {
    for (int x = 0; x < canvas.width(); ++x) {
      red += canvas.Get(x, y) == SeriesColor(0);
      blue += canvas.Get(x, y) == SeriesColor(1);
    }
  }
  CHECK(red > 500);  // two panels of lines, and the legend
  CHECK(blue > 300);
  auto png = canvas.EncodePng();
  REQUIRE(png.ok());
  REQUIRE(png->substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  CHECK(png->substr(12, 4) == "IHDR");
  CHECK(Be32(*png, 16) == 640);
  CHECK(Be32(*png, 20) == 480);
  const size_t idat_len = Be32(*png, 33);
  REQUIRE(png->substr(37, 4) == "IDAT");
  std::string raw(static_cast<size_t>(480) * (640 * 3 + 1), '\0');
  uLongf raw_len = raw.size();
  REQUIRE(uncompress(reinterpret_cast<Bytef*>(raw.data()), &raw_len, reinterpret_cast<const Bytef*>(png->data() + 41),
                     idat_len) == Z_OK);
  REQUIRE(raw_len == raw.size());
  // Spot-check pixels against the canvas (row filter byte 0, then RGB).
  for (int y : {0, 100, 479}) {
    for (int x : {0, 320, 639}) {
      const size_t at = static_cast<size_t>(y) * (640 * 3 + 1) + 1 + static_cast<size_t>(x) * 3;
      const uint32_t px = (uint32_t{static_cast<uint8_t>(raw[at])} << 16) |
                          (uint32_t{static_cast<uint8_t>(raw[at + 1])} << 8) | static_cast<uint8_t>(raw[at + 2]);
      CHECK(px == canvas.Get(x, y));
    }
  }
  const std::string tail = png->substr(png->size() - 12);
  CHECK(tail.substr(4, 4) == "IEND");
}

}  // namespace
}  // namespace fleetps::plot
