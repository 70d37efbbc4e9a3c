#include "util/read_file.h"

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

// What would hang the reader (a FIFO with no writer, /dev/zero) or grow it without end is refused
// before it is opened.
TEST_F(ReadRegularFileTest, RefusesWhatIsNoRegularFileOrTooLarge) {
  std::string text, error;
  EXPECT_FALSE(ReadRegularFile(Path("none"), 1024, &text, &error));
  EXPECT_EQ(error, "no such file");
  EXPECT_FALSE(ReadRegularFile(dir_.string(), 1024, &text, &error));
  EXPECT_EQ(error, "it is a directory");
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);
  EXPECT_FALSE(ReadRegularFile(Path("fifo"), 1024, &text, &error));
  EXPECT_EQ(error, "not a regular file");
  EXPECT_FALSE(ReadRegularFile("/dev/zero", 1024, &text, &error));
  EXPECT_EQ(error, "not a regular file");
  std::ofstream(Path("big")) << std::string(2048, 'x');
  EXPECT_FALSE(ReadRegularFile(Path("big"), 1024, &text, &error));
  EXPECT_EQ(error, "2048 bytes, more than the 1024 such a file may have");
}

}  // namespace
}  // namespace warden
