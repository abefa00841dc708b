// Where a command may write: never over what it reads, never into a directory that holds something
// else. Every command that writes a model directory or a file beside its inputs checks its output
// here before it reads anything heavy, so a mistyped --out fails at once with one line.
#pragma once

#include <string>
#include <vector>

namespace io {

// Throws io::Error when `out` is one of `inputs`, a directory that holds one, or an existing file
// inside an input directory: "OPTION OUT: is the input IN" / "holds the input IN" / "is a file of the
// input IN". Paths are compared after symlinks, '.' and '..' are resolved (out need not exist). Empty
// inputs are ignored.
void check_output_path(const std::string& option, const std::string& out, const std::vector<std::string>& inputs);

// A directory a command fills with the files named in `writes` (and nothing else): it may be new,
// empty, or hold only those names (the same command's earlier output, which it replaces); anything
// else is an io::Error naming the first other entry, so that --out pointed at a home or data folder
// writes nothing.
void check_output_directory(const std::string& option, const std::string& out, const std::vector<std::string>& writes);

}  // namespace io
