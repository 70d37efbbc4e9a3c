// Gateway's exchange with a replica: the request sent and the response's head read (Relay, in
// gateway_relay.cc, relays the rest to the client).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/beast/http/parser.hpp>
#include <cerrno>
#include <span>

#include "gateway/gateway.h"
#include "gateway/gateway_internal.h"
#include "net/field_line.h"
#include "net/field_list.h"
#include "net/hangup_watch.h"
#include "net/http_read.h"
#include "net/relay_parser.h"
#include "net/upstream_io.h"
#include "net/write_now.h"
#include "util/append_number.h"
#include "util/ascii_case.h"

namespace warden {

using namespace std::string_view_literals;  // literals appended without a strlen

namespace {

// A reused connection that fails this soon after the request went out was closed by the server
// before it read the request, and the request is sent again on a new one.
constexpr std::chrono::milliseconds kStaleConnectionWindow{500};

// Interim (1xx) responses read before a replica's answer is taken for malformed.
constexpr int kMostInterimResponses = 16;

// A response Beast could not parse (not a broken connection): the replica's fault, and a proxy
// passes on no such response.
bool IsMalformedResponse(const boost::system::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_version).category() &&
         ec != http::error::end_of_stream && ec != http::error::partial_message &&
         ec != http::error::need_more;
}

// The fields the request's Connection fields name, sorted without regard to case (so that a
// crafted header naming thousands costs n log n, not names × fields).
std::vector<std::string_view> ConnectionNames(const HttpRequest& request) {
  std::vector<std::string_view> names;
  const auto [first, last] = request.equal_range(http::field::connection);
  for (auto it = first; it != last; ++it)
    ForEachToken(it->value(), [&](std::string_view token) { names.push_back(token); });
  std::sort(names.begin(), names.end(), beast::iless());
  return names;
}

// Appends the request's end-to-end fields to `head`, without those `named` (sorted by
// beast::iless); returns whether a Connection field names some.
// The client's credentials are left out (`no_credentials`) where the gateway sends the replicas'
// own key instead, its X-Request-Id (`own_request_id`) where the gateway sends the request's, and
// its traceparent (`own_trace`) where the gateway sends its span's, and its tracestate too where
// that span starts a trace of its own (`new_trace`: the client's was not valid).
bool WriteEndToEndFields(const HttpRequest& request, std::span<const std::string_view> named,
                         bool no_credentials, bool own_request_id, bool own_trace, bool new_trace,
                         std::string* head) {
  bool connection_names = false;
  for (const auto& f : request) {
    if (IsHopByHop(f.name()) || f.name() == http::field::host) {
      if (f.name() == http::field::connection && NamesFields(f.value())) connection_names = true;
      continue;
    }
    const std::string_view name = f.name_string();
    if (f.name() == http::field::unknown &&
        (IEquals(name, "x-data-parallel-rank") ||
         (own_request_id && IEquals(name, kRequestIdField)) ||
         (own_trace && IEquals(name, "traceparent")) || (new_trace && IEquals(name, "tracestate"))))
      continue;
    if (no_credentials && (f.name() == http::field::authorization ||
                           (f.name() == http::field::unknown && IEquals(name, "x-api-key"))))
      continue;
    if (std::binary_search(named.begin(), named.end(), name, beast::iless())) continue;
    if (const std::string_view line = WholeFieldLine(name, f.value()); !line.empty()) {
      head->append(line);
    } else {
      head->append(name).append(": "sv).append(std::string_view(f.value())).append("\r\n"sv);
    }
  }
  return connection_names;
}

// The request as a replica gets it, into `head`: the client's request line and end-to-end fields,
// the replica's Host and rank, and the body's length. With an `authorization` (the replicas' key
// as "Bearer <key>"), that goes in place of the client's credentials; with a `request_id_line`
// (HttpExchange::request_id_line), that goes as X-Request-Id in place of the client's; with a
// `trace_line` (Gateway::RequestTrace), that goes as traceparent in place of the client's (and
// the client's tracestate is left out with `new_trace`).
void WriteUpstreamHead(const HttpRequest& request, const UpstreamUrl& url, int rank,
                       std::string_view via, std::string_view authorization,
                       std::string_view request_id_line, std::string_view trace_line,
                       bool new_trace, std::string* head) {
  head->assign(std::string_view(request.method_string())).append(" "sv).append(url.base_path);
  const std::string_view target = OriginForm(request.target());
  if (target.starts_with('?')) head->push_back('/');
  head->append(target).append(" HTTP/1.1\r\nHost: "sv).append(url.host);
  if (!url.default_port()) {  // as clients write it: a proxy in front may match the name only
    head->append(":"sv);
    AppendNumber(head, url.port);
  }
  head->append("\r\n"sv);
  const size_t fields_start = head->size();
  // Rarely, a Connection field names other fields: written again without them.
  const bool own_key = !authorization.empty();
  const bool own_id = !request_id_line.empty();
  const bool own_trace = !trace_line.empty();
  if (WriteEndToEndFields(request, {}, own_key, own_id, own_trace, new_trace, head)) {
    head->resize(fields_start);
    const std::vector<std::string_view> named = ConnectionNames(request);
    WriteEndToEndFields(request, named, own_key, own_id, own_trace, new_trace, head);
  }
  if (own_key) head->append("Authorization: "sv).append(authorization).append("\r\n"sv);
  head->append(request_id_line);
  head->append(trace_line);
  head->append("Via: "sv).append(via).append("\r\n"sv);
  if (rank >= 0) {
    head->append("X-data-parallel-rank: "sv);
    AppendNumber(head, rank);
    head->append("\r\n"sv);
  }
  const http::verb method = request.method();
  if (!request.body().empty() || method == http::verb::post || method == http::verb::put ||
      method == http::verb::options) {
    head->append("Content-Length: "sv);
    AppendNumber(head, static_cast<int64_t>(request.body().size()));
    head->append("\r\n"sv);
  }
  head->append("\r\n"sv);
}

}  // namespace

