// What the oneDNN files of net/ share (onednn_conv.cc, onednn_stack.cc): the process's
// engine and the calling thread's OpenMP threads. Included only by those .cc files, in
// builds with oneDNN: it brings in oneDNN's header.
#pragma once

#ifdef STAMPEDE_HAVE_ONEDNN

#include <oneapi/dnnl/dnnl.hpp>
#include <string>

namespace stampede::net::onednn {

// One engine for the process (engines are thread-safe); each user has its own stream.
dnnl::engine& Engine();
// The calling thread's wanted OpenMP threads (net/onednn_conv.h, SetOneDnnThreads), and
// that count applied to its OpenMP before it calls oneDNN.
int WantedThreads();
void ApplyThreads();
// Whether oneDNN's implementation string names its reference (slow) kernel.
inline bool IsReference(const char* impl) { return std::string(impl).rfind("ref", 0) == 0; }

}  // namespace stampede::net::onednn

#endif
