// `roformer rope check`, `roformer decay` and `roformer plot runs`: the flags of librope's accuracy
// check, RoPE's long-term decay bound and the training-run comparison plot.
#include <CLI/CLI.hpp>

#include <memory>

#include "commands.h"

namespace roformer {

void add_analysis_commands(CLI::App& app, CommandTable& commands) {
  CLI::App* rope = app.add_subcommand("rope", "RoPE kernel tools")->require_subcommand(1);
  auto check = std::make_shared<RopeCheckOptions>();
  CLI::App* check_cmd = rope->add_subcommand("check", "Max error of cos/sin and rotated outputs vs an exact oracle");
  check_cmd->add_option("--samples", check->samples, "Positions sampled per band")->check(CLI::Range(1, 1000000));
  check_cmd->add_flag("--json", check->json, "Print JSON instead of a table");

  auto decay = std::make_shared<DecayOptions>();
  CLI::App* decay_cmd = app.add_subcommand("decay", "RoPE's long-term decay bound vs relative distance (paper Fig. 2)");
  decay_cmd->add_option("--dim", decay->dim, "Rotary dimension d")->capture_default_str();
  decay_cmd->add_option("--base", decay->bases, "One or more bases (one curve each)")->capture_default_str();
  decay_cmd->add_option("--scaling", decay->scaling,
                        "Scaling specs: none, linear:F, ntk:F, dynamic-ntk:F:ORIG, yarn:F:ORIG, llama3:F:ORIG");
  decay_cmd->add_option("--max-distance", decay->max_distance, "Largest relative distance")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))->capture_default_str();
  decay_cmd->add_option("--png", decay->png, "Write the plot here");
  decay_cmd->add_option("--csv", decay->csv, "Write the values here");
  decay_cmd->add_flag("--log-x", decay->log_x, "Logarithmic distance axis");

  CLI::App* plot = app.add_subcommand("plot", "Plots")->require_subcommand(1);
  auto plot_runs = std::make_shared<PlotRunsOptions>();
  CLI::App* plot_runs_cmd = plot->add_subcommand("runs", "Compare training runs' metrics in one PNG, with a Markdown table");
  plot_runs_cmd->add_option("--runs", plot_runs->runs, "Run directories (holding metrics.jsonl)")->required();
  plot_runs_cmd->add_option("--labels", plot_runs->labels, "Legend labels, one per run");
  plot_runs_cmd->add_option("--metric", plot_runs->metric, "val_loss, loss or val_bleu (translate-train)")
      ->check(CLI::IsMember({"val_loss", "loss", "val_bleu"}));
  plot_runs_cmd->add_option("--out", plot_runs->out, "PNG file")->capture_default_str();
  plot_runs_cmd->add_option("--table", plot_runs->table, "Also write the Markdown table here");
  plot_runs_cmd->add_option("--title", plot_runs->title, "Chart title");
  plot_runs_cmd->add_option("--baseline", plot_runs->baseline, "Dashed unigram-baseline line at this loss");

  commands.add(check_cmd, [check] { return roformer::rope_check(*check); });
  commands.add(decay_cmd, [decay] { return roformer::rope_decay(*decay); });
  commands.add(plot_runs_cmd, [plot_runs] { return roformer::plot_runs(*plot_runs); });
}

}  // namespace roformer
