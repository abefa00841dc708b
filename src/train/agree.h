// Ranks agree before they start (docs/distributed.md): every process of a data-parallel run must run
// the same binary on the same model, tokenizer, data and options, or its gradients are of another
// problem and the run computes wrong numbers, or waits in a collective that never comes. Each recipe
// lists what it depends on as facts (a name, a 64-bit hash and a description); check_ranks_agree
// compares every rank's with rank 0's before the first step, and a difference ends the job on every
// rank with one error line naming the rank and the fact.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "text/tokenizer.h"
#include "train/comm.h"

namespace train {

struct RankFact {
  std::string name;    // "data", "model config", ...
  uint64_t hash = 0;   // of the content
  std::string detail;  // for the error: the path and size, or what the text is
};

// A file: its size and a hash of its first and last MiB (a whole corpus is not read twice).
RankFact file_fact(const std::string& name, const std::string& path);
// A text (a config or options JSON, a vocabulary): the hash of all of it.
RankFact text_fact(const std::string& name, const std::string& text, const std::string& detail);
// This executable (base::program_file()) and its version.
RankFact binary_fact();

// What every training recipe depends on, in one list: the binary, the model config (its JSON), the
// tokenizer (every token), the files it reads ({name, path}: data, a model directory's weights, a
// resumed checkpoint; empty paths skipped) and its options (their JSON: lengths, seeds, threads, ...).
std::vector<RankFact> run_facts(const std::string& model_config_json, const text::Tokenizer& tokenizer,
                                const std::vector<std::pair<std::string, std::string>>& files,
                                const std::string& options_json);

// Throws std::runtime_error on every rank when some rank's facts differ from rank 0's: the differing
// rank names itself and the first fact that differs; the others name the differing ranks. A group of
// one returns at once. Every rank calls it, with facts of the same names in the same order.
void check_ranks_agree(Communicator& comm, const std::vector<RankFact>& facts);

}  // namespace train
