#include "gateway/prompt_count.h"

#include <boost/json.hpp>

#include "net/upstream_get.h"

namespace warden {

long InputTokensOf(std::string_view count_tokens_answer) {
  boost::system::error_code ec;
  const boost::json::value doc = boost::json::parse(count_tokens_answer, ec);
  const boost::json::object* o = ec ? nullptr : doc.if_object();
  const boost::json::value* n = o ? o->if_contains("input_tokens") : nullptr;
  if (!n || !n->is_int64() || n->as_int64() <= 0 || n->as_int64() > (int64_t{1} << 40)) return 0;
  return static_cast<long>(n->as_int64());
}

boost::asio::awaitable<long> CountPromptTokens(const ModelState& model, int shard, int replica,
                                               std::string body,
                                               std::chrono::milliseconds timeout) {
  const ReplicaTarget& target = model.target(replica);
  const UpstreamGetResult answer = co_await UpstreamCall(
      *target.pool, shard, boost::beast::http::verb::post, "/v1/messages/count_tokens",
      std::move(body), timeout, model.replica_authorization(), 1 << 16, timeout, target.rank);
  co_return answer.status == 200 ? InputTokensOf(answer.body) : 0;
}

}  // namespace warden
