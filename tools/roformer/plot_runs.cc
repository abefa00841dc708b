// `roformer plot runs`: one PNG comparing several training runs (their metrics.jsonl), e.g. the
// position-encoding ablation, plus a Markdown table of each run's final and best values.
#include <fmt/core.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "plot/plot.h"

namespace roformer {

int plot_runs(const PlotRunsOptions& o) {
  if (o.runs.empty()) throw std::invalid_argument("--runs: give at least one run directory");
  if (!o.labels.empty() && o.labels.size() != o.runs.size()) {
    throw std::invalid_argument("--labels: give one label per run (" + std::to_string(o.runs.size()) + ")");
  }
  plot::Chart chart;
  chart.title = o.title;
  chart.x_label = "step";
  const bool higher_better = o.metric == "val_bleu";
  chart.y_label = o.metric == "val_loss"   ? "validation cross-entropy (nats/token)"
                  : o.metric == "val_bleu" ? "validation BLEU"
                                           : "training cross-entropy (nats/token)";
  std::string table = "| run | steps | final " + o.metric + " | best " + o.metric + " | training time |\n|---|---|---|---|---|\n";
  for (size_t i = 0; i < o.runs.size(); ++i) {
    const std::string path = o.runs[i] + "/metrics.jsonl";
    std::ifstream in(path);
    if (!in) throw io::Error(path + ": cannot open");
    plot::Series s;
    s.label = o.labels.empty() ? std::filesystem::path(o.runs[i]).filename().string() : o.labels[i];
    double best = higher_better ? -INFINITY : INFINITY, last = NAN, elapsed = 0;
    int64_t steps = 0;
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw io::Error(path + ":" + std::to_string(n) + ": not a JSON line: " + e.what());
      }
      steps = j.value("step", steps);
      elapsed = j.value("elapsed_s", elapsed);
      if (!j.contains(o.metric)) continue;
      const double v = j[o.metric].get<double>();
      s.x.push_back(static_cast<double>(steps));
      s.y.push_back(v);
      last = v;
      best = higher_better ? std::max(best, v) : std::min(best, v);
    }
    if (s.x.empty()) throw io::Error(path + ": no '" + o.metric + "' values");
    s.markers = o.metric != "loss";
    table += fmt::format("| {} | {} | {:.4f} | {:.4f} | {:.0f} s |\n", s.label, steps, last, best, elapsed);
    chart.series.push_back(std::move(s));
  }
  if (o.baseline > 0) chart.hlines.push_back({"unigram baseline", o.baseline});
  io::write_file_atomic(o.out, plot::render_png(chart));
  fmt::print("{}", table);
  if (!o.table.empty()) io::write_file_atomic(o.table, table);
  return 0;
}

}  // namespace roformer
