// Checkpoints round-trip exactly and refuse damaged files with a clear message.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "learner/checkpoint.h"

using namespace stampede::learner;
namespace base = stampede::base;

TEST_CASE("checkpoint: round trip and refusal of damaged files", "[checkpoint]") {
  const auto dir = std::filesystem::temp_directory_path() / "stampede_ckpt_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "c.bin").string();
  CheckpointData d;
  d.layout_fingerprint = 0x1234;
  d.layout_text = "w [2,2] 0\n";
  d.version = 77;
  d.env_frames = 123456;
  d.learner_steps = 77;
  d.params = {1.f, -2.f, 3.5f, 0.25f};
  d.rms_mean_square = {0.1f, 0.2f, 0.3f, 0.4f};
  d.rms_momentum = {0.f, 0.f, 1.f, -1.f};
  REQUIRE(SaveCheckpoint(path, d).ok());
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  CheckpointData back;
  REQUIRE(LoadCheckpoint(path, &back).ok());
  CHECK(back.version == 77);
  CHECK(back.env_frames == 123456);
  CHECK(back.params == d.params);
  CHECK(back.rms_mean_square == d.rms_mean_square);
  CHECK(back.rms_momentum == d.rms_momentum);
  CHECK(back.layout_fingerprint == 0x1234);

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string flipped = (dir / "flipped.bin").string();
  std::string damaged = bytes;
  damaged[damaged.size() / 2] ^= 0x40;
  std::ofstream(flipped, std::ios::binary) << damaged;
  const base::Status flipped_read = LoadCheckpoint(flipped, &back);
  CHECK(flipped_read.code() == base::Code::kInvalidArgument);
  CHECK_THAT(flipped_read.message(), Catch::Contains(flipped) && Catch::Contains("checksum"));

  const std::string cut = (dir / "cut.bin").string();
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 9);
  const base::Status cut_read = LoadCheckpoint(cut, &back);
  CHECK_FALSE(cut_read.ok());
  CHECK_THAT(cut_read.message(), Catch::Contains(cut));

  const std::string other = (dir / "other.bin").string();
  std::ofstream(other, std::ios::binary) << "not a checkpoint at all";
  const base::Status other_read = LoadCheckpoint(other, &back);
  CHECK_FALSE(other_read.ok());
  CHECK_THAT(other_read.message(), Catch::Contains("bad magic"));
}
