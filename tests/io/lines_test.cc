// The record bound of the line readers (src/io/lines.h): a line past io::kMaxLineBytes is refused with
// its origin and line number, from text in memory and from a stream, without reading the stream's rest.
#include "io/lines.h"

#include <gtest/gtest.h>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace {

void expect_refused(const std::function<void()>& f, const std::string& where) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming " << where;
  } catch (const io::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(where + ": a line of ", 0), 0u) << what;
    EXPECT_NE(what.find("beyond the 1 MiB one record (one input) may have"), std::string::npos) << what;
  }
}

TEST(Lines, ForEachLineNumbersLinesAndDropsTheCrOfCrlf) {
  std::vector<std::pair<std::string, int64_t>> got;
  io::for_each_line("a\r\n\nb", "f.txt", [&](const std::string& l, int64_t n) { got.emplace_back(l, n); });
  const std::vector<std::pair<std::string, int64_t>> want = {{"a", 1}, {"", 2}, {"b", 3}};
  EXPECT_EQ(got, want);
}

TEST(Lines, ALineAtTheBoundIsReadAndOnePastItIsRefusedByLine) {
  const std::string at(io::kMaxLineBytes, 'x');
  int64_t lines = 0;
  io::for_each_line("ok\n" + at + "\r\n", "f.txt", [&](const std::string&, int64_t) { ++lines; });
  EXPECT_EQ(lines, 2);
  expect_refused([&] { io::for_each_line("ok\n" + at + "x\n", "f.txt", [](const std::string&, int64_t) {}); }, "f.txt:2");

  std::istringstream in("ok\n" + at + "\n");
  std::string line;
  ASSERT_TRUE(io::read_line(in, &line, "stdin", 1));
  EXPECT_EQ(line, "ok");
  ASSERT_TRUE(io::read_line(in, &line, "stdin", 2));
  EXPECT_EQ(line.size(), io::kMaxLineBytes);
  EXPECT_FALSE(io::read_line(in, &line, "stdin", 3));
}

TEST(Lines, AStreamWithoutLineBreaksIsRefusedBeforeItsEndIsRead) {
  // 8 MiB and no '\n': the reader stops just past the bound, and the rest stays unread.
  std::istringstream in(std::string(8 << 20, 'y'));
  std::string line;
  expect_refused([&] { io::read_line(in, &line, "stdin", 1); }, "stdin:1");
  EXPECT_LT(static_cast<size_t>(in.tellg()), io::kMaxLineBytes + 16);
}

TEST(Lines, ReadLineKeepsEmptyLinesAndALastLineWithoutBreak) {
  std::istringstream in("\n\r\nlast");
  std::string line;
  std::vector<std::string> got;
  for (int64_t n = 1; io::read_line(in, &line, "in", n); ++n) got.push_back(line);
  EXPECT_EQ(got, (std::vector<std::string>{"", "", "last"}));
}

}  // namespace
