// Parallel text files (see parallel.h).
#include "parallel.h"

#include "base/error.h"
#include "data/labeled.h"
#include "io/lines.h"
#include "io/mapped_file.h"

namespace data {

namespace {

using base::fail_at;

void check_sides(const SentencePair& p, bool wants_target, const std::string& origin) {
  if (p.source.empty() || (wants_target && p.target.empty())) {
    fail_at(origin, p.line, std::string("an empty ") + (p.source.empty() ? "source" : "target"));
  }
}

std::vector<SentencePair> parse_tsv(const std::string& text, bool wants_target, const std::string& origin) {
  std::vector<SentencePair> out;
  io::for_each_line(text, origin, [&](const std::string& line, int64_t line_no) {
    if (line.find_first_not_of(" \t") == std::string::npos) return;
    const size_t tab = line.find('\t');
    if (wants_target ? tab == std::string::npos || line.find('\t', tab + 1) != std::string::npos : tab != std::string::npos) {
      fail_at(origin, line_no, wants_target ? "expected two tab-separated fields, source and target"
                                         : "expected one field, the source (no tab)");
    }
    SentencePair p{line.substr(0, tab), wants_target ? line.substr(tab + 1) : "", line_no};
    check_sides(p, wants_target, origin);
    out.push_back(std::move(p));
  });
  return out;
}

}  // namespace

std::vector<SentencePair> parse_parallel(const std::string& text, TableFormat format, const std::string& source_key,
                                         const std::string& target_key, const std::string& origin) {
  const bool wants_target = !target_key.empty();
  if (format == TableFormat::tsv) return parse_tsv(text, wants_target, origin);
  if (format != TableFormat::jsonl) throw base::Error(origin + ": parallel text must be .tsv (source<TAB>target) or .jsonl");
  std::vector<SentencePair> out;
  for (const LabeledExample& e : parse_labeled(text, TableFormat::jsonl, {source_key, target_key, ""}, origin)) {
    out.push_back({e.text, e.text_pair, e.line});
    check_sides(out.back(), wants_target, origin);
  }
  return out;
}

std::vector<SentencePair> read_parallel(const std::string& path, const std::string& source_key,
                                        const std::string& target_key) {
  const TableFormat format = table_format_of(path);
  if (format == TableFormat::csv) throw base::Error(path + ": parallel text must be .tsv (source<TAB>target) or .jsonl");
  return parse_parallel(io::read_file(path), format, source_key, target_key, path);
}

}  // namespace data
