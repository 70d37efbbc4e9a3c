// JSON text for people as well as programs: Boost.JSON 1.81 writes every double in exponent form
// ("scrape_interval_s": 1E0, a Unix time as 1.7964580552218003E9), valid JSON but hard to read in
// curl's output. This writes the shortest decimal that reads back as the same double (1.0, 0.25,
// 1796458055.2218003; a whole number with ".0", so that it reads back as a double) and everything
// else as Boost.JSON does.
#pragma once

#include <boost/json/value.hpp>
#include <string>

namespace warden {

// `value` as JSON text. A double that is not finite (which JSON cannot say) is written null.
std::string JsonText(const boost::json::value& value);

}  // namespace warden
