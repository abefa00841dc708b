// --model for every command that opens a model directory: a directory, or a Hugging Face repository
// id ("org/name", "org/name@revision") found offline in the Hugging Face cache (load/hub_cache.h).
// The option's value becomes the directory, so the command reads a path as before.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "load/hub_cache.h"

namespace roformer {

// The transform of a --model option: a directory stays itself, a cached id becomes its snapshot
// directory. An id not in the cache throws io::Error out of the parse (CLI11 catches only its own
// ValidationError), which the command line prints as its one error line, as for a missing directory.
inline CLI::Validator model_location() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        value = load::resolve_model(value);
        return "";
      },
      "DIR or a Hugging Face id ORG/NAME[@REVISION] (offline, from the Hugging Face cache)", "MODEL");
}

}  // namespace roformer
