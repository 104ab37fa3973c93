// TensorBoard event files written from C++: TFRecord framing (length, masked CRC32C of
// the length, the serialized Event, masked CRC32C of the data) around TensorFlow's Event
// protobuf (coordinator/tensorboard.proto). `tensorboard --logdir RUN_DIR/tb` shows them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace stampede::coordinator {

// CRC-32C (Castagnoli), and TFRecord's masking of it.
uint32_t Crc32c(const void* data, size_t n);
uint32_t MaskedCrc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  TensorBoardWriter() = default;
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  // Makes `dir` and opens dir/events.out.tfevents.<seconds>.<host> with the file-version
  // record. False with the OS's reason.
  base::Status Open(const std::string& dir);
  bool is_open() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  // One Event with every (tag, value) at `step`; written and flushed.
  bool WriteScalars(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& scalars);

 private:
  bool WriteRecord(const std::string& data);
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace stampede::coordinator
