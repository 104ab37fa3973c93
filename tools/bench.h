// `stampede bench`: raw env steps/s on one core, actor steps/s with batched inference
// (no learner, no sockets), learner steps/s on one core, and end-to-end fleet frames/s
// with learning. Prints figures
// next to the limits DESIGN.md gives for this machine; asserts nothing.
#pragma once

#include <string>
#include <vector>

namespace stampede::net {
struct GemmShape;
}  // namespace stampede::net

namespace stampede::tools {

struct BenchOptions {
  std::string config_path = "configs/cartpole.textproto";
  std::vector<std::string> sets;
  double seconds = 2.0;
  long long fleet_frames = 1000000;
  // The env, actor and learner parts run in this many processes at once, their timed loops
  // started together, and each figure is the mean per process: a part's speed while every
  // core works (caches and memory shared), which is what a fleet on that many cores gets.
  int copies = 1;
  bool networks = false;  // --networks: the torso inference table instead
  bool gpu = false;       // --gpu: the CUDA learner step instead
  bool broadcast = false; // --broadcast: PS fetch time of 16 clients instead
  bool minatar = false;   // --minatar: the C++ MinAtar games against the package instead
  bool gemm = false;      // --gemm: float32 GEMM GFLOP/s per backend instead
  bool allreduce = false; // --allreduce: the learners' ring-allreduce alone instead
};

int RunBench(const BenchOptions& opt);
// CPU inference us/sample and GFLOP/s of every torso at batch 1, 8 and 32 on one core
// (84x84x4 uint8 frames; 10x10x4 for the MinAtar-sized small CNN), and the CPU learner
// step of the shallow and deep CNNs at B = 32, T = 20.
int RunNetworkBench(const BenchOptions& opt);
// The CUDA learner step (deep ResNet + LSTM 256 on 84x84x4 uint8, B = 32, T = 100, as the
// learner runs it: staging the next batch while the device computes, parameters copied
// back for publishing) and how it compares with what 2 CPU cores of actors can feed.
int RunGpuBench(const BenchOptions& opt);
// Seconds for 16 concurrent clients to fetch a new 1M- / 10M-float version from 1, 2, 4
// shards on loopback (tools/bench_broadcast.cc).
int RunBroadcastBench(const BenchOptions& opt);
// Steps/s of each C++ MinAtar game on one core (one env, random actions, observation
// written every step) beside the `minatar` package's in the venv (tools/minatar_trace.py
// speed), and the ratio; the package column is left out where the venv is absent.
int RunMinAtarBench(const BenchOptions& opt);
// Float32 GEMM GFLOP/s on one thread for every backend net/gemm.h has here (Eigen, and
// OpenBLAS, BLIS and oneDNN where installed): a square 512^3 and every product of the
// shallow CNN and deep ResNet learner steps, with net.gemm_backend "auto"'s choice for
// each against the fastest (tools/bench_gemm.cc).
int RunGemmBench(const BenchOptions& opt);
// A 512^3 float32 GEMM on this thread with the process's GEMM (net.gemm_backend), GFLOP/s:
// the peak the network figures are printed next to; `backend` (may be null) says which.
double MeasureGemmGflops(double seconds, std::string* backend = nullptr);
// GFLOP/s of each named GEMM backend on shape `s` (operands of small values), over about
// `seconds` in all: net::TimeGemmBackends' interleaved rounds, each backend's best kept.
std::vector<double> TimeGemmShape(const std::vector<std::string>& backends, const net::GemmShape& s,
                                  double seconds);
// RunNetworkBench's tables by layer (tools/bench_layers.cc): the shallow CNN's and the deep
// ResNet + LSTM's learner steps at B = 16, T = 20, each layer's forward and backward beside
// the fastest implementation installed here for the same work and its roofline bound
// (`peak`: the 512^3 GEMM's GFLOP/s on this core).
void PrintLayerTables(double seconds, double peak);
// The learners' ring-allreduce alone: steps/s, bytes sent per learner per step and MB/s for
// 2, 3, 4 learners at 1M and 10M floats, against ZeroMQ's loopback bandwidth
// (tools/bench_allreduce.cc).
int RunAllreduceBench(const BenchOptions& opt);

}  // namespace stampede::tools
