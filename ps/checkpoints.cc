#include "ps/checkpoints.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/mutex.h"
#include "wire/durable_file.h"

namespace stampede::ps {

namespace fs = std::filesystem;
using wire::Fnv1a64;

namespace {
constexpr char kMagic[8] = {'S', 'T', 'P', 'S', 'H', 'R', 'D', '1'};
constexpr char kManifestHead[] = "stampede checkpoint manifest 1";

template <typename T>
void Put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

struct Reader {
  const std::string& bytes;
  size_t at = 0;
  template <typename T>
  bool Get(T* v) {
    if (bytes.size() - at < sizeof(T)) return false;
    std::memcpy(v, bytes.data() + at, sizeof(T));
    at += sizeof(T);
    return true;
  }
  bool Floats(int64_t n, std::vector<float>* v) {
    if (n < 0 || uint64_t(bytes.size() - at) / sizeof(float) < uint64_t(n)) return false;
    v->resize(size_t(n));
    std::memcpy(v->data(), bytes.data() + at, size_t(n) * sizeof(float));
    at += size_t(n) * sizeof(float);
    return true;
  }
};

bool AllFinite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

bool ReadFile(const std::string& path, std::string* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *bytes = ss.str();
  return true;
}

// The sequence of a "ckpt-N" directory name, or -1.
int64_t SequenceOf(const std::string& name) {
  if (name.rfind("ckpt-", 0) != 0 || name.size() == 5) return -1;
  if (name.find_first_not_of("0123456789", 5) != std::string::npos) return -1;
  return std::stoll(name.substr(5));
}

std::vector<std::pair<int64_t, std::string>> Directories(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t seq = SequenceOf(it->path().filename().string());
    if (seq >= 0 && it->is_directory(ec)) out.emplace_back(seq, it->path().string());
  }
  std::sort(out.begin(), out.end(), std::greater<>());  // newest first
  return out;
}

// Checks every part of `dir` against its manifest (and shard parts' contents).
base::Status Verify(const std::string& dir, Manifest* m) {
  if (base::Status read = ReadManifest(dir, m); !read.ok()) return read;
  for (const auto& part : m->parts) {
    std::string bytes;
    if (base::Status read = ReadPart(dir, part, &bytes); !read.ok()) return read;
    if (part.file.rfind("shard-", 0) == 0) {
      ShardPart sp;
      if (base::Status parsed = ParseShardPart(bytes, dir + "/" + part.file, &sp); !parsed.ok()) return parsed;
    }
  }
  return base::OkStatus();
}
}  // namespace

std::string SerializeShardPart(const ShardPart& p) {
  std::string out(kMagic, sizeof kMagic);
  Put(&out, p.shard);
  Put(&out, p.num_shards);
  Put(&out, p.version);
  Put(&out, p.offset);
  Put(&out, p.count);
  Put(&out, p.total_size);
  Put(&out, p.layout_fingerprint);
  Put(&out, int32_t(p.learner_frames.size()));
  for (int64_t f : p.learner_frames) Put(&out, f);
  for (const auto* v : {&p.params, &p.mean_square, &p.momentum}) {
    out.append(reinterpret_cast<const char*>(v->data()), v->size() * sizeof(float));
  }
  Put(&out, Fnv1a64(out.data(), out.size()));
  return out;
}

base::Status ParseShardPart(const std::string& bytes, const std::string& path, ShardPart* p) {
  if (bytes.size() < sizeof kMagic + sizeof(uint64_t) || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return base::InvalidArgument(path + ": not a PS shard checkpoint part (bad magic or too short)");
  }
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - sizeof stored, sizeof stored);
  if (stored != Fnv1a64(bytes.data(), bytes.size() - sizeof stored)) {
    return base::InvalidArgument(path + ": checksum mismatch (the file is truncated or damaged)");
  }
  const std::string body = bytes.substr(0, bytes.size() - sizeof stored);
  Reader r{body, sizeof kMagic};
  int32_t learners = 0;
  bool ok = r.Get(&p->shard) && r.Get(&p->num_shards) && r.Get(&p->version) && r.Get(&p->offset) &&
            r.Get(&p->count) && r.Get(&p->total_size) && r.Get(&p->layout_fingerprint) && r.Get(&learners) &&
            learners >= 0 && learners <= 4096;
  if (ok) {
    p->learner_frames.resize(size_t(learners));
    for (auto& f : p->learner_frames) ok = ok && r.Get(&f);
  }
  ok = ok && p->count > 0 && p->offset >= 0 && p->offset <= p->total_size - p->count && r.Floats(p->count, &p->params) &&
       r.Floats(p->count, &p->mean_square) && r.Floats(p->count, &p->momentum) && r.at == body.size();
  if (!ok) {
    return base::InvalidArgument(path + ": malformed PS shard checkpoint part (sizes do not add up)");
  }
  if (!AllFinite(p->params) || !AllFinite(p->mean_square) || !AllFinite(p->momentum)) {
    return base::InvalidArgument(path + ": holds non-finite parameters or optimizer state (NaN or infinity)");
  }
  return base::OkStatus();
}

