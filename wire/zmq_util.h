// ZeroMQ framing shared by every role: a protobuf header frame followed by raw array
// frames, receive limits, and the protocol-version check. A socket is owned by exactly
// one thread; nothing here is shared between threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "wire/messages.pb.h"

namespace stampede::wire {

struct Frame {
  const void* data;
  size_t size;
};

template <class T>
Frame AsFrame(const std::vector<T>& v) {
  return Frame{v.data(), v.size() * sizeof(T)};
}

// Every receiving socket gets a maximum message size; linger is short so that
// processes exit promptly.
void ConfigureReceiver(zmq::socket_t& socket, int64_t max_message_bytes);
void ConfigureSender(zmq::socket_t& socket, int send_hwm, int send_timeout_ms);

// Kernel socket buffers for the trajectory path. ZeroMQ's high-water marks count
// messages, but the kernel's TCP buffers hold megabytes more; every trajectory waiting
// there is older policy by the time the learner trains on it (policy lag). Buffers of
// about one message keep the actors' backpressure close to the learner's queue.
void LimitKernelBuffers(zmq::socket_t& socket, int64_t message_bytes);

// Sends header + frames as one multipart message. Returns false if the send would
// block past the socket's send timeout (nothing is sent then).
[[nodiscard]] bool SendMessage(zmq::socket_t& socket, const google::protobuf::MessageLite& header,
                               std::span<const Frame> frames = {});
// Same, for a ROUTER socket: `identity` is sent first.
[[nodiscard]] bool SendRouted(zmq::socket_t& socket, const zmq::message_t& identity,
                              const google::protobuf::MessageLite& header,
                              std::span<const Frame> frames = {});

// Receives all parts of one message. `wait` false: returns false at once if none is ready.
[[nodiscard]] bool RecvMultipart(zmq::socket_t& socket, std::vector<zmq::message_t>* parts,
                                 bool wait);

// zmq::poll that returns 0 when a signal interrupts it (roles stop on SIGTERM/SIGINT).
int Poll(zmq::pollitem_t* items, size_t count, std::chrono::milliseconds timeout);

// Parses untrusted bytes into `msg` (bounded by the frame's size); false on garbage.
[[nodiscard]] bool ParseFrame(const zmq::message_t& frame, google::protobuf::MessageLite* msg);

// A sender stamp for this process.
Sender MakeSender(Role role, int task_index, uint64_t incarnation);
// A fresh random incarnation id (never 0).
uint64_t NewIncarnation();
// Empty if `sender` speaks our protocol version, else the error text.
std::string CheckProtocol(const Sender& sender);

const char* RoleName(Role role);

// Linux: waits until the peers of this process's Unix-domain sockets connected to `path`
// have read every byte written to them (SIOCOUTQ 0, three times in a row 10 ms apart) or
// `max_wait` passes; true in the first case, and when no such socket is open.
bool WaitUnixPeerRead(const std::string& path, std::chrono::milliseconds max_wait);

}  // namespace stampede::wire
