// A test plug-in (C++) that fails on purpose: env "Crashy" is a 4-cell corridor that,
// after `crash_after` steps in this process (kwarg), crashes the way kwarg `how` says:
// "segv" (a null write), "abort", or "throw" (a C++ exception across the C ABI).
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "envs/plugin_api.h"

namespace {
long g_steps = 0;  // steps taken in this process, by every instance
struct Crashy {
  long crash_after = 1000;
  std::string how = "segv";
  int position = 0;
};

void* Create(const stampede_kwarg* kwargs, int32_t n, stampede_env_spec* spec, char* error, int32_t size) {
  auto* c = new Crashy;
  for (int32_t i = 0; i < n; ++i) {
    if (std::strcmp(kwargs[i].key, "crash_after") == 0) {
      c->crash_after = std::atol(kwargs[i].value);
    } else if (std::strcmp(kwargs[i].key, "how") == 0) {
      c->how = kwargs[i].value;
    } else {
      std::snprintf(error, size_t(size), "unknown kwarg \"%s\"", kwargs[i].key);
      delete c;
      return nullptr;
    }
  }
  std::memset(spec, 0, sizeof(*spec));
  spec->obs_rank = 1;
  spec->obs_shape[0] = 4;
  spec->obs_dtype = STAMPEDE_DTYPE_FLOAT32;
  spec->action_kind = STAMPEDE_ACTION_DISCRETE;
  spec->num_actions = 2;
  spec->max_episode_steps = 16;
  return c;
}

void Destroy(void* env) { delete static_cast<Crashy*>(env); }

void Write(const Crashy* c, void* obs) {
  float* o = static_cast<float*>(obs);
  for (int i = 0; i < 4; ++i) o[i] = i == c->position ? 1.f : 0.f;
}

int32_t Reset(void* env, uint64_t, void* obs, char*, int32_t) {
  auto* c = static_cast<Crashy*>(env);
  c->position = 0;
  Write(c, obs);
  return 0;
}

int32_t Step(void* env, const void* action, void* obs, float* reward, int32_t* terminated,
             int32_t* truncated, char*, int32_t) {
  auto* c = static_cast<Crashy*>(env);
  if (++g_steps > c->crash_after) {
    if (c->how == "abort") std::abort();
    if (c->how == "throw") throw std::runtime_error("Crashy threw across the ABI");
    volatile int* null = nullptr;
    *null = 1;
  }
  c->position = *static_cast<const int32_t*>(action) == 1 ? std::min(c->position + 1, 3)
                                                          : std::max(c->position - 1, 0);
  *terminated = c->position == 3;
  *truncated = 0;
  *reward = *terminated ? 1.f : 0.f;
  Write(c, obs);
  return 0;
}
}  // namespace

STAMPEDE_PLUGIN({"Crashy", Create, Destroy, Reset, Step});
