#pragma once
// fleetps-plot: training curves from cpu-trainer --report files, as a PNG: loss (top) and
// AUC (bottom) against the examples each trainer had trained, one line per report.
// The PNG is drawn here (a small RGB canvas with a 3x5 pixel font, written with zlib), so
// the tool needs no plotting library. Thread-safety: functions of values.

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fleetps::plot {

struct CurvePoint {
  uint64_t examples = 0;
  double loss = 0;
  double auc = 0;
};

struct Curve {
  std::string label;  // the report's file name
  std::vector<CurvePoint> points;
};

// The "curve" points of every epoch of a cpu-trainer --report file, in order. Errors name
// the file: missing, or without a curve (no print_interval was reached).
StatusOr<Curve> ReadReportCurve(const std::string& path);

// An RGB image.
class Canvas {
 public:
  Canvas(int width, int height);
  int width() const { return width_; }
  int height() const { return height_; }
  void Set(int x, int y, uint32_t rgb);
  uint32_t Get(int x, int y) const;
  void Fill(int x0, int y0, int x1, int y1, uint32_t rgb);  // inclusive
  void Line(int x0, int y0, int x1, int y1, uint32_t rgb, int thickness = 1);
  // Text in the 3x5 font scaled by `scale`, top-left at (x, y); letters are drawn lower case.
  void Text(int x, int y, const std::string& text, uint32_t rgb, int scale = 2);
  static int TextWidth(const std::string& text, int scale = 2) { return static_cast<int>(text.size()) * 4 * scale; }
  // The image as PNG bytes (8-bit RGB, zlib-compressed).
  StatusOr<std::string> EncodePng() const;

 private:
  int width_, height_;
  std::vector<uint8_t> rgb_;
};

// Draws the curves (loss and AUC panels, axes with labelled ticks, a legend).
Canvas PlotCurves(const std::vector<Curve>& curves, int width = 960, int height = 720);

// The colour of the i-th curve.
uint32_t SeriesColor(size_t i);

}  // namespace fleetps::plot
