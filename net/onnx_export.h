// The policy as an ONNX model (`stampede export CHECKPOINT OUT.onnx`), built from the same
// layer list as every backend (net/network.h), with standard operators (opset 17):
//   inputs:  "observation" [batch, obs shape...] (uint8 or float32, the env's), and with
//            an LSTM core "state" [batch, 2 * lstm_size] ([h, c]; zeros at an episode start);
//   outputs: "policy" [batch, policy_size] (the logits; for box actions the means then the
//            log-stds), "value" [batch, num_values] (PopArt: normalised), and with a core
//            "state_out" [batch, 2 * lstm_size].
// The outputs are the project's forward (net::Model::Step) on the same parameters.
#pragma once

#include <span>
#include <string>

#include "base/status.h"
#include "net/model.h"

namespace stampede::net {

// The serialized ONNX model of `spec` at `params` (the spec's layout).
base::StatusOr<std::string> ExportOnnx(const ModelSpec& spec, std::span<const float> params);

}  // namespace stampede::net
