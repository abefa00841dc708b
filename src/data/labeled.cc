// Labelled examples from JSONL, TSV and CSV (see labeled.h).
#include "labeled.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string_view>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/utf8.h"
#include "io/lines.h"
#include "io/mapped_file.h"

namespace data {
namespace {

using nlohmann::json;

using base::fail_at;

// A JSON label as text: strings as they are, integers in decimal, other numbers shortest round-trip.
std::string label_text(const json& v, const std::string& origin, int64_t line) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v.get<double>());
    return buf;
  }
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  fail_at(origin, line, "a label must be a string, a number or a boolean, got " + v.dump());
}

// The label names of a TSV/CSV field: several separated by '|' (multi-label); an empty name ("a||b",
// "a|") is an error, not a label called "".
std::vector<std::string> split_multi(const std::string& field, const std::string& origin, int64_t line) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (;;) {
    const size_t end = field.find('|', begin);
    out.push_back(field.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (out.back().empty()) fail_at(origin, line, "an empty label name in '" + field + "' (names are separated by '|')");
    if (end == std::string::npos) return out;
    begin = end + 1;
  }
}

bool is_number(const std::string& s) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno == 0 && std::isfinite(v);
}

// One label type per file: a file whose labels mix types (numbers and names, single labels and
// lists in JSONL) was almost always written by mistake, and would silently train another task (a
// name among scores makes a regression file a classification one). Integers and floats are one
// type, numbers: a regression file may write 5 for 5.0. In TSV/CSV every field is text: a field that
// parses as a number is a number, and a '|' list holds names or numbers as a single field does.
class OneType {
 public:
  OneType(std::string origin, std::string what) : origin_(std::move(origin)), what_(std::move(what)) {}
  void see(const std::string& type, int64_t line) {
    if (first_line_ == 0) {
      type_ = type, first_line_ = line;
    } else if (type != type_) {
      fail_at(origin_, line, what_ + " is " + type + ", but line " + std::to_string(first_line_) + "'s is " + type_ +
                              " (a file holds one type of label)");
    }
  }

 private:
  std::string origin_, what_, type_;
  int64_t first_line_ = 0;
};

std::string json_type(const json& v) {
  return v.is_array() ? "a list" : v.is_number() ? "a number" : v.is_string() ? "a string" : v.is_boolean() ? "a boolean" : v.type_name();
}

// fn(object, line number) for each non-blank line of a JSONL text, which must be a JSON object.
template <class Fn>
void for_each_json_object(const std::string& text, const std::string& origin, Fn fn) {
  io::for_each_line(text, origin, [&](const std::string& line, int64_t line_no) {
    if (line.find_first_not_of(" \t") == std::string::npos) return;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      fail_at(origin, line_no, std::string("not valid JSON: ") + e.what());
    }
    if (!j.is_object()) fail_at(origin, line_no, "each line must be a JSON object");
    fn(j, line_no);
  });
}

std::vector<LabeledExample> parse_jsonl(const std::string& text, const LabeledColumns& cols, const std::string& origin) {
  std::vector<LabeledExample> out;
  OneType labels(origin, "the label"), items(origin, "a list item");
  for_each_json_object(text, origin, [&](const json& j, int64_t line_no) {
    LabeledExample ex;
    ex.line = line_no;
    auto text_field = [&](const std::string& name) {
      if (!j.contains(name)) fail_at(origin, line_no, "no field '" + name + "'");
      if (!j[name].is_string()) fail_at(origin, line_no, "'" + name + "' must be a string");
      return j[name].get<std::string>();
    };
    ex.text = text_field(cols.text);
    if (!cols.text_pair.empty()) ex.text_pair = text_field(cols.text_pair);
    if (!cols.label.empty()) {
      if (!j.contains(cols.label) || j[cols.label].is_null()) fail_at(origin, line_no, "no label '" + cols.label + "'");
      const json& v = j[cols.label];
      labels.see(json_type(v), line_no);
      for (const json& item : v.is_array() ? v : json::array()) items.see(json_type(item), line_no);
      if (v.is_array()) {
        for (const json& item : v) ex.labels.push_back(label_text(item, origin, line_no));
      } else {
        ex.labels.push_back(label_text(v, origin, line_no));
      }
    }
    out.push_back(std::move(ex));
  });
  return out;
}

