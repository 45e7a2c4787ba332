// The named loggers and the JSON-lines formatter.
#include "sluice/base/log.hpp"

#include <fcntl.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "sluice/base/clock.hpp"
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
    auto level = spdlog::level::to_string_view(msg.level);
    nlohmann::json j = {{"ts", formatUtcMs(ms)},
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

Result<void> setLogFile(const std::string& path) {
  // Created 0600 here (spdlog would create it with the umask's mode): log lines name hosts,
  // paths and callers.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return fail(Code::kIo, "cannot open the log file", path, errno);
  ::close(fd);
  std::shared_ptr<spdlog::sinks::basic_file_sink_mt> sink;
  try {  // spdlog reports a file it cannot open by throwing; nothing else here throws
    sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
  } catch (const spdlog::spdlog_ex& e) {
    return fail(Code::kIo, e.what(), path);
  }
  auto& all = loggers().all;
  for (auto& l : all) l->sinks() = {sink};
  spdlog::flush_on(spdlog::level::info);  // a file is read while the process runs
  return {};
}

Result<void> setLogLevel(std::string_view level) {
  const auto l = spdlog::level::from_str(std::string(level));
  // from_str answers "off" for a word it does not know: only "off" itself may mean off.
  if (l == spdlog::level::off && level != "off")
    return fail(Code::kInvalidArgument, "unknown log level '" + std::string(level) +
                                            "' (trace, debug, info, warn, error, critical or off)");
  loggers();  // registered first, so the registry's level reaches them too
  spdlog::set_level(l);
  return {};
}

}  // namespace sluice::base
