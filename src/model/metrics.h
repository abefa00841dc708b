// Evaluation metrics of fine-tuning, with the definitions of scikit-learn and SciPy (which the tests
// check them against): accuracy, F1 of the positive class (binary) and macro F1, Matthews
// correlation, Pearson's r and Spearman's ρ (Pearson on average ranks, ties sharing their mean rank).
// Degenerate cases follow scikit-learn: F1 of a class with no true or predicted member is 0, and
// MCC is 0 when a marginal is constant; Pearson and Spearman of a constant vector are NaN (SciPy).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"

namespace model {

double accuracy(const std::vector<int64_t>& truth, const std::vector<int64_t>& predicted);
// F1 of class `positive` (sklearn f1_score(average="binary", pos_label=positive)).
double f1_binary(const std::vector<int64_t>& truth, const std::vector<int64_t>& predicted, int64_t positive = 1);
// Unweighted mean over classes 0..num_classes-1 of each class's F1 (sklearn average="macro" over labels=range(n)).
double f1_macro(const std::vector<int64_t>& truth, const std::vector<int64_t>& predicted, int64_t num_classes);
// Multi-class Matthews correlation (sklearn matthews_corrcoef).
double matthews(const std::vector<int64_t>& truth, const std::vector<int64_t>& predicted, int64_t num_classes);
double pearson(const std::vector<double>& x, const std::vector<double>& y);
double spearman(const std::vector<double>& x, const std::vector<double>& y);

// The metrics of a problem type (model::RoFormerConfig::problem_type), by name:
//   single_label_classification: accuracy, f1 (binary, with 2 classes) or f1_macro, mcc;
//   multi_label_classification:  accuracy (exact match of the thresholded label set), f1_micro;
//   regression:                  pearson, spearman, mse.
// logits (n, labels) row-major; targets: class ids (n) for single-label; values (n, labels) for the others.
std::map<std::string, double> classification_metrics(ProblemType problem_type, int64_t labels,
                                                     const std::vector<float>& logits,
                                                     const std::vector<int64_t>& class_targets,
                                                     const std::vector<float>& value_targets);

// Whether a larger value of the metric is better (false for "loss" and "mse").
bool higher_is_better(const std::string& metric);

}  // namespace model
