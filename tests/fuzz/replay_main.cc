/* SPDX-License-Identifier: Apache-2.0 */
/* Replays a fuzz corpus without libFuzzer: runs the harness's
 * LLVMFuzzerTestOneInput on every file under the directories given, so that
 * the checked-in corpus is a regression test in the ordinary build. A
 * crash, a sanitizer report or a broken invariant fails it. */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  size_t n = 0;
  for (int i = 1; i < argc; i++) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(argv[i], ec))
      if (e.is_regular_file()) files.push_back(e.path());
    if (ec) {
      std::fprintf(stderr, "%s: %s\n", argv[i], ec.message().c_str());
      return 1;
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      n++;
    }
  }
  std::printf("replayed %zu inputs\n", n);
  return n ? 0 : 1;
}
