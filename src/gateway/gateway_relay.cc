// Gateway::Relay: a replica's response relayed to the client, as it streams (what came with its
// head first, then each piece as it comes), its outcome recorded for the router and the client;
// an error said again in the client's API's words, a stream broken off ended with an error event.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/this_coro.hpp>
#include <boost/beast/http/parser.hpp>

#include "core/protocol/anthropic_error.h"
#include "core/protocol/context_overflow.h"
#include "core/protocol/inline_data.h"
#include "core/protocol/reply_content.h"
#include "core/protocol/response_observer.h"
#include "gateway/broken_stream.h"
#include "gateway/gateway.h"
#include "gateway/gateway_internal.h"
#include "gateway/prompt_count.h"
#include "gateway/relayed_head.h"
#include "net/content_coding.h"
#include "net/hangup_watch.h"
#include "net/http_read.h"
#include "net/relay_parser.h"
#include "net/stream_keepalive.h"
#include "net/transfer_at_once.h"
#include "net/upstream_io.h"
#include "util/append_number.h"

namespace warden {

using namespace std::string_view_literals;  // literals appended without a strlen

namespace {

// How often a stream's keepalives follow the first (StreamKeepalive), at most.
constexpr std::chrono::milliseconds kKeepaliveInterval{15000};

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

// The most an encoded error read whole may decode to (it is read for its words).
constexpr size_t kLargestDecodedError = 1024 * 1024;

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

// What the replica reported of a relayed request, for its access-log line. `whole`: the response
// came to its end (else an output count is a stream's opening figure, not its total);
// `client_left`: the client went away before it did.
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

// One response relayed from a replica to its client: Relay's arguments, and what its steps share
// as the response goes through (the body's reads, the outcome recorded once).
struct Gateway::RelayRun {
  RelayRun(Gateway& gateway, HttpExchange& ex, int shard, Upstream& up, RelayParser& parser,
           ModelState& model, const RouteDecision& decision, std::string_view key, bool generation,
           int sequences, bool name_by_reply, double started, HangupWatch& watch,
           ClientSlot& client, TrafficLog::Turn* traffic)
      : gateway(gateway),
        ex(ex),
        shard(shard),
        up(up),
        parser(parser),
        model(model),
        decision(decision),
        key(key),
        generation(generation),
        sequences(sequences),
        name_by_reply(name_by_reply),
        started(started),
        watch(watch),
        client(client),
        traffic(traffic),
        connection(*up.connection),
        head(connection.head),
        delegated(decision.replica < 0),
        head_request(ex.request().method() == http::verb::head),
        // A whole JSON body is held for its usage only where there is one to read: not an
        // embedding's (megabytes each, for nothing).
        observer(parser.event_stream(), generation ? size_t{4} << 20 : 0),
        status_said(parser.status()) {
    if (name_by_reply) observer.CaptureText(&reply.emplace(), &reply_tool_calls);
    if (!parser.chunked() && parser.content_length()) length = *parser.content_length();
    if (parser.is_done() && !length && !head_request) length = 0;
    stream = parser.event_stream() && !length && parser.status() / 100 == 2;
  }

  // The replica the response comes from (the first one's for the engine's balancer's).
  int replica() const { return std::max(decision.replica, 0); }
  // Says, in the response's head, where the request went (route_headers), and sandboxes a page.
  void NameTheRoute();
  // Watches the replica's silence while reads of the body wait.
  void WatchQuiet();