int64_t Manifest::env_frames() const {
  int64_t n = 0;
  for (int64_t f : learner_frames) n += f;
  return n;
}

std::string CheckpointDir(const std::string& root, int64_t sequence) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%08lld", (long long)sequence);
  return root + "/" + name;
}

std::string ShardPartName(int shard) { return "shard-" + std::to_string(shard) + ".bin"; }

base::Status WriteManifest(const std::string& dir, const Manifest& m) {
  std::ostringstream os;
  os << kManifestHead << "\n";
  os << "sequence " << m.sequence << "\n";
  os << "version " << m.version << "\n";
  os << "learner_frames";
  for (int64_t f : m.learner_frames) os << " " << f;
  os << "\n";
  for (const auto& p : m.parts) os << "part " << p.file << " " << p.bytes << " " << p.checksum << "\n";
  os << "end\n";
  std::string error;
  if (!wire::WriteFileAtomically(dir + "/MANIFEST", os.str(), &error)) return base::Internal(error);
  return base::OkStatus();
}

base::Status ReadManifest(const std::string& dir, Manifest* m) {
  std::string text;
  if (!ReadFile(dir + "/MANIFEST", &text)) {
    return base::InvalidArgument(dir + ": no MANIFEST (the checkpoint was never completed)");
  }
  std::istringstream in(text);
  std::string line;
  *m = Manifest{};
  bool head = false, ended = false, seq = false, version = false;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (!head) {
      head = line == kManifestHead;
      if (!head) break;
      continue;
    }
    if (key == "sequence") {
      seq = bool(ls >> m->sequence);
    } else if (key == "version") {
      version = bool(ls >> m->version);
    } else if (key == "learner_frames") {
      for (int64_t f; ls >> f;) m->learner_frames.push_back(f);
    } else if (key == "part") {
      ManifestPart p;
      if (!(ls >> p.file >> p.bytes >> p.checksum) || p.file.find('/') != std::string::npos) break;
      m->parts.push_back(p);
    } else if (key == "end") {
      ended = true;
      break;
    } else {
      break;
    }
  }
  if (!head || !ended || !seq || !version || m->parts.empty()) {
    return base::InvalidArgument(dir + "/MANIFEST: malformed (expected the header, sequence, version, parts and \"end\")");
  }
  return base::OkStatus();
}

base::Status ReadPart(const std::string& dir, const ManifestPart& part, std::string* bytes) {
  const std::string path = dir + "/" + part.file;
  if (!ReadFile(path, bytes)) {
    return base::InvalidArgument(path + ": missing (listed in the MANIFEST)");
  }
  if (int64_t(bytes->size()) != part.bytes) {
    return base::InvalidArgument(path + ": " + std::to_string(bytes->size()) + " bytes, the MANIFEST says " + std::to_string(part.bytes) +
             " (truncated?)");
  }
  if (Fnv1a64(bytes->data(), bytes->size()) != part.checksum) {
    return base::InvalidArgument(path + ": checksum differs from the MANIFEST's (damaged)");
  }
  return base::OkStatus();
}

bool FindNewestCheckpoint(const std::string& root, FoundCheckpoint* found, std::vector<std::string>* warnings) {
  for (const auto& [seq, dir] : Directories(root)) {
    Manifest m;
    const base::Status verified = Verify(dir, &m);
    if (verified.ok()) {
      found->dir = dir;
      found->manifest = m;
      return true;
    }
    if (warnings) warnings->push_back("skipped checkpoint " + dir + ": " + verified.message());
  }
  return false;
}

int64_t NextCheckpointSequence(const std::string& root) {
  const auto dirs = Directories(root);
  return dirs.empty() ? 1 : dirs.front().first + 1;
}

void PruneCheckpoints(const std::string& root, int keep) {
  // A checkpoint does not change once complete: each is read through once per process
  // (the chief prunes on its training thread after every checkpoint, so only the new one
  // is read there).
  struct Verified {
    base::Mutex mu;
    std::set<std::string> dirs GUARDED_BY(mu);
  };
  static Verified verified;
  base::MutexLock lock(verified.mu);
  int intact = 0;
  for (const auto& [seq, dir] : Directories(root)) {
    // Once `keep` intact ones are counted, everything older goes. Before that, a damaged
    // or unfinished one newer than them stays (a write in progress, or one to look at).
    if (intact >= keep) {
      std::error_code ec;
      fs::remove_all(dir, ec);
      verified.dirs.erase(dir);
      continue;
    }
    Manifest m;
    if (verified.dirs.count(dir) || Verify(dir, &m).ok()) {
      verified.dirs.insert(dir);
      ++intact;
    }
  }
}

int64_t ReadVersionMark(const std::string& path) {
  std::string text;
  if (!ReadFile(path, &text)) return 0;
  try {
    return std::max<int64_t>(0, std::stoll(text));
  } catch (...) {
    return 0;
  }
}

base::Status WriteVersionMark(const std::string& path, int64_t mark) {
  std::string error;
  if (!wire::WriteFileAtomically(path, std::to_string(mark) + "\n", &error)) return base::Internal(error);
  return base::OkStatus();
}

}  // namespace stampede::ps
