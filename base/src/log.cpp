// The named loggers and the JSON-lines formatter.
#include "sluice/base/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <chrono>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

#include "sluice/base/json.hpp"

namespace sluice::base {
namespace {

constexpr std::array<std::string_view, 7> kNames{"policy", "proxy", "runner", "audit",
                                                 "serve",  "mcp",   "cli"};

// One object per line: {"ts","level","logger","msg"}, the message escaped (it may carry a
// host or path a sandbox chose).
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    using namespace std::chrono;
    auto ms = duration_cast<milliseconds>(msg.time.time_since_epoch()).count();
    std::time_t secs = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char ts[40];
    std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    auto level = spdlog::level::to_string_view(msg.level);
    nlohmann::json j = {{"ts", std::string(ts) + fmt::format(".{:03}Z", ms % 1000)},
                        {"level", std::string(level.data(), level.size())},
                        {"logger", std::string(msg.logger_name.data(), msg.logger_name.size())},
                        {"msg", std::string(msg.payload.data(), msg.payload.size())}};
    std::string line = dumpJson(j);
    line += '\n';
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

struct Loggers {
  std::array<std::shared_ptr<spdlog::logger>, kNames.size()> all;
  Loggers() {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    for (std::size_t i = 0; i < kNames.size(); ++i) {
      std::string name(kNames[i]);
      // A logger registered before us (a test, an embedding program) is kept. A new one
      // takes the registry's level and formatter (spdlog::set_level before first use holds).
      all[i] = spdlog::get(name);
      if (!all[i]) {
        all[i] = std::make_shared<spdlog::logger>(name, sink);
        spdlog::initialize_logger(all[i]);
      }
    }
  }
};

Loggers& loggers() {
  static Loggers l;  // thread-safe initialisation (C++11 magic statics)
  return l;
}

}  // namespace

std::string_view loggerName(LoggerId id) { return kNames[static_cast<std::size_t>(id)]; }

spdlog::logger& logger(LoggerId id) { return *loggers().all[static_cast<std::size_t>(id)]; }

void setLogFormat(LogFormat format) {
  loggers();  // registered first, so the registry's formatter reaches them too
  if (format == LogFormat::kJson)
    spdlog::set_formatter(std::make_unique<JsonFormatter>());
  else
    spdlog::set_pattern("%+");  // spdlog's default pattern
}

}  // namespace sluice::base