  // The body's reads. After one that failed:
  void ReadFailed();
  // The piece of the body the parser took in the last read, seen by the observer; empty if none.
  std::string_view PieceTaken();
  // Before each read of the body: where the parser is to put the next piece; the quiet limit
  // counts while the read waits.
  void BeforeRead();
  // After a read that ended with `ec`: the piece it gave (empty at the end, or after a failure),
  // or nothing when another read is needed.
  std::optional<std::string_view> AfterRead(boost::system::error_code ec);
  // Reads the next piece of the body into the connection's buffer; empty at the end. (Relay's
  // loop does the same inline, without this coroutine's frame for every event.)
  asio::awaitable<std::string_view> ReadPiece();
  // The next piece of the body from what the read buffer holds alone (no coroutine); empty if
  // that has none of it yet.
  std::string_view BufferedPiece();
  // A generation stream whose end is the connection's (neither a length nor chunks) that closed
  // before the stream said it ended was broken off, however cleanly the connection closed. (Other
  // paths' streams are not read for their end: there the close is the end.)
  bool ClosedUnfinished() const {
    return stream && generation && !parser.chunked() && parser.is_done() &&
           !observer.stream_ended();
  }

  // Reads a replica's error whole and says it again in Anthropic's words (into `first`).
  asio::awaitable<void> ReadErrorToSay();
  // Waits for a generation stream's first event (into `first`), sending its head with keepalives
  // if that takes past stream_keepalive_s. False when the replica broke the stream off before
  // any of it went to the client, by no fault of the client, the drain or the read timeout: the
  // request may go to another replica.
  asio::awaitable<bool> AwaitFirstEvent();
  // The replica broke the response off before any of its body went to the client (at most a
  // keepalive's head did, to a client that left since): the router told, and the client answered
  // with an error unless it left.
  asio::awaitable<void> EndUnbegun();
  // Ends a body the replica or the client broke off: after an error event where the stream
  // stopped between two, else cut.
  asio::awaitable<void> EndBrokenBody(BrokeOff why);
  BrokeOff WhyBrokeOff() const;
  // The connection back to its pool, when it can serve another request.
  void KeepConnection();

  // The outcome, recorded once, before the body's last bytes go out: a client that has its whole
  // response sees it in the counters.
  void Record();
  // The outcome as the observer saw the response.
  RequestOutcome OutcomeSeen() const;
  // The outcome counted for the client (its usage, its budget) and the router.
  void Account();
  // What Relay made of a response that did not come whole to the client.
  Relayed Unfinished() const;

  Gateway& gateway;
  HttpExchange& ex;
  const int shard;
  Upstream& up;
  RelayParser& parser;
  ModelState& model;
  const RouteDecision& decision;
  const std::string_view key;
  const bool generation;
  const int sequences;
  const bool name_by_reply;
  const double started;
  HangupWatch& watch;
  ClientSlot& client;
  TrafficLog::Turn* const traffic;

