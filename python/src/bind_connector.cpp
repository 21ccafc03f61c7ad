// SPDX-License-Identifier: Apache-2.0
// kvkey._kvkey._Connector (bind_connector.hpp) over the module's KeyNamespace
// and Verdict.
#include "bind_connector.hpp"

#include <pybind11/pybind11.h>

#include "binding.hpp"

void kvkey_python::bind_connector(py::module_& m) { bind_connector<Namespace, PyVerdict>(m); }
