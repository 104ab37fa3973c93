#include "envs/plugin_env.h"

#include <dlfcn.h>

#include <cstring>
#include <map>
#include <stdexcept>

#include "base/mutex.h"
#include "envs/plugin_api.h"

namespace stampede::envs {

namespace {
constexpr int kErrorSize = 1024;

// Libraries stay loaded for the life of the process (their envs may outlive any owner).
base::StatusOr<const stampede_plugin*> LoadPlugin(const std::string& path) {
  struct Loaded {
    base::Mutex mu;
    std::map<std::string, const stampede_plugin*> by_path GUARDED_BY(mu);
  };
  static Loaded loaded_plugins;
  base::MutexLock lock(loaded_plugins.mu);
  auto& loaded = loaded_plugins.by_path;
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return base::InvalidArgument("plug-in " + path + ": cannot load: " + (why ? why : "unknown dlopen error"));
  }
  auto entry = reinterpret_cast<stampede_plugin_entry_fn>(::dlsym(handle, STAMPEDE_PLUGIN_ENTRY_NAME));
  if (entry == nullptr) {
    return base::InvalidArgument("plug-in " + path + ": no symbol " STAMPEDE_PLUGIN_ENTRY_NAME
                                 " (export one with STAMPEDE_PLUGIN(...) from envs/plugin_api.h)");
  }
  const stampede_plugin* plugin = entry();
  if (plugin == nullptr) {
    return base::InvalidArgument("plug-in " + path + ": " STAMPEDE_PLUGIN_ENTRY_NAME "() returned NULL");
  }
  if (plugin->abi_version != STAMPEDE_PLUGIN_ABI_VERSION) {
    return base::InvalidArgument("plug-in " + path + ": built against plug-in ABI version " +
                                 std::to_string(plugin->abi_version) + ", this Stampede loads version " +
                                 std::to_string(STAMPEDE_PLUGIN_ABI_VERSION) +
                                 ": rebuild it against this envs/plugin_api.h");
  }
  loaded.emplace(path, plugin);
  return plugin;
}

std::string ErrorText(const char* buffer) {
  std::string s(buffer, strnlen(buffer, kErrorSize));
  return s.empty() ? "(no message)" : s;
}

base::Status SpecFromC(const stampede_env_spec& c, const std::string& name, EnvSpec* spec) {
  spec->name = name;
  if (c.obs_rank < 1 || c.obs_rank > STAMPEDE_PLUGIN_MAX_RANK) {
    return base::InvalidArgument("observation rank " + std::to_string(c.obs_rank) + ", expected 1 to 3");
  }
  spec->obs_shape.assign(c.obs_shape, c.obs_shape + c.obs_rank);
  spec->obs_dtype = DType(c.obs_dtype);
  spec->action_kind = ActionKind(c.action_kind);
  spec->num_actions = c.num_actions;
  if (c.action_dims < 0 || c.action_dims > STAMPEDE_PLUGIN_MAX_ACTION_DIMS) {
    return base::InvalidArgument("action_dims " + std::to_string(c.action_dims) + ", expected 0 to 64");
  }
  if (spec->action_kind == ActionKind::kMultiDiscrete) {
    spec->action_nvec.assign(c.action_nvec, c.action_nvec + c.action_dims);
  } else if (spec->action_kind == ActionKind::kBox) {
    spec->action_low.assign(c.action_low, c.action_low + c.action_dims);
    spec->action_high.assign(c.action_high, c.action_high + c.action_dims);
  }
  spec->max_episode_steps = c.max_episode_steps;
  spec->frames_per_step = c.frames_per_step > 0 ? c.frames_per_step : 1;
  if (std::string bad = spec->Check(); !bad.empty()) return base::InvalidArgument(bad);
  return base::OkStatus();
}

class PluginEnv : public Env {
 public:
  PluginEnv(std::shared_ptr<const EnvSpec> spec, const stampede_env_vtable* vt, void* env,
            std::string library)
      : Env(std::move(spec)), vt_(vt), env_(env), library_(std::move(library)) {}
  ~PluginEnv() override { vt_->destroy(env_); }

 protected:
  void DoReset(uint64_t seed, void* obs) override {
    char error[kErrorSize] = {0};
    if (vt_->reset(env_, seed, obs, error, kErrorSize) != 0) Fail("reset", error);
  }
  StepResult DoStep(int action, void* obs) override {
    char error[kErrorSize] = {0};
    const int32_t a = action;
    float reward = 0;
    int32_t terminated = 0, truncated = 0;
    if (vt_->step(env_, &a, obs, &reward, &terminated, &truncated, error, kErrorSize) != 0) {
      Fail("step", error);
    }
    StepResult r;
    r.reward = reward;
    r.terminated = terminated != 0;
    r.truncated = truncated != 0 && !r.terminated;
    return r;
  }

 private:
  [[noreturn]] void Fail(const char* call, const char* error) {
    throw std::runtime_error("plug-in " + library_ + " (env " + spec().name + "): " + call +
                             " failed: " + ErrorText(error));
  }
  const stampede_env_vtable* vt_;
  void* env_;
  std::string library_;
};
}  // namespace

base::StatusOr<std::unique_ptr<Env>> MakePluginEnv(const std::string& path, const std::string& name,
                                                   const EnvOptions& options) {
  ASSIGN_OR_RETURN(const stampede_plugin* plugin, LoadPlugin(path));
  const stampede_env_vtable* vt = nullptr;
  std::string names;
  for (int i = 0; i < plugin->num_envs; ++i) {
    const char* n = plugin->envs[i].name ? plugin->envs[i].name : "";
    names += (names.empty() ? "" : ", ") + std::string(n);
    if (name == n) vt = &plugin->envs[i];
  }
  if (vt == nullptr) {
    return base::InvalidArgument("plug-in " + path + ": no env named \"" + name + "\" (it has: " + names + ")");
  }
  if (!vt->create || !vt->destroy || !vt->reset || !vt->step) {
    return base::InvalidArgument("plug-in " + path + " (env " + name + "): a NULL function in its vtable");
  }
  std::vector<stampede_kwarg> kwargs;
  for (const auto& [k, v] : options.kwargs) kwargs.push_back({k.c_str(), v.c_str()});
  stampede_env_spec cspec{};
  char cerror[kErrorSize] = {0};
  void* env = vt->create(kwargs.data(), int32_t(kwargs.size()), &cspec, cerror, kErrorSize);
  if (env == nullptr) {
    return base::InvalidArgument("plug-in " + path + " (env " + name + "): create failed: " + ErrorText(cerror));
  }
  auto spec = std::make_shared<EnvSpec>();
  if (const base::Status st = SpecFromC(cspec, name, spec.get()); !st.ok()) {
    vt->destroy(env);
    return base::InvalidArgument("plug-in " + path + " (env " + name + "): bad spec: " + st.message());
  }
  if (options.max_episode_steps > 0) spec->max_episode_steps = options.max_episode_steps;
  return std::make_unique<PluginEnv>(std::move(spec), vt, env, path);
}

}  // namespace stampede::envs
