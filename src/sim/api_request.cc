#include "sim/api_request.h"

#include <algorithm>
#include <boost/json.hpp>
#include <limits>

#include "core/chat_template.h"
#include "core/tokenizer.h"

namespace warden {
namespace json = boost::json;
namespace {

bool Fail(SimError* error, std::string message) {
  error->status = 400;
  error->type = "BadRequestError";
  error->message = std::move(message);
  return false;
}

// Tokens of one content value: a string, or an array of blocks/parts of any of the two APIs.
void TokenizeContent(const json::value& content, std::vector<TokenId>* out);

void TokenizeBlock(const json::object& block, std::vector<TokenId>* out) {
  const json::value* type = block.if_contains("type");
  const std::string_view t = type && type->is_string() ? std::string_view(type->get_string()) : "";
  if (t == "thinking" || t == "redacted_thinking")
    return;  // dropped from history, like Qwen's template
  if (const json::value* text = block.if_contains("text"); text && text->is_string()) {
    Tokenize(text->get_string(), out);
  } else if (t == "tool_use") {
    json::object call;
    if (const auto* name = block.if_contains("name")) call["name"] = *name;
    if (const auto* input = block.if_contains("input")) call["arguments"] = *input;
    Tokenize(json::serialize(call), out);
  } else if (t == "tool_result") {
    if (const json::value* content = block.if_contains("content")) TokenizeContent(*content, out);
  } else if (t == "image" || t == "image_url" || t == "document") {
    Tokenize("[image]", out);
  }
}

void TokenizeContent(const json::value& content, std::vector<TokenId>* out) {
  if (content.is_string()) {
    Tokenize(content.get_string(), out);
  } else if (content.is_array()) {
    for (const json::value& block : content.get_array()) {
      if (block.is_object()) TokenizeBlock(block.get_object(), out);
      if (block.is_string()) Tokenize(block.get_string(), out);
    }
  }
}

bool ParseRole(std::string_view name, Role* role) {
  if (name == "system" || name == "developer") {
    *role = Role::kSystem;
  } else if (name == "user") {
    *role = Role::kUser;
  } else if (name == "assistant") {
    *role = Role::kAssistant;
  } else if (name == "tool") {
    *role = Role::kTool;
  } else {
    return false;
  }
  return true;
}

// A role of Anthropic's Messages API. Claude Code 2.1.154 and later also sends "ctx" and "msg",
// which vLLM takes as "user" (vLLM issue #44000); tool results come as user content blocks.
bool ParseAnthropicRole(std::string_view name, Role* role) {
  if (name == "ctx" || name == "msg") {
    *role = Role::kUser;
    return true;
  }
  return name != "developer" && name != "tool" && ParseRole(name, role);
}

void TokenizeTools(const json::object& body, std::vector<TokenId>* out) {
  const json::value* tools = body.if_contains("tools");
  if (!tools || !tools->is_array()) return;
  for (const json::value& tool : tools->get_array()) Tokenize(json::serialize(tool), out);
}

// Whether a JSON value is true in Python's sense (vLLM's request checks run on the raw dict).
bool Truthy(const json::value& v) {
  if (v.is_bool()) return v.get_bool();
  if (v.is_string()) return !v.get_string().empty();
  if (v.is_object()) return !v.get_object().empty();
  if (v.is_array()) return !v.get_array().empty();
  if (v.is_int64()) return v.get_int64() != 0;
  if (v.is_uint64()) return v.get_uint64() != 0;
  if (v.is_double()) return v.get_double() != 0;
  return false;  // null
}

// OpenAI's chat and text completions (not Anthropic's API, nor the Responses API, whose vLLM
// requests have no such field): vLLM refuses stream_options on a request that does not stream.
bool CheckStreamOptions(const json::object& body, const SimRequest& request, SimError* error) {
  const json::value* opts = body.if_contains("stream_options");
  if (opts && Truthy(*opts) && !request.stream)
    return Fail(error, "Stream options can only be defined when `stream=True`.");
  return true;
}

bool ReadCommon(const json::object& body, SimRequest* request, SimError* error) {
  // Null is no model (OpenAI's APIs: the served one; Anthropic's says it is missing).
  if (const json::value* model = body.if_contains("model"); model && !model->is_null()) {
    if (!model->is_string()) return Fail(error, "'model' must be a string");
    request->model = model->get_string();
  }
  if (const json::value* stream = body.if_contains("stream"); stream && !stream->is_null()) {
    if (!stream->is_bool()) return Fail(error, "'stream' must be a boolean");
    request->stream = stream->get_bool();
  }
  for (const char* key : {"max_tokens", "max_completion_tokens", "max_output_tokens"}) {
    const json::value* v = body.if_contains(key);
    if (!v || v->is_null()) continue;
    if (!v->is_int64() && !v->is_uint64())
      return Fail(error, std::string("'") + key + "' must be an integer");
    // Beyond int64 (a uint64): as large as any limit, which the engine caps anyway.
    const int64_t n = v->is_uint64() ? (1 << 30) : v->get_int64();
    if (n < 1)
      return Fail(error, std::string("'") + key + "' must be at least 1, got " + std::to_string(n));
    request->max_tokens = static_cast<int>(std::min<int64_t>(n, 1 << 30));
  }
  if (const json::value* opts = body.if_contains("stream_options"); opts && opts->is_object()) {
    if (const json::value* u = opts->get_object().if_contains("include_usage"); u && u->is_bool()) {
      request->include_usage = u->get_bool();
    }
    if (const json::value* c = opts->get_object().if_contains("continuous_usage_stats");
        c && c->is_bool()) {
      request->continuous_usage = c->get_bool();
    }
  }
  if (const json::value* v = body.if_contains("ignore_eos"); v && v->is_bool()) {
    request->ignore_eos = v->get_bool();
  }
  return true;
}

// vLLM's `priority` (an int; null is its default, 0).
bool ReadPriority(const json::object& body, SimRequest* request, SimError* error) {
  const json::value* v = body.if_contains("priority");
  if (!v || v->is_null()) return true;
  if (!v->is_int64() || v->get_int64() < std::numeric_limits<int>::min() ||
      v->get_int64() > std::numeric_limits<int>::max()) {
    error->param = "priority";
    return Fail(error, "'priority' must be an integer");
  }
  request->priority = static_cast<int>(v->get_int64());
  return true;
}

// OpenAI's `n` (choices per request): vLLM samples that many; the simulator runs one sequence a
// request, so it refuses more rather than answer with fewer than asked for.
bool ReadChoiceCount(const json::object& body, SimError* error) {
  const json::value* n = body.if_contains("n");
  if (!n || n->is_null()) return true;
  if (!n->is_int64() && !n->is_uint64()) return Fail(error, "'n' must be an integer");
  if (n->is_int64() && n->get_int64() < 1) return Fail(error, "'n' must be at least 1");
  if (n->is_int64() && n->get_int64() == 1) return true;
  *error = {400, "BadRequestError",
            "n > 1 is not simulated: warden sim generates one choice per request (a vLLM "
            "replica would sample n); send n requests instead",
            "n"};
  return false;
}

bool RenderChat(const json::object& body, std::vector<TokenId>* out, SimError* error) {
  const json::value* messages = body.if_contains("messages");
  if (!messages || !messages->is_array()) return Fail(error, "'messages' must be an array");
  if (messages->get_array().empty()) return Fail(error, "'messages' must not be empty");
  bool tools_rendered = !body.contains("tools");
  for (const json::value& m : messages->get_array()) {
    if (!m.is_object()) return Fail(error, "each message must be an object");
    const json::object& msg = m.get_object();
    const json::value* role_v = msg.if_contains("role");
    Role role;
    if (!role_v || !role_v->is_string() || !ParseRole(role_v->get_string(), &role)) {
      return Fail(error, "each message needs a 'role' of system, user, assistant or tool");
    }
    if (!tools_rendered && role != Role::kSystem) {
      BeginMessage(Role::kSystem, out);
      TokenizeTools(body, out);
      EndMessage(out);
      tools_rendered = true;
    }
    BeginMessage(role, out);
    if (const json::value* content = msg.if_contains("content")) TokenizeContent(*content, out);
    if (const json::value* calls = msg.if_contains("tool_calls"); calls && calls->is_array()) {
      for (const json::value& call : calls->get_array()) Tokenize(json::serialize(call), out);
    }
    if (!tools_rendered) {
      TokenizeTools(body, out);
      tools_rendered = true;
    }
    EndMessage(out);
  }
  AppendGenerationPrompt(out);
  return true;
}

// Where a system text comes from: vLLM drops Claude Code's attribution block from an array of
// blocks and an inline system message, and keeps a `system` given as one string whole.
enum class SystemText { kField, kInlineMessage };

// A system message's text into `out`, without Claude Code's attribution block.
bool TokenizeSystemText(const json::value& text_or_blocks, std::string_view where, SystemText from,
                        std::vector<TokenId>* out, SimError* error) {
  if (text_or_blocks.is_string()) {
    if (from == SystemText::kField || !IsAttributionBlock(text_or_blocks.get_string()))
      Tokenize(text_or_blocks.get_string(), out);
    return true;
  }
  if (!text_or_blocks.is_array())
    return Fail(error, std::string(where) + ": must be a string or an array of text blocks");
  for (const json::value& block : text_or_blocks.get_array()) {
    const json::value* text = block.is_object() ? block.get_object().if_contains("text") : nullptr;
    if (!text || !text->is_string())
      return Fail(error, std::string(where) + ": each block needs a 'text'");
    if (IsAttributionBlock(text->get_string())) continue;
    Tokenize(text->get_string(), out);
  }
  return true;
}

bool IsSystemMessage(const json::value& m) {
  const json::object* msg = m.if_object();
  const json::value* role = msg ? msg->if_contains("role") : nullptr;
  return role && role->is_string() && role->get_string() == "system";
}

// Anthropic's Messages API. System messages inside "messages" (Claude Code sends one on most turns
// with its mid-conversation-system beta) are taken as vLLM takes them: those that lead "messages"
// join the system prompt, later ones are system turns where they stand, so that each turn's prompt
// still extends the last one's; or, with merge_inline_system, all of them join the system prompt.
bool RenderMessages(const json::object& body, std::vector<TokenId>* out, SimError* error,
                    const SimRenderOptions& render) {
  const json::value* messages = body.if_contains("messages");
  if (!messages) return Fail(error, "messages: Field required");
  if (!messages->is_array()) return Fail(error, "messages: Input should be a valid list");
  const json::array& list = messages->get_array();
  if (list.empty()) return Fail(error, "messages: at least one message is required");
  size_t leading = 0;
  while (leading < list.size() && IsSystemMessage(list[leading])) ++leading;
  const size_t merged = render.merge_inline_system ? list.size() : leading;
  const auto joins_system = [&](size_t i) { return i < merged && IsSystemMessage(list[i]); };
  const json::value* system = body.if_contains("system");
  bool any_joins = false;
  for (size_t i = 0; i < list.size() && !any_joins; ++i) any_joins = joins_system(i);
  if ((system && !system->is_null()) || body.contains("tools") || any_joins) {
    BeginMessage(Role::kSystem, out);
    if (system && !system->is_null() &&
        !TokenizeSystemText(*system, "system", SystemText::kField, out, error))
      return false;
    for (size_t i = 0; i < list.size(); ++i) {
      if (!joins_system(i)) continue;
      const json::value* content = list[i].get_object().if_contains("content");
      if (!content ||
          !TokenizeSystemText(*content, "messages", SystemText::kInlineMessage, out, error))
        return Fail(error, "messages: each message needs a 'content' string or array");
    }
    TokenizeTools(body, out);
    EndMessage(out);
  }
  for (size_t i = leading; i < list.size(); ++i) {
    if (joins_system(i)) continue;
    const json::object* msg = list[i].if_object();
    const json::value* role_v = msg ? msg->if_contains("role") : nullptr;
    Role role;
    if (!role_v || !role_v->is_string() || !ParseAnthropicRole(role_v->get_string(), &role)) {
      return Fail(error, "messages: each message needs a 'role' of user, assistant or system");
    }
    const json::value* content = msg->if_contains("content");
    if (!content || (!content->is_string() && !content->is_array())) {
      return Fail(error, "messages: each message needs a 'content' string or array");
    }
    BeginMessage(role, out);
    if (role == Role::kSystem) {
      if (!TokenizeSystemText(*content, "messages", SystemText::kInlineMessage, out, error))
        return false;
    } else {
      TokenizeContent(*content, out);
    }
    EndMessage(out);
  }
  AppendGenerationPrompt(out);
  return true;
}

// One item of a Responses API input: a message ({"role", "content"}, with or without
// "type":"message"), a function call, its output; reasoning items are dropped from the history.
// Other items (Codex's shell and custom tool calls, ...) are rendered as their output, or as their
// JSON, so that any client's history renders.
bool RenderResponsesItem(const json::object& item, std::vector<TokenId>* out, SimError* error) {
  const json::value* type_v = item.if_contains("type");
  const std::string_view type =
      type_v && type_v->is_string() ? std::string_view(type_v->get_string()) : "message";
  if (type == "reasoning") return true;
  if (type == "function_call") {
    json::object call;
    if (const auto* name = item.if_contains("name")) call["name"] = *name;
    if (const auto* arguments = item.if_contains("arguments")) call["arguments"] = *arguments;
    BeginMessage(Role::kAssistant, out);
    Tokenize(json::serialize(call), out);
    EndMessage(out);
    return true;
  }
  if (type != "message") {  // a tool's output (function_call_output and the like), or a call
    const json::value* output = item.if_contains("output");
    BeginMessage(output ? Role::kTool : Role::kAssistant, out);
    if (output) {
      TokenizeContent(*output, out);
    } else {
      Tokenize(json::serialize(item), out);
    }
    EndMessage(out);
    return true;
  }
  const json::value* role_v = item.if_contains("role");
  Role role;
  if (!role_v || !role_v->is_string() || !ParseRole(role_v->get_string(), &role) ||
      role == Role::kTool) {
    return Fail(error,
                "input: each message needs a 'role' of user, assistant, system or developer");
  }
  BeginMessage(role, out);
  if (const json::value* content = item.if_contains("content")) TokenizeContent(*content, out);
  EndMessage(out);
  return true;
}

// OpenAI's Responses API: "instructions" and the tools as the system message, then "input" (a
// string: one user message; or an array of items). A request that continues a stored response
// (`continues`) renders its input alone: the stored conversation, its system message included,
// goes before it.
bool RenderResponses(const json::object& body, bool continues, std::vector<TokenId>* out,
                     SimError* error) {
  const json::value* input = body.if_contains("input");
  if (!input || (!input->is_string() && !input->is_array()))
    return Fail(error, "'input' must be a string or an array of items");
  const json::value* instructions = body.if_contains("instructions");
  if (!continues && ((instructions && instructions->is_string()) || body.contains("tools"))) {
    BeginMessage(Role::kSystem, out);
    if (instructions && instructions->is_string()) Tokenize(instructions->get_string(), out);
    TokenizeTools(body, out);
    EndMessage(out);
  }
  if (input->is_string()) {
    BeginMessage(Role::kUser, out);
    Tokenize(input->get_string(), out);
    EndMessage(out);
  } else {
    if (input->get_array().empty()) return Fail(error, "'input' must not be empty");
    for (const json::value& item : input->get_array()) {
      if (!item.is_object()) return Fail(error, "input: each item must be an object");
      if (!RenderResponsesItem(item.get_object(), out, error)) return false;
    }
  }
  AppendGenerationPrompt(out);
  return true;
}

bool RenderCompletionPrompt(const json::object& body, std::vector<TokenId>* out, SimError* error) {
  const json::value* prompt = body.if_contains("prompt");
  if (!prompt) return Fail(error, "'prompt' is required");
  if (prompt->is_string()) {
    Tokenize(prompt->get_string(), out);
  } else if (prompt->is_array() && !prompt->get_array().empty() &&
             prompt->get_array()[0].is_number()) {
    for (const json::value& t : prompt->get_array()) {
      if (!t.is_int64() || t.get_int64() < 0)
        return Fail(error, "'prompt' token ids must be integers");
      out->push_back(static_cast<TokenId>(t.get_int64()));
    }
  } else if (prompt->is_array() && prompt->get_array().size() == 1 &&
             prompt->get_array()[0].is_string()) {
    Tokenize(prompt->get_array()[0].get_string(), out);
  } else if (prompt->is_array() && prompt->get_array().size() > 1 &&
             (prompt->get_array()[0].is_string() || prompt->get_array()[0].is_array())) {
    return Fail(error,
                "a batch of prompts is not simulated: warden sim runs one prompt per request (a "
                "vLLM replica would answer each); send one request per prompt");
  } else {
    return Fail(error, "'prompt' must be a string, one string in an array, or token ids");
  }
  if (out->empty()) return Fail(error, "'prompt' must not be empty");
  return true;
}

// The text of a message's content: a string, or its text blocks one after the other.
std::string ContentText(const json::value& content) {
  if (content.is_string()) return std::string(content.get_string());
  std::string text;
  if (!content.is_array()) return text;
  for (const json::value& block : content.get_array()) {
    const json::value* t = block.is_object() ? block.get_object().if_contains("text") : nullptr;
    if (t && t->is_string()) text.append(t->get_string());
  }
  return text;
}

// The name of a tool a request offers: Anthropic's {"name"}, OpenAI's {"function": {"name"}}.
const json::value* OfferedToolName(const json::value& tool) {
  const json::object* t = tool.if_object();
  if (!t) return nullptr;
  if (const json::value* function = t->if_contains("function"); function && function->is_object())
    return function->get_object().if_contains("name");
  return t->if_contains("name");
}

// The tool call the last user message asks for after kSimToolUseMarker
// (SimRequest::tool_use_name), if the request offers that tool. System (or OpenAI developer)
// messages after it (Claude Code's environment notes) do not count; an assistant message or a
// tool's result after it does: the call was made.
void ReadToolUseHook(const json::object& body, SimRequest* request) {
  const json::value* messages = body.if_contains("messages");
  if (!messages || !messages->is_array()) return;
  const json::array& list = messages->get_array();
  const auto instructions = [](const json::value& m) {
    const json::object* msg = m.if_object();
    const json::value* role = msg ? msg->if_contains("role") : nullptr;
    return IsSystemMessage(m) || (role && role->is_string() && role->get_string() == "developer");
  };
  auto it = list.rbegin();
  while (it != list.rend() && instructions(*it)) ++it;
  if (it == list.rend()) return;
  const json::object* last = it->if_object();
  const json::value* role = last ? last->if_contains("role") : nullptr;
  const json::value* content = last ? last->if_contains("content") : nullptr;
  if (!role || !role->is_string() || role->get_string() != "user" || !content) return;
  const std::string text = ContentText(*content);
  const size_t at = text.find(kSimToolUseMarker);
  if (at == std::string::npos) return;
  boost::system::error_code ec;
  json::stream_parser parser;
  parser.write_some(std::string_view(text).substr(at + kSimToolUseMarker.size()), ec);
  if (ec || !parser.done()) return;
  const json::value call = parser.release();
  const json::value* name = call.is_object() ? call.get_object().if_contains("name") : nullptr;
  const json::value* input = call.is_object() ? call.get_object().if_contains("input") : nullptr;
  if (!name || !name->is_string() || !input || !input->is_object()) return;
  // Only a tool the request offers: a side request quoting the marker (a title, a subagent
  // given the parent's words) is answered with text.
  const json::value* tools = body.if_contains("tools");
  const auto offered = [&](const json::value& tool) {
    const json::value* n = OfferedToolName(tool);
    return n && *n == *name;
  };
  if (!tools || !tools->is_array() ||
      std::none_of(tools->get_array().begin(), tools->get_array().end(), offered))
    return;
  request->tool_use_name = name->get_string();
  request->tool_use_input = json::serialize(*input);
}

// Whether the request offers tools with the choice left to the model, as vLLM reads it: OpenAI's
// tool_choice defaults to "auto" when tools are given; vLLM's Anthropic endpoint turns any
// request with tools into one with tool_choice "auto" unless it names "any" or a tool.
bool LeavesToolChoiceToTheModel(const json::object& body) {
  const json::value* tools = body.if_contains("tools");
  if (!tools || !tools->is_array() || tools->get_array().empty()) return false;
  const json::value* choice = body.if_contains("tool_choice");
  if (!choice || choice->is_null()) return true;
  if (choice->is_string()) return choice->get_string() == "auto";
  const json::value* type =
      choice->is_object() ? choice->get_object().if_contains("type") : nullptr;
  return type && type->is_string() && type->get_string() == "auto";
}

}  // namespace

bool ParseSimRequest(SimApi api, std::string_view body, SimRequest* request, SimError* error,
                     const SimRenderOptions& render) {
  boost::system::error_code ec;
  if (body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);  // Python's json reads past it
  json::value doc = json::parse(body, ec);
  if (ec) return Fail(error, "malformed JSON body: " + ec.message());
  if (!doc.is_object()) return Fail(error, "the body must be a JSON object");
  const json::object& obj = doc.get_object();
  if (!ReadCommon(obj, request, error)) return false;
  request->auto_tool_choice = LeavesToolChoiceToTheModel(obj);
  switch (api) {
    case SimApi::kChatCompletions:
      if (!CheckStreamOptions(obj, *request, error) || !ReadChoiceCount(obj, error) ||
          !ReadPriority(obj, request, error))
        return false;
      ReadToolUseHook(obj, request);
      return RenderChat(obj, &request->prompt, error);
    case SimApi::kCompletions:
      if (!CheckStreamOptions(obj, *request, error) || !ReadChoiceCount(obj, error) ||
          !ReadPriority(obj, request, error))
        return false;
      return RenderCompletionPrompt(obj, &request->prompt, error);
    case SimApi::kMessages:
      // Required by Anthropic's API, and so by vLLM's AnthropicMessagesRequest (a 400 without).
      for (const char* key : {"model", "max_tokens"}) {
        const json::value* v = obj.if_contains(key);
        if (!v || v->is_null()) return Fail(error, std::string("'") + key + "': field required");
      }
      ReadToolUseHook(obj, request);
      return RenderMessages(obj, &request->prompt, error, render);
    case SimApi::kCountTokens:
      return RenderMessages(obj, &request->prompt, error, render);
    case SimApi::kResponses:
      if (!ReadPriority(obj, request, error)) return false;
      if (const json::value* previous = obj.if_contains("previous_response_id");
          previous && previous->is_string()) {
        request->previous_response_id = previous->as_string();
      }
      if (const json::value* store = obj.if_contains("store"); store && store->is_bool())
        request->store = store->as_bool();
      return RenderResponses(obj, !request->previous_response_id.empty(), &request->prompt, error);
  }
  return Fail(error, "unsupported API");
}

}  // namespace warden
