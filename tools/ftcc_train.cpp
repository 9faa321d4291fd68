// ftcc-train: train a model (data, pipeline or tensor parallel) that survives the death of ranks.
//
//   tools/ftcc-run -n 4 build/tools/ftcc-train --dataset digits --layers 64,64,10 --epochs 20
//       --inject kill:rank=2:step=40            (one command line)
//
// Exit status (recovery/job_outcome.hpp; docs/reliability.md, "Exit statuses"): 0 when the
// training finished (also after recoveries), 2 for bad flags or configuration (one clear line
// naming the problem; nothing written), 3 quorum lost, 4 a job-level error (one line naming it
// and the rank that saw it), 1 for a rank that left on a deadline. Ranks killed or crashed leave
// no status: tools/ftcc-run reports them (5, 6). Without ULFM fault tolerance (plain mpirun)
// it refuses to start unless --no-fault-tolerance is given.
#include <mpi.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ftcc/base/error.hpp"
#include "ftcc/comm/communicator.hpp"
#include "ftcc/comm/errors.hpp"
#include "ftcc/comm/ulfm.hpp"
#include "ftcc/recovery/fault_spec.hpp"
#include "ftcc/recovery/resilient_group.hpp"
#include "ftcc/recovery/run_job.hpp"
#include "ftcc/train/training_driver.hpp"
#include "ftcc/train/train_config.hpp"

