// wanlab: builds, shapes, inspects and tears down multi-DC labs.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <spdlog/spdlog.h>

#include "bench_command.hpp"
#include "commands.hpp"
#include "evidence_commands.hpp"
#include "lab_lookup.hpp"
#include "launch_command.hpp"
#include "replay_commands.hpp"
#include "memory_command.hpp"
#include "plan_command.hpp"
#include "run_command.hpp"
#include "simulate_command.hpp"
#include "suggest.hpp"
#include "wanlab/api/server.hpp"
#include "wanlab/common/version.hpp"
#include "wanlab/workload/baselines.hpp"
#include "wanlab/common/secrets.hpp"

int main(int argc, char** argv) {
  using namespace wanlab::cli;
  CLI::App app{"wanlab: a testbed for geo-distributed LLM training.\n"
               "Builds a lab of datacenters joined by an emulated WAN inside network namespaces."};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.set_version_flag("--version", wanlab::version_line());
  std::optional<std::string> api_at;
  std::optional<std::string> api_token_file;
  app.add_option("--api", api_at,
                 "status, link set, replay and run talk to the controller whose API `wanlab up --api` serves at "
                 "HOST:PORT (another host's lab, e.g. a swarm lab's router service) instead of a lab on this "
                 "machine; its token from $WANLAB_TOKEN or --api-token-file. Paths a request names (scenario, "
                 "trace, --out) are the controller's: relative ones are taken from its working folder (docs/docker.md). "
                 "Default for those commands: $WANLAB_API")
      ->type_name("HOST:PORT");
  std::string api_dir = "/wanlab";
  app.add_option("--api-dir", api_dir,
                 "With --api: the controller's working folder, under which relative scenario, trace and --out paths "
                 "are sent (the API takes absolute paths; default /wanlab, the containers' working folder)")
      ->type_name("DIR");
  app.add_option("--api-token-file", api_token_file,
                 "With --api: read the token from the first line of FILE (keep it mode 600) instead of $WANLAB_TOKEN")
      ->type_name("FILE");

  UpArgs up;
  auto* up_cmd = app.add_subcommand("up", "Bring a lab up from a topology file; returns when it is ready, leaving a "
                                          "controller daemon that owns it");
  up_cmd->add_option("file", up.file, "Topology file (JSON, see topologies/README.md)")->required();
  up_cmd->add_option("--backend", up.backend,
                     "WAN shaping: kernel (HTB + netem through netlink), userspace (an engine in the controller "
                     "forwards and shapes; any kernel), or auto: kernel where netem exists, else userspace")
      ->check(CLI::IsMember({"auto", "kernel", "userspace"}));
  up_cmd->add_option("--seed", up.seed, "Seed of the userspace engine's jitter and loss (same seed, same run)");
  up_cmd->add_flag("--foreground", up.foreground, "Run the controller in this process (for containers)");
  up_cmd->add_option("--agents-tcp", up.agents_tcp,
                     "Also accept agents over TCP on HOST:PORT (containers, other hosts); needs --token");
  up_cmd->add_option("--metrics", up.metrics,
                     "Serve GET /metrics (Prometheus text format, docs/metrics.md) over TCP on HOST:PORT, e.g. "
                     "127.0.0.1:9464; an address other than loopback needs --token, which scrapers send as "
                     "\"Authorization: Bearer TOKEN\"")
      ->type_name("HOST:PORT");
  up_cmd->add_option("--api", up.api,
                     "Also serve the whole control API (status, link set, replay, runs) over TCP on HOST:PORT, for "
                     "`wanlab --api HOST:PORT ...` from another host; every request must carry the token (--token, "
                     "--token-file or $WANLAB_TOKEN), on loopback too")
      ->type_name("HOST:PORT");
  up_cmd->add_option("--token", up.token,
                     "Bearer token agents must present over TCP (default: $WANLAB_TOKEN). On the command line it is "
                     "visible to every local user (ps) until wanlab has read it: prefer $WANLAB_TOKEN or --token-file")
      ->envname("WANLAB_TOKEN");
  std::optional<std::string> up_token_file;
  up_cmd->add_option("--token-file", up_token_file,
                     "Read the bearer token from the first line of FILE (keep it mode 600); instead of --token")
      ->type_name("FILE");
  up_cmd->add_flag("--no-spawn-agents", up.no_spawn_agents,
                   "Do not start agents in the nodes' namespaces for runs: wait for agents to connect (containers)");
  up_cmd->add_flag("--router-only", up.router_only,
                   "Make no namespaces: this namespace (a container on one network per DC, holding each DC's "
                   "gateway address 198.18.4k.1/22) is the lab's WAN router; nodes are containers "
                   "(`wanlab node-setup`). Needs CAP_NET_ADMIN and CAP_NET_RAW only");
  up_cmd->add_flag("--swarm", up.swarm,
                   "With --router-only, in a Docker Swarm stack: the port toward each DC is the interface with an "
                   "address in the DC's /22 (Docker chose it), routed for the whole /22; the userspace engine "
                   "learns the nodes' hardware addresses from their frames (docs/docker.md, Swarm)");
  up_cmd->add_option("--then", up.then,
                     "With --foreground: run this command line (words split on blanks, no shell) once the lab is "
                     "up, e.g. \"wanlab bench bench/scenarios/three-dc-7b.json\"; the lab stays up after it ends")
      ->type_name("CMD");
  up_cmd->add_option("--engine-sched", up.engine_sched,
                     "Scheduling of the userspace engine's thread: fifo:PRIORITY or rr:PRIORITY (real-time, 1-99; "
                     "the kernel's RT throttling bounds it), deadline:RUNTIME/PERIOD (SCHED_DEADLINE, e.g. "
                     "deadline:600us/1ms), nice[:N] (the fair scheduler, default -20) or off. Where the kernel "
                     "refuses (no CAP_SYS_NICE) it falls back to nice -20 with a warning")
      ->default_str("fifo:50")
      ->type_name("POLICY");
  up_cmd->add_option("--engine-cpu", up.engine_cpu,
                     "Pin the userspace engine's thread to this CPU; the lab's receive paths are steered to the other "
                     "CPUs. Default for a real-time engine in a namespace lab on 2+ CPUs: the last CPU this process "
                     "may use (with several labs up at once, give each its own)")
      ->type_name("N");

  RunArgs run;
  auto* run_cmd = app.add_subcommand(
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

  BenchArgs bench;
  std::optional<std::string> plots_only;
  auto* bench_cmd = app.add_subcommand(
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
  const auto add_sim_flags = [](CLI::App* cmd, SimFlags& f) {
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
                    "0.7 s per iteration under fair, 0.9 s under atlas; see --paced-piece, --paced-stream), shared "
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
                    "costs time in proportion; results move with it: paper/three-dc-7b fair-k4 by 24 % at 0.1 ms, 7B "
                    "across three DCs at 10x the WAN rates under atlas at 1,536 GPUs by 23 % at 0.25 ms "
                    "(bench/results/2026-11-27-sim-robust.md). bench.md's \"Model sensitivity\" table shows how "
                    "much yours do (step / 4 and the other burst models)")
        ->type_name("DURATION");
    cmd->add_option("--paced-stream", f.paced_stream,
                    "Simulator, --bursts paced, faster: while every message entering a link is past slow start with "
                    "room in its window for all the rest of it, what enters goes in pieces this long (e.g. 8ms) that "
                    "the link sends as they fill, instead of 1 ms pieces; ACKs still come back per millisecond. 7B "
                    "across three DCs under atlas at 16,368 GPUs: 0.65 s per iteration instead of 0.9 s; results move "
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
                  "with the paced model's step / 4 and under --bursts shared and fifo, and bench.md's \"Model "
                  "sensitivity\" table says how far its iteration time moves and whether its verdict against the "
                  "baseline holds (about 2-6x the default run's time on top; the table's last line says how much)");
  };
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

  SimulateArgs simulate;
  auto* sim_cmd = app.add_subcommand(
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

  PlanArgs plan;
  auto* plan_cmd = app.add_subcommand(
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

  MemoryArgs memory;
  auto* memory_cmd = app.add_subcommand(
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

  std::optional<std::string> down_lab;
  auto* down_cmd = app.add_subcommand("down", "Remove a lab and everything it created (also after its controller died)");
  down_cmd->add_option("lab", down_lab, "Lab name (default: the only lab up)");

  std::optional<std::string> status_lab;
  bool status_json = false;
  auto* status_cmd = app.add_subcommand("status", "Show labs: DCs, nodes, addresses, namespaces, links and live counters");
  status_cmd->add_option("lab", status_lab, "Lab name (default: every lab up)");
  status_cmd->add_flag("--json", status_json, "Machine-readable output");

  std::optional<std::string> exec_lab;
  std::string exec_node;
  std::vector<std::string> exec_argv;
  auto* exec_cmd = app.add_subcommand("exec", "Run a command inside a node: its network and UTS namespaces (host name: the "
                                                 "node's), its /sys, and the lab's hosts file as /etc/hosts");
  exec_cmd->add_option("--lab", exec_lab, "Lab name (default: the one lab that has NODE; refused when several do)");
  exec_cmd->add_option("node", exec_node, "Node name, e.g. use-0")->required();
  exec_cmd->add_option("cmd", exec_argv, "Command and arguments (after --)")->required();
  exec_cmd->positionals_at_end();

  LaunchArgs launch_args;
  auto* launch_cmd = app.add_subcommand(
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

  auto* link_cmd = app.add_subcommand("link", "Inspect or change WAN links");
  link_cmd->require_subcommand(1);
  LinkSetArgs ls;
  auto* set_cmd = link_cmd->add_subcommand("set", "Change a directed link in place (netlink change; queues are kept)");
  set_cmd->add_option("src", ls.src, "Source DC")->required();
  set_cmd->add_option("dst", ls.dst, "Destination DC")->required();
  set_cmd->add_option("--lab", ls.lab, "Lab name (default: the only lab up)");
  set_cmd->add_option("--delay", ls.delay, "One-way delay, e.g. 34ms");
  set_cmd->add_option("--jitter", ls.jitter, "Jitter, e.g. 1ms (never reorders)");
  set_cmd->add_option("--loss", ls.loss, "Loss, e.g. 0.1% (with --loss-burst: in the good state)");
  set_cmd->add_option("--loss-burst", ls.loss_burst,
                      "Bursty (Gilbert-Elliott) loss \"P R [BAD]\": good->bad and bad->good per packet, loss in "
                      "the bad state (default 100%), e.g. \"0.5% 25%\"; \"off\" for random loss only");
  set_cmd->add_option("--rate", ls.rate, "Rate, e.g. 100Mbit or 4.35Gbit");
  set_cmd->add_option("--queue", ls.queue, "Queue limit, packets (1000p) or bytes (4MB)");

  CaptureArgs cap;
  auto* capture_cmd = app.add_subcommand(
      "capture", "Write the frames a WAN link delivers into a pcap file (Wireshark, tcpdump -r): those that reach "
                 "DST's gateway from the WAN router with a source address in SRC's subnet, after the link's queue, "
                 "rate, delay, jitter and loss, timestamped on arrival; either backend");
  capture_cmd->add_option("src", cap.src, "Source DC")->required();
  capture_cmd->add_option("dst", cap.dst, "Destination DC")->required();
  capture_cmd->add_option("-w,--write", cap.file, "pcap file to write")->required()->type_name("FILE");
  capture_cmd->add_option("--lab", cap.lab, "Lab name (default: the only lab up)");
  capture_cmd->add_option("--count", cap.count, "Stop after N frames")->type_name("N");
  capture_cmd->add_option("--duration", cap.duration, "Stop after this long, e.g. 10s (default: at Ctrl-C)");

  DashboardArgs dash;
  auto* dashboard_cmd = app.add_subcommand(
      "dashboard", "Serve a live web page of a lab: its DCs and links as a map, per-link throughput and queue over "
                   "the last minutes, the arbiter's windows as a Gantt chart, a run's per-GPU progress "
                   "(docs/metrics.md)");
  dashboard_cmd->add_option("--lab", dash.lab, "Lab name (default: the only lab up)");
  dashboard_cmd->add_option("--listen", dash.listen,
                            "HOST:PORT to serve on (default 127.0.0.1:8080); an address other than loopback needs "
                            "--token, which the page's URL then carries (?token=...)")
      ->type_name("HOST:PORT");
  dashboard_cmd->add_option("--token", dash.token, "Token the page's requests must carry (default: $WANLAB_TOKEN)")
      ->envname("WANLAB_TOKEN");

  std::string ns_topology, ns_node, ns_backend = "auto";
  std::vector<std::string> ns_argv;
  auto* node_setup_cmd = app.add_subcommand(
      "node-setup", "Prepare this network namespace (a container) as a node of a router-only lab, then run CMD: "
                    "give the interface holding the node's address the plan's hardware address, turn its offloads "
                    "off where the router's backend is kernel, and route the DCs its DC has WAN links to via the "
                    "controller (198.18.4k.1)");
  node_setup_cmd->add_option("topology", ns_topology, "Topology file (JSON)")->required();
  node_setup_cmd->add_option("node", ns_node, "Node name, e.g. use-0")->required();
  node_setup_cmd
      ->add_option("--backend", ns_backend,
                   "The router's backend, as given to its `up`: kernel (offloads off, so netem sees MTU-sized "
                   "packets), userspace (offloads on: the engine takes GSO super-frames), or auto: kernel where "
                   "this kernel has netem (the containers' kernel is the router's)")
      ->check(CLI::IsMember({"auto", "kernel", "userspace"}));
  std::optional<std::string> ns_swarm;
  node_setup_cmd->add_option("--swarm", ns_swarm,
                             "Swarm labs: the router's service name (e.g. controller). Keep the interface's own "
                             "(overlay) address and hardware address, add the plan's node address, send from it, and "
                             "route the other DCs via the address that name resolves to in this DC")
      ->type_name("NAME");
  node_setup_cmd->add_option("cmd", ns_argv, "Command to run afterwards (after --), e.g. wanlab-agent ...");
  node_setup_cmd->positionals_at_end();

  ComposeArgs compose_args;
  auto* compose_cmd = app.add_subcommand(
      "compose", "Print the docker-compose file of a lab: one network per DC, the controller container as the WAN "
                 "router, one container per node (write it to docker-compose.yml in the project folder)");
  compose_cmd->add_option("topology", compose_args.topology, "Topology file, in the project's topologies/")->required();
  compose_cmd->add_option("--scenario", compose_args.scenario,
                          "Scenario (in the project's bench/scenarios/) the controller benchmarks once the lab is up "
                          "(`wanlab bench`); none: the lab only");
  compose_cmd->add_flag("--no-bench", compose_args.no_bench,
                        "Mount the scenarios but do not benchmark on `up` (run them with docker-compose exec)");
  compose_cmd->add_flag("--monitoring", compose_args.monitoring,
                        "Add a Prometheus container (docker/prometheus/Dockerfile) scraping the controller's /metrics "
                        "every second, published at 127.0.0.1:9090, and the dashboard at 127.0.0.1:8080 "
                        "(docs/metrics.md)");
  compose_cmd->add_option("--results", compose_args.results,
                          "Host folder for results, mounted at /wanlab/bench-results (default: ./results)");
  compose_cmd->add_option("--project", compose_args.project,
                          "Project folder: where docker-compose.yml, the Dockerfile, topologies/, traces/ and "
                          "bench/scenarios/ are (default: .)");
  compose_cmd->add_flag("--swarm", compose_args.swarm,
                        "Print a Docker Swarm stack file instead (`docker stack deploy -c FILE LAB`): one overlay "
                        "network per DC, the topology and scenario as Docker configs (read from --project), results "
                        "in the volume LAB-results (docs/docker.md, Swarm)");
  compose_cmd->add_option("--host", compose_args.hosts,
                          "With --swarm: run DC's node services (or the controller's) on the swarm node HOST "
                          "(repeatable); unnamed ones run on nodes labelled wanlab.DC=true (wanlab.controller=true)")
      ->type_name("DC=HOST");
  compose_cmd->add_option("--api-port", compose_args.api_port,
                          "With --swarm: the port the controller's host publishes its control API on, for `wanlab "
                          "--api HOST:PORT ...` from any manager (default 7071)")
      ->check(CLI::Range(1, 65535));

  ReplayCommands replay_commands(app);

  AnalyzeArgs analyze;
  auto* analyze_cmd = app.add_subcommand(
      "analyze", "Explain run folders from their timelines: per stage and GPU compute, exposed and overlapped "
                 "communication and idle time, WAN bandwidth per transfer and link against the link rate, the "
                 "critical path of an iteration; with two or more runs, which phase explains the step-time "
                 "difference. A folder of runs (a bench's, bench/evidence/) is indexed. Markdown, or JSON "
                 "(docs/evidence.md)");
  analyze_cmd->add_option("paths", analyze.paths, "Run folders, or folders holding run folders")->required();
  analyze_cmd->add_option("--out", analyze.out, "Also write analysis.md and analysis.json into this folder");
  analyze_cmd->add_flag("--json", analyze.json, "Print JSON instead of Markdown");

  ImportTraceArgs import_trace;
  auto* import_cmd = app.add_subcommand(
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    wanlab::hide_argument_values(argc, argv, {"--token"});
    // A mistyped subcommand gets CLI11's "A subcommand is required": name the word and the
    // nearest subcommand instead.
    for (int i = 1; i < argc; ++i) {
      const std::string word = argv[i];
      if (word == "--log-level") {
        ++i;
        continue;
      }
      if (word.starts_with("-")) continue;
      std::vector<std::string> names;
      for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
      if (std::find(names.begin(), names.end(), word) != names.end()) break;
      const auto guess = nearest(word, names);
      fmt::print(stderr, "wanlab: '{}' is not a wanlab command{}; `wanlab --help` lists them\n", word,
                 guess ? fmt::format(" (did you mean '{}'?)", *guess) : "");
      return 2;
    }
    return app.exit(e) == 0 ? 0 : 2;
  }
  // The token leaves argv now (CLI11 has its copy): the controller daemon, forked from this
  // process without exec, shows this argv in `ps` for as long as the lab is up.
  const bool token_in_argv = wanlab::hide_argument_values(argc, argv, {"--token"}) > 0;
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e [%l] %v");
  set_invocation(argc, argv, app.get_subcommands().empty() ? std::string() : app.get_subcommands().front()->get_name());

  const bool api_command = *status_cmd || *link_cmd || *run_cmd || replay_commands.is_replay();
  if (const char* env = std::getenv("WANLAB_API"); !api_at && env && *env && api_command) api_at = env;
  if (api_at) {
    if (!api_command) {
      fmt::print(stderr, "wanlab: --api HOST:PORT is for status, link set, replay and run\n");
      return 2;
    }
    wanlab::api::Endpoint endpoint;
    endpoint.tcp = *api_at;
    try {
      (void)wanlab::api::parse_host_port(*api_at);
    } catch (const std::invalid_argument& e) {
      fmt::print(stderr, "wanlab: --api: {}\n", e.what());
      return 2;
    }
    if (api_token_file) {
      std::string warning;
      try {
        endpoint.token = wanlab::read_secret_file(*api_token_file, warning);
      } catch (const std::runtime_error& e) {
        fmt::print(stderr, "wanlab: --api-token-file {}\n", e.what());
        return 2;
      }
      if (!warning.empty()) fmt::print(stderr, "wanlab: warning: --api-token-file {}\n", warning);
    } else if (const char* t = std::getenv("WANLAB_TOKEN"); t && *t) {
      endpoint.token = t;
    } else {
      fmt::print(stderr, "wanlab: --api {}: give the lab's token in $WANLAB_TOKEN or --api-token-file FILE\n",
                 *api_at);
      return 2;
    }
    if (!std::filesystem::path(api_dir).is_absolute()) {
      fmt::print(stderr, "wanlab: --api-dir {}: not an absolute path\n", api_dir);
      return 2;
    }
    set_remote_api(std::move(endpoint), api_dir);
  } else if (api_token_file) {
    fmt::print(stderr, "wanlab: --api-token-file goes with --api HOST:PORT\n");
    return 2;
  }

  try {
    if (*up_cmd) {
      if (up_token_file) {
        if (token_in_argv) {
          fmt::print(stderr, "wanlab: up: give the token once: --token or --token-file\n");
          return 2;
        }
        std::string warning;
        try {
          up.token = wanlab::read_secret_file(*up_token_file, warning);
        } catch (const std::runtime_error& e) {
          fmt::print(stderr, "wanlab: up: --token-file {}\n", e.what());
          return 2;
        }
        if (!warning.empty()) fmt::print(stderr, "wanlab: warning: --token-file {}\n", warning);
      } else if (token_in_argv) {
        fmt::print(stderr, "wanlab: note: --token on the command line could be read by any local user (ps) until "
                           "wanlab hid it; pass it in $WANLAB_TOKEN or --token-file FILE instead\n");
      }
      if (up.then && !up.foreground) {
        fmt::print(stderr, "wanlab: up: --then needs --foreground (the command runs beside the controller)\n");
        return 2;
      }
      if (up.agents_tcp && up.token.empty()) {
        fmt::print(stderr, "wanlab: up: --agents-tcp needs --token (or $WANLAB_TOKEN): agents over TCP must "
                           "authenticate\n");
        return 2;
      }
      if (up.api) {
        if (up.token.empty()) {
          fmt::print(stderr, "wanlab: up: --api needs --token (or --token-file, $WANLAB_TOKEN): the control API over "
                             "TCP can do what root can in the lab\n");
          return 2;
        }
        try {
          (void)wanlab::api::parse_host_port(*up.api);
        } catch (const std::invalid_argument& e) {
          fmt::print(stderr, "wanlab: up: --api: {}\n", e.what());
          return 2;
        }
      }
      if (up.metrics) {
        try {
          const auto host = wanlab::api::parse_host_port(*up.metrics).first;
          if (!wanlab::api::is_loopback_host(host) && up.token.empty()) {
            fmt::print(stderr, "wanlab: up: --metrics {}: not a loopback address, so it needs --token (or "
                               "$WANLAB_TOKEN): scrapers must authenticate\n",
                       *up.metrics);
            return 2;
          }
        } catch (const std::invalid_argument& e) {
          fmt::print(stderr, "wanlab: up: --metrics: {}\n", e.what());
          return 2;
        }
      }
      return cmd_up(up);
    }
    if (*run_cmd) return cmd_run(run);
    if (*bench_cmd) {
      if (plots_only.has_value() == !bench.scenario.empty()) {
        fmt::print(stderr, "wanlab: bench: give a SCENARIO, or --plots-only DIR without one\n");
        return 2;
      }
      if (plots_only) {
        bench.plots_only = true;
        bench.scenario = *plots_only;
      }
      return cmd_bench(bench);
    }
    if (*sim_cmd) return cmd_simulate(simulate);
    if (*plan_cmd) return cmd_plan(plan);
    if (*memory_cmd) return cmd_memory(memory);
    if (*down_cmd) return cmd_down(down_lab);
    if (*status_cmd) return cmd_status(status_lab, status_json);
    if (*exec_cmd) {
      if (!exec_argv.empty() && exec_argv.front() == "--") exec_argv.erase(exec_argv.begin());
      if (exec_argv.empty()) {
        fmt::print(stderr, "wanlab: exec: no command given (wanlab exec NODE -- CMD...)\n");
        return 2;
      }
      return cmd_exec(exec_lab, exec_node, exec_argv);
    }
    if (*launch_cmd) {
      if (!launch_args.cmd.empty() && launch_args.cmd.front() == "--") launch_args.cmd.erase(launch_args.cmd.begin());
      if (launch_args.cmd.empty()) {
        fmt::print(stderr, "wanlab: launch: no command given (wanlab launch --nodes A,B -- CMD...)\n");
        return 2;
      }
      return cmd_launch(launch_args);
    }
    if (*set_cmd) return cmd_link_set(ls);
    if (*capture_cmd) return cmd_capture(cap);
    if (*dashboard_cmd) return cmd_dashboard(dash);
    if (*node_setup_cmd) {
      if (!ns_argv.empty() && ns_argv.front() == "--") ns_argv.erase(ns_argv.begin());
      return cmd_node_setup(ns_topology, ns_node, ns_backend, ns_swarm, ns_argv);
    }
    if (*compose_cmd) {
      std::string line = "wanlab";
      for (int i = 1; i < argc; ++i) line += fmt::format(" {}", argv[i]);
      return cmd_compose(compose_args, line);
    }
    if (*analyze_cmd) return cmd_analyze(analyze);
    if (*import_cmd) return cmd_import_trace(import_trace);
    if (auto rc = replay_commands.run()) return *rc;
  } catch (const std::exception& e) {
    fmt::print(stderr, "wanlab: {}\n", e.what());
    return 1;
  }
  return 2;
}
