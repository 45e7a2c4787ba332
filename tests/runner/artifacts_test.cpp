// Collecting /output against a hostile sandbox: real temp dirs and real sparse files
// stand in for the sandbox's tmpfs. The bytes landing on the host stay within the budget (the
// sandbox's disk limit) whatever the apparent sizes, holes stay holes, every bound that leaves
// something behind is named, unsafe names never reach the host, and links, fifos and sockets
// make sluice neither read nor write outside.
#include "artifacts.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "isolation_required.hpp"
#include "sluice/runner/receipt.hpp"

namespace fs = std::filesystem;
using namespace sluice::runner;
using detail::collectArtifacts;

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

// sha256 of 16 MiB of zeros.
constexpr const char* kZeros16MiB =
    "080acf35a507ac9849cfcba47dc2ad83e01b75663a516279c8b9d243b719643e";

class Artifacts : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "sluice-artifacts-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    base_ = tmpl;
    src_ = base_ / "output";
    dst_ = base_ / "host";
    fs::create_directories(src_);
  }
  void TearDown() override { fs::remove_all(base_); }

  // A file of apparent size `size` with no data at all (as `truncate -s` makes it).
  void sparse(const fs::path& p, std::uint64_t size) {
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << p;
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
    ::close(fd);
  }
  void write(const fs::path& p, const std::string& data) { std::ofstream(p) << data; }

  struct Usage {
    std::uint64_t apparent = 0;
    std::uint64_t allocated = 0;
    std::uint64_t files = 0;
  };
  // What the host holds under `dir` (regular files only).
  static Usage usage(const fs::path& dir) {
    Usage u;
    if (!fs::exists(dir)) return u;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      struct stat st {};
      if (::lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      u.apparent += static_cast<std::uint64_t>(st.st_size);
      u.allocated += static_cast<std::uint64_t>(st.st_blocks) * 512;
      ++u.files;
    }
    return u;
  }

  fs::path base_, src_, dst_;
};

TEST_F(Artifacts, SparseFilesCannotAmplifyPastTheBudget) {
  // The attack: 20 files of 16 MiB each, no data, in a sandbox whose disk limit is 16 MiB.
  for (int i = 0; i < 20; ++i) sparse(src_ / ("f" + std::to_string(100 + i)), 16 * kMiB);
  auto r = collectArtifacts(src_, dst_, 16 * kMiB);
  ASSERT_TRUE(r) << r.error();
  const Usage u = usage(dst_);
  EXPECT_LE(u.apparent, 16 * kMiB);
  EXPECT_LE(u.allocated, 16 * kMiB);
  ASSERT_EQ(r->files.size(), 1u);
  EXPECT_EQ(r->files[0].path, "f100");
  EXPECT_EQ(r->files[0].bytes, 16 * kMiB);
  EXPECT_EQ(r->files[0].sha256, kZeros16MiB);
  ASSERT_TRUE(r->truncated);
  EXPECT_EQ(r->truncated->reason, ArtifactSkip::kDiskBudget);
  EXPECT_EQ(r->truncated->skipped, 19u);
  // The same bound holds when nothing is copied: it also bounds the hashing work.
  auto hashed = collectArtifacts(src_, "", 16 * kMiB);
  ASSERT_TRUE(hashed);
  EXPECT_EQ(hashed->files.size(), 1u);
  ASSERT_TRUE(hashed->truncated);
  EXPECT_EQ(hashed->truncated->skipped, 19u);
}

TEST_F(Artifacts, HolesStayHolesOnTheHost) {
  // 12 MiB apparent: "head" at 0, "tail" at 8 MiB, holes elsewhere.
  const fs::path p = src_ / "sparse.bin";
  sparse(p, 12 * kMiB);
  {
    const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "head", 4, 0), 4);
    ASSERT_EQ(::pwrite(fd, "tail", 4, 8 * kMiB), 4);
    ::close(fd);
  }
  auto r = collectArtifacts(src_, dst_, 100 * kMiB);
  ASSERT_TRUE(r) << r.error();
  EXPECT_FALSE(r->truncated);
  ASSERT_EQ(r->files.size(), 1u);
  EXPECT_EQ(r->files[0].bytes, 12 * kMiB);
  const Usage u = usage(dst_);
  EXPECT_EQ(u.apparent, 12 * kMiB);
  EXPECT_LT(u.allocated, 1 * kMiB) << "the holes were written out as zeros";
  // Same bytes (and so the same hash) as the source.
  std::ifstream a(p, std::ios::binary), b(dst_ / "sparse.bin", std::ios::binary);
  const std::string sa((std::istreambuf_iterator<char>(a)), {});
  const std::string sb((std::istreambuf_iterator<char>(b)), {});
  EXPECT_TRUE(sa == sb);
  auto again = collectArtifacts(dst_, "", 100 * kMiB);
  ASSERT_TRUE(again);
  ASSERT_EQ(again->files.size(), 1u);
  EXPECT_EQ(again->files[0].sha256, r->files[0].sha256);
}

