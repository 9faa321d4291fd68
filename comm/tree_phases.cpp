#include "ftcc/comm/tree_phases.hpp"

#include <algorithm>
#include <deque>

#include "ftcc/comm/blocks.hpp"
#include "ftcc/comm/reduce_kernels.hpp"

namespace ftcc::comm::detail {

TreeShape binomial_tree(int rank, int size, int root, bool for_broadcast) {
  TreeShape t;
  const int vr = mod(rank - root, size);
  for (int mask = 1; mask < size; mask <<= 1) {
    if (vr & mask) {
      t.parent = mod(vr - mask + root, size);
      break;
    }
    if (vr + mask < size) t.children.push_back(mod(vr + mask + root, size));
  }
  if (for_broadcast) std::reverse(t.children.begin(), t.children.end());
  return t;
}

TreeShape chain_tree(int rank, int size, int root) {
  TreeShape t;
  const int vr = mod(rank - root, size);
  if (vr > 0) t.parent = mod(rank - 1, size);
  if (vr + 1 < size) t.children.push_back(mod(rank + 1, size));
  return t;
}

void tree_broadcast(OpContext& ctx, void* buf, std::size_t bytes, const TreeShape& tree, const TreeParams& p) {
  if (bytes == 0 || ctx.size() == 1) return;
  auto* data = static_cast<std::byte*>(buf);
  const std::size_t m = segments_for(bytes, 1, p.segment_bytes);
  const std::size_t W = static_cast<std::size_t>(std::max(1, p.window));
  const std::size_t kids = tree.children.size();
  const bool root = tree.parent < 0;

  std::vector<OpContext::Handle> rh(W);
  std::deque<OpContext::Handle> sends;
  std::size_t posted = 0, have = root ? m : 0, forwarded = 0;
  while (have < m || forwarded < m || !sends.empty()) {
    bool progress = false;
    while (!root && posted < m && posted - forwarded < W) {
      const Block seg = balanced_part(bytes, m, posted);
      rh[posted % W] = ctx.irecv(data + seg.offset, seg.count, tree.parent);
      ++posted;
      progress = true;
    }
    while (have < posted && ctx.test(rh[have % W])) {
      ++have;
      progress = true;
    }
    // Forward each arrived segment to every child, at most W segments' worth of sends in flight.
    while (forwarded < have && sends.size() + kids <= W * std::max<std::size_t>(kids, 1)) {
      const Block seg = balanced_part(bytes, m, forwarded);
      for (int c : tree.children) sends.push_back(ctx.isend(data + seg.offset, seg.count, c));
      ++forwarded;
      progress = true;
    }
    while (!sends.empty() && ctx.test(sends.front())) {
      sends.pop_front();
      progress = true;
    }
    if (progress)
      ctx.progressed();
    else
      ctx.idle();
  }
}

void tree_reduce(OpContext& ctx, const void* src_v, void* acc_v, std::size_t count, DType dtype, ReduceOp op,
                 const TreeShape& tree, const TreeParams& p) {
  const auto* src = static_cast<const std::byte*>(src_v);
  auto* acc = static_cast<std::byte*>(acc_v);
  const std::size_t esz = dtype_size(dtype);
  const std::size_t kids = tree.children.size();
  const bool root = tree.parent < 0;
  if (count == 0) return;
  if (kids == 0 && root) {  // a single rank
    if (acc != src) std::copy(src, src + count * esz, acc);
    return;
  }
  const std::size_t m = segments_for(count, esz, p.segment_bytes);
  const std::size_t W = static_cast<std::size_t>(std::max(1, p.window));
  const std::size_t seg_cap = (count + m - 1) / m;
  std::byte* tmp = kids ? ctx.scratch(kids * W * seg_cap * esz) : nullptr;
  if (kids && !acc) acc = ctx.scratch(count * esz, 1);
  auto slot = [&](std::size_t child, std::size_t j) { return tmp + ((child * W) + j % W) * seg_cap * esz; };

  // rh[child][j % W]: receive of segment j from that child.
  std::vector<OpContext::Handle> rh(kids * W);
  std::deque<OpContext::Handle> sends;
  std::size_t posted = 0;    // segments whose receives (from every child) are posted
  std::size_t reduced = 0;   // segments combined with every child
  std::size_t next_kid = 0;  // next child to combine for segment `reduced`
  std::size_t sent = 0;      // segments sent to the parent
  const std::size_t to_send = root ? 0 : m;
  while (reduced < (kids ? m : 0) || sent < to_send || !sends.empty()) {
    bool progress = false;
    while (kids && posted < m && posted - reduced < W) {
      const Block seg = balanced_part(count, m, posted);
      for (std::size_t c = 0; c < kids; ++c)
        rh[c * W + posted % W] = ctx.irecv(slot(c, posted), seg.count * esz, tree.children[c]);
      ++posted;
      progress = true;
    }
    // Combine in a fixed order: segment by segment, children in tree order.
    while (reduced < posted && ctx.test(rh[next_kid * W + reduced % W])) {
      const Block seg = balanced_part(count, m, reduced);
      std::byte* out = acc + seg.offset * esz;
      const std::byte* mine = next_kid == 0 ? src + seg.offset * esz : out;
      reduce(out, mine, slot(next_kid, reduced), seg.count, dtype, op);
      if (++next_kid == kids) {
        next_kid = 0;
        ++reduced;
      }
      progress = true;
    }
    const std::size_t ready = kids ? reduced : m;
    while (sent < to_send && sent < ready && sends.size() < W) {
      const Block seg = balanced_part(count, m, sent);
      const std::byte* from = (kids ? acc : src) + seg.offset * esz;
      sends.push_back(ctx.isend(from, seg.count * esz, tree.parent));
      ++sent;
      progress = true;
    }
    while (!sends.empty() && ctx.test(sends.front())) {
      sends.pop_front();
      progress = true;
    }
    if (progress)
      ctx.progressed();
    else
      ctx.idle();
  }
}

}  // namespace ftcc::comm::detail
