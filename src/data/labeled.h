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

// Whether the file's first row (JSONL: its first object; TSV/CSV: the header) has the column `name`:
// a test file with its labels, or without. False for a file whose first row does not parse (reading
// it then says why).
bool has_column(const std::string& path, const std::string& name);

// The same from text already in memory; origin names it in errors.
std::vector<LabeledExample> parse_labeled(const std::string& text, TableFormat format, const LabeledColumns& cols,
                                          const std::string& origin);

// Token classification data as transformers' run_ner reads it: JSONL rows of pre-split words and one
// tag per word, {"tokens": ["EU", "rejects", ...], "ner_tags": ["B-ORG", "O", ...]}. Tags are names,
// or integer ids into `label_list` (run_ner's ClassLabel feature), which must then be given.
struct TaggedColumns {
  std::string tokens = "tokens";
  std::string tags = "ner_tags";  // "" = untagged (words to predict)
};

struct TaggedExample {
  std::vector<std::string> words, tags;  // tags empty when untagged
  int64_t line = 0;
};

// Every row of a .jsonl/.json file; a missing field, a word that is not a string, a tag count that
// differs from the word count, or an id outside label_list is a base::Error "path:line: ...".
std::vector<TaggedExample> read_tagged(const std::string& path, const TaggedColumns& cols,
                                       const std::vector<std::string>& label_list = {});
std::vector<TaggedExample> parse_tagged(const std::string& text, const TaggedColumns& cols,
                                        const std::vector<std::string>& label_list, const std::string& origin);

// Multiple-choice data as transformers' run_swag reads SWAG: JSONL rows of a context, a header
// that begins every ending, the endings and the right ending's index,
//   {"sent1": "...", "sent2": "She", "ending0": "...", "ending1": "...", ..., "label": 2},
// where the endings are the fields ending0, ending1, ... in order (as many as the first row has),
// or a list in one field (`endings`). Choice k reads as the pair (context, header + " " + ending k), as
// run_swag joins them (an empty header too), or (context, ending k) when no header field is named.
struct ChoiceColumns {
  std::string context = "sent1";
  std::string header = "sent2";   // "" = no header
  std::string endings = "ending";  // fields ending0, ending1, ... or one field holding a list
  std::string label = "label";     // "" = unlabelled (a test set to predict)
};

struct ChoiceExample {
  std::string context;
  std::vector<std::string> choices;  // header + " " + ending, one per choice
  int64_t label = -1;                // the right choice; -1 when unlabelled
  int64_t line = 0;
};

// Every row of a .jsonl/.json file. A missing field, a non-string text, a row whose number of endings
// differs from the first row's (or below 2), or a label that is not an index of its endings (an
// integer, or a string holding one) is a base::Error "path:line: ...".
std::vector<ChoiceExample> read_choices(const std::string& path, const ChoiceColumns& cols);

// Extractive question answering data as transformers' run_qa reads SQuAD v1.1/v2.0 from the datasets
// library's JSON lines: {"id": "5733be28...", "question": "...", "context": "...",
// "answers": {"text": ["Saint Bernadette Soubirous"], "answer_start": [515]}} (an optional "title" is
// ignored). answer_start counts Unicode code points of the context (Python str indices). v2.0's
// unanswerable questions have empty lists.
struct SquadAnswer {
  std::string text;
  int64_t start = 0;  // code points into the context
};

struct SquadExample {
  std::string id, question, context;
  std::vector<SquadAnswer> answers;  // empty: no answer (v2), or an unlabelled row
  int64_t line = 0;
};

// Every row of a .jsonl/.json file; with `labelled`, "answers" is required. A missing or mistyped
// field, lists of different lengths, or an answer_start that does not point at its text in the context
// is a base::Error "path:line: ..." naming the field.
std::vector<SquadExample> read_squad(const std::string& path, bool labelled);
std::vector<SquadExample> parse_squad(const std::string& text, bool labelled, const std::string& origin);
std::vector<ChoiceExample> parse_choices(const std::string& text, const ChoiceColumns& cols, const std::string& origin);

}  // namespace data