  UpstreamConnection& connection;
  std::string& head;  // the parser wrote the status line and fields
  const bool delegated;
  const bool head_request;
  ResponseObserver observer;
  std::optional<ReplyText> reply;  // with name_by_reply: hashed as it streams, not held
  std::vector<std::string> reply_tool_calls;
  std::optional<uint64_t> length;
  bool stream = false;  // an event stream, relayed event by event
  // The replica's status, or 400 for its context error reworded (its fault is the prompt's).
  int status_said;
  // A replica that stops sending for read_timeout_s: its connection is closed, the response cut.
  // (And a stream, to be cut if its replica is held stalled, as it would wait as long as the
  // hang; or ended with an error event if the gateway's drain runs out of time.)
  std::optional<ReplicaLossWatch::Waiting> quiet;
  double ttft = -1;
  bool upstream_ok = true;
  bool engine_answered = false;  // a stream's first bytes came (ModelState::NoteAnswered)
  bool ended_by_stop = false;    // the drain's end closed the replica's side (EndRelays)
  bool recorded = false;
  bool client_ok = true;   // every write to the client went out
  bool head_sent = false;  // (by the keepalives, while the first event was awaited)
  // A stream the replica broke off after its last event: what the client has is whole.
  bool ended_whole = false;
  EventTail tail;  // where a stream the replica breaks off stops
  RequestOutcome outcome;
  std::string_view first;   // the body's first piece, sent with the head
  std::string whole_error;  // an error read whole, to say it in the client's API's words
};

void Gateway::RelayRun::NameTheRoute() {
  if (gateway.config_.route_headers && delegated) {
    head += "x-warden-route: engine\r\n";
  } else if (gateway.config_.route_headers) {
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
}

void Gateway::RelayRun::WatchQuiet() {
  if (gateway.config_.read_timeout_s <= 0 && !parser.event_stream()) return;
  // A generation stream's head waits for its first event (AwaitFirstEvent): until it comes the
  // client has nothing, and a replica held for lost meanwhile gives the request up to another,
  // as one that has sent no head yet does (found by review: it waited stall_timeout_s).
  const bool holds_head = parser.event_stream() && !length && parser.status() / 100 == 2 &&
                          generation && !delegated && !parser.is_done();
  quiet.emplace(*gateway.loss_watches_[shard], model, replica(), connection.socket,
                gateway.ReadTimeout(), /*give_up_when_lost=*/holds_head);
  quiet->Pause();  // counted only while a read waits
}

void Gateway::RelayRun::ReadFailed() {
  upstream_ok = false;
  ended_by_stop = quiet && quiet->ended_by_stop();
  if (quiet && quiet->given_up() && engine_answered && quiet->lost_and_silent()) {
    spdlog::warn(
        "model {}: {} is out of service and sent nothing for {:g} s (stall_timeout_s): a "
        "response from it cut",
        model.name(), model.ReplicaUrl(replica()), gateway.config_.stall_timeout_s);
  } else if (quiet && quiet->given_up() && engine_answered) {  // (else Forward says it)
    spdlog::warn("model {}: {} is held stalled (stall_timeout_s): a response from it cut",
                 model.name(), model.ReplicaUrl(replica()));
  }
  if (quiet && quiet->timed_out()) {
    gateway.body_timeouts_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("model {}: {} sent nothing for {} s in a response (read_timeout_s): cut",
                 model.name(), model.ReplicaUrl(replica()), gateway.config_.read_timeout_s);
  }
}

std::string_view Gateway::RelayRun::PieceTaken() {
  const size_t got = parser.body_received();
  if (got == 0) return {};
  if (!engine_answered && parser.event_stream()) {
    engine_answered = true;
    model.NoteAnswered(replica());
  }
  const std::string_view piece(connection.body_piece.data(), got);
  if (observer.Feed(piece) && ttft < 0) {
    ttft = gateway.Now() - started;
    if (decision.request_id != 0)  // its prefill is done (dynamo)
      model.WithRouter([&](ModelRouter& r) { r.FirstToken(decision.request_id, gateway.Now()); });
  }
  return piece;
}

void Gateway::RelayRun::BeforeRead() {
  parser.SetBodyBuffer(connection.body_piece.data(), connection.body_piece.size());
  if (quiet) quiet->Progress();
}

std::optional<std::string_view> Gateway::RelayRun::AfterRead(boost::system::error_code ec) {
  if (quiet) quiet->Pause();
  if (ec == http::error::need_buffer) ec = {};
  if (ec) {
    ReadFailed();
    return std::string_view();
  }
  if (const std::string_view piece = PieceTaken(); !piece.empty()) return piece;
  if (parser.is_done()) return std::string_view();
  return std::nullopt;
}

asio::awaitable<std::string_view> Gateway::RelayRun::ReadPiece() {
  if (parser.is_done()) co_return std::string_view();
  for (;;) {
    BeforeRead();
    const boost::system::error_code ec =
        co_await ReadUpstream(connection, parser, ReadUntil::kProgress);
    if (std::optional<std::string_view> piece = AfterRead(ec)) co_return *piece;
  }
}

std::string_view Gateway::RelayRun::BufferedPiece() {
  while (!parser.is_done()) {
    parser.SetBodyBuffer(connection.body_piece.data(), connection.body_piece.size());
    const size_t buffered = connection.buffer.size();
    if (quiet) quiet->Progress();
    boost::system::error_code ec = ParseBuffered(connection.buffer, parser);
    if (quiet) quiet->Pause();
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      ReadFailed();
      return {};
    }
    if (const std::string_view piece = PieceTaken(); !piece.empty()) return piece;
    if (connection.buffer.size() == 0 || connection.buffer.size() == buffered)
      break;  // e.g. a chunk's size line without its data
  }
  return {};
}

void Gateway::RelayRun::Record() {
  if (recorded) return;
  recorded = true;
  observer.Finish();
  outcome = OutcomeSeen();
  Account();
}

RequestOutcome Gateway::RelayRun::OutcomeSeen() const {
  RequestOutcome o{observer.usage().prompt_tokens, observer.usage().cached_tokens, ttft,
                   observer.usage().output_tokens};
  // A stream cut before its final usage (the client stopped it, as Claude Code's Esc does)
  // tells the prompt's size at most, not what the cache gave: no split is counted for it,
  // unless its start said it (an Anthropic message_start with cache_read_input_tokens, as
  // Anthropic's API and recent vLLM send it: the prompt was read by then).
  if (observer.usage().preliminary && !StartSaidTheCacheSplit(observer.usage()))
    o.prompt_tokens = o.cached_tokens = -1;
  DropImplausibleUsage(&o, model.usage_bound(), sequences);
  if (!generation) {
    // Nothing ran: a stored response read back (GET /v1/responses/{id}) carries the usage of
    // the turn that made it, counted then (found by review), and a probe has no first token.
    o.prompt_tokens = o.cached_tokens = o.output_tokens = -1;
    o.ttft_s = -1;
  }
  o.sequences = sequences;
  o.anthropic_usage = observer.usage().anthropic;
  // Only a generation request's whole successful answer carries usage (not count_tokens', not
  // an error's, not other paths', not one cut short).
  o.usage_expected = generation && parser.status() / 100 == 2 && parser.is_done() && upstream_ok &&
                     !observer.error_event();
  o.cut_without_usage = generation && parser.status() / 100 == 2 && !o.usage_expected &&
                        o.prompt_tokens < 0 && !observer.error_event();
  if (o.usage_expected) o.duration_s = gateway.Now() - started;  // (its last bytes are in)
  // Not the client's leaving, nor a stream that had said it ended (its answer is whole).
  o.broke_off = !upstream_ok && !watch.hung_up() && !ended_whole && !ended_by_stop;
  o.error_answer = status_said >= 500 || status_said == 429;
  o.client_error_answer = status_said >= 400 && status_said < 500 && status_said != 429;
  if (o.prompt_tokens < 0 && o.usage_expected) {
    o.prompt_tokens_guess = static_cast<int>(std::min<long>(
        EstimateTokensWithInlineData(ex.request().body()), std::numeric_limits<int>::max()));
  }
  return o;
}

void Gateway::RelayRun::Account() {
  if (traffic && outcome.usage_expected) traffic->Answered(started + outcome.duration_s);
  if (gateway.access_log_.load(std::memory_order_relaxed)) {
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
                  gateway.Now());
  }
  client.Release();
  gateway.RecordEnded(model, decision, key, generation, name_by_reply,
                      name_by_reply ? reply->Hash(reply_tool_calls) : 0, outcome, parser.status(),
                      observer);
}

asio::awaitable<void> Gateway::RelayRun::ReadErrorToSay() {
  while (!parser.is_done() && upstream_ok && whole_error.size() <= kLargestError) {
    const std::string_view piece = co_await ReadPiece();
    whole_error.append(piece);
  }
  const bool whole = parser.is_done() && upstream_ok;
  // An encoded error (a proxy in front of the replica compresses: the client's Accept-Encoding
  // went on) is read decoded. It goes out decoded if it is said again, else as it came, as does
  // one in a coding the gateway does not know (left as it was).
  const std::string codings = whole ? HeadBodyCodings(head) : std::string();
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
    if (status_said == 400 && !delegated) WarnIfToolsRefused(model, decision.replica, whole_error);
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
}

asio::awaitable<bool> Gateway::RelayRun::AwaitFirstEvent() {
  // vLLM sends the head as it queues the request, and a replica that dies before the first event
  // (queued, or reading the prompt) has then given the client nothing, so the request can go to
  // another replica (Forward). Past stream_keepalive_s of waiting, though, the head goes out with
  // a keepalive, and another follows now and then: a client's timeout on the head (Claude
  // Code's, about 300 s) would otherwise send the request again (and a replica that fails it from
  // then on ends the stream with an error event, as after any event).
  std::optional<StreamKeepalive> keepalive;
  const double keepalive_s = gateway.config_.stream_keepalive_s;
  if (keepalive_s > 0) {
    // Counted from the request's arrival (admission may have held it), as a client counts.
    const auto after = [](double s) {
      return std::chrono::milliseconds(static_cast<int64_t>(std::lround(s * 1000)));
    };
    const auto every = std::min(after(keepalive_s), kKeepaliveInterval);
    const auto first_after = after(std::max(0.0, keepalive_s - (gateway.Now() - started)));
    // Once the head went out, the request can go nowhere else: a replica held for lost then does
    // not cut the stream (as one begun by its replica), unless it falls silent.
    keepalive.emplace(
        co_await asio::this_coro::executor, ex, head,
        StreamKeepalive::KeepaliveFor(TargetPath(ex.request().target())), first_after, every,
        [this] {
          if (quiet) quiet->GiveUpWhenLost(false);
        },
        // A client gone unseen by the watch (it reads nothing): the replica's request is ended
        // now, not when its first event finds the client gone.
        [this] { watch.ClientGone(); });
  }
  first = co_await ReadPiece();
  if (quiet) quiet->GiveUpWhenLost(false);  // a stream begun is relayed while it flows
  if (keepalive) {
    const StreamKeepalive::Result kept = co_await keepalive->Stop();
    head_sent = kept.head_sent;
    client_ok = kept.client_ok;
    if (head_sent) gateway.streams_kept_alive_.fetch_add(1, std::memory_order_relaxed);
  }
  if (ClosedUnfinished()) upstream_ok = false;
  co_return upstream_ok || head_sent || watch.hung_up() || ended_by_stop ||
      (quiet && quiet->timed_out());
}

asio::awaitable<void> Gateway::RelayRun::EndUnbegun() {
  // A first turn that ends with no answer hands its entry over (as RecordEnded does).
  const bool abandons_opening = name_by_reply && !decision.key_left_alone;
  const std::string_view turn_of = decision.key_left_alone ? std::string_view() : key;
  const bool client_left = watch.hung_up();  // (while its error was read)
  const double now = gateway.Now();
  model.WithRouter([&](ModelRouter& r) {
    if (client_left || ended_by_stop) {  // not the replica's failure
      delegated ? r.FinishDelegated({}, now) : r.Finish(decision.replica, {}, now);
    } else {
      delegated ? r.FailDelegated() : r.Fail(decision.replica, /*replica_down=*/false);
    }
    r.EndUnanswered(turn_of);
    if (abandons_opening) r.AbandonOpening(key, now);
  });
  if (client_left) {
    ex.Abandon();
    co_return;
  }
  watch.SetUpstream(nullptr);
  const ErrorShape shape = ErrorShapeFor(TargetPath(ex.request().target()));
  HttpResponse response;
  if (ended_by_stop) {
    response = gateway.Error(ex.request(), shape, 503,
                             "the gateway stopped (its drain's time ran out) before this request's "
                             "answer began; send it again",
                             ErrorCode::kGatewayStopping);
    response.set(http::field::retry_after, "1");
  } else {
    response =
        quiet && quiet->timed_out()
            ? gateway.Error(
                  ex.request(), shape, 504,
                  fmt::format("the replica sent no event in {} s (the gateway's read_timeout_s)",
                              gateway.config_.read_timeout_s))
            : gateway.Error(ex.request(), shape, 502,
                            "the replica's response broke off or was not valid HTTP");
    // The replica had the request (found by review: the 504 a hung vLLM's stream gets).
    response.set(kShouldRetry, "false");
  }
  client.Release();
  co_await ex.Respond(std::move(response));
}

BrokeOff Gateway::RelayRun::WhyBrokeOff() const {
  if (quiet && quiet->timed_out()) return BrokeOff::kQuiet;
  if (quiet && quiet->lost_and_silent()) return BrokeOff::kLostAndSilent;
  if (quiet && quiet->given_up()) return BrokeOff::kStalled;
  return BrokeOff::kClosed;
}

asio::awaitable<void> Gateway::RelayRun::EndBrokenBody(BrokeOff why) {
  // A stream the replica broke off between two events: ended properly, after an error event
  // unless it had said it ended.
  const bool can_end =
      !upstream_ok && client_ok && stream && !watch.hung_up() && tail.between_events();
  ended_whole = can_end && observer.stream_ended();
  std::string broken_event;
  if (can_end && !ended_whole) {
    const double silent_s =
        why == BrokeOff::kQuiet ? gateway.config_.read_timeout_s : gateway.config_.stall_timeout_s;
    broken_event =
        BrokenStreamEvent(TargetPath(ex.request().target()),
                          ended_by_stop ? std::string(kStoppedMidStream)
                                        : BrokeOffMessage(decision.replica, why, silent_s),
                          observer.response_id());
  }
  if (!ended_whole && broken_event.empty()) {
    ex.BreakOff();  // a body cut short: the client must see the connection end, and not whole
    co_return;
  }
  if (!broken_event.empty()) client_ok = co_await ex.SendBody(broken_event);
  if (client_ok) client_ok = co_await ex.EndBody();
  // A body with a length cannot be whole; a chunked one is, and its connection serves the
  // client's next request (closing it failed that request when it was already on its way).
  if (!ex.chunked()) ex.CloseAfterResponse();
}

void Gateway::RelayRun::KeepConnection() {
  // Not after a response without a body (to HEAD, a 204 or a 304): a replica or proxy that sends
  // one anyway, later than the liveness peek can see, would have it read as the next request's
  // answer (found by review). vLLM sends none of these to the requests that matter.
  const bool without_body = head_request || parser.status() == 204 || parser.status() == 304;
  if (!client_ok || !upstream_ok || !parser.keep_alive() || up.request_cut || without_body) return;
  UpstreamPool& pool = delegated ? *model.pools()[0] : *model.target(decision.replica).pool;
  pool.Release(shard, std::move(up.connection));
}

Gateway::Relayed Gateway::RelayRun::Unfinished() const {
  Relayed cut;
  cut.broke_off = outcome.broke_off;
  // A stream its client left once tokens had come: its usage if it had come (the client left at
  // the last write), else the prompt as the stream's start said it and the tokens so far (a
  // running count, or the token events), where the replica's counts are believable.
  if (!generation || !stream || parser.status() / 100 != 2 || !(watch.hung_up() || !client_ok) ||
      ex.cut_short() || observer.token_events() <= 0)
    return cut;
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
      .duration_s = gateway.Now() - started};
  return cut;
}

