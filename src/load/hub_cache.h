// Model ids as the command line's --model takes them: a Hugging Face repository id, "org/name" or
// "org/name@revision", found OFFLINE in the Hugging Face cache as huggingface_hub lays it out
// (nothing is downloaded). The cache is $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub,
// else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub's constants);
// in it, models--org--name/refs/<revision> (default main) holds a commit hash and
// models--org--name/snapshots/<hash>/ the files. A revision with no refs file names a snapshot
// directly (a commit hash), as huggingface_hub's try_to_load_from_cache reads it.
//
//   load::resolve_model("models/roformer_chinese_base")  // an existing directory: itself
//   load::resolve_model("junnyu/roformer_chinese_base")   // → ~/.cache/huggingface/hub/models--junnyu--
//                                                          //   roformer_chinese_base/snapshots/<hash>
#pragma once

#include <string>

namespace load {

// The Hugging Face hub cache directory, from the environment as huggingface_hub reads it.
std::string hub_cache_dir();

// The directory --model names: `spec` itself when it is a directory (a path wins over an id), or when
// it cannot be a repository id (absolute, more than one '/', "..": the loader then names the missing
// directory); else the cached snapshot of the id. An id not in the cache is an io::Error naming the
// cache directory and the refs file (or snapshot) looked for.
std::string resolve_model(const std::string& spec);

}  // namespace load