namespace {

// Before MPI_Init the rank is only known from the launcher's environment.
bool first_rank() {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");  // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
  if (!r) r = std::getenv("PMI_RANK");                  // NOLINT(concurrency-mt-unsafe): no setenv in ftcc
  return !r || std::string(r) == "0";
}

// The choice flags as given; parse_choices turns them into the config's enums (and --layers into
// widths: a text, so that a second --layers is refused like any repeated flag instead of CLI11
// appending its widths to the first's).
struct ChoiceTexts {
  std::string parallel = "dp", schedule = "gpipe", activation = "relu", loss = "auto", optimizer = "sgd", device = "cpu", on_failure = "keep-global-batch";
  std::string verify_at_rest = "auto";
  std::string layers;
};

std::vector<std::int64_t> parse_layers(const std::string& text) {
  std::vector<std::int64_t> widths;
  if (text.empty()) return widths;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    std::size_t used = 0;
    std::int64_t w = 0;
    try {
      w = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FTCC_REQUIRE(!item.empty() && used == item.size())
        << "--layers '" << text << "': '" << item << "' is not a width (expected integers such as 64,64,10)";
    widths.push_back(w);
    if (comma == std::string::npos) return widths;
    at = comma + 1;
  }
}

void parse_choices(const ChoiceTexts& t, ftcc::train::TrainConfig& c) {
  namespace tr = ftcc::train;
  c.parallel = tr::parse_choice<tr::Parallel>("--parallel", t.parallel);
  c.schedule = tr::parse_choice<tr::Schedule>("--schedule", t.schedule);
  c.verify_at_rest = tr::parse_choice<tr::AtRest>("--verify-at-rest", t.verify_at_rest);
  c.activation = tr::parse_choice<tr::Activation>("--activation", t.activation);
  c.loss = tr::parse_choice<tr::LossKind>("--loss", t.loss);
  c.optimizer = tr::parse_choice<tr::OptimizerKind>("--optimizer", t.optimizer);
  c.device = tr::parse_choice<tr::Device>("--device", t.device);
  c.on_failure = tr::parse_choice<tr::OnFailure>("--on-failure", t.on_failure);
  c.layers = parse_layers(t.layers);
}

void add_flags(CLI::App& app, ftcc::train::TrainConfig& c, ChoiceTexts& t) {
  app.add_option("--parallel", t.parallel,
                 "dp (data parallel); pp and tp: model parallel; dp,pp and dp,tp: replicas of a pipeline or "
                 "tensor-parallel group (--pp-size / --tp-size ranks each)")
      ->capture_default_str()
      ->type_name("dp|pp|tp|dp,pp|dp,tp");  // checked by parse_choice (CLI11's set would print "{dp,pp,tp,dp,pp,dp,tp}")
  app.add_option("--pp-size", c.pp_size, "--parallel dp,pp: ranks per pipeline (the ranks must be a multiple)");
  app.add_option("--tp-size", c.tp_size, "--parallel dp,tp: ranks per tensor-parallel group (the ranks must be a multiple)");
  app.add_option("--schedule", t.schedule, "pipeline schedule (pp, dp,pp): gpipe (every forward, then every backward) | 1f1b (one forward, one backward: at most depth micro-batches held); the same parameters")
      ->check(CLI::IsMember({"gpipe", "1f1b"}))
      ->capture_default_str();
  app.add_option("--layers", t.layers, "layer widths, input first, output last (e.g. 64,64,10)")->type_name("W,W,...");
  app.add_option("--activation", t.activation, "relu | tanh | sigmoid")->check(CLI::IsMember({"relu", "tanh", "sigmoid"}))->capture_default_str();
  app.add_option("--loss", t.loss,
                 "auto (cross-entropy for a classification data set such as digits, mse otherwise) | mse | "
                 "cross-entropy (softmax over the last layer's outputs, PyTorch's nn.CrossEntropyLoss)")
      ->check(CLI::IsMember({"auto", "mse", "cross-entropy"}))
      ->capture_default_str();
  app.add_option("--dataset", c.dataset, "diabetes | digits | synthetic:N:IN:OUT | PATH.csv[.gz] | PATH.npy");
  app.add_option("--epochs", c.epochs, "epochs to train, at least 1 (default 10 when --steps is not given)");
  app.add_option("--steps", c.steps, "global steps to train instead of --epochs, at least 1");
  app.add_option("--batch", c.batch, "global batch size (split over the ranks)")->capture_default_str();
  app.add_option("--micro-batch", c.micro_batch, "micro-batch size: the unit of the data split and of --deterministic")->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate")->capture_default_str();
  app.add_option("--optimizer", t.optimizer, "sgd | adam | adamw")->check(CLI::IsMember({"sgd", "adam", "adamw"}))->capture_default_str();
  app.add_option("--momentum", c.momentum,
                 "SGD momentum (heavy ball; torch.optim.SGD's default is 0: pass --momentum 0 for plain SGD)")
      ->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay,
                 "weight decay: L2 for sgd and adam, decoupled for adamw (default 0; 0.01 with --optimizer adamw, "
                 "as torch.optim.AdamW)");
  app.add_option("--seed", c.seed, "seed of the weights, the split and the data order")->capture_default_str();
  app.add_option("--device", t.device, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_flag("--deterministic", c.deterministic,
               "bitwise-identical final weights for any rank count and any failures (dp: exact fixed-point gradient "
               "sums; pp: each stage sums the same micro-batches in the same order; dp,pp: the global batch's "
               "--micro-batches each whole on one replica, summed exactly; tp: fixed-order loops and exact sums over the "
               "hidden features; dp,tp: tp's loops per micro-batch, summed exactly over the replicas)");
  app.add_option("--on-failure", t.on_failure,
                 "keep-global-batch (default) | keep-local-batch (global batch shrinks with the world from the next epoch)")
      ->check(CLI::IsMember({"keep-global-batch", "keep-local-batch"}))->capture_default_str();
  app.add_option("--inject", c.inject,
                 std::string("inject a fault (repeatable). ") + ftcc::recovery::fault_spec_grammar());
  app.add_option("--hang-timeout", c.hang_timeout_s, "seconds of heartbeat silence before a rank is fenced (0 = off)")->capture_default_str();
  app.add_option("--checkpoint-dir", c.checkpoint_dir, "folder for checkpoints");
  app.add_option("--checkpoint-every", c.checkpoint_every, "write a checkpoint every N steps");
  app.add_option("--keep-checkpoints", c.keep_checkpoints,
                 "after each checkpoint, keep the newest N complete checkpoints in --checkpoint-dir and delete older "
                 "ones; 0 = keep all (the folder then grows by one checkpoint every --checkpoint-every steps)")
      ->capture_default_str();
  app.add_option("--resume", c.resume, "resume from the newest valid checkpoint in this folder (it must exist)");
  app.add_option("--init-weights", c.init_weights,
                 "start from the parameters of this .safetensors file (names 0.weight, 0.bias, 2.weight, ...: nn::mlp's "
                 "and PyTorch's nn.Sequential's), with fresh optimizer state at step 0");
  app.add_option("--log-json", c.log_json, "append one JSON object per step and per event to this file");
  app.add_option("--metrics-port", c.metrics_port, "serve Prometheus metrics on this port (0 = any free port)");
  app.add_option("--metrics-bind", c.metrics_bind, "address the metrics server binds to")->capture_default_str();
  app.add_flag("--quiet", c.quiet, "only recoveries and the summary line");
  app.add_option("--log-every", c.log_every, "print a line every N steps when stdout is not a terminal")->capture_default_str();
  app.add_option("--held-out", c.held_out, "fraction of the data kept for the eval metric")->capture_default_str();
  app.add_option("--bucket-mb", c.bucket_mb, "gradient bucket size in MiB")->capture_default_str();
  app.add_flag("--overlap,!--no-overlap", c.overlap,
               "dp on CPU: allreduce each gradient bucket as soon as backward has produced it (default), or "
               "all buckets after backward (--no-overlap, to measure what overlap hides)");
  app.add_option("--micro-batches", c.micro_batches, "pipeline micro-batches (--parallel pp, dp,pp)")->capture_default_str();
  app.add_option("--replicas", c.replicas, "buddy replicas of each rank's state (pp/tp, within each model replica)")->capture_default_str();
  app.add_option("--replicate-every", c.replicate_every, "refresh the buddy replicas every N steps (pp/tp)")->capture_default_str();
  app.add_option("--verify-every", c.verify_every,
                 "every N steps, compare the digests of the live replicas' parameters and optimizer state (dp, "
                 "dp,pp, dp,tp): a rank outvoted by a strict majority is excluded, every survivor rolls back to "
                 "the last verified state; 0: never")
      ->capture_default_str();
  app.add_option("--verify-at-rest", t.verify_at_rest,
                 "digest each rank's parameters and optimizer state when the optimizer writes them and check it "
                 "before they are next used, copied or checkpointed; a rank whose state changed gets the newest "
                 "copy (a replica's, or a buddy copy: the job rolls back to it), and leaves the second time: "
                 "auto (where no live replica can vote: pp or tp with one model replica) | on | off")
      ->capture_default_str();
  app.add_option("--straggler-factor", c.straggler_factor,
                 "at each --verify-every check, a rank whose own compute time per step is more than this many "
                 "times the median's is slow")
      ->capture_default_str();
  app.add_option("--straggler-window", c.straggler_window,
                 "a rank slow at this many checks in a row is a straggler: reported (and evicted with "
                 "--evict-stragglers)")
      ->capture_default_str();
  app.add_flag("--verify-reductions", c.verify_reductions,
               "checksum every contribution to the replicas' gradient sum and check the sum against them (exact "
               "under --deterministic): a wrong sum is repeated once; wrong again, a probe of the links names the "
               "rank whose data arrive changed, which is excluded (otherwise the job stops with exit status 4)");
  app.add_flag("--evict-stragglers", c.evict_stragglers,
               "exclude a straggler: always when a hot spare or a respawn can take its place, otherwise only "
               "when the job is predicted faster without it");
  app.add_option("--spares", c.spares,
                 "hot spares: the last N processes of the job train nothing until a rank is lost, then one "
                 "takes its place, its rank and its data shard, with the state streamed from the survivors "
                 "(world size back to full); with none left the job shrinks")
      ->capture_default_str();
  app.add_option("--respawn", c.respawns,
                 "start up to N new processes over the run (MPI_Comm_spawn of this command) to fill places no "
                 "hot spare was left for; 0: shrink instead")
      ->capture_default_str();
}

// Without ULFM fault tolerance (plain mpirun, or an MPI without ULFM) a failed rank ends the job:
// refused unless --no-fault-tolerance says that is what the user wants. Returns why it is off
// ("" when it is on).
std::string check_fault_tolerance(const ftcc::train::TrainConfig& cfg, bool no_fault_tolerance) {
  if (ftcc::comm::has_ulfm()) return "";
  const bool compiled = ftcc::comm::ulfm_compiled();
  std::string why = compiled ? "not launched with --with-ft ulfm" : "this ftcc-train was built against an MPI without ULFM";
  const std::string fix = compiled ? "launch with tools/ftcc-run" : "run tools/setup and rebuild";
  if (!cfg.inject.empty())
    throw ftcc::InvalidArgument("--inject needs ULFM fault tolerance, which is off in this run (" + why + "): " + fix);
  if (!no_fault_tolerance)
    throw ftcc::InvalidArgument("ULFM fault tolerance is off in this run (" + why + "), so a failed rank would end the job: " +
                                fix + ", or pass --no-fault-tolerance to train without it");
  return why;
}

// --log-json must be appendable by whichever rank reports (rank 0 here); checked without
// creating or touching the file. Returns the problem ("" when fine).
std::string log_path_problem(const std::string& path) {
  if (path.empty()) return "";
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (fs::exists(p, ec)) {
    if (fs::is_directory(p, ec)) return "it is a folder";
    if (access(path.c_str(), W_OK) != 0) return std::string("cannot append to it: ") + std::strerror(errno);  // NOLINT(concurrency-mt-unsafe): one thread here
    return "";
  }
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) return "the folder '" + dir.string() + "' does not exist";
  if (access(dir.c_str(), W_OK | X_OK) != 0) return "cannot create it in '" + dir.string() + "': " + std::strerror(errno);  // NOLINT(concurrency-mt-unsafe): one thread here
  return "";
}

