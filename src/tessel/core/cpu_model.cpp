#include "tessel/core/cpu_model.h"

#include <fstream>

namespace tessel {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown-cpu";
}

}  // namespace tessel
