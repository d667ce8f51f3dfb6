#include "cli_args.h"

#include <charconv>

namespace flashpage::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& allowed) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + a + "'");
    std::string key = a.substr(2), value;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else {
      if (i + 1 >= argv.size()) throw UsageError("flag --" + key + " needs a value");
      value = argv[++i];
    }
    if (!allowed.count(key)) throw UsageError("unknown flag --" + key);
    values_[key] = value;
  }
}

std::string Args::str(const std::string& flag, const std::string& fallback) const {
  auto it = values_.find(flag);
  return it == values_.end() ? fallback : it->second;
}

long long Args::integer(const std::string& flag, long long fallback, long long min_value) const {
  const auto v = integers(flag, {fallback}, min_value);
  if (v.size() != 1) throw UsageError("--" + flag + " expects one integer");
  return v[0];
}

double Args::number(const std::string& flag, double fallback) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  try {
    size_t used = 0;
    const double v = std::stod(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw UsageError("--" + flag + " expects a number, got '" + it->second + "'");
}

std::vector<long long> Args::integers(const std::string& flag,
                                      const std::vector<long long>& fallback,
                                      long long min_value) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  std::vector<long long> out;
  const std::string& s = it->second;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    long long v = 0;
    auto [p, ec] = std::from_chars(s.data() + start, s.data() + end, v);
    if (ec != std::errc() || p != s.data() + end || v < min_value)
      throw UsageError("--" + flag + " expects integers >= " + std::to_string(min_value) +
                       ", got '" + s + "'");
    out.push_back(v);
    start = end + 1;
  }
  return out;
}

}  // namespace flashpage::cli