// --epochs and --steps are two ways to say how long the run is: one of them (or neither: 10
// epochs), each at least 1. "--epochs 0 --steps 50" is both, not "steps, with epochs off".
void check_run_length(const CLI::App& app, const ftcc::train::TrainConfig& c) {
  const bool epochs = app.count("--epochs") > 0, steps = app.count("--steps") > 0;
  if (epochs && steps)
    throw ftcc::InvalidArgument("--epochs " + std::to_string(c.epochs) + " --steps " + std::to_string(c.steps) +
                                ": give --epochs or --steps, not both (the run's length is one of them)");
  // A given 0 is not "unset" (the config's 0): validate() then names the range.
  if (epochs && c.epochs == 0)
    throw ftcc::InvalidArgument("--epochs must be in [1, " + std::to_string(ftcc::train::kMaxEpochs) + "], got 0");
  if (steps && c.steps == 0)
    throw ftcc::InvalidArgument("--steps must be in [1, " + std::to_string(ftcc::train::kMaxSteps) + "], got 0");
}

// A flag in seconds: finite, in (0, 1e6] (or [0, 1e6] where 0 turns it off): past 1e6 s the
// conversion to milliseconds is no deadline anyone means, and nan or inf used to pass.
void check_seconds(const char* flag, double v, bool given, bool zero_is_off) {
  if (!given) return;
  const bool ok = std::isfinite(v) && v <= 1e6 && (zero_is_off ? v >= 0 : v > 0);
  if (!ok) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", v);
    throw ftcc::InvalidArgument(std::string(flag) + " must be a number of seconds in " + (zero_is_off ? "[0" : "(0") +
                                ", 1e6]" + (zero_is_off ? " (0 = off)" : "") + ", got " + got);
  }
}

