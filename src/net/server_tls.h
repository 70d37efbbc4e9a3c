// TLS for the gateway's own listener: clients on other machines reach it over https, so their
// API keys and conversations do not cross the network in clear.
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <memory>
#include <string>

namespace warden {

// A server context with the certificate chain in `cert_file` and its private key in `key_file`
// (both PEM, as certbot and `openssl req` write them), TLS 1.2 or later. Null, with `error` saying
// which file and why, when a file cannot be read or the key is not the certificate's.
std::shared_ptr<boost::asio::ssl::context> MakeServerTlsContext(const std::string& cert_file,
                                                                const std::string& key_file,
                                                                std::string* error);

}  // namespace warden
