// Parallel text (src/data/parallel.cc): TSV and JSONL give the same sentence pairs with their lines,
// sources-only reading, and every malformed line (a field too many or too few, an empty side, in
// either format) is an error naming the file and line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "data/parallel.h"

namespace {

using data::TableFormat;

void expect_error(const std::string& text, TableFormat f, const std::string& target, const std::string& what) {
  try {
    data::parse_parallel(text, f, "source", target, "in.x");
    ADD_FAILURE() << "no error for: " << text;
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Parallel, TsvAndJsonlGiveTheSamePairs) {
  const std::string tsv = "one two\tuno dos\r\n\n  \nthree\ttres\n";
  const std::string jsonl = "{\"source\": \"one two\", \"target\": \"uno dos\"}\n\n\n{\"source\": \"three\", \"target\": \"tres\"}\n";
  for (const auto& [text, format] : {std::pair{tsv, TableFormat::tsv}, std::pair{jsonl, TableFormat::jsonl}}) {
    const auto pairs = data::parse_parallel(text, format, "source", "target", "in.x");
    ASSERT_EQ(pairs.size(), 2u);
    EXPECT_EQ(pairs[0].source, "one two");
    EXPECT_EQ(pairs[0].target, "uno dos");
    EXPECT_EQ(pairs[1].source, "three");
    EXPECT_EQ(pairs[1].line, 4);
  }
  const auto sources = data::parse_parallel("a b\nc\n", TableFormat::tsv, "source", "", "in.x");
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[1].source, "c");
  EXPECT_TRUE(sources[1].target.empty());
}

TEST(Parallel, BadLinesNameTheFileAndLine) {
  expect_error("a\tb\nc\n", TableFormat::tsv, "target", "in.x:2: expected two tab-separated fields");
  expect_error("a\tb\tc\n", TableFormat::tsv, "target", "in.x:1: expected two tab-separated fields");
  expect_error("a\tb\n", TableFormat::tsv, "", "in.x:1: expected one field, the source");
  expect_error("a\tb\n\tc\n", TableFormat::tsv, "target", "in.x:2: an empty source");
  expect_error("a\t\n", TableFormat::tsv, "target", "in.x:1: an empty target");
  expect_error("{\"source\": \"a\", \"target\": \"\"}\n", TableFormat::jsonl, "target", "in.x:1: an empty target");
  expect_error("{\"source\": \"\", \"target\": \"b\"}\n", TableFormat::jsonl, "target", "in.x:1: an empty source");
  expect_error("{\"source\": \"a\"}\n", TableFormat::jsonl, "target", "in.x:1: no field 'target'");
  EXPECT_THROW(data::read_parallel("pairs.csv"), base::Error);
}

}  // namespace
