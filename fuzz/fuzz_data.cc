// libFuzzer target: the fine-tuning and translation data readers (data/labeled.h: JSONL, TSV and CSV
// with labels, token classification's JSONL words and tags, multiple choice's JSONL SWAG rows, SQuAD's
// JSONL questions;
// data/parallel.h: TSV and JSONL sentence pairs). The first byte picks the reader, the
// format and the columns; the rest is the file. Contract: any bytes either give rows or throw
// base::Error naming "file:line" (never another exception, a crash or a hang); rows come in file
// order with 1-based, increasing lines within the file; a labelled row has at least one label and no
// empty label name; a tagged row has one tag per word; every choice row has the first row's number of
// choices (≥ 2) and a label among them (or none when unlabelled); every SQuAD answer is the context's
// text at its answer_start; sentence pairs have a non-empty source (and
// target, when one is read).
#include <string>

#include "base/error.h"
#include "base/utf8.h"
#include "data/labeled.h"
#include "data/parallel.h"
#include "fuzz_common.h"

namespace {

const char kOrigin[] = "data.file";

// The line count of the text (a last line without a break counts): every row's line is within it.
// Lines end at '\n'; in CSV also at a lone '\r' (RFC 4180 readers, Python's csv, take it as a break).
int64_t line_count(const std::string& text, bool csv) {
  int64_t n = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    n += text[i] == '\n' || (csv && text[i] == '\r' && (i + 1 == text.size() || text[i + 1] != '\n'));
  }
  return n;
}

void check_error(const base::Error& e) {
  const std::string what = e.what();
  FUZZ_CHECK(what.rfind(std::string(kOrigin) + ":", 0) == 0, "an error that does not name the file: " + what);
  fuzz::note("base::Error: " + what);
}

void labeled(const std::string& text, uint8_t choice) {
  const data::TableFormat format = static_cast<data::TableFormat>(choice % 3);
  data::LabeledColumns cols;
  if (choice & 4) cols.text_pair = "sentence2";
  if (choice & 8) cols.label.clear();  // a test set: no labels
  std::vector<data::LabeledExample> rows;
  try {
    rows = data::parse_labeled(text, format, cols, kOrigin);
  } catch (const base::Error& e) {
    return check_error(e);
  } catch (const std::exception& e) {
    fuzz::undocumented("data::parse_labeled", e);
  }
  const int64_t lines = line_count(text, format == data::TableFormat::csv);
  int64_t last = 0;
  for (const data::LabeledExample& r : rows) {
    FUZZ_CHECK(r.line > last && r.line <= lines, "row lines out of order or past the end");
    last = r.line;
    FUZZ_CHECK(cols.label.empty() ? r.labels.empty() : format == data::TableFormat::jsonl || !r.labels.empty(),
               "labels where none were asked for, or a table row without one");
    for (const std::string& name : r.labels) {
      FUZZ_CHECK(format == data::TableFormat::jsonl || !name.empty(), "an empty label name from a table");
    }
  }
  fuzz::note("labeled: " + std::to_string(rows.size()) + " rows");
}

void parallel(const std::string& text, uint8_t choice) {
  const data::TableFormat format = choice & 1 ? data::TableFormat::jsonl : data::TableFormat::tsv;
  const std::string target = choice & 2 ? "" : "target";  // "": sources only
  std::vector<data::SentencePair> pairs;
  try {
    pairs = data::parse_parallel(text, format, "source", target, kOrigin);
  } catch (const base::Error& e) {
    return check_error(e);
  } catch (const std::exception& e) {
    fuzz::undocumented("data::parse_parallel", e);
  }
  const int64_t lines = line_count(text, false);
  int64_t last = 0;
  for (const data::SentencePair& p : pairs) {
    FUZZ_CHECK(p.line > last && p.line <= lines, "pair lines out of order or past the end");
    last = p.line;
    FUZZ_CHECK(!p.source.empty() && (target.empty() ? p.target.empty() : !p.target.empty()), "an empty side");
  }
  fuzz::note("parallel: " + std::to_string(pairs.size()) + " pairs");
}