TEST_F(Artifacts, AllocatedBlocksCountAsWellAsApparentSize) {
  // Blocks without length: fallocate past the end leaves st_size at 0.
  const fs::path p = src_ / "a-prealloc";
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(8 * kMiB)), 0);
  ::close(fd);
  write(src_ / "b-small", "fits");
  auto r = collectArtifacts(src_, dst_, 4 * kMiB);
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(r->files.size(), 1u);
  EXPECT_EQ(r->files[0].path, "b-small");  // a file that does not fit does not stop the rest
  ASSERT_TRUE(r->truncated);
  EXPECT_EQ(r->truncated->reason, ArtifactSkip::kDiskBudget);
  EXPECT_EQ(r->truncated->skipped, 1u);
  EXPECT_FALSE(fs::exists(dst_ / "a-prealloc"));
}

TEST_F(Artifacts, DenseFilesShareOneBudgetAndAreNeverCutShort) {
  write(src_ / "a", std::string(3 * kMiB, 'a'));
  write(src_ / "b", std::string(3 * kMiB, 'b'));
  auto r = collectArtifacts(src_, dst_, 4 * kMiB);
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(r->files.size(), 1u);
  EXPECT_EQ(fs::file_size(dst_ / "a"), 3 * kMiB);
  EXPECT_FALSE(fs::exists(dst_ / "b"));
  ASSERT_TRUE(r->truncated);
  EXPECT_EQ(r->truncated->skipped, 1u);
  EXPECT_LE(usage(dst_).allocated, 4 * kMiB);
}

TEST_F(Artifacts, EverythingCollectedIsNotFlagged) {
  fs::create_directories(src_ / "sub" / "deeper");
  write(src_ / "x", "x");
  write(src_ / "sub" / "deeper" / "y", "y");
  auto r = collectArtifacts(src_, dst_, 1 * kMiB);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->files.size(), 2u);
  EXPECT_FALSE(r->truncated);
}

