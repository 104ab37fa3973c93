#include "wire/zmq_util.h"

#include <dirent.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

namespace stampede::wire {

void ConfigureReceiver(zmq::socket_t& socket, int64_t max_message_bytes) {
  socket.set(zmq::sockopt::maxmsgsize, max_message_bytes);
  socket.set(zmq::sockopt::linger, 0);
}

void ConfigureSender(zmq::socket_t& socket, int send_hwm, int send_timeout_ms) {
  socket.set(zmq::sockopt::sndhwm, send_hwm);
  socket.set(zmq::sockopt::sndtimeo, send_timeout_ms);
  socket.set(zmq::sockopt::linger, 0);
}

void LimitKernelBuffers(zmq::socket_t& socket, int64_t message_bytes) {
  constexpr int64_t kMinBytes = 4096, kMaxBytes = 64 << 20;
  const int bytes = int(std::clamp(message_bytes, kMinBytes, kMaxBytes));
  socket.set(zmq::sockopt::sndbuf, bytes);
  socket.set(zmq::sockopt::rcvbuf, bytes);
}

namespace {
bool SendParts(zmq::socket_t& socket, const zmq::message_t* identity,
               const google::protobuf::MessageLite& header, std::span<const Frame> frames) {
  std::string bytes = header.SerializeAsString();
  if (identity != nullptr) {
    zmq::message_t id(identity->data(), identity->size());
    if (!socket.send(id, zmq::send_flags::sndmore)) return false;
  }
  zmq::message_t head(bytes.data(), bytes.size());
  auto flags = frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore;
  if (!socket.send(head, flags)) return false;
  // Once the first part is queued, ZeroMQ queues the rest of the message atomically.
  for (size_t i = 0; i < frames.size(); ++i) {
    zmq::message_t part(frames[i].data, frames[i].size);
    auto f = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    (void)socket.send(part, f);
  }
  return true;
}
}  // namespace

bool SendMessage(zmq::socket_t& socket, const google::protobuf::MessageLite& header,
                 std::span<const Frame> frames) {
  try {
    return SendParts(socket, nullptr, header, frames);
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;  // a signal: the caller checks its stop flag
    throw;
  }
}

bool SendRouted(zmq::socket_t& socket, const zmq::message_t& identity,
                const google::protobuf::MessageLite& header, std::span<const Frame> frames) {
  try {
    return SendParts(socket, &identity, header, frames);
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;
    throw;
  }
}

int Poll(zmq::pollitem_t* items, size_t count, std::chrono::milliseconds timeout) {
  try {
    return zmq::poll(items, count, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return 0;
    throw;
  }
}

bool RecvMultipart(zmq::socket_t& socket, std::vector<zmq::message_t>* parts, bool wait) {
  parts->clear();
  while (true) {
    zmq::message_t msg;
    auto flags = (parts->empty() && !wait) ? zmq::recv_flags::dontwait : zmq::recv_flags::none;
    zmq::recv_result_t got;
    try {
      got = socket.recv(msg, flags);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR && parts->empty()) return false;
      throw;
    }
    if (!got) return false;
    bool more = msg.more();
    parts->push_back(std::move(msg));
    if (!more) return true;
  }
}

bool ParseFrame(const zmq::message_t& frame, google::protobuf::MessageLite* msg) {
  google::protobuf::io::CodedInputStream in(static_cast<const uint8_t*>(frame.data()),
                                            static_cast<int>(frame.size()));
  in.SetTotalBytesLimit(static_cast<int>(frame.size()));
  return msg->ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
}

Sender MakeSender(Role role, int task_index, uint64_t incarnation) {
  Sender s;
  s.set_protocol_version(PROTOCOL_VERSION);
  s.set_role(role);
  s.set_task_index(task_index);
  s.set_incarnation(incarnation);
  return s;
}

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (uint64_t(rd()) << 32) ^ rd();
  return v;
}

std::string CheckProtocol(const Sender& sender) {
  if (sender.protocol_version() == PROTOCOL_VERSION) return {};
  return "protocol version " + std::to_string(sender.protocol_version()) + " from " +
         RoleName(sender.role()) + " " + std::to_string(sender.task_index()) +
         ", this process speaks version " + std::to_string(PROTOCOL_VERSION);
}

namespace {
// Bytes written to this process's Unix-domain sockets connected to `path` that their
// peers have not read.
int64_t UnreadBytesTo(const std::string& path) {
  int64_t unread = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    struct stat st;
    if (::fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_un peer{};
    socklen_t len = sizeof peer;
    if (::getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sun_family != AF_UNIX) continue;
    const size_t n = len > offsetof(sockaddr_un, sun_path) ? ::strnlen(peer.sun_path, len - offsetof(sockaddr_un, sun_path)) : 0;
    if (std::string(peer.sun_path, n) != path) continue;
    int queued = 0;
    if (::ioctl(int(fd), SIOCOUTQ, &queued) == 0) unread += queued;
  }
  ::closedir(dir);
  return unread;
}
}  // namespace

bool WaitUnixPeerRead(const std::string& path, std::chrono::milliseconds max_wait) {
  const auto until = std::chrono::steady_clock::now() + max_wait;
  for (int quiet = 0;;) {
    quiet = UnreadBytesTo(path) == 0 ? quiet + 1 : 0;
    if (quiet >= 3) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

const char* RoleName(Role role) {
  switch (role) {
    case ROLE_COORDINATOR: return "coordinator";
    case ROLE_ACTOR: return "actor";
    case ROLE_LEARNER: return "learner";
    case ROLE_PS: return "ps";
    case ROLE_EVALUATOR: return "evaluator";
    default: return "unknown-role";
  }
}

}  // namespace stampede::wire
