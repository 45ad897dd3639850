// Cooperative interruption of long native calls (Ctrl-C in Python): a check the host installs.
#pragma once

#include <stdexcept>

namespace lsa_native {

// Thrown out of a native call whose interrupt check reported a pending interruption. The call
// unwinds cleanly: the thread pool stays usable; outputs it was writing are left partly written.
class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("lsa_native: interrupted") {}
};

// The check returns true when the running call should stop. It is called only on the thread that
// entered the library, between chunks of a batched kernel and between steps of a gradient flow, at
// most once per kInterruptPollSeconds, so it may be slow (the Python bindings install one that
// takes the GIL and runs PyErr_CheckSignals). nullptr (the default) disables polling.
using InterruptCheck = bool (*)();
void set_interrupt_check(InterruptCheck check);

inline constexpr double kInterruptPollSeconds = 0.02;

}  // namespace lsa_native
