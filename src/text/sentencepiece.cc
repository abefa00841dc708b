// SentencePiece models over libsentencepiece (sentencepiece.h): loading, encoding/decoding with id
// checks, and training through SentencePieceTrainer with our sentences streamed in by an iterator,
// so that the library never opens a file itself and every input error names its file.
#include "text/sentencepiece.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"

namespace text {
namespace {

// The message of a SentencePiece status without its "Internal: ./src/x.cc(660) [condition] " prefix
// (the condition when the message is empty).
std::string status_message(const sentencepiece::util::Status& status) {
  std::string m = status.error_message();
  if (m.rfind("./src/", 0) == 0 || m.find(".cc(") != std::string::npos) {
    const size_t open = m.find(" [");
    const size_t close = open == std::string::npos ? std::string::npos : m.find("] ", open);
    if (close != std::string::npos && close + 2 < m.size()) return m.substr(close + 2);
    if (open != std::string::npos) return "failed check " + m.substr(open + 1);
  }
  return m;
}

// Streams the non-empty lines of the input files (a trailing '\r' dropped), then the in-memory
// sentences, to SentencePieceTrainer. An unreadable file or one with no text stops the stream with a
// failed status and leaves the message in error(), which the caller throws after Train returns (no
// exception crosses libsentencepiece's code).
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  LineIterator(const std::vector<std::string>& files, const std::vector<std::string>& sentences)
      : files_(files), sentences_(sentences) {
    advance();
  }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override {
    if (error_.empty()) return {};
    return {sentencepiece::util::StatusCode::kInvalidArgument, error_};
  }
  const std::string& error() const { return error_; }
  int64_t count() const { return count_; }
  int64_t bytes() const { return bytes_; }

 private:
  static bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos; }

  void take(std::string s) {
    value_ = std::move(s);
    ++count_;
    bytes_ += static_cast<int64_t>(value_.size());
  }

  void fail(std::string message) {
    error_ = std::move(message);
    done_ = true;
  }

  void advance() {
    if (done_) return;
    for (;;) {
      if (in_.is_open()) {
        std::string line;
        while (std::getline(in_, line)) {
          if (!line.empty() && line.back() == '\r') line.pop_back();
          if (blank(line)) continue;
          ++file_lines_;
          take(std::move(line));
          return;
        }
        if (in_.bad()) return fail(files_[file_ - 1] + ": read error");
        if (file_lines_ == 0) return fail(files_[file_ - 1] + ": no text (empty or only blank lines)");
        in_.close();
      }
      if (file_ < files_.size()) {
        const std::string& path = files_[file_++];
        std::error_code ec;
        if (std::filesystem::is_directory(path, ec)) return fail(path + ": is a directory");
        in_.open(path, std::ios::binary);
        if (!in_) return fail(path + ": cannot open");
        file_lines_ = 0;
        continue;
      }
      while (sentence_ < sentences_.size()) {
        const std::string& s = sentences_[sentence_++];
        if (!blank(s)) return take(s);
      }
      done_ = true;
      return;
    }
  }

  const std::vector<std::string>& files_;
  const std::vector<std::string>& sentences_;
  size_t file_ = 0, sentence_ = 0;
  std::ifstream in_;
  int64_t file_lines_ = 0, count_ = 0, bytes_ = 0;
  std::string value_, error_;
  bool done_ = false;
};

// What the training data is called in errors: the input files, or the in-memory sentences.
std::string data_name(const SentencePieceTrainOptions& o) {
  if (!o.data_name.empty()) return o.data_name;
  std::string name;
  for (const auto& f : o.inputs) name += (name.empty() ? "" : ", ") + f;
  if (!o.sentences.empty()) {
    name += (name.empty() ? "" : " + ") + std::to_string(o.sentences.size()) + " sentences";
  }
  return name.empty() ? "SentencePiece training" : name;
}

