#include "ftcc/train/wire_flip.hpp"

#include <cstdio>
#include <cstring>
#include <string_view>

#include "ftcc/comm/communicator.hpp"

namespace ftcc::train {
namespace {
constexpr std::size_t kMinBytes = 256;  // a gradient bucket's message, not a scale or a flag

bool in_gradient_sum(std::string_view op) {
  constexpr std::string_view kAllreduce = "allreduce";
  return op == "link_probe" || (op.size() >= kAllreduce.size() && op.substr(op.size() - kAllreduce.size()) == kAllreduce);
}
}  // namespace

WireFlip::WireFlip(const std::vector<recovery::FaultSpec>& specs, int rank) : rank_(rank) {
  for (const auto& f : specs)
    if (f.kind == recovery::FaultKind::wireflip) specs_.push_back({f});
  if (specs_.empty()) return;
  comm::Communicator::set_global_receive_hook(
      [this](const char* op, int tag, void* buf, std::size_t bytes) { on_receive(op, tag, buf, bytes); });
}

WireFlip::~WireFlip() {
  if (!specs_.empty()) comm::Communicator::set_global_receive_hook(nullptr);
}

int WireFlip::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const Spec& s : specs_) n += s.fired;
  return n;
}

void WireFlip::on_receive(const char* op, int tag, void* buf, std::size_t bytes) {
  const std::int64_t step = step_.load(std::memory_order_acquire);
  if (step < 0 || bytes < kMinBytes || !in_gradient_sum(op)) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (Spec& s : specs_) {
    if (step < s.f.step || s.fired >= s.f.times || tag == s.last_tag) continue;
    s.last_tag = tag;
    ++s.fired;
    std::uint64_t word;
    auto* at = static_cast<std::byte*>(buf) + (bytes / 2 / 8) * 8;
    std::memcpy(&word, at, 8);
    word ^= std::uint64_t{1} << s.f.bit;
    std::memcpy(at, &word, 8);
    if (s.fired == 1)
      std::fprintf(stderr, "ftcc: fault injection on rank %d at step %lld: %s\n", rank_, static_cast<long long>(step),
                   s.f.text.c_str());
    return;  // one flip per message
  }
}

}  // namespace ftcc::train
