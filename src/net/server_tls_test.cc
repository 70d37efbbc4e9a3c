#include "net/server_tls.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

const std::string kDir = std::string(WARDEN_FIXTURES_DIR) + "/tls/";

TEST(ServerTls, ACertificateWithItsOwnKeyMakesAContext) {
  std::string error;
  EXPECT_NE(MakeServerTlsContext(kDir + "localhost-cert.pem", kDir + "localhost-key.pem", &error),
            nullptr)
      << error;
}

// Each failure names the file at fault, so the operator knows which to fix.
TEST(ServerTls, EachWrongFileIsNamed) {
  std::string error;
  EXPECT_EQ(MakeServerTlsContext(kDir + "nope.pem", kDir + "localhost-key.pem", &error), nullptr);
  EXPECT_NE(error.find("cannot read the certificate file " + kDir + "nope.pem"), std::string::npos)
      << error;
  EXPECT_EQ(MakeServerTlsContext(kDir + "localhost-cert.pem", kDir + "README.md", &error), nullptr);
  EXPECT_NE(error.find("cannot read the private key file " + kDir + "README.md"), std::string::npos)
      << error;
  // A renewed key with the old certificate (the files copied one at a time, say).
  EXPECT_EQ(MakeServerTlsContext(kDir + "localhost-cert.pem", kDir + "renewed-key.pem", &error),
            nullptr);
  EXPECT_NE(error.find("is not the certificate's"), std::string::npos) << error;
  // An encrypted key: refused at once (no passphrase asked for on a terminal), and said so.
  EXPECT_EQ(MakeServerTlsContext(kDir + "localhost-cert.pem", kDir + "encrypted-key.pem", &error),
            nullptr);
  EXPECT_NE(error.find("it is encrypted: give an unencrypted key"), std::string::npos) << error;
}

}  // namespace
}  // namespace warden
