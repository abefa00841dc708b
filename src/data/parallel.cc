// Parallel text files (see parallel.h).
#include "parallel.h"

#include "base/error.h"
#include "data/labeled.h"
#include "io/mapped_file.h"

namespace data {

std::vector<SentencePair> read_parallel(const std::string& path, const std::string& source_key,
                                        const std::string& target_key) {
  std::vector<SentencePair> out;
  if (table_format_of(path) == TableFormat::jsonl) {
    for (const LabeledExample& e : read_labeled(path, {source_key, target_key, ""})) {
      out.push_back({e.text, e.text_pair, e.line});
    }
  } else if (table_format_of(path) == TableFormat::tsv) {
    const std::string text = io::read_file(path);
    int64_t line_no = 0;
    for (size_t at = 0; at < text.size();) {
      size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(at, end - at);
      at = end + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      const size_t tab = line.find('\t');
      const bool wants_target = !target_key.empty();
      if (wants_target && (tab == std::string::npos || line.find('\t', tab + 1) != std::string::npos)) {
        throw base::Error(path + ":" + std::to_string(line_no) + ": expected two tab-separated fields, source and target");
      }
      SentencePair p{line.substr(0, tab), wants_target ? line.substr(tab + 1) : "", line_no};
      if (p.source.empty() || (wants_target && p.target.empty())) {
        throw base::Error(path + ":" + std::to_string(line_no) + ": an empty " + (p.source.empty() ? "source" : "target"));
      }
      out.push_back(std::move(p));
    }
  } else {
    throw base::Error(path + ": parallel text must be .tsv (source<TAB>target) or .jsonl");
  }
  return out;
}

}  // namespace data
