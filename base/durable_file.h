// Files that must survive a crash (checkpoints, run summaries, the resolved config) are
// written to a temp name, fsynced, then renamed: a reader sees the old file or the new
// one, never half of one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace stampede::base {

// FNV-1a 64 of `n` bytes: the checksum that checkpoint files and their parts carry.
uint64_t Fnv1a64(const char* data, size_t n);

// Fails (kInternal) naming the file and the failing step.
base::Status WriteFileAtomically(const std::string& path, const std::string& bytes);

}  // namespace stampede::base