void tagged(const std::string& text, uint8_t choice) {
  data::TaggedColumns cols;
  if (choice & 4) cols.tags.clear();  // words to predict
  const std::vector<std::string> names = choice & 8 ? std::vector<std::string>{"O", "B-X"} : std::vector<std::string>{};
  std::vector<data::TaggedExample> rows;
  try {
    rows = data::parse_tagged(text, cols, names, kOrigin);
  } catch (const base::Error& e) {
    return check_error(e);
  } catch (const std::exception& e) {
    fuzz::undocumented("data::parse_tagged", e);
  }
  const int64_t lines = line_count(text, false);
  int64_t last = 0;
  for (const data::TaggedExample& r : rows) {
    FUZZ_CHECK(r.line > last && r.line <= lines, "row lines out of order or past the end");
    last = r.line;
    FUZZ_CHECK(cols.tags.empty() ? r.tags.empty() : r.tags.size() == r.words.size(), "a tag count unlike the word count");
  }
  fuzz::note("tagged: " + std::to_string(rows.size()) + " rows");
}

void choices(const std::string& text, uint8_t choice) {
  data::ChoiceColumns cols;
  if (choice & 4) cols.label.clear();   // a test set
  if (choice & 8) cols.header.clear();  // no header field
  std::vector<data::ChoiceExample> rows;
  try {
    rows = data::parse_choices(text, cols, kOrigin);
  } catch (const base::Error& e) {
    return check_error(e);
  } catch (const std::exception& e) {
    fuzz::undocumented("data::parse_choices", e);
  }
  const int64_t lines = line_count(text, false);
  int64_t last = 0;
  for (const data::ChoiceExample& r : rows) {
    FUZZ_CHECK(r.line > last && r.line <= lines, "row lines out of order or past the end");
    last = r.line;
    FUZZ_CHECK(r.choices.size() >= 2 && r.choices.size() == rows[0].choices.size(), "a row with another choice count");
    FUZZ_CHECK(cols.label.empty() ? r.label == -1 : r.label >= 0 && r.label < static_cast<int64_t>(r.choices.size()),
               "a label outside the choices");
  }
  fuzz::note("choices: " + std::to_string(rows.size()) + " rows");
}

void squad(const std::string& text, uint8_t choice) {
  const bool labelled = choice & 4;
  std::vector<data::SquadExample> rows;
  try {
    rows = data::parse_squad(text, labelled, kOrigin);
  } catch (const base::Error& e) {
    return check_error(e);
  } catch (const std::exception& e) {
    fuzz::undocumented("data::parse_squad", e);
  }
  const int64_t lines = line_count(text, false);
  int64_t last = 0;
  for (const data::SquadExample& r : rows) {
    FUZZ_CHECK(r.line > last && r.line <= lines, "row lines out of order or past the end");
    last = r.line;
    const std::u32string context = base::utf8_decode(r.context);
    for (const data::SquadAnswer& a : r.answers) {
      const std::u32string want = base::utf8_decode(a.text);
      FUZZ_CHECK(a.start >= 0 && a.start + static_cast<int64_t>(want.size()) <= static_cast<int64_t>(context.size()) &&
                     context.compare(static_cast<size_t>(a.start), want.size(), want) == 0,
                 "an answer that is not the context's text at its answer_start");
    }
  }
  fuzz::note("squad: " + std::to_string(rows.size()) + " rows");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t choice = data[0];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (choice & 128) {
    squad(text, choice);
  } else if ((choice & 96) == 96) {
    choices(text, choice);
  } else if (choice & 32) {
    tagged(text, choice);
  } else if (choice & 16) {
    parallel(text, choice);
  } else {
    labeled(text, choice);
  }
  return 0;
}
