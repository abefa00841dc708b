// An option whose value names one of an enum's values (--precision bf16, --task mlm, --quantize int8):
// parsed once, here, by the enum's own parse function (model::parse_quantize, train::parse_lm_objective,
// ...), so that the commands below the command line get the enum. An unknown name is CLI11's one error
// line, "--precision: unknown precision 'bf17' (fp32, bf16, auto)", naming the option and the values.
#pragma once

#include <CLI/CLI.hpp>

#include <stdexcept>
#include <string>

namespace roformer {

template <typename E>
CLI::Option* add_enum_option(CLI::App* command, const std::string& flag, E& value, E (*parse)(const std::string&),
                             const char* (*name)(E), const std::string& help) {
  return command
      ->add_option_function<std::string>(flag, [&value, parse](const std::string& s) { value = parse(s); }, help)
      ->check(CLI::Validator(
          [parse](std::string& s) -> std::string {
            try {
              parse(s);
              return "";
            } catch (const std::invalid_argument& e) {
              return e.what();
            }
          },
          ""))
      ->default_str(name(value));
}

}  // namespace roformer
