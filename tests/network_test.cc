// Networks as data (net/network.h): the registry's presets build exactly the networks
// they always built (layout fingerprints, sizes, initial parameters and outputs recorded
// from the code before the layer lists, so their checkpoints load bit for bit); a list of
// the user's own builds the computation it describes (a list that mirrors a preset gives
// the preset's outputs on the same flat parameters) and trains with the right gradient;
// bad lists and configs are clear, located errors.
#include <catch2/catch.hpp>

#include <iomanip>

#include <filesystem>
#include <fstream>
#include <random>

#include "net/from_config.h"
#include "net/model.h"
#include "net/network.h"
#include "config/config.h"

using namespace stampede;
using stampede::LoadedConfig;

namespace {

net::ModelSpec Preset(const std::string& torso, std::vector<int> obs, bool u8, std::vector<int> hidden, bool tanh,
                      int fc, int lstm, int actions) {
  net::ModelSpec s;
  s.obs_shape = std::move(obs);
  s.uint8_obs = u8;
  s.torso = torso;
  s.hidden_sizes = std::move(hidden);
  s.activation = tanh ? net::Activation::kTanh : net::Activation::kRelu;
  s.fc_size = fc;
  s.lstm_size = lstm;
  s.policy = net::CategoricalPolicy(actions);
  return s;
}

// Two rows of a fixed observation through the model at seeded parameters (the init plus
// noise, so the outputs differ per row): policy outputs [2, A], values [2].
void Outputs(const net::ModelSpec& s, const std::vector<float>& params, std::vector<float>* pol, std::vector<float>* val) {
  auto m = net::MakeCpuModel<float>(s);
  const int n = 2, D = s.obs_size(), A = s.policy.output_size();
  std::vector<uint8_t> u(size_t(n) * D);
  std::vector<float> f(size_t(n) * D);
  for (int i = 0; i < n * D; ++i) {
    u[size_t(i)] = uint8_t((i * 37 + 11) % 256);
    f[size_t(i)] = float((i * 37 + 11) % 256) / 255.f - 0.5f;
  }
  pol->assign(size_t(n) * A, 0.f);
  val->assign(size_t(n), 0.f);
  std::vector<float> st(size_t(n) * 2 * s.lstm_size, 0.f);
  m->Step(params.data(), s.uint8_obs ? (const void*)u.data() : (const void*)f.data(), n, nullptr,
          s.lstm_size ? st.data() : nullptr, s.lstm_size ? st.data() : nullptr, pol->data(), val->data());
}

std::vector<float> Params(const net::ModelSpec& s) {
  std::vector<float> p(net::ModelLayout(s).total_size());
  net::InitParams(s, 3, p);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> noise(0, 0.05f);
  for (auto& x : p) x += noise(rng);
  return p;
}

net::LayerSpec L(net::LayerSpec::Kind kind, int n = 0, int k = 0, int stride = 1, int pad = 0) {
  net::LayerSpec l;
  l.kind = kind;
  if (kind == net::LayerSpec::Kind::kDense) l.units = n;
  if (kind == net::LayerSpec::Kind::kConv) l.channels = n;
  l.kernel = k, l.stride = stride, l.pad = pad;
  return l;
}
using K = net::LayerSpec::Kind;

}  // namespace

