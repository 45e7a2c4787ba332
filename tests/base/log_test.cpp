// Named loggers: a fixed list, one object each, JSON lines that escape what they carry.
#include "sluice/base/log.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <sstream>

namespace sluice::base {
namespace {

TEST(LogTest, EachIdIsOneRegisteredLogger) {
  EXPECT_EQ(loggerName(LoggerId::kAudit), "audit");
  EXPECT_EQ(&logger(LoggerId::kProxy), &logger(LoggerId::kProxy));
  EXPECT_EQ(spdlog::get("runner").get(), &logger(LoggerId::kRunner));
  EXPECT_EQ(logger(LoggerId::kServe).name(), "serve");
}

TEST(LogTest, JsonLinesEscapeTheMessage) {
  std::ostringstream out;
  auto& l = logger(LoggerId::kMcp);
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto saved = l.sinks();
  l.sinks() = {sink};
  setLogFormat(LogFormat::kJson);  // every sink of every logger gets the formatter
  l.info("host \"evil\"\n\x1b[2J");
  l.debug("not at this level");
  l.sinks() = saved;
  setLogFormat(LogFormat::kText);
  std::string line = out.str();
  ASSERT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["logger"], "mcp");
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["msg"], "host \"evil\"\n\x1b[2J");
  EXPECT_EQ(line.find('\x1b'), std::string::npos);  // control bytes escaped on the wire
}

}  // namespace
}  // namespace sluice::base
