// The record bound of the line readers (lines.h).
#include "io/lines.h"

#include <string>

namespace io {

std::string line_too_long(const std::string& origin, int64_t line, size_t bytes) {
  return origin + ":" + std::to_string(line) + ": a line of " + std::to_string(bytes) +
         " bytes or more, beyond the 1 MiB one record (one input) may have: each line is one input, so check "
         "that the file has its line breaks, or split the text";
}

bool read_line(std::istream& in, std::string* line, const std::string& origin, int64_t number) {
  line->clear();
  std::streambuf* buf = in.rdbuf();
  if (buf == nullptr) {
    in.setstate(std::ios::badbit);
    return false;
  }
  bool any = false;
  for (;;) {
    const int c = buf->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(std::ios::eofbit);
      break;
    }
    any = true;
    if (c == '\n') break;
    line->push_back(static_cast<char>(c));
    if (line->size() > kMaxLineBytes + 1) throw Error(line_too_long(origin, number, line->size()));
  }
  if (!line->empty() && line->back() == '\r') line->pop_back();
  if (line->size() > kMaxLineBytes) throw Error(line_too_long(origin, number, line->size()));
  return any;
}

}  // namespace io
