// Bindings of the population-loss core (filled in with population.hpp).
#include <pybind11/pybind11.h>

namespace lsa_native::bindings {
void bind_population(pybind11::module_&) {}
}  // namespace lsa_native::bindings
