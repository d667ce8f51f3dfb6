#include "commands.h"
namespace flashpage::cli {
int run_check(const std::vector<std::string>&) { return 1; }  // placeholder until the oracle lands
}  // namespace flashpage::cli