// Every rank checks its own flags; the verdicts are gathered before anything collective, so a
// rank whose flags are refused never leaves alone while the others wait for it (an MPMD launch
// with different flags per rank). The lowest refusing rank prints its reason, once.
bool configuration_accepted(const std::string& error, int rank) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int mine = error.empty() ? 0 : 1;
  std::vector<int> all(static_cast<size_t>(size));
  MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int first = -1, refused = 0;
  for (int r = 0; r < size; ++r)
    if (all[static_cast<size_t>(r)]) {
      if (first < 0) first = r;
      ++refused;
    }
  if (first < 0) return true;
  if (rank == first) {
    if (refused == size)
      std::fprintf(stderr, "ftcc-train: %s\n", error.c_str());
    else  // some ranks accepted their flags: they were started differently
      std::fprintf(stderr,
                   "ftcc-train: rank %d: %s (ranks were started with different configurations: %d of %d accepted theirs)\n",
                   rank, error.c_str(), size - refused, size);
  }
  return false;
}

// Rank 0's verdict on what only it checks, the same on every rank.
bool rank0_accepts(const std::string& error, int rank) {
  int bad = error.empty() ? 0 : 1;
  MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (bad && rank == 0) std::fprintf(stderr, "ftcc-train: %s\n", error.c_str());
  return !bad;
}

}  // namespace

