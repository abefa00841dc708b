// SQuAD's answer metrics exactly as the official evaluation scripts compute them: v1.1's
// (evaluate-v1.1.py, HF evaluate's "squad") and v2.0's (evaluate-v2.0.py, "squad_v2"). An answer is
// normalised (lower-cased; ASCII punctuation, i.e. Python's string.punctuation, removed; the words
// a/an/the removed where they stand alone between Unicode word boundaries; whitespace runs joined by
// one space); exact match compares normalised strings, F1 the multiset of whitespace-separated tokens.
// A question scores the best over its gold answers. v1.1 and v2.0 differ on empty answers: v2.0 reads
// a question with no (non-empty) gold answer as "" (no answer), and an empty prediction or gold answer
// scores F1 1 only when both are empty; v1.1 scores an empty prediction 0. Scores are percentages, as
// the scripts print them. Python's whole-string lower() maps a word-final capital sigma to ς; here it
// is σ (per character, as the tokenizer's lower-casing), the only known difference.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace text {

// The official normalize_answer.
std::string squad_normalize(std::string_view answer);
// One question's scores against its gold answers (0 or 1; F1 in [0, 1]).
double squad_exact(std::string_view prediction, const std::vector<std::string>& golds, bool v2);
double squad_f1(std::string_view prediction, const std::vector<std::string>& golds, bool v2);

// Over every question (predictions[i] against golds[i]): "exact_match" and "f1" in percent; v2 adds
// "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1" over the questions with and without gold
// answers (any, as the script's make_qid_to_has_ans; present only where there are such questions). std::invalid_argument if the sizes differ.
std::map<std::string, double> squad_scores(const std::vector<std::string>& predictions,
                                           const std::vector<std::vector<std::string>>& golds, bool v2);

}  // namespace text