void check_options(const SentencePieceTrainOptions& o) {
  if (o.inputs.empty() && o.sentences.empty()) throw base::Error("SentencePiece training: no input files or sentences");
  if (o.vocab_size < 5 || o.vocab_size > INT32_MAX) {
    throw base::Error("SentencePiece training: vocab_size " + std::to_string(o.vocab_size) +
                      " must be at least 5 (4 special pieces + 1) and fit in 32 bits");
  }
  if (o.model_type != "unigram" && o.model_type != "bpe") {
    throw base::Error("SentencePiece training: model_type '" + o.model_type + "' must be unigram or bpe");
  }
  if (!(o.character_coverage > 0 && o.character_coverage <= 1)) {
    throw base::Error("SentencePiece training: character_coverage " + std::to_string(o.character_coverage) +
                      " must be in (0, 1]");
  }
  if (o.input_sentence_size < 0) throw base::Error("SentencePiece training: input_sentence_size must be >= 0");
  if (o.num_threads < 1 || o.num_threads > 128) {
    throw base::Error("SentencePiece training: num_threads " + std::to_string(o.num_threads) + " must be in 1..128");
  }
  // SentencePiece reads 2^32 - 1 as "no seed: draw one from std::random_device".
  if (o.seed == UINT32_MAX) throw base::Error("SentencePiece training: seed 4294967295 is reserved; use another");
}

}  // namespace

SentencePiece::SentencePiece(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp, std::string serialized,
                             std::string name)
    : sp_(std::move(sp)), serialized_(std::move(serialized)), name_(std::move(name)) {}
SentencePiece::SentencePiece(SentencePiece&&) noexcept = default;
SentencePiece& SentencePiece::operator=(SentencePiece&&) noexcept = default;
SentencePiece::~SentencePiece() = default;

SentencePiece SentencePiece::load(const std::string& path) { return from_serialized(io::read_file(path), path); }

SentencePiece SentencePiece::from_serialized(std::string bytes, const std::string& name) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  if (bytes.empty()) throw base::Error(name + ": not a SentencePiece model (empty)");
  const auto status = sp->LoadFromSerializedProto(bytes);
  if (!status.ok() || sp->GetPieceSize() <= 0) {
    const std::string why = status.ok() ? "no pieces" : status_message(status);
    // A failed check is the proto parser's (or a model invariant's): the bytes are not a model.
    throw base::Error(name + ": not a SentencePiece model" + (why.rfind("failed check", 0) == 0 ? "" : " (" + why + ")"));
  }
  return SentencePiece(std::move(sp), std::move(bytes), name);
}

std::vector<int64_t> SentencePiece::encode(std::string_view text) const {
  std::vector<int> ids;
  if (const auto status = sp_->Encode(text, &ids); !status.ok()) {
    throw base::Error(name_ + ": cannot encode: " + status_message(status));
  }
  return {ids.begin(), ids.end()};
}

std::vector<std::string> SentencePiece::encode_pieces(std::string_view text) const {
  std::vector<std::string> pieces;
  if (const auto status = sp_->Encode(text, &pieces); !status.ok()) {
    throw base::Error(name_ + ": cannot encode: " + status_message(status));
  }
  return pieces;
}

void SentencePiece::check_id(int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw base::Error(name_ + ": id " + std::to_string(id) + " is outside the vocabulary [0, " +
                      std::to_string(vocab_size()) + ")");
  }
}

std::string SentencePiece::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> narrow;
  narrow.reserve(ids.size());
  for (const int64_t id : ids) {
    check_id(id);
    narrow.push_back(static_cast<int>(id));
  }
  std::string text;
  if (const auto status = sp_->Decode(narrow, &text); !status.ok()) {
    throw base::Error(name_ + ": cannot decode: " + status_message(status));
  }
  return text;
}

std::string SentencePiece::decode_pieces(const std::vector<std::string>& pieces) const {
  std::string text;
  if (const auto status = sp_->Decode(pieces, &text); !status.ok()) {
    throw base::Error(name_ + ": cannot decode: " + status_message(status));
  }
  return text;
}

int64_t SentencePiece::vocab_size() const { return sp_->GetPieceSize(); }
int64_t SentencePiece::pad_id() const { return sp_->pad_id(); }
int64_t SentencePiece::bos_id() const { return sp_->bos_id(); }
int64_t SentencePiece::eos_id() const { return sp_->eos_id(); }
int64_t SentencePiece::unk_id() const { return sp_->unk_id(); }

