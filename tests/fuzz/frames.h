// Fuzz input -> ZeroMQ frames: byte 0 is the frame count (1..8); each frame but the
// last is preceded by its length (uint32, little endian, clamped to what is left);
// the last frame takes the rest. The same layout makes the seed corpus.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <zmq.hpp>

namespace stampede::fuzz {

inline std::vector<zmq::message_t> SplitFrames(const uint8_t* data, size_t size) {
  std::vector<zmq::message_t> parts;
  if (size == 0) return parts;
  const int count = 1 + data[0] % 8;
  size_t pos = 1;
  for (int i = 0; i < count && pos <= size; ++i) {
    size_t len = size - pos;
    if (i + 1 < count) {
      uint32_t n = 0;
      const size_t have = std::min<size_t>(4, size - pos);
      std::memcpy(&n, data + pos, have);
      pos += have;
      len = std::min<size_t>(n, size - pos);
    }
    parts.emplace_back(data + pos, len);
    pos += len;
  }
  return parts;
}

inline std::string JoinFrames(const std::vector<std::string>& frames) {
  std::string out(1, char(frames.size() - 1));
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i + 1 < frames.size()) {
      const uint32_t n = uint32_t(frames[i].size());
      out.append(reinterpret_cast<const char*>(&n), 4);
    }
    out += frames[i];
  }
  return out;
}

}  // namespace stampede::fuzz
