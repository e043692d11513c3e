// gemm_bench: GFLOP/s of one core on the dense layers' matrix products, per backend and
// precision: OpenBLAS (the system BLAS, as a reference) and fleetps's dense backend
// (common/dense: oneDNN) in fp32 and, where the CPU has bf16 units, bf16. Prints a markdown
// table for docs/BENCHMARKS.md; bench/gemm_bench/run.sh puts PyTorch's matmul beside it.
//   gemm_bench [--batch 512] [--model ctr_dnn|deepfm|dlrm ...] [--min-ms 300]
// The shapes are each model's hidden MLP layers (configs/<model>.yaml) at the batch: forward
// x W, and backward x^T dy (weight gradient) and dy W^T (input gradient).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config/trainer_config.h"
#include "common/dense/cpu_features.h"
#include "common/dense/cpu_gemm.h"

extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace {

using namespace fleetps;
using Clock = std::chrono::steady_clock;

struct Shape {
  std::string what;
  dense::Op op_a, op_b;
  size_t m, n, k;
};

// Seconds per call of f, the best of repeated timings over at least min_ms.
template <typename F>
double Time(F&& f, double min_ms) {
  f();
  double best = 1e9;
  const auto start = Clock::now();
  int runs = 0;
  while (runs < 5 || std::chrono::duration<double, std::milli>(Clock::now() - start).count() < min_ms) {
    const auto t = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t).count());
    ++runs;
  }
  return best;
}

// (in, out) of each hidden layer of the model's MLPs (the output layer, 1 or 2 wide, left out).
std::vector<std::pair<size_t, size_t>> MlpLayers(const ModelOptions& o) {
  std::vector<std::pair<size_t, size_t>> layers;
  const auto chain = [&](size_t in, const std::vector<uint32_t>& widths, size_t count) {
    for (size_t i = 0; i < count; ++i) {
      layers.emplace_back(in, widths[i]);
      in = widths[i];
    }
  };
  if (o.type == ModelType::kDlrm) {
    const size_t vectors = o.num_sparse_slots + 1;
    chain(o.dense_input_dim, o.bot_layer_sizes, o.bot_layer_sizes.size());
    chain(o.sparse_feature_dim + vectors * (vectors - 1) / 2, o.top_layer_sizes, o.top_layer_sizes.size() - 1);
  } else {
    chain(DenseInputDim(o), o.fc_sizes, o.fc_sizes.size());
  }
  return layers;
}

