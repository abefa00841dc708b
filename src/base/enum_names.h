// The names of an enum that stands for a choice (a config.json field, a command-line option): one
// table per enum, which its name function and its parse function both read, so that the parse error
// lists exactly the names there are.
//
//   constexpr base::EnumName<Gemm> kGemmNames[] = {{Gemm::automatic, "auto"}, {Gemm::packed, "packed"}};
//   const char* gemm_name(Gemm g) { return base::enum_name(kGemmNames, g); }
//   Gemm parse_gemm(const std::string& s) { return base::parse_enum(kGemmNames, s, "gemm"); }
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace base {

template <class E>
struct EnumName {
  E value;
  const char* name;  // "": a value with no name of its own (e.g. "none" where absence says it), never parsed
};

// value's name; "?" for a value the table lacks.
template <class E, size_t N>
const char* enum_name(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& n : names) {
    if (n.value == value) return n.name;
  }
  return "?";
}

// The value called `name`; otherwise std::invalid_argument "unknown WHAT 'name' (a, b, c)", the
// table's non-empty names in its order.
template <class E, size_t N>
E parse_enum(const EnumName<E> (&names)[N], const std::string& name, const std::string& what) {
  std::string all;
  for (const EnumName<E>& n : names) {
    if (*n.name == '\0') continue;
    if (name == n.name) return n.value;
    all += (all.empty() ? "" : ", ") + std::string(n.name);
  }
  throw std::invalid_argument("unknown " + what + " '" + name + "' (" + all + ")");
}

}  // namespace base
