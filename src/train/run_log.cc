// The metrics log of every training run (see run_log.h).
#include "run_log.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "io/atomic_file.h"
#include "io/weights.h"

namespace train {
namespace {

using nlohmann::json;

json record_json(const EvalRecord& r) {
  json j = {{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
            {"tokens_per_s", r.tokens_per_s}, {"elapsed_s", r.elapsed_s}};
  if (std::isfinite(r.epoch)) j["epoch"] = r.epoch;
  if (std::isfinite(r.val_loss)) j["val_loss"] = r.val_loss;
  for (const auto& [k, v] : r.metrics) j["val_" + k] = std::isfinite(v) ? json(v) : json(nullptr);
  return j;
}

EvalRecord record_from_json(const json& j) {
  EvalRecord r{j.at("step"), j.value("epoch", static_cast<double>(NAN)), j.at("loss"), j.at("lr"), j.at("grad_norm"), j.at("tokens_per_s"),
               j.at("elapsed_s"), j.contains("val_loss") ? j["val_loss"].get<double>() : NAN, {}};
  for (const auto& [k, v] : j.items()) {
    if (k.rfind("val_", 0) == 0 && k != "val_loss") r.metrics[k.substr(4)] = v.is_null() ? NAN : v.get<double>();
  }
  return r;
}

}  // namespace

RunLog::RunLog(const std::string& out, int64_t resumed_step, bool writer) : out_(out) {
  const std::string path = out + "/metrics.jsonl";
  if (resumed_step >= 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      try {
        EvalRecord r = record_from_json(json::parse(line));
        if (r.step <= resumed_step) history_.push_back(std::move(r));
      } catch (const json::exception&) {
        break;  // a line torn by a crash ends the log
      }
    }
  }
  if (!writer) return;
  std::string text;
  for (const auto& r : history_) text += record_json(r).dump() + "\n";
  io::write_file_atomic(path, text);
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) throw io::Error(path + ": cannot open for appending");
}

RunLog::~RunLog() {
  if (file_) std::fclose(file_);
}

void RunLog::append(const EvalRecord& r) {
  history_.push_back(r);
  if (!file_) return;
  std::fprintf(file_, "%s\n", record_json(r).dump().c_str());
  std::fflush(file_);
}

void RunLog::write_csv() const {
  if (!file_) return;
  std::set<std::string> names;
  for (const auto& r : history_) for (const auto& [k, v] : r.metrics) names.insert(k);
  std::ostringstream csv;
  csv << "step,epoch,loss,lr,grad_norm,tokens_per_s,elapsed_s,val_loss";
  for (const auto& n : names) csv << ",val_" << n;
  csv << '\n';
  for (const auto& r : history_) {
    csv << r.step << ',';
    if (std::isfinite(r.epoch)) csv << r.epoch;
    csv << ',' << r.loss << ',' << r.lr << ',' << r.grad_norm << ',' << r.tokens_per_s << ','
        << r.elapsed_s << ',';
    if (std::isfinite(r.val_loss)) csv << r.val_loss;
    for (const auto& n : names) {
      csv << ',';
      if (r.metrics.count(n) && std::isfinite(r.metrics.at(n))) csv << r.metrics.at(n);
    }
    csv << '\n';
  }
  io::write_file_atomic(out_ + "/metrics.csv", csv.str());
}

}  // namespace train
