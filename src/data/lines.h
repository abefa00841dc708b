// The one line splitter of the text readers (labelled data, parallel text, translate's inputs):
// fn(line, number) for each line, numbers 1-based as editors count them, the CR of a CRLF dropped,
// a last line without '\n' included, blank lines passed on (each reader decides what they mean).
#pragma once

#include <cstdint>
#include <string>

namespace data {

template <class Fn>
void for_each_line(const std::string& text, Fn fn) {
  int64_t number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    fn(line, number);
  }
}

}  // namespace data