// Rows of fields with their first line numbers: TSV splits lines on tabs; CSV follows RFC 4180.
struct Row {
  std::vector<std::string> fields;
  int64_t line;
};

std::vector<Row> split_tsv(const std::string& text, const std::string& origin) {
  std::vector<Row> rows;
  io::for_each_line(text, origin, [&](const std::string& line, int64_t line_no) {
    if (line.empty()) return;
    Row r{{}, line_no};
    size_t begin = 0;
    for (;;) {
      const size_t tab = line.find('\t', begin);
      r.fields.push_back(line.substr(begin, tab == std::string::npos ? std::string::npos : tab - begin));
      if (tab == std::string::npos) break;
      begin = tab + 1;
    }
    rows.push_back(std::move(r));
  });
  return rows;
}

std::vector<Row> split_csv(const std::string& text, const std::string& origin) {
  std::vector<Row> rows;
  int64_t line_no = 1;
  size_t i = 0;
  while (i < text.size()) {
    Row r{{}, line_no};
    std::string field;
    bool quoted = false, row_done = false;
    const size_t row_start = i;
    while (!row_done) {
      if (i - row_start > io::kMaxLineBytes) throw io::Error(io::line_too_long(origin, r.line, i - row_start));
      if (i >= text.size()) {
        if (quoted) fail_at(origin, r.line, "a quoted field is not closed");
        row_done = true;
        break;
      }
      const char c = text[i++];
      if (quoted) {
        if (c == '"' && i < text.size() && text[i] == '"') {
          field += '"';
          ++i;
        } else if (c == '"') {
          quoted = false;
          if (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
            fail_at(origin, line_no, "characters after a closing quote");
          }
        } else {
          if (c == '\n') ++line_no;
          field += c;
        }
      } else if (c == '"' && field.empty()) {
        quoted = true;
      } else if (c == ',') {
        r.fields.push_back(std::move(field));
        field.clear();
      } else if (c == '\n' || c == '\r') {
        if (c == '\r' && i < text.size() && text[i] == '\n') ++i;
        ++line_no;
        row_done = true;
      } else {
        field += c;
      }
    }
    r.fields.push_back(std::move(field));
    if (r.fields.size() == 1 && r.fields[0].empty()) continue;  // a blank line
    rows.push_back(std::move(r));
  }
  return rows;
}

std::vector<LabeledExample> parse_table(const std::vector<Row>& rows, const LabeledColumns& cols,
                                        const std::string& origin) {
  if (rows.empty()) fail_at(origin, 1, "no header line");
  std::map<std::string, size_t> index;
  for (size_t c = 0; c < rows[0].fields.size(); ++c) index[rows[0].fields[c]] = c;
  auto column = [&](const std::string& name) {
    const auto it = index.find(name);
    if (it == index.end()) fail_at(origin, rows[0].line, "the header has no column '" + name + "'");
    return it->second;
  };
  const size_t text_col = column(cols.text);
  const size_t pair_col = cols.text_pair.empty() ? 0 : column(cols.text_pair);
  const size_t label_col = cols.label.empty() ? 0 : column(cols.label);
  std::vector<LabeledExample> out;
  OneType labels(origin, "the label");
  for (size_t r = 1; r < rows.size(); ++r) {
    const Row& row = rows[r];
    if (row.fields.size() != rows[0].fields.size()) {
      fail_at(origin, row.line, std::to_string(row.fields.size()) + " fields, but the header has " +
                                 std::to_string(rows[0].fields.size()));
    }
    LabeledExample ex;
    ex.line = row.line;
    ex.text = row.fields[text_col];
    if (!cols.text_pair.empty()) ex.text_pair = row.fields[pair_col];
    if (!cols.label.empty()) {
      if (row.fields[label_col].empty()) fail_at(origin, row.line, "the label '" + cols.label + "' is empty");
      ex.labels = split_multi(row.fields[label_col], origin, row.line);
      for (const std::string& name : ex.labels) labels.see(is_number(name) ? "a number" : "a name", row.line);
    }
    out.push_back(std::move(ex));
  }
  return out;
}

}  // namespace

