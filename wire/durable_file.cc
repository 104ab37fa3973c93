#include "wire/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace stampede::wire {

bool WriteFileAtomically(const std::string& path, const std::string& bytes, std::string* error) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    *error = tmp + ": cannot create: " + std::strerror(errno);
    return false;
  }
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (w <= 0) {
      *error = tmp + ": write failed: " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    written += size_t(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    *error = tmp + ": fsync/close failed: " + std::strerror(errno);
    return false;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = path + ": rename failed: " + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace stampede::wire
