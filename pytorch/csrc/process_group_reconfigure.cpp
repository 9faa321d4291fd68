// pytorch/csrc/process_group_reconfigure.cpp: torch's reconfigure contract on an ftcc group
// (get_reconfigure_handle, reconfigure, abort; survivor_handles): process_group_ftcc.hpp states it.
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <string>
#include <variant>

#include "ftcc_work.hpp"
#include "process_group_ftcc.hpp"

namespace ftcc::torch_backend {

namespace {

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// The job rank a handle names ("ftcc:<job rank>", and ":<pid>@<host>" in the handle a process
// gives of itself: only the rank is used, the rest says to a person which process it was).
int job_rank_of(const std::string& h, int job_size) {
  const std::string prefix = "ftcc:";
  TORCH_CHECK(h.rfind(prefix, 0) == 0, "ftcc: reconfigure: '", h,
              "' is not an ftcc handle (dist._get_reconfigure_handle() of an ftcc group makes one)");
  std::size_t end = h.find(':', prefix.size());
  const std::string digits = h.substr(prefix.size(), end == std::string::npos ? std::string::npos : end - prefix.size());
  TORCH_CHECK(!digits.empty() && digits.size() < 10 && std::all_of(digits.begin(), digits.end(), ::isdigit),
              "ftcc: reconfigure: the handle '", h, "' does not name a rank of the job");
  const int r = std::stoi(digits);
  TORCH_CHECK(r < job_size, "ftcc: reconfigure: the handle '", h, "' names rank ", r, " but the job has ", job_size,
              " processes (a handle of another job?)");
  return r;
}

}  // namespace

c10d::ReconfigureHandle ProcessGroupFtcc::get_reconfigure_handle() const {
  Runtime* rt = Runtime::existing();
  TORCH_CHECK(rt, "ftcc: get_reconfigure_handle: the backend has shut down");
  return "ftcc:" + std::to_string(rt->original_rank()) + ":" + std::to_string(::getpid()) + "@" + host_name();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFtcc::reconfigure(const c10d::ReconfigureOptions& opts) {
  Runtime* rt = Runtime::existing();
  TORCH_CHECK(rt, "ftcc: reconfigure: the backend has shut down");
  TORCH_CHECK(!used_uuids_.count(opts.uuid), "ftcc: reconfigure: uuid ", opts.uuid,
              " was already used on this group; pass a fresh uuid on every reconfigure");
  std::vector<int> members;
  std::visit(
      [&](const auto& hs) {
        for (const auto& h : hs) members.push_back(job_rank_of(h, rt->job_size()));
      },
      opts.handles);
  // A set lets the backend number the ranks: by their rank in the job.
  if (std::holds_alternative<std::unordered_set<c10d::ReconfigureHandle>>(opts.handles))
    std::sort(members.begin(), members.end());
  TORCH_CHECK(!members.empty(), "ftcc: reconfigure: no handles (pass every member's, this process's included)");
  {
    std::vector<int> sorted = members;
    std::sort(sorted.begin(), sorted.end());
    auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    TORCH_CHECK(dup == sorted.end(), "ftcc: reconfigure: two handles name rank ", dup == sorted.end() ? 0 : *dup,
                " of the job; pass one handle per member");
  }
  TORCH_CHECK(std::find(members.begin(), members.end(), rt->original_rank()) != members.end(),
              "ftcc: reconfigure: this process's handle (", get_reconfigure_handle(), ") is not among the ",
              members.size(), " handles; only the members call reconfigure");
  used_uuids_.insert(opts.uuid);
  // Every member derives the same name from the same uuid (MPI_Comm_create_group's tag).
  std::string name = base_name_ + "#" + std::to_string(opts.uuid);
  const double timeout_s = opts.timeout ? static_cast<double>(opts.timeout->count()) / 1000.0 : rt->timeout_s();
  TORCH_CHECK(timeout_s > 0, "ftcc: reconfigure: a timeout of ", timeout_s, " s; give a positive one (or none)");
  std::shared_ptr<GroupRunner> next;
  try {
    next = rt->reconfigure_group(name, members, opts.uuid, timeout_s);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "ftcc: ", e.what());
  }
  std::shared_ptr<GroupRunner> old = runner_;
  old->clear_on_resize(this);
  runner_ = next;
  generation_ = next->generation();
  aborted_ = false;
  rank_ = next->rank();
  size_ = next->size();
  runner_->set_on_resize(this, [this](int rank, int size) {
    rank_ = rank;
    size_ = size;
  });
  if (old != rt->world()) old->stop("the process group was reconfigured");
  auto work = c10::make_intrusive<FtccWork>(getRank(), c10d::OpType::UNKNOWN, "reconfigure", std::vector<at::Tensor>{},
                                            ++sequence_);
  work->complete(nullptr, at::Tensor());
  return work;
}

std::vector<std::string> ProcessGroupFtcc::survivor_handles() const {
  Runtime* rt = Runtime::existing();
  TORCH_CHECK(rt, "ftcc: survivor_handles: the backend has shut down");
  const std::vector<int> alive = rt->universe_members();
  std::vector<std::string> out;
  for (int m : runner_->members())
    if (std::find(alive.begin(), alive.end(), m) != alive.end()) out.push_back("ftcc:" + std::to_string(m));
  return out;
}

void ProcessGroupFtcc::abort() {
  // The calls queued now raise; the group takes none until it is reconfigured. The default
  // group's runner stays (the job's end runs on it); its calls are refused here.
  aborted_ = true;
  Runtime* rt = Runtime::existing();
  if (rt && runner_ != rt->world()) runner_->stop("the process group was aborted");
}

}  // namespace ftcc::torch_backend
