// Reading the inference commands' input, one item per line, and writing their JSONL output.
// A line is plain text (a trailing \r is stripped) or, in JSONL, an object: {"text": "..."} for one
// text, {"a": "...", "b": "..."}, {"text": "...", "text_pair": "..."} or {"question": "...",
// "context": "..."} (transformers' pipelines' forms) for a pair; a pair may also be two texts
// separated by one tab.
// Format auto (the default) reads a line that starts with '{' as JSON and any other as text. Every bad
// line is a std::runtime_error "NAME:LINE: what is wrong".
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <utility>
#include <vector>

namespace infer {

enum class InputFormat { auto_detect, text, jsonl };
InputFormat parse_input_format(const std::string& name);  // "auto", "text", "jsonl"

class LineReader {
 public:
  // name: how errors call the input (a path, or "<stdin>").
  LineReader(std::istream& in, std::string name, InputFormat format = InputFormat::auto_detect);

  // The next text / pair; false at the end of the input. JSONL blank lines are skipped.
  bool next_text(std::string* text);
  bool next_pair(std::pair<std::string, std::string>* pair);
  int64_t line() const { return line_; }  // 1-based number of the line last read
  const std::string& name() const { return name_; }
  // "NAME:LINE: what" for line `line`.
  std::string where(int64_t line, const std::string& what) const;

 private:
  bool next_line(std::string* line, bool* json);
  std::istream& in_;
  std::string name_;
  InputFormat format_;
  int64_t line_ = 0;
};

// {"embedding": [...]} with floats in their shortest round-trip form.
std::string embedding_json(const std::vector<float>& embedding);
// A number in JSON (shortest round-trip form; null for NaN and infinities).
std::string json_number(double v);

}  // namespace infer
