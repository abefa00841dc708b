// UTF-8 decoding and encoding shared by the trainer's tokenizers (data) and the Hugging Face
// tokenizer (text). Invalid UTF-8 is never an error here: each maximal invalid subpart (Unicode §3.9
// / WHATWG, the policy of Python's errors="replace") decodes to U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace base {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes one code point from p[0..n), n >= 1, into *cp and returns the bytes it used (1..4). An
// invalid sequence yields U+FFFD and consumes its maximal invalid subpart (at least 1 byte). If
// p[0..n) is a valid but unfinished prefix, returns 0 when more bytes may follow (!at_end), and
// U+FFFD for the whole prefix when they cannot (at_end).
int utf8_next(const uint8_t* p, size_t n, bool at_end, char32_t* cp);
// Appends the UTF-8 encoding of cp (a Unicode scalar value) to *out.
void utf8_append(char32_t cp, std::string* out);
// True for bytes 10xxxxxx, which never start a code point.
inline bool utf8_is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Whole strings: s's code points (maximal invalid subparts → U+FFFD), code points → UTF-8, and whether
// s is valid UTF-8 (decoding and re-encoding gives s back).
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view cps);
bool utf8_valid(std::string_view s);

// Code-point offsets (Python str indices of s.decode("utf-8", errors="replace"), the unit of
// text::Encoding::offsets) to byte offsets in s, for slicing the original UTF-8: the result has
// utf8_decode(s).size() + 1 entries, the byte where each code point starts and then s.size(). Code
// points are counted as utf8_decode counts them (a maximal invalid subpart is one).
std::vector<size_t> utf8_byte_offsets(std::string_view s);
// One offset: the byte where code point cp starts (cp == the number of code points: s.size()).
// Throws std::out_of_range for cp < 0 or past the end. O(cp); for many offsets, utf8_byte_offsets.
size_t utf8_byte_offset(std::string_view s, int64_t cp);
// The code points [start, end) of s, as its own bytes (the text of a character span: an answer, an
// entity); std::out_of_range unless 0 <= start <= end <= the number of code points.
std::string_view utf8_slice(std::string_view s, int64_t start, int64_t end);

// s made safe to print as one line of a terminal or log (error messages quote file contents): C0 and
// C1 control characters, DEL and the bytes of invalid UTF-8 become escapes (\n, \r, \t, else \xNN
// for each byte, C1 characters included); every other character, ideographs and emoji included,
// passes unchanged. An escape sequence from a file can then neither recolour nor rewrite the terminal.
std::string printable(std::string_view s);

}  // namespace base
