// Crash-safe file replacement: write_file_atomic(path, bytes) leaves `path` holding either its old
// contents or all of `bytes`, never a torn mix, because the bytes go to a temporary file in the same
// directory (so the rename stays on one file system), which is fsynced and then renamed over `path`;
// the directory is fsynced last so the rename itself survives a power cut. Used for tokenizer files
// and, later, checkpoints that a resumed training run must be able to trust.
#pragma once

#include <string>
#include <string_view>

namespace io {

// Throws io::Error (io/safetensors.h) naming `path` and the failing system call; the temporary file is
// removed on failure. The new file gets the usual 0666 & ~umask permissions. A `path` that exists and is
// neither a regular file nor a directory (a device such as /dev/null or /dev/full, a FIFO) is written in
// place, not replaced.
void write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace io