int main(int argc, char** argv) {
  ftcc::train::TrainConfig cfg;
  bool no_fault_tolerance = false;
  double ulfm_timeout_s = 0, progress_timeout_s = 0;  // 0: FTCC_ULFM_TIMEOUT_S or 60 s; off
  CLI::App app{"ftcc-train: training that survives failed ranks (run it under tools/ftcc-run)"};
  ChoiceTexts choices;
  add_flags(app, cfg, choices);
  app.add_flag("--no-fault-tolerance", no_fault_tolerance,
               "train even when ULFM fault tolerance is off (plain mpirun, or an MPI without ULFM), which is "
               "otherwise refused; a failed rank then ends the job. No effect under tools/ftcc-run");
  app.add_option("--ulfm-timeout", ulfm_timeout_s,
                 "seconds a rank may wait in MPIX_Comm_shrink/agree before it leaves by itself, in (0, 1e6] "
                 "(default: FTCC_ULFM_TIMEOUT_S, else 60)");
  app.add_option("--progress-timeout", progress_timeout_s,
                 "a rank that starts no step for this many seconds SIGKILLs itself, in [0, 1e6] (0 = off, the default)");
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      if (first_rank()) std::printf("%s", app.help().c_str());
      return 0;
    }

  // MPI first, so a bad flag is reported once and every rank leaves through MPI_Finalize with
  // status 2 (a launcher may drop the output of ranks that exit early). Nothing is read from or
  // written to --log-json, --checkpoint-dir or --resume before the flags are accepted on all ranks.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string error, ft_off;
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      throw ftcc::InvalidArgument(std::string(e.what()) + " (see --help)");
    }
    check_run_length(app, cfg);
    check_seconds("--ulfm-timeout", ulfm_timeout_s, app.count("--ulfm-timeout") > 0, /*zero_is_off=*/false);
    check_seconds("--progress-timeout", progress_timeout_s, true, /*zero_is_off=*/true);
    // The environment is checked like the flags, here, so that every rank refuses it alike and
    // before any communication (comm/ would throw the same at the first communicator).
    ftcc::comm::default_timeout_s();
    ftcc::comm::check_shm_backing_setting();
    // AdamW's default weight decay is PyTorch's (0.01); "adamw" with none would be plain Adam.
    parse_choices(choices, cfg);
    if (cfg.optimizer == ftcc::train::OptimizerKind::adamw && app.count("--weight-decay") == 0) cfg.weight_decay = 0.01;
    cfg.validate();
    ft_off = check_fault_tolerance(cfg, no_fault_tolerance);
    if (cfg.hang_timeout_s != 0 && cfg.hang_timeout_s < 0.1)
      throw ftcc::InvalidArgument("--hang-timeout " + std::to_string(cfg.hang_timeout_s) +
                                  ": shorter than 0.1 s a heartbeat cannot tell a hang from its own period (20 ms) and "
                                  "would fence healthy ranks; use at least 0.1, or 0 to turn it off");
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm spawner = MPI_COMM_NULL;  // a process started by a respawn runs the job's command line:
    MPI_Comm_get_parent(&spawner);     // its own world is only the new processes
    for (const auto& f : ftcc::recovery::parse_fault_specs(cfg.inject))
      if (spawner == MPI_COMM_NULL && f.rank >= world + cfg.respawns)  // new processes follow the job's ranks
        throw ftcc::InvalidArgument("--inject '" + f.text + "' names rank " + std::to_string(f.rank) + ", but the job has " +
                                    std::to_string(world + cfg.respawns) + " rank(s)" +
                                    (cfg.respawns > 0 ? " counting the respawns" : "") + ": it would never fire");
  } catch (const ftcc::InvalidArgument& e) {
    error = e.what();
  }
  std::string log_problem;  // rank 0 is the one that writes the log
  if (error.empty() && rank == 0 && !(log_problem = log_path_problem(cfg.log_json)).empty())
    log_problem = "--log-json '" + cfg.log_json + "': " + log_problem;
  if (!configuration_accepted(error, rank) || !rank0_accepts(log_problem, rank)) {
    MPI_Finalize();
    ftcc::recovery::job_record::refused(rank, 2);  // for tools/ftcc-run, should mpirun itself fail
    return 2;
  }
  if (!ft_off.empty() && rank == 0)
    std::fprintf(stderr, "ftcc-train: warning: ULFM fault tolerance is off in this run (%s; --no-fault-tolerance): a failed rank ends the job\n",
                 ft_off.c_str());
  ftcc::recovery::GroupOptions go;
  go.hang_timeout = std::chrono::milliseconds(static_cast<long long>(cfg.hang_timeout_s * 1000));
  go.ulfm_timeout_s = ulfm_timeout_s;
  go.progress_timeout = std::chrono::milliseconds(static_cast<long long>(progress_timeout_s * 1000));
  go.faults = ftcc::recovery::parse_fault_specs(cfg.inject);  // validated above
  go.verbose = false;  // the trainer's log prints each recovery
  go.allow_without_ulfm = !ft_off.empty();  // --no-fault-tolerance, checked above
  go.spares = cfg.spares;
  go.respawns = cfg.respawns;
  // Exit statuses (recovery/job_outcome.hpp): 0 finished, 2 configuration error, 3 quorum lost,
  // 4 job-level error (agreed by every survivor, one line), 1 a rank that left on a deadline.
  return ftcc::recovery::run_job(MPI_COMM_WORLD, go,
                                 [&](ftcc::recovery::ResilientGroup& group) { ftcc::train::run_training(cfg, group); },
                                 {.name = "ftcc-train"});
}
