// MinAtar Breakout (minatar/environments/breakout.py): a paddle on the bottom row, a
// ball moving diagonally, three rows of bricks that come back when all are cleared.
// Reward +1 per brick; the episode ends when the ball passes the paddle.
#include <algorithm>
#include <cstring>

#include "envs/minatar.h"

namespace stampede::envs {
namespace {

class Breakout : public MinAtarGame {
 public:
  const char* name() const override { return "breakout"; }
  int channels() const override { return 4; }  // paddle, ball, trail, brick
  std::vector<int> minimal_action_set() const override { return {kNoop, kLeft, kRight}; }

  void Reset(MinAtarDraws& draws) override {
    ball_y_ = 3;
    const bool right = draws.RandInt(0, 2) == 1;
    ball_x_ = right ? 9 : 0;
    ball_dir_ = right ? 3 : 2;
    pos_ = 4;
    std::memset(bricks_, 0, sizeof bricks_);
    FillBricks();
    strike_ = false;
    last_x_ = ball_x_;
    last_y_ = ball_y_;
    terminal_ = false;
  }

  std::pair<int, bool> Act(int a, MinAtarDraws&) override {
    int r = 0;
    if (terminal_) return {r, terminal_};
    if (a == kLeft) pos_ = std::max(0, pos_ - 1);
    if (a == kRight) pos_ = std::min(9, pos_ + 1);
    last_x_ = ball_x_;
    last_y_ = ball_y_;
    static constexpr int kDx[4] = {-1, 1, 1, -1}, kDy[4] = {-1, -1, 1, 1};
    int new_x = ball_x_ + kDx[ball_dir_], new_y = ball_y_ + kDy[ball_dir_];
    static constexpr int kFlipX[4] = {1, 0, 3, 2}, kFlipY[4] = {3, 2, 1, 0}, kFlipXY[4] = {2, 3, 0, 1};
    bool strike_toggle = false;
    if (new_x < 0 || new_x > 9) {
      new_x = std::clamp(new_x, 0, 9);
      ball_dir_ = kFlipX[ball_dir_];
    }
    if (new_y < 0) {
      new_y = 0;
      ball_dir_ = kFlipY[ball_dir_];
    } else if (bricks_[new_y][new_x]) {
      strike_toggle = true;
      if (!strike_) {
        r += 1;
        strike_ = true;
        bricks_[new_y][new_x] = 0;
        new_y = last_y_;
        ball_dir_ = kFlipY[ball_dir_];
      }
    } else if (new_y == 9) {
      if (!AnyBrick()) FillBricks();
      if (ball_x_ == pos_) {
        ball_dir_ = kFlipY[ball_dir_];
        new_y = last_y_;
      } else if (new_x == pos_) {
        ball_dir_ = kFlipXY[ball_dir_];
        new_y = last_y_;
      } else {
        terminal_ = true;
      }
    }
    if (!strike_toggle) strike_ = false;
    ball_x_ = new_x;
    ball_y_ = new_y;
    return {r, terminal_};
  }

  void State(uint8_t* s, uint8_t on) const override {
    constexpr int N = kSize * kSize;
    std::memset(s, 0, size_t(channels()) * N);
    s[0 * N + 9 * kSize + pos_] = on;
    s[1 * N + ball_y_ * kSize + ball_x_] = on;
    s[2 * N + last_y_ * kSize + last_x_] = on;
    for (int y = 0; y < kSize; ++y) {
      for (int x = 0; x < kSize; ++x) {
        if (bricks_[y][x]) s[3 * N + y * kSize + x] = on;
      }
    }
  }

 private:
  void FillBricks() {
    for (int y = 1; y < 4; ++y) std::fill(bricks_[y], bricks_[y] + kSize, uint8_t(1));
  }
  bool AnyBrick() const {
    for (const auto& row : bricks_) {
      for (uint8_t b : row) {
        if (b) return true;
      }
    }
    return false;
  }
  int ball_x_ = 0, ball_y_ = 3, ball_dir_ = 2, pos_ = 4, last_x_ = 0, last_y_ = 3;
  uint8_t bricks_[kSize][kSize] = {};
  bool strike_ = false, terminal_ = false;
};

}  // namespace

std::unique_ptr<MinAtarGame> MakeMinAtarBreakout(bool) { return std::make_unique<Breakout>(); }

STAMPEDE_REGISTER_ENV("MinAtar-Breakout", [](const EnvOptions& o) {
  return std::make_unique<MinAtarEnv>("MinAtar-Breakout", "breakout", o);
});

}  // namespace stampede::envs
