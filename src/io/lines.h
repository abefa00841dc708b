// The line readers of every record-oriented input (labelled data, parallel text, the inference and
// translation commands' inputs, BLEU's hypotheses): one line is one record, numbered 1-based as
// editors count, the CR of a CRLF dropped. A record has a bound, checked before anything parses or
// tokenizes it: a file without line breaks would otherwise be one input of hundreds of megabytes,
// read and tokenized for minutes. (Pre-training corpora are streams, not records: data/corpus.h.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>

#include "base/error.h"

namespace io {

using Error = base::Error;

// The largest record: 1 MiB, ten times a 32k-token Chinese document.
inline constexpr size_t kMaxLineBytes = size_t{1} << 20;

// "origin:line: a line of N bytes (or more), more than the 1 MiB a record may have ..."
std::string line_too_long(const std::string& origin, int64_t line, size_t bytes);

// fn(line, number) for each line of `text` (a last line without '\n' included, blank lines passed on:
// each reader decides what they mean). A line over kMaxLineBytes throws io::Error naming origin:number.
template <class Fn>
void for_each_line(const std::string& text, const std::string& origin, Fn fn) {
  int64_t number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++number;
    if (end - pos > kMaxLineBytes + 1) throw Error(line_too_long(origin, number, end - pos));
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() > kMaxLineBytes) throw Error(line_too_long(origin, number, line.size()));
    fn(line, number);
  }
}

// The next line of a stream into *line: false at its end. A line over kMaxLineBytes throws io::Error
// naming origin:number (the line's number) as soon as the bound is passed, without reading the rest.
bool read_line(std::istream& in, std::string* line, const std::string& origin, int64_t number);

}  // namespace io