TEST_CASE("networks: the presets build the networks they built before the layer lists, bit for bit", "[net]") {
  struct Golden {
    net::ModelSpec spec;
    uint64_t fingerprint;
    int64_t size;
    double param_sum;
    float out[4];  // policy[0], policy[1], row 1's policy[1], row 1's value
  };
  // Recorded from the torsos built by name (the code before net/network.h).
  const Golden goldens[] = {
      {Preset("mlp", {4}, false, {64, 64}, false, 256, 0, 2), 0x615b2db95a91028full, 4675, -4.64241495,
       {-0.089812465f, 0.00433198176f, -0.0133536924f, -0.00327677652f}},
      {Preset("mlp", {6}, false, {16, 8}, true, 256, 8, 3), 0x85093c3be37c49e1ull, 828, 7.75317175,
       {0.0136982752f, 0.00602954021f, 0.00067351386f, 0.0334887803f}},
      {Preset("shallow_cnn", {4, 84, 84}, true, {}, false, 64, 0, 6), 0x1362e9834d06341bull, 178743, -11.806605,
       {-0.0227674581f, 0.0557408854f, 0.12445832f, -0.080992423f}},
      {Preset("deep_resnet", {3, 20, 20}, true, {}, false, 32, 16, 4), 0xaa26c191a070656cull, 110069, -13.9459941,
       {0.0298793353f, 0.0356589556f, 0.028095508f, 0.0260985605f}},
      {Preset("small_cnn", {4, 10, 10}, false, {}, false, 128, 0, 5), 0xdb42b71686003221ull, 132566, -14.9171643,
       {0.00678047165f, 0.208048761f, 0.130121171f, 0.612437308f}},
      {Preset("deep_resnet", {4, 84, 84}, true, {}, false, 256, 0, 6), 0x5a509adaab4bbe4bull, 1091031, 18.1849269,
       {1.45045209f, -2.18271089f, -1.68374825f, 1.1093117f}},
  };
  for (const Golden& g : goldens) {
    INFO(g.spec.torso << " " << g.spec.obs_shape.size() << "-d observation, lstm " << g.spec.lstm_size);
    const net::ParamLayout layout = net::ModelLayout(g.spec);
    CHECK(layout.Fingerprint() == g.fingerprint);
    CHECK(layout.total_size() == g.size);
    const std::vector<float> p = Params(g.spec);
    double sum = 0;
    for (float x : p) sum += x;
    CHECK(sum == Approx(g.param_sum).epsilon(1e-6));
    std::vector<float> pol, val;
    Outputs(g.spec, p, &pol, &val);
    const int A = g.spec.policy.output_size();
    // Float rounding: the deep ResNet at 84x84 (15 convolutions over large images, then a
    // 3872-wide product) reads 1.5e-5 apart where its image layers run as one oneDNN run
    // (net/onednn_stack.h) rather than one by one, which sum in other orders.
    const double eps = g.spec.torso == "deep_resnet" && g.spec.obs_shape.back() == 84 ? 5e-5 : 1e-5;
    INFO("value " << std::setprecision(9) << val[1] << ", policy " << pol[0] << " " << pol[1] << " "
                  << pol[size_t(A) + 1]);
    CHECK(pol[0] == Approx(g.out[0]).epsilon(eps).margin(1e-6));
    CHECK(pol[1] == Approx(g.out[1]).epsilon(eps).margin(1e-6));
    CHECK(pol[size_t(A) + 1] == Approx(g.out[2]).epsilon(eps).margin(1e-6));
    CHECK(val[1] == Approx(g.out[3]).epsilon(eps).margin(1e-6));
  }
  // An unset torso is the registry's first preset.
  CHECK(net::ModelLayout(Preset("", {4}, false, {64, 64}, false, 256, 0, 2)).Fingerprint() == 0x615b2db95a91028full);
}

TEST_CASE("networks: a list of the user's own computes what it describes", "[net]") {
  // small_cnn written out as a list: other parameter names, the same flat layout, so the
  // same parameters give the preset's outputs exactly.
  net::ModelSpec preset = Preset("small_cnn", {4, 10, 10}, false, {}, false, 32, 0, 5);
  net::ModelSpec custom = preset;
  custom.torso.clear();
  custom.layers = {L(K::kConv, 16, 3), L(K::kRelu), L(K::kDense, 32), L(K::kRelu)};
  const net::ParamLayout a = net::ModelLayout(preset), b = net::ModelLayout(custom);
  REQUIRE(a.total_size() == b.total_size());
  CHECK(a.Fingerprint() != b.Fingerprint());  // not each other's checkpoints
  CHECK(b.Find("torso/layer0/w").shape == std::vector<int>{16, 4, 3, 3});
  CHECK(b.Find("torso/layer2/w").shape == std::vector<int>{16 * 8 * 8, 32});
  const std::vector<float> p = Params(preset);
  std::vector<float> pa, va, pb, vb;
  Outputs(preset, p, &pa, &va);
  Outputs(custom, p, &pb, &vb);
  CHECK(pa == pb);
  CHECK(va == vb);
  // A different activation is a different network with the same tensors.
  net::ModelSpec other = custom;
  other.layers[1] = L(K::kTanh);
  CHECK(net::ModelLayout(other).Fingerprint() != b.Fingerprint());
}

TEST_CASE("networks: a list that does not fit its input names the layer", "[net]") {
  auto error_of = [](std::vector<net::LayerSpec> layers, std::vector<int> obs) {
    net::ModelSpec s = Preset("", std::move(obs), false, {}, false, 8, 0, 2);
    s.layers = std::move(layers);
    return s.Check();
  };
  CHECK_THAT(error_of({L(K::kDense, 8), L(K::kConv, 4, 3)}, {1, 6, 6}),
             Catch::Contains("net.layers[1] (conv): a conv layer needs an image, but its input is a flat vector of 8"));
  CHECK_THAT(error_of({L(K::kConv, 4, 3), L(K::kMaxPool, 0, 5, 2)}, {1, 6, 6}),
             Catch::Contains("net.layers[1] (max_pool): a 5x5 window with stride 2 does not fit the image [4, 4, 4]"));
  CHECK_THAT(error_of({L(K::kConv, 4, 3)}, {7}),
             Catch::Contains("net.layers takes image observations ([H, W] or [C, H, W]), but the env's observation has rank 1"));
  CHECK_THAT(error_of({L(K::kDense, 0)}, {7}), Catch::Contains("net.layers[0] (dense): 0 is not a positive width"));
  CHECK(error_of({L(K::kConv, 4, 3, 1, 1), L(K::kResidual), L(K::kDense, 3), L(K::kTanh)}, {2, 5, 5}).empty());
  net::ModelSpec unknown = Preset("resnet50", {4}, false, {}, false, 8, 0, 2);
  CHECK_THAT(unknown.Check(), Catch::Contains("net.torso: \"resnet50\" is not known, expected \"mlp\", \"shallow_cnn\", "
                                              "\"deep_resnet\" or \"small_cnn\""));
}

