#include "core/protocol/adapter_request.h"

#include <boost/json.hpp>

namespace warden {

std::optional<AdapterRequest> ParseAdapterRequest(std::string_view body) {
  boost::system::error_code ec;
  const boost::json::value doc = boost::json::parse(body, ec);
  const boost::json::object* o = ec ? nullptr : doc.if_object();
  if (!o) return std::nullopt;
  AdapterRequest request;
  if (const boost::json::value* v = o->if_contains("lora_name"); v && v->is_string())
    request.name = v->as_string();
  if (const boost::json::value* v = o->if_contains("lora_path"); v && v->is_string())
    request.path = v->as_string();
  if (const boost::json::value* v = o->if_contains("load_inplace"); v && v->is_bool())
    request.inplace = v->as_bool();
  return request;
}

}  // namespace warden
