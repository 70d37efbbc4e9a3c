#include "net/json_text.h"

#include <fmt/format.h>

#include <boost/json/serialize.hpp>
#include <cmath>

namespace warden {
namespace {

namespace json = boost::json;

void Write(const json::value& value, std::string* out) {
  switch (value.kind()) {
    case json::kind::double_: {
      const double d = value.get_double();
      if (!std::isfinite(d)) {
        out->append("null");
        return;
      }
      const size_t start = out->size();
      fmt::format_to(std::back_inserter(*out), "{}", d);
      // Read back as a double, not an integer, by readers that tell them apart.
      if (out->find_first_of(".e", start) == std::string::npos) out->append(".0");
      return;
    }
    case json::kind::object: {
      out->push_back('{');
      bool first = true;
      for (const json::key_value_pair& field : value.get_object()) {
        if (!first) out->push_back(',');
        first = false;
        out->append(json::serialize(json::string_view(field.key())));
        out->push_back(':');
        Write(field.value(), out);
      }
      out->push_back('}');
      return;
    }
    case json::kind::array: {
      out->push_back('[');
      bool first = true;
      for (const json::value& element : value.get_array()) {
        if (!first) out->push_back(',');
        first = false;
        Write(element, out);
      }
      out->push_back(']');
      return;
    }
    default:  // strings, integers, booleans, null
      out->append(json::serialize(value));
  }
}

}  // namespace

std::string JsonText(const json::value& value) {
  std::string out;
  Write(value, &out);
  return out;
}

}  // namespace warden
