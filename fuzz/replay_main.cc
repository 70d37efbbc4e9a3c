// Runs a libFuzzer target's entry point over saved inputs, without libFuzzer: each file named on
// the command line, or each file in a folder named there. `make test` replays every target's
// corpus this way (built with g++ and the sanitizers), so an input that once found a fault, or
// that reaches a branch no test does, keeps being checked after the fuzzing session that found it.
// A target reports a broken invariant by trapping; the sanitizers report the rest.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

// The files `arg` names: itself, or the regular files in it, in name order (so that a failure
// names the same input on every run).
std::vector<fs::path> InputsOf(const fs::path& arg) {
  if (!fs::is_directory(arg)) return {arg};
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(arg)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool Replay(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    return false;
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A copy of exactly the input's size, so that AddressSanitizer sees a read past its end.
  std::vector<uint8_t> data(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(data.data(), data.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE|FOLDER...\n", argv[0]);
    return 2;
  }
  size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    const std::vector<fs::path> inputs = InputsOf(argv[i]);
    if (inputs.empty()) {
      std::fprintf(stderr, "%s holds no input\n", argv[i]);
      return 1;
    }
    for (const fs::path& input : inputs) {
      // Named before it runs: a crash's report then says which input it was.
      std::fprintf(stderr, "%s\n", input.c_str());
      if (!Replay(input)) return 1;
      ++replayed;
    }
  }
  std::printf("%zu inputs replayed, none failed\n", replayed);
  return 0;
}
