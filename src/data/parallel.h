// Parallel text for translation: sentence pairs read from
//   TSV    two tab-separated columns per line, source then target, no header (as OPUS/Moses TSV);
//   JSONL  one object per line with the source and target under the given keys (data/labeled.h).
// Blank lines are skipped. A line with another number of fields, an empty side, or a missing key is
// a base::Error naming the file and line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/labeled.h"

namespace data {

struct SentencePair {
  std::string source, target;
  int64_t line = 0;  // 1-based line in its file
};

// source_key / target_key name the JSONL fields (ignored for TSV). The format follows the extension
// (.tsv, .jsonl/.json); io::Error otherwise. target_key "" reads sources only (text to translate).
std::vector<SentencePair> read_parallel(const std::string& path, const std::string& source_key = "source",
                                        const std::string& target_key = "target");

// The same from text already in memory (format tsv or jsonl); origin names it in errors.
std::vector<SentencePair> parse_parallel(const std::string& text, TableFormat format, const std::string& source_key,
                                         const std::string& target_key, const std::string& origin);

}  // namespace data
