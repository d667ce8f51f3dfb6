#pragma once
// flashpage::Error: every public entry point validates its inputs and throws this with a
// message naming the argument, what was expected and what was given.
#include <stdexcept>
#include <string>

namespace flashpage {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace flashpage
