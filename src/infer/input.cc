// Line input (text, JSONL, tab-separated pairs) and JSONL output helpers (see input.h).
#include "infer/input.h"

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/enum_names.h"
#include "io/lines.h"

namespace infer {

constexpr base::EnumName<InputFormat> kInputFormatNames[] = {
    {InputFormat::auto_detect, "auto"}, {InputFormat::text, "text"}, {InputFormat::jsonl, "jsonl"}};

InputFormat parse_input_format(const std::string& name) {
  return base::parse_enum(kInputFormatNames, name, "input format");
}

LineReader::LineReader(std::istream& in, std::string name, InputFormat format)
    : in_(in), name_(std::move(name)), format_(format) {}

std::string LineReader::where(int64_t line, const std::string& what) const {
  return name_ + ":" + std::to_string(line) + ": " + what;
}

bool LineReader::next_line(std::string* line, bool* json) {
  while (io::read_line(in_, line, name_, line_ + 1)) {  // bounded: io::kMaxLineBytes
    ++line_;
    const size_t first = line->find_first_not_of(" \t");
    if (format_ == InputFormat::jsonl) {
      if (first == std::string::npos) continue;  // blank JSONL lines are skipped
      *json = true;
    } else {
      *json = format_ == InputFormat::auto_detect && first != std::string::npos && (*line)[first] == '{';
    }
    return true;
  }
  if (in_.bad()) throw std::runtime_error(name_ + ": read error after line " + std::to_string(line_));
  return false;
}

namespace {

nlohmann::json parse_object(const LineReader& r, const std::string& line, const char* expected) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(r.where(r.line(), std::string("not valid JSON (") + e.what() + "); expected " + expected));
  }
  if (!j.is_object()) throw std::runtime_error(r.where(r.line(), std::string("expected ") + expected));
  return j;
}

std::string string_field(const LineReader& r, const nlohmann::json& j, const char* key, const char* expected) {
  if (!j.contains(key) || !j[key].is_string()) {
    throw std::runtime_error(r.where(r.line(), std::string("no \"") + key + "\" string; expected " + expected));
  }
  return j[key].get<std::string>();
}

}  // namespace

bool LineReader::next_text(std::string* text) {
  std::string line;
  bool json = false;
  if (!next_line(&line, &json)) return false;
  if (!json) {
    *text = std::move(line);
    return true;
  }
  constexpr const char* kExpected = "a JSON object {\"text\": \"...\"}";
  *text = string_field(*this, parse_object(*this, line, kExpected), "text", kExpected);
  return true;
}

bool LineReader::next_pair(std::pair<std::string, std::string>* pair) {
  std::string line;
  bool json = false;
  if (!next_line(&line, &json)) return false;
  constexpr const char* kExpected =
      "a JSON object {\"a\": \"...\", \"b\": \"...\"}, {\"text\": \"...\", \"text_pair\": \"...\"} or "
      "{\"question\": \"...\", \"context\": \"...\"}, or two texts separated by a tab";
  if (json) {
    const nlohmann::json j = parse_object(*this, line, kExpected);
    // transformers' pipelines' forms: text-classification's pair, question-answering's question
    const bool qa = j.contains("question"), hf = j.contains("text");
    *pair = {string_field(*this, j, qa ? "question" : hf ? "text" : "a", kExpected),
             string_field(*this, j, qa ? "context" : hf ? "text_pair" : "b", kExpected)};
    return true;
  }
  const size_t tab = line.find('\t');
  if (tab == std::string::npos || line.find('\t', tab + 1) != std::string::npos) {
    throw std::runtime_error(where(line_, std::string(tab == std::string::npos ? "no tab" : "more than one tab") +
                                              "; expected " + kExpected));
  }
  *pair = {line.substr(0, tab), line.substr(tab + 1)};
  return true;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string embedding_json(const std::vector<float>& embedding) {
  std::string s = "{\"embedding\": [";
  char buf[64];
  for (size_t i = 0; i < embedding.size(); ++i) {
    if (i) s += ", ";
    if (!std::isfinite(embedding[i])) {
      s += "null";
      continue;
    }
    const auto r = std::to_chars(buf, buf + sizeof buf, embedding[i]);
    s.append(buf, r.ptr);
  }
  return s + "]}";
}

}  // namespace infer
