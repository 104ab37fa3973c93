#include "coordinator/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "coordinator/tensorboard.pb.h"

namespace stampede::coordinator {

namespace {
std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
    t[i] = c;
  }
  return t;
}
}  // namespace

uint32_t Crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = MakeTable();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(const void* data, size_t n) {
  const uint32_t c = Crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

base::Status TensorBoardWriter::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return base::Internal("cannot make " + dir + ": " + ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  path_ = dir + "/events.out.tfevents." + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) +
          "." + host;
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) return base::Internal("cannot write " + path_ + ": " + std::strerror(errno));
  tb::Event e;
  e.set_wall_time(std::chrono::duration<double>(now).count());
  e.set_file_version("brain.Event:2");
  if (!WriteRecord(e.SerializeAsString())) return base::Internal("cannot write " + path_ + ": " + std::strerror(errno));
  return base::OkStatus();
}

bool TensorBoardWriter::WriteScalars(int64_t step, double wall_time,
                                     const std::vector<std::pair<std::string, double>>& scalars) {
  if (!file_) return false;
  tb::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  for (const auto& [tag, value] : scalars) {
    auto* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(float(value));
  }
  return WriteRecord(e.SerializeAsString());
}

bool TensorBoardWriter::WriteRecord(const std::string& data) {
  unsigned char header[12];
  const uint64_t len = data.size();
  for (int i = 0; i < 8; ++i) header[i] = static_cast<unsigned char>(len >> (8 * i));
  const uint32_t len_crc = MaskedCrc32c(header, 8);
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<unsigned char>(len_crc >> (8 * i));
  const uint32_t data_crc = MaskedCrc32c(data.data(), data.size());
  unsigned char footer[4];
  for (int i = 0; i < 4; ++i) footer[i] = static_cast<unsigned char>(data_crc >> (8 * i));
  bool ok = std::fwrite(header, 1, 12, file_) == 12 && std::fwrite(data.data(), 1, data.size(), file_) == data.size() &&
            std::fwrite(footer, 1, 4, file_) == 4 && std::fflush(file_) == 0;
  return ok;
}

}  // namespace stampede::coordinator
