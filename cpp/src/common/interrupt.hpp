// Internal side of interrupt.hpp: the poll that long loops call.
#pragma once

#include "lsa_native/interrupt.hpp"

namespace lsa_native::detail {

// Runs the installed check if kInterruptPollSeconds have passed since this thread last did, and
// throws Interrupted when it reports an interruption. Costs one clock read otherwise.
void poll_interrupt();

}  // namespace lsa_native::detail
