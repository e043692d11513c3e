// fleetps-datagen: writes a synthetic CTR data set (rank_dnn, multislot or slot_dnn lines)
// drawn from a known model and prints its Bayes-optimal AUC; with --conversion a second
// label, conversion, and its Bayes-optimal AUC too. See tools/datagen/datagen.h.

#include <chrono>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "tools/datagen/datagen.h"

int main(int argc, char** argv) {
  using fleetps::config::DataFormat;
  fleetps::datagen::DatagenOptions options;
  CLI::App app{"fleetps-datagen: synthetic CTR data from a known model, with its Bayes-optimal AUC"};
  app.add_option("--out-dir", options.out_dir, "Output directory: train/part-*, test/part-00000, data.yaml")
      ->required();
  app.add_option("--rows", options.rows, "Examples in total (train + test)")->capture_default_str();
  std::string format = "rank_dnn";
  app.add_option("--format", format, "Line format: rank_dnn | multislot | slot_dnn")
      ->capture_default_str()
      ->check([](const std::string& name) {
        DataFormat parsed;
        return fleetps::config::DataFormatFromName(name, &parsed) ? "" : "unknown format " + name;
      });
  app.add_option("--seed", options.seed, "Seed of the model and the samples")->capture_default_str();
  app.add_option("--test-fraction", options.test_fraction, "Share of rows in the test file, [0, 1)")
      ->capture_default_str();
  app.add_option("--train-files", options.train_files, "Train part files")->capture_default_str();
  app.add_option("--slots", options.sparse_slots, "Sparse slots")->capture_default_str();
  app.add_option("--dense-dim", options.dense_dim, "Dense features (0 for slot_dnn)")->capture_default_str();
  app.add_option("--vocab", options.vocab_size, "Distinct ids per slot")->capture_default_str();
  app.add_option("--zipf", options.zipf_exponent, "Zipf exponent of id frequencies")->capture_default_str();
  app.add_option("--history-len", options.history_len,
                 "Longest click history: the last slot becomes a history of slot 0's items that the label depends "
                 "on (0: none)")
      ->capture_default_str();
  app.add_flag("--estimation-limit", options.estimation_limit,
               "Also print the estimation limit: the AUC of every id's posterior mean given the training rows "
               "and all other true parameters (slower; memory grows with the distinct ids)");
  app.add_flag("--conversion", options.conversion,
               "Add a second label, conversion, after click (label slots [click, conversion]; slot_dnn "
               "[1, conversion]): 0 without a click, else drawn from its own model whose per-id weights share 0.6 "
               "of the click weights, converting about 25% of the clicks; also print its Bayes-optimal AUC "
               "(of p_click * p_cvr, over all rows)");
  CLI11_PARSE(app, argc, argv);
  fleetps::config::DataFormatFromName(format, &options.format);  // validated by the check above
  if (options.format == DataFormat::kSlotDnn && app.count("--dense-dim") == 0) options.dense_dim = 0;

  const auto start = std::chrono::steady_clock::now();
  const auto report = fleetps::datagen::GenerateDataset(options);
  if (!report.ok()) {
    std::cerr << "fleetps-datagen: " << report.status().ToString() << "\n";
    return 1;
  }
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  std::cout << "rows:       " << report->train_rows << " train (" << report->train_files.size() << " files), "
            << report->test_rows << " test\n"
            << "label mean: " << report->label_mean << "\n"
            << "bayes auc:  " << report->bayes_auc << "\n";
  if (!report->data_limited_auc.empty()) {
    std::cout << "bayes test auc: " << report->bayes_test_auc << " (test rows)\n";
    for (const auto& [k, auc] : report->data_limited_auc) {
      std::cout << "limit auc k=" << k << ": " << auc << " (test rows; ids seen < " << k
                << " times in train at their prior mean)\n";
    }
    if (options.estimation_limit) {
      std::cout << "estimation limit auc: " << report->estimation_limit_auc
                << " (test rows; each id at its posterior mean given the training rows and the true rest)\n";
    }
  }
  if (options.conversion) {
    std::cout << "conversion mean: " << report->conversion_mean << " (" << report->conversion_rate
              << " of the clicks)\n"
              << "bayes conversion auc: " << report->bayes_conversion_auc << " (p_click * p_cvr, all rows)\n";
    if (report->test_rows > 0) {
      std::cout << "bayes conversion test auc: " << report->bayes_conversion_test_auc << " (test rows)\n";
    }
    std::cout << "bayes cvr auc: " << report->bayes_cvr_auc << " (p_cvr, the clicked rows)\n";
  }
  std::cout << "config:     " << report->config_file << "\n"
            << "seconds:    " << seconds.count() << "\n";
  return 0;
}
