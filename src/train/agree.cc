// Ranks agree before they start (agree.h).
#include "train/agree.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "base/process.h"
#include "rope/rope.h"
#include "text/roformer_tokenizer.h"

namespace train {
namespace {

constexpr size_t kMaxFacts = 16;  // per call; the broadcast has this fixed size on every rank

// FNV-1a, 64 bits: stable across builds and machines (std::hash is neither).
uint64_t fnv1a(const char* p, size_t n, uint64_t h = 14695981039346656037ull) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  return h;
}

}  // namespace

RankFact file_fact(const std::string& name, const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return {name, 0, path + ": cannot be read (" + ec.message() + ")"};
  constexpr uint64_t kMiB = 1 << 20;
  std::ifstream in(path, std::ios::binary);
  std::string head(std::min<uint64_t>(size, kMiB), '\0'), tail;
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  if (size > kMiB) {
    tail.resize(std::min<uint64_t>(size - kMiB, kMiB));
    in.seekg(static_cast<std::streamoff>(size - tail.size()));
    in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  }
  uint64_t h = fnv1a(head.data(), head.size());
  h = fnv1a(tail.data(), tail.size(), h);
  h = fnv1a(reinterpret_cast<const char*>(&size), sizeof size, h);
  return {name, h, path + ", " + std::to_string(size) + " bytes"};
}

RankFact text_fact(const std::string& name, const std::string& text, const std::string& detail) {
  return {name, fnv1a(text.data(), text.size()), detail};
}

RankFact binary_fact() {
  RankFact f = file_fact("binary", base::program_file());
  f.detail = "roformer with librope " + std::string(rope_version()) + ", " + f.detail;
  return f;
}

std::vector<RankFact> run_facts(const std::string& model_config_json, const text::Tokenizer& tokenizer,
                                const std::vector<std::pair<std::string, std::string>>& files,
                                const std::string& options_json) {
  std::vector<RankFact> facts = {binary_fact(), text_fact("model config", model_config_json, "its config JSON")};
  // Every token as the tokenizer spells it: vocab.txt's lines (special tokens and ## included) and the
  // normalisation for WordPiece; the decoded id otherwise (character, byte and SentencePiece tokenizers).
  std::string tokens = tokenizer.kind_name();
  if (const auto* wp = dynamic_cast<const text::RoFormerTokenizer*>(&tokenizer)) {
    const text::TokenizerConfig& c = wp->config();
    tokens += c.do_lower_case ? " lower" : " cased";
    tokens += c.strip_accents.value_or(c.do_lower_case) ? " strip" : " keep";
    for (int64_t id = 0; id < wp->vocab_size(); ++id) tokens += '\n' + wp->id_to_token(static_cast<int32_t>(id));
  } else {
    for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
      tokens += '\n' + tokenizer.decode_ids({static_cast<int32_t>(id)});
    }
  }
  facts.push_back(text_fact("tokenizer", tokens,
                            "a " + tokenizer.kind_name() + " tokenizer of " + std::to_string(tokenizer.vocab_size()) + " tokens"));
  for (const auto& [name, path] : files) {
    if (!path.empty()) facts.push_back(file_fact(name, path));
  }
  facts.push_back(text_fact("options", options_json, "the run's options"));
  return facts;
}

void check_ranks_agree(Communicator& comm, const std::vector<RankFact>& facts) {
  if (comm.size() == 1) return;
  if (facts.size() > kMaxFacts) throw std::logic_error("check_ranks_agree: more than 16 facts");
  // Rank 0's hashes, behind their count.
  std::vector<uint64_t> root(kMaxFacts + 1, 0);
  root[0] = facts.size();
  for (size_t i = 0; i < facts.size(); ++i) root[i + 1] = facts[i].hash;
  comm.broadcast(root.data(), static_cast<int64_t>(root.size()), 0);
  std::string mine;
  if (root[0] != facts.size()) {
    mine = "differs from rank 0 in what it checks (" + std::to_string(facts.size()) + " facts, rank 0 " +
           std::to_string(root[0]) + ": another binary?)";
  } else {
    for (size_t i = 0; i < facts.size() && mine.empty(); ++i) {
      if (facts[i].hash != root[i + 1]) mine = "differs from rank 0 in its " + facts[i].name + " (here: " + facts[i].detail + ")";
    }
  }
  // Every rank learns which ranks differ, so that all of them stop, before any other collective.
  std::vector<double> differs(static_cast<size_t>(comm.size()), 0.0);
  differs[static_cast<size_t>(comm.rank())] = mine.empty() ? 0.0 : 1.0;
  comm.allreduce_sum(differs.data(), static_cast<int64_t>(differs.size()));
  std::string ranks;
  for (size_t r = 0; r < differs.size(); ++r) {
    if (differs[r] != 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  if (ranks.empty()) return;
  const std::string rule = "every rank must run the same binary on the same model, tokenizer, data and options; "
                           "the job stops before its first step";
  if (!mine.empty()) throw std::runtime_error("rank " + std::to_string(comm.rank()) + " " + mine + ": " + rule);
  throw std::runtime_error("rank " + std::to_string(comm.rank()) + ": rank " + ranks +
                           " differs from rank 0 (its error line says in what): " + rule);
}

}  // namespace train
