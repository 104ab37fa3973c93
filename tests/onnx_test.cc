// `stampede export ... .onnx`: the exported policy, run in onnxruntime (the project venv's),
// gives the project's own forward (net::Model::Step) on the same observations and state:
// every layer kind, uint8 and float observations, centred frames, the LSTM core's state in
// and out, categorical, multi-discrete and Gaussian heads. Skips where the venv lacks
// onnxruntime (tools/setup.sh installs it).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "envs/python_env.h"
#include "net/model.h"
#include "net/onnx_export.h"
#include "tests/skip_only.h"

using namespace stampede;
namespace fs = std::filesystem;

namespace {

std::string VenvPython() {
  const std::string venv = envs::PythonVenvPath("");
  const std::string python = venv + "/bin/python";
  if (!fs::exists(python)) testing::Skip("needs the project venv (tools/setup.sh): no " + python);
  if (std::system((python + " -c 'import onnxruntime' > /dev/null 2>&1").c_str()) != 0) {
    testing::Skip("needs onnxruntime in the project venv (tools/setup.sh installs it)");
  }
  return python;
}

template <class T>
void WriteBin(const fs::path& p, const std::vector<T>& v) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
}

// Exports `spec` at seeded parameters, runs it in onnxruntime on n random rows and
// returns the checker's exit status (its report goes to the test's log).
int ExportAndCompare(const std::string& python, const std::string& name, const net::ModelSpec& spec, int n) {
  auto model = net::MakeCpuModel<float>(spec);
  std::vector<float> params(model->layout().total_size());
  net::InitParams(spec, 4, params);
  std::mt19937_64 rng(6);
  std::normal_distribution<float> noise(0, 0.1f);
  for (auto& p : params) p += noise(rng);
  auto bytes = net::ExportOnnx(spec, params);
  INFO(bytes.status().message());
  REQUIRE(bytes.ok());
  const fs::path dir = fs::temp_directory_path() / ("stampede_onnx_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "model.onnx", std::ios::binary) << *bytes;
  const int D = spec.obs_size(), P = spec.policy.output_size(), S = 2 * spec.lstm_size;
  std::vector<uint8_t> u8(size_t(n) * D);
  std::vector<float> f32(size_t(n) * D), state(size_t(n) * S);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& x : u8) x = uint8_t(byte(rng));
  for (auto& x : f32) x = noise(rng) * 10;
  for (auto& x : state) x = noise(rng) * 5;
  std::vector<float> policy(size_t(n) * P), value(size_t(n) * spec.num_values), state_out(state.size());
  model->Step(params.data(), spec.uint8_obs ? (const void*)u8.data() : (const void*)f32.data(), n, nullptr,
              S ? state.data() : nullptr, S ? state_out.data() : nullptr, policy.data(), value.data());
  nlohmann::json meta;
  std::vector<int> obs_shape = {n};
  obs_shape.insert(obs_shape.end(), spec.obs_shape.begin(), spec.obs_shape.end());
  meta["inputs"]["observation"] = {{"dtype", spec.uint8_obs ? "uint8" : "float32"}, {"shape", obs_shape}};
  if (spec.uint8_obs) {
    WriteBin(dir / "observation.bin", u8);
  } else {
    WriteBin(dir / "observation.bin", f32);
  }
  meta["outputs"]["policy"] = {{"shape", {n, P}}};
  meta["outputs"]["value"] = {{"shape", {n, spec.num_values}}};
  WriteBin(dir / "policy.bin", policy);
  WriteBin(dir / "value.bin", value);
  if (S) {
    meta["inputs"]["state"] = {{"dtype", "float32"}, {"shape", {n, S}}};
    meta["outputs"]["state_out"] = {{"shape", {n, S}}};
    WriteBin(dir / "state.bin", state);
    WriteBin(dir / "state_out.bin", state_out);
  }
  meta["tolerance"] = 1e-4;  // relative to each output's largest value (float sums in another order)
  std::ofstream(dir / "meta.json") << meta.dump(1);
  const std::string cmd = python + " " + std::string(STAMPEDE_SOURCE_DIR) + "/tests/onnx_check.py " + dir.string() +
                          " > " + (dir / "report.txt").string() + " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream report(dir / "report.txt");
  const std::string text((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  UNSCOPED_INFO(name << ":\n" << text);
  return status;
}

net::ModelSpec Spec(const std::string& torso, std::vector<int> obs, bool u8, int lstm, net::PolicyShape pol) {
  net::ModelSpec s;
  s.obs_shape = std::move(obs);
  s.uint8_obs = u8;
  s.torso = torso;
  s.hidden_sizes = {16, 8};
  s.fc_size = 12;
  s.lstm_size = lstm;
  s.policy = pol;
  return s;
}

}  // namespace

TEST_CASE("export: the ONNX policy in onnxruntime gives the project's forward", "[net][onnx]") {
  const std::string python = VenvPython();
  net::PolicyShape md;
  md.kind = net::PolicyKind::kMultiDiscrete;
  md.num_components = 2;
  md.nvec[0] = 3, md.nvec[1] = 4;
  net::PolicyShape gauss;
  gauss.kind = net::PolicyKind::kGaussian;
  gauss.num_components = 2;
  net::ModelSpec mlp_tanh = Spec("mlp", {4}, false, 0, net::CategoricalPolicy(2));
  mlp_tanh.activation = net::Activation::kTanh;
  net::ModelSpec shallow = Spec("shallow_cnn", {4, 36, 36}, true, 0, net::CategoricalPolicy(6));
  shallow.center_frames = true;
  net::ModelSpec custom = Spec("", {9, 9}, false, 5, md);  // [H, W] frames, a list of the user's own
  using K = net::LayerSpec::Kind;
  auto layer = [](K kind, int n, int k, int st, int p) {
    net::LayerSpec l;
    l.kind = kind, l.units = n, l.channels = n, l.kernel = k, l.stride = st, l.pad = p;
    return l;
  };
  custom.layers = {layer(K::kConv, 4, 3, 1, 1), layer(K::kTanh, 0, 0, 1, 0), layer(K::kMaxPool, 0, 3, 2, 1),
                   layer(K::kResidual, 0, 0, 1, 0), layer(K::kDense, 7, 0, 1, 0), layer(K::kRelu, 0, 0, 1, 0)};
  const std::pair<const char*, net::ModelSpec> cases[] = {
      {"mlp_tanh", mlp_tanh},
      {"mlp_lstm_gaussian", Spec("mlp", {3}, false, 6, gauss)},
      {"shallow_cnn_u8_centred", shallow},
      {"deep_resnet_lstm", Spec("deep_resnet", {2, 12, 10}, true, 8, net::CategoricalPolicy(4))},
      {"small_cnn", Spec("small_cnn", {3, 7, 7}, false, 0, net::CategoricalPolicy(5))},
      {"custom_lstm_multidiscrete", custom},
  };
  for (const auto& [name, spec] : cases) {
    INFO(name);
    CHECK(ExportAndCompare(python, name, spec, 3) == 0);
  }
}

TEST_CASE("export: parameters of another network are a clear error", "[net][onnx]") {
  const net::ModelSpec spec = Spec("mlp", {4}, false, 0, net::CategoricalPolicy(2));
  std::vector<float> params(10, 0.f);
  auto bytes = net::ExportOnnx(spec, params);
  REQUIRE_FALSE(bytes.ok());
  CHECK_THAT(bytes.status().message(), Catch::Contains("10 parameters for a network of"));
}
