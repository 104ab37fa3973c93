#include "ps/checkpoints.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/mutex.h"
#include "ps/placement.h"
#include "base/durable_file.h"

namespace stampede::ps {

namespace fs = std::filesystem;
using base::Fnv1a64;

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
  if (m.final) os << "final\n";
  for (const auto& p : m.parts) os << "part " << p.file << " " << p.bytes << " " << p.checksum << "\n";
  os << "end\n";
  return base::WriteFileAtomically(dir + "/MANIFEST", os.str());
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
    } else if (key == "final") {
      m->final = true;
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
  return base::WriteFileAtomically(path, std::to_string(mark) + "\n");
}

base::Status ReshardCheckpoint(const FoundCheckpoint& from, const Placement& old_placement,
                               const Placement& new_placement, const std::string& root,
                               const std::string& config_text, std::string* written) {
  const int old_shards = old_placement.num_shards();
  const int64_t total = old_placement.total_size;
  if (new_placement.total_size != total) {
    return base::InvalidArgument("checkpoint " + from.dir + " holds " + std::to_string(total) +
                                 " values, but the new placement places " + std::to_string(new_placement.total_size));
  }
  std::vector<float> params(static_cast<size_t>(total)), mean_square(static_cast<size_t>(total)),
      momentum(static_cast<size_t>(total));
  int64_t version = 0;
  uint64_t fingerprint = 0;
  std::vector<int64_t> frames;
  for (int s = 0; s < old_shards; ++s) {
    const ManifestPart* listed = nullptr;
    for (const auto& p : from.manifest.parts) {
      if (p.file == ShardPartName(s)) listed = &p;
    }
    const std::string path = from.dir + "/" + ShardPartName(s);
    if (listed == nullptr) return base::InvalidArgument(path + ": not listed in its MANIFEST");
    std::string bytes;
    ShardPart part;
    if (base::Status st = ReadPart(from.dir, *listed, &bytes); !st.ok()) return st;
    if (base::Status st = ParseShardPart(bytes, path, &part); !st.ok()) return st;
    if (part.shard != s || part.num_shards != old_shards || part.total_size != total ||
        part.count != old_placement.Count(s) || part.offset != old_placement.Start(s)) {
      return base::InvalidArgument(path + ": shard " + std::to_string(part.shard) + " of " +
                                   std::to_string(part.num_shards) + " with " + std::to_string(part.count) +
                                   " values at " + std::to_string(part.offset) + ", but its checkpoint's config places " +
                                   std::to_string(old_placement.Count(s)) + " at " +
                                   std::to_string(old_placement.Start(s)) + " on shard " + std::to_string(s) + " of " +
                                   std::to_string(old_shards));
    }
    if (s > 0 && part.layout_fingerprint != fingerprint) {
      return base::InvalidArgument(path + ": another network's part than shard 0's");
    }
    fingerprint = part.layout_fingerprint;
    old_placement.Scatter(s, part.params.data(), params.data());
    old_placement.Scatter(s, part.mean_square.data(), mean_square.data());
    old_placement.Scatter(s, part.momentum.data(), momentum.data());
    version = std::max(version, part.version);
    if (frames.size() < part.learner_frames.size()) frames.resize(part.learner_frames.size(), 0);
    for (size_t l = 0; l < part.learner_frames.size(); ++l) frames[l] = std::max(frames[l], part.learner_frames[l]);
  }
  Manifest m;
  m.sequence = NextCheckpointSequence(root);
  m.version = version;
  m.learner_frames = frames;
  const std::string dir = CheckpointDir(root, m.sequence);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return base::Internal("cannot make " + dir + ": " + ec.message());
  std::string error;
  auto write = [&](const std::string& name, const std::string& bytes) {
    if (const base::Status st = base::WriteFileAtomically(dir + "/" + name, bytes); !st.ok()) {
      error = st.message();
      return false;
    }
    m.parts.push_back({name, int64_t(bytes.size()), base::Fnv1a64(bytes.data(), bytes.size())});
    return true;
  };
  for (int s = 0; s < new_placement.num_shards(); ++s) {
    ShardPart part;
    part.shard = s;
    part.num_shards = new_placement.num_shards();
    part.version = version;
    part.offset = new_placement.Start(s);
    part.count = new_placement.Count(s);
    part.total_size = total;
    part.layout_fingerprint = fingerprint;
    part.learner_frames = frames;
    part.params.resize(size_t(part.count));
    part.mean_square.resize(size_t(part.count));
    part.momentum.resize(size_t(part.count));
    new_placement.Gather(s, params.data(), part.params.data());
    new_placement.Gather(s, mean_square.data(), part.mean_square.data());
    new_placement.Gather(s, momentum.data(), part.momentum.data());
    if (!write(ShardPartName(s), SerializeShardPart(part))) return base::Internal(error);
  }
  for (const auto& p : from.manifest.parts) {
    if (p.file.rfind("shard-", 0) == 0) continue;
    std::string bytes;
    if (p.file == "config.textproto") {
      bytes = config_text;
    } else if (base::Status st = ReadPart(from.dir, p, &bytes); !st.ok()) {
      return st;
    }
    if (!write(p.file, bytes)) return base::Internal(error);
  }
  if (base::Status st = WriteManifest(dir, m); !st.ok()) return st;
  *written = dir;
  return base::OkStatus();
}

}  // namespace stampede::ps
