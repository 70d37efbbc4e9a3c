#include "os/read_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace warden {
namespace {

class ReadRegularFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::path(::testing::TempDir()) / ("read-file-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const char* name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

TEST_F(ReadRegularFileTest, ReadsAFileWhole) {
  std::ofstream(Path("a")) << "models: []\n";
  std::string text, error;
  ASSERT_TRUE(ReadRegularFile(Path("a"), 1024, &text, &error)) << error;
  EXPECT_EQ(text, "models: []\n");
  std::filesystem::create_symlink(Path("a"), Path("link"));
  ASSERT_TRUE(ReadRegularFile(Path("link"), 1024, &text, &error)) << error;
  EXPECT_EQ(text, "models: []\n");
}

// What would grow the reader without end (/dev/zero, a huge file) is refused, mostly before it is
// opened.
TEST_F(ReadRegularFileTest, RefusesWhatIsNoRegularFileOrTooLarge) {
  std::string text, error;
  EXPECT_FALSE(ReadRegularFile(Path("none"), 1024, &text, &error));
  EXPECT_EQ(error, "no such file");
  EXPECT_FALSE(ReadRegularFile(dir_.string(), 1024, &text, &error));
  EXPECT_EQ(error, "it is a directory");
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);  // unless asked for: never waited on
  EXPECT_FALSE(ReadRegularFile(Path("fifo"), 1024, &text, &error));
  EXPECT_EQ(error, "not a regular file");
  EXPECT_FALSE(ReadRegularFile("/dev/zero", 1024, &text, &error, /*pipes=*/true));
  EXPECT_EQ(error, "not a regular file");
  std::ofstream(Path("big")) << std::string(2048, 'x');
  EXPECT_FALSE(ReadRegularFile(Path("big"), 1024, &text, &error));
  EXPECT_EQ(error, "2048 bytes, more than the 1024 such a file may have");
}

// A pipe, as a shell's <(echo key) gives one: read whole, within the bound.
TEST_F(ReadRegularFileTest, ReadsAPipeWithinTheBound) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "sk-one\nsk-two\n", 14), 14);
  ::close(fds[1]);
  const std::string path = "/proc/self/fd/" + std::to_string(fds[0]);
  std::string text, error;
  ASSERT_TRUE(ReadRegularFile(path, 1024, &text, &error, /*pipes=*/true)) << error;
  EXPECT_EQ(text, "sk-one\nsk-two\n");
  ::close(fds[0]);
  ASSERT_EQ(::pipe(fds), 0);
  const std::string big(2048, 'x');
  ASSERT_EQ(::write(fds[1], big.data(), big.size()), 2048);
  ::close(fds[1]);
  EXPECT_FALSE(ReadRegularFile("/proc/self/fd/" + std::to_string(fds[0]), 1024, &text, &error,
                               /*pipes=*/true));
  EXPECT_EQ(error, "more than the 1024 bytes such a file may have");
  ::close(fds[0]);
}

}  // namespace
}  // namespace warden