TableFormat table_format_of(const std::string& path) {
  auto ends = [&](const std::string& ext) {
    return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (ends(".jsonl") || ends(".json")) return TableFormat::jsonl;
  if (ends(".tsv")) return TableFormat::tsv;
  if (ends(".csv")) return TableFormat::csv;
  throw base::Error(path + ": unknown data format (the name must end in .jsonl, .json, .tsv or .csv)");
}

std::vector<LabeledExample> parse_labeled(const std::string& text, TableFormat format, const LabeledColumns& cols,
                                          const std::string& origin) {
  switch (format) {
    case TableFormat::jsonl: return parse_jsonl(text, cols, origin);
    case TableFormat::tsv: return parse_table(split_tsv(text, origin), cols, origin);
    case TableFormat::csv: return parse_table(split_csv(text, origin), cols, origin);
  }
  return {};
}

bool has_column(const std::string& path, const std::string& name) {
  const std::string text = io::read_file(path);
  try {
    const TableFormat format = table_format_of(path);
    switch (format) {
      case TableFormat::jsonl: {
        size_t start = 0;
        while (start < text.size()) {
          const size_t end = std::min(text.find('\n', start), text.size());
          const std::string_view line(text.data() + start, end - start);
          if (line.find_first_not_of(" \t\r") != std::string_view::npos) {
            const json j = json::parse(line);
            return j.is_object() && j.contains(name) && !j[name].is_null();
          }
          start = end + 1;
        }
        return false;
      }
      case TableFormat::tsv:
      case TableFormat::csv: {
        const std::vector<Row> rows = format == TableFormat::tsv ? split_tsv(text, path) : split_csv(text, path);
        return !rows.empty() && std::find(rows[0].fields.begin(), rows[0].fields.end(), name) != rows[0].fields.end();
      }
    }
  } catch (const std::exception&) {
  }
  return false;
}

std::vector<LabeledExample> read_labeled(const std::string& path, const LabeledColumns& cols) {
  const TableFormat format = table_format_of(path);
  return parse_labeled(io::read_file(path), format, cols, path);
}

std::vector<TaggedExample> parse_tagged(const std::string& text, const TaggedColumns& cols,
                                        const std::vector<std::string>& label_list, const std::string& origin) {
  std::vector<TaggedExample> out;
  for_each_json_object(text, origin, [&](const json& j, int64_t line_no) {
    TaggedExample ex;
    ex.line = line_no;
    auto list = [&](const std::string& name) -> const json& {
      if (!j.contains(name) || !j[name].is_array()) fail_at(origin, line_no, "'" + name + "' must be a list");
      return j[name];
    };
    for (const json& w : list(cols.tokens)) {
      if (!w.is_string()) fail_at(origin, line_no, "'" + cols.tokens + "' must hold strings, got " + w.dump());
      ex.words.push_back(w.get<std::string>());
    }
    if (!cols.tags.empty()) {
      const json& tags = list(cols.tags);
      if (tags.size() != ex.words.size()) {
        fail_at(origin, line_no, "'" + cols.tags + "' has " + std::to_string(tags.size()) + " tags for " +
                                  std::to_string(ex.words.size()) + " words in '" + cols.tokens + "'");
      }
      for (const json& t : tags) {
        if (t.is_string()) {
          ex.tags.push_back(t.get<std::string>());
        } else if (t.is_number_integer()) {
          const int64_t id = t.get<int64_t>();
          if (label_list.empty()) {
            fail_at(origin, line_no, "'" + cols.tags + "' holds tag ids; give the tag names in id order (--label-list)");
          }
          if (id < 0 || id >= static_cast<int64_t>(label_list.size())) {
            fail_at(origin, line_no, "tag id " + std::to_string(id) + " in '" + cols.tags + "' is outside the " +
                                      std::to_string(label_list.size()) + " names of --label-list");
          }
          ex.tags.push_back(label_list[static_cast<size_t>(id)]);
        } else {
          fail_at(origin, line_no, "'" + cols.tags + "' must hold tag names or ids, got " + t.dump());
        }
      }
    }
    out.push_back(std::move(ex));
  });
  return out;
}

std::vector<TaggedExample> read_tagged(const std::string& path, const TaggedColumns& cols,
                                       const std::vector<std::string>& label_list) {
  if (table_format_of(path) != TableFormat::jsonl) {
    throw base::Error(path + ": token classification data is JSONL (a .jsonl or .json name)");
  }
  return parse_tagged(io::read_file(path), cols, label_list, path);
}

std::vector<ChoiceExample> parse_choices(const std::string& text, const ChoiceColumns& cols, const std::string& origin) {
  std::vector<ChoiceExample> out;
  size_t width = 0;  // endings per row: the first row's
  for_each_json_object(text, origin, [&](const json& j, int64_t line_no) {
    auto string_field = [&](const std::string& name) {
      if (!j.contains(name)) fail_at(origin, line_no, "no field '" + name + "'");
      if (!j[name].is_string()) fail_at(origin, line_no, "'" + name + "' must be a string, got " + j[name].dump());
      return j[name].get<std::string>();
    };
    ChoiceExample ex;
    ex.line = line_no;
    ex.context = string_field(cols.context);
    const std::string header = cols.header.empty() ? "" : string_field(cols.header);
    std::vector<std::string> endings;
    if (j.contains(cols.endings)) {
      if (!j[cols.endings].is_array()) fail_at(origin, line_no, "'" + cols.endings + "' must be a list of strings");
      for (const json& e : j[cols.endings]) {
        if (!e.is_string()) fail_at(origin, line_no, "'" + cols.endings + "' must hold strings, got " + e.dump());
        endings.push_back(e.get<std::string>());
      }
    } else {
      for (size_t k = 0; j.contains(cols.endings + std::to_string(k)); ++k) {
        endings.push_back(string_field(cols.endings + std::to_string(k)));
      }
      if (endings.empty()) fail_at(origin, line_no, "no field '" + cols.endings + "0' or '" + cols.endings + "' (the endings)");
    }
    if (width == 0) width = endings.size();
    if (endings.size() < 2) fail_at(origin, line_no, "a choice needs at least 2 endings, this row has " + std::to_string(endings.size()));
    if (endings.size() != width) {
      fail_at(origin, line_no, std::to_string(endings.size()) + " endings, but the first row has " + std::to_string(width));
    }
    for (const std::string& e : endings) ex.choices.push_back(cols.header.empty() ? e : header + " " + e);
    if (!cols.label.empty()) {
      if (!j.contains(cols.label)) fail_at(origin, line_no, "no field '" + cols.label + "'");
      const json& l = j[cols.label];
      int64_t k = -1;
      if (l.is_number_integer()) {
        k = l.get<int64_t>();
      } else if (l.is_string() && !l.get<std::string>().empty() && l.get<std::string>().size() < 10 &&
                 l.get<std::string>().find_first_not_of("0123456789") == std::string::npos) {
        k = std::stoll(l.get<std::string>());  // SWAG's CSV-born files hold "2"
      } else {
        fail_at(origin, line_no, "'" + cols.label + "' must be the index of the right ending, got " + l.dump());
      }
      if (k < 0 || k >= static_cast<int64_t>(endings.size())) {
        fail_at(origin, line_no, "'" + cols.label + "' " + std::to_string(k) + " is not an index of the " +
                                  std::to_string(endings.size()) + " endings");
      }
      ex.label = k;
    }
    out.push_back(std::move(ex));
  });
  return out;
}

std::vector<SquadExample> parse_squad(const std::string& text, bool labelled, const std::string& origin) {
  std::vector<SquadExample> out;
  for_each_json_object(text, origin, [&](const json& j, int64_t line_no) {
    auto string_field = [&](const json& o, const std::string& name, const std::string& shown) {
      if (!o.contains(name)) fail_at(origin, line_no, "no field '" + shown + "'");
      if (!o[name].is_string()) fail_at(origin, line_no, "'" + shown + "' must be a string, got " + o[name].dump());
      return o[name].get<std::string>();
    };
    SquadExample ex;
    ex.line = line_no;
    ex.id = j.contains("id") && j["id"].is_number_integer() ? std::to_string(j["id"].get<int64_t>())
                                                             : string_field(j, "id", "id");
    ex.question = string_field(j, "question", "question");
    ex.context = string_field(j, "context", "context");
    if (!j.contains("answers")) {
      if (labelled) fail_at(origin, line_no, "no field 'answers'");
      out.push_back(std::move(ex));
      return;
    }
    const json& a = j["answers"];
    if (!a.is_object() || !a.contains("text") || !a.contains("answer_start") || !a["text"].is_array() ||
        !a["answer_start"].is_array()) {
      fail_at(origin, line_no, "'answers' must be {\"text\": [...], \"answer_start\": [...]}");
    }
    if (a["text"].size() != a["answer_start"].size()) {
      fail_at(origin, line_no, "'answers' has " + std::to_string(a["text"].size()) + " texts and " +
                                std::to_string(a["answer_start"].size()) + " answer_start values");
    }
    const std::u32string context = base::utf8_decode(ex.context);
    for (size_t k = 0; k < a["text"].size(); ++k) {
      const std::string field = "answers.text[" + std::to_string(k) + "]";
      if (!a["text"][k].is_string()) fail_at(origin, line_no, "'" + field + "' must be a string, got " + a["text"][k].dump());
      if (!a["answer_start"][k].is_number_integer()) {
        fail_at(origin, line_no, "'answers.answer_start[" + std::to_string(k) + "]' must be an integer, got " +
                                  a["answer_start"][k].dump());
      }
      SquadAnswer answer{a["text"][k].get<std::string>(), a["answer_start"][k].get<int64_t>()};
      const std::u32string want = base::utf8_decode(answer.text);
      const bool inside = answer.start >= 0 && answer.start <= static_cast<int64_t>(context.size());
      if (!inside || context.compare(static_cast<size_t>(answer.start), want.size(), want) != 0) {
        const std::u32string there =
            inside ? context.substr(static_cast<size_t>(answer.start), want.size()) : std::u32string();
        fail_at(origin, line_no, "'answers.answer_start[" + std::to_string(k) + "]' " + std::to_string(answer.start) +
                                  " does not point at its text \"" + base::printable(answer.text) + "\" (" +
                                  (inside ? "the context reads \"" + base::printable(base::utf8_encode(there)) + "\" there"
                                          : "the context has " + std::to_string(context.size()) + " characters") + ")");
      }
      ex.answers.push_back(std::move(answer));
    }
    out.push_back(std::move(ex));
  });
  return out;
}

std::vector<SquadExample> read_squad(const std::string& path, bool labelled) {
  if (table_format_of(path) != TableFormat::jsonl) {
    throw base::Error(path + ": question-answering data is JSONL (a .jsonl or .json name)");
  }
  return parse_squad(io::read_file(path), labelled, path);
}

std::vector<ChoiceExample> read_choices(const std::string& path, const ChoiceColumns& cols) {
  if (table_format_of(path) != TableFormat::jsonl) {
    throw base::Error(path + ": multiple-choice data is JSONL (a .jsonl or .json name)");
  }
  return parse_choices(io::read_file(path), cols, path);
}

}  // namespace data
