// Labelled examples (src/data/labeled.cc): JSONL, TSV and CSV give the same examples; CSV quoting
// (commas, quotes and line breaks in fields, CRLF); labels of every JSON type; multi-label lists;
// unlabelled files; and every malformed row is an error naming the file and line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "data/labeled.h"

namespace {

using data::LabeledColumns;
using data::TableFormat;

void expect_error(const std::string& text, TableFormat f, const LabeledColumns& cols, const std::string& what) {
  try {
    data::parse_labeled(text, f, cols, "in.x");
    ADD_FAILURE() << "no error for: " << text;
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Labeled, TheThreeFormatsGiveTheSameExamples) {
  const LabeledColumns pair{"a", "b", "y"};
  const std::string jsonl = "{\"a\": \"hello, world\", \"b\": \"x\", \"y\": \"pos\"}\n\n{\"a\": \"say \\\"hi\\\"\", \"b\": \"\", \"y\": \"neg\"}\n";
  const std::string tsv = "y\ta\tb\npos\thello, world\tx\n\nneg\tsay \"hi\"\t\n";
  const std::string csv = "y,a,b\r\npos,\"hello, world\",x\r\n\r\nneg,\"say \"\"hi\"\"\",\r\n";
  for (const auto& [text, format] : {std::pair{jsonl, TableFormat::jsonl}, std::pair{tsv, TableFormat::tsv},
                                     std::pair{csv, TableFormat::csv}}) {
    const auto ex = data::parse_labeled(text, format, pair, "in.x");
    ASSERT_EQ(ex.size(), 2u) << text;
    EXPECT_EQ(ex[0].text, "hello, world");
    EXPECT_EQ(ex[0].text_pair, "x");
    EXPECT_EQ(ex[0].labels, std::vector<std::string>{"pos"});
    EXPECT_EQ(ex[1].text, "say \"hi\"");
    EXPECT_EQ(ex[1].text_pair, "");
    EXPECT_EQ(ex[1].labels, std::vector<std::string>{"neg"});
    EXPECT_EQ(ex[1].line, format == TableFormat::jsonl ? 3 : 4);  // blank lines (and the header) are counted
  }
}

TEST(Labeled, LabelTypesMultiLabelAndUnlabelled) {
  const LabeledColumns cols{"t", "", "l"};
  auto label_of = [&](const std::string& value) {
    return data::parse_labeled("{\"t\": \"a\", \"l\": " + value + "}\n", TableFormat::jsonl, cols, "f")[0].labels;
  };
  EXPECT_EQ(label_of("2.5"), std::vector<std::string>{"2.5"});
  EXPECT_EQ(label_of("7"), std::vector<std::string>{"7"});
  EXPECT_EQ(label_of("true"), std::vector<std::string>{"1"});
  EXPECT_EQ(label_of("[\"x\", \"y\"]"), (std::vector<std::string>{"x", "y"}));
  // Integers and floats are one type (a regression file may write 5 for 5.0).
  EXPECT_EQ(data::parse_labeled("{\"t\": \"a\", \"l\": 5}\n{\"t\": \"b\", \"l\": 0.5}\n", TableFormat::jsonl, cols, "f").size(), 2u);
  const auto multi = data::parse_labeled("t,l\nq,x|y\n", TableFormat::csv, cols, "f");
  EXPECT_EQ(multi[0].labels, (std::vector<std::string>{"x", "y"}));
  const auto unlabelled = data::parse_labeled("{\"t\": \"a\"}\n", TableFormat::jsonl, {"t", "", ""}, "f");
  EXPECT_TRUE(unlabelled[0].labels.empty());
  const auto newline = data::parse_labeled("t,l\n\"two\nlines\",1\nnext,0\n", TableFormat::csv, cols, "f");
  EXPECT_EQ(newline[0].text, "two\nlines");
  EXPECT_EQ(newline[1].line, 4);
  EXPECT_EQ(data::table_format_of("x/train.tsv"), TableFormat::tsv);
  EXPECT_THROW(data::table_format_of("x/train.txt"), base::Error);
}

TEST(Labeled, BadRowsNameTheFileAndLine) {
  const LabeledColumns cols{"t", "", "l"};
  expect_error("{\"t\": \"a\", \"l\": 1}\n{\"t\": \"a\"\n", TableFormat::jsonl, cols, "in.x:2: not valid JSON");
  expect_error("[1]\n", TableFormat::jsonl, cols, "in.x:1: each line must be a JSON object");
  expect_error("{\"l\": 1}\n", TableFormat::jsonl, cols, "in.x:1: no field 't'");
  expect_error("{\"t\": 5, \"l\": 1}\n", TableFormat::jsonl, cols, "in.x:1: 't' must be a string");
  expect_error("{\"t\": \"a\"}\n", TableFormat::jsonl, cols, "in.x:1: no label 'l'");
  expect_error("{\"t\": \"a\", \"l\": {}}\n", TableFormat::jsonl, cols, "in.x:1: a label must be");
  expect_error("t\tl\na\t1\nb\n", TableFormat::tsv, cols, "in.x:3: 1 fields, but the header has 2");
  expect_error("t\tl\na\t\n", TableFormat::tsv, cols, "in.x:2: the label 'l' is empty");
  expect_error("x,l\na,1\n", TableFormat::csv, cols, "in.x:1: the header has no column 't'");
  expect_error("t,l\n\"open,1\n", TableFormat::csv, cols, "in.x:2: a quoted field is not closed");
  expect_error("t,l\n\"a\"b,1\n", TableFormat::csv, cols, "in.x:2: characters after a closing quote");
  expect_error("", TableFormat::csv, cols, "in.x:1: no header line");
  expect_error("t\tl\na\tx||y\n", TableFormat::tsv, cols, "in.x:2: an empty label name in 'x||y'");
  expect_error("t,l\na,x|\n", TableFormat::csv, cols, "in.x:2: an empty label name in 'x|'");
}

// One type of label per file: a name among numbers (or a string among lists) is an error naming the
// first line that differs and the line it differs from.
TEST(Labeled, AFileMixingLabelTypesIsRefusedAtTheFirstDifferentLine) {
  const LabeledColumns cols{"t", "", "l"};
  expect_error("{\"t\": \"a\", \"l\": 0.5}\n{\"t\": \"b\", \"l\": 1}\n{\"t\": \"c\", \"l\": \"pos\"}\n", TableFormat::jsonl,
               cols, "in.x:3: the label is a string, but line 1's is a number");
  expect_error("{\"t\": \"a\", \"l\": [\"x\"]}\n{\"t\": \"b\", \"l\": \"y\"}\n", TableFormat::jsonl, cols,
               "in.x:2: the label is a string, but line 1's is a list");
  expect_error("{\"t\": \"a\", \"l\": [\"x\"]}\n{\"t\": \"b\", \"l\": []}\n{\"t\": \"c\", \"l\": [\"y\", 2]}\n",
               TableFormat::jsonl, cols, "in.x:3: a list item is a number, but line 1's is a string");
  expect_error("{\"t\": \"a\", \"l\": \"1\"}\n{\"t\": \"b\", \"l\": 1}\n", TableFormat::jsonl, cols,
               "in.x:2: the label is a number, but line 1's is a string");
  expect_error("t\tl\na\t0.5\nb\t4\nc\tgood\n", TableFormat::tsv, cols, "in.x:4: the label is a name, but line 2's is a number");
  expect_error("t,l\na,x|y\nb,3\n", TableFormat::csv, cols, "in.x:3: the label is a number, but line 2's is a name");
  // Names and lists of names go together in a table (a one-name row of a multi-label file).
  EXPECT_EQ(data::parse_labeled("t\tl\na\tx|y\nb\tz\n", TableFormat::tsv, cols, "f").size(), 2u);
}

}  // namespace

TEST(Tagged, NamesIdsAndUntaggedRows) {
  const std::string text = "{\"tokens\": [\"EU\", \"rejects\"], \"ner_tags\": [\"B-ORG\", \"O\"]}\n\n"
                           "{\"tokens\": [\"北\", \"京\"], \"ner_tags\": [1, 2]}\n";
  const auto rows = data::parse_tagged(text, {}, {"O", "B-LOC", "I-LOC"}, "ner.jsonl");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].words, (std::vector<std::string>{"EU", "rejects"}));
  EXPECT_EQ(rows[0].tags, (std::vector<std::string>{"B-ORG", "O"}));
  EXPECT_EQ(rows[1].tags, (std::vector<std::string>{"B-LOC", "I-LOC"}));
  EXPECT_EQ(rows[1].line, 3);
  const auto untagged = data::parse_tagged("{\"tokens\": [\"a\"]}\n", {"tokens", ""}, {}, "t.jsonl");
  EXPECT_TRUE(untagged[0].tags.empty());
}

