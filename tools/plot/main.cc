// fleetps-plot: loss and AUC against examples, from one or more cpu-trainer --report files.
//
//   fleetps-plot -o curves.png log/trainer0.json [log/trainer1.json ...]
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>

#include "tools/plot/plot.h"

int main(int argc, char** argv) {
  CLI::App cli{"fleetps-plot: a PNG of loss and AUC against examples from cpu-trainer --report files"};
  std::string out;
  std::vector<std::string> reports;
  int width = 960, height = 720;
  cli.add_option("-o,--output", out, "the PNG to write")->required();
  cli.add_option("reports", reports, "cpu-trainer --report JSON files (one line each)")->required();
  cli.add_option("--width", width, "pixels (default 960)")->check(CLI::Range(320, 8000));
  cli.add_option("--height", height, "pixels (default 720)")->check(CLI::Range(240, 8000));
  CLI11_PARSE(cli, argc, argv);
  std::vector<fleetps::plot::Curve> curves;
  for (const auto& r : reports) {
    auto c = fleetps::plot::ReadReportCurve(r);
    if (!c.ok()) {
      std::cerr << "fleetps-plot: " << c.status().message() << std::endl;
      return 1;
    }
    curves.push_back(std::move(*c));
  }
  auto png = fleetps::plot::PlotCurves(curves, width, height).EncodePng();
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  if (!png.ok() || !(f << *png) || !f.flush()) {
    std::cerr << "fleetps-plot: cannot write " << out << (png.ok() ? "" : ": " + png.status().message()) << std::endl;
    return 1;
  }
  size_t points = 0;
  for (const auto& c : curves) points += c.points.size();
  std::cout << "fleetps-plot: wrote " << out << " (" << curves.size() << " curve(s), " << points << " points)"
            << std::endl;
  return 0;
}
