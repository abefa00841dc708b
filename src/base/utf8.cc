// UTF-8 decoding and encoding (see utf8.h).
#include "base/utf8.h"

#include <stdexcept>

namespace base {

int utf8_next(const uint8_t* p, size_t n, bool at_end, char32_t* cp) {
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  // Lead byte → length and the allowed range of the second byte (which excludes overlong forms,
  // surrogates and values above U+10FFFF; Unicode Table 3-7).
  int len;
  char32_t c;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, c = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, c = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *cp = kReplacementChar;  // a stray continuation byte or a byte that never occurs in UTF-8
    return 1;
  }
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= n) {
      if (!at_end) return 0;
      *cp = kReplacementChar;
      return i;
    }
    const uint8_t b = p[i];
    if (b < lo || b > hi) {
      *cp = kReplacementChar;  // the maximal subpart is p[0..i): the next code point starts at b
      return i;
    }
    lo = 0x80, hi = 0xBF;
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  return len;
}

void utf8_append(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    i += static_cast<size_t>(utf8_next(p + i, s.size() - i, /*at_end=*/true, &cp));  // maximal subpart → U+FFFD
    out.push_back(cp);
  }
  return out;
}

std::string utf8_encode(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) utf8_append(c, &out);
  return out;
}

bool utf8_valid(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return utf8_encode(utf8_decode(s)) == s;  // slow path only for non-ASCII
  return true;
}

std::vector<size_t> utf8_byte_offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    out.push_back(i);
    char32_t cp = 0;
    i += static_cast<size_t>(utf8_next(p + i, s.size() - i, /*at_end=*/true, &cp));  // as utf8_decode
  }
  out.push_back(s.size());
  return out;
}

size_t utf8_byte_offset(std::string_view s, int64_t cp) {
  if (cp < 0) throw std::out_of_range("utf8_byte_offset: negative code point offset " + std::to_string(cp));
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t i = 0;
  for (int64_t k = 0; k < cp; ++k) {
    if (i == s.size())
      throw std::out_of_range("utf8_byte_offset: code point " + std::to_string(cp) + " is past the end (" +
                              std::to_string(k) + " code points)");
    char32_t c = 0;
    i += static_cast<size_t>(utf8_next(p + i, s.size() - i, /*at_end=*/true, &c));  // as utf8_decode
  }
  return i;
}

std::string_view utf8_slice(std::string_view s, int64_t start, int64_t end) {
  if (start > end) throw std::out_of_range("utf8_slice: start after end");
  const size_t a = utf8_byte_offset(s, start), b = utf8_byte_offset(s, end);
  return s.substr(a, b - a);
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  auto escape = [&](size_t from, size_t n) {
    static const char kHex[] = "0123456789abcdef";
    for (size_t k = from; k < from + n; ++k) {
      const uint8_t b = p[k];
      if (b == '\n') out += "\\n";
      else if (b == '\r') out += "\\r";
      else if (b == '\t') out += "\\t";
      else out += std::string{'\\', 'x', kHex[b >> 4], kHex[b & 15]};
    }
  };
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    const int n = utf8_next(p + i, s.size() - i, true, &cp);
    const std::string_view bytes(s.data() + i, static_cast<size_t>(n));
    const bool valid = cp != kReplacementChar || bytes == "\xef\xbf\xbd";  // U+FFFD itself is valid
    const bool control = cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0);
    if (!valid || control) {
      escape(i, static_cast<size_t>(n));
    } else {
      out.append(bytes);
    }
    i += static_cast<size_t>(n);
  }
  return out;
}

}  // namespace base
