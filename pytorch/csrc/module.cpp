// pytorch/csrc/module.cpp: ftcc_torch._C, the extension module (Python side: ftcc_torch/).
#include <torch/csrc/distributed/c10d/python_comm_hook.h>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#include <torch/extension.h>

#include <map>
#include <mutex>

#include "host_block_pool.hpp"
#include "ddp_mean_hook.hpp"
#include "process_group_ftcc.hpp"
#include "runtime.hpp"

namespace py = pybind11;
using ftcc::torch_backend::DdpMeanHook;
using ftcc::torch_backend::ProcessGroupFtcc;
using ftcc::torch_backend::RecoveryRecord;
using ftcc::torch_backend::Runtime;

namespace {

// The hook ftcc installed on each DDP reducer (for register_comm_hook to delegate to the
// program's own); a reducer lives as long as its DDP module, the entry is dropped with it.
std::mutex g_hooks_mu;
std::map<const c10d::Reducer*, DdpMeanHook*> g_hooks;

DdpMeanHook& hook_of(const std::shared_ptr<c10d::Reducer>& r) {
  std::lock_guard<std::mutex> lock(g_hooks_mu);
  auto it = g_hooks.find(r.get());
  TORCH_CHECK(it != g_hooks.end(), "ftcc: this DDP module has no ftcc hook");
  return *it->second;
}

py::dict record_dict(const RecoveryRecord& r) {
  py::dict d;
  d["group"] = r.group;
  d["epoch"] = r.epoch;
  d["failed_ranks"] = r.failed;
  d["failed_original"] = r.failed_original;
  d["old_size"] = r.old_size;
  d["new_size"] = r.new_size;
  d["old_rank"] = r.old_rank;
  d["new_rank"] = r.new_rank;
  d["transparent"] = r.transparent;
  d["why_not"] = r.why_not;
  d["completed_up_to"] = r.hi;
  d["completed_everywhere_up_to"] = r.lo;
  d["adopted"] = r.adopted;
  d["redone"] = r.redone;
  d["first_seq_without"] = r.first_seq_without;
  d["first_ddp_step_without"] = r.first_ddp_step_without;
  d["ddp_step_partial"] = r.ddp_step_partial;
  d["broadcast_note"] = r.broadcast_note;
  d["ms"] = r.ms;
  d["line"] = r.line;
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "ftcc's c10d backend (use it through ftcc_torch)";
  py::class_<ProcessGroupFtcc, c10d::Backend, c10::intrusive_ptr<ProcessGroupFtcc>>(m, "ProcessGroupFtcc")
      .def_property_readonly("generation", &ProcessGroupFtcc::generation)
      .def_property_readonly("failed_ranks", &ProcessGroupFtcc::failedRanks)
      .def_property(
          "transparent", [](ProcessGroupFtcc& b) { return b.runner().transparent(); },
          [](ProcessGroupFtcc& b, bool on) { b.runner().set_transparent(on); })
      .def_property_readonly("group_name", [](ProcessGroupFtcc& b) { return b.runner().name(); })
      .def_property_readonly("members", [](ProcessGroupFtcc& b) { return b.runner().members(); })
      .def("survivor_handles", &ProcessGroupFtcc::survivor_handles, py::call_guard<py::gil_scoped_release>())
      .def("recoveries", [](ProcessGroupFtcc& b) {
        py::list out;
        for (const auto& r : b.runner().recoveries()) out.append(record_dict(r));
        return out;
      })
      .def("ddp_progress", [](ProcessGroupFtcc& b) {
        return py::make_tuple(b.runner().ddp_steps_started(), b.runner().ddp_steps_completed());
      });
  m.def(
      "create_backend",
      [](int rank, int size, double timeout_s, const std::string& group_name, std::vector<std::int64_t> global_ranks) {
        return c10::static_intrusive_pointer_cast<ProcessGroupFtcc>(
            ProcessGroupFtcc::create(rank, size, timeout_s, group_name, global_ranks));
      },
      py::arg("rank"), py::arg("size"), py::arg("timeout_s"), py::arg("group_name"), py::arg("global_ranks"),
      py::call_guard<py::gil_scoped_release>());
  m.def("started", [] { return Runtime::existing() != nullptr; });
  // The result blocks kept for reuse (host_block_pool.hpp): (free blocks, free bytes), for the tests.
  m.def("host_block_pool_state", [] {
    const auto s = ftcc::torch_backend::host_block_pool_state();
    return py::make_tuple(s.free_blocks, s.free_bytes);
  });
  m.def("settings_error", [] { return Runtime::settings_error(); });
  m.def("original_rank", [] {
    Runtime* rt = Runtime::existing();
    return rt ? rt->original_rank() : -1;
  });
  m.def("epoch", [] {
    Runtime* rt = Runtime::existing();
    return rt ? rt->epoch() : 0;
  });
  m.def("recoveries", [] {
    py::list out;
    if (Runtime* rt = Runtime::existing())
      for (const auto& r : rt->recoveries()) out.append(record_dict(r));
    return out;
  });
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

  // DDP (ftcc_torch/_ddp.py).
  m.def("install_ddp_hook", [](const std::shared_ptr<c10d::Reducer>& reducer,
                               const c10::intrusive_ptr<ProcessGroupFtcc>& backend) {
    auto hook = std::make_unique<DdpMeanHook>(backend);
    DdpMeanHook* raw = hook.get();
    reducer->register_comm_hook(std::move(hook));
    std::lock_guard<std::mutex> lock(g_hooks_mu);
    g_hooks[reducer.get()] = raw;
  });
  m.def("forget_ddp_hook", [](const std::shared_ptr<c10d::Reducer>& reducer) {
    std::lock_guard<std::mutex> lock(g_hooks_mu);
    g_hooks.erase(reducer.get());
  });
  m.def("ddp_hook_delegated", [](const std::shared_ptr<c10d::Reducer>& reducer) { return hook_of(reducer).delegated(); });
  m.def("delegate_ddp_hook", [](const std::shared_ptr<c10d::Reducer>& reducer, py::object state, py::object hook) {
    hook_of(reducer).set_delegate(std::make_unique<c10d::PythonCommHook>(std::move(state), std::move(hook)));
  });
}
