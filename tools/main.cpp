// flashpage: the command-line front end (demo | bench | check).
#include <cstdio>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "flashpage/error.h"

namespace {

constexpr const char* kUsage = R"(usage: flashpage <command> [flags]

commands:
  demo    a small serving loop over the KV page pool (prefill + decode steps) through
          current_kernel(), flashinfer vs torch_native on gathered KV, with a verdict
          flags: --device cpu|cuda[:N] --layers N --decode-steps N --dtype bf16|f16|f32 --seed N
  bench   time paged decode (--qo-len 1) or prefill against measured yardsticks
          flags: --batch N --kv-len N --qo-len N --heads N --kv-heads N --head-dim N
                 --page-size N --layout nhd|hnd --dtype bf16|f16|f32 --device cpu|cuda[:N]
                 --backend flashinfer|torch_native|both --reps N --warmup N --seed N
  check   randomised cases against the float64 oracle; prints "N passed, M failed"
          flags: --cases N --seed N --device cpu|cuda[:N]
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> rest(argv + 2, argv + argc);
  try {
    if (command == "demo") return flashpage::cli::run_demo(rest);
    if (command == "bench") return flashpage::cli::run_bench(rest);
    if (command == "check") return flashpage::cli::run_check(rest);
    if (command == "-h" || command == "--help" || command == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "flashpage: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const flashpage::cli::UsageError& e) {
    std::fprintf(stderr, "flashpage %s: %s\n\n%s", command.c_str(), e.what(), kUsage);
    return 2;
  } catch (const flashpage::Error& e) {
    std::fprintf(stderr, "flashpage %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
