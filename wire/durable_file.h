// Files that must survive a crash (checkpoints, run summaries, the resolved config) are
// written to a temp name, fsynced, then renamed: a reader sees the old file or the new
// one, never half of one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace stampede::wire {

// FNV-1a 64 of `n` bytes: the checksum that checkpoint files and their parts carry.
uint64_t Fnv1a64(const char* data, size_t n);

// False with `error` naming the file and the failing step.
[[nodiscard]] bool WriteFileAtomically(const std::string& path, const std::string& bytes,
                                       std::string* error);

}  // namespace stampede::wire