TEST(Tagged, BadRowsNameTheFileLineAndField) {
  auto error = [](const std::string& text, const std::vector<std::string>& labels = {}) {
    try {
      data::parse_tagged(text, {}, labels, "ner.jsonl");
    } catch (const base::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("{\"tokens\": [\"a\", \"b\"], \"ner_tags\": [\"O\"]}"),
            "ner.jsonl:1: 'ner_tags' has 1 tags for 2 words in 'tokens'");
  EXPECT_EQ(error("{\"tokens\": [\"a\"], \"ner_tags\": [0]}"),
            "ner.jsonl:1: 'ner_tags' holds tag ids; give the tag names in id order (--label-list)");
  EXPECT_EQ(error("{\"tokens\": [\"a\"], \"ner_tags\": [3]}", {"O"}),
            "ner.jsonl:1: tag id 3 in 'ner_tags' is outside the 1 names of --label-list");
  EXPECT_EQ(error("\n{\"tokens\": \"a b\", \"ner_tags\": []}"), "ner.jsonl:2: 'tokens' must be a list");
  EXPECT_EQ(error("{\"tokens\": [1], \"ner_tags\": [\"O\"]}"), "ner.jsonl:1: 'tokens' must hold strings, got 1");
  EXPECT_EQ(error("{\"tokens\": [\"a\"]}"), "ner.jsonl:1: 'ner_tags' must be a list");
}

TEST(Choices, SwagFieldsAListOfEndingsAndUnlabelledRows) {
  const std::string text =
      "{\"sent1\": \"He opens the door.\", \"sent2\": \"He\", \"ending0\": \"walks in.\", \"ending1\": \"sleeps.\", "
      "\"label\": 0}\n\n{\"sent1\": \"c\", \"sent2\": \"\", \"ending0\": \"x\", \"ending1\": \"y\", \"label\": \"1\"}\n";
  const auto rows = data::parse_choices(text, {}, "swag.jsonl");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].context, "He opens the door.");
  EXPECT_EQ(rows[0].choices, (std::vector<std::string>{"He walks in.", "He sleeps."}));  // run_swag's header + " " + ending
  EXPECT_EQ(rows[0].label, 0);
  EXPECT_EQ(rows[1].choices, (std::vector<std::string>{" x", " y"}));  // an empty header still joins with a space
  EXPECT_EQ(rows[1].label, 1);
  EXPECT_EQ(rows[1].line, 3);
  const auto listed = data::parse_choices("{\"q\": \"c\", \"options\": [\"a\", \"b\", \"c\"]}\n",
                                          {"q", "", "options", ""}, "c3.jsonl");
  EXPECT_EQ(listed[0].choices, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(listed[0].label, -1);
}

