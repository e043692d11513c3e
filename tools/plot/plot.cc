#include "tools/plot/plot.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace fleetps::plot {
namespace {

// 3x5 glyphs, rows top to bottom ('#' set).
const std::map<char, const char*>& Glyphs() {
  static const std::map<char, const char*> kGlyphs = {
      {'0', "####.##.##.####"}, {'1', ".#.##..#..#.###"}, {'2', "###..#####..###"}, {'3', "###..#.##..####"},
      {'4', "#.##.####..#..#"}, {'5', "####..###..####"}, {'6', "####..####.####"}, {'7', "###..#.#..#..#."},
      {'8', "####.#####.####"}, {'9', "####.####..####"}, {'a', ".#.#.#####.##.#"}, {'b', "##.#.###.#.###."},
      {'c', ".###..#..#...##"}, {'d', "##.#.##.##.###."}, {'e', "####..##.#..###"}, {'f', "####..##.#..#.."},
      {'g', ".###..#.##.#.##"}, {'h', "#.##.#####.##.#"}, {'i', "###.#..#..#.###"}, {'j', "..#..#..##.#.#."},
      {'k', "#.##.###.#.##.#"}, {'l', "#..#..#..#..###"}, {'m', "#.########.##.#"}, {'n', "##.#.##.##.##.#"},
      {'o', ".#.#.##.##.#.#."}, {'p', "##.#.###.#..#.."}, {'q', ".#.#.##.###..##"}, {'r', "##.#.###.#.##.#"},
      {'s', ".###...#...###."}, {'t', "###.#..#..#..#."}, {'u', "#.##.##.##.####"}, {'v', "#.##.##.##.#.#."},
      {'w', "#.##.########.#"}, {'x', "#.##.#.#.#.##.#"}, {'y', "#.##.#.#..#..#."}, {'z', "###..#.#.#..###"},
      {'.', ".............#."}, {'-', "......###......"}, {'_', "............###"}, {':', "....#.....#...."},
      {'/', "..#..#.#.#..#.."}, {'(', ".#.#..#..#...#."}, {')', ".#...#..#..#.#."}, {'+', "....#.###.#...."},
      {' ', "..............."}, {'?', "##...#.#.....#."}, {'%', "#.#..#.#.#..#.#"}, {',', "..........#.#.."},
  };
  return kGlyphs;
}

// "12", "1.5k", "2m" for example counts; "0.452" for loss and AUC.
std::string Tick(double v, bool count) {
  char buf[32];
  if (count) {
    if (v >= 1e6) {
      std::snprintf(buf, sizeof(buf), "%gm", std::round(v / 1e5) / 10);
    } else if (v >= 1e3) {
      std::snprintf(buf, sizeof(buf), "%gk", std::round(v / 1e2) / 10);
    } else {
      std::snprintf(buf, sizeof(buf), "%.0f", v);
    }
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  }
  return buf;
}

void AppendU32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>((v >> shift) & 0xff));
}

void Chunk(std::string* png, const char* type, const std::string& data) {
  AppendU32(png, static_cast<uint32_t>(data.size()));
  std::string body = std::string(type, 4) + data;
  png->append(body);
  AppendU32(png, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size())));
}

struct Panel {
  int x0, y0, x1, y1;  // plot area, inclusive
  double xmin, xmax, ymin, ymax;
  int X(double x) const { return x0 + static_cast<int>((x - xmin) / (xmax - xmin) * (x1 - x0) + 0.5); }
  int Y(double y) const { return y1 - static_cast<int>((y - ymin) / (ymax - ymin) * (y1 - y0) + 0.5); }
};

