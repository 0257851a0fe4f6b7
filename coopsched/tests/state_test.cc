// SPDX-License-Identifier: Apache-2.0
// The state file (cs-state.h): what one keel-coopsched writes, a successor reads back
// exactly; anything else is refused whole, naming the line. No root needed.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "cs-state.h"

namespace {

class StateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/keel-cs-state-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    file_ = dir_ + "/coopsched.state";
  }
  void TearDown() override {
    unlink(file_.c_str());
    rmdir(dir_.c_str());
  }
  void Write(const std::string& text) { std::ofstream(file_) << text; }
  std::string dir_, file_;
};

TEST_F(StateFileTest, RoundTripsAnyIdAndPath) {
  cs_state_entry in[2] = {};
  std::snprintf(in[0].id, sizeof in[0].id, "chain2.1");
  std::snprintf(in[0].path, sizeof in[0].path, "/run/keel/pktbuf/chain2.1/pktbuf");
  in[0].core = 1;
  in[0].n = 3;
  for (uint32_t k = 0; k < 3; k++) {
    in[0].tids[k] = 100 + static_cast<pid_t>(k);
    in[0].starts[k] = 5000 + k;
  }
  std::snprintf(in[1].id, sizeof in[1].id, "with space\tand tab");
  std::snprintf(in[1].path, sizeof in[1].path, "/tmp/a b/\n/pktbuf");
  in[1].core = -1;
  in[1].n = 1;
  in[1].tids[0] = 7;
  in[1].starts[0] = 1;
  cs_error err{};
  ASSERT_EQ(cs_state_write(file_.c_str(), in, 2, &err), CS_OK) << err.msg;
  cs_state_entry* out = nullptr;
  size_t n = 0;
  ASSERT_EQ(cs_state_read(file_.c_str(), &out, &n, &err), CS_OK) << err.msg;
  ASSERT_EQ(n, 2u);
  for (size_t i = 0; i < n; i++) {
    EXPECT_STREQ(out[i].id, in[i].id);
    EXPECT_STREQ(out[i].path, in[i].path);
    EXPECT_EQ(out[i].core, in[i].core);
    ASSERT_EQ(out[i].n, in[i].n);
    for (uint32_t k = 0; k < in[i].n; k++) {
      EXPECT_EQ(out[i].tids[k], in[i].tids[k]);
      EXPECT_EQ(out[i].starts[k], in[i].starts[k]);
    }
  }
  free(out);
  // No table: an empty file, and no file at all, read as nothing to take back.
  ASSERT_EQ(cs_state_write(file_.c_str(), nullptr, 0, &err), CS_OK) << err.msg;
  ASSERT_EQ(cs_state_read(file_.c_str(), &out, &n, &err), CS_OK);
  EXPECT_EQ(n, 0u);
  free(out);
  unlink(file_.c_str());
  ASSERT_EQ(cs_state_read(file_.c_str(), &out, &n, &err), CS_OK);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(out, nullptr);
  EXPECT_NE(access((file_ + ".new").c_str(), F_OK), 0) << "the temporary file was left behind";
}

TEST_F(StateFileTest, MalformedFilesAreRefusedWholeNamingTheLine) {
  const struct {
    const char* text;
    const char* want;
  } cases[] = {
      {"something else\n", "not a keel-coopsched state file"},
      {"keel-coopsched-state 1\n", nullptr},
      {"keel-coopsched-state 1\ng 61 2f78 1 10/20\nx\n", ":3: malformed"},
      {"keel-coopsched-state 1\ng 6 2f78 1 10/20\n", ":2: malformed"},   // odd hex
      {"keel-coopsched-state 1\ng 00 2f78 1 10/20\n", ":2: malformed"},  // a NUL byte
      {"keel-coopsched-state 1\ng 61 2f78 -2 10/20\n", ":2: malformed"}, // core
      {"keel-coopsched-state 1\ng 61 2f78 1\n", ":2: malformed"},        // no thread
      {"keel-coopsched-state 1\ng 61 2f78 1 10\n", ":2: malformed"},     // no start time
      {"keel-coopsched-state 1\ng 61 2f78 1 0/20\n", ":2: malformed"},   // tid 0
      {"keel-coopsched-state 1\ng 61 2f78 1 10/0\n", ":2: malformed"},   // start 0
      {"keel-coopsched-state 1\ng 61 2f78 1 1/1 2/1 3/1 4/1 5/1 6/1 7/1 8/1 9/1 10/1 11/1 12/1 "
       "13/1 14/1 15/1 16/1 17/1\n", ":2: malformed"},                    // too many positions
  };
  for (const auto& c : cases) {
    Write(c.text);
    cs_state_entry* out = nullptr;
    size_t n = 99;
    cs_error err{};
    enum cs_errclass cls = cs_state_read(file_.c_str(), &out, &n, &err);
    if (!c.want) {
      EXPECT_EQ(cls, CS_OK) << c.text << err.msg;
      free(out);
      continue;
    }
    EXPECT_EQ(cls, CS_EINVAL) << c.text;
    EXPECT_NE(std::string(err.msg).find(c.want), std::string::npos) << c.text << " -> " << err.msg;
    EXPECT_EQ(out, nullptr);
    EXPECT_EQ(n, 0u);
  }
}

}  // namespace
