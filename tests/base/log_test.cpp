// Named loggers: a fixed list, one object each, JSON lines that escape what they carry.
#include "sluice/base/log.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

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

TEST(LogTest, ALogFileTakesEveryLoggerAndIsTheOwnersAlone) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("sluice-log-" + std::to_string(::getpid())))
          .string();
  std::vector<std::vector<spdlog::sink_ptr>> saved;
  for (LoggerId id : {LoggerId::kProxy, LoggerId::kMcp}) saved.push_back(logger(id).sinks());
  ASSERT_TRUE(setLogFile(path));
  ASSERT_TRUE(setLogLevel("debug"));
  logger(LoggerId::kProxy).debug("to the file");
  logger(LoggerId::kMcp).trace("below the level");
  logger(LoggerId::kProxy).flush();
  logger(LoggerId::kProxy).sinks() = saved[0];
  logger(LoggerId::kMcp).sinks() = saved[1];
  ASSERT_TRUE(setLogLevel("info"));
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("to the file"), std::string::npos) << text;
  EXPECT_EQ(text.find("below the level"), std::string::npos) << text;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::filesystem::remove(path);

  auto bad = setLogLevel("loud");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("unknown log level 'loud'"), std::string::npos);
  auto unwritable = setLogFile("/proc/sluice-no-such-dir/log");
  ASSERT_FALSE(unwritable);
  EXPECT_EQ(unwritable.error().where, "/proc/sluice-no-such-dir/log");
}

}  // namespace
}  // namespace sluice::base
