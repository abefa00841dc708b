// SentencePiece subwords (Kudo & Richardson 2018) for translation: a thin wrapper over Debian's
// libsentencepiece (libsentencepiece-dev 0.1.97) that loads a `.model` file and encodes/decodes with
// it, and trains one (unigram or BPE) with fixed special ids: pad 0, unk 1, bos 2, eos 3.
//
// Determinism: training the same sentences with the same options (num_threads included) gives a
// byte-identical .model (tests/text/sentencepiece_test.cc, unigram and BPE; the Bible corpus twice,
// 1 and 2 threads). The thread count is part of the result: unigram's EM sums its expectations per
// thread, so 1 and 2 threads give slightly different scores and a few different pieces (and the count
// is stored in the model's trainer spec). input_sentence_size > 0 samples sentences with `seed`
// (SentencePiece's process-wide generator seed, set by each training call).
//
// Text is normalised with SentencePiece's default rule (nmt_nfkc: NFKC, runs of spaces collapsed,
// leading/trailing spaces removed), so decode(encode(s)) is s after that normalisation; characters the
// model never saw become unk and decode to " ⁇ ". libsentencepiece stays a PRIVATE dependency: this
// header names none of its types.
//
// It is the "sentencepiece" text::Tokenizer (tokenizer.h): encode_ids / decode_ids are encode /
// decode with int32 ids, bos and eos are its cls and sep, it has no mask, and save writes spm.model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace text {

class SentencePiece final : public Tokenizer {
 public:
  // A model file written by train_sentencepiece or spm_train. Throws base::Error naming `path` when it
  // cannot be read or is not a SentencePiece model.
  static SentencePiece load(const std::string& path);
  // The model from its proto bytes (a checkpoint's copy); `name` names it in errors.
  static SentencePiece from_serialized(std::string bytes, const std::string& name);

  SentencePiece(SentencePiece&&) noexcept;
  SentencePiece& operator=(SentencePiece&&) noexcept;
  SentencePiece(const SentencePiece&) = delete;
  SentencePiece& operator=(const SentencePiece&) = delete;
  ~SentencePiece() override;

  // Ids of the text's pieces (no bos/eos added). Thread-safe (const).
  std::vector<int64_t> encode(std::string_view text) const;
  std::vector<std::string> encode_pieces(std::string_view text) const;
  // Detokenised text; control ids (pad, bos, eos) decode to nothing. base::Error for an id outside
  // [0, vocab_size()).
  std::string decode(const std::vector<int64_t>& ids) const;
  // Detokenised text from pieces (encode_pieces' output); a piece outside the vocabulary stands for
  // itself, so pieces of unseen characters survive the round trip that ids (unk) do not.
  std::string decode_pieces(const std::vector<std::string>& pieces) const;

  int64_t vocab_size() const override;
  // -1 when the model has no such symbol (models trained elsewhere may lack pad, bos or eos).
  int64_t pad_id() const;
  int64_t bos_id() const;
  int64_t eos_id() const;
  int64_t unk_id() const;
  // The piece of an id ("▁the", "<unk>", ...); base::Error outside [0, vocab_size()).
  std::string piece(int64_t id) const;
  // The piece's score (unigram: log probability; BPE: minus its merge rank); base::Error as piece().
  float score(int64_t id) const;
  // The id of a piece, -1 when it is not in the vocabulary.
  int64_t piece_to_id(std::string_view piece) const;
  // The model's proto bytes, exactly the .model file's contents.
  const std::string& serialized() const { return serialized_; }

  // ---- text::Tokenizer ----
  TokenizerKind kind() const override { return TokenizerKind::sentencepiece; }
  SpecialIds specials() const override;
  std::vector<int32_t> encode_ids(std::string_view text) const override;
  std::string decode_ids(const std::vector<int32_t>& ids) const override;
  // Writes dir/spm.model (serialized()) atomically.
  void save(const std::string& dir) const override;

 private:
  SentencePiece(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, std::string serialized, std::string name);
  void check_id(int64_t id) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string serialized_;
  std::string name_;  // the file (or checkpoint) it came from, for errors
};

struct SentencePieceTrainOptions {
  std::vector<std::string> inputs;     // UTF-8 text files, one sentence per line (empty lines skipped)
  std::vector<std::string> sentences;  // more sentences from memory (e.g. both columns of a parallel file)
  std::string data_name;               // names the data in errors (default: the input files + "N sentences")
  std::string model_prefix;            // writes <prefix>.model and <prefix>.vocab; empty: writes nothing
  int64_t vocab_size = 8000;
  std::string model_type = "unigram";  // or "bpe"
  double character_coverage = 1.0;     // (0, 1]: rarer characters become unk
  int64_t input_sentence_size = 0;     // 0: every sentence; N: a sample of N, drawn with `seed`
  uint32_t seed = 13;
  int num_threads = 1;                 // SentencePiece's EM threads (1..128)
  bool verbose = false;                // SentencePiece's own progress log on stderr
};

struct SentencePieceTrainResult {
  std::string serialized;  // the .model bytes
  int64_t sentences = 0;   // non-empty lines read
  int64_t bytes = 0;       // their UTF-8 bytes
};

// Trains a model and, with a model_prefix, writes <prefix>.model and <prefix>.vocab ("piece<TAB>score"
// lines, as spm_train writes) atomically (io::write_file_atomic). Bad input is one base::Error naming
// the file or option: an unreadable or empty input file, no sentences at all, an unknown model type, a
// vocab_size the data cannot fill ("... at most N for this data").
SentencePieceTrainResult train_sentencepiece(const SentencePieceTrainOptions& options);

}  // namespace text
