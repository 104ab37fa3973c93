#include "base/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace stampede::base {

uint64_t Fnv1a64(const char* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= uint8_t(data[i]);
    h *= 1099511628211ull;
  }
  return h;
}

base::Status WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return base::Internal(tmp + ": cannot create: " + std::strerror(errno));
  // Any failure removes the temporary file: the previous `path` stays as it was and
  // nothing half-written is left behind.
  auto fail = [&](const std::string& what, int err) {
    const std::string why = path + ": " + what + ": " + std::strerror(err);
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return base::Internal(why);
  };
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return fail("write failed", w < 0 ? errno : ENOSPC);
    written += size_t(w);
  }
  if (::fsync(fd) != 0) return fail("fsync failed", errno);
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail("close failed", errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename failed", errno);
  return base::OkStatus();
}

}  // namespace stampede::base