void DrawPanel(Canvas& c, const Panel& p, const std::string& title, const std::vector<Curve>& curves,
               double CurvePoint::*field) {
  constexpr uint32_t kAxis = 0x000000, kGrid = 0xdddddd, kText = 0x222222;
  for (int i = 0; i <= 4; ++i) {  // grid and ticks
    const double fx = p.xmin + (p.xmax - p.xmin) * i / 4, fy = p.ymin + (p.ymax - p.ymin) * i / 4;
    const int x = p.X(fx), y = p.Y(fy);
    c.Line(x, p.y0, x, p.y1, kGrid);
    c.Line(p.x0, y, p.x1, y, kGrid);
    const std::string xt = Tick(fx, true), yt = Tick(fy, false);
    c.Text(x - Canvas::TextWidth(xt) / 2, p.y1 + 8, xt, kText);
    c.Text(p.x0 - 8 - Canvas::TextWidth(yt), y - 5, yt, kText);
  }
  c.Line(p.x0, p.y0, p.x0, p.y1, kAxis);
  c.Line(p.x0, p.y1, p.x1, p.y1, kAxis);
  c.Text(p.x0, p.y0 - 16, title, kText);
  c.Text(p.x1 - Canvas::TextWidth("examples"), p.y1 + 24, "examples", kText);
  for (size_t s = 0; s < curves.size(); ++s) {
    const auto& pts = curves[s].points;
    for (size_t i = 0; i < pts.size(); ++i) {
      const int x = p.X(static_cast<double>(pts[i].examples)), y = p.Y(pts[i].*field);
      if (i > 0) {
        c.Line(p.X(static_cast<double>(pts[i - 1].examples)), p.Y(pts[i - 1].*field), x, y, SeriesColor(s), 2);
      } else {
        c.Fill(x - 1, y - 1, x + 1, y + 1, SeriesColor(s));  // a lone point stays visible
      }
    }
  }
}

}  // namespace

uint32_t SeriesColor(size_t i) {
  static const uint32_t kColors[] = {0xd62728, 0x1f77b4, 0x2ca02c, 0xff7f0e, 0x9467bd, 0x8c564b, 0xe377c2, 0x17becf};
  return kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
}

StatusOr<Curve> ReadReportCurve(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read report " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.find("\"epochs\"") == std::string::npos) {
    return Status::InvalidArgument(path + " is not a cpu-trainer --report file (no \"epochs\")");
  }
  Curve curve;
  curve.label = std::filesystem::path(path).filename().string();
  // Points as WriteReport writes them: {"epoch": E, "step": S, "examples": X, "loss": L, "auc": A, ...}
  // (parsed by hand: GCC 12 -O1 with sanitizers warns inside <regex>).
  const std::string kStart = "\"step\": ";
  for (size_t at = text.find(kStart); at != std::string::npos; at = text.find(kStart, at + 1)) {
    auto number_after = [&](const std::string& key, size_t from, double* out) {
      const size_t k = text.find("\"" + key + "\": ", from);
      if (k == std::string::npos || k > text.find('}', from)) return false;
      *out = std::strtod(text.c_str() + k + key.size() + 4, nullptr);
      return true;
    };
    double examples = 0;
    CurvePoint p;
    if (!number_after("examples", at, &examples) || !number_after("loss", at, &p.loss) ||
        !number_after("auc", at, &p.auc)) {
      continue;
    }
    p.examples = static_cast<uint64_t>(examples);
    if (std::isfinite(p.loss) && std::isfinite(p.auc)) curve.points.push_back(p);
  }
  if (curve.points.empty()) {
    return Status::InvalidArgument(path +
                                   " has no loss/AUC curve: its epochs had fewer steps than "
                                   "runner.print_interval (lower it), or an older cpu-trainer wrote it");
  }
  return curve;
}

Canvas::Canvas(int width, int height)
    : width_(width), height_(height), rgb_(static_cast<size_t>(width) * height * 3, 0xff) {}

void Canvas::Set(int x, int y, uint32_t rgb) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
  p[0] = static_cast<uint8_t>(rgb >> 16);
  p[1] = static_cast<uint8_t>(rgb >> 8);
  p[2] = static_cast<uint8_t>(rgb);
}

uint32_t Canvas::Get(int x, int y) const {
  const uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
  return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
}

void Canvas::Fill(int x0, int y0, int x1, int y1, uint32_t rgb) {
  for (int y = y0; y <= y1; ++y) {
    for (int x = x0; x <= x1; ++x) Set(x, y, rgb);
  }
}

