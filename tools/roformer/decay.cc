// `roformer decay`: the paper's Fig. 2, RoPE's long-term decay bound against the relative distance,
// one curve per setting (bases and scaling methods), as a PNG and a CSV.
#include <fmt/core.h>

#include <sstream>

#include "analysis/rope_decay.h"
#include "commands.h"
#include "io/atomic_file.h"
#include "plot/plot.h"
#include "rope/rope.hpp"

namespace roformer {

int rope_decay(const DecayOptions& o) {
  if (o.dim < 2 || o.dim % 2 != 0) throw std::invalid_argument("--dim must be even and >= 2");
  struct Setting {
    std::string label;
    std::vector<double> bound;
  };
  std::vector<Setting> settings;
  const std::vector<std::string> scalings = o.scaling.empty() ? std::vector<std::string>{"none"} : o.scaling;
  for (double base : o.bases) {
    for (const std::string& spec : scalings) {
      const rope_config cfg = analysis::rope_config_from_spec(o.dim, base, spec);
      rope::Plan plan(cfg);
      if (cfg.scaling.type == ROPE_SCALING_DYNAMIC_NTK) plan.set_seq_len(o.max_distance + 1);
      std::string label = fmt::format("base {:g}", base);
      if (spec != "none") label += ", " + spec;
      settings.push_back({label, analysis::rope_decay_bound(plan.inv_freq(), o.max_distance)});
    }
  }
  std::ostringstream csv;
  csv << "distance";
  for (const auto& s : settings) csv << ",\"" << s.label << '"';
  csv << '\n';
  for (int64_t r = 0; r <= o.max_distance; ++r) {
    csv << r;
    for (const auto& s : settings) csv << ',' << fmt::format("{:.9g}", s.bound[r]);
    csv << '\n';
  }
  if (!o.csv.empty()) io::write_file_atomic(o.csv, csv.str());
  if (!o.png.empty()) {
    plot::Chart chart;
    chart.title = fmt::format("RoPE long-term decay (d = {}): (1/(d/2)) Σ_j |S_j|", o.dim);
    chart.x_label = "relative distance m − n";
    chart.y_label = "relative upper bound";
    for (const auto& s : settings) {
      plot::Series series{s.label, {}, s.bound};
      for (int64_t r = 0; r <= o.max_distance; ++r) series.x.push_back(static_cast<double>(r));
      chart.series.push_back(std::move(series));
    }
    chart.log_x = o.log_x;
    if (o.log_x) {  // a log axis has no 0: start at distance 1
      for (auto& s : chart.series) {
        s.x.erase(s.x.begin());
        s.y.erase(s.y.begin());
      }
    }
    io::write_file_atomic(o.png, plot::render_png(chart));
  }
  if (o.csv.empty() && o.png.empty()) {
    fmt::print("{}", csv.str());
  } else {
    for (const auto& s : settings) {
      fmt::print("{}: bound at distance 0 = {:.3f}", s.label, s.bound[0]);
      for (int64_t r : {32, 64, 128, 256, 1024}) {
        if (r <= o.max_distance) fmt::print(", {} = {:.3f}", r, s.bound[r]);
      }
      fmt::print("\n");
    }
  }
  return 0;
}

}  // namespace roformer
