// pytorch/csrc/module.cpp: ftcc_torch._C, the extension module (Python side: ftcc_torch/).
#include <torch/extension.h>

#include "process_group_ftcc.hpp"
#include "runtime.hpp"

namespace py = pybind11;
using ftcc::torch_backend::ProcessGroupFtcc;
using ftcc::torch_backend::Runtime;

PYBIND11_MODULE(_C, m) {
  m.doc() = "ftcc's c10d backend (use it through ftcc_torch)";
  py::class_<ProcessGroupFtcc, c10d::Backend, c10::intrusive_ptr<ProcessGroupFtcc>>(m, "ProcessGroupFtcc")
      .def_property_readonly("generation", &ProcessGroupFtcc::generation)
      .def_property_readonly("failed_ranks", &ProcessGroupFtcc::failedRanks);
  m.def(
      "create_backend",
      [](int rank, int size, double timeout_s) {
        return c10::static_intrusive_pointer_cast<ProcessGroupFtcc>(ProcessGroupFtcc::create(rank, size, timeout_s));
      },
      py::arg("rank"), py::arg("size"), py::arg("timeout_s"), py::call_guard<py::gil_scoped_release>());
  m.def("started", [] { return Runtime::existing() != nullptr; });
  m.def(
      "begin_step",
      [](std::int64_t step) {
        if (Runtime* rt = Runtime::existing()) rt->begin_step(step);
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "finish",
      [] {
        Runtime* rt = Runtime::existing();
        return rt ? rt->finish() : 0;
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "fail",
      [](const std::string& message, bool config_error) {
        Runtime* rt = Runtime::existing();
        return rt ? rt->fail(message, config_error) : 1;
      },
      py::arg("message"), py::arg("config_error") = false, py::call_guard<py::gil_scoped_release>());
  m.def(
      "exit",
      [](int status) {
        // C's exit, not Python's: the exit guard of recovery/ turns an exit without MPI_Finalize
        // into a process failure the other ranks recover from.
        std::fflush(nullptr);
        std::exit(status);
      },
      py::call_guard<py::gil_scoped_release>());
}
