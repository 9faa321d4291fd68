#include "ftcc/recovery/mpi_failure_notice.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#if __has_include(<pmix.h>)
#include <pmix.h>
#define FTCC_HAVE_PMIX_H 1
#endif

namespace ftcc::recovery {

std::optional<MpiProcessName> my_mpi_process_name() {
  const char* ns = std::getenv("PMIX_NAMESPACE");  // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
  const char* rank = std::getenv("PMIX_RANK");     // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
  if (ns == nullptr || *ns == 0 || rank == nullptr || *rank == 0) return std::nullopt;
  char* end = nullptr;
  const unsigned long r = std::strtoul(rank, &end, 10);
  if (end == nullptr || *end != 0) return std::nullopt;
  return MpiProcessName{ns, static_cast<std::uint32_t>(r)};
}

#ifdef FTCC_HAVE_PMIX_H
namespace {
using NotifyFn = pmix_status_t (*)(pmix_status_t, const pmix_proc_t*, pmix_data_range_t, const pmix_info_t*, size_t,
                                   pmix_op_cbfunc_t, void*);

NotifyFn notify_fn() {
  static const NotifyFn fn = reinterpret_cast<NotifyFn>(dlsym(RTLD_DEFAULT, "PMIx_Notify_event"));
  return fn;
}

void load_proc(pmix_proc_t& p, const MpiProcessName& n) {
  std::memset(&p, 0, sizeof p);
  std::strncpy(p.nspace, n.nspace.c_str(), PMIX_MAX_NSLEN);
  p.rank = n.rank;
}
}  // namespace

bool can_notify_process_failed() { return notify_fn() != nullptr; }

bool notify_process_failed(const MpiProcessName& me, const MpiProcessName& failed) {
  const NotifyFn fn = notify_fn();
  if (fn == nullptr) return false;
  // The arguments live until PMIx says it is done with them (the callback), as the standard asks.
  struct Call {
    pmix_proc_t source, victim;
    pmix_info_t info;
  };
  auto* call = new Call;
  load_proc(call->source, me);
  load_proc(call->victim, failed);
  // The fields by hand, not PMIX_INFO_LOAD: its expansion may call into a PMIx library, and the
  // only one this process may use is the MPI's (the one dlsym found).
  std::memset(&call->info, 0, sizeof call->info);
  std::strncpy(call->info.key, PMIX_EVENT_AFFECTED_PROC, PMIX_MAX_KEYLEN);
  call->info.value.type = PMIX_PROC;
  call->info.value.data.proc = &call->victim;
  const pmix_status_t rc = fn(PMIX_ERR_PROC_ABORTED, &call->source, PMIX_RANGE_PROC_LOCAL, &call->info, 1,
                              [](pmix_status_t, void* cbdata) { delete static_cast<Call*>(cbdata); }, call);
  if (rc != PMIX_SUCCESS) delete call;  // PMIX_OPERATION_SUCCEEDED or an error: no callback comes
  return rc == PMIX_SUCCESS || rc == PMIX_OPERATION_SUCCEEDED;
}
#else
bool can_notify_process_failed() { return false; }
bool notify_process_failed(const MpiProcessName&, const MpiProcessName&) { return false; }
#endif

}  // namespace ftcc::recovery