CBLAS_TRANSPOSE Blas(dense::Op op) { return op == dense::Op::kT ? CblasTrans : CblasNoTrans; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GFLOP/s per core of the dense layers' products, per backend and precision"};
  size_t batch = 512;
  std::vector<std::string> models = {"ctr_dnn", "deepfm", "dlrm"};
  double min_ms = 300;
  bool shapes_only = false;
  app.add_option("--batch", batch, "rows per product (the batch size)");
  app.add_flag("--shapes-only", shapes_only, "print 'model product m n k op_a op_b' lines and exit (torch_matmul.py)");
  app.add_option("--model", models, "models whose MLP layers to time (configs/<model>.yaml)");
  app.add_option("--min-ms", min_ms, "time each product at least this long");
  CLI11_PARSE(app, argc, argv);
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(1);

  const dense::CpuFeatures cpu = dense::DetectCpuFeatures();
  dense::CpuGemmOptions fp32_options, bf16_options;
  bf16_options.precision = dense::Precision::kBf16;
  auto fp32 = dense::CpuGemm::Create(fp32_options);
  if (!fp32.ok()) {
    std::fprintf(stderr, "%s\n", fp32.status().ToString().c_str());
    return 1;
  }
  auto bf16 = dense::CpuGemm::Create(bf16_options);
  if (!shapes_only) {
    std::printf("CPU: %s (%s), flags: %s\n", cpu.model.c_str(), cpu.vendor.c_str(), cpu.FlagList().c_str());
    std::printf("fp32: %s\nbf16: %s\n\n", (*fp32)->Describe().c_str(),
                bf16.ok() ? (*bf16)->Describe().c_str() : bf16.status().message().c_str());
    std::printf("| model | product | m x n x k | OpenBLAS fp32 | oneDNN fp32 | oneDNN bf16 | bf16 / OpenBLAS |\n");
    std::printf("|---|---|---|---:|---:|---:|---:|\n");
  }
  double total_flop = 0, total_blas = 0, total_fp32 = 0, total_bf16 = 0;
  for (const std::string& model : models) {
    auto job = config::LoadTrainerYaml(std::string(FLEETPS_SOURCE_DIR) + "/configs/" + model + ".yaml");
    if (!job.ok()) {
      std::fprintf(stderr, "%s\n", job.status().ToString().c_str());
      return 1;
    }
    std::vector<Shape> shapes;
    for (const auto& [in, out] : MlpLayers(job->model)) {
      shapes.push_back({"x W", dense::Op::kN, dense::Op::kN, batch, out, in});
      shapes.push_back({"x^T dy", dense::Op::kT, dense::Op::kN, in, out, batch});
      shapes.push_back({"dy W^T", dense::Op::kN, dense::Op::kT, batch, in, out});
    }
    for (const Shape& s : shapes) {
      if (shapes_only) {
        std::printf("%s|%s|%zu|%zu|%zu|%c|%c\n", model.c_str(), s.what.c_str(), s.m, s.n, s.k,
                    s.op_a == dense::Op::kT ? 'T' : 'N', s.op_b == dense::Op::kT ? 'T' : 'N');
        continue;
      }
      const size_t a_size = s.m * s.k, b_size = s.k * s.n;
      std::vector<float> a(a_size), b(b_size), c(s.m * s.n);
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.02f - 0.06f;
      const size_t lda = s.op_a == dense::Op::kN ? s.k : s.m, ldb = s.op_b == dense::Op::kN ? s.n : s.k;
      const double flop = 2.0 * s.m * s.n * s.k;
      const double t_blas = Time(
          [&] {
            cblas_sgemm(CblasRowMajor, Blas(s.op_a), Blas(s.op_b), int(s.m), int(s.n), int(s.k), 1.0f, a.data(),
                        int(lda), b.data(), int(ldb), 0.0f, c.data(), int(s.n));
          },
          min_ms);
      const auto run = [&](const dense::CpuGemm& g) {
        return Time([&] { g.Gemm(s.op_a, s.op_b, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n); },
                    min_ms);
      };
      const double t_fp32 = run(**fp32);
      const double t_bf16 = bf16.ok() ? run(**bf16) : 0;
      total_flop += flop;
      total_blas += t_blas;
      total_fp32 += t_fp32;
      total_bf16 += t_bf16;
      std::printf("| %s | %s | %zux%zux%zu | %.1f | %.1f | %s | %s |\n", model.c_str(), s.what.c_str(), s.m, s.n, s.k,
                  flop / t_blas / 1e9, flop / t_fp32 / 1e9,
                  bf16.ok() ? std::to_string(int(flop / t_bf16 / 1e9 + 0.5)).c_str() : "-",
                  bf16.ok() ? (std::to_string(t_blas / t_bf16).substr(0, 4) + "x").c_str() : "-");
    }
  }
  if (shapes_only) return 0;
  std::printf("| all | every product above, summed | | %.1f | %.1f | %s | %s |\n", total_flop / total_blas / 1e9,
              total_flop / total_fp32 / 1e9,
              bf16.ok() ? std::to_string(int(total_flop / total_bf16 / 1e9 + 0.5)).c_str() : "-",
              bf16.ok() ? (std::to_string(total_blas / total_bf16).substr(0, 4) + "x").c_str() : "-");
  return 0;
}
