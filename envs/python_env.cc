#include "envs/python_env.h"

#include <pybind11/embed.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "base/mutex.h"
#include "envs/vector_env.h"

namespace py = pybind11;

namespace stampede::envs {

namespace {

// The Python half of the bridge: builds the vector env, maps its spaces to a spec and
// copies each step's arrays straight into the caller's buffers (numpy views of them).
constexpr const char* kBridgeSource = R"PY(
import importlib
import numpy as np
import gymnasium as gym
from gymnasium import spaces
from gymnasium.vector import AutoresetMode


def _value(text):
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


class Bridge:
    def __init__(self, gym_id, num_envs, modules, kwargs, max_episode_steps, vectorization, channels_first):
        for module in modules:
            # "pkg.mod" is imported; "pkg.mod:fn" is imported and fn() called (registrations).
            name, _, function = module.partition(":")
            imported = importlib.import_module(name)
            if function:
                getattr(imported, function)()
        kw = {k: _value(v) for k, v in kwargs.items()}
        if max_episode_steps > 0:
            kw["max_episode_steps"] = max_episode_steps
        spec = gym.spec(gym_id)
        mode = vectorization or ("vector_entry_point" if spec.vector_entry_point else "sync")
        vector_kwargs = {}
        if mode in ("sync", "async"):
            vector_kwargs["autoreset_mode"] = AutoresetMode.SAME_STEP
        self.env = gym.make_vec(gym_id, num_envs=num_envs, vectorization_mode=mode,
                                vector_kwargs=vector_kwargs, **kw)
        self.mode = mode
        autoreset = self.env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        autoreset = AutoresetMode(autoreset) if isinstance(autoreset, str) else autoreset
        if autoreset == AutoresetMode.DISABLED:
            raise ValueError(f"{gym_id}: vector env without autoreset is not supported")
        self.same_step = autoreset == AutoresetMode.SAME_STEP
        self.prev_done = np.zeros(num_envs, dtype=bool)
        obs_space = self.env.single_observation_space
        if not isinstance(obs_space, spaces.Box):
            raise TypeError(f"{gym_id}: observation space {obs_space} is not supported "
                            "(Box observations only)")
        if not 1 <= len(obs_space.shape) <= 3:
            raise TypeError(f"{gym_id}: observation shape {obs_space.shape}: rank 1 to 3 only")
        self.obs_dtype = "uint8" if obs_space.dtype == np.uint8 else "float32"
        act = self.env.single_action_space
        self.action_start = 0
        self.action_shape = None
        if isinstance(act, spaces.Discrete):
            self.action = ("discrete", int(act.n), [], [], [])
            self.action_start = int(act.start)
        elif isinstance(act, spaces.MultiDiscrete):
            self.action = ("multi_discrete", 0, [int(n) for n in act.nvec.ravel()], [], [])
            self.action_shape = (tuple(act.nvec.shape), act.dtype)
        elif isinstance(act, spaces.Box):
            self.action = ("box", 0, [], [float(x) for x in act.low.ravel()],
                           [float(x) for x in act.high.ravel()])
            self.action_shape = (tuple(act.shape), act.dtype)
        else:
            raise TypeError(f"{gym_id}: action space {act} is not supported "
                            "(Discrete, MultiDiscrete or Box)")
        frameskip = kw.get("frameskip", spec.kwargs.get("frameskip", 1))
        self.frames_per_step = frameskip if isinstance(frameskip, int) and frameskip > 0 else 1
        self.max_episode_steps = int(kw.get("max_episode_steps", spec.max_episode_steps or 0))
        self.obs_shape = [int(d) for d in obs_space.shape]
        # [H, W, C] observations (MinAtar) given to the network as [C, H, W].
        self.channels_first = bool(channels_first) and len(self.obs_shape) == 3
        if self.channels_first:
            self.obs_shape = [self.obs_shape[2], self.obs_shape[0], self.obs_shape[1]]

    def _obs(self, o):
        return np.moveaxis(np.asarray(o), -1, -3) if self.channels_first else o

    def reset(self, seed, obs):
        o, _ = self.env.reset(seed=seed)
        np.copyto(obs, self._obs(o), casting="unsafe")
        self.prev_done[:] = False

