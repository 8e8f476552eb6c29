// Files that are either complete or absent: writers write a temporary, force it to disk, rename
// it into place and force the folder (which makes the rename itself durable). Prepared data and
// checkpoints both go through here.
#pragma once

#include <string>

namespace mvibr {

// fsync of a file, or of a folder's entries. Throws RuntimeFailure naming the path.
void sync_to_disk(const std::string& path);

}  // namespace mvibr
