#include "learner/checkpoint.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "base/durable_file.h"

namespace stampede::learner {

namespace {
constexpr char kMagic[8] = {'S', 'T', 'M', 'P', 'C', 'K', 'P', 'T'};
constexpr uint32_t kFormatVersion = 1;

}  // namespace

uint64_t CheckpointChecksum(const char* data, size_t n) { return base::Fnv1a64(data, n); }

namespace {

template <class T>
void Put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void PutFloats(std::string* out, const std::vector<float>& v) {
  Put(out, int64_t(v.size()));
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

struct Reader {
  const std::string& buf;
  size_t pos = 0;
  template <class T>
  bool Get(T* v) {
    if (pos + sizeof(T) > buf.size()) return false;
    std::memcpy(v, buf.data() + pos, sizeof(T));
    pos += sizeof(T);
    return true;
  }
  bool GetFloats(std::vector<float>* v) {
    int64_t n = 0;
    // Compared by division: a forged count must not overflow the bound check.
    if (!Get(&n) || n < 0 || uint64_t(n) > (buf.size() - pos) / sizeof(float)) return false;
    v->resize(n);
    if (n > 0) std::memcpy(v->data(), buf.data() + pos, size_t(n) * sizeof(float));
    pos += size_t(n) * sizeof(float);
    return true;
  }
};
}  // namespace

std::string LayoutText(const net::ParamLayout& layout) {
  std::ostringstream os;
  if (!layout.tag().empty()) os << layout.tag() << "\n";
  for (const auto& t : layout.tensors()) {
    os << t.name << " [";
    for (size_t i = 0; i < t.shape.size(); ++i) os << (i ? "," : "") << t.shape[i];
    os << "] " << t.offset << "\n";
  }
  return os.str();
}

base::Status SaveCheckpoint(const std::string& path, const CheckpointData& d) {
  std::string buf(kMagic, sizeof(kMagic));
  Put(&buf, kFormatVersion);
  Put(&buf, d.layout_fingerprint);
  Put(&buf, d.version);
  Put(&buf, d.env_frames);
  Put(&buf, d.learner_steps);
  Put(&buf, int64_t(d.layout_text.size()));
  buf += d.layout_text;
  PutFloats(&buf, d.params);
  PutFloats(&buf, d.rms_mean_square);
  PutFloats(&buf, d.rms_momentum);
  Put(&buf, CheckpointChecksum(buf.data(), buf.size()));

  return base::WriteFileAtomically(path, buf);
}

base::Status LoadCheckpoint(const std::string& path, CheckpointData* d) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return base::InvalidArgument(path + ": cannot open checkpoint");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseCheckpoint(ss.str(), path, d);
}

base::Status ParseCheckpoint(const std::string& buf, const std::string& path, CheckpointData* d) {
  if (buf.size() < sizeof(kMagic) + 4 + 8 || std::memcmp(buf.data(), kMagic, sizeof(kMagic)) != 0) {
    return base::InvalidArgument(path + ": not a Stampede checkpoint (bad magic)");
  }
  uint64_t stored = 0;
  std::memcpy(&stored, buf.data() + buf.size() - 8, 8);
  if (stored != CheckpointChecksum(buf.data(), buf.size() - 8)) {
    return base::InvalidArgument(path + ": checksum mismatch (the file is truncated or corrupted)");
  }
  Reader r{buf, sizeof(kMagic)};
  uint32_t format = 0;
  int64_t text_len = 0;
  if (!r.Get(&format) || format != kFormatVersion) {
    return base::InvalidArgument(path + ": checkpoint format " + std::to_string(format) + ", this build reads " +
             std::to_string(kFormatVersion));
  }
  if (!r.Get(&d->layout_fingerprint) || !r.Get(&d->version) || !r.Get(&d->env_frames) ||
      !r.Get(&d->learner_steps) || !r.Get(&text_len) || text_len < 0 ||
      uint64_t(text_len) > buf.size() - r.pos) {
    return base::InvalidArgument(path + ": truncated checkpoint header");
  }
  d->layout_text = buf.substr(r.pos, size_t(text_len));
  r.pos += size_t(text_len);
  if (!r.GetFloats(&d->params) || !r.GetFloats(&d->rms_mean_square) ||
      !r.GetFloats(&d->rms_momentum) || r.pos + 8 != buf.size()) {
    return base::InvalidArgument(path + ": truncated or malformed checkpoint arrays");
  }
  if (d->rms_mean_square.size() != d->params.size() || d->rms_momentum.size() != d->params.size()) {
    return base::InvalidArgument(path + ": optimizer state size differs from the parameters");
  }
  return base::OkStatus();
}

}  // namespace stampede::learner
