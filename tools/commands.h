#pragma once
#include <string>
#include <vector>

namespace flashpage::cli {

// Each returns the process exit code; argv excludes the program and subcommand names.
int run_demo(const std::vector<std::string>& argv);
int run_bench(const std::vector<std::string>& argv);
int run_check(const std::vector<std::string>& argv);

}  // namespace flashpage::cli
