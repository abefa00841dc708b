// Labelled text examples for fine-tuning, read from JSONL, TSV or CSV files with the column
// conventions of Hugging Face's run_glue.py: a text column, an optional second-text column for
// sentence pairs, and a label column, all named by the caller. Labels are kept as text here; the task
// decides what they mean (class names, numbers for regression, several names for multi-label).
//
//   JSONL  one JSON object per line; a label is a string, a number, or (multi-label) an array of them.
//   TSV    a header line of column names, then tab-separated fields (no quoting, as GLUE's .tsv files).
//   CSV    RFC 4180: a header line, comma-separated fields, "quoted" fields with "" escapes and line
//          breaks inside quotes. Multi-label fields in TSV/CSV list names separated by '|'.
// Blank lines are skipped. Any malformed row is a base::Error naming the file and line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace data {

struct LabeledColumns {
  std::string text = "sentence";
  std::string text_pair;        // "" = single-sentence task
  std::string label = "label";  // "" = unlabelled (a test set to predict)
};

struct LabeledExample {
  std::string text, text_pair;
  std::vector<std::string> labels;  // one entry, or several for multi-label rows; empty when unlabelled
  int64_t line = 0;                 // 1-based line of the row in its file (for error messages)
};

enum class TableFormat { jsonl, tsv, csv };

// The format named by a path's extension: .jsonl/.json → jsonl, .tsv → tsv, .csv → csv; io::Error otherwise.
TableFormat table_format_of(const std::string& path);

// Every example of a file. A missing column, a wrong type or a missing label (when cols.label is
// set) is a base::Error "path:line: ...".
std::vector<LabeledExample> read_labeled(const std::string& path, const LabeledColumns& cols);

// The same from text already in memory; origin names it in errors.
std::vector<LabeledExample> parse_labeled(const std::string& text, TableFormat format, const LabeledColumns& cols,
                                          const std::string& origin);

}  // namespace data