TEST_F(Artifacts, MoreThanTenThousandEntriesAreFlagged) {
  for (int i = 0; i < detail::kMaxArtifactEntries + 5; ++i) {
    const int fd =
        ::open((src_ / ("e" + std::to_string(i))).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  auto r = collectArtifacts(src_, "", 16 * kMiB);  // hashed only: the bound is the same
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->files.size(), static_cast<std::size_t>(detail::kMaxArtifactEntries));
  ASSERT_TRUE(r->truncated);
  EXPECT_EQ(r->truncated->reason, ArtifactSkip::kEntries);
  EXPECT_EQ(r->truncated->skipped, 5u);
}

TEST_F(Artifacts, DeeperThanThirtyTwoLevelsIsFlagged) {
  // d1/d2/.../d34, a file in each: d1..d32 are entered (their files collected), d33 is not.
  fs::path dir = src_;
  for (int i = 1; i <= 34; ++i) {
    dir /= "d" + std::to_string(i);
    fs::create_directory(dir);
    write(dir / "f", std::to_string(i));
  }
  auto r = collectArtifacts(src_, dst_, 16 * kMiB);
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(r->files.size(), 32u);
  ASSERT_TRUE(r->truncated);
  EXPECT_EQ(r->truncated->reason, ArtifactSkip::kDepth);
  EXPECT_EQ(r->truncated->skipped, 1u);
}

TEST_F(Artifacts, UnsafeNamesAreRefusedAndCounted) {
  const std::vector<std::string> bad = {"new\nline",
                                        "esc\x1b[31mred",
                                        "del\x7f",
                                        "tab\tname",
                                        "bad\xff",
                                        "overlong\xc0\xaf",
                                        "csi\xc2\x9b"
                                        "2J",
                                        "surrogate\xed\xa0\x80",
                                        "cut\xe6\x97",
                                        "big\xf4\x90\x80\x80"};
  for (const std::string& n : bad) write(src_ / n, "x");
  fs::create_directory(src_ / "dir\x01");  // a refused directory is not entered either
  write(src_ / "dir\x01" / "inside", "x");
  write(src_ / "caf\xc3\xa9.txt", "ok");
  write(src_ / "\xe6\x97\xa5\xe6\x9c\xac.txt", "ok");
  write(src_ / "emoji-\xf0\x9f\x93\x8a.csv", "ok");
  auto r = collectArtifacts(src_, dst_, 16 * kMiB);
  ASSERT_TRUE(r) << r.error();
  std::vector<std::string> got;
  for (const Artifact& a : r->files) got.push_back(a.path);
  EXPECT_EQ(got, (std::vector<std::string>{"caf\xc3\xa9.txt", "emoji-\xf0\x9f\x93\x8a.csv",
                                           "\xe6\x97\xa5\xe6\x9c\xac.txt"}));
  ASSERT_TRUE(r->truncated);
  EXPECT_EQ(r->truncated->reason, ArtifactSkip::kName);
  EXPECT_EQ(r->truncated->skipped, bad.size() + 1);
  // Nothing with such a name reached the host.
  std::size_t on_host = 0;
  for (const auto& e : fs::recursive_directory_iterator(dst_)) {
    EXPECT_TRUE(detail::safeArtifactName(e.path().filename().string())) << e.path();
    ++on_host;
  }
  EXPECT_EQ(on_host, 3u);
}

TEST(ArtifactNames, Utf8AndControlCharacters) {
  using detail::safeArtifactName;
  EXPECT_TRUE(safeArtifactName("report.csv"));
  EXPECT_TRUE(safeArtifactName("a b~!"));
  EXPECT_TRUE(safeArtifactName("\xc2\xa0"));          // U+00A0, the first after C1
  EXPECT_TRUE(safeArtifactName("\xef\xbf\xbd"));      // U+FFFD
  EXPECT_TRUE(safeArtifactName("\xf4\x8f\xbf\xbf"));  // U+10FFFF
  EXPECT_FALSE(safeArtifactName(std::string("nul\0x", 5)));
  EXPECT_FALSE(safeArtifactName("\x1f"));
  EXPECT_FALSE(safeArtifactName("\x7f"));
  EXPECT_FALSE(safeArtifactName("\xc2\x80"));          // C1
  EXPECT_FALSE(safeArtifactName("\x80"));              // continuation first
  EXPECT_FALSE(safeArtifactName("\xe0\x80\xaf"));      // overlong '/'
  EXPECT_FALSE(safeArtifactName("\xf8\x88\x80\x80"));  // 5-byte form
  EXPECT_FALSE(safeArtifactName("\xc3"));              // cut short
  EXPECT_FALSE(safeArtifactName("\xc3z"));
}

TEST_F(Artifacts, LinksFifosAndSocketsAreNeitherFollowedNorOpened) {
  // Outside the collected tree, as the host's files are outside the sandbox's /output.
  const fs::path secret = base_ / "secret";
  write(secret, "host secret");
  fs::create_directory(base_ / "secret-dir");
  write(base_ / "secret-dir" / "inner", "host secret");
  fs::create_symlink(secret, src_ / "link-file");
  fs::create_symlink(base_ / "secret-dir", src_ / "link-dir");
  fs::create_symlink("../secret", src_ / "link-relative");
  ASSERT_EQ(::mkfifo((src_ / "fifo").c_str(), 0644), 0);  // opening it for reading would block
  const int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  const std::string sock = (src_ / "sock").string();
  ASSERT_LT(sock.size(), sizeof sa.sun_path);
  std::memcpy(sa.sun_path, sock.c_str(), sock.size() + 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ::close(s);
  write(src_ / "real", "data");
  auto r = collectArtifacts(src_, dst_, 16 * kMiB);
  ASSERT_TRUE(r) << r.error();
  ASSERT_EQ(r->files.size(), 1u);
  EXPECT_EQ(r->files[0].path, "real");
  EXPECT_FALSE(r->truncated) << "links and special files are not collected by design";
  std::size_t on_host = 0;
  for (const auto& e : fs::recursive_directory_iterator(dst_)) {
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(e.path()))) << e.path();
    ++on_host;
  }
  EXPECT_EQ(on_host, 1u);
}

