#include "tools/run_options.h"

#include <charconv>
#include <cstdio>
#include <string_view>

#include "collectives/config.h"

namespace eagercomm::run {
namespace {

using std::chrono::nanoseconds;

void usage(FILE* out) {  // --help
  std::fprintf(
      out,
      "usage: eagercomm-run -n N [--transport T] [--timeout DURATION] [--stop-delay DURATION]\n"
      "                     [--keep-going] [--no-prefix] [--] prog args...\n"
      "  -n, --nproc N       number of ranks to start on this host (1..%d)\n"
      "  --transport T       set EAGERCOMM_TRANSPORT for every rank (auto|inproc|shm|ucx|verbs)\n"
      "  --timeout DURATION  stop the job this long after the launch and exit 124 (30s, 5m;\n"
      "                      0: never)\n"
      "  --stop-delay DURATION\n"
      "                      when a rank fails, how long the others may run on to notice it\n"
      "                      and exit by themselves before they get SIGTERM (default 2s)\n"
      "  --keep-going        when a rank fails, let the others run on (for programs that\n"
      "                      continue without it: Communicator::shrink(), on_failure=continue);\n"
      "                      the exit status is still the first failed rank's\n"
      "  --no-prefix         do not prefix output lines with \"[rank] \"\n"
      "  -h, --help          this text\n"
      "Every rank gets EAGERCOMM_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _MASTER_ADDR,\n"
      "_MASTER_PORT, _JOB_ID, _JOB_TOKEN and torchrun's RANK, LOCAL_RANK, WORLD_SIZE,\n"
      "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Exit status: the first failed rank's (128 +\n"
      "signal if it was killed; a rank killed by a signal within 0.5 s after another rank's error\n"
      "exit counts as the first), 1 if a rank exited 0 before joining the job while others\n"
      "joined, 124 on --timeout (counted from the launch), 127 if prog cannot be run, 2 on bad\n"
      "usage.\n",
      kMaxRanks);
}

int usage_error(const std::string& message) {
  std::fprintf(stderr,
               "eagercomm-run: %s\n"
               "usage: eagercomm-run -n N [--transport T] [--timeout DURATION] [--no-prefix] [--] "
               "prog args... (--help: more)\n",
               message.c_str());
  return kExitUsage;
}

// Parses the command line; nullopt with `exit_code` set when the launcher must exit now.
}  // namespace

std::optional<Options> parse_options(int argc, char** argv, int& exit_code) {
  Options o;
  bool have_n = false;
  int i = 1;
  // "--flag value", "--flag=value" and, for -n, "-nVALUE".
  auto value_of = [&](std::string_view arg, std::string_view name,
                      std::optional<std::string>& value) -> bool {
    if (arg == name) {
      if (i + 1 >= argc) {
        exit_code = usage_error(std::string(name) + " needs a value");
        return false;
      }
      value = argv[++i];
      return true;
    }
    if (arg.size() > name.size() + 1 && arg.starts_with(name) && arg[name.size()] == '=') {
      value = std::string(arg.substr(name.size() + 1));
      return true;
    }
    if (name == "-n" && arg.size() > 2 && arg.starts_with("-n")) {
      value = std::string(arg.substr(2));
      return true;
    }
    return true;
  };
  for (; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;  // the program
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      exit_code = 0;
      return std::nullopt;
    }
    if (arg == "--no-prefix") {
      o.prefix = false;
      continue;
    }
    if (arg == "--keep-going") {
      o.keep_going = true;
      continue;
    }
    std::optional<std::string> value;
    bool matched = false;
    for (std::string_view name : {"-n", "--nproc", "--transport", "--timeout", "--stop-delay"}) {
      if (!value_of(arg, name, value)) return std::nullopt;
      if (!value) continue;
      matched = true;
      if (name == "-n" || name == "--nproc") {
        int n = 0;
        const char* end = value->data() + value->size();
        const auto r = std::from_chars(value->data(), end, n);
        if (r.ec != std::errc() || r.ptr != end || n < 1 || n > kMaxRanks) {
          exit_code = usage_error("-n '" + *value + "' is not a number of ranks in 1.." +
                                  std::to_string(kMaxRanks));
          return std::nullopt;
        }
        o.ranks = n;
        have_n = true;
      } else if (name == "--transport") {
        // The config table's own check, so the accepted names cannot drift apart.
        Config probe;
        Status s = probe.set("EAGERCOMM_TRANSPORT", *value);
        if (!s.ok()) {
          exit_code = usage_error("--transport: " + s.message());
          return std::nullopt;
        }
        o.transport = probe.transport;
      } else {
        Result<nanoseconds> d = parse_duration(*value);
        if (!d.ok()) {
          exit_code = usage_error(std::string(name) + ": " + d.status().message());
          return std::nullopt;
        }
        (name == "--timeout" ? o.timeout : o.stop_delay) = *d;
      }
      break;
    }
    if (!matched) {
      exit_code = usage_error("unknown option '" + std::string(arg) + "'");
      return std::nullopt;
    }
  }
  if (!have_n) {
    exit_code = usage_error("-n N (the number of ranks) is required");
    return std::nullopt;
  }
  if (i >= argc) {
    exit_code = usage_error("no program to run");
    return std::nullopt;
  }
  o.argv.assign(argv + i, argv + argc);
  return o;
}

}  // namespace eagercomm::run
