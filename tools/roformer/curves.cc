// curves.png of a training run (see curves.h).
#include "curves.h"

#include <fmt/core.h>

#include <cmath>

#include "io/atomic_file.h"
#include "plot/plot.h"

namespace roformer {

void render_curves(const train::RunReport& r) {
  if (!r.history || r.history->empty()) return;
  const bool with_metric = !r.metric.empty() && r.metric != "loss";
  const std::string scaled = r.metric_scale == 1 ? "" : fmt::format(" × {:g}", r.metric_scale);
  plot::Series loss{"train loss (smoothed)", {}, {}}, val_loss{"validation loss", {}, {}},
      metric{"validation " + r.metric + scaled, {}, {}};
  val_loss.markers = metric.markers = true;
  double smoothed = NAN;
  for (const train::EvalRecord& e : *r.history) {
    smoothed = std::isfinite(smoothed) ? 0.9 * smoothed + 0.1 * e.loss : e.loss;  // EMA for a readable curve
    loss.x.push_back(static_cast<double>(e.step));
    loss.y.push_back(smoothed);
    if (std::isfinite(e.val_loss)) {
      val_loss.x.push_back(static_cast<double>(e.step));
      val_loss.y.push_back(e.val_loss);
    }
    const auto it = e.metrics.find(r.metric);
    if (with_metric && it != e.metrics.end() && std::isfinite(it->second)) {
      metric.x.push_back(static_cast<double>(e.step));
      metric.y.push_back(it->second * r.metric_scale);
    }
  }
  plot::Chart chart;
  chart.title = r.title;
  chart.x_label = "step";
  chart.y_label = with_metric ? "loss (nats) / " + r.metric + scaled : "cross-entropy (nats/token)";
  chart.series.push_back(loss);
  if (!val_loss.x.empty()) chart.series.push_back(val_loss);
  if (!metric.x.empty()) chart.series.push_back(metric);
  if (std::isfinite(r.baseline)) chart.hlines.push_back({r.baseline_label, r.baseline});
  io::write_file_atomic(r.out + "/curves.png", plot::render_png(chart));
}

}  // namespace roformer