asio::awaitable<Gateway::Relayed> Gateway::Relay(HttpExchange& ex, int shard, Upstream up,
                                                 RelayParser& parser, ModelState& model,
                                                 const RouteDecision& decision,
                                                 std::string_view key, bool generation,
                                                 int sequences, bool name_by_reply, double started,
                                                 HangupWatch& watch, ClientSlot& client,
                                                 TrafficLog::Turn* traffic) {
  RelayRun run(*this, ex, shard, up, parser, model, decision, key, generation, sequences,
               name_by_reply, started, watch, client, traffic);
  run.NameTheRoute();
  run.WatchQuiet();
  // A body that came in with the head goes out with it, in one write; a stream whose first event
  // is not there yet gets its head at once.
  if (SaysErrorsInAnthropicsWords(ex.request(), parser.status(), run.length,
                                  parser.event_stream())) {
    co_await run.ReadErrorToSay();
  } else if (!parser.is_done() && run.connection.buffer.size() > 0) {
    run.first = run.BufferedPiece();
  }
  if (run.stream && generation && !run.delegated && run.first.empty() && !parser.is_done() &&
      run.upstream_ok) {
    const bool relayed_here = co_await run.AwaitFirstEvent();  // (not in the condition: GCC 12)
    if (!relayed_here) {
      watch.SetUpstream(nullptr);
      co_return Relayed{.outcome = {},
                        .dropped_unanswered = true,
                        .stalled = run.quiet && run.quiet->given_up(),
                        .lost_and_silent = run.quiet && run.quiet->lost_and_silent(),
                        .client_cut = {}};
    }
  }
  if (run.quiet) run.quiet->GiveUpWhenLost(false);  // (the first event came with the head)
  if (parser.is_done() && run.upstream_ok) run.Record();
  if (!run.upstream_ok && (watch.hung_up() || !run.head_sent)) {
    co_await run.EndUnbegun();
    co_return Relayed{};
  }
  if (parser.is_done()) run.Record();
  // No body and no framing fields (RFC 9110 §8.6, §15.3.5, §15.4.5): and the answer to a HEAD
  // whose length the replica did not say (a length of 0 would be a claim about the GET).
  const bool bodiless =
      parser.status() == 204 || parser.status() == 304 || (run.head_request && !run.length);
  bool& client_ok = run.client_ok;
  if (run.head_sent) {  // (the keepalives began the response)
    if (client_ok && !run.first.empty()) {
      if (const std::optional<bool> sent = ex.SendBodyAtOnce(run.first)) {
        client_ok = *sent;
      } else {  // (not in a conditional expression: GCC 12 miscompiles co_await there)
        client_ok = co_await ex.SendPending();
      }
    }
  } else if (std::optional<bool> started_at_once =
                 ex.StartBodyRawAtOnce(run.head, run.length, run.first, bodiless)) {
    client_ok = *started_at_once;  // (most answers: without a coroutine)
  } else {
    client_ok = co_await ex.SendPending();
  }
  if (run.stream) run.tail.Relayed(run.first);
  UpstreamConnection& connection = run.connection;
  while (client_ok && run.upstream_ok && !parser.is_done()) {
    std::optional<std::string_view> read;  // ReadPiece's work, inline: this runs for every event
    while (!read) {
      run.BeforeRead();
      if (connection.tls) {
        const boost::system::error_code ec =
            co_await ReadUpstream(connection, parser, ReadUntil::kProgress);
        read = run.AfterRead(ec);
        continue;
      }
      HttpReadStep<false> step(connection.buffer, parser, ReadUntil::kProgress);
      while (!step.Done()) {
        const auto bytes = co_await step.ReadSome(connection.socket);
        step.Took(bytes, connection.socket);
      }
      read = run.AfterRead(step.result());
    }
    const std::string_view piece = *read;
    if (run.ClosedUnfinished()) run.upstream_ok = false;
    if (parser.is_done()) run.Record();
    if (!piece.empty()) {
      if (std::optional<bool> sent = ex.SendBodyAtOnce(piece)) {
        client_ok = *sent;  // (most events: without a coroutine)
      } else {
        client_ok = co_await ex.SendPending();
      }
    }
    if (run.stream) run.tail.Relayed(piece);
  }
  const BrokeOff why = run.WhyBrokeOff();
  run.quiet.reset();  // before the connection may go back to the pool
  if (client_ok && run.upstream_ok) {
    if (std::optional<bool> ended = ex.EndBodyAtOnce()) {
      client_ok = *ended;
    } else {
      client_ok = co_await ex.EndBody();
    }
  } else {
    co_await run.EndBrokenBody(why);
  }
  run.Record();
  watch.SetUpstream(nullptr);  // from here the connection may serve another request
  run.KeepConnection();
  // Only a whole, successful response teaches admission what a request costs.
  if (!client_ok || !run.upstream_ok || !parser.is_done() || parser.status() / 100 != 2)
    co_return run.Unfinished();
  run.outcome.completed = true;
  Relayed relayed;
  relayed.outcome = run.outcome;
  if (run.stream) relayed.token_events = run.observer.token_events();
  co_return relayed;
}

}  // namespace warden
