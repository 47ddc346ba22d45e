// The job commands of `wanlab`: run, bench, simulate, plan, memory, launch, analyze and
// import-trace (subcommand.hpp).
#include "subcommand.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_command.hpp"
#include "commands.hpp"
#include "evidence_commands.hpp"
#include "launch_command.hpp"
#include "memory_command.hpp"
#include "plan_command.hpp"
#include "run_command.hpp"
#include "simulate_command.hpp"
#include "wanlab/workload/baselines.hpp"

namespace wanlab::cli {
namespace {

std::unique_ptr<Subcommand> subcommand(CLI::App* cmd, bool remote, std::function<int(const Invocation&)> run) {
  return std::make_unique<Subcommand>(cmd, remote, std::move(run));
}

// The simulator's flags, on simulate and on bench (for --mode simulate, both, ns3).
void add_sim_flags(CLI::App* cmd, SimFlags& f) {
  cmd->add_option("--feedback-rounds", f.feedback_rounds,
                  "Simulator, with a prefill load: simulations at most while BubbleTea's waits are fed back into "
                  "training until they are stable (1: not fed back; default 4; docs/bubbletea.md)")
      ->check(CLI::Range(1, 16));
  cmd->add_option("--lan-rate", f.lan_rate,
                  "Simulator: each node's link to its DC's network, each direction, e.g. 10Gbit (default: the "
                  "topology's LAN rate x scale; unshaped LANs are unlimited there)");
  cmd->add_option("--tcp-window", f.tcp_window,
                  "Simulator: the most one TCP connection keeps in flight, e.g. 3MiB; a connection's rate stays "
                  "below window / RTT; 0: no ceiling (default: what the lab runs with, the scenario's tcp_window x "
                  "scale, or 3MiB, Linux's default buffers)");
  cmd->add_flag("--slow-start", f.slow_start,
                "Simulator: every WAN message a flow whose window starts at 10 segments and doubles every RTT "
                "(kept between messages unless the scenario sets tcp_slow_start_after_idle), max-min with the "
                "others, instead of the paced model (--bursts)");
  cmd->add_option("--bursts", f.bursts,
                  "Simulator: how messages that fit in their TCP windows cross a WAN link: paced (default: each "
                  "TCP connection sends within its congestion window at Linux's pacing rate into the link's FIFO "
                  "queue, with slow start, HyStart, CUBIC's window and drop-tail loss; the link sends its queue in "
                  "order; its work grows with simulated time x links: 7B across three DCs at 16,368 GPUs takes about "
                  "0.65 s of wall time per simulated iteration under fair, 1.3 s under atlas on a quiet host "
                  "(bench/results/2026-11-27-sim-speed.md); see --paced-piece, --paced-stream), shared "
                  "(max-min flows with the others; faster) or fifo (each leaves at once and the link serves them "
                  "whole in arrival order, with the lab's queue limit: what overflows is sent again after an RTO)")
      ->check(CLI::IsMember({"paced", "shared", "fifo"}));
  cmd->add_flag("--no-acks", f.no_acks,
                "Simulator: ACKs take no capacity (default: each WAN flow's ACKs, one 66-byte frame per two "
                "segments, 2.2 % of its wire bytes, cross the reverse link at that fraction of its rate)");
  cmd->add_option("--paced-piece", f.paced_piece,
                  "Simulator, --bursts paced: the model's step, e.g. 0.25ms (default 1ms): what enters a link's "
                  "queue is cut into pieces this long, the link sends a piece once it is whole, and ACKs come back "
                  "on this grid (long pieces, with many messages entering a link, shorter in proportion). A finer step "
                  "costs time in proportion; results move with it: two-dc-1b fair-k4 by 6 % at 0.1 ms, 7B across "
                  "three DCs at 10x the WAN rates at 384 GPUs fair-k4 by 4 % at 0.1 ms, at 1,536 GPUs atlas by "
                  "1.3 % (bench/results/2026-12-03-allreduce-tcp.md). bench.md's \"Model sensitivity\" table shows how "
                  "much yours do (step / 4, the other burst models, the compute jitter x 10)")
      ->type_name("DURATION");
  cmd->add_option("--paced-stream", f.paced_stream,
                  "Simulator, --bursts paced, faster: while every message entering a link is past slow start with "
                  "room in its window for all the rest of it, what enters goes in pieces this long (e.g. 8ms) that "
                  "the link sends as they fill, instead of 1 ms pieces; ACKs still come back per millisecond. 7B "
                  "across three DCs under atlas at 16,368 GPUs: 0.94 s per iteration instead of 1.31 s; results move "
                  "by up to 1 % at paper scale, 4 % in sub-second runs (docs/simulator.md, \"What it models\"). "
                  "Default 0: off")
      ->type_name("DURATION");
  cmd->add_option("--compute-jitter", f.compute_jitter,
                  "Simulator: each compute op takes its modeled time x (1 + u), u uniform in [-F, F], drawn per op "
                  "from the scenario's seed (default 0.001: identical replicas are otherwise in a lockstep that "
                  "no real run keeps, and that a FIFO queue does not keep either once anything sets them apart; "
                  "0: exactly the FLOP model's times; docs/simulator.md, \"Results\")")
      ->type_name("F");
  cmd->add_option("--timeline", f.timeline,
                  "Simulator: timeline.json with every GPU (full), one GPU per stage (per-stage) or none; auto "
                  "(default): full up to 256 GPUs, else per-stage")
      ->check(CLI::IsMember({"auto", "full", "per-stage", "none"}));
  cmd->add_flag("--no-sensitivity", f.no_sensitivity,
                "Simulator: leave out the sensitivity runs. By default (--bursts paced) each variant runs again "
                "with the paced model's step / 4, under --bursts shared and fifo, and with --compute-jitter x 10, and "
                "bench.md's \"Model sensitivity\" table says how far its iteration time moves and whether its "
                "verdict against the baseline holds (about 3-7x the default run's time on top; the table's last line "
                "says how much)");
}

}  // namespace

std::unique_ptr<Subcommand> add_run(CLI::App& app) {
  struct State {
    RunArgs run;
  };
  auto s = std::make_shared<State>();
  CLI::App* run_cmd = nullptr;
  {
    auto& [run] = *s;
    run_cmd = app.add_subcommand(
        "run", "Run a training scenario on its lab (brought up first if it is not, and down again afterwards "
               "unless --keep-lab); writes summary.json, timeline.json and links.csv to the run folder");
    run_cmd->add_option("scenario", run.scenario, "Scenario file (JSON, see bench/scenarios/README.md)")->required();
    run_cmd->add_option("--out", run.out, "Run folder (default: runs/SCENARIO-YYYYMMDD-HHMMSS)");
    run_cmd->add_option("--connections", run.connections, "TCP connections per WAN peer (overrides the scenario)")
        ->check(CLI::Range(1, 64));
    run_cmd->add_option("--backend", run.backend, "Shaping backend if the lab must be brought up: auto, kernel or userspace")
        ->check(CLI::IsMember({"auto", "kernel", "userspace"}));
    run_cmd->add_flag("--keep-lab", run.keep_lab, "Leave a lab this command brought up running afterwards");
    run_cmd->add_flag("--quiet", run.quiet, "No progress lines");
  }
  return subcommand(run_cmd, true, [s](const Invocation&) {
    auto& [run] = *s;
    return cmd_run(run);
  });
}

std::unique_ptr<Subcommand> add_bench(CLI::App& app) {
  struct State {
    BenchArgs bench;
    std::optional<std::string> plots_only;
  };
  auto s = std::make_shared<State>();
  CLI::App* bench_cmd = nullptr;
  {
    auto& [bench, plots_only] = *s;
    bench_cmd = app.add_subcommand(
        "bench", "Run a scenario under several bandwidth policies and numbers of TCP connections (and the \"DP across "
                 "DCs\" placement baseline), one run each on the same lab, and compare them side by side: writes "
                 "bench.json, bench.md (also printed), one run folder per variant and plots/*.svg (gnuplot). A scenario with a prefill load (BubbleTea) also runs each variant without it, as VARIANT-training-only, for its training slowdown");
    bench_cmd->add_option("scenario", bench.scenario, "Scenario file (JSON, see bench/scenarios/README.md)");
    bench_cmd->add_option("--policies", bench.policies,
                          "Comma-separated bandwidth policies, each run with every --connections value (default: "
                          "fair,atlas); an unknown policy is refused before anything runs (exit 2)");
    bench_cmd->add_option("--connections", bench.connections,
                          "Comma-separated TCP connections per WAN peer, 1 to 64 (default: 1 and the scenario's)");
    bench_cmd->add_flag("--no-placement-baseline", bench.no_placement_baseline,
                        "Leave out the \"DP across DCs\" variant (policy fair, the largest --connections value, each "
                        "DP replica's pipeline inside one DC and the replicas spread over the DCs)");
    bench_cmd->add_option("--baselines", bench.baselines,
                          "Comma-separated named baselines to run too: stock (DP across DCs, hierarchical all-reduce, "
                          "1 connection), stock-flat (the same with a flat ring), varuna (GPipe with recomputation, "
                          "micro-batches chosen for the network, 1 connection), or all (docs/baselines.md)");
    bench_cmd->add_option("--out", bench.out, "Bench folder (default: bench-results/SCENARIO-YYYYMMDD-HHMMSS)");
    bench_cmd->add_option("--backend", bench.backend,
                          "Shaping backend if the lab must be brought up: auto, kernel or userspace")
        ->check(CLI::IsMember({"auto", "kernel", "userspace"}));
    bench_cmd->add_flag("--keep-lab", bench.keep_lab, "Leave a lab this command brought up running afterwards");
    bench_cmd->add_flag("--quiet", bench.quiet, "No per-iteration progress lines (one line per variant remains)");
    bench_cmd->add_option("--mode", bench.mode,
                          "lab: run the variants in the lab (default); simulate: in the flow-level simulator (no lab, "
                          "no root); both: in the lab (OUT/lab) and the simulator (OUT/sim), then print and write "
                          "the simulator's error per variant (OUT/crosscheck.md, crosscheck.json); ns3: in the packet-level "
                          "ns-3 reference (minutes per variant; docs/crosscheck.md). Several joined by commas (e.g. "
                          "simulate,ns3) run each into OUT/lab, OUT/sim, OUT/ns3 and compare them in OUT/crosscheck.md and "
                          "crosscheck.json (each executor's error against ns-3, or the lab where ns-3 did not run, and its "
                          "atlas/fair ratios)")
        ->check([](const std::string& m) {
          try {
            (void)bench::parse_modes(m);
            return std::string();
          } catch (const std::invalid_argument& e) {
            return std::string(e.what());
          }
        });
    bench_cmd->add_option("--gpus", bench.gpus,
                          "Executors without a lab (simulate, ns3): grow the scenario to N GPUs as `wanlab simulate "
                          "--gpus` does");
    bench_cmd->add_option("--repeat", bench.repeat,
                          "Runs per variant (default 1; --mode simulate: the simulator's), in rounds that run every variant once (in the listed order in odd "
                          "rounds, reversed in even ones, so a steady drift of the machine cancels out of paired figures over "
                          "an even number of rounds): bench.md adds each "
                          "variant's mean, standard deviation and 95 % confidence interval over the runs, and speedups "
                          "paired by round with their 95 % CI (against the baseline, and for a policy other than fair "
                          "against fair with the same connections; with a prefill load, the training slowdown over the rounds "
                          "with its 95 % CI). Run 1 is the variant's folder, run R is NAME-runR. "
                          "The simulator is deterministic: with --mode both it runs once and is compared to the lab's "
                          "mean over the runs")
        ->check(CLI::Range(1, 100));
    bench_cmd->add_option("--max-steal", bench.max_steal,
                          "Percent of the machine's CPU time (default 5): a lab run during which the hypervisor took more "
                          "(summary.json host_cpu.steal_fraction: a cloud VM's other guests) runs again, at most twice, and "
                          "the last attempt counts; each run's summary keeps its steal, and with --repeat bench.json's "
                          "runs[].attempts keeps every attempt's. 0: never again")
        ->check(CLI::Range(0.0, 100.0));
    add_sim_flags(bench_cmd, bench.sim);
    bench_cmd->add_option("--plots-only", plots_only,
                          "Only (re)draw the plots of an existing bench folder DIR (no runs, no lab, no root)")
        ->type_name("DIR");
    bench_cmd->footer(
        "Variants: every policy x every connections value, named POLICY-kK (fair-k1, atlas-k4, ...), plus\n"
        "fair-kMAX-dp-across-dcs. The baseline is fair with the smallest connections value (a stock framework:\n"
        "one TCP connection); it always runs. Runs are sequential on one lab, brought up first if it is not (and\n"
        "down at the end unless --keep-lab), with fresh agents for each. Ctrl-C aborts the current run and writes\n"
        "what is done. Exit status: 0 every variant ran (a placement baseline the lab cannot host is only\n"
        "reported), 1 a variant was refused or failed, 2 bad input, 130 interrupted. Outputs: docs/runs.md.");
  }
  return subcommand(bench_cmd, false, [s](const Invocation&) {
    auto& [bench, plots_only] = *s;
    if (plots_only.has_value() == !bench.scenario.empty()) {
      fmt::print(stderr, "wanlab: bench: give a SCENARIO, or --plots-only DIR without one\n");
      return 2;
    }
    if (plots_only) {
      bench.plots_only = true;
      bench.scenario = *plots_only;
    }
    return cmd_bench(bench);
  });
}

std::unique_ptr<Subcommand> add_simulate(CLI::App& app) {
  struct State {
    SimulateArgs simulate;
  };
  auto s = std::make_shared<State>();
  CLI::App* sim_cmd = nullptr;
  {
    auto& [simulate] = *s;
    sim_cmd = app.add_subcommand(
        "simulate", "Run a scenario's variants (policies x connections, as bench makes them) in the flow-level "
                    "simulator instead of a lab: the same arbiter and program semantics on a virtual clock, any "
                    "number of GPUs (--gpus), no root; writes what bench writes (bench.json, bench.md, per variant "
                    "summary.json, timeline.json, links.csv, windows.csv)");
    sim_cmd->add_option("scenario", simulate.scenario, "Scenario file (JSON, see bench/scenarios/README.md)")->required();
    sim_cmd->add_option("--gpus", simulate.gpus,
                        "Grow the scenario to N GPUs: dp becomes N / (pp x tp) (N must be a multiple of pp x tp) and "
                        "every DC's node count is multiplied by ceil(new dp / old dp), so each stage stays in its DC");
    sim_cmd->add_option("--policies", simulate.policies, "Comma-separated bandwidth policies (default: fair,atlas)");
    sim_cmd->add_option("--connections", simulate.connections,
                        "Comma-separated TCP connections per WAN peer, 1 to 64 (default: 1 and the scenario's)");
    sim_cmd->add_flag("--no-placement-baseline", simulate.no_placement_baseline,
                      "Leave out the \"DP across DCs\" variant");
    sim_cmd->add_option("--baselines", simulate.baselines,
                        "Comma-separated named baselines to simulate too: stock, stock-flat, varuna or all "
                        "(docs/baselines.md)");
    sim_cmd->add_option("--out", simulate.out, "Results folder (default: sim-results/SCENARIO-YYYYMMDD-HHMMSS)");
    add_sim_flags(sim_cmd, simulate.sim);
    sim_cmd->add_option("--repeat", simulate.repeat,
                        "Runs per variant (default 1), in rounds, as bench's --repeat: run R in NAME-runR, bench.json's "
                        "per-run figures and their spread (the simulator is deterministic: the rounds agree)")
        ->check(CLI::Range(1, 100));
    sim_cmd->add_flag("--quiet", simulate.quiet, "Fewer lines");
    sim_cmd->add_option("--rails-policy", simulate.rails_policy,
                        "Rail policy of the DCs with OCS rails, in place of the scenario's \"rails\" (packet, static "
                        "or phase; docs/rails.md)");
    sim_cmd->add_option("--rails-latency", simulate.rails_latency,
                        "OCS reconfiguration latency of every DC with OCS rails, in place of the topology's (e.g. 10us, "
                        "25ms; at most 1s)");
    sim_cmd->footer(
        "What is modeled (docs/simulator.md): compute from the scenario's FLOP model; each WAN message\n"
        "as one flow of `connections` TCP connections over its directed link, max-min fair, each connection below\n"
        "--tcp-window / RTT, its ACKs on the reverse link, delivered one-way delay after its last byte; a message\n"
        "within the windows goes as its TCP connections send it (--bursts paced: slow start, HyStart, CUBIC's\n"
        "window, Linux's pacing rate, into the link's FIFO queue, drop-tail loss sent again a round trip later);\n"
        "compute x (1 +- 0.1 %) per op (--compute-jitter); link rates following the topology's\n"
        "traces (rate steps only: delay, jitter and loss are not modeled); the arbiter's windows gating flows as\n"
        "in the lab; ring all-reduces inside a DC over each node's --lan-rate link. Exit status: 0 every variant\n"
        "ran, 1 one failed, 2 bad input.");
  }
  return subcommand(sim_cmd, false, [s](const Invocation&) {
    auto& [simulate] = *s;
    return cmd_simulate(simulate);
  });
}

std::unique_ptr<Subcommand> add_plan(CLI::App& app) {
  struct State {
    PlanArgs plan;
  };
  auto s = std::make_shared<State>();
  CLI::App* plan_cmd = nullptr;
  {
    auto& [plan] = *s;
    plan_cmd = app.add_subcommand(
        "plan", "Search where and how to train a scenario's model: which DCs, how many GPUs, PP x DP x TP, micro-batches, "
                "schedule, connections and policy, predicted by the simulator (a fast model to prune, the default "
                "model for the best); prints the best K with Atlas's greedy rule marked and writes each as a scenario "
                "that run, bench and simulate take (docs/plan.md)");
    plan_cmd->add_option("scenario", plan.scenario, "Scenario file (JSON): its model, MFU, batch, scale and lab")->required();
    plan_cmd->add_option("--gpus", plan.gpus,
                         "The most GPUs a plan may use: N, or LO-HI to search 8 counts from LO to HI (default: every "
                         "free GPU of the DCs)")
        ->type_name("N|LO-HI");
    plan_cmd->add_option("--dcs", plan.dcs,
                         "DCs to plan on, comma-separated, each NAME or NAME:GPUS (its free GPUs; default: the "
                         "topology's free_gpus, else nodes x gpus_per_node), e.g. use:2048,usw,euw:512")
        ->type_name("LIST");
    plan_cmd->add_option("--top", plan.top, "How many plans to rank with the default model and write (default 5)");
    plan_cmd->add_option("--out", plan.out, "Results folder (default: plan-results/SCENARIO-YYYYMMDD-HHMMSS)");
    plan_cmd->add_option("--budget", plan.budget,
                         "Seconds of wall time for the search (default 60); when it runs out, the best so far is kept");
    plan_cmd->add_option("--batch", plan.batch,
                         "Sequences per iteration, held fixed across plans (default: the scenario's micro-batches x "
                         "micro-batch size x the dp it would have at the largest GPU count)");
    plan_cmd->footer("Exit status: 0 planned, 1 results could not be written, 2 bad input (a model that fits nowhere, "
                     "an unknown DC, a budget too short for one candidate).");
  }
  return subcommand(plan_cmd, false, [s](const Invocation&) {
    auto& [plan] = *s;
    return cmd_plan(plan);
  });
}

std::unique_ptr<Subcommand> add_memory(CLI::App& app) {
  struct State {
    MemoryArgs memory;
  };
  auto s = std::make_shared<State>();
  CLI::App* memory_cmd = nullptr;
  {
    auto& [memory] = *s;
    memory_cmd = app.add_subcommand(
        "memory", "Per GPU and stage, what each scenario's plan needs in memory (weights, gradients, optimizer state, "
                  "activations in flight) against its GPUs', by the model run, bench and simulate refuse plans by "
                  "(docs/workloads.md); runs nothing");
    memory_cmd->add_option("scenario", memory.scenarios, "Scenario files (JSON)")->required();
    memory_cmd->add_option("--baseline", memory.baseline,
                           "The named baseline's variant of each scenario (stock, stock-flat, varuna: its schedule, "
                           "micro-batches and recomputation; docs/baselines.md)")
        ->check(CLI::IsMember(wanlab::workload::baseline_names()));
    memory_cmd->add_flag("--json", memory.json, "One JSON array on stdout, an object per scenario");
    memory_cmd->footer("Exit status: 0 every plan fits, 1 one does not, 2 bad input.");
  }
  return subcommand(memory_cmd, false, [s](const Invocation&) {
    auto& [memory] = *s;
    return cmd_memory(memory);
  });
}

std::unique_ptr<Subcommand> add_launch(CLI::App& app) {
  struct State {
    LaunchArgs launch_args;
  };
  auto s = std::make_shared<State>();
  CLI::App* launch_cmd = nullptr;
  {
    auto& [launch_args] = *s;
    launch_cmd = app.add_subcommand(
        "launch", "Start a command on lab nodes as the ranks of one job (your own framework: torchrun, "
                  "torch.distributed, JAX, MPI-less anything over TCP), inside each node's namespaces with its host "
                  "name and the lab's hosts file, and record the WAN links while it runs (docs/frameworks.md)");
    launch_cmd->add_option("--lab", launch_args.lab, "Lab name (default: the only lab up)");
    launch_cmd->add_option("--nodes", launch_args.nodes,
                           "Comma-separated nodes, e.g. use-0,euw-0; the first is the master (MASTER_ADDR), NODE_RANK "
                           "follows this order");
    launch_cmd->add_flag("--all", launch_args.all, "Every node of the lab, DC by DC");
    launch_cmd->add_option("--per-node", launch_args.per_node,
                           "Processes per node (default 1; with torchrun, keep 1 and give --nproc_per_node to it)")
        ->check(CLI::Range(1, 1024));
    launch_cmd->add_option("--env", launch_args.env, "Set K=V in every rank's environment (repeatable)")
        ->allow_extra_args(false)
        ->type_name("K=V");
    launch_cmd->add_option("--out", launch_args.out,
                           "Run folder (default: runs/launch-YYYYMMDD-HHMMSS): launch.json, links.csv, summary.json, "
                           "logs/");
    launch_cmd->add_flag("--shell", launch_args.shell,
                         "Join CMD's words with blanks and run them with /bin/sh -c (pipes, &&, your own $VARS)");
    launch_cmd->add_option("cmd", launch_args.cmd, "Command and arguments (after --)")->required();
    launch_cmd->positionals_at_end();
    launch_cmd->footer(
        "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, NNODES, MASTER_ADDR (the first\n"
        "node's name), MASTER_PORT (free, one per launch), GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME (the node's lab\n"
        "interface), WANLAB_LAB, WANLAB_NODE and WANLAB_DC, on top of this shell's environment. $NAME and ${NAME} of\n"
        "these (and of --env) in CMD's words are substituted per rank, so quote them from your shell:\n"
        "  wanlab launch --nodes use-0,euw-0 -- torchrun --nnodes 2 --nproc_per_node 1 --node_rank '$NODE_RANK' \\\n"
        "      --master_addr '$MASTER_ADDR' --master_port '$MASTER_PORT' train.py\n"
        "Output lines are prefixed [NODE/RANK]. Ctrl-C stops every rank (SIGTERM to its process group, SIGKILL 5 s\n"
        "later); `wanlab down` kills them with the lab. Exit status: the worst rank's (its exit code, or 128 +\n"
        "the signal that killed it), 130 when interrupted, 2 when nothing was started (unknown lab or node, a\n"
        "command not in PATH, bad --env).");
  }
  return subcommand(launch_cmd, false, [s](const Invocation&) {
    auto& [launch_args] = *s;
    if (!launch_args.cmd.empty() && launch_args.cmd.front() == "--") launch_args.cmd.erase(launch_args.cmd.begin());
    if (launch_args.cmd.empty()) {
      fmt::print(stderr, "wanlab: launch: no command given (wanlab launch --nodes A,B -- CMD...)\n");
      return 2;
    }
    return cmd_launch(launch_args);
  });
}

std::unique_ptr<Subcommand> add_analyze(CLI::App& app) {
  struct State {
    AnalyzeArgs analyze;
  };
  auto s = std::make_shared<State>();
  CLI::App* analyze_cmd = nullptr;
  {
    auto& [analyze] = *s;
    analyze_cmd = app.add_subcommand(
        "analyze", "Explain run folders from their timelines: per stage and GPU compute, exposed and overlapped "
                   "communication and idle time, WAN bandwidth per transfer and link against the link rate, the "
                   "critical path of an iteration; with two or more runs, which phase explains the step-time "
                   "difference. A folder of runs (a bench's, bench/evidence/) is indexed. Markdown, or JSON "
                   "(docs/evidence.md)");
    analyze_cmd->add_option("paths", analyze.paths, "Run folders, or folders holding run folders")->required();
    analyze_cmd->add_option("--out", analyze.out, "Also write analysis.md and analysis.json into this folder");
    analyze_cmd->add_flag("--json", analyze.json, "Print JSON instead of Markdown");
  }
  return subcommand(analyze_cmd, false, [s](const Invocation&) {
    auto& [analyze] = *s;
    return cmd_analyze(analyze);
  });
}

std::unique_ptr<Subcommand> add_import_trace(CLI::App& app) {
  struct State {
    ImportTraceArgs import_trace;
  };
  auto s = std::make_shared<State>();
  CLI::App* import_cmd = nullptr;
  {
    auto& [import_trace] = *s;
    import_cmd = app.add_subcommand(
        "import-trace", "Turn the PyTorch profiler traces of a distributed job (Chrome-trace JSON, one per rank; Kineto "
                        "or the autograd profiler) or its Chakra execution traces (.et) into wanlab worker programs, list what could not be carried over, "
                        "and replay the job in the simulator on a topology (docs/evidence.md)");
    import_cmd->add_option("traces", import_trace.traces, "Trace files, one per rank (rank order)")->required();
    import_cmd->add_option("--topology", import_trace.topology, "Topology file to replay on")->required();
    import_cmd->add_option("--placement", import_trace.placement,
                           "DC of each rank, comma-separated (default: rank r in DC r mod the DC count)")
        ->delimiter(',');
    import_cmd->add_option("--gpu", import_trace.gpu, "GPU kind the programs' FLOPs are counted for (default H100)");
    import_cmd->add_option("--mfu", import_trace.mfu, "Model FLOP utilization of that GPU (default 0.4)")
        ->check(CLI::Range(0.01, 1.0));
    import_cmd->add_option("--message-bytes", import_trace.message_bytes,
                           "Bytes of each message where the trace gives no tensor sizes (recorded without record_shapes)");
    import_cmd->add_option("--out", import_trace.out, "Output folder (default: imports/NAME-YYYYMMDD-HHMMSS)");
    import_cmd->add_flag("--no-simulate", import_trace.no_simulate, "Only write the programs, do not replay them");
  }
  return subcommand(import_cmd, false, [s](const Invocation&) {
    auto& [import_trace] = *s;
    return cmd_import_trace(import_trace);
  });
}

}  // namespace wanlab::cli