TEST_CASE("networks: net.layers in a config becomes the model's list, and bad lists are located errors", "[net][config]") {
  auto write = [](const std::string& name, const std::string& text) {
    const auto path = std::filesystem::temp_directory_path() / ("stampede_layers_" + name + ".textproto");
    std::ofstream(path) << text;
    return path.string();
  };
  auto load = [](const std::string& path, LoadedConfig* cfg) {
    const base::Status st = LoadConfig(path, {}, cfg);
    return st.ok() ? std::string() : st.message();
  };
  LoadedConfig cfg;
  const std::string ok = write("ok", "env { name: \"Catch\" }\nnet {\n  layers { conv { channels: 8 kernel: 3 padding: 1 } }\n"
                                     "  layers { relu {} }\n  layers { max_pool { kernel: 2 stride: 2 } }\n"
                                     "  layers { residual {} }\n  layers { dense { units: 32 } }\n  layers { tanh {} }\n}\n");
  REQUIRE(load(ok, &cfg).empty());
  const net::ModelSpec spec = net::ModelSpecFromConfig(cfg.config, wire::StepShape{{1, 10, 5}, wire::DType::kFloat32, 3});
  REQUIRE(spec.layers.size() == 6);
  CHECK(spec.layers[0].kind == K::kConv);
  CHECK(spec.layers[0].channels == 8);
  CHECK(spec.layers[0].pad == 1);
  CHECK(spec.layers[2].kind == K::kMaxPool);
  CHECK(spec.layers[2].stride == 2);
  CHECK(spec.layers[3].kind == K::kResidual);
  CHECK(spec.layers[4].units == 32);
  CHECK(spec.layers[5].kind == K::kTanh);
  CHECK(spec.Check().empty());
  CHECK(net::TorsoName(spec) == "net.layers");

  const std::string both = write("both", "net {\n  torso: \"small_cnn\"\n  layers { relu {} }\n}\n");
  CHECK_THAT(load(both, &cfg), Catch::Contains(both + ":2") && Catch::Contains("net.torso \"small_cnn\" and net.layers both describe the torso"));
  const std::string empty_kind = write("nokind", "net {\n  layers { }\n}\n");
  CHECK_THAT(load(empty_kind, &cfg), Catch::Contains("net.layers[0]: no layer kind"));
  const std::string wide = write("wide", "net {\n  layers { dense { units: 0 } }\n}\n");
  CHECK_THAT(load(wide, &cfg), Catch::Contains(wide + ":2") && Catch::Contains("net.layers[0].dense.units: 0 is out of range, "
                                                                               "expected an integer in [1, 65536]"));
  const std::string centred = write("centred", "net {\n  center_frames: true\n  layers { dense { units: 4 } }\n}\n");
  CHECK_THAT(load(centred, &cfg), Catch::Contains("net.center_frames centres image channels, but the torso (net.layers)"));
}

TEST_CASE("networks: the schema's torso presets are net's registry, in order, with the same image flag", "[net][config]") {
  // The config check reads net.torso's names and which take images from config.proto
  // (TorsoPreset); net/network.cc builds them. The two lists must be one list.
  const auto* names = config::TorsoPreset::Name_descriptor();
  const auto presets = net::TorsoPresets();
  REQUIRE(size_t(names->value_count()) == presets.size());
  for (int i = 0; i < names->value_count(); ++i) {
    INFO("preset " << i << ": " << names->value(i)->name());
    CHECK(names->value(i)->name() == std::string(presets[size_t(i)].name));
    CHECK(names->value(i)->options().GetExtension(config::images) ==
          presets[size_t(i)].build(net::PresetArgs{}).images());
  }
  // The default (an unset torso) is the first in both.
  CHECK(ChoiceOf<config::TorsoPreset>("") == config::TorsoPreset::mlp);
  CHECK(net::FindTorsoPreset("") == &presets.front());
}