std::string SentencePiece::piece(int64_t id) const {
  check_id(id);
  return sp_->IdToPiece(static_cast<int>(id));
}

float SentencePiece::score(int64_t id) const {
  check_id(id);
  return sp_->GetScore(static_cast<int>(id));
}

SpecialIds SentencePiece::specials() const {
  return {sp_->pad_id(), sp_->unk_id(), sp_->bos_id(), sp_->eos_id(), -1};
}

std::vector<int32_t> SentencePiece::encode_ids(std::string_view text) const {
  const std::vector<int64_t> ids = encode(text);
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePiece::decode_ids(const std::vector<int32_t>& ids) const {
  return decode(std::vector<int64_t>(ids.begin(), ids.end()));
}

void SentencePiece::save(const std::string& dir) const { io::write_file_atomic(dir + "/spm.model", serialized_); }

int64_t SentencePiece::piece_to_id(std::string_view piece) const {
  const int id = sp_->PieceToId(piece);  // unk_id for a piece it does not know
  return id >= 0 && sp_->IdToPiece(id) == piece ? id : -1;
}

SentencePieceTrainResult train_sentencepiece(const SentencePieceTrainOptions& o) {
  check_options(o);
  std::ostringstream coverage;  // every digit (std::to_string keeps 6 decimals)
  coverage.precision(17);
  coverage << o.character_coverage;
  const std::unordered_map<std::string, std::string> args = {
      {"vocab_size", std::to_string(o.vocab_size)},
      {"model_type", o.model_type},
      {"character_coverage", coverage.str()},
      {"input_sentence_size", std::to_string(o.input_sentence_size)},
      {"num_threads", std::to_string(o.num_threads)},
      {"pad_id", "0"}, {"unk_id", "1"}, {"bos_id", "2"}, {"eos_id", "3"},
      // 0: SentencePiece's INFO progress; 2: its errors only (process-wide, like its seed).
      {"minloglevel", o.verbose ? "0" : "2"},
  };
  sentencepiece::SetRandomGeneratorSeed(o.seed);
  LineIterator lines(o.inputs, o.sentences);
  SentencePieceTrainResult result;
  // With an output proto SentencePiece writes no file (model_prefix must then be unset): the files
  // are written below, atomically.
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &result.serialized);
  if (!lines.error().empty()) throw base::Error(lines.error());
  result.sentences = lines.count();
  result.bytes = lines.bytes();
  if (result.sentences == 0) throw base::Error(data_name(o) + ": no text (empty or only blank lines)");
  if (!status.ok()) {
    std::string m = status_message(status);
    if (const size_t le = m.rfind("<= "); m.find("Vocabulary size too high") != std::string::npos && le != std::string::npos) {
      std::string most = m.substr(le + 3);
      while (!most.empty() && (most.back() == '.' || most.back() == ' ')) most.pop_back();
      throw base::Error(data_name(o) + ": vocab_size " + std::to_string(o.vocab_size) +
                        " is more pieces than this text gives (at most " + most + ")");
    }
    throw base::Error(data_name(o) + ": SentencePiece training failed: " + m);
  }
  if (!o.model_prefix.empty()) {
    const SentencePiece sp = SentencePiece::from_serialized(result.serialized, o.model_prefix + ".model");
    std::ostringstream vocab;  // spm_train's .vocab: piece<TAB>score, in id order
    for (int64_t id = 0; id < sp.vocab_size(); ++id) {
      vocab << sp.piece(id) << '\t' << sp.score(id) << '\n';
    }
    const std::filesystem::path parent = std::filesystem::path(o.model_prefix).parent_path();
    if (!parent.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(parent, ec);
      if (ec) throw base::Error(parent.string() + ": cannot create directory: " + ec.message());
    }
    // The .model last, so a .model beside a .vocab of another run means only a crash in between.
    io::write_file_atomic(o.model_prefix + ".vocab", vocab.str());
    io::write_file_atomic(o.model_prefix + ".model", result.serialized);
  }
  return result;
}

}  // namespace text