    def step(self, actions, obs, rewards, terminated, truncated, valid, final_obs):
        if self.action_start:
            actions = actions + self.action_start
        if self.action_shape is not None:
            shape, dtype = self.action_shape
            actions = actions.reshape((-1,) + shape).astype(dtype)
        o, r, te, tr, info = self.env.step(actions)
        o = self._obs(o)
        np.copyto(obs, o, casting="unsafe")
        np.copyto(rewards, r, casting="unsafe")
        np.copyto(terminated, te, casting="unsafe")
        np.copyto(truncated, tr, casting="unsafe")
        done = np.logical_or(te, tr)
        if self.same_step:
            valid[:] = 1
            if done.any():
                final = info.get("final_obs")
                for i in np.flatnonzero(done):
                    final_obs[i] = o[i] if final is None or final[i] is None else self._obs(final[i])
        else:
            # NEXT_STEP: an env that ended last step was only reset by this one.
            np.copyto(valid, ~self.prev_done, casting="unsafe")
            if done.any():
                final_obs[done] = o[done]
            self.prev_done = done

    def close(self):
        self.env.close()
)PY";

base::Mutex g_init_mu;
bool g_initialised GUARDED_BY(g_init_mu) = false;

std::string PythonError(const py::error_already_set& e) { return e.what(); }

// Starts the interpreter once per process (never in the coordinator: it resolves specs
// in a child), adds the venv's site-packages and releases the GIL; every call below
// takes it again, so any one thread at a time may use the bridge.
base::Status EnsurePython(const std::string& venv) {
  base::MutexLock lock(g_init_mu);
  if (g_initialised) return base::OkStatus();
  if (!std::filesystem::is_directory(venv)) {
    return base::InvalidArgument("no Python venv at " + venv +
                                 " (run tools/setup.sh to make it, or set env.python_venv or STAMPEDE_VENV)");
  }
  py::initialize_interpreter(false);  // no Python signal handlers: Stampede owns SIGINT
  base::Status status;
  try {
    py::module_ sys = py::module_::import("sys");
    const std::string version = std::to_string(sys.attr("version_info").attr("major").cast<int>()) +
                                "." + std::to_string(sys.attr("version_info").attr("minor").cast<int>());
    const std::string site = venv + "/lib/python" + version + "/site-packages";
    if (!std::filesystem::is_directory(site)) {
      status = base::InvalidArgument("the venv at " + venv + " has no " + site + " (it must be made by python" +
                                     version + ", the Python Stampede embeds: run tools/setup.sh)");
    } else {
      py::module_::import("site").attr("addsitedir")(site);
      // The project's own Python envs (envs/python: the learnability probes), importable
      // by name from env.gym_module.
      sys.attr("path").attr("append")(std::string(STAMPEDE_SOURCE_DIR) + "/envs/python");
    }
  } catch (const py::error_already_set& e) {
    status = base::Internal("Python start-up failed: " + PythonError(e));
  }
  PyEval_SaveThread();
  g_initialised = true;
  return status;
}

template <class T>
py::array View(T* data, std::vector<py::ssize_t> shape) {
  // A numpy array over the caller's buffer (no copy); the capsule only marks it borrowed.
  return py::array_t<T>(shape, data, py::capsule(data, [](void*) {}));
}

py::array ObsView(const EnvSpec& spec, std::byte* data, int rows) {
  std::vector<py::ssize_t> shape{rows};
  for (int d : spec.obs_shape) shape.push_back(d);
  if (spec.obs_dtype == DType::kUint8) return View(reinterpret_cast<uint8_t*>(data), shape);
  return View(reinterpret_cast<float*>(data), shape);
}

class PythonVectorEnv : public VectorEnv {
 public:
  PythonVectorEnv(EnvSpec spec, int num_envs, py::object bridge, std::string what)
      : VectorEnv(std::move(spec), num_envs), bridge_(std::move(bridge)), what_(std::move(what)) {}
  ~PythonVectorEnv() override {
    py::gil_scoped_acquire gil;
    try {
      bridge_.attr("close")();
    } catch (const py::error_already_set&) {
    }
    bridge_ = py::object();
  }

  void Reset(uint64_t seed, std::byte* obs) override {
    py::gil_scoped_acquire gil;
    try {
      // Envs take seed + i for env i; ALE wants them in int32, so keep 30 bits.
      bridge_.attr("reset")(py::int_(seed & 0x3fffffff), ObsView(spec(), obs, num_envs()));
    } catch (const py::error_already_set& e) {
      throw std::runtime_error(what_ + ": reset raised " + PythonError(e));
    }
  }

