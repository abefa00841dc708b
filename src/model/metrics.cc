// Fine-tuning metrics (see metrics.h).
#include "model/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace model {
namespace {

void check_sizes(size_t a, size_t b) {
  if (a != b) throw std::invalid_argument("metric: the two vectors differ in length");
  if (a == 0) throw std::invalid_argument("metric: no examples");
}

// confusion[t][p]: examples of true class t predicted as p.
std::vector<std::vector<double>> confusion(const std::vector<int64_t>& truth, const std::vector<int64_t>& predicted,
                                          int64_t n) {
  check_sizes(truth.size(), predicted.size());
  std::vector<std::vector<double>> c(n, std::vector<double>(n, 0.0));
  for (size_t i = 0; i < truth.size(); ++i) {
    if (truth[i] < 0 || truth[i] >= n || predicted[i] < 0 || predicted[i] >= n) {
      throw std::invalid_argument("metric: a class id is outside [0, " + std::to_string(n) + ")");
    }
    c[truth[i]][predicted[i]] += 1;
  }
  return c;
}

double f1_of(const std::vector<std::vector<double>>& c, int64_t k) {
  double tp = c[k][k], fp = 0, fn = 0;
  for (size_t j = 0; j < c.size(); ++j) {
    if (static_cast<int64_t>(j) == k) continue;
    fp += c[j][k];
    fn += c[k][j];
  }
  return tp == 0 ? 0.0 : 2 * tp / (2 * tp + fp + fn);
}

std::vector<double> ranks(const std::vector<double>& x) {
  std::vector<size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
    const double mean_rank = (static_cast<double>(i) + static_cast<double>(j)) / 2 + 1;
    for (size_t k = i; k <= j; ++k) r[order[k]] = mean_rank;
    i = j + 1;
  }
  return r;
}

}  // namespace

double accuracy(const std::vector<int64_t>& truth, const std::vector<int64_t>& predicted) {
  check_sizes(truth.size(), predicted.size());
  int64_t right = 0;
  for (size_t i = 0; i < truth.size(); ++i) right += truth[i] == predicted[i];
  return static_cast<double>(right) / static_cast<double>(truth.size());
}

double f1_binary(const std::vector<int64_t>& truth, const std::vector<int64_t>& predicted, int64_t positive) {
  int64_t n = std::max<int64_t>(2, positive + 1);
  for (const int64_t v : truth) n = std::max(n, v + 1);
  for (const int64_t v : predicted) n = std::max(n, v + 1);
  return f1_of(confusion(truth, predicted, n), positive);
}

double f1_macro(const std::vector<int64_t>& truth, const std::vector<int64_t>& predicted, int64_t num_classes) {
  const auto c = confusion(truth, predicted, num_classes);
  double sum = 0;
  for (int64_t k = 0; k < num_classes; ++k) sum += f1_of(c, k);
  return sum / static_cast<double>(num_classes);
}

double matthews(const std::vector<int64_t>& truth, const std::vector<int64_t>& predicted, int64_t num_classes) {
  const auto c = confusion(truth, predicted, num_classes);
  // sklearn: (c·s − Σ_k p_k t_k) / sqrt((s² − Σ p_k²)(s² − Σ t_k²)), t_k true counts, p_k predicted counts.
  double s = 0, correct = 0, pt = 0, pp = 0, tt = 0;
  std::vector<double> t(num_classes, 0.0), p(num_classes, 0.0);
  for (int64_t i = 0; i < num_classes; ++i) {
    for (int64_t j = 0; j < num_classes; ++j) {
      t[i] += c[i][j];
      p[j] += c[i][j];
      s += c[i][j];
    }
    correct += c[i][i];
  }
  for (int64_t k = 0; k < num_classes; ++k) pt += p[k] * t[k], pp += p[k] * p[k], tt += t[k] * t[k];
  const double denom = (s * s - pp) * (s * s - tt);
  return denom == 0 ? 0.0 : (correct * s - pt) / std::sqrt(denom);
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  check_sizes(x.size(), y.size());
  const double n = static_cast<double>(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n, my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx == 0 || syy == 0) return NAN;
  return std::clamp(sxy / std::sqrt(sxx * syy), -1.0, 1.0);
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  check_sizes(x.size(), y.size());
  return pearson(ranks(x), ranks(y));
}

std::map<std::string, double> classification_metrics(ProblemType problem_type, int64_t labels,
                                                     const std::vector<float>& logits,
                                                     const std::vector<int64_t>& class_targets,
                                                     const std::vector<float>& value_targets) {
  const int64_t n = static_cast<int64_t>(logits.size()) / labels;
  std::map<std::string, double> m;
  if (problem_type == ProblemType::single_label_classification) {
    std::vector<int64_t> predicted(n);
    for (int64_t i = 0; i < n; ++i) {
      const float* z = logits.data() + i * labels;
      predicted[i] = std::max_element(z, z + labels) - z;
    }
    m["accuracy"] = accuracy(class_targets, predicted);
    if (labels == 2) m["f1"] = f1_binary(class_targets, predicted, 1);
    m["f1_macro"] = f1_macro(class_targets, predicted, labels);
    m["mcc"] = matthews(class_targets, predicted, labels);
  } else if (problem_type == ProblemType::multi_label_classification) {
    double tp = 0, fp = 0, fn = 0, exact = 0;
    for (int64_t i = 0; i < n; ++i) {
      bool all = true;
      for (int64_t k = 0; k < labels; ++k) {
        const bool pred = logits[i * labels + k] > 0, truth = value_targets[i * labels + k] > 0.5f;
        tp += pred && truth, fp += pred && !truth, fn += !pred && truth;
        all = all && pred == truth;
      }
      exact += all;
    }
    m["accuracy"] = exact / static_cast<double>(n);
    m["f1_micro"] = tp == 0 ? 0.0 : 2 * tp / (2 * tp + fp + fn);
  } else if (problem_type == ProblemType::regression) {
    std::vector<double> x(logits.begin(), logits.end()), y(value_targets.begin(), value_targets.end());
    double se = 0;
    for (size_t i = 0; i < x.size(); ++i) se += (x[i] - y[i]) * (x[i] - y[i]);
    m["pearson"] = pearson(x, y);
    m["spearman"] = spearman(x, y);
    m["mse"] = se / static_cast<double>(x.size());
  } else {
    throw std::invalid_argument("classification metrics need a problem_type");
  }
  return m;
}

bool higher_is_better(const std::string& metric) { return metric != "loss" && metric != "mse"; }

}  // namespace model
