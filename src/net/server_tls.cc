#include "net/server_tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/ssl/error.hpp>
#include <fstream>
#include <string_view>

namespace warden {

namespace ssl = boost::asio::ssl;

namespace {

bool FileMentions(const std::string& path, std::string_view word) {
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line))
    if (line.find(word) != std::string::npos) return true;
  return false;
}

}  // namespace

std::shared_ptr<ssl::context> MakeServerTlsContext(const std::string& cert_file,
                                                   const std::string& key_file,
                                                   std::string* error) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                           ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                           ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                       ec);
  // An encrypted key is refused rather than asked for on a terminal (at start, or on SIGHUP).
  context->set_password_callback(
      [](size_t, ssl::context::password_purpose) { return std::string(); }, ec);
  if (!ec) context->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    *error = "cannot read the certificate file " + cert_file + ": " + ec.message();
    return nullptr;
  }
  context->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec && ec.category() == boost::asio::error::get_ssl_category() &&
      ERR_GET_REASON(ec.value()) == X509_R_KEY_VALUES_MISMATCH) {
    *error = "the private key in " + key_file + " is not the certificate's in " + cert_file;
    return nullptr;
  }
  if (ec) {
    *error = "cannot read the private key file " + key_file + ": " + ec.message();
    if (FileMentions(key_file, "ENCRYPTED"))
      *error += " (it is encrypted: give an unencrypted key)";
    return nullptr;
  }
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
    *error = "the private key in " + key_file + " is not the certificate's in " + cert_file;
    return nullptr;
  }
  return context;
}

}  // namespace warden