  void Step(const int32_t* actions, const VectorStep& out) override {
    if (spec().action_kind == ActionKind::kBox) {
      throw std::logic_error(what_ + ": integer actions for a box action space");
    }
    const py::ssize_t K = spec().action_kind == ActionKind::kMultiDiscrete
                              ? py::ssize_t(spec().action_nvec.size()) : 1;
    py::gil_scoped_acquire gil;
    Call(View(const_cast<int32_t*>(actions), {num_envs(), K}), out);
  }

  void StepBox(const float* actions, const VectorStep& out) override {
    if (spec().action_kind != ActionKind::kBox) {
      throw std::logic_error(what_ + ": box actions for a discrete action space");
    }
    py::gil_scoped_acquire gil;
    Call(View(const_cast<float*>(actions), {num_envs(), py::ssize_t(spec().action_low.size())}), out);
  }

 private:
  // Holds the GIL (the caller took it to build the views).
  void Call(py::object actions, const VectorStep& out) {
    const int E = num_envs();
    if (spec().action_kind == ActionKind::kDiscrete) actions = actions.attr("reshape")(E);
    try {
      bridge_.attr("step")(actions, ObsView(spec(), out.obs, E),
                           View(out.rewards, {E}), View(out.terminated, {E}),
                           View(out.truncated, {E}), View(out.valid, {E}),
                           ObsView(spec(), out.final_obs, E));
    } catch (const py::error_already_set& e) {
      throw std::runtime_error(what_ + ": step raised " + PythonError(e));
    }
  }

  py::object bridge_;
  std::string what_;
};

}  // namespace

std::string PythonVenvPath(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* v = std::getenv("STAMPEDE_VENV"); v != nullptr && *v != '\0') return v;
  return std::string(STAMPEDE_SOURCE_DIR) + "/.venv";
}

std::string PythonUnavailableReason(const std::string& venv) {
  if (const base::Status st = EnsurePython(venv); !st.ok()) return st.message();
  py::gil_scoped_acquire gil;
  try {
    py::module_::import("gymnasium");
  } catch (const py::error_already_set& e) {
    return "gymnasium is not importable from the venv at " + venv + ": " + PythonError(e);
  }
  return "";
}

base::StatusOr<std::unique_ptr<VectorEnv>> MakePythonVectorEnv(const EnvSource& source, int num_envs) {
  const std::string what = source.Describe();
  const std::string venv = PythonVenvPath(source.python_venv);
  if (const base::Status st = EnsurePython(venv); !st.ok()) return base::InvalidArgument(what + ": " + st.message());
  py::gil_scoped_acquire gil;
  try {
    py::dict scope;
    scope["__builtins__"] = py::module_::import("builtins");
    py::exec(kBridgeSource, scope);
    std::map<std::string, std::string> kwargs = source.options.kwargs;
    py::object bridge = scope["Bridge"](source.gym_id, num_envs, source.gym_modules, kwargs,
                                        source.options.max_episode_steps, source.gym_vectorization,
                                        source.gym_channels_first);
    EnvSpec spec;
    spec.name = source.gym_id;
    spec.obs_shape = bridge.attr("obs_shape").cast<std::vector<int>>();
    spec.obs_dtype = bridge.attr("obs_dtype").cast<std::string>() == "uint8" ? DType::kUint8 : DType::kFloat32;
    auto action = bridge.attr("action").cast<py::tuple>();
    const std::string kind = action[0].cast<std::string>();
    spec.action_kind = kind == "discrete"         ? ActionKind::kDiscrete
                       : kind == "multi_discrete" ? ActionKind::kMultiDiscrete
                                                  : ActionKind::kBox;
    spec.num_actions = action[1].cast<int>();
    spec.action_nvec = action[2].cast<std::vector<int>>();
    spec.action_low = action[3].cast<std::vector<float>>();
    spec.action_high = action[4].cast<std::vector<float>>();
    spec.frames_per_step = bridge.attr("frames_per_step").cast<int>();
    spec.max_episode_steps = bridge.attr("max_episode_steps").cast<int>();
    if (std::string bad = spec.Check(); !bad.empty()) return base::InvalidArgument(what + ": bad spec: " + bad);
    return std::make_unique<PythonVectorEnv>(std::move(spec), num_envs, std::move(bridge), what);
  } catch (const py::error_already_set& e) {
    return base::InvalidArgument(what + ": " + PythonError(e));
  } catch (const std::exception& e) {
    return base::InvalidArgument(what + ": " + e.what());
  }
}

}  // namespace stampede::envs