void Canvas::Line(int x0, int y0, int x1, int y1, uint32_t rgb, int thickness) {
  const int dx = std::abs(x1 - x0), sx = x0 < x1 ? 1 : -1, dy = -std::abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  while (true) {
    Fill(x0 - (thickness - 1) / 2, y0 - (thickness - 1) / 2, x0 + thickness / 2, y0 + thickness / 2, rgb);
    if (x0 == x1 && y0 == y1) break;
    const int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y0 += sy;
    }
  }
}

void Canvas::Text(int x, int y, const std::string& text, uint32_t rgb, int scale) {
  const auto& glyphs = Glyphs();
  for (char ch : text) {
    auto it = glyphs.find(static_cast<char>(std::tolower(static_cast<unsigned char>(ch))));
    const char* g = it == glyphs.end() ? glyphs.at('?') : it->second;
    for (int r = 0; r < 5; ++r) {
      for (int col = 0; col < 3; ++col) {
        const size_t at = static_cast<size_t>(r * 3 + col);
        if (at < std::strlen(g) && g[at] == '#') {
          Fill(x + col * scale, y + r * scale, x + col * scale + scale - 1, y + r * scale + scale - 1, rgb);
        }
      }
    }
    x += 4 * scale;
  }
}

StatusOr<std::string> Canvas::EncodePng() const {
  std::string raw;
  raw.reserve(static_cast<size_t>(height_) * (width_ * 3 + 1));
  for (int y = 0; y < height_; ++y) {
    raw.push_back(0);  // filter: none
    raw.append(reinterpret_cast<const char*>(&rgb_[static_cast<size_t>(y) * width_ * 3]),
               static_cast<size_t>(width_) * 3);
  }
  uLongf size = compressBound(raw.size());
  std::string z(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(z.data()), &size, reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 6) !=
      Z_OK) {
    return Status::Internal("zlib could not compress the image");
  }
  z.resize(size);
  std::string png("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  AppendU32(&ihdr, static_cast<uint32_t>(width_));
  AppendU32(&ihdr, static_cast<uint32_t>(height_));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB, deflate, no filter set, no interlace
  Chunk(&png, "IHDR", ihdr);
  Chunk(&png, "IDAT", z);
  Chunk(&png, "IEND", "");
  return png;
}

Canvas PlotCurves(const std::vector<Curve>& curves, int width, int height) {
  Canvas c(width, height);
  double xmax = 1, lmin = 1e300, lmax = -1e300, amin = 1e300, amax = -1e300;
  for (const auto& curve : curves) {
    for (const auto& p : curve.points) {
      xmax = std::max(xmax, static_cast<double>(p.examples));
      lmin = std::min(lmin, p.loss);
      lmax = std::max(lmax, p.loss);
      amin = std::min(amin, p.auc);
      amax = std::max(amax, p.auc);
    }
  }
  auto pad = [](double& lo, double& hi) {
    if (lo > hi) lo = 0, hi = 1;
    const double span = std::max(hi - lo, 1e-3);
    lo -= span * 0.05;
    hi += span * 0.05;
  };
  pad(lmin, lmax);
  pad(amin, amax);
  const int left = 90, right = width - 30, panel_h = (height - 170) / 2;
  const Panel loss{left, 40, right, 40 + panel_h, 0, xmax, lmin, lmax};
  const Panel auc{left, 40 + panel_h + 80, right, 40 + 2 * panel_h + 80, 0, xmax, amin, amax};
  DrawPanel(c, loss, "loss", curves, &CurvePoint::loss);
  DrawPanel(c, auc, "auc", curves, &CurvePoint::auc);
  // Legend, top right of the loss panel.
  int ly = loss.y0 + 8;
  for (size_t s = 0; s < curves.size(); ++s, ly += 16) {
    const int lx = right - 12 - Canvas::TextWidth(curves[s].label) - 24;
    c.Fill(lx, ly + 3, lx + 16, ly + 6, SeriesColor(s));
    c.Text(lx + 22, ly, curves[s].label, 0x222222);
  }
  return c;
}

}  // namespace fleetps::plot
