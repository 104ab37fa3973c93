// Catch from bsuite: a ball falls from the top row of a 10x5 grid, one row per step;
// the agent moves a paddle on the bottom row left, not at all, or right (actions 0, 1, 2).
// Reward +1 if the paddle is under the ball when it reaches the bottom, else -1; 9 steps.
#pragma once


#include "envs/env.h"
#include "envs/rng.h"

namespace stampede::envs {

// "CatchPixels" is the same game rendered as a uint8 image [1, 10 s, 5 s] (s = kwarg
// `scale`, pixels per cell, default 4): ball and paddle are s x s squares of 255 — a
// pixel env small enough to train a CNN in seconds.
class Catch : public Env {
 public:
  static constexpr int kRows = 10, kColumns = 5;
  explicit Catch(const EnvOptions& options);
  // The pixel variant (scale > 0).
  Catch(const EnvOptions& options, int scale);
  int ball_x() const { return ball_x_; }
  int ball_y() const { return ball_y_; }
  int paddle_x() const { return paddle_x_; }

 protected:
  void DoReset(uint64_t seed, void* obs) override;
  StepResult DoStep(int action, void* obs) override;

 private:
  void Write(void* obs) const;
  int scale_ = 0;  // 0: the float grid; > 0: pixels per cell
  int ball_x_ = 0, ball_y_ = 0, paddle_x_ = kColumns / 2;
  SplitMix64 rng_;
};

}  // namespace stampede::envs