TEST_F(Artifacts, HostSideLinksAreNotFollowed) {
  // --output-dir already holds links where the sandbox's names will land: neither a directory
  // nor a file is written through them.
  const fs::path victim = base_ / "victim";
  fs::create_directories(victim);
  write(victim / "file", "original");
  fs::create_directories(dst_);
  fs::create_symlink(victim, dst_ / "sub");
  fs::create_directory(src_ / "sub");
  write(src_ / "sub" / "planted", "evil");
  auto r = collectArtifacts(src_, dst_, 16 * kMiB);
  EXPECT_FALSE(r) << "wrote through a symlinked directory";
  EXPECT_FALSE(fs::exists(victim / "planted"));

  fs::remove_all(src_ / "sub");
  fs::remove(dst_ / "sub");
  fs::create_symlink(victim / "file", dst_ / "file");
  write(src_ / "file", "evil");
  r = collectArtifacts(src_, dst_, 16 * kMiB);
  EXPECT_FALSE(r) << "wrote through a symlinked file";
  std::ifstream in(victim / "file");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "original");
}

// The receipt: the new field, null or {reason, skipped}, valid against the schema.
TEST(ArtifactsReceipt, NamesTheTruncationAndValidates) {
  RunSpec spec;
  spec.argv = {"true"};
  spec.execution_id = "ex-artifacts";
  RunResult r;
  r.started_at = std::chrono::system_clock::time_point(std::chrono::milliseconds(1700000000000));
  r.ended_at = r.started_at;
  r.isolation.cgroup = "v1";
  ReceiptContext ctx;
  ctx.policy_sha256 = std::string(64, 'a');
  EXPECT_TRUE(buildReceipt(spec, r, ctx)["artifacts_truncated"].is_null());
  r.artifacts_truncated = ArtifactsTruncated{ArtifactSkip::kDiskBudget, 19};
  const auto j = buildReceipt(spec, r, ctx);
  EXPECT_EQ(j["artifacts_truncated"], nlohmann::json({{"reason", "disk_budget"}, {"skipped", 19}}));
  EXPECT_EQ(j["limit_hit"], nullptr) << "limit_hit keeps its meaning";

  if (std::system("python3 -c 'import jsonschema' 2>/dev/null") != 0) {
    if (isolationRequired()) FAIL() << "python3-jsonschema is missing";
    GTEST_SKIP() << "python3-jsonschema not installed";
  }
  const std::string file = "/tmp/sluice-artifacts-receipt-" + std::to_string(::getpid()) + ".json";
  auto valid = [&](const nlohmann::json& receipt, bool quiet = false) {
    std::ofstream(file) << receipt.dump();
    const std::string cmd =
        "python3 -c 'import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), "
        "json.load(open(sys.argv[2])))' " +
        file + " " SLUICE_SOURCE_DIR "/schemas/receipt.v1.schema.json" +
        (quiet ? " 2>/dev/null" : "");
    return std::system(cmd.c_str()) == 0;
  };
  for (ArtifactSkip why : {ArtifactSkip::kDiskBudget, ArtifactSkip::kEntries, ArtifactSkip::kDepth,
                           ArtifactSkip::kName}) {
    r.artifacts_truncated = ArtifactsTruncated{why, 1};
    EXPECT_TRUE(valid(buildReceipt(spec, r, ctx))) << artifactSkipName(why);
  }
  r.artifacts_truncated.reset();
  EXPECT_TRUE(valid(buildReceipt(spec, r, ctx)));
  // An older receipt, without the field, is still valid.
  auto old = buildReceipt(spec, r, ctx);
  old.erase("artifacts_truncated");
  EXPECT_TRUE(valid(old));
  // A made-up reason is not.
  auto bad = buildReceipt(spec, r, ctx);
  bad["artifacts_truncated"] = {{"reason", "space"}, {"skipped", 1}};
  EXPECT_FALSE(valid(bad, true));
  std::remove(file.c_str());
}

}  // namespace
