/* SPDX-License-Identifier: Apache-2.0 */
#include "control_token.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>

#include "keel/v1/control.grpc.pb.h"

namespace keel::ingress {
namespace {

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

/* A gateway that records the authorization metadata of each ReportIngressStats
 * and refuses calls without "Bearer kToken", as the real one does. */
class Gateway final : public keel::v1::Control::Service {
 public:
  grpc::Status ReportIngressStats(grpc::ServerContext* ctx, const keel::v1::IngressStats*,
                                  keel::v1::ReportIngressStatsResponse*) override {
    std::string seen;
    auto it = ctx->client_metadata().find("authorization");
    if (it != ctx->client_metadata().end()) seen.assign(it->second.data(), it->second.size());
    {
      std::lock_guard<std::mutex> lk(mu_);
      seen_ = seen;
    }
    if (seen != std::string("Bearer ") + kToken) return {grpc::StatusCode::UNAUTHENTICATED, "wrong token"};
    return grpc::Status::OK;
  }
  std::string seen() {
    std::lock_guard<std::mutex> lk(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::string seen_;
};

class ControlTokenCall : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&gateway_);
    server_ = b.BuildAndStart();
    ASSERT_TRUE(server_ && port_ > 0);
    stub_ = keel::v1::Control::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { server_->Shutdown(); }

  grpc::Status Report(const std::string* token) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (token) AddControlToken(&ctx, *token);
    keel::v1::ReportIngressStatsResponse resp;
    return stub_->ReportIngressStats(&ctx, keel::v1::IngressStats(), &resp);
  }

  Gateway gateway_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<keel::v1::Control::Stub> stub_;
};

TEST_F(ControlTokenCall, CarriesTheBearerTokenAsMetadata) {
  std::string token = kToken;
  grpc::Status st = Report(&token);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(gateway_.seen(), std::string("Bearer ") + kToken);
}

TEST_F(ControlTokenCall, WithoutTheTokenTheGatewayRefuses) {
  EXPECT_EQ(Report(nullptr).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(gateway_.seen(), "");
}

std::string TempFile(const std::string& text) {
  char path[] = "/tmp/keel-token-test-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(ReadControlToken, TrimsTheFilesWhiteSpace) {
  std::string path = TempFile(std::string(kToken) + "\n");
  std::string token, err;
  EXPECT_TRUE(ReadControlToken(path, &token, &err)) << err;
  EXPECT_EQ(token, kToken);
  std::remove(path.c_str());
}

TEST(ReadControlToken, RefusesMissingShortAndSpacedTokens) {
  std::string token, err;
  EXPECT_FALSE(ReadControlToken("/nonexistent/control-token", &token, &err));
  EXPECT_NE(err.find("/nonexistent/control-token: No such file"), std::string::npos) << err;
  for (const char* text : {"short\n", "0123456789 abcdef0123\n"}) {
    std::string path = TempFile(text);
    err.clear();
    EXPECT_FALSE(ReadControlToken(path, &token, &err)) << text;
    EXPECT_NE(err.find(path), std::string::npos) << err;
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace keel::ingress
