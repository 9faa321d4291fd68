// A program that embeds ftcc the way a user would: installed headers and library, found with
// `pkg-config --cflags --libs ftcc`, built with the MPI's wrapper (tests/embed/embed_test.sh, 3
// ranks). It uses each layer a user meets:
//  1. a collective on a communicator of its own (our allreduce, checked against the closed form);
//  2. a few training steps of a small MLP on the engine (loss must go down), and an evaluation
//     under NoGradGuard (no graph recorded);
//  3. a resilient loop (run_step_loop inside run_job) that loses rank 1 and finishes on the others.
// Only the umbrella header is included: it must hold everything used here.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include <ftcc/ftcc.hpp>          // the umbrella header: every layer's public API
#include <ftcc/ftcc_config.hpp>   // FTCC_HAVE_ULFM, FTCC_HAVE_CUDA of the installed build

using namespace ftcc;

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  // 1. A collective: rank r contributes r + 1; the sum is n(n+1)/2.
  bool ok = true;
  {
    auto world = comm::Communicator::duplicate(MPI_COMM_WORLD);
    double mine = rank + 1.0, sum = 0;
    comm::allreduce(world, &mine, &sum, 1, comm::DType::f64, comm::ReduceOp::sum);
    ok = ok && sum == size * (size + 1) / 2.0;
  }

  // 2. The engine: fit y = 2x on 16 points with a 1-8-1 MLP and SGD; the loss must fall.
  {
    auto model = nn::mlp({1, 8, 1}, nn::Activation::Tanh, /*seed=*/3);
    optim::SGD opt(model->named_parameters(), {.lr = 0.1, .momentum = 0.9});
    std::vector<float> xs(16), ys(16);
    for (int i = 0; i < 16; ++i) xs[i] = static_cast<float>(i) / 16.0f, ys[i] = 2 * xs[i];
    auto x = tensor::Tensor::from_vector({16, 1}, std::span<const float>(xs));
    auto y = tensor::Tensor::from_vector({16, 1}, std::span<const float>(ys));
    double first = 0, last = 0;
    for (int step = 0; step < 50; ++step) {
      opt.zero_grad();
      auto loss = tensor::mse_loss((*model)(x), y);
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item();
    }
    ok = ok && last < first / 10;
    // Evaluation records no graph: under NoGradGuard an op's output does not require grad.
    tensor::NoGradGuard no_grad;
    ok = ok && !tensor::mse_loss((*model)(x), y).requires_grad();
  }

  // 3. A resilient loop that loses rank 1 at step 3 and finishes on the others.
  recovery::GroupOptions opt;
  opt.faults = recovery::parse_fault_specs({"kill:rank=1:step=3"});
  return recovery::run_job(MPI_COMM_WORLD, opt, [&](recovery::ResilientGroup& g) {
    std::int64_t step = 0;  // the loop's state: a recovery here keeps it (nothing to restore)
    recovery::run_step_loop(g, {.done = [&] { return step >= 10; },
                                .step = [&] { return step; },
                                .body = [&] {
                                  double one = 1, n = 0;
                                  comm::allreduce(g.comm(), &one, &n, 1, comm::DType::f64, comm::ReduceOp::sum);
                                  g.set_committed_step(step++);
                                }});
    ok = ok && g.size() == size - 1;
    if (g.rank() == 0)
      std::printf("embed_example: %s ftcc %s, ulfm=%d, %d ranks, %d after the loss of rank 1\n", ok ? "ok" : "WRONG",
                  FTCC_VERSION, comm::has_ulfm() ? 1 : 0, size, g.size());
    if (!ok) throw std::runtime_error("embed_example: a check failed");
  }, {.name = "embed_example"});
}