asio::awaitable<Gateway::Upstream> Gateway::Send(
    const HttpRequest& request, std::string_view request_id_line, std::string_view trace_line,
    bool new_trace, int shard, ModelState& model, int replica, UpstreamPool& pool, int rank,
    std::optional<RelayParser>& parser, HangupWatch& watch, bool resend_if_stale) {
  const auto timeout = ConnectTimeout();
  Upstream up;
  for (int fresh = 0; fresh < 2; ++fresh) {
    up.dropped = false;
    boost::system::error_code ec;
    // A pooled connection, most often: taken without Acquire's coroutine.
    std::unique_ptr<UpstreamConnection> connection = fresh == 0 ? pool.TakeIdle(shard) : nullptr;
    if (!connection) connection = co_await pool.Acquire(shard, timeout, ec, fresh == 1);
    if (!connection) {
      if (IsLocalResourceError(ec)) up.local_failure = ec;
      up.refused = ec == asio::error::connection_refused;
      co_return up;
    }
    watch.SetUpstream(&connection->socket);
    // (vLLM's CORS middleware answers a preflight without a key, as browsers send none.)
    WriteUpstreamHead(request, pool.url(), rank, via_,
                      IsCorsPreflight(request) ? std::string_view() : model.replica_authorization(),
                      request_id_line, trace_line, new_trace, &connection->head);
    const std::array<asio::const_buffer, 2> buffers = {asio::buffer(connection->head),
                                                       asio::buffer(request.body())};
    // Watched from the first byte sent: a replica that stops reading the request (a lost one,
    // or one silent for read_timeout_s) fails the write as it would fail the read.
    ReplicaLossWatch::Waiting waiting(*loss_watches_[shard], model, replica, connection->socket,
                                      ReadTimeout());
    // The plain socket's calls inline: a coroutine in between costs every request its frame.
    boost::system::error_code write_ec;
    if (connection->tls) {
      write_ec = co_await WriteUpstream(*connection, buffers);
    } else {
      const size_t sent_now = WriteNow(connection->socket, buffers, write_ec);
      if (write_ec == asio::error::would_block) {
        waiting.Writing(true);
        write_ec = co_await WriteRest(connection->socket, buffers, sent_now);
        waiting.Writing(false);
      }
    }
    const auto sent = std::chrono::steady_clock::now();
    bool answered_some = false;  // the replica read the request: it is not sent again
    // What it answered first is readable: the write failed as it stopped reading and closed, or
    // the watch stopped the write for an answer that came while the replica read no more.
    const bool cut = write_ec == asio::error::connection_reset ||
                     write_ec == asio::error::broken_pipe || waiting.answered_early();
    if (!write_ec || cut) {
      boost::system::error_code read_ec;
      // Interim responses (100 Continue, 103 Early Hints) come before the real one: skipped, up
      // to a bound (found by review: a replica sending 100s without end kept a core busy).
      int interim = 0;
      do {
        if (interim++ > kMostInterimResponses) {  // (the 17th interim head read)
          watch.SetUpstream(nullptr);
          up.malformed = fmt::format("more than {} interim (1xx) responses", kMostInterimResponses);
          co_return up;
        }
        parser.emplace(&connection->head);
        parser->SetUpstream(&pool.url());
        if (!request_id_line.empty()) parser->DropRequestId();
        if (request.method() == http::verb::head) parser->skip(true);
        if (connection->tls) {  // GCC 12 miscompiles co_await in a conditional expression
          read_ec = co_await ReadUpstream(*connection, *parser, ReadUntil::kHeader);
        } else {  // (without ReadHttp's coroutine frame)
          HttpReadStep<false> step(connection->buffer, *parser, ReadUntil::kHeader);
          while (!step.Done()) {
            const auto bytes = co_await step.ReadSome(connection->socket);
            step.Took(bytes, connection->socket);
          }
          read_ec = step.result();
        }
        answered_some = answered_some || parser->got_some();
      } while (!read_ec && parser->status() >= 100 && parser->status() < 200 &&
               parser->status() != 101);
      // 101 Switching Protocols to a request that asked for none (Upgrade is not passed on): the
      // connection speaks something else from here on.
      if (!read_ec && parser->status() == 101) {
        watch.SetUpstream(nullptr);
        up.malformed = "101 Switching Protocols to a request that asked for no upgrade";
        co_return up;
      }
      // A head that came (even as the watch gave up: what the buffer holds can still go out) is
      // relayed.
      if (!read_ec && waiting.ended_by_stop()) {  // its socket closed as the head was read
        watch.SetUpstream(nullptr);
        up.stopped = true;
        co_return up;
      }
      if (!read_ec) {
        up.request_cut = cut;
        up.connection = std::move(connection);
        co_return up;
      }
      if (IsMalformedResponse(read_ec) && !waiting.given_up()) {
        watch.SetUpstream(nullptr);
        up.malformed = read_ec.message();
        co_return up;
      }
    }
    const bool given_up = waiting.given_up();    // the replica was lost before it answered
    const bool timed_out = waiting.timed_out();  // or sent nothing for read_timeout_s
    watch.SetUpstream(nullptr);
    if (watch.hung_up()) {
      up.client_gone = true;
      co_return up;
    }
    if (timed_out) {
      up.timed_out = true;
      co_return up;
    }
    if (waiting.ended_by_stop()) {
      up.stopped = true;
      co_return up;
    }
    // Lost before it answered anything: routed again, like a replica that could not be reached.
    if (given_up && !answered_some) co_return up;
    up.dropped = true;
    // A pooled connection the server closed just as the request went out (its keep-alive
    // timeout): once more on a new one. Not when the server had the request for longer or
    // answered any of it (it may have run it), or on a new connection (the replica is in
    // trouble).
    if (!resend_if_stale || !connection->reused || answered_some ||
        std::chrono::steady_clock::now() - sent > kStaleConnectionWindow)
      co_return up;
    resent_.fetch_add(1, std::memory_order_relaxed);
  }
  co_return up;
}

}  // namespace warden
