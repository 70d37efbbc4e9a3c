// Gateway's exchange with a replica: the request sent, the response head read, the response
// relayed to the client.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/this_coro.hpp>
#include <boost/beast/http/parser.hpp>
#include <cerrno>
#include <span>

#include "core/protocol/anthropic_error.h"
#include "core/protocol/context_overflow.h"
#include "core/protocol/inline_data.h"
#include "core/protocol/reply_content.h"
#include "core/protocol/response_observer.h"
#include "gateway/broken_stream.h"
#include "gateway/gateway.h"
#include "gateway/gateway_internal.h"
#include "gateway/peer_sync.h"
#include "gateway/prompt_count.h"
#include "net/content_coding.h"
#include "net/field_line.h"
#include "net/field_list.h"
#include "net/hangup_watch.h"
#include "net/http_read.h"
#include "net/relay_parser.h"
#include "net/stream_keepalive.h"
#include "net/transfer_at_once.h"
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

// How often a stream's keepalives follow the first (StreamKeepalive), at most.
constexpr std::chrono::milliseconds kKeepaliveInterval{15000};

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
// own key instead, and its X-Request-Id (`own_request_id`) where the gateway sends the request's.
bool WriteEndToEndFields(const HttpRequest& request, std::span<const std::string_view> named,
                         bool no_credentials, bool own_request_id, std::string* head) {
  bool connection_names = false;
  for (const auto& f : request) {
    if (IsHopByHop(f.name()) || f.name() == http::field::host) {
      if (f.name() == http::field::connection && NamesFields(f.value())) connection_names = true;
      continue;
    }
    const std::string_view name = f.name_string();
    if (f.name() == http::field::unknown && (IEquals(name, "x-data-parallel-rank") ||
                                             (own_request_id && IEquals(name, kRequestIdField))))
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
// (HttpExchange::request_id_line), that
// goes as X-Request-Id in place of the client's.
void WriteUpstreamHead(const HttpRequest& request, const UpstreamUrl& url, int rank,
                       std::string_view via, std::string_view authorization,
                       std::string_view request_id_line, std::string* head) {
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
  if (WriteEndToEndFields(request, {}, own_key, own_id, head)) {
    head->resize(fields_start);
    const std::vector<std::string_view> named = ConnectionNames(request);
    WriteEndToEndFields(request, named, own_key, own_id, head);
  }
  if (own_key) head->append("Authorization: "sv).append(authorization).append("\r\n"sv);
  head->append(request_id_line);
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

// The largest error body read whole before it goes out.
constexpr uint64_t kLargestError = 64 * 1024;

// How long a context error waits for the replica to count the prompt (CountPromptTokens).
constexpr std::chrono::milliseconds kPromptCountTimeout{5000};

// Anthropic's API: /v1/messages and the paths under it (count_tokens, batches).
bool OnAnthropicsApi(std::string_view path) {
  return path.starts_with("/v1/messages") &&
         (path.size() == std::string_view("/v1/messages").size() || path[12] == '/');
}

// A replica's error on Anthropic's API, small, or of a length it did not say (chunked, or to the
// connection's end) but no event stream (whose events go out as they come): read before it goes
// out, so that it can be said in Anthropic's shape (core/protocol/anthropic_error.h), and a
// context error as Anthropic's API says it (core/protocol/context_overflow.h). vLLM's Anthropic
// endpoint answers a prompt longer than the context with a 400, or in later versions with a 500
// (any exception there is an internal error).
bool SaysErrorsInAnthropicsWords(const HttpRequest& request, int status,
                                 std::optional<uint64_t> length, bool event_stream) {
  return status >= 400 && status <= 599 && (!length || *length <= kLargestError) &&
         (length || !event_stream) && request.method() != http::verb::head &&
         OnAnthropicsApi(TargetPath(request.target()));
}

// The first line of field `name` (lower case, with its colon) in a relayed `head`: its start and
// the end of its value; npos if none.
std::pair<size_t, size_t> FindField(std::string_view head, std::string_view name) {
  for (size_t line = head.find("\r\n"); line != std::string_view::npos;) {
    const size_t start = line + 2;
    const size_t end = head.find("\r\n", start);
    if (end == std::string_view::npos) break;
    if (end - start >= name.size() && IEquals(head.substr(start, name.size()), name))
      return {start, end};
    line = end;
  }
  return {std::string_view::npos, std::string_view::npos};
}

// The codings a relayed `head` says its body has (gzip, say: the client's Accept-Encoding went to
// the replica, and a proxy in front of it compresses); empty for none, or identity alone.
std::string BodyCodings(std::string_view head) {
  constexpr std::string_view kName = "content-encoding:";
  const auto [start, end] = FindField(head, kName);
  if (start == std::string_view::npos) return {};
  std::string_view value = head.substr(start + kName.size(), end - start - kName.size());
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return IEquals(value, "identity") ? std::string() : std::string(value);
}

// The most an encoded error read whole may decode to (it is read for its words).
constexpr size_t kLargestDecodedError = 1024 * 1024;

// `head` without its Content-Encoding field (its body goes out decoded).
void SayNotEncoded(std::string* head) {
  const auto [start, end] = FindField(*head, "content-encoding:");
  if (start != std::string::npos) head->erase(start, end + 2 - start);
}

// `head`'s Content-Type field (if any) replaced by application/json's.
void SayJson(std::string* head) {
  const auto [start, end] = FindField(*head, "content-type:");
  if (start != std::string::npos) head->erase(start, end + 2 - start);
  head->append("Content-Type: application/json\r\n");
}

// `head`'s status line replaced by "HTTP/1.1 400 Bad Request".
void SayBadRequest(std::string* head) {
  const size_t end = head->find("\r\n");
  if (end != std::string::npos) head->replace(0, end, "HTTP/1.1 400 Bad Request");
}

// vLLM refuses a request that offers tools with the choice left to the model (every Claude Code
// turn) unless it was started with --enable-auto-tool-choice and a --tool-call-parser: the log
// says so once per model, with the fix.
void WarnIfToolsRefused(ModelState& model, int replica, std::string_view error) {
  if (error.find("--enable-auto-tool-choice") == std::string_view::npos ||
      !model.FirstToolChoiceRefused())
    return;
  spdlog::warn(
      "model {}: {} refuses requests that offer tools (Claude Code's all do): start vLLM with "
      "--enable-auto-tool-choice and the --tool-call-parser of the model (hermes for Qwen3, "
      "qwen3_coder for Qwen3-Coder; see vLLM's tool calling docs)",
      model.name(), model.ReplicaUrl(replica));
}

// An Anthropic stream's opening usage that splits the prompt as its end would (recent vLLM's and
// Anthropic's message_start): what a stream cut after it read from the cache.
bool StartSaidTheCacheSplit(const ObservedUsage& usage) {
  return usage.anthropic && usage.prompt_tokens >= 0 && usage.cached_tokens >= 0;
}

// What the replica reported of a relayed request, for its access-log line. `whole`: the response
// came to its end (else an output count is a stream's opening figure, not its total);
// `client_left`: the client went away before it did.
// What a request relayed from a replica takes from its client's tokens_per_minute, as far as it is
// known: its usage when it came whole; else (a stream cut short, an OpenAI stream without
// include_usage, a Responses API background request queued) the prompt's size a stream said at
// its start or else a guess from the body, all of it as computed, and at least an output token
// per token event. An error answer: none.
int BudgetCost(const RequestOutcome& outcome, const ResponseObserver& observer, bool generation,
               unsigned status, std::string_view body) {
  if (!generation || status / 100 != 2) return 0;
  int prompt = outcome.prompt_tokens, cached = outcome.cached_tokens;
  if (prompt < 0) {
    cached = -1;
    // A stream's first word (message_start), not usage dropped as implausible.
    prompt = observer.usage().preliminary ? observer.usage().prompt_tokens : -1;
    if (prompt < 0) {
      prompt = static_cast<int>(
          std::min<long>(EstimateTokensWithInlineData(body), std::numeric_limits<int>::max()));
    }
  }
  // (A stream cut short says 0 output tokens at its start: its token events say more.)
  const int output = std::max(outcome.output_tokens, observer.token_events());
  return ClientTable::EngineWork(prompt, cached, output);
}

void NoteOutcome(const RequestOutcome& outcome, bool whole, bool client_left, std::string* note) {
  if (outcome.broke_off) {
    note->append(" cut");  // its status went out before the break
  } else if (client_left && !whole) {
    note->append(" left");
  }
  if (outcome.prompt_tokens >= 0) {
    fmt::format_to(std::back_inserter(*note), " prompt={}", outcome.prompt_tokens);
    if (outcome.cached_tokens >= 0) {
      fmt::format_to(std::back_inserter(*note), " cached={}", outcome.cached_tokens);
    } else {
      note->append(" cached=?");  // unknown: not said (no --enable-prompt-tokens-details), or
                                  // dropped as implausible
    }
  }
  if (outcome.output_tokens >= 0 && whole)
    fmt::format_to(std::back_inserter(*note), " output={}", outcome.output_tokens);
  if (outcome.ttft_s >= 0)
    fmt::format_to(std::back_inserter(*note), " ttft={:.3f}s", outcome.ttft_s);
}

// Why a response was broken off in the middle (BrokeOffMessage).
enum class BrokeOff { kClosed, kQuiet, kStalled, kLostAndSilent };

// What a client is told of a response `replica` (-1: the engine's balancer's) broke off in the
// middle: it closed its connection, or sent nothing for `silent_s` seconds (read_timeout_s),
// or the gateway cut it: the replica held stalled, or out of service and silent for `silent_s`
// seconds (stall_timeout_s).
constexpr std::string_view kStoppedMidStream =
    "the gateway stopped (its drain's time ran out) in the middle of this response: what came "
    "before is not the whole answer; send the request again";

std::string BrokeOffMessage(int replica, BrokeOff why, double silent_s) {
  const std::string who = replica >= 0 ? fmt::format("replica {}", replica) : "the replica";
  std::string what;
  switch (why) {
    case BrokeOff::kClosed:
      what = "closed its connection";
      break;
    case BrokeOff::kQuiet:
      what = fmt::format("sent nothing for {:g} s (the gateway's read_timeout_s)", silent_s);
      break;
    case BrokeOff::kStalled:
      what = "was taken out of service as stalled (it did no work), and the gateway cut it off";
      break;
    case BrokeOff::kLostAndSilent:
      what = fmt::format(
          "is out of service and sent nothing for {:g} s (the gateway's stall_timeout_s), and "
          "the gateway cut it off",
          silent_s);
      break;
  }
  return fmt::format(
      "{} {} in the middle of this response: what came before is not the whole answer; send the "
      "request again",
      who, what);
}

}  // namespace

asio::awaitable<Gateway::Upstream> Gateway::Send(const HttpRequest& request,
                                                 std::string_view request_id_line, int shard,
                                                 ModelState& model, int replica, UpstreamPool& pool,
                                                 int rank, std::optional<RelayParser>& parser,
                                                 HangupWatch& watch, bool resend_if_stale) {
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
                      request_id_line, &connection->head);
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

asio::awaitable<Gateway::Relayed> Gateway::Relay(HttpExchange& ex, int shard, Upstream up,
                                                 RelayParser& parser, ModelState& model,
                                                 const RouteDecision& decision,
                                                 std::string_view key, bool generation,
                                                 int sequences, bool name_by_reply, double started,
                                                 HangupWatch& watch, ClientSlot& client,
                                                 TrafficLog::Turn* traffic) {
  std::string& head = up.connection->head;  // the parser wrote the status line and fields
  const bool delegated = decision.replica < 0;
  if (config_.route_headers && delegated) {
    head += "x-warden-route: engine\r\n";
  } else if (config_.route_headers) {
    head += "x-warden-replica: ";
    AppendNumber(&head, decision.replica);
    head.append("\r\nx-warden-route: "sv)
        .append(RouteKindName(ShownKind(decision, generation)))
        .append("\r\n"sv);
  }
  // A page a replica serves (vLLM's /docs, an HTML error page of a proxy in front of it) would
  // run on the panel's origin, where the admin token is kept: in a sandbox it has an origin of
  // its own. API clients do not read the field.
  head += "Content-Security-Policy: sandbox allow-scripts allow-forms allow-popups\r\n"sv;
  // A whole JSON body is held for its usage only where there is one to read: not an embedding's
  // (megabytes each, for nothing).
  ResponseObserver observer(parser.event_stream(), generation ? size_t{4} << 20 : 0);
  std::optional<ReplyText> reply;  // with name_by_reply: hashed as it streams, not held
  std::vector<std::string> reply_tool_calls;
  if (name_by_reply) observer.CaptureText(&reply.emplace(), &reply_tool_calls);
  std::optional<uint64_t> length;
  if (!parser.chunked() && parser.content_length()) length = *parser.content_length();
  const bool head_request = ex.request().method() == http::verb::head;
  if (parser.is_done() && !length && !head_request) length = 0;

  UpstreamConnection& connection = *up.connection;
  double ttft = -1;
  bool upstream_ok = true;
  // A replica that stops sending for read_timeout_s: its connection is closed, the response cut.
  std::optional<ReplicaLossWatch::Waiting> quiet;
  // (And a stream, to be cut if its replica is held stalled, as it would wait as long as the
  // hang; or ended with an error event if the gateway's drain runs out of time.)
  // (A generation stream's head waits for its first event, below: until it comes the client has
  // nothing, and a replica held for lost meanwhile gives the request up to another, as one that
  // has sent no head yet does; found by review: it waited stall_timeout_s.)
  const bool holds_head = parser.event_stream() && !length && parser.status() / 100 == 2 &&
                          generation && !delegated && !parser.is_done();
  if (config_.read_timeout_s > 0 || parser.event_stream()) {
    quiet.emplace(*loss_watches_[shard], model, std::max(decision.replica, 0), connection.socket,
                  ReadTimeout(), /*give_up_when_lost=*/holds_head);
    quiet->Pause();  // counted only while a read waits (read_piece)
  }
  bool engine_answered = false;  // a stream's first bytes came (ModelState::NoteAnswered)
  bool ended_by_stop = false;    // the drain's end closed the replica's side (EndRelays)
  // After a read of the body that failed with `ec`.
  const auto read_failed = [&](boost::system::error_code ec) {
    upstream_ok = false;
    ended_by_stop = quiet && quiet->ended_by_stop();
    if (quiet && quiet->given_up() && engine_answered && quiet->lost_and_silent()) {
      spdlog::warn(
          "model {}: {} is out of service and sent nothing for {:g} s (stall_timeout_s): a "
          "response from it cut",
          model.name(), model.ReplicaUrl(std::max(decision.replica, 0)), config_.stall_timeout_s);
    } else if (quiet && quiet->given_up() && engine_answered) {  // (else Forward says it)
      spdlog::warn("model {}: {} is held stalled (stall_timeout_s): a response from it cut",
                   model.name(), model.ReplicaUrl(std::max(decision.replica, 0)));
    }
    if (quiet && quiet->timed_out()) {
      body_timeouts_.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("model {}: {} sent nothing for {} s in a response (read_timeout_s): cut",
                   model.name(), model.ReplicaUrl(std::max(decision.replica, 0)),
                   config_.read_timeout_s);
    }
  };
  // The piece of the body the parser took in the last read, seen by the observer; empty if none.
  const auto piece_taken = [&]() -> std::string_view {
    const size_t got = parser.body_received();
    if (got == 0) return {};
    if (!engine_answered && parser.event_stream()) {
      engine_answered = true;
      model.NoteAnswered(std::max(decision.replica, 0));
    }
    const std::string_view piece(connection.body_piece.data(), got);
    if (observer.Feed(piece) && ttft < 0) {
      ttft = Now() - started;
      if (decision.request_id != 0)  // its prefill is done (dynamo)
        model.WithRouter([&](ModelRouter& r) { r.FirstToken(decision.request_id, Now()); });
    }
    return piece;
  };
  // Before each read of the body: where the parser is to put the next piece; the quiet limit
  // counts while the read waits.
  const auto before_read = [&] {
    parser.SetBodyBuffer(connection.body_piece.data(), connection.body_piece.size());
    if (quiet) quiet->Progress();
  };
  // After a read that ended with `ec`: the piece it gave (empty at the end, or after a failure),
  // or nothing when another read is needed.
  const auto after_read = [&](boost::system::error_code ec) -> std::optional<std::string_view> {
    if (quiet) quiet->Pause();
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      read_failed(ec);
      return std::string_view();
    }
    if (const std::string_view piece = piece_taken(); !piece.empty()) return piece;
    if (parser.is_done()) return std::string_view();
    return std::nullopt;
  };
  // Reads the next piece of the body into the connection's buffer; empty at the end. (The relay's
  // loop does the same inline, without this coroutine's frame or ReadHttp's for every event.)
  auto read_piece = [&]() -> asio::awaitable<std::string_view> {
    if (parser.is_done()) co_return std::string_view();
    for (;;) {
      before_read();
      const boost::system::error_code ec =
          co_await ReadUpstream(connection, parser, ReadUntil::kProgress);
      if (std::optional<std::string_view> piece = after_read(ec)) co_return *piece;
    }
  };
  // The next piece of the body from what the read buffer holds alone (no coroutine); empty if
  // that has none of it yet.
  const auto buffered_piece = [&]() -> std::string_view {
    while (!parser.is_done()) {
      parser.SetBodyBuffer(connection.body_piece.data(), connection.body_piece.size());
      const size_t buffered = connection.buffer.size();
      if (quiet) quiet->Progress();
      boost::system::error_code ec = ParseBuffered(connection.buffer, parser);
      if (quiet) quiet->Pause();
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        read_failed(ec);
        return {};
      }
      if (const std::string_view piece = piece_taken(); !piece.empty()) return piece;
      if (connection.buffer.size() == 0 || connection.buffer.size() == buffered)
        break;  // e.g. a chunk's size line without its data
    }
    return {};
  };
  // The outcome is recorded before the body's last bytes go out: a client that has its whole
  // response sees it in the counters.
  bool recorded = false;
  bool client_ok = true;  // every write to the client went out
  // The replica's status, or 400 for its context error reworded (its fault is the prompt's).
  int status_said = parser.status();
  EventTail tail;  // where a stream the replica breaks off stops
  const bool stream = parser.event_stream() && !length && parser.status() / 100 == 2;
  // A stream the replica broke off after its last event: what the client has is whole.
  bool ended_whole = false;
  RequestOutcome outcome;
  auto record = [&] {
    if (recorded) return;
    recorded = true;
    observer.Finish();
    outcome = {observer.usage().prompt_tokens, observer.usage().cached_tokens, ttft,
               observer.usage().output_tokens};
    // A stream cut before its final usage (the client stopped it, as Claude Code's Esc does)
    // tells the prompt's size at most, not what the cache gave: no split is counted for it,
    // unless its start said it (an Anthropic message_start with cache_read_input_tokens, as
    // Anthropic's API and recent vLLM send it: the prompt was read by then).
    if (observer.usage().preliminary && !StartSaidTheCacheSplit(observer.usage()))
      outcome.prompt_tokens = outcome.cached_tokens = -1;
    DropImplausibleUsage(&outcome, model.usage_bound(), sequences);
    if (!generation) {
      // Nothing ran: a stored response read back (GET /v1/responses/{id}) carries the usage of
      // the turn that made it, counted then (found by review), and a probe has no first token.
      outcome.prompt_tokens = outcome.cached_tokens = outcome.output_tokens = -1;
      outcome.ttft_s = -1;
    }
    outcome.sequences = sequences;
    outcome.anthropic_usage = observer.usage().anthropic;
    // Only a generation request's whole successful answer carries usage (not count_tokens', not
    // an error's, not other paths', not one cut short).
    outcome.usage_expected = generation && parser.status() / 100 == 2 && parser.is_done() &&
                             upstream_ok && !observer.error_event();
    outcome.cut_without_usage = generation && parser.status() / 100 == 2 &&
                                !outcome.usage_expected && outcome.prompt_tokens < 0 &&
                                !observer.error_event();
    if (outcome.usage_expected) outcome.duration_s = Now() - started;  // (its last bytes are in)
    if (traffic && outcome.usage_expected) traffic->Answered(started + outcome.duration_s);
    // Not the client's leaving, nor a stream that had said it ended (its answer is whole).
    outcome.broke_off = !upstream_ok && !watch.hung_up() && !ended_whole && !ended_by_stop;
    outcome.error_answer = status_said >= 500 || status_said == 429;
    outcome.client_error_answer = status_said >= 400 && status_said < 500 && status_said != 429;
    if (outcome.prompt_tokens < 0 && outcome.usage_expected) {
      outcome.prompt_tokens_guess = static_cast<int>(std::min<long>(
          EstimateTokensWithInlineData(ex.request().body()), std::numeric_limits<int>::max()));
    }
    if (access_log_.load(std::memory_order_relaxed)) {
      // (A client that stopped reading, cut at the send timeout, left too.)
      NoteOutcome(outcome, parser.is_done() && upstream_ok,
                  (watch.hung_up() || !client_ok) && !ex.cut_short(), &ex.note());
    }
    // A whole answer's usage; a cut one's prompt where the model's counts have it too (found by
    // review: a stream cut after a start that split its prompt counted for the model only).
    if (outcome.usage_expected) {
      CountClientUsage(client.counts(), outcome);
    } else if (outcome.prompt_tokens >= 0) {
      RequestOutcome prompt_only = outcome;
      prompt_only.output_tokens = -1;
      CountClientUsage(client.counts(), prompt_only);
    }
    if (client.counts()) {
      client.Settle(BudgetCost(outcome, observer, generation, parser.status(), ex.request().body()),
                    Now());
    }
    client.Release();
    RecordEnded(model, decision, key, generation, name_by_reply,
                name_by_reply ? reply->Hash(reply_tool_calls) : 0, outcome, parser.status(),
                observer);
  };
  // A body that came in with the head goes out with it, in one write; a stream whose first event is
  // not there yet gets its head at once.
  std::string_view first;
  std::string whole_error;  // an error read whole, to say it in the client's API's words
  if (SaysErrorsInAnthropicsWords(ex.request(), parser.status(), length, parser.event_stream())) {
    while (!parser.is_done() && upstream_ok && whole_error.size() <= kLargestError) {
      const std::string_view piece = co_await read_piece();
      whole_error.append(piece);
    }
    const bool whole = parser.is_done() && upstream_ok;
    // An encoded error (a proxy in front of the replica compresses: the client's Accept-Encoding
    // went on) is read decoded. It goes out decoded if it is said again, else as it came, as does
    // one in a coding the gateway does not know (left as it was).
    const std::string codings = whole ? BodyCodings(head) : std::string();
    std::string as_came;
    bool readable = whole;
    if (whole && !codings.empty()) {
      as_came = whole_error;
      readable = DecodeContentCoding(codings, &whole_error, kLargestDecodedError).status == 200;
    }
    if (readable) {
      bool said_again = true;
      // A prompt vLLM counted only in part: counted by the replica's count_tokens, else guessed
      // from the request's size.
      long estimate = EstimateTokensWithInlineData(ex.request().body());
      long counted = 0;
      // (vLLM says a context error with a 400, or in later versions with a 500.)
      const bool messages = TargetPath(ex.request().target()) == "/v1/messages" &&
                            (status_said == 400 || status_said == 500);
      if (messages && !delegated && PromptCountedInPart(whole_error)) {
        counted = co_await CountPromptTokens(model, shard, decision.replica, ex.request().body(),
                                             kPromptCountTimeout);
      }
      if (counted > 0) estimate = counted;
      if (status_said == 400 && !delegated)
        WarnIfToolsRefused(model, decision.replica, whole_error);
      std::optional<std::string> said;
      if (messages && (said = AnthropicContextError(whole_error, estimate, counted > 0))) {
        whole_error = std::move(*said);
        if (status_said != 400) SayBadRequest(&head);
        status_said = 400;
        SayJson(&head);
      } else if (std::optional<std::string> shaped = InAnthropicsShape(whole_error, status_said)) {
        whole_error = std::move(*shaped);  // vLLM's own type names (BadRequestError), plain text
        SayJson(&head);
      } else {
        said_again = false;
      }
      if (!codings.empty() && said_again) SayNotEncoded(&head);
      if (!codings.empty() && !said_again) whole_error = std::move(as_came);
    }
    if (whole) length = whole_error.size();
    first = whole_error;  // the rest, if any, follows
  } else if (!parser.is_done() && connection.buffer.size() > 0) {
    first = buffered_piece();
  }
  // A generation stream whose end is the connection's (neither a length nor chunks) that closed
  // before the stream said it ended was broken off, however cleanly the connection closed. (Other
  // paths' streams are not read for their end: there the close is the end.)
  const auto closed_unfinished = [&] {
    return stream && generation && !parser.chunked() && parser.is_done() &&
           !observer.stream_ended();
  };
  // A generation stream's head waits for its first event: vLLM sends the head as it queues the
  // request, and a replica that dies before the first event (queued, or reading the prompt) has
  // then given the client nothing, so the request can go to another replica (Forward).
  // Past stream_keepalive_s of waiting, though, the head goes out with a keepalive, and another
  // follows now and then: a client's timeout on the head (Claude Code's, about 300 s) would
  // otherwise send the request again (and a replica that fails it from then on ends the stream
  // with an error event, as after any event).
  bool head_sent = false;
  if (stream && generation && !delegated && first.empty() && !parser.is_done() && upstream_ok) {
    std::optional<StreamKeepalive> keepalive;
    if (config_.stream_keepalive_s > 0) {
      // Counted from the request's arrival (admission may have held it), as a client counts.
      const auto after = [](double s) {
        return std::chrono::milliseconds(static_cast<int64_t>(std::lround(s * 1000)));
      };
      const auto every = std::min(after(config_.stream_keepalive_s), kKeepaliveInterval);
      const auto first_after = after(std::max(0.0, config_.stream_keepalive_s - (Now() - started)));
      // Once the head went out, the request can go nowhere else: a replica held for lost then
      // does not cut the stream (as one begun by its replica), unless it falls silent.
      keepalive.emplace(
          co_await asio::this_coro::executor, ex, head,
          StreamKeepalive::KeepaliveFor(TargetPath(ex.request().target())), first_after, every,
          [&quiet] {
            if (quiet) quiet->GiveUpWhenLost(false);
          },
          // A client gone unseen by the watch (it reads nothing): the replica's
          // request is ended now, not when its first event finds the client gone.
          [&watch] { watch.ClientGone(); });
    }
    first = co_await read_piece();
    if (quiet) quiet->GiveUpWhenLost(false);  // a stream begun is relayed while it flows
    if (keepalive) {
      const StreamKeepalive::Result kept = co_await keepalive->Stop();
      head_sent = kept.head_sent;
      client_ok = kept.client_ok;
      if (head_sent) streams_kept_alive_.fetch_add(1, std::memory_order_relaxed);
    }
    if (closed_unfinished()) upstream_ok = false;
    if (!upstream_ok && !head_sent && !watch.hung_up() && !ended_by_stop &&
        !(quiet && quiet->timed_out())) {
      watch.SetUpstream(nullptr);
      co_return Relayed{.outcome = {},
                        .dropped_unanswered = true,
                        .stalled = quiet && quiet->given_up(),
                        .lost_and_silent = quiet && quiet->lost_and_silent(),
                        .client_cut = {}};
    }
  }
  if (quiet) quiet->GiveUpWhenLost(false);  // (the first event came with the head)
  if (parser.is_done() && upstream_ok) record();
  // A first turn that ends with no answer hands its entry over (as RecordEnded does).
  const bool abandons_opening = name_by_reply && !decision.key_left_alone;
  const std::string_view turn_of = decision.key_left_alone ? std::string_view() : key;
  if (!upstream_ok && watch.hung_up()) {  // the client left while its error was read
    model.WithRouter([&](ModelRouter& r) {
      delegated ? r.FinishDelegated({}, Now()) : r.Finish(decision.replica, {}, Now());
      r.EndUnanswered(turn_of);
      if (abandons_opening) r.AbandonOpening(key, Now());
    });
    ex.Abandon();
    co_return Relayed{};
  }
  if (!upstream_ok && !head_sent) {  // broken before anything went out: the client gets an answer
    model.WithRouter([&](ModelRouter& r) {
      if (ended_by_stop) {  // not the replica's failure
        delegated ? r.FinishDelegated({}, Now()) : r.Finish(decision.replica, {}, Now());
      } else {
        delegated ? r.FailDelegated() : r.Fail(decision.replica, /*replica_down=*/false);
      }
      r.EndUnanswered(turn_of);
      if (abandons_opening) r.AbandonOpening(key, Now());
    });
    watch.SetUpstream(nullptr);
    const ErrorShape shape = ErrorShapeFor(TargetPath(ex.request().target()));
    HttpResponse response;
    if (ended_by_stop) {
      response = Error(ex.request(), shape, 503,
                       "the gateway stopped (its drain's time ran out) before this request's "
                       "answer began; send it again",
                       ErrorCode::kGatewayStopping);
      response.set(http::field::retry_after, "1");
    } else {
      response = quiet && quiet->timed_out()
                     ? Error(ex.request(), shape, 504,
                             fmt::format(
                                 "the replica sent no event in {} s (the gateway's read_timeout_s)",
                                 config_.read_timeout_s))
                     : Error(ex.request(), shape, 502,
                             "the replica's response broke off or was not valid HTTP");
      // The replica had the request (found by review: the 504 a hung vLLM's stream gets).
      response.set(kShouldRetry, "false");
    }
    client.Release();
    co_await ex.Respond(std::move(response));
    co_return Relayed{};
  }
  if (parser.is_done()) record();
  // No body and no framing fields (RFC 9110 §8.6, §15.3.5, §15.4.5): and the answer to a HEAD
  // whose length the replica did not say (a length of 0 would be a claim about the GET).
  const bool bodiless =
      parser.status() == 204 || parser.status() == 304 || (head_request && !length);
  if (head_sent) {  // (the keepalives began the response)
    if (client_ok && !first.empty()) {
      const std::optional<bool> sent = ex.SendBodyAtOnce(first);
      client_ok = sent ? *sent : co_await ex.SendPending();
    }
  } else if (std::optional<bool> started = ex.StartBodyRawAtOnce(head, length, first, bodiless)) {
    client_ok = *started;  // (most answers: without a coroutine)
  } else {
    client_ok = co_await ex.SendPending();
  }
  if (stream) tail.Relayed(first);
  while (client_ok && upstream_ok && !parser.is_done()) {
    std::optional<std::string_view> read;  // read_piece's work, inline: this runs for every event
    while (!read) {
      before_read();
      if (connection.tls) {
        const boost::system::error_code ec =
            co_await ReadUpstream(connection, parser, ReadUntil::kProgress);
        read = after_read(ec);
        continue;
      }
      HttpReadStep<false> step(connection.buffer, parser, ReadUntil::kProgress);
      while (!step.Done()) {
        const auto bytes = co_await step.ReadSome(connection.socket);
        step.Took(bytes, connection.socket);
      }
      read = after_read(step.result());
    }
    const std::string_view piece = *read;
    if (closed_unfinished()) upstream_ok = false;
    if (parser.is_done()) record();
    if (!piece.empty()) {
      if (std::optional<bool> sent = ex.SendBodyAtOnce(piece)) {
        client_ok = *sent;  // (most events: without a coroutine)
      } else {
        client_ok = co_await ex.SendPending();
      }
    }
    if (stream) tail.Relayed(piece);
  }
  const bool timed_out = quiet && quiet->timed_out();
  const BrokeOff why = timed_out                           ? BrokeOff::kQuiet
                       : quiet && quiet->lost_and_silent() ? BrokeOff::kLostAndSilent
                       : quiet && quiet->given_up()        ? BrokeOff::kStalled
                                                           : BrokeOff::kClosed;
  quiet.reset();  // before the connection may go back to the pool
  // A stream the replica broke off between two events: ended properly, after an error event
  // unless it had said it ended.
  const bool can_end =
      !upstream_ok && client_ok && stream && !watch.hung_up() && tail.between_events();
  ended_whole = can_end && observer.stream_ended();
  std::string broken_event;
  if (can_end && !ended_whole)
    broken_event = BrokenStreamEvent(
        TargetPath(ex.request().target()),
        ended_by_stop ? std::string(kStoppedMidStream)
                      : BrokeOffMessage(decision.replica, why,
                                        why == BrokeOff::kQuiet ? config_.read_timeout_s
                                                                : config_.stall_timeout_s),
        observer.response_id());
  if (client_ok && upstream_ok) {
    if (std::optional<bool> ended = ex.EndBodyAtOnce()) {
      client_ok = *ended;
    } else {
      client_ok = co_await ex.EndBody();
    }
  } else if (ended_whole || !broken_event.empty()) {
    if (!broken_event.empty()) client_ok = co_await ex.SendBody(broken_event);
    if (client_ok) client_ok = co_await ex.EndBody();
    // A body with a length cannot be whole; a chunked one is, and its connection serves the
    // client's next request (closing it failed that request when it was already on its way).
    if (!ex.chunked()) ex.CloseAfterResponse();
  } else {
    ex.BreakOff();  // a body cut short: the client must see the connection end, and not whole
  }
  record();
  watch.SetUpstream(nullptr);  // from here the connection may serve another request
  // Not after a response without a body (to HEAD, a 204 or a 304): a replica or proxy that sends
  // one anyway, later than the liveness peek can see, would have it read as the next request's
  // answer (found by review). vLLM sends none of these to the requests that matter.
  const bool without_body = head_request || parser.status() == 204 || parser.status() == 304;
  if (client_ok && upstream_ok && parser.keep_alive() && !up.request_cut && !without_body) {
    UpstreamPool& pool = delegated ? *model.pools()[0] : *model.target(decision.replica).pool;
    pool.Release(shard, std::move(up.connection));
  }
  // Only a whole, successful response teaches admission what a request costs.
  const bool whole = client_ok && upstream_ok && parser.is_done() && parser.status() / 100 == 2;
  if (!whole) {
    Relayed cut;
    // A stream its client left once tokens had come: its usage if it had come (the client left
    // at the last write), else the prompt as the stream's start said it and the tokens so far
    // (a running count, or the token events), where the replica's counts are believable.
    if (generation && stream && parser.status() / 100 == 2 && (watch.hung_up() || !client_ok) &&
        !ex.cut_short() && observer.token_events() > 0) {
      RequestOutcome said = outcome;
      if (observer.usage().preliminary) {
        said.prompt_tokens = observer.usage().prompt_tokens;
        said.output_tokens = observer.usage().output_tokens;
      }
      said.output_tokens = std::max(said.output_tokens, observer.token_events());
      DropImplausibleUsage(&said, model.usage_bound(), sequences);
      cut.client_cut = {
          .cut = true,
          .prompt_tokens = said.prompt_tokens,
          .prompt_guess = static_cast<int>(std::min<long>(
              EstimateTokensWithInlineData(ex.request().body()), std::numeric_limits<int>::max())),
          .output_tokens = said.output_tokens >= 0 ? said.output_tokens : observer.token_events(),
          .duration_s = Now() - started};
    }
    co_return cut;
  }
  outcome.completed = true;
  Relayed relayed;
  relayed.outcome = outcome;
  if (stream) relayed.token_events = observer.token_events();
  co_return relayed;
}

}  // namespace warden
