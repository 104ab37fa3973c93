#include "tools/eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "actors/evaluate.h"
#include "base/log.h"
#include "learner/checkpoint.h"
#include "net/from_config.h"
#include "net/onnx_export.h"
#include "coordinator/run.h"
#include "coordinator/spec.h"
#include "config/config.h"
#include "base/durable_file.h"
#include "config/tasks.h"

namespace stampede::tools {

namespace {

// The run's config: the given file, else config.textproto beside the checkpoint; its
// spec resolved (a run directory's config already is).
base::Status LoadEvalConfig(const std::string& checkpoint, const std::string& given, const std::string& self_exe,
                            config::Config* cfg) {
  const std::string path =
      given.empty() ? (std::filesystem::path(checkpoint).parent_path() / "config.textproto").string() : given;
  LoadedConfig loaded;
  if (const base::Status st = LoadConfig(path, {}, &loaded); !st.ok()) {
    if (!given.empty()) return st;
    return base::InvalidArgument(st.message() + " (the checkpoint's run directory has no readable config; pass --config)");
  }
  *cfg = loaded.config;
  if (cfg->env().has_resolved_spec()) return base::OkStatus();
  return coordinator::ResolveEnvSpec(self_exe, cfg);
}

base::Status LoadParams(const std::string& checkpoint, const net::ParamLayout& layout, learner::CheckpointData* d) {
  RETURN_IF_ERROR(learner::LoadCheckpoint(checkpoint, d));
  if (d->layout_fingerprint != layout.Fingerprint() || d->params.size() != size_t(layout.total_size())) {
    return base::InvalidArgument(checkpoint + ": the checkpoint is for another network:\n" + d->layout_text +
             "the config's network is:\n" + learner::LayoutText(layout));
  }
  return base::OkStatus();
}

// One observation as RGB pixels (nullopt: not an image). [C, H, W] uint8: RGB if C = 3,
// else the last channel (the newest of stacked frames); float [C, H, W] with 0/1
// channels (MinAtar): each channel its colour; [H, W]: grey levels of values in [0, 1].
bool RenderObs(const wire::StepShape& shape, const void* obs, int scale, std::vector<uint8_t>* rgb, int* w, int* h) {
  const auto& s = shape.obs_shape;
  if (s.size() < 2) return false;
  const int C = s.size() == 3 ? s[0] : 1, H = s[s.size() - 2], W = s[s.size() - 1];
  *w = W * scale;
  *h = H * scale;
  rgb->assign(size_t(*w) * *h * 3, 0);
  static const uint8_t palette[10][3] = {{230, 25, 75},  {60, 180, 75},  {255, 225, 25}, {0, 130, 200},  {245, 130, 48},
                                         {145, 30, 180}, {70, 240, 240}, {240, 50, 230}, {210, 245, 60}, {250, 190, 190}};
  for (int y = 0; y < H; ++y) {
    for (int x = 0; x < W; ++x) {
      uint8_t px[3] = {0, 0, 0};
      if (shape.obs_dtype == wire::DType::kUint8) {
        const auto* u = static_cast<const uint8_t*>(obs);
        if (C == 3) {
          for (int c = 0; c < 3; ++c) px[c] = u[(size_t(c) * H + y) * W + x];
        } else {
          px[0] = px[1] = px[2] = u[(size_t(C - 1) * H + y) * W + x];
        }
      } else {
        const auto* f = static_cast<const float*>(obs);
        if (C == 1) {
          px[0] = px[1] = px[2] = uint8_t(std::clamp(f[size_t(y) * W + x], 0.f, 1.f) * 255.f);
        } else {
          for (int c = 0; c < C; ++c) {
            if (f[(size_t(c) * H + y) * W + x] > 0.5f) std::memcpy(px, palette[c % 10], 3);
          }
        }
      }
      for (int dy = 0; dy < scale; ++dy) {
        for (int dx = 0; dx < scale; ++dx) {
          std::memcpy(&(*rgb)[((size_t(y) * scale + dy) * *w + size_t(x) * scale + dx) * 3], px, 3);
        }
      }
    }
  }
  return true;
}

}  // namespace

base::Status Evaluate(const EvalOptions& opt, const std::string& self_exe, std::vector<EvalTaskResult>* results) {
  config::Config cfg;
  RETURN_IF_ERROR(LoadEvalConfig(opt.checkpoint, opt.config, self_exe, &cfg));
  std::vector<int> tasks;
  for (int t = 0; t < config::NumTasks(cfg); ++t) {
    if (opt.task.empty() || opt.task == config::TaskName(cfg, t)) tasks.push_back(t);
  }
  if (tasks.empty()) {
    std::string names;
    for (int t = 0; t < config::NumTasks(cfg); ++t) names += (t ? ", " : "") + config::TaskName(cfg, t);
    return base::InvalidArgument("--task " + opt.task + ": no such task; the run's tasks: " + names);
  }
  learner::CheckpointData d;
  bool loaded = false, recorded = opt.record.empty();
  for (int task : tasks) {
    const int E = std::clamp(opt.episodes, 1, 16);
    ASSIGN_OR_RETURN(const std::unique_ptr<actors::EpisodeRunner> runner, actors::EpisodeRunner::Create(cfg, task, E));
    if (!loaded) RETURN_IF_ERROR(LoadParams(opt.checkpoint, runner->layout(), &d));
    loaded = true;
    actors::EpisodeOptions eo;
    eo.episodes = opt.episodes;
    eo.num_envs = E;
    eo.greedy = opt.greedy;
    eo.seed = opt.seed + uint64_t(task) * 1000003u;
    eo.max_steps = opt.max_steps;
    std::vector<std::vector<uint8_t>> frames;
    int fw = 0, fh = 0;
    const bool record = !recorded;
    bool renders = true;
    int scale = 0;
    if (record) {
      eo.on_frame = [&](const wire::StepShape& shape, const std::byte* obs) {
        std::vector<uint8_t> rgb;
        if (scale == 0) {
          renders = RenderObs(shape, obs, 1, &rgb, &fw, &fh);
          scale = std::max(1, 160 / std::max(1, fh));
        }
        if (renders && RenderObs(shape, obs, scale, &rgb, &fw, &fh)) frames.push_back(std::move(rgb));
      };
      eo.keep_going = [&] { return renders; };
    }
    actors::EpisodeResult r;
    const base::Status ran = runner->Run(d.params.data(), eo, &r);
    if (record && !renders) {
      return base::InvalidArgument("--record: task " + config::TaskName(cfg, task) +
                                   "'s observations are vectors, not images; only envs "
                                   "with image observations (MinAtar, Atari, Catch) can be recorded");
    }
    RETURN_IF_ERROR(ran);
    results->push_back({config::TaskName(cfg, task), r.mean, r.std, r.episodes, r.capped});
    if (record) {
      recorded = true;
      RETURN_IF_ERROR(WriteGif(opt.record, fw, fh, frames, 10));
    }
  }
  return base::OkStatus();
}

int RunEvalCommand(const EvalOptions& opt, const std::string& self_exe) {
  std::vector<EvalTaskResult> results;
  if (const base::Status st = Evaluate(opt, self_exe, &results); !st.ok()) {
    base::LogError("stampede eval: %s\n", st.message().c_str());
    return 2;
  }
  std::printf("stampede eval: %s, %d episodes per task, %s policy\n", opt.checkpoint.c_str(), opt.episodes,
              opt.greedy ? "greedy" : "sampled");
  for (const auto& r : results) {
    std::printf("%-24s %10.3f +- %.3f  (%d episodes", r.name.c_str(), r.mean, r.std, r.episodes);
    if (r.capped > 0) std::printf(", %d cut at --max-steps %d", r.capped, opt.max_steps);
    std::printf(")\n");
  }
  if (!opt.record.empty()) std::printf("stampede eval: recorded the first episode to %s\n", opt.record.c_str());
  std::fflush(stdout);
  // A Python env may have started threads of its own: leave without exit-time destructors.
  ::_exit(0);
}

// --- GIF: LZW at a fixed 9-bit code width (a clear code every 254 literals keeps the
// decoder's table from growing past 9 bits), which every reader accepts.
base::Status WriteGif(const std::string& path, int width, int height, const std::vector<std::vector<uint8_t>>& frames,
                      int delay_cs) {
  if (frames.empty() || width <= 0 || height <= 0 || width > 65535 || height > 65535) {
    return base::InvalidArgument("--record: nothing to write");
  }
  std::string out = "GIF89a";
  auto u16 = [&](int v) {
    out += char(v & 0xFF);
    out += char((v >> 8) & 0xFF);
  };
  u16(width);
  u16(height);
  out += char(0xF7);  // global colour table, 8 bits, 256 entries
  out += char(0);
  out += char(0);
  for (int i = 0; i < 256; ++i) {  // 3-3-2 bits
    out += char(((i >> 5) & 7) * 255 / 7);
    out += char(((i >> 2) & 7) * 255 / 7);
    out += char((i & 3) * 255 / 3);
  }
  out += "\x21\xFF\x0BNETSCAPE2.0\x03\x01";  // loop forever
  u16(0);
  out += char(0);
  for (const auto& rgb : frames) {
    out += "\x21\xF9\x04";
    out += char(0);
    u16(delay_cs);
    out += char(0);
    out += char(0);
    out += ',';
    u16(0);
    u16(0);
    u16(width);
    u16(height);
    out += char(0);
    out += char(8);  // LZW minimum code size
    std::string data;
    uint32_t bits = 0;
    int nbits = 0;
    auto emit = [&](int code) {
      bits |= uint32_t(code) << nbits;
      nbits += 9;
      while (nbits >= 8) {
        data += char(bits & 0xFF);
        bits >>= 8;
        nbits -= 8;
      }
    };
    emit(256);
    int run = 0;
    for (size_t p = 0; p + 2 < rgb.size() + 0 && p / 3 < size_t(width) * height; p += 3) {
      const int index = (rgb[p] >> 5) << 5 | (rgb[p + 1] >> 5) << 2 | (rgb[p + 2] >> 6);
      emit(index);
      if (++run == 254) {
        emit(256);
        run = 0;
      }
    }
    emit(257);
    if (nbits > 0) data += char(bits & 0xFF);
    for (size_t at = 0; at < data.size(); at += 255) {
      const size_t n = std::min<size_t>(255, data.size() - at);
      out += char(n);
      out.append(data, at, n);
    }
    out += char(0);
  }
  out += ';';
  return base::WriteFileAtomically(path, out);
}

// --- .npz: a zip (stored, no compression) of .npy files, one per tensor.
namespace {
uint32_t Crc32(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

std::string Npy(const std::string& descr, const std::vector<int64_t>& shape, const std::string& data) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(header.size() & 0xFF);
  out += char(header.size() >> 8);
  return out + header + data;
}

class Zip {
 public:
  void Add(const std::string& name, const std::string& data) {
    const uint32_t crc = Crc32(data), offset = uint32_t(out_.size());
    Local(name, data, crc);
    Central(name, data, crc, offset);
  }
  std::string Finish() {
    const uint32_t at = uint32_t(out_.size());
    out_ += central_;
    Put32(out_, 0x06054b50);
    Put16(out_, 0);
    Put16(out_, 0);
    Put16(out_, count_);
    Put16(out_, count_);
    Put32(out_, uint32_t(central_.size()));
    Put32(out_, at);
    Put16(out_, 0);
    return out_;
  }

