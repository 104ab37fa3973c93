/* An example Stampede env plug-in, in plain C, built against envs/plugin_api.h alone.
 *
 * Corridor: the agent stands in a corridor of `length` cells (kwarg, default 8), starting
 * in a random cell of the left half; action 0 steps left, 1 steps right (walls hold).
 * Reaching the right end pays +1 and ends the episode; every other step costs
 * `step_cost` (kwarg, default 0.01). Observation: the one-hot position (float32
 * [length]). Episodes are cut at 4 * length steps. The best return from start cell s is
 * 1 - step_cost * (length - 2 - s); a random walk mostly runs out of time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin_api.h"

typedef struct {
  int length;
  float step_cost;
  int position;
  uint64_t rng;
} corridor;

static uint64_t next_random(uint64_t* state) { /* SplitMix64 */
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void write_obs(const corridor* c, float* obs) {
  memset(obs, 0, sizeof(float) * (size_t)c->length);
  obs[c->position] = 1.f;
}

static void* create(const stampede_kwarg* kwargs, int32_t num_kwargs, stampede_env_spec* spec,
                    char* error, int32_t error_size) {
  int length = 8;
  float step_cost = 0.01f;
  for (int32_t i = 0; i < num_kwargs; ++i) {
    char* end = NULL;
    if (strcmp(kwargs[i].key, "length") == 0) {
      length = (int)strtol(kwargs[i].value, &end, 10);
      if (*end != '\0' || length < 2 || length > 1000) {
        snprintf(error, (size_t)error_size, "length \"%s\": expected an integer in [2, 1000]", kwargs[i].value);
        return NULL;
      }
    } else if (strcmp(kwargs[i].key, "step_cost") == 0) {
      step_cost = strtof(kwargs[i].value, &end);
      if (*end != '\0' || step_cost < 0.f) {
        snprintf(error, (size_t)error_size, "step_cost \"%s\": expected a number >= 0", kwargs[i].value);
        return NULL;
      }
    } else {
      snprintf(error, (size_t)error_size, "unknown kwarg \"%s\" (known: length, step_cost)", kwargs[i].key);
      return NULL;
    }
  }
  corridor* c = calloc(1, sizeof(corridor));
  c->length = length;
  c->step_cost = step_cost;
  memset(spec, 0, sizeof(*spec));
  spec->obs_rank = 1;
  spec->obs_shape[0] = length;
  spec->obs_dtype = STAMPEDE_DTYPE_FLOAT32;
  spec->action_kind = STAMPEDE_ACTION_DISCRETE;
  spec->num_actions = 2;
  spec->max_episode_steps = 4 * length;
  return c;
}

static void destroy(void* env) { free(env); }

static int32_t reset(void* env, uint64_t seed, void* obs, char* error, int32_t error_size) {
  corridor* c = env;
  c->rng = seed;
  c->position = (int)(next_random(&c->rng) % (uint64_t)(c->length / 2));
  write_obs(c, obs);
  return 0;
}

static int32_t step(void* env, const void* action, void* obs, float* reward, int32_t* terminated,
                    int32_t* truncated, char* error, int32_t error_size) {
  corridor* c = env;
  const int32_t a = *(const int32_t*)action;
  if (a == 0 && c->position > 0) --c->position;
  if (a == 1 && c->position < c->length - 1) ++c->position;
  *terminated = c->position == c->length - 1;
  *reward = *terminated ? 1.f : -c->step_cost;
  *truncated = 0; /* Stampede applies the spec's time limit */
  write_obs(c, obs);
  return 0;
}

STAMPEDE_PLUGIN({"Corridor", create, destroy, reset, step});
