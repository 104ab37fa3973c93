// MinAtar Freeway (minatar/environments/freeway.py): a chicken in column 4 crosses eight
// lanes of cars of random speed and direction; +1 for each crossing (the cars are then
// redrawn), a hit sends it back to the bottom. The episode lasts 2500 steps.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>

#include "envs/minatar.h"

namespace stampede::envs {
namespace {

constexpr int kPlayerSpeed = 3, kTimeLimit = 2500;

class Freeway : public MinAtarGame {
 public:
  const char* name() const override { return "freeway"; }
  int channels() const override { return 7; }  // chicken, car, speed1..speed5
  std::vector<int> minimal_action_set() const override { return {kNoop, kUp, kDown}; }

  void Reset(MinAtarDraws& draws) override {
    Randomize(draws, true);
    pos_ = 9;
    move_timer_ = kPlayerSpeed;
    terminate_timer_ = kTimeLimit;
    terminal_ = false;
  }

  std::pair<int, bool> Act(int a, MinAtarDraws& draws) override {
    int r = 0;
    if (terminal_) return {r, terminal_};
    if (a == kUp && move_timer_ == 0) {
      move_timer_ = kPlayerSpeed;
      pos_ = std::max(0, pos_ - 1);
    } else if (a == kDown && move_timer_ == 0) {
      move_timer_ = kPlayerSpeed;
      pos_ = std::min(9, pos_ + 1);
    }
    if (pos_ == 0) {
      r += 1;
      Randomize(draws, false);
      pos_ = 9;
    }
    for (Car& car : cars_) {
      if (car.x == 4 && car.y == pos_) pos_ = 9;
      if (car.timer == 0) {
        car.timer = std::abs(car.speed);
        car.x += car.speed > 0 ? 1 : -1;
        if (car.x < 0) car.x = 9;
        else if (car.x > 9) car.x = 0;
        if (car.x == 4 && car.y == pos_) pos_ = 9;
      } else {
        --car.timer;
      }
    }
    if (move_timer_ > 0) --move_timer_;
    if (--terminate_timer_ < 0) terminal_ = true;
    return {r, terminal_};
  }

  void State(uint8_t* s, uint8_t on) const override {
    constexpr int N = kSize * kSize;
    std::memset(s, 0, size_t(channels()) * N);
    s[0 * N + pos_ * kSize + 4] = on;
    for (const Car& car : cars_) {
      s[1 * N + car.y * kSize + car.x] = on;
      int back_x = car.speed > 0 ? car.x - 1 : car.x + 1;
      if (back_x < 0) back_x = 9;
      else if (back_x > 9) back_x = 0;
      const int speed = std::abs(car.speed);
      // A speed of 0 needs a direction draw of exactly 0.5; the package has no trail for it.
      if (speed >= 1 && speed <= 5) s[(1 + speed) * N + car.y * kSize + back_x] = on;
    }
  }

 private:
  struct Car {
    int x, y, timer, speed;
  };
  void Randomize(MinAtarDraws& draws, bool initialize) {
    int speeds[8];
    for (int& v : speeds) v = int(draws.RandInt(1, 6));
    for (int& v : speeds) {
      const double d = draws.Rand() - 0.5;
      v *= d > 0 ? 1 : (d < 0 ? -1 : 0);
    }
    for (int i = 0; i < 8; ++i) {
      if (initialize) cars_[size_t(i)] = Car{0, i + 1, 0, 0};
      cars_[size_t(i)].timer = std::abs(speeds[i]);
      cars_[size_t(i)].speed = speeds[i];
    }
  }
  std::array<Car, 8> cars_{};
  int pos_ = 9, move_timer_ = 0, terminate_timer_ = 0;
  bool terminal_ = false;
};

}  // namespace

std::unique_ptr<MinAtarGame> MakeMinAtarFreeway(bool) { return std::make_unique<Freeway>(); }

STAMPEDE_REGISTER_ENV("MinAtar-Freeway", [](const EnvOptions& o) {
  return std::make_unique<MinAtarEnv>("MinAtar-Freeway", "freeway", o);
});

}  // namespace stampede::envs
