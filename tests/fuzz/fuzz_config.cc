// libFuzzer target: the EAGERCOMM_* table's parsers. The input is read as NAME=VALUE lines (an
// environment); Config::load must accept it or return a Status, never crash, and a Config it
// accepts must describe() itself. The raw input also goes through the size and duration parsers.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "collectives/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace eagercomm;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)parse_size(text);
  (void)parse_duration(text);
  std::map<std::string, std::string> env;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    if (const size_t eq = line.find('='); eq != std::string_view::npos) {
      env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
    start = end + 1;
  }
  if (Result<Config> c = Config::load(env); c.ok()) {
    for (const Config::Row& row : c.value().describe()) (void)row.value.size();
  }
  return 0;
}