TEST(Choices, BadRowsNameTheFileLineAndField) {
  auto error = [](const std::string& text) {
    try {
      data::parse_choices(text, {}, "swag.jsonl");
    } catch (const base::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string ok = "{\"sent1\": \"c\", \"sent2\": \"h\", \"ending0\": \"a\", \"ending1\": \"b\", \"label\": 1}\n";
  EXPECT_EQ(error(ok + "{\"sent1\": \"c\", \"sent2\": \"h\", \"ending0\": \"a\", \"ending1\": \"b\", \"ending2\": \"c\", "
                       "\"label\": 1}"),
            "swag.jsonl:2: 3 endings, but the first row has 2");
  EXPECT_EQ(error("{\"sent1\": \"c\", \"sent2\": \"h\", \"ending0\": \"a\", \"label\": 0}"),
            "swag.jsonl:1: a choice needs at least 2 endings, this row has 1");
  EXPECT_EQ(error("{\"sent1\": \"c\", \"sent2\": \"h\", \"ending0\": \"a\", \"ending1\": \"b\", \"label\": 2}"),
            "swag.jsonl:1: 'label' 2 is not an index of the 2 endings");
  EXPECT_EQ(error("{\"sent1\": \"c\", \"sent2\": \"h\", \"ending0\": \"a\", \"ending1\": \"b\", \"label\": \"b\"}"),
            "swag.jsonl:1: 'label' must be the index of the right ending, got \"b\"");
  EXPECT_EQ(error("{\"sent1\": \"c\", \"sent2\": \"h\", \"ending0\": \"a\", \"ending1\": 5, \"label\": 0}"),
            "swag.jsonl:1: 'ending1' must be a string, got 5");
  EXPECT_EQ(error("{\"sent2\": \"h\", \"ending0\": \"a\", \"ending1\": \"b\", \"label\": 0}"), "swag.jsonl:1: no field 'sent1'");
  EXPECT_EQ(error("{\"sent1\": \"c\", \"sent2\": \"h\", \"label\": 0}"),
            "swag.jsonl:1: no field 'ending0' or 'ending' (the endings)");
  EXPECT_EQ(error("{\"sent1\": \"c\", \"sent2\": \"h\", \"ending0\": \"a\", \"ending1\": \"b\"}"),
            "swag.jsonl:1: no field 'label'");
}

TEST(Squad, ReadsAnswersInCodePointsAndUnansweredRows) {
  const std::string text =
      "{\"id\": \"q1\", \"title\": \"t\", \"question\": \"Where?\", \"context\": \"北京 is in China.\", "
      "\"answers\": {\"text\": [\"China\", \"in China\"], \"answer_start\": [9, 6]}}\n"
      "{\"id\": 7, \"question\": \"?\", \"context\": \"x\", \"answers\": {\"text\": [], \"answer_start\": []}}\n";
  const auto rows = data::parse_squad(text, true, "squad.jsonl");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].id, "q1");
  ASSERT_EQ(rows[0].answers.size(), 2u);
  EXPECT_EQ(rows[0].answers[0].start, 9);  // code points: 北京 counts 2, not 6 bytes
  EXPECT_EQ(rows[1].id, "7");
  EXPECT_TRUE(rows[1].answers.empty());
  EXPECT_TRUE(data::parse_squad("{\"id\": \"a\", \"question\": \"q\", \"context\": \"c\"}", false, "t.jsonl")[0].answers.empty());
}

