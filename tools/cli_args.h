#pragma once
// A small "--flag value" / "--flag=value" parser: unknown flags and bad values throw
// UsageError, which main() turns into the usage message and exit code 2.
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace flashpage::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  // allowed: the flags this subcommand accepts (without "--").
  Args(const std::vector<std::string>& argv, const std::set<std::string>& allowed);
  bool has(const std::string& flag) const { return values_.count(flag) != 0; }
  std::string str(const std::string& flag, const std::string& fallback) const;
  long long integer(const std::string& flag, long long fallback, long long min_value = 0) const;
  double number(const std::string& flag, double fallback) const;
  // Comma-separated list of integers, e.g. --kv-len 128,4096.
  std::vector<long long> integers(const std::string& flag, const std::vector<long long>& fallback,
                                  long long min_value = 0) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace flashpage::cli