 private:
  static void Put16(std::string& s, uint32_t v) {
    s += char(v & 0xFF);
    s += char((v >> 8) & 0xFF);
  }
  static void Put32(std::string& s, uint32_t v) {
    Put16(s, v & 0xFFFF);
    Put16(s, v >> 16);
  }
  void Local(const std::string& name, const std::string& data, uint32_t crc) {
    Put32(out_, 0x04034b50);
    Put16(out_, 20);
    Put16(out_, 0);
    Put16(out_, 0);  // stored
    Put16(out_, 0);
    Put16(out_, 0x21);
    Put32(out_, crc);
    Put32(out_, uint32_t(data.size()));
    Put32(out_, uint32_t(data.size()));
    Put16(out_, uint32_t(name.size()));
    Put16(out_, 0);
    out_ += name + data;
  }
  void Central(const std::string& name, const std::string& data, uint32_t crc, uint32_t offset) {
    Put32(central_, 0x02014b50);
    Put16(central_, 20);
    Put16(central_, 20);
    Put16(central_, 0);
    Put16(central_, 0);
    Put16(central_, 0);
    Put16(central_, 0x21);
    Put32(central_, crc);
    Put32(central_, uint32_t(data.size()));
    Put32(central_, uint32_t(data.size()));
    Put16(central_, uint32_t(name.size()));
    Put16(central_, 0);
    Put16(central_, 0);
    Put16(central_, 0);
    Put16(central_, 0);
    Put32(central_, 0);
    Put32(central_, offset);
    central_ += name;
    ++count_;
  }
  std::string out_, central_;
  uint32_t count_ = 0;
};
}  // namespace

int RunExportCommand(const std::string& checkpoint, const std::string& out_path, const std::string& config_path) {
  learner::CheckpointData d;
  if (const base::Status st = learner::LoadCheckpoint(checkpoint, &d); !st.ok()) {
    base::LogError("stampede export: %s\n", st.message().c_str());
    return 2;
  }
  // The layout comes from the run's config (checked against the checkpoint's fingerprint).
  config::Config cfg;
  auto made = [&]() -> base::StatusOr<std::unique_ptr<net::Model<float>>> {
    RETURN_IF_ERROR(LoadEvalConfig(checkpoint, config_path, coordinator::SelfExePath(), &cfg));
    wire::StepShape shape;
    RETURN_IF_ERROR(ResolvedStepShape(cfg, &shape));
    return net::MakeModelFromConfig(cfg, shape);
  }();
  if (!made.ok()) {
    base::LogError("stampede export: %s\n", made.status().message().c_str());
    return 2;
  }
  const std::unique_ptr<net::Model<float>> net = std::move(made).value();
  if (const base::Status st = LoadParams(checkpoint, net->layout(), &d); !st.ok()) {
    base::LogError("stampede export: %s\n", st.message().c_str());
    return 2;
  }
  auto ends_with = [&](const std::string& ext) {
    return out_path.size() >= ext.size() && out_path.compare(out_path.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (ends_with(".onnx")) {
    // The policy from the network's layer list (net/onnx_export.h).
    auto bytes = net::ExportOnnx(net->spec(), d.params);
    const base::Status st = bytes.ok() ? base::WriteFileAtomically(out_path, *bytes) : bytes.status();
    if (!st.ok()) {
      base::LogError("stampede export: %s\n", st.message().c_str());
      return 2;
    }
    std::printf("stampede export: the policy (%s%s, %lld parameters, version %lld) as ONNX to %s: inputs observation%s, "
                "outputs policy, value%s\n",
                net::TorsoName(net->spec()).c_str(), net->spec().lstm_size ? " + LSTM" : "",
                (long long)net->layout().total_size(), (long long)d.version, out_path.c_str(),
                net->spec().lstm_size ? ", state" : "", net->spec().lstm_size ? ", state_out" : "");
    return 0;
  }
  if (!ends_with(".npz")) {
    base::LogError("stampede export: %s: the format comes from the extension, .onnx (the policy) or .npz (the tensors)\n",
                 out_path.c_str());
    return 2;
  }
  Zip zip;
  for (const auto& t : net->layout().tensors()) {
    std::vector<int64_t> dims(t.shape.begin(), t.shape.end());
    zip.Add(t.name + ".npy", Npy("<f4", dims, std::string(reinterpret_cast<const char*>(d.params.data() + t.offset),
                                                           size_t(t.size) * sizeof(float))));
  }
  auto i64 = [](int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };
  zip.Add("__version__.npy", Npy("<i8", {}, i64(d.version)));
  zip.Add("__env_frames__.npy", Npy("<i8", {}, i64(d.env_frames)));
  zip.Add("__learner_steps__.npy", Npy("<i8", {}, i64(d.learner_steps)));
  // The layout and the network's config, as text (numpy reads them as 'S' byte strings).
  const std::string layout = learner::LayoutText(net->layout());
  zip.Add("__layout__.npy", Npy("|S" + std::to_string(std::max<size_t>(1, layout.size())), {}, layout));
  std::string net_text = ConfigToText(cfg);
  zip.Add("__config__.npy", Npy("|S" + std::to_string(std::max<size_t>(1, net_text.size())), {}, net_text));
  if (const base::Status st = base::WriteFileAtomically(out_path, zip.Finish()); !st.ok()) {
    base::LogError("stampede export: %s\n", st.message().c_str());
    return 2;
  }
  std::printf("stampede export: %zu tensors (%lld parameters, version %lld) to %s\n", net->layout().tensors().size(),
              (long long)net->layout().total_size(), (long long)d.version, out_path.c_str());
  return 0;
}

}  // namespace stampede::tools
