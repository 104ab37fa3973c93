/* The C ABI of a Stampede environment plug-in: a shared library that exports one entry
 * point, built against this header alone (no other Stampede header, C or C++).
 *
 *   #include "plugin_api.h"
 *   static void* create(const stampede_kwarg* kw, int32_t n, stampede_env_spec* spec,
 *                       char* error, int32_t error_size) { ... }
 *   ...
 *   STAMPEDE_PLUGIN({"MyEnv", create, destroy, reset, step});
 *
 * Config: env { plugin: "path/to/libmyenv.so" name: "MyEnv" kwargs { key: "k" value: "3" } }
 *
 * Stampede loads the library, reads the ABI version the plug-in was built with (the
 * first field of stampede_plugin, in every version) and refuses another version,
 * naming both. Every call gets a buffer for an error message; a non-zero return (or a
 * NULL env from create) makes Stampede report that message with the env's name. One
 * env instance is used by one thread at a time; several instances may live at once.
 */
#ifndef STAMPEDE_PLUGIN_API_H_
#define STAMPEDE_PLUGIN_API_H_

#include <stddef.h>
#include <stdint.h>

#define STAMPEDE_PLUGIN_ABI_VERSION 1
#define STAMPEDE_PLUGIN_ENTRY_NAME "stampede_plugin_entry"
#define STAMPEDE_PLUGIN_MAX_RANK 3
#define STAMPEDE_PLUGIN_MAX_ACTION_DIMS 64

#ifdef __cplusplus
extern "C" {
#endif

enum { STAMPEDE_DTYPE_FLOAT32 = 1, STAMPEDE_DTYPE_UINT8 = 2 };
enum { STAMPEDE_ACTION_DISCRETE = 1, STAMPEDE_ACTION_MULTI_DISCRETE = 2, STAMPEDE_ACTION_BOX = 3 };

typedef struct stampede_env_spec {
  int32_t obs_rank;                              /* 1 to 3 */
  int32_t obs_shape[STAMPEDE_PLUGIN_MAX_RANK];
  int32_t obs_dtype;                             /* STAMPEDE_DTYPE_* */
  int32_t action_kind;                           /* STAMPEDE_ACTION_* */
  int32_t num_actions;                           /* discrete: actions 0 .. num_actions-1 */
  int32_t action_dims;                           /* multi-discrete and box: components */
  int32_t action_nvec[STAMPEDE_PLUGIN_MAX_ACTION_DIMS];  /* multi-discrete */
  float action_low[STAMPEDE_PLUGIN_MAX_ACTION_DIMS];     /* box */
  float action_high[STAMPEDE_PLUGIN_MAX_ACTION_DIMS];    /* box */
  int32_t max_episode_steps;                     /* 0: no time limit */
  int32_t frames_per_step;                       /* 0 or 1: one frame per step */
} stampede_env_spec;

/* One config kwarg, as text ("3", "0.5", "hard"); the env parses what it knows and
 * refuses unknown keys through create's error. */
typedef struct stampede_kwarg {
  const char* key;
  const char* value;
} stampede_kwarg;

typedef struct stampede_env_vtable {
  const char* name;
  /* A new env, its spec filled in; NULL and a message in `error` on failure. */
  void* (*create)(const stampede_kwarg* kwargs, int32_t num_kwargs, stampede_env_spec* spec,
                  char* error, int32_t error_size);
  void (*destroy)(void* env);
  /* Starts an episode; writes the first observation into `obs` (room for one). 0 on success. */
  int32_t (*reset)(void* env, uint64_t seed, void* obs, char* error, int32_t error_size);
  /* Applies `action` (discrete: one int32_t) and writes the next observation, the
   * reward and whether the episode terminated or was truncated. 0 on success. */
  int32_t (*step)(void* env, const void* action, void* obs, float* reward, int32_t* terminated,
                  int32_t* truncated, char* error, int32_t error_size);
} stampede_env_vtable;

typedef struct stampede_plugin {
  uint32_t abi_version; /* STAMPEDE_PLUGIN_ABI_VERSION the plug-in was built with */
  int32_t num_envs;
  const stampede_env_vtable* envs;
} stampede_plugin;

typedef const stampede_plugin* (*stampede_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#define STAMPEDE_PLUGIN_EXTERN_C extern "C"
#else
#define STAMPEDE_PLUGIN_EXTERN_C
#endif

/* Exports the plug-in's envs: STAMPEDE_PLUGIN({"A", ...}, {"B", ...}); */
#define STAMPEDE_PLUGIN(...)                                                              \
  static const stampede_env_vtable stampede_plugin_envs_[] = {__VA_ARGS__};               \
  STAMPEDE_PLUGIN_EXTERN_C __attribute__((visibility("default"))) const stampede_plugin*  \
  stampede_plugin_entry(void) {                                                           \
    static const stampede_plugin plugin = {                                               \
        STAMPEDE_PLUGIN_ABI_VERSION,                                                      \
        (int32_t)(sizeof(stampede_plugin_envs_) / sizeof(stampede_plugin_envs_[0])),      \
        stampede_plugin_envs_};                                                           \
    return &plugin;                                                                       \
  }

#endif /* STAMPEDE_PLUGIN_API_H_ */
