// Files that are either complete or absent: writers write a temporary, force it to disk, rename
// it into place and force the folder (which makes the rename itself durable). Prepared data and
// checkpoints both go through here.
#pragma once

#include <string>

namespace mvibr {

// fsync of a file, or of a folder's entries. Throws RuntimeFailure naming the path.
void sync_to_disk(const std::string& path);

// Writes `contents` to `path` through a temporary beside it (named by the process, so that
// processes writing the same file do not share one) renamed into place: readers see the old
// file or the new one, never part of one. For outputs (renders, reports); no fsync.
void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace mvibr