TEST(Squad, BadRowsNameTheFileLineAndField) {
  auto error = [](const std::string& text) {
    try {
      data::parse_squad(text, true, "squad.jsonl");
    } catch (const base::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string head = "{\"id\": \"q\", \"question\": \"q\", \"context\": \"the cat sat\", ";
  EXPECT_EQ(error(head + "\"answers\": {\"text\": [\"cat\"], \"answer_start\": [5]}}"),
            "squad.jsonl:1: 'answers.answer_start[0]' 5 does not point at its text \"cat\" (the context reads \"at \" there)");
  EXPECT_EQ(error(head + "\"answers\": {\"text\": [\"cat\"], \"answer_start\": [40]}}"),
            "squad.jsonl:1: 'answers.answer_start[0]' 40 does not point at its text \"cat\" (the context has 11 characters)");
  EXPECT_EQ(error(head + "\"answers\": {\"text\": [\"cat\"], \"answer_start\": [4, 5]}}"),
            "squad.jsonl:1: 'answers' has 1 texts and 2 answer_start values");
  EXPECT_EQ(error(head + "\"answers\": {\"text\": [\"cat\"], \"answer_start\": [\"4\"]}}"),
            "squad.jsonl:1: 'answers.answer_start[0]' must be an integer, got \"4\"");
  EXPECT_EQ(error(head + "\"answers\": [\"cat\"]}"),
            "squad.jsonl:1: 'answers' must be {\"text\": [...], \"answer_start\": [...]}");
  EXPECT_EQ(error(head + "\"x\": 1}"), "squad.jsonl:1: no field 'answers'");
  EXPECT_EQ(error("{\"id\": \"q\", \"context\": \"c\", \"answers\": {\"text\": [], \"answer_start\": []}}"),
            "squad.jsonl:1: no field 'question'");
  EXPECT_EQ(error("{\"id\": \"q\", \"question\": \"q\", \"context\": 3}"), "squad.jsonl:1: 'context' must be a string, got 3");
}
