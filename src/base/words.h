// Words in messages: a count with its noun in the right number ("1 label", "2 labels").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace base {

// "1 epoch", "3 epochs"; `plural` for nouns that do not just take an s.
inline std::string counted(int64_t n, std::string_view noun, std::string_view plural = {}) {
  std::string out = std::to_string(n) + " ";
  if (n == 1) return out.append(noun);
  return plural.empty() ? out.append(noun).append("s") : out.append(plural);
}

}  // namespace base
