#include "rank_failure.hpp"

#include <torch/csrc/Exceptions.h>
#include <torch/extension.h>

namespace ftcc::torch_backend {
namespace {

std::exception_ptr dist_backend_error(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, "ftcc: " + message);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

std::exception_ptr make_failure_error(const Failure& f) {
  if (f.fatal || !Py_IsInitialized() || _Py_IsFinalizing()) return dist_backend_error(f.message);
  pybind11::gil_scoped_acquire gil;
  try {
    pybind11::object cls = pybind11::module_::import("ftcc_torch._errors").attr("RankFailure");
    pybind11::object exc = cls("ftcc: " + f.message, f.failed);
    PyErr_SetObject(cls.ptr(), exc.ptr());
    python_error error;
    error.persist();
    return std::make_exception_ptr(std::move(error));
  } catch (pybind11::error_already_set& e) {
    const std::string why = e.what();
    return dist_backend_error(f.message + " (and ftcc_torch.RankFailure could not be made: " + why + ")");
  }
}

}  // namespace ftcc::torch_backend
